"""The three lenses the probe compares, from `interp.lens`: the logit lens, the tuned lens (trained here on the
fitting text, cached) and the Jacobian lens (fitted with the reference estimator and cached, or loaded from `lens`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from interp import lens as L

from . import JLensConfig


def jacobian_lens(model, cfg: JLensConfig, prompts: Sequence[Tensor], progress: bool) -> tuple[L.JacobianLens, dict]:
    """The fitted Jacobian lens (from the cache when its model, prompts and settings match) or the one `cfg.lens`
    names (refused in one line when it was made for another model); info: {"seconds", "cached", ...}."""
    if cfg.lens != "fit":
        path = L.resolve_lens_spec(cfg.lens)
        lens = L.load_lens(path, model=model)
        return lens, {"cached": True, "fit_seconds": 0.0, "path": str(path), "given": True}
    return L.obtain_jacobian_lens(model, list(prompts), progress=progress, cache=cfg.cache, skip_first=cfg.skip_first,
                                  max_seq_len=cfg.fit_seq_len, target_layer=cfg.target_layer)


def tuned_lens(model, cfg: JLensConfig, windows: Sequence[Sequence[int]], progress: bool) -> tuple[L.TunedLens, dict]:
    """The tuned lens (Belrose et al. 2023), trained on `windows` for cfg.tuned_steps steps (cached)."""
    ids = torch.tensor([list(w) for w in windows], device=model.device)
    batches = [ids[i:i + 4] for i in range(0, len(ids), 4)]
    settings = {"steps": cfg.tuned_steps, "tokens_per_step": cfg.tuned_tokens_per_step, "seed": cfg.seed}
    return L.obtain_tuned_lens(model, batches, progress=progress, cache=cfg.cache, **settings)
