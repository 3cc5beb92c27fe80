"""A lens readout of one prompt: every layer and position's top tokens under each lens, as a table, and in a
notebook as the readout grid (`LensReadout._repr_html_`); and `read_layers`, the probe's one way to unembed a lens's
readouts at many layers (the stages' hot path).

    from interp.lens import LogitLens, load_lens
    from interp_probes.jlens import readout
    readout.readout(model, {"logit": LogitLens(n), "jacobian": load_lens("run/lens.pt", model)}, "The capital of")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp import run_with_cache
from interp.sites import Site

READ_ELEMS = 1 << 25
"""Logits (rows x vocabulary) unembedded in one matrix product at most: 128 MB of float32, 682 rows of
smollm2-135m's 49k tokens. One product over many layers reads the unembedding once instead of once per layer
(a product of a few rows is memory-bound: 90 of 6 rows cost 7x one of 540 on the 2-core CPU here); the statistics
that follow allocate a few blocks of this size."""

Transport = Callable[[int, Tensor], Tensor]
"""(layer, residual (..., d_model)) -> residual in the target layer's basis (..., d_model)."""


@torch.no_grad()
def read_layers(model, transport: Transport, hs: Mapping[int, Float[Tensor, "*shape d_model"]],
                fn: Callable[[Float[Tensor, "layer *shape vocab"]], Mapping[str, Tensor]],
                shared: dict[int, dict[str, Tensor]] | None = None) -> dict[int, dict[str, Tensor]]:
    """`fn` of one lens's readout logits (float32) of hs[layer] at every layer of `hs`: layer -> fn's dict for that
    layer. The layers are unembedded in chunks of at most READ_ELEMS logits (`fn` sees (layers in the chunk, *shape,
    vocab) and returns tensors with that leading layer dimension). A transport that returns its input (the logit
    lens; the J-lens at its target and the tuned lens at the last layer) reads the residual as it is: with `shared`
    (a dict the caller passes to every lens of one residual set) that readout is computed once per layer and its
    result shared. Each row's numbers are those of a readout of that layer alone (the products are row by row)."""
    out: dict[int, dict[str, Tensor]] = {}
    todo: list[tuple[int, Tensor, bool]] = []
    for layer, h in hs.items():
        moved = transport(layer, h)
        same = moved is h
        if same and shared is not None and layer in shared:
            out[layer] = shared[layer]
        else:
            todo.append((layer, moved, same))
    if not todo:
        return out
    rows = max(1, todo[0][1][..., 0].numel())
    step = max(1, READ_ELEMS // (rows * model.info.d_vocab))
    for i in range(0, len(todo), step):
        part = todo[i:i + step]
        got = fn(model.unembed(torch.stack([m for _, m, _ in part])).float())
        for j, (layer, _, same) in enumerate(part):
            out[layer] = {k: v[j] for k, v in got.items()}
            if same and shared is not None:
                shared[layer] = out[layer]
    return out


@torch.no_grad()
def readout_frame(model, lenses: Mapping, text: str, top_k: int = 5) -> tuple[list[str], pd.DataFrame]:
    """(the prompt's tokens, rows (lens, layer, position, k, token, prob)): each lens's top_k readout tokens at every
    layer it reads and every position, with their probabilities."""
    enc = model.tokenize(text)
    tokens = model.to_str_tokens(enc["input_ids"][0])
    n_layers = model.info.n_layers
    sites = [Site("resid_post", layer) for layer in range(n_layers)]
    _, cache = run_with_cache(model, enc["input_ids"], enc["attention_mask"], sites)

    def top(logits: Tensor) -> dict[str, Tensor]:  # (layer, pos, vocab) -> (layer, pos, k)
        p, i = logits.softmax(-1).topk(top_k, dim=-1)
        return {"p": p, "i": i}

    shared: dict[int, dict[str, Tensor]] = {}
    blocks = []  # (lens, layer, prob (pos, k), id (pos, k))
    for name, lens in lenses.items():
        readable = list(lens.layers() if hasattr(lens, "layers") else range(n_layers))
        got = read_layers(model, lens.transport, {layer: cache[sites[layer]][0] for layer in readable}, top, shared)
        blocks += [(name, layer, got[layer]["p"].cpu(), got[layer]["i"].cpu()) for layer in readable]
    n_pos = len(tokens)
    each = n_pos * top_k
    ids = torch.cat([i.flatten() for *_, i in blocks]).tolist()
    word = {t: model.tokenizer.decode([t]) for t in set(ids)}
    return tokens, pd.DataFrame({
        "lens": np.repeat([b[0] for b in blocks], each).astype(object),
        "layer": np.repeat(np.array([b[1] for b in blocks], dtype=np.int64), each),
        "position": np.tile(np.repeat(np.arange(n_pos, dtype=np.int64), top_k), len(blocks)),
        "k": np.tile(np.arange(top_k, dtype=np.int64), n_pos * len(blocks)),
        "token": [word[t] for t in ids],
        "prob": torch.cat([p.flatten() for _, _, p, _ in blocks]).double().cpu().numpy(),
    })


@dataclass
class LensReadout:
    """One prompt read by several lenses; shows as the readout grid in a notebook."""

    tokens: list[str]
    grid: pd.DataFrame
    """Rows (lens, layer, position, k, token, prob)."""

    @property
    def lenses(self) -> list[str]:
        return list(dict.fromkeys(self.grid["lens"]))

    def top1(self, lens: str) -> pd.DataFrame:
        """Layer x position table of the lens's top-1 tokens."""
        g = self.grid[(self.grid["lens"] == lens) & (self.grid["k"] == 0)]
        return g.pivot(index="layer", columns="position", values="token")

    def _repr_html_(self) -> str:
        from interp.display import figure_html

        from .figures import readout_grid

        return "<div class=\"interp-lens-readout\">" + "".join(
            figure_html(readout_grid(self.grid, self.tokens, lens)) for lens in self.lenses) + "</div>"


def readout(model, lenses: Mapping, text: str, top_k: int = 5) -> LensReadout:
    """The readout of `text` by each lens in `lenses` (name -> an `interp.lens` lens)."""
    tokens, grid = readout_frame(model, lenses, text, top_k)
    return LensReadout(tokens, grid)
