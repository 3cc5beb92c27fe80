"""SAELens objects in and out: build an inference SAE from weights (`build_sae`), fold an input transform into
one, its metadata (hook name, model, BOS), and save / load / round-trip it as a SAELens directory (cfg.json,
sae_weights.safetensors, sparsity.safetensors)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from .._files import atomic_write
from ..errors import ConfigError
from ..sites import Site
from .calibrate import set_density
from .config import ARCHITECTURES
from .kernel import InputTransform, decode, encode, pre_acts, sae_architecture

# ============================================================================= SAELens objects


def build_sae(
    architecture: str,
    state: Mapping[str, Tensor],
    metadata: Mapping[str, Any] | None = None,
    apply_b_dec_to_input: bool = False,
    k: int | None = None,
    device: str | torch.device = "cpu",
):
    """A SAELens inference SAE of `architecture` from its own config class, holding `state`.

    state: W_enc (d_in, d_sae), b_enc (d_sae), W_dec (d_sae, d_in), b_dec (d_in), and
    threshold (d_sae) for jumprelu. normalize_activations is "none"; dtype float32.
    """
    from sae_lens import JumpReLUSAE, JumpReLUSAEConfig, StandardSAE, StandardSAEConfig, TopKSAE, TopKSAEConfig
    from sae_lens.saes.sae import SAEMetadata

    d_in, d_sae = state["W_enc"].shape
    common = dict(
        d_in=int(d_in),
        d_sae=int(d_sae),
        dtype="float32",
        device=str(device),
        apply_b_dec_to_input=apply_b_dec_to_input,
        normalize_activations="none",
        metadata=SAEMetadata(**dict(metadata or {})),
    )
    if architecture == "standard":
        sae = StandardSAE(StandardSAEConfig(**common))
    elif architecture == "jumprelu":
        sae = JumpReLUSAE(JumpReLUSAEConfig(**common))
    elif architecture == "topk":
        if k is None:
            raise ValueError("build_sae: topk needs k")
        sae = TopKSAE(TopKSAEConfig(k=int(k), rescale_acts_by_decoder_norm=False, **common))
    else:
        raise ConfigError("architecture", architecture, "one of " + ", ".join(ARCHITECTURES))
    sd = {name: t.detach().to(device=device, dtype=torch.float32).clone() for name, t in state.items()}
    missing = set(sae.state_dict()) - set(sd)
    if missing:
        raise ValueError(f"build_sae: state lacks {sorted(missing)} for {architecture}")
    sae.load_state_dict(sd, strict=True)
    sae.eval()
    for p in sae.parameters():
        p.requires_grad_(False)
    return sae


def sae_state(sae) -> dict[str, Tensor]:
    """The weights of a SAELens SAE as plain tensors (W_enc, b_enc, W_dec, b_dec[, threshold])."""
    return {k: v.detach().clone() for k, v in sae.state_dict().items()}


def fold_input_transform(sae, transform: InputTransform):
    """The SAE reading raw x that equals `sae` reading z = (x - shift) @ W (same codes, raw recon).

    pre = (z - b_dec*apply) W_enc + b_enc = x (W W_enc) + b_enc - (b_dec*apply + shift W) W_enc;
    x_hat = (a W_dec + b_dec) W_inv + shift.
    """
    sd = sae_state(sae)
    W = transform.W.to(sd["W_enc"])
    W_inv = transform.W_inv.to(sd["W_enc"])
    shift = torch.zeros(W.shape[0]).to(W) if transform.shift is None else transform.shift.to(W)
    in_offset = sd["b_dec"] * float(sae.cfg.apply_b_dec_to_input) + shift @ W
    out = dict(sd)
    out["W_enc"] = W @ sd["W_enc"]
    out["b_enc"] = sd["b_enc"] - in_offset @ sd["W_enc"]
    out["W_dec"] = sd["W_dec"] @ W_inv
    out["b_dec"] = sd["b_dec"] @ W_inv + shift
    k = getattr(sae.cfg, "k", None)
    return build_sae(sae_architecture(sae), out, sae.cfg.metadata.to_dict(), apply_b_dec_to_input=False, k=k,
                     device=sd["W_enc"].device)


# ============================================================================= metadata, save, load


def sae_metadata(model: Any, site: Site, context_size: int | None = None, dataset: str | None = None,
                 **extra: Any) -> dict[str, Any]:
    """SAELens metadata for an SAE on `model` at `site`: hook name (TransformerLens), model, context."""
    info = model.info
    meta: dict[str, Any] = {
        "hook_name": site.tl_name,
        "model_name": info.name,
        "interp_site": str(site),
        "interp_model_weights_sha256": info.weights_sha256,
        "prepend_bos": info.bos_id is not None,
    }
    canonical = _canonical_hook(model, site)
    if canonical and canonical != site.tl_name:
        meta["hook_name_canonical"] = canonical
    if context_size is not None:
        meta["context_size"] = int(context_size)
    if dataset is not None:
        meta["dataset_path"] = dataset
    meta.update(extra)
    return meta


def _canonical_hook(model: Any, site: Site) -> str | None:
    """The bridge's own name of the hook behind `site.tl_name`, when it aliases it."""
    bridge = getattr(model, "bridge", None)
    if bridge is None:
        return None
    try:
        hook = bridge.hook_dict.get(site.tl_name) if hasattr(bridge, "hook_dict") else None
    except Exception:  # noqa: BLE001 - a backend without a hook table has no canonical name
        return None
    return getattr(hook, "name", None) if hook is not None else None


def sae_site(sae) -> Site:
    """The Site an SAE reads, from its own config's hook name."""
    name = sae.cfg.metadata.hook_name
    if not name:
        raise ValueError("this SAE's config has no metadata.hook_name")
    return Site.from_tl_name(name)


SPARSITY_FILE = "sparsity.safetensors"
"""SAELens's name (sae_lens.constants.SPARSITY_FILENAME) for the per-latent log10 firing densities."""


def save_sae(sae, path: str | Path, density: Tensor | None = None) -> Path:
    """Save with SAELens's own save_model (cfg.json + sae_weights.safetensors) into `path`, plus
    sparsity.safetensors when the firing densities are known (given, or attached by train_sae / load_sae):
    {"sparsity": log10(density + 1e-10)} of shape (d_sae,), the tensor SAELens's trainer writes and its
    loaders read."""
    path = Path(path)
    sae.save_model(path)
    density = density if density is not None else getattr(sae, "interp_density", None)
    if density is not None:
        if density.shape != (sae.cfg.d_sae,):
            raise ValueError(f"save_sae: density of shape {tuple(density.shape)}, not ({sae.cfg.d_sae},)")
        save_density(path, density)
    return path


def save_density(path: str | Path, density: Float[Tensor, " d_sae"]) -> Path:
    """Write sparsity.safetensors ({"sparsity": log10(density + 1e-10)}) into the SAELens directory `path`, through
    a temporary sibling renamed into place, so a reader never sees half a file."""
    from safetensors.torch import save_file

    path = Path(path)
    log10 = torch.log10(density.detach().float().cpu() + 1e-10).contiguous()  # (d_sae,)
    atomic_write(path / SPARSITY_FILE, lambda tmp: save_file({"sparsity": log10}, str(tmp)))
    return path / SPARSITY_FILE


def load_density(path: str | Path) -> Tensor | None:
    """The firing densities (d_sae,) of the SAELens directory `path` from its sparsity.safetensors, if any."""
    from safetensors import safe_open

    p = Path(path) / SPARSITY_FILE
    if not p.is_file():
        return None
    with safe_open(str(p), framework="pt", device="cpu") as f:
        return (10.0 ** f.get_tensor("sparsity").float()).clamp_max(1.0)  # (d_sae,)


def load_sae(path: str | Path, device: str = "cpu"):
    """Any SAELens directory, through `sae_lens.SAE.load_from_disk`, in eval mode without grads (with its
    firing densities attached when it has a sparsity.safetensors). `interp.load_sae(spec)` also takes run
    directories and SAELens release ids."""
    from sae_lens import SAE

    sae = SAE.load_from_disk(str(path), device=device)
    sae.eval()
    for p in sae.parameters():
        p.requires_grad_(False)
    set_density(sae, load_density(path))
    return sae


def roundtrip_check(sae, x: Float[Tensor, "tok d_in"], path: str | Path) -> dict[str, Any]:
    """Reload the SAE saved at `path` and compare encodings and decodes on `x` with `sae`.

    max_rel_err = max(|a_loaded - a| / max|a|, |x_hat_loaded - x_hat| / max|x_hat|); supports
    must agree except where the pre-activation is within 1e-5 (relative) of the gate.
    """
    other = load_sae(path, device=str(sae.W_enc.device))
    a, b = encode(sae, x), encode(other, x)
    xa, xb = decode(sae, a), decode(other, b)
    err_a = float((a - b).abs().max() / a.abs().max().clamp_min(1e-12))
    err_x = float((xa - xb).abs().max() / xa.abs().max().clamp_min(1e-12))
    support_diff = (a != 0) != (b != 0)
    n_diff = int(support_diff.sum())
    if n_diff:
        pre = pre_acts(sae, x)
        gate = sae.threshold if sae_architecture(sae) == "jumprelu" else torch.zeros_like(pre[0])
        near = (pre - gate).abs() <= 1e-5 * pre.abs().max()
        n_diff = int((support_diff & ~near).sum())
    return {"max_rel_err": max(err_a, err_x), "enc_rel_err": err_a, "dec_rel_err": err_x, "support_mismatch": n_diff,
            "arch": sae_architecture(other), "hook_name": other.cfg.metadata.hook_name}


__all__ = [
    "SPARSITY_FILE",
    "build_sae",
    "fold_input_transform",
    "load_density",
    "load_sae",
    "roundtrip_check",
    "sae_metadata",
    "sae_site",
    "sae_state",
    "save_density",
    "save_sae",
]
