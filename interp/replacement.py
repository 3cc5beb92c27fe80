"""The local replacement model's plumbing: hold the norm denominators and attention patterns of one prompt fixed.

Attribution graphs (Ameisen et al. 2025) freeze, at their values on the prompt, every normalisation denominator
and every attention pattern. The residual stream is then an affine function of what the token embeddings and
the MLPs write, so direct effects between nodes are exact gradients. `record` runs the prompt once and keeps
those values (and any sites asked for); `frozen` substitutes them in later forwards, expanded to their batch.
Which hook points they are is `interp.sites.linearizing_points`'s business.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .sites import Site, linearizing_points


@dataclass
class Frozen:
    """One prompt's frozen values (hook name -> (1, ...) tensor), its site activations and its logits."""

    values: dict[str, Tensor]
    sites: dict[Site, Tensor] = field(default_factory=dict)
    """Site -> (pos, ...) activation on the prompt (batch row 0)."""
    logits: Tensor | None = None
    """(pos, d_vocab) logits of the recording forward (eager attention where patterns are read)."""


@torch.no_grad()
def record(model: Any, ids: Tensor, sites: Sequence[Site] = ()) -> Frozen:
    """Run `ids` (1, pos) once; keep every linearizing value, the activations at `sites` and the logits."""
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"record: one prompt as (1, pos) ids, got {tuple(ids.shape)}")
    names = linearizing_points(model.hook_names())
    values: dict[str, Tensor] = {}
    acts: dict[Site, Tensor] = {}

    def keep(name):
        def hook(x):
            values[name] = x.detach().clone()
        return hook

    def keep_site(site):
        def hook(x):
            acts[site] = x.detach()[0].clone()
        return hook

    with model.hooks_by_name([(n, keep(n)) for n in names]), model.hooks([(s, keep_site(s)) for s in sites]):
        logits = model(ids)
    return Frozen(values=values, sites=acts, logits=logits.detach()[0])


@contextlib.contextmanager
def frozen(model: Any, fz: Frozen) -> Iterator[None]:
    """Forwards in this block use `fz`'s norm denominators and attention patterns (broadcast over their batch)."""

    def put(name, v):
        def hook(x):
            if x.shape[1:] != v.shape[1:]:
                raise ValueError(f"frozen: {name} has shape {tuple(x.shape)} here, {tuple(v.shape)} when recorded "
                                 "(same prompt length needed)")
            return v.to(x.dtype).expand(x.shape[0], *v.shape[1:])
        return hook

    with warnings.catch_warnings():
        # the bridge warns that an edited norm denominator leaves HF's fused path: that is the point here
        warnings.filterwarnings("ignore", message=".*hook_scale/hook_normalized.*")
        with model.hooks_by_name([(n, put(n, v)) for n, v in fz.values.items()]):
            yield


def mlp_swap(n_layers: int, out: Callable[[int, Tensor, Tensor], Tensor]
             ) -> tuple[list[tuple[Site, Callable]], dict[int, Tensor]]:
    """Hooks that put `out(layer, x, y)` in place of each layer's MLP output `y`, where `x` is that layer's MLP
    input on the same forward (what a transcoder reads); and the dict where those inputs land, layer -> x."""
    xs: dict[int, Tensor] = {}

    def read(layer):
        def hook(x):
            xs[layer] = x
        return hook

    def write(layer):
        def hook(y):
            return out(layer, xs[layer], y)
        return hook

    hooks: list[tuple[Site, Callable]] = []
    for layer in range(n_layers):
        hooks += [(Site("mlp_in", layer), read(layer)), (Site("mlp_out", layer), write(layer))]
    return hooks, xs


__all__ = ["Frozen", "frozen", "mlp_swap", "record"]
