"""A lens readout of one prompt: every layer and position's top tokens under each lens, as a table, and in a
notebook as the readout grid (`LensReadout._repr_html_`).

    from interp.lens import LogitLens, load_lens
    from interp_probes.jlens import readout
    readout.readout(model, {"logit": LogitLens(n), "jacobian": load_lens("run/lens.pt", model)}, "The capital of")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
import torch

from interp import run_with_cache
from interp.sites import Site


@torch.no_grad()
def readout_frame(model, lenses: Mapping, text: str, top_k: int = 5) -> tuple[list[str], pd.DataFrame]:
    """(the prompt's tokens, rows (lens, layer, position, k, token, prob)): each lens's top_k readout tokens at every
    layer it reads and every position, with their probabilities."""
    enc = model.tokenize(text)
    tokens = model.to_str_tokens(enc["input_ids"][0])
    n_layers = model.info.n_layers
    sites = [Site("resid_post", layer) for layer in range(n_layers)]
    _, cache = run_with_cache(model, enc["input_ids"], enc["attention_mask"], sites)
    rows = []
    for name, lens in lenses.items():
        readable = lens.layers() if hasattr(lens, "layers") else range(n_layers)
        for layer in readable:
            probs = lens.readout(model, layer, cache[sites[layer]][0]).float().softmax(-1)  # (pos, vocab)
            p, i = probs.topk(top_k, dim=-1)
            p, i = p.cpu(), i.cpu()
            for pos in range(len(tokens)):
                for k in range(top_k):
                    rows.append({"lens": name, "layer": layer, "position": pos, "k": k,
                                 "token": model.tokenizer.decode([int(i[pos, k])]), "prob": float(p[pos, k])})
    return tokens, pd.DataFrame(rows)


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
