"""Step 3: token analysis per candidate, on valid positions >= 1 only: per-token mean activation (tokens with at
least `min_count` occurrences), the top tokens T_f, PMI of a token and the feature firing
(log2 P(fires, token) / (P(fires) P(token))), token concentration (share of high positions whose token is
in T_f), normalised entropy of the activation mass over tokens, and the top n-grams around T_f tokens.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .acts import SparseCodes

HIGH_FRAC = 0.1
"""A position is "high" when its activation exceeds this share of the feature's max."""


@dataclass
class FeatureTokens:
    feature: int
    top: list[int]
    """T_f: the top token ids by mean activation (count >= min_count), best first."""
    top50: list[int]
    concentration: float
    entropy: float
    max_act: float
    ngrams: dict[str, list[tuple[tuple[int, ...], int]]] = field(default_factory=dict)
    """kind -> [(token ids, count)], most frequent first: bigram_before, bigram_after and trigram around high
    positions of T_f tokens (activating contexts); frequent_bigram and frequent_trigram over every occurrence."""


def token_counts(ids: np.ndarray, valid: np.ndarray, vocab: int) -> np.ndarray:
    """Occurrences of each token id at valid positions."""
    return np.bincount(ids[valid].astype(np.int64), minlength=vocab)


def analyse_tokens(codes: SparseCodes, ids: np.ndarray, valid: np.ndarray, features: Sequence[int], vocab: int,
                   n_top: int = 10, min_count: int = 5, n_ngrams: int = 10
                   ) -> tuple[dict[int, FeatureTokens], pd.DataFrame]:
    """T_f, concentration, entropy and n-grams of each feature, and the per-token table (top 50 per feature)."""
    counts = token_counts(ids, valid, vocab)
    sub = codes.select(features)
    tok = ids[sub.sample, sub.pos].astype(np.int64)
    frame = pd.DataFrame({"feature": sub.feature, "token": tok, "value": sub.value.astype(np.float64),
                          "sample": sub.sample, "pos": sub.pos.astype(np.int64)})
    out: dict[int, FeatureTokens] = {}
    rows = []
    lengths = valid.shape[1]
    n_pos = max(1, int(valid.sum()))
    for f, g in frame.groupby("feature", sort=True):
        mass = g.groupby("token")["value"].sum()
        fired = g[g.value > 0].groupby("token").size()  # active positions per token
        n_fired = max(1, int(fired.sum()))
        mean = mass / counts[mass.index.to_numpy()]
        eligible = mean[counts[mean.index.to_numpy()] >= min_count]
        ordered = sorted(eligible.items(), key=lambda kv: (-kv[1], kv[0]))
        top50 = [int(t) for t, _ in ordered[:50]]
        top = top50[:n_top]
        fmax = float(g.value.max())
        high = g[g.value > HIGH_FRAC * fmax]
        conc = float(np.isin(high.token.to_numpy(), top).mean()) if len(high) else 0.0
        p = mass.to_numpy() / mass.sum()
        ent = float(-(p * np.log(p)).sum() / np.log(len(p))) if len(p) > 1 else 0.0
        ft = FeatureTokens(int(f), top, top50, conc, ent, fmax)
        ft.ngrams = _ngrams(high[high.token.isin(top)], ids, valid, lengths, n_ngrams)
        ft.ngrams.update(frequent_ngrams(ids, valid, top, n_ngrams))
        out[int(f)] = ft
        for rank, (t, m) in enumerate(ordered[:50]):
            joint = fired.get(t, 0) / n_pos
            pmi = float(np.log2(joint / ((n_fired / n_pos) * (counts[t] / n_pos)))) if joint > 0 else float("-inf")
            rows.append({"feature": int(f), "rank": rank, "token_id": int(t), "mean_act": float(m),
                         "count": int(counts[t]), "pmi": pmi, "is_top": rank < n_top})
    for f in features:  # features that never fire on the corpora
        if int(f) not in out:
            out[int(f)] = FeatureTokens(int(f), [], [], 0.0, 0.0, 0.0)
    return out, pd.DataFrame(rows, columns=["feature", "rank", "token_id", "mean_act", "count", "pmi", "is_top"])


def _ngrams(high: pd.DataFrame, ids: np.ndarray, valid: np.ndarray, width: int, n: int) -> dict:
    """(prev, tok), (tok, next) and (prev, tok, next) around high positions of T_f tokens, with counts."""
    before, after, tri = Counter(), Counter(), Counter()
    _count_ngrams(ids, zip(high["sample"].to_numpy(), high["pos"].to_numpy()), width, valid, before, after, tri)
    key = lambda kv: (-kv[1], kv[0])  # noqa: E731
    return {"bigram_before": sorted(before.items(), key=key)[:n], "bigram_after": sorted(after.items(), key=key)[:n],
            "trigram": sorted(tri.items(), key=key)[:n]}


def frequent_ngrams(ids: np.ndarray, valid: np.ndarray, top: Sequence[int], n: int) -> dict:
    """The corpus's most frequent bigrams and trigrams holding a T_f token (any occurrence, active or not)."""
    if not top:
        return {"frequent_bigram": [], "frequent_trigram": []}
    real = valid.copy()
    real[:, 0] = ids.shape[1] > 0  # position 0 is a real token: fine as context, never scored
    hit = np.isin(ids, np.asarray(top)) & valid
    bi, tri = Counter(), Counter()
    _count_ngrams(ids, zip(*np.nonzero(hit)), ids.shape[1], real, bi, bi, tri)
    key = lambda kv: (-kv[1], kv[0])  # noqa: E731
    return {"frequent_bigram": sorted(bi.items(), key=key)[:n], "frequent_trigram": sorted(tri.items(), key=key)[:n]}


def ngram_frame(tokens: dict[int, FeatureTokens], decode: Callable[[int], str]) -> pd.DataFrame:
    rows = [{"feature": f, "kind": kind, "tokens": list(ng), "text": "".join(decode(t) for t in ng), "count": c}
            for f, ft in tokens.items() for kind, lst in ft.ngrams.items() for ng, c in lst]
    return pd.DataFrame(rows, columns=["feature", "kind", "tokens", "text", "count"])


def top_contexts(codes: SparseCodes, sample_max: np.ndarray, ids: np.ndarray, valid: np.ndarray,
                 labels: np.ndarray, features: Sequence[int], n: int, decode: Callable[[int], str],
                 sample_ids: Sequence[str]) -> pd.DataFrame:
    """The top-`n` samples per feature and corpus, with per-token activations (0 at position 0 and pads)."""
    rows = []
    sub = codes.select(features)
    by_feature = {f: g for f, g in pd.DataFrame({"f": sub.feature, "s": sub.sample, "p": sub.pos,
                                                 "v": sub.value}).groupby("f")}
    for f in features:
        g = by_feature.get(int(f))
        for corpus, lab in (("reasoning", 1), ("non", 0)):
            idx = np.flatnonzero(labels == lab)
            order = idx[np.lexsort((idx, -sample_max[idx, f]))][:n]
            for rank, s in enumerate(order):
                length = int(valid[s].sum()) + 1
                acts = np.zeros(length, dtype=np.float32)
                if g is not None:
                    hit = g[g.s == s]
                    acts[hit.p.to_numpy().astype(int)] = hit.v.to_numpy()
                rows.append({"feature": int(f), "corpus": corpus, "rank": rank, "sample_id": sample_ids[s],
                             "max_act": float(sample_max[s, f]),
                             "tokens": [decode(int(t)) for t in ids[s, :length]], "acts": acts.tolist()})
    return pd.DataFrame(rows)


def _count_ngrams(ids: np.ndarray, positions: Iterable[tuple[int, int]], width: int, next_ok: np.ndarray,
                  before: Counter, after: Counter, tri: Counter) -> None:
    """Count (prev, tok) into `before`, (tok, next) into `after` and (prev, tok, next) into `tri` at each (sample,
    position); the next token only below `width` and where `next_ok` holds."""
    for s, p in positions:
        t = int(ids[s, p])
        prev = int(ids[s, p - 1]) if p >= 1 else None
        nxt = int(ids[s, p + 1]) if p + 1 < width and next_ok[s, p + 1] else None
        if prev is not None:
            before[(prev, t)] += 1
        if nxt is not None:
            after[(t, nxt)] += 1
        if prev is not None and nxt is not None:
            tri[(prev, t, nxt)] += 1
