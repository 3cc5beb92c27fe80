"""Exactness of the local replacement model: its logits against the real model's, with and without error nodes."""

from __future__ import annotations

import torch
from torch import Tensor

from interp.replacement import frozen, mlp_swap
from interp.sae import Transcoders

from .graph import Prompt


@torch.no_grad()
def replacement_logits(model, tc: Transcoders, p: Prompt, with_errors: bool = True) -> Tensor:
    """(pos, vocab) logits of the local replacement model: frozen patterns and norm denominators, every MLP output
    replaced by the transcoders' estimate from the replacement's own MLP inputs (features at position 0 zeroed,
    as in the graph), plus the error nodes."""
    acts: dict[int, Tensor] = {}

    def write(layer, x, y):
        a = tc.encode(layer, x.float())
        a[:, 0] = 0
        acts[layer] = a
        est = tc.reconstruct(layer, {k: v for k, v in acts.items() if k <= layer}, x.float())
        if with_errors:
            est = est + p.errors[layer]
        return est.to(y.dtype)

    hooks, _ = mlp_swap(tc.n_layers, write)
    with frozen(model, p.fz), model.hooks(hooks):
        return model(p.ids.to(model.device))[0].float()


@torch.no_grad()
def exactness(model, tc: Transcoders, p: Prompt) -> dict[str, float]:
    """max |replacement - real| / max |real| over the prompt's logits, with error nodes (should be rounding) and
    without (how much the errors carry); the real logits are the model's own forward, unhooked."""
    real = model(p.ids.to(model.device))[0].float()
    scale = float(real.abs().max())
    out = {}
    for name, errs in (("replacement_rel_err", True), ("no_error_rel_err", False)):
        out[name] = float((replacement_logits(model, tc, p, errs) - real).abs().max()) / scale
    return out
