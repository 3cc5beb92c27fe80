"""The batched activation-patching sweep: many patched cells of several pairs in one forward pass.

A cell is (pair, site kind, layer, head, position): the pair's corrupted run with its clean activation put back
at that site (one head's z, or the whole d_model vector; at one position or, with position -1, at all of them).
Rows join the batch where they start to differ from the corrupted runs. The forward starts with one row; at
``resid_pre`` of layer 0 that row is replaced by the corrupted residual streams of every pair of the group
(pairs of one token length), and at ``resid_pre`` of layer l the hook appends a copy of a pair's row for every
cell of that pair at layer l; the hook at the cell's own site then writes the pair's clean activation into the
cell's row. Layers before l therefore run once per pair instead of once per cell (a full layer x position
sweep of several pairs is about half the row-layers of one forward per layer, in a few forward passes), and
only the last position is unembedded. The causal mask and the rotary tables are built for the one-row start
and broadcast to the grown batch (the bridge builds its mask per input row, so the pairs join after the
embedding rather than at the input; every pair of a group has the same positions). The nnsight backend keeps
every module's batch as it entered (it writes edits back in the traced shape), so there every row runs from
the input (``grow=False``): the same cells and numbers, at the cost of the layers before each cell's own.
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
    src = clean[site][torch.tensor([c.pair for c in cells])]  # (cells, pos, *units): each cell's own pair
    head = torch.tensor([c.head for c in cells])
    pos = torch.tensor([c.pos for c in cells])
    whole, one = pos < 0, pos >= 0

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        s = src.to(x)
        r, h, q = rows.to(x.device), head.to(x.device), pos.to(x.device)
        w, o = whole.to(x.device), one.to(x.device)
        c = torch.arange(len(r), device=x.device)
        if site.kind == "attn_z":  # x: (batch, pos, head, d_head); s: (cells, pos, head, d_head)
            if w.any():
                x[r[w], :, h[w]] = s[c[w], :, h[w]]  # (cells, pos, d_head)
            if o.any():
                x[r[o], q[o], h[o]] = s[c[o], q[o], h[o]]  # (cells, d_head)
        else:  # x: (batch, pos, d_model); s: (cells, pos, d_model)
            if w.any():
                x[r[w]] = s[c[w]]
            if o.any():
                x[r[o], q[o]] = s[c[o], q[o]]
        return x

    return edit


def _grower(pairs: list[int]) -> Callable[[Tensor], Tensor]:
    """Hook at resid_pre: append a copy of its pair's corrupted row (rows 0..g-1) for each cell starting here."""
    idx = torch.tensor(pairs)

    def grow(x: Tensor) -> Tensor:
        return torch.cat([x, x[idx.to(x.device)]], 0)

    return grow


def _starter(start: Tensor) -> Callable[[Tensor], Tensor]:
    """Hook at resid_pre of layer 0: the one-row start becomes every pair's corrupted residual stream."""

    def begin(x: Tensor) -> Tensor:  # x: (1, pos, d_model) -> (g, pos, d_model)
        return start.to(x)

    return begin


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
    the input (nnsight).
    """
    grow = getattr(model, "backend", "tl") == "tl" if grow is None else grow
    g = corrupt_ids.shape[0]
    if grow and g > 1 and start is None:
        raise ValueError(f"run_cells grows a group of {g} pairs from their corrupted resid_pre of layer 0: pass start")
    answer = torch.as_tensor(answer).reshape(-1).expand(g)
    wrong = torch.as_tensor(wrong).reshape(-1).expand(g)
    order = sorted(range(len(cells)), key=lambda i: (cells[i].layer, i))
    out = torch.empty(len(cells))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    for chunk in (progress(chunks) if progress else chunks):
        hooks = []
        row_of: dict[int, int] = {}
        next_row = g  # rows 0..g-1: the pairs' corrupted runs
        layers = sorted({cells[i].layer for i in chunk} | ({0} if grow and g > 1 else set()))
        for layer in layers:
            here = [i for i in chunk if cells[i].layer == layer]
            for i in here:
                row_of[i] = next_row
                next_row += 1
            steps = []
            if grow and g > 1 and layer == 0:
                steps.append(_starter(start))
            if grow and here:
                steps.append(_grower([cells[i].pair for i in here]))
            by_site: dict[Site, list[int]] = {}
            for i in here:
                by_site.setdefault(cells[i].site, []).append(i)
            at_start = by_site.pop(Site("resid_pre", layer), None)
            if at_start:
                steps.append(_writer([cells[i] for i in at_start], torch.tensor([row_of[i] for i in at_start]), clean))
            if steps:
                hooks.append((Site("resid_pre", layer), _chain(steps)))
            for site, idx in by_site.items():
                hooks.append((site, _writer([cells[i] for i in idx], torch.tensor([row_of[i] for i in idx]), clean)))
        pair_of_row = torch.tensor(list(range(g)) + [cells[i].pair for i in sorted(row_of, key=row_of.get)])
        with torch.no_grad(), model.hooks(hooks):
            if grow:  # one row in; the pairs join after the embedding; only the last position is unembedded
                last = model.forward_until(corrupt_ids[:1], Site("resid_post", model.info.n_layers - 1), None)
                logits = model.unembed(last, last_only=True)  # (g + rows, 1, d_vocab)
            else:
                ids = corrupt_ids[pair_of_row.to(corrupt_ids.device)]  # every row from the input
                logits = model.forward(ids, None)[:, -1:]  # (g + rows, 1, d_vocab)
        rows = torch.tensor([row_of[i] for i in chunk])
        pairs = pair_of_row[rows]
        vals = metric_values(logits[rows.to(logits.device), 0], answer[pairs].to(logits.device),
                             wrong[pairs].to(logits.device), metric)
        out[torch.tensor(chunk)] = vals.cpu()
    return out, len(chunks)


def _chain(steps: list[Callable[[Tensor], Tensor]]) -> Callable[[Tensor], Tensor]:
    """One hook applying `steps` in order."""

    def hook(x: Tensor) -> Tensor:
        for step in steps:
            x = step(x)
        return x

    return hook
