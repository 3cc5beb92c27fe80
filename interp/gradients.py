"""Gradients in the core: activations at any sites and the gradient of a scalar metric with respect to
each, from one forward and one backward pass.

    out = capture_grads(model, enc["input_ids"], enc["attention_mask"],
                        [Site("resid_pre", 3), Site("attn_z", 5)],
                        metric=lambda logits: logits[:, -1, good].sum() - logits[:, -1, bad].sum())
    out.value                       # the metric, a 0-d tensor
    out.acts[site], out.grads[site] # (batch, pos, *units), the same layout as capture and interventions

The model's weights stay frozen (no parameter gradients are made): the embedding's output becomes a leaf
that requires a gradient, so every activation after it is in the graph; each hooked site hands the forward
its own copy of the activation (a hook may see a reshaped view of what flows on), and
`torch.autograd.grad` gives d metric / d activation at each site, summed over every path from that site to
the metric (the total derivative, as TransformerLens's backward hooks give it). Rows of a batch do not mix,
so a metric that sums per-row terms gives each row its own gradient.

Both backends serve it: the TransformerLens bridge, and nnsight (local execution: its traced tensors are
real tensors here). Remote nnsight execution (NDIF) is refused by name: the gradient would have to be taken
inside the remote trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from .errors import InterpError
from .sites import Site, token_first

Metric = Callable[[Float[Tensor, "batch pos d_vocab"]], Float[Tensor, ""]]


@dataclass
class GradCapture:
    """What one forward and backward pass recorded (all detached)."""

    value: Float[Tensor, ""]
    """The metric of the forward pass."""
    logits: Float[Tensor, "batch pos d_vocab"]
    """The forward's logits."""
    acts: dict[Site, Tensor]
    """Activation at each site, (batch, pos, *units)."""
    grads: dict[Site, Tensor]
    """d metric / d activation at each site, shaped like its activation."""


def capture_grads(
    model,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    sites: Sequence[Site],
    metric: Metric,
) -> GradCapture:
    """Activations at `sites` and the gradient of `metric(logits)` (a scalar) with respect to each.

    One forward with the hooks, one `torch.autograd.grad`; parameters get no gradient. A site the metric
    does not depend on (e.g. a later position's only path is cut) gets a zero gradient.
    """
    if getattr(model, "remote", False):
        raise InterpError("gradient capture needs local execution: remote nnsight (NDIF) runs are not served; "
                          "use remote=false")
    sites = list(dict.fromkeys(sites))
    held: dict[Site, Tensor] = {}
    start = Site("embed")

    def begin(act: Tensor) -> Tensor:
        # the graph starts at the embedding: every later activation carries a gradient (weights stay frozen)
        leaf = act.detach().requires_grad_(True)
        if start in sites:
            held[start] = leaf
        return leaf

    def hook_for(site: Site):
        def hook(act: Tensor) -> Tensor | None:
            if site.is_pattern:  # used as it is by the attention's weighted sum on both backends
                held[site] = act
                return None
            # a hook may see a reshaped view of what flows on (heads split): return our own tensor so that
            # the forward continues from it and its gradient is the one of the path
            held[site] = act.clone()
            return held[site]

        return hook

    pairs = [(start, begin)] + [(s, hook_for(s)) for s in sites if s != start]
    with torch.enable_grad(), model.hooks(pairs):
        logits = model.forward(input_ids, attention_mask)
        missing = [str(s) for s in sites if s not in held]
        if missing:
            raise InterpError(f"gradient capture: the forward never reached site(s) {', '.join(missing)}")
        value = metric(logits)
        if value.dim() != 0:
            raise InterpError(f"gradient capture needs a scalar metric, got shape {tuple(value.shape)}")
        if not value.requires_grad:
            raise InterpError("gradient capture: the metric does not depend on any captured site")
        grads = torch.autograd.grad(value, [held[s] for s in sites], allow_unused=True)
    acts_out: dict[Site, Tensor] = {}
    grads_out: dict[Site, Tensor] = {}
    for s, g in zip(sites, grads):
        a = held[s].detach()
        acts_out[s] = token_first(s, a)  # (batch, pos, *units)
        grads_out[s] = token_first(s, torch.zeros_like(a) if g is None else g.detach())
    return GradCapture(value.detach(), logits.detach(), acts_out, grads_out)
