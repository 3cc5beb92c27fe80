"""self_interp's run state: what one layer measured (`LayerResult`) and the fixed parts of a run with the
stages that fit and evaluate adapters on them (`Experiment`), used by probe.py, artifacts.py and summary.py."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp.context import RunContext
from interp.precision import autocast, autocast_dtype, inference_autocast

from . import SelfInterpConfig
from .adapters import Adapter
from .evaluate import Retriever, generations_frame, hits_from_ranks, logit_lens_ranks, recall_rows
from .inject import PrefixCache, Template, generate
from .topics import Topic
from .train import Pairs, identity_sweep, train_adapter
from .vectors import embedding_vectors, first_tokens, logit_lens_tokens, median_embedding_norm


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
    train_sample: np.ndarray
    compute_dtype: torch.dtype = torch.float32
    """Autocast dtype of the frozen model in training, validation and decoding."""

    @classmethod
    def create(cls, model, cfg, ctx, topics, split, tmpl) -> "Experiment":
        pc = PrefixCache(model, tmpl) if cfg.prefix_cache else None
        retriever = Retriever(topics, cfg.retrieval_scorer)
        targets = [tmpl.label_ids(model.tokenizer, t.topic) for t in topics]
        split = np.array(split)
        train = np.flatnonzero(split == "train")
        rng = np.random.default_rng([cfg.seed, 2])
        sample = np.sort(rng.permutation(train)[: cfg.train_recall_sample])
        return cls(model, cfg, ctx, topics, split, tmpl, pc, retriever, targets, median_embedding_norm(model),
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

    def init_scale(self, s_star: float) -> float:
        return s_star if self.cfg.init_scale is None else self.cfg.init_scale * self.median_norm

    # -- train and evaluate ---------------------------------------------------------
    def fit_and_evaluate(self, vectors: Tensor, layer: int, variants, train_recall: bool = True) -> LayerResult:
        """Identity scale sweep, then train and evaluate each variant, and the logit-lens readout."""
        cfg = self.cfg
        t = time.perf_counter()
        train, val = self.pairs(vectors, self.idx("train")), self.pairs(vectors, self.idx("val"))
        scales = [m * self.median_norm for m in cfg.identity_scales]
        with self.fast():
            losses = identity_sweep(self.model, self.tmpl, val, scales, cfg.batch_size, self.pc, cfg.loss_clamp)
        s_star = scales[int(np.argmin(losses))]
        res = LayerResult(layer, s_star, scales, losses, vectors=vectors)
        res.seconds["scale_sweep"] = time.perf_counter() - t
        curves, gens, recs = [], [], []
        for j, variant in enumerate(variants):
            t = time.perf_counter()
            res.adapters[variant], rows = self.train(variant, train, val, s_star, offset=layer * 100 + j)
            curves += [{**r, "layer": layer} for r in rows]
            res.seconds[f"train_{variant}"] = time.perf_counter() - t
            t = time.perf_counter()
            for split_name, idx in self.eval_sets(train_recall):
                g, r = self.evaluate(res.adapters[variant], vectors, idx, variant, split_name, layer)
                gens.append(g)
                recs.append(r)
            res.seconds[f"eval_{variant}"] = time.perf_counter() - t
        res.curves = pd.DataFrame(curves)
        t = time.perf_counter()
        g, r = self.logit_lens(vectors, layer)
        gens.append(g)
        recs.append(r)
        res.seconds["eval_logit_lens"] = time.perf_counter() - t
        if cfg.scale_recall and layer == cfg.resolved_layer(self.model.info.n_layers):
            t = time.perf_counter()
            res.scale_recall = self.scale_recall(vectors, scales, s_star, res.generations_so_far(gens))
            res.seconds["scale_recall"] = time.perf_counter() - t
        res.generations = pd.concat(gens, ignore_index=True)
        res.recall = pd.concat(recs, ignore_index=True)
        self.ctx.log.info("layer %d: %s", layer, {k: round(v, 1) for k, v in res.seconds.items()})
        return res

    def train(self, variant: str, train: Pairs, val: Pairs, s_star: float, offset: int = 0,
              settings: SelfInterpConfig | None = None) -> tuple[Adapter, list[dict]]:
        scale = s_star if variant in ("identity", "bias_only") else self.init_scale(s_star)
        ad = Adapter(variant, self.d, scale, self.cfg.low_rank_rank, self.cfg.low_rank_init,
                     generator=self.ctx.generator(offset))
        ad.to(self.model.device)
        with self.fast():
            return train_adapter(self.model, self.tmpl, ad, train, val, settings or self.cfg,
                                 self.ctx.generator(10_000 + offset), self.pc, self.ctx.tqdm)

    def eval_sets(self, train_recall: bool = True) -> list[tuple[str, np.ndarray]]:
        sets = [("heldout", self.idx("heldout"))]
        if train_recall and len(self.train_sample):
            sets.append(("train", self.train_sample))
        return sets

    def labels(self, adapter: Adapter, vectors: Tensor, temperature: float = 0.0, seed: int = 0,
               max_new: int | None = None) -> list[str]:
        with torch.no_grad():
            soft = adapter(vectors.to(self.model.device))
        with inference_autocast(self.compute_dtype, self.model.hf, self.model.device):
            return generate(self.model, self.tmpl, soft, max_new or self.cfg.max_label_tokens,
                            temperature=temperature, seed=seed, pc=self.pc)

    def evaluate(self, adapter: Adapter, vectors: Tensor, idx, variant: str, split_name: str, layer: int,
                 universe: np.ndarray | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Generate labels for vectors[idx] (topic ids idx), rank every topic, recall@k."""
        labels = self.labels(adapter, vectors[list(map(int, idx))])
        ranks, top5, hits = self.retriever.rank_of(labels, idx)
        gen = generations_frame(variant, split_name, idx, labels, ranks, top5, self.retriever, layer, hits)
        rec = pd.DataFrame(recall_rows(hits, len(self.topics), self.ctx.rng, self.cfg.bootstrap))
        rec.insert(0, "split", split_name)
        rec.insert(0, "variant", variant)
        rec.insert(0, "layer", layer)
        return gen, rec

    def logit_lens(self, vectors: Tensor, layer: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The trivial readout: the vector through the final norm and unembedding, top tokens as guesses."""
        idx = self.idx("heldout")
        toks, _ = logit_lens_tokens(self.model, vectors[list(idx)], self.cfg.logit_lens_top)
        ranks, first, guesses = logit_lens_ranks(toks, idx, self.retriever)
        names = [t.topic for t in self.topics]
        gen = pd.DataFrame({
            "variant": "logit_lens", "layer": layer, "topic_id": idx, "split": "heldout", "generated_label": first,
            "exact_match": [self.retriever.is_exact(f, int(t)) for f, t in zip(first, idx)],
            "rank_of_truth": ranks.astype(int), "top5_retrieved": [[names[i] for i in g[:5]] for g in guesses],
            **{f"hit_at_{k}": h for k, h in hits_from_ranks(ranks).items()},
        })
        rec = pd.DataFrame(recall_rows(hits_from_ranks(ranks), len(self.topics), self.ctx.rng, self.cfg.bootstrap))
        rec.insert(0, "split", "heldout")
        rec.insert(0, "variant", "logit_lens")
        rec.insert(0, "layer", layer)
        return gen, rec

    def scale_recall(self, vectors: Tensor, scales: list[float], s_star: float,
                     done: pd.DataFrame) -> dict[float, tuple[float, float]]:
        """Identity recall@1 / @10 at every scale of the sweep (shows s* is not cherry-picked);
        the identity variant's own held-out labels serve at s*."""
        idx = self.idx("heldout")
        out = {}
        own = done[(done.variant == "identity") & (done.split == "heldout")] if len(done) else done
        for sc in scales:
            if sc == s_star and len(own):
                hit1, hit10 = own.hit_at_1.to_numpy(), own.hit_at_10.to_numpy()
            else:
                labels = self.labels(Adapter("identity", self.d, sc).to(self.model.device), vectors[list(idx)])
                _, _, hits = self.retriever.rank_of(labels, idx)
                hit1, hit10 = hits[1], hits[10]
            out[sc] = (float(hit1.mean()), float(hit10.mean()))
        return out

    # -- controls -------------------------------------------------------------------
    def controls(self, vectors: Tensor, layer: int, main: LayerResult) -> LayerResult:
        """Shuffled labels (scalar_affine, same schedule) and token-embedding vectors (positive control)."""
        res = LayerResult(layer, main.s_star, [], [])
        curves, gens, recs = [], [], []
        if "shuffled" in self.cfg.controls:
            t = time.perf_counter()
            fit_idx = np.concatenate([self.idx("train"), self.idx("val")])
            perm = self.ctx.rng.permutation(fit_idx)
            shuffled = list(self.targets)
            for i, j in zip(fit_idx, perm):
                shuffled[int(i)] = self.targets[int(j)]
            train = self.pairs(vectors, self.idx("train"), shuffled)
            val = self.pairs(vectors, self.idx("val"), shuffled)
            ad, rows = self.train("scalar_affine", train, val, main.s_star, offset=90_000)
            res.adapters["shuffled"] = ad
            curves += [{**r, "variant": "shuffled", "layer": layer} for r in rows]
            for split_name, idx in self.eval_sets():
                g, r = self.evaluate(ad, vectors, idx, "shuffled", split_name, layer)
                gens.append(g)
                recs.append(r)
            res.seconds["shuffled"] = time.perf_counter() - t
        if "embed" in self.cfg.controls:
            t = time.perf_counter()
            tok_ids, single = first_tokens(self.model, [x.topic for x in self.topics])
            keep = np.flatnonzero(single)
            emb, _ = embedding_vectors(self.model, [tok_ids[i] for i in keep])
            full = torch.zeros(len(self.topics), self.d)
            full[keep] = emb
            res.embed = (keep, emb)
            sub = lambda name: np.intersect1d(self.idx(name), keep)  # noqa: E731
            settings = replace(self.cfg, epochs=self.cfg.embed_control_epochs)
            ad, rows = self.train("scalar_affine", self.pairs(full, sub("train")), self.pairs(full, sub("val")),
                                  main.s_star, offset=95_000, settings=settings)
            res.adapters["embed_control"] = ad
            curves += [{**r, "variant": "embed_control", "layer": layer} for r in rows]
            g, r = self.evaluate(ad, full, sub("heldout"), "embed_control", "heldout", layer)
            gens.append(g)
            recs.append(r)
            res.seconds["embed_control"] = time.perf_counter() - t
        res.curves = pd.DataFrame(curves)
        res.generations = pd.concat(gens, ignore_index=True) if gens else pd.DataFrame()
        res.recall = pd.concat(recs, ignore_index=True) if recs else pd.DataFrame()
        return res


# ============================================================================= inspection
