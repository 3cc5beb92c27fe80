"""The batched activation-patching sweep: many patched cells of several pairs in a few forward passes.

A cell is (pair, site kind, layer, head, position): the pair's corrupted run with its clean activation put back
at that site (one head's z, or the whole d_model vector; at one position or, with position -1, at all of them).
The batching (rows that join at their own layer, the one-row start, nnsight's rows from the input) is the core's
`interp.patch_batched`; this module names the cells in the config's site kinds and reads the metric.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import PatchCell, patch_batched
from interp.sites import Site

#: site kind of the config -> the core's Site kind
KIND = {"resid_pre": "resid_pre", "attn_out": "attn_out", "mlp_out": "mlp_out", "z": "attn_z",
        "resid_post": "resid_post"}


@dataclass(frozen=True)
class Cell:
    """One patch of pair `pair`: `kind` at `layer`, head `head` (-1: the whole vector) at `pos` (-1: every
    position)."""

    kind: str
    layer: int
    head: int = -1
    pos: int = -1
    pair: int = 0
    """Row of the pair in the forward's group (an index into `run_cells`' corrupt_ids)."""

    @property
    def site(self) -> Site:
        return Site(KIND[self.kind], self.layer)

    @property
    def patch(self) -> PatchCell:
        return PatchCell(self.site, pair=self.pair, pos=self.pos, head=self.head)


def metric_values(
    last: Float[Tensor, "row d_vocab"], answer: Int[Tensor, " row"], wrong: Int[Tensor, " row"], metric: str
) -> Float[Tensor, " row"]:
    """The metric of each row from its last-position logits."""
    last = last.float()
    if metric == "logit_diff":
        return last.gather(-1, answer[:, None])[:, 0] - last.gather(-1, wrong[:, None])[:, 0]
    logp = last.log_softmax(-1).gather(-1, answer[:, None])[:, 0]
    if metric == "prob":
        return logp.exp()
    if metric == "loss":
        return -logp
    raise ValueError(f"metric {metric!r}")


def run_cells(
    model,
    corrupt_ids: Int[Tensor, "g pos"],
    clean: dict[Site, Tensor],
    cells: list[Cell],
    answer: int | Int[Tensor, " g"],
    wrong: int | Int[Tensor, " g"],
    metric: str,
    batch_size: int,
    progress: Callable | None = None,
    grow: bool | None = None,
    start: Float[Tensor, "g pos d_model"] | None = None,
) -> tuple[Float[Tensor, " cell"], int]:
    """The metric of every patched cell (in `cells` order) and the number of forward passes.

    `corrupt_ids` holds the corrupted prompts of a group of pairs of one token length, `clean[site]` their clean
    activations (g, pos, *units) at every site a cell names, `answer` / `wrong` their metric tokens; a cell's
    `pair` indexes the group. `start`: the group's corrupted resid_pre of layer 0, needed to grow a group of
    more than one pair. `grow`: rows join at their layer (default: on the TransformerLens backend) or run from
    the input (nnsight); see `interp.patch_batched`.
    """
    g = corrupt_ids.shape[0]
    answer = torch.as_tensor(answer).reshape(-1).expand(g)
    wrong = torch.as_tensor(wrong).reshape(-1).expand(g)

    def reduce(last: Tensor, pair: Tensor) -> Tensor:  # last: (rows, d_vocab); pair: (rows,)
        return metric_values(last, answer[pair].to(last.device), wrong[pair].to(last.device), metric)

    return patch_batched(model, corrupt_ids, clean, [c.patch for c in cells], reduce, batch_size,
                         progress=progress, grow=grow, start=start)
