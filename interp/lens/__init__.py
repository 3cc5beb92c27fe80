"""Lenses: read a residual at any layer as next-token logits, with one interface (`Lens.readout`).

    from interp.lens import LogitLens, fit_tuned_lens, fit_jacobian_lens, save_lens, load_lens
    lens = fit_jacobian_lens(model, prompts)          # prompts: token ids, BOS as the tokenizer adds it
    logits = lens.readout(model, layer, resid)        # resid read at resid_post(layer)
    save_lens(lens, "lens.pt")                        # the reference jlens package's file, float32

- `LogitLens`: the residual as it is (the `logit_lens` probe's decode).
- `TunedLens` (Belrose et al. 2023): a learned affine map per layer, trained on the model's own output (KL).
- `JacobianLens` (Gurnee et al. 2026): the model's average Jacobian to the target layer, fitted with the reference
  estimator; merged, saved and loaded in the reference's format; cached per model, prompts and settings.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_LAZY = {
    "Lens": "base",
    "LogitLens": "logit",
    "TunedLens": "tuned",
    "fit_tuned_lens": "tuned",
    "JacobianLens": "jacobian",
    "fit_jacobian_lens": "jacobian",
    "merge_lenses": "jacobian",
    "prompts_sha256": "jacobian",
    "save_lens": "io",
    "load_lens": "io",
    "check_lens_for": "io",
    "obtain_jacobian_lens": "cache",
    "obtain_tuned_lens": "cache",
    "lens_cache_key": "cache",
    "resolve_lens_spec": "cache",
}
"""Public name -> its submodule: importing interp.lens imports no torch (`resolve_lens_spec` serves config
validation before the model loads)."""

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY)
