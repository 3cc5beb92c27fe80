"""The batched activation-patching sweep: many patched cells of several pairs in one forward pass.

A cell is (site kind, layer, head, position): the corrupted run with the clean activation put back at that
site (one head's z, or the whole d_model vector; at one position or, with position -1, at all of them).
Rows join the batch where they start to differ from the corrupted run: the forward starts with the one
corrupted prompt, and at ``resid_pre`` of layer l the hook appends a copy of that row for every cell of
layer l; the hook at the cell's own site then writes the clean activation into its row. Layers before l
therefore run once instead of once per cell (a full layer x position sweep costs about half the row-layers
of one forward per layer, in a few forward passes), and only the last position is unembedded. The causal
mask and the rotary tables are built for the one-row start and broadcast to the grown batch; a start of
several pairs would not broadcast (the bridge builds its mask per input row), so a forward serves one pair,
with up to `batch_size` of its cells. The nnsight backend keeps every module's batch as it entered (it
writes edits back in the traced shape), so there every row runs from the input (``grow=False``): the same
cells and numbers, at the cost of the layers before each cell's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.sites import Site

#: site kind of the config -> the core's Site kind
KIND = {"resid_pre": "resid_pre", "attn_out": "attn_out", "mlp_out": "mlp_out", "z": "attn_z",
        "resid_post": "resid_post"}


@dataclass(frozen=True)
class Cell:
    """One patch: `kind` at `layer`, head `head` (-1: the whole vector) at `pos` (-1: every position)."""

    kind: str
    layer: int
    head: int = -1
    pos: int = -1

    @property
    def site(self) -> Site:
        return Site(KIND[self.kind], self.layer)


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


def _writer(cells: list[Cell], rows: Tensor, clean: dict[Site, Tensor]) -> Callable[[Tensor], Tensor]:
    """Hook that writes each cell's clean activation into its row (x: (batch, pos, *units))."""
    site = cells[0].site
    src = clean[site][0]  # (pos, *units) of the one pair
    head = torch.tensor([c.head for c in cells])
    pos = torch.tensor([c.pos for c in cells])
    whole, one = pos < 0, pos >= 0

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        s = src.to(x)
        r, h, q = rows.to(x.device), head.to(x.device), pos.to(x.device)
        w, o = whole.to(x.device), one.to(x.device)
        if site.kind == "attn_z":  # x: (batch, pos, head, d_head); s: (pos, head, d_head)
            if w.any():
                x[r[w], :, h[w]] = s[:, h[w]].transpose(0, 1)  # (cells, pos, d_head)
            if o.any():
                x[r[o], q[o], h[o]] = s[q[o], h[o]]  # (cells, d_head)
        else:  # x: (batch, pos, d_model); s: (pos, d_model)
            if w.any():
                x[r[w]] = s
            if o.any():
                x[r[o], q[o]] = s[q[o]]
        return x

    return edit


def _grower(n_new: int) -> Callable[[Tensor], Tensor]:
    """Hook at resid_pre: append a copy of the corrupted row (row 0) for each cell starting here."""

    def grow(x: Tensor) -> Tensor:
        return torch.cat([x, x[:1].expand(n_new, *x.shape[1:])], 0)

    return grow


def run_cells(
    model,
    corrupt_ids: Int[Tensor, "1 pos"],
    clean: dict[Site, Tensor],
    cells: list[Cell],
    answer: int,
    wrong: int,
    metric: str,
    batch_size: int,
    progress: Callable | None = None,
    grow: bool | None = None,
) -> tuple[Float[Tensor, " cell"], int]:
    """The metric of every patched cell (in `cells` order) and the number of forward passes.

    `clean[site]` holds the pair's clean activations (1, pos, *units) at every site a cell names. `grow`: rows
    join at their layer (default: on the TransformerLens backend) or run from the input (nnsight).
    """
    grow = getattr(model, "backend", "tl") == "tl" if grow is None else grow
    if corrupt_ids.shape[0] != 1:
        raise ValueError(f"run_cells patches one pair per forward, got {corrupt_ids.shape[0]} rows")
    n_base = 1
    order = sorted(range(len(cells)), key=lambda i: (cells[i].layer, i))
    out = torch.empty(len(cells))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    for chunk in (progress(chunks) if progress else chunks):
        hooks = []
        row_of: dict[int, int] = {}
        next_row = n_base
        layers = sorted({cells[i].layer for i in chunk})
        for layer in layers:
            here = [i for i in chunk if cells[i].layer == layer]
            for i in here:
                row_of[i] = next_row
                next_row += 1
            start = _grower(len(here)) if grow else (lambda x: x)
            by_site: dict[Site, list[int]] = {}
            for i in here:
                by_site.setdefault(cells[i].site, []).append(i)
            at_start = by_site.pop(Site("resid_pre", layer), None)
            if at_start:
                write = _writer([cells[i] for i in at_start], torch.tensor([row_of[i] for i in at_start]), clean)
                hooks.append((Site("resid_pre", layer), (lambda g, w: lambda x: w(g(x)))(start, write)))
            elif grow:
                hooks.append((Site("resid_pre", layer), start))
            for site, idx in by_site.items():
                hooks.append((site, _writer([cells[i] for i in idx], torch.tensor([row_of[i] for i in idx]), clean)))
        ids = corrupt_ids
        if grow:
            hooks.append((Site("final"), lambda x: x[:, -1:]))  # (rows, 1, d_model): unembed the last position only
        else:
            ids = corrupt_ids.expand(next_row, -1)  # every row from the input
        with torch.no_grad(), model.hooks(hooks):
            logits = model.forward(ids, None)[:, -1:]  # (n_base + rows, 1, d_vocab)
        rows = torch.tensor([row_of[i] for i in chunk], device=logits.device)
        n = len(chunk)
        vals = metric_values(logits[rows, 0], torch.full((n,), answer, device=logits.device),
                             torch.full((n,), wrong, device=logits.device), metric)
        out[torch.tensor(chunk)] = vals.cpu()
    return out, len(chunks)
