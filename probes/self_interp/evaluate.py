"""Step 5: score generated labels by retrieval against every topic, recall@k with bootstrap
intervals, the logit-lens readout baseline and the bias share.

Ranking: an exact match (lower-cased, punctuation and leading articles stripped, a trailing "s"
singularised) to a topic's name or alias always ranks that topic first; the rest are ordered by
the scorer: the packaged sentence embedder (cosine to the topic's name and aliases, the best of
them) or, without it, TF-IDF over character 3-5-grams within word boundaries (ties broken by
word overlap).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .topics import Topic

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

            self._emb = embed_texts(self.strings, device=device).numpy()
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

            return embed_texts(labels, device=self.device).numpy() @ self._emb.T
        sims = (self._tfidf.transform(labels) @ self._mat.T).toarray()
        overlap = np.array([[len(set(normalise(lab).split()) & w) for w in self._words] for lab in labels])
        return sims + 1e-3 * overlap

    def rank_of(self, labels: Sequence[str], truth: Sequence[int]) -> tuple[np.ndarray, list[list[int]]]:
        """Rank (1 = first) of each label's true topic, ties counted against it, and the top-5 topic ids."""
        s = self.scores(labels)
        if len(s) == 0:
            return np.zeros(0, dtype=int), []
        truth = np.asarray(truth)
        own = s[np.arange(len(s)), truth][:, None]
        ahead = (s > own).sum(1) + ((s == own).sum(1) - 1)
        top5 = np.argsort(-s, axis=1, kind="stable")[:, :5].tolist()
        return ahead + 1, top5

    def is_exact(self, label: str, truth: int) -> bool:
        return truth in self.exact.get(normalise(label), ())

    def best_topic(self, labels: Sequence[str]) -> np.ndarray:
        """The first-ranked topic of each label (-1 for an empty label)."""
        s = self.scores(labels)
        best = s.argmax(1) if len(s) else np.zeros(0, dtype=int)
        usable = [bool(normalise(lab)) and (self.scorer != "exact" or bool(self.exact.get(normalise(lab))))
                  for lab in labels]
        return np.where(usable, best, -1)


def recall_rows(ranks: np.ndarray, n_topics: int, rng: np.random.Generator, n_boot: int,
                ks: Sequence[int] = (1, 5, 10)) -> list[dict]:
    """recall@k with a 95 % bootstrap interval over the evaluated topics, and chance k / N."""
    rows = []
    ranks = np.asarray(ranks)
    boot = rng.integers(0, len(ranks), size=(n_boot, len(ranks))) if len(ranks) else None
    for k in ks:
        hit = (ranks <= k).astype(float)
        r = float(hit.mean()) if len(hit) else math.nan
        lo = hi = math.nan
        if boot is not None:
            dist = hit[boot].mean(1)
            lo, hi = (float(x) for x in np.quantile(dist, [0.025, 0.975]))
        rows.append({"k": k, "recall": r, "ci_low": lo, "ci_high": hi, "chance": min(1.0, k / n_topics),
                     "n": int(len(ranks))})
    return rows


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
                      top5: list[list[int]], retriever: Retriever, layer: int) -> pd.DataFrame:
    names = [t.topic for t in retriever.topics]
    return pd.DataFrame({
        "variant": variant,
        "layer": layer,
        "topic_id": list(topic_ids),
        "split": split,
        "generated_label": list(labels),
        "exact_match": [retriever.is_exact(lab, t) for lab, t in zip(labels, topic_ids)],
        "rank_of_truth": np.asarray(ranks, dtype=int),
        "top5_retrieved": [[names[i] for i in row] for row in top5],
    })
