"""Stage 7: the controls of SLASH on S: non-graph perplexity and the structure of the layers after S."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from interp.context import RunContext
from interp.data import load_texts, token_windows
from interp.generate import perplexity

from . import GraphSawtoothConfig
from .attention import Tokenised, batches, capture_batch
from .measure import Structure
from .slash import Slash
from .structure import score_sample


@dataclass(frozen=True)
class Controls:
    """Non-graph perplexity with and without SLASH on S, and the concentration of the layers after max(S)."""

    ppl_base: float
    """Perplexity of the held-out non-graph text, unmodified model."""
    ppl_slash: float
    """The same with SLASH on S at `gamma` (no padding: the sink is column 0 plus the offsets)."""
    gamma: float
    """The gamma of the controls: the calibrated one, or the paper's when calibration picked 1."""
    later_layers: list[int]
    """The layers after max(S)."""
    later_base: float | None
    """Mean concentration of the later layers without the edit (None when S ends at the last layer)."""
    later_slash: float | None
    """The same with SLASH on S."""
    next_maps: dict[int, np.ndarray]
    """Selection sample (< n_roi_maps) -> head-mean ROI map of the layer after S, under SLASH."""
    slashes: list[Slash]
    """The edits of the controls, for the invariant table."""

    def metrics(self) -> dict[str, Any]:
        return {"ppl_base_nongraph": self.ppl_base, "ppl_ratio_nongraph": self.ppl_slash / self.ppl_base,
                "gamma_controls": self.gamma,
                "later_layer_concentration_delta": (None if self.later_base is None
                                                    else self.later_slash - self.later_base)}


def run_controls(model, items: list[Tokenised], structure: Structure, gamma: float, cfg: GraphSawtoothConfig,
                 ctx: RunContext) -> Controls:
    """Non-graph perplexity with SLASH on S, and the concentration of the layers after max(S) on the selection
    prompts. Saves `controls` and `roi_maps` (the structure's ROI maps with the layer after S under SLASH)."""
    S = structure.selection.S
    texts = load_texts(cfg.ppl_data, seed=cfg.seed)
    bos = model.info.bos_id  # BOS follows the tokenizer (Gemma): its <bos> is the sink, as in the graph prompts
    chunks = token_windows(model.tokenizer, texts, cfg.ppl_tokens // cfg.ppl_len, cfg.ppl_len + (bos is not None), bos)
    # full logits here: keep a batch's (batch, len, vocab) float32 logits near 512 MB (Gemma: 262k vocab)
    bs = max(1, min(cfg.batch_size, 2**27 // (cfg.ppl_len * model.info.d_vocab)))
    ppl_base = perplexity(model, chunks, batch_size=bs)
    sl_ppl = Slash(S, gamma, cfg.sink_offsets)  # no padding: the sink is column 0 (+ offsets)
    with model.hooks(sl_ppl.pairs()):
        ppl_slash = perplexity(model, chunks, batch_size=bs)
    later = list(range(max(S) + 1, model.info.n_layers))
    slashes, next_maps, later_base, later_slash = [sl_ppl], {}, None, None
    if later:
        sl = Slash(S, gamma, cfg.sink_offsets)
        conc = np.zeros((len(items), len(later)))
        for idx in ctx.tqdm(batches(len(items), cfg.batch_size), desc="downstream"):
            caps = capture_batch(model, [items[i] for i in idx], later, cfg.sink_offsets, slash=sl, entropy=False)
            for i, cap in zip(idx, caps):
                roi = cap.roi_heads.mean(1)  # (later layer, R, R)
                conc[i] = score_sample(roi, items[i].spans, [], cfg.max_shift, cfg.binarize)["concentration"]
                if i < cfg.n_roi_maps:
                    next_maps[i] = roi[0].astype(np.float32)
        later_base = float(structure.layers.concentration[later].mean())
        later_slash = float(conc.mean())
        slashes.append(sl)
    out = Controls(ppl_base=ppl_base, ppl_slash=ppl_slash, gamma=gamma, later_layers=later, later_base=later_base,
                   later_slash=later_slash, next_maps=next_maps, slashes=slashes)
    _save(ctx, out, structure, items, cfg.n_roi_maps)
    return out


def _save(ctx: RunContext, c: Controls, structure: Structure, items: list[Tokenised], n_roi_maps: int) -> None:
    ctx.save_table("controls", pd.DataFrame([{
        "ppl_base": c.ppl_base, "ppl_slash": c.ppl_slash, "gamma": c.gamma,
        "later_layers": ",".join(map(str, c.later_layers)),
        "later_layer_concentration_base": c.later_base, "later_layer_concentration_slash": c.later_slash,
    }]))
    maps = {}
    for i, m in structure.samples.maps.items():
        for key, arr in m.items():
            maps[f"{key}_{i}"] = np.ascontiguousarray(arr)
        if i in c.next_maps:
            maps[f"slash_next_{i}"] = c.next_maps[i]
    if maps:
        meta = {"layer_after_S": str(max(structure.selection.S) + 1) if c.later_layers else "",
                "sample_ids": ",".join(str(t.sample.sample_id) for t in items[:n_roi_maps])}
        ctx.save_tensors("roi_maps", maps, metadata=meta)

