"""Sparsity after training: set the mean L0 to a target by one shared scalar (`calibrate_l0`), and the
per-latent firing densities an SAE carries (`firing_density`, `set_density`; written by `save_sae` as
SAELens's sparsity.safetensors)."""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from .kernel import active_from_pre, encode, pre_acts, sae_architecture


@torch.no_grad()
def calibrate_l0(sae, x: Float[Tensor, "tok d_in"], target: float, tol: float = 0.05, iters: int = 60):
    """Set the mean L0 of `sae` on `x` to target (within tol, relative) by one shared scalar.

    jumprelu: every threshold times s > 0; standard: delta added to every encoder bias.
    The pre-activations are computed once; each bisection step only recounts. The result is
    folded into the weights in place. Returns (value, mean L0 after). topk: nothing to do.
    """
    arch = sae_architecture(sae)
    pre = pre_acts(sae, x)
    if arch == "topk":
        return None, float(active_from_pre(sae, pre).sum(-1).float().mean())
    lo_ok, hi_ok = target * (1 - tol), target * (1 + tol)
    if arch == "jumprelu":
        theta = sae.threshold.detach().clamp_min(1e-12)
        pos = pre.clamp_min(0)

        def l0(log_s: float) -> float:
            return float((pos > theta * math.exp(log_s)).sum(-1).float().mean())

        lo, hi = -20.0, 20.0  # log s; L0 decreases with s
        best = 0.0
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            v = l0(mid)
            best = mid
            if lo_ok <= v <= hi_ok:
                break
            if v > target:
                lo = mid
            else:
                hi = mid
        s = math.exp(best)
        sae.threshold.mul_(s)
        return s, float((pos > sae.threshold).sum(-1).float().mean())
    # standard: L0 increases with delta
    span = float(pre.abs().max()) + 1.0
    lo, hi = -span, span
    best = 0.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        v = float((pre > -mid).sum(-1).float().mean())
        best = mid
        if lo_ok <= v <= hi_ok:
            break
        if v > target:
            hi = mid
        else:
            lo = mid
    sae.b_enc.add_(best)
    return best, float((pre + best > 0).sum(-1).float().mean())


def firing_density(sae, x: Float[Tensor, "tok d_in"]) -> Float[Tensor, " d_sae"]:
    """Fraction of the tokens `x` on which each latent fires (> 0)."""
    fired = torch.zeros(sae.cfg.d_sae, dtype=torch.float64)
    for i in range(0, x.shape[0], 8192):
        fired += (encode(sae, x[i : i + 8192]) > 0).sum(0).double().cpu()  # (d_sae,)
    return (fired / max(1, x.shape[0])).float()


def set_density(sae, density: Tensor | None) -> None:
    """Attach per-latent firing densities (d_sae,) to an SAE object; save_sae writes them as SAELens does."""
    sae.interp_density = None if density is None else density.detach().float().cpu()


__all__ = ["calibrate_l0", "firing_density", "set_density"]
