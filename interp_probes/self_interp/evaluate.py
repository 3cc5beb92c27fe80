"""Step 5: score generated labels by retrieval against every topic, recall@k with bootstrap
intervals, the logit-lens readout baseline and the bias share.

Ranking: an exact match (lower-cased, punctuation and leading articles stripped, a trailing "s"
singularised) to a topic's name or alias always ranks that topic first; the rest are ordered by
the scorer: the packaged sentence embedder (cosine to the topic's name and aliases, the best of
them) or, without it, TF-IDF over character 3-5-grams within word boundaries (ties broken by
word overlap).

recall@k follows the reference's `evaluate_labels` (agencyenterprise/selfie-adapters,
`evals/embedding_retrieval/topic_retrieval_eval.py`): a hit at k is the true topic among
`torch.topk(scores, k)`, so tied scores fall in torch's top-k order; `rank_of_truth` is the
reference's rank, 1 + the number of other topics scoring strictly higher.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .topics import Topic

KS = (1, 5, 10)
_ARTICLES = re.compile(r"^(the|a|an)\s+")
_PUNCT = re.compile(r"[^\w\s]")


def normalise(text: str) -> str:
    """Lower-case, drop punctuation and a leading article, singularise a trailing "s"."""
    t = _PUNCT.sub("", text.lower().replace("-", " ")).strip()
    t = re.sub(r"\s+", " ", _ARTICLES.sub("", t))
    if len(t) > 3 and t.endswith("s") and not t.endswith("ss"):
        t = t[:-1]
    return t


def resolve_scorer(name: str) -> str:
    """`auto` -> `embedding` when the packaged embedder is installed, else `lexical`."""
    if name != "auto":
        return name
    from interp.embedder import embedder_available

    return "embedding" if embedder_available() else "lexical"


class Retriever:
    """Ranks all topics against free-text labels (exact matches first, then the scorer)."""

    def __init__(self, topics: Sequence[Topic], scorer: str = "auto", device: str = "cpu"):
        self.topics = list(topics)
        self.scorer = resolve_scorer(scorer)
        self.device = device
        self.strings: list[str] = []  # every name and alias
        self.owner: list[int] = []  # topic index of each string
        self.exact: dict[str, set[int]] = {}
        for i, t in enumerate(self.topics):
            for s in (t.topic, *t.aliases):
                self.strings.append(s)
                self.owner.append(i)
                self.exact.setdefault(normalise(s), set()).add(i)
        self.owner_arr = np.array(self.owner)
        self._cache: dict[str, np.ndarray] = {}
        if self.scorer == "embedding":
            from interp.embedder import embed_texts

            self._emb = embed_texts(self.strings, device=device).cpu().numpy()
        elif self.scorer == "lexical":
            from sklearn.feature_extraction.text import TfidfVectorizer

            self._tfidf = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), lowercase=True)
            self._mat = self._tfidf.fit_transform(self.strings)
            self._words = [set(normalise(s).split()) for s in self.strings]

    def scores(self, labels: Sequence[str]) -> np.ndarray:
        """(n_labels, n_topics): scorer similarity (best over names and aliases) plus 10 for an exact match."""
        labels = list(labels)
        todo = sorted({lab for lab in labels if lab not in self._cache})
        if todo:
            for lab, row in zip(todo, self._string_scores(todo)):
                per_topic = np.full(len(self.topics), -np.inf)
                np.maximum.at(per_topic, self.owner_arr, row)
                for i in self.exact.get(normalise(lab), ()):
                    per_topic[i] += 10.0
                self._cache[lab] = per_topic
        return np.stack([self._cache[lab] for lab in labels]) if labels else np.zeros((0, len(self.topics)))

    def _string_scores(self, labels: list[str]) -> np.ndarray:
        n = len(self.strings)
        if self.scorer == "exact":
            return np.zeros((len(labels), n))
        if self.scorer == "embedding":
            from interp.embedder import embed_texts

            return embed_texts(labels, device=self.device).cpu().numpy() @ self._emb.T
        sims = (self._tfidf.transform(labels) @ self._mat.T).toarray()
        overlap = np.array([[len(set(normalise(lab).split()) & w) for w in self._words] for lab in labels])
        return sims + 1e-3 * overlap

    def rank_of(self, labels: Sequence[str], truth: Sequence[int],
                ks: Sequence[int] = KS) -> tuple[np.ndarray, list[list[int]], dict[int, np.ndarray]]:
        """(rank of each label's true topic, the top-5 topic ids, {k: hit at k}) as the reference ranks
        (see `topk_hits`)."""
        s = self.scores(labels)
        if len(s) == 0:
            return np.zeros(0, dtype=int), [], {k: np.zeros(0, dtype=bool) for k in ks}
        ranks, hits = topk_hits(s, truth, ks)
        top5 = topk_indices(s, 5).tolist()
        return ranks, top5, hits

    def is_exact(self, label: str, truth: int) -> bool:
        return truth in self.exact.get(normalise(label), ())

    def best_topic(self, labels: Sequence[str]) -> np.ndarray:
        """The first-ranked topic of each label (-1 for an empty label)."""
        s = self.scores(labels)
        best = s.argmax(1) if len(s) else np.zeros(0, dtype=int)
        usable = [bool(normalise(lab)) and (self.scorer != "exact" or bool(self.exact.get(normalise(lab))))
                  for lab in labels]
        return np.where(usable, best, -1)


def topk_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """(n, min(k, n_topics)) topic ids of `torch.topk(scores, k)`: torch's order, ties included."""
    import torch

    top = torch.topk(torch.from_numpy(np.ascontiguousarray(scores)), k=min(k, scores.shape[1]), dim=1)
    return top.indices.cpu().numpy()


def topk_hits(scores: np.ndarray, truth: Sequence[int],
              ks: Sequence[int] = KS) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The reference's ranking of (n, n_topics) scores against the true topic ids:
    rank = 1 + the number of other topics scoring strictly higher, and a hit at k = the truth among
    `torch.topk(scores, k)` (which, on ties, is not always rank <= k: torch orders ties its own way).

    One case the reference's embedding scorer never meets is a miss here: a row that scores every topic
    alike (an empty label under the lexical or exact scorer) has rank n_topics and no hits, rather than
    hits decided by torch's order of equal values."""
    truth = np.asarray(truth, dtype=int)
    rows = np.arange(len(scores))
    own = scores[rows, truth][:, None]  # (n, 1)
    better = scores > own
    better[rows, truth] = False
    flat = scores.max(1) == scores.min(1)  # (n,) no information in the row
    hits = {k: (topk_indices(scores, k) == truth[:, None]).any(1) & ~flat for k in ks}
    return np.where(flat, scores.shape[1], better.sum(1) + 1), hits


def hits_from_ranks(ranks: np.ndarray, ks: Sequence[int] = KS) -> dict[int, np.ndarray]:
    """Hits at k of tie-free ranks (the logit-lens guesses are distinct topics)."""
    ranks = np.asarray(ranks)
    return {k: ranks <= k for k in ks}


def recall_rows(hits: dict[int, np.ndarray], n_topics: int, rng: np.random.Generator, n_boot: int) -> list[dict]:
    """recall@k with a 95 % bootstrap interval over the evaluated topics, and chance k / N."""
    rows = []
    n = len(next(iter(hits.values()))) if hits else 0
    boot = rng.integers(0, n, size=(n_boot, n)) if n else None
    for k, hit in hits.items():
        hit = np.asarray(hit, dtype=float)
        r = float(hit.mean()) if len(hit) else math.nan
        lo = hi = math.nan
        if boot is not None:
            dist = hit[boot].mean(1)
            lo, hi = (float(x) for x in np.quantile(dist, [0.025, 0.975]))
        rows.append({"k": k, "recall": r, "ci_low": lo, "ci_high": hi, "chance": min(1.0, k / n_topics),
                     "n": int(len(hit))})
    return rows


def paired_gain(hit_a: np.ndarray, hit_b: np.ndarray, rng: np.random.Generator,
                n_boot: int) -> tuple[float, float, float]:
    """mean(hit_a - hit_b) over the same topics, with the 95 % paired bootstrap interval (topics
    resampled with replacement, both variants together)."""
    d = np.asarray(hit_a, dtype=float) - np.asarray(hit_b, dtype=float)  # (n,)
    if not len(d):
        return math.nan, math.nan, math.nan
    dist = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(1)  # (n_boot,)
    lo, hi = np.quantile(dist, [0.025, 0.975])
    return float(d.mean()), float(lo), float(hi)


def logit_lens_ranks(token_lists: Sequence[Sequence[str]], truth: Sequence[int], retriever: Retriever,
                     k: int = 10) -> tuple[np.ndarray, list[str], list[list[int]]]:
    """The logit-lens readout as a ranked list of guesses: each vector's top tokens, in order, are
    labels; each label's first-ranked topic is a guess; the first k distinct guesses form the ranking.

    Returns (rank of the truth, or n_topics when it is not among the k guesses; top-1 token; guesses).
    """
    n = len(retriever.topics)
    flat = sorted({tok for toks in token_lists for tok in toks})
    best = dict(zip(flat, retriever.best_topic(flat).tolist())) if flat else {}
    ranks, first, guesses = [], [], []
    for toks, t in zip(token_lists, truth):
        g: list[int] = []
        for tok in toks:
            b = best.get(tok, -1)
            if b >= 0 and b not in g:
                g.append(b)
                if len(g) == k:
                    break
        ranks.append(g.index(t) + 1 if t in g else n)
        first.append(toks[0] if toks else "")
        guesses.append(g)
    return np.array(ranks), first, guesses


def bias_share(r10_bias: float, r10_identity: float, r10_affine: float, min_denominator: float = 0.02) -> float:
    """(R@10 bias_only - identity) / (R@10 scalar_affine - identity); NaN when the denominator < min."""
    den = r10_affine - r10_identity
    if not (math.isfinite(den) and den >= min_denominator):
        return math.nan
    return (r10_bias - r10_identity) / den


def generations_frame(variant: str, split: str, topic_ids: Sequence[int], labels: Sequence[str], ranks: np.ndarray,
                      top5: list[list[int]], retriever: Retriever, layer: int,
                      hits: dict[int, np.ndarray] | None = None) -> pd.DataFrame:
    names = [t.topic for t in retriever.topics]
    hits = hits_from_ranks(ranks) if hits is None else hits
    return pd.DataFrame({
        "variant": variant,
        "layer": layer,
        "topic_id": list(topic_ids),
        "split": split,
        "generated_label": list(labels),
        "exact_match": [retriever.is_exact(lab, t) for lab, t in zip(labels, topic_ids)],
        "rank_of_truth": np.asarray(ranks, dtype=int),
        "top5_retrieved": [[names[i] for i in row] for row in top5],
        **{f"hit_at_{k}": np.asarray(h, dtype=bool) for k, h in hits.items()},
    })
