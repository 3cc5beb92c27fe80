"""self_interp's run state: what one layer measured (`LayerResult`) and the fixed parts of a run (`Experiment`),
shared by the stages in probe.py, artifacts.py and summary.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp.context import RunContext
from interp.precision import autocast, autocast_dtype

from . import SelfInterpConfig
from .adapters import Adapter
from .evaluate import Retriever
from .inject import PrefixCache, Template
from .topics import Topic
from .train import Pairs, TrainSettings
from .vectors import median_embedding_norm


@dataclass
class LayerResult:
    """Everything measured at one layer."""

    layer: int
    s_star: float
    scales: list[float]
    scale_losses: list[float]
    adapters: dict[str, Adapter] = field(default_factory=dict)
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    generations: pd.DataFrame = field(default_factory=pd.DataFrame)
    recall: pd.DataFrame = field(default_factory=pd.DataFrame)
    scale_recall: dict[float, tuple[float, float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    vectors: Tensor | None = None
    """The vectors the adapters were fitted on (kept for the prefix-cache check)."""
    embed: tuple[np.ndarray, Tensor] | None = None
    """(topic ids, centred embedding rows) of the positive control, when run."""

    @staticmethod
    def generations_so_far(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def r(self, variant: str, k: int, split: str = "heldout") -> float:
        f = self.recall
        hit = f[(f.variant == variant) & (f.k == k) & (f.split == split)] if len(f) else f
        return float(hit.recall.iloc[0]) if len(hit) else math.nan

    def scale_frame(self) -> pd.DataFrame:
        return pd.DataFrame({
            "layer": self.layer,
            "scale": self.scales,
            "val_loss": self.scale_losses,
            "recall_at_1": [self.scale_recall.get(s, (math.nan, math.nan))[0] for s in self.scales],
            "recall_at_10": [self.scale_recall.get(s, (math.nan, math.nan))[1] for s in self.scales],
            "best": [s == self.s_star for s in self.scales],
        })


@dataclass
class Experiment:
    """The fixed parts of one run: model, template, prefix cache, topics, targets, retriever."""

    model: object
    cfg: SelfInterpConfig
    ctx: RunContext
    topics: list[Topic]
    split: np.ndarray
    tmpl: Template
    pc: PrefixCache | None
    retriever: Retriever
    targets: list[list[int]]
    median_norm: float
    settings: TrainSettings
    train_sample: np.ndarray
    compute_dtype: torch.dtype = torch.float32
    """Autocast dtype of the frozen model in training, validation and decoding."""

    @classmethod
    def create(cls, model, cfg, ctx, topics, split, tmpl) -> "Experiment":
        pc = PrefixCache(model, tmpl) if cfg.prefix_cache else None
        retriever = Retriever(topics, cfg.retrieval_scorer)
        targets = [tmpl.label_ids(model.tokenizer, t.topic) for t in topics]
        s = TrainSettings(cfg.lr, cfg.weight_decay, cfg.epochs, cfg.batch_size, cfg.clip, cfg.warmup,
                          cfg.loss_clamp, cfg.eval_every)
        split = np.array(split)
        train = np.flatnonzero(split == "train")
        rng = np.random.default_rng([cfg.seed, 2])
        sample = np.sort(rng.permutation(train)[: cfg.train_recall_sample])
        return cls(model, cfg, ctx, topics, split, tmpl, pc, retriever, targets, median_embedding_norm(model), s,
                   sample, autocast_dtype(cfg.compute_dtype, model))

    def fast(self):
        """Autocast of the frozen model's calls to compute_dtype (float32: no-op)."""
        return autocast(self.compute_dtype, self.model.device)

    @property
    def d(self) -> int:
        return self.model.info.d_model

    def idx(self, name: str) -> np.ndarray:
        return np.flatnonzero(self.split == name)

    def pairs(self, vectors: Tensor, idx, targets: list[list[int]] | None = None) -> Pairs:
        targets = self.targets if targets is None else targets
        idx = [int(i) for i in idx]
        return Pairs(vectors[idx], [targets[i] for i in idx])
