"""Stage 1: the samples as the model reads them, split select / cal / test, with their candidates' token ids."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from interp.context import RunContext

from . import GraphSawtoothConfig
from .attention import Tokenised, tokenise
from .graphs import Sample, read_rows, spans_json, synthetic_samples, user_samples
from .scoring import candidate_tokens

SPLITS = ("select", "cal", "test")


@dataclass(frozen=True)
class Prompts:
    """Every sample of the run, tokenised, by split."""

    items: list[Tokenised]
    """All samples in generation order (select, cal, test), tokenised."""
    splits: dict[str, list[Tokenised]]
    """split name (select | cal | test) -> its items, in order."""
    cand_ids: dict[int, list[list[int]]]
    """sample_id -> the token ids of each of its candidates."""

    @property
    def select(self) -> list[Tokenised]:
        return self.splits["select"]

    @property
    def cal(self) -> list[Tokenised]:
        return self.splits["cal"]

    @property
    def test(self) -> list[Tokenised]:
        return self.splits["test"]

    def candidates(self, items: list[Tokenised]) -> list[list[list[int]]]:
        """The candidates' token ids of each of `items`, in order."""
        return [self.cand_ids[t.sample.sample_id] for t in items]


def build_samples(cfg: GraphSawtoothConfig, rng: np.random.Generator) -> list[Sample]:
    """Synthetic graph tasks (or the user's JSONL rows), split select / cal / test."""
    if cfg.data is not None:
        return user_samples(read_rows(cfg.data), cfg, rng)
    return synthetic_samples(cfg, rng)


def prepare_prompts(model, cfg: GraphSawtoothConfig, ctx: RunContext) -> Prompts:
    """Samples from `ctx.rng`, tokenised in `cfg.prompt_format`, with candidate token ids; saves `samples`."""
    items = [tokenise(model, s, cfg.prompt_format) for s in build_samples(cfg, ctx.rng)]
    prompts = Prompts(items=items, splits={name: [t for t in items if t.sample.split == name] for name in SPLITS},
                      cand_ids={t.sample.sample_id: candidate_tokens(model, t.sample.candidates) for t in items})
    ctx.save_table("samples", samples_frame(model.tokenizer, items, cfg.n_roi_maps))
    return prompts


def samples_frame(tok, items: list[Tokenised], n_roi_maps: int) -> pd.DataFrame:
    """One row per sample; the first `n_roi_maps` selection samples (those with ROI maps) carry their ROI tokens."""
    rows, n_select = [], 0
    for t in items:
        s = t.sample
        shown = s.split == "select" and n_select < n_roi_maps
        n_select += s.split == "select"
        roi_tokens = [tok.decode([i]) for i in t.ids[t.roi[0] : t.roi[1] + 1]] if shown else []
        rows.append({"sample_id": s.sample_id, "split": s.split, "task": s.task, "n_nodes": s.n_nodes,
                     "n_edges": s.n_edges, "prompt": s.prompt, "answer": s.answer,
                     "candidates": json.dumps(s.candidates), "n_tokens": len(t.ids), "roi_start": t.roi[0],
                     "roi_end": t.roi[1], "spans": spans_json(t.spans), "roi_tokens": json.dumps(roi_tokens)})
    return pd.DataFrame(rows)
