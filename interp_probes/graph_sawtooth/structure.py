"""Structure scores of ROI attention maps against the sawtooth template (sections 2, 4, 5, 6).

Pure numpy / scipy / CPU torch ops, no model. A *unit* is one attention map over the ROI (a
layer's head mean or one head); the functions take a stack of units ``(unit, R, R)`` of one sample and the sample's
local segment spans, so one call scores every layer and head of a sample against the real
template and all null templates at once.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from scipy.stats import rankdata

Spans = list[tuple[int, int]]
"""Inclusive local (ROI-relative) token spans (s_k, e_k) of the segments."""

PAIR_MIN_DIST = 3
"""Plain AUC pairs have j <= i - 3: self and the two previous tokens are excluded."""


# ============================================================================= template


def template(spans: Spans, size: int) -> Bool[np.ndarray, "R R"]:
    """M[i, j] = 1 iff i and j lie in the same segment and j <= i: a row of causal triangles."""
    m = np.zeros((size, size), dtype=bool)
    for s, e in spans:
        m[s : e + 1, s : e + 1] = np.tril(np.ones((e - s + 1, e - s + 1), dtype=bool))
    return m


def shuffled_spans(spans: Spans, rng: np.random.Generator) -> Spans:
    """Segment-shuffled null: permute the order of the segment lengths and lay them out from the
    first segment's start, keeping the original sequence of gaps between consecutive segments."""
    lengths = [e - s + 1 for s, e in spans]
    gaps = [spans[k + 1][0] - spans[k][1] - 1 for k in range(len(spans) - 1)]
    order = rng.permutation(len(lengths))
    out, pos = [], spans[0][0] if spans else 0
    for k, i in enumerate(order):
        out.append((pos, pos + lengths[i] - 1))
        pos += lengths[i] + (gaps[k] if k < len(gaps) else 0)
    return out


# ============================================================================= concentration (paper)


def binarize(x: Float[np.ndarray, "unit R R"], k: int, mode: str = "topk") -> Bool[np.ndarray, "unit R R"]:
    """Min-max normalise each map over the ROI, then keep its k largest cells (topk) or the cells
    at >= 10 % of the range (threshold)."""
    u, r, _ = x.shape
    flat = torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32).reshape(u, -1)
    lo, hi = flat.amin(1, keepdim=True), flat.amax(1, keepdim=True)
    norm = (flat - lo) / torch.where(hi > lo, hi - lo, torch.ones_like(hi))  # host: NumPy in, NumPy out
    if mode == "threshold":
        return (norm >= 0.1).reshape(u, r, r).cpu().numpy()
    k = int(min(max(k, 0), r * r))
    out = torch.zeros_like(flat, dtype=torch.bool)
    if k:
        out.scatter_(1, norm.topk(k, dim=1).indices, True)
    return out.reshape(u, r, r).cpu().numpy()


def closing(y: Bool[np.ndarray, "unit R R"]) -> Bool[np.ndarray, "unit R R"]:
    """3x3 binary dilation then 3x3 binary erosion per map; outside the map counts as 0."""
    t = torch.as_tensor(y).float()[:, None]  # (unit, 1, R, R)
    dil = F.max_pool2d(F.pad(t, (1, 1, 1, 1), value=0.0), 3, stride=1)
    ero = 1 - F.max_pool2d(F.pad(1 - dil, (1, 1, 1, 1), value=1.0), 3, stride=1)  # outside = 0
    return (ero[:, 0] > 0.5).cpu().numpy()


def processed_map(x: Float[np.ndarray, "unit R R"], k: int, mode: str = "topk") -> Bool[np.ndarray, "unit R R"]:
    """Y: the binarised, morphologically closed map of section 4 (steps 1-3)."""
    return closing(binarize(x, k, mode))


class SpanScorer:
    """Concentration scores of one sample's processed maps Y against any span layout.

    Rectangle sums come from a 2-D integral image and the triangle sums from row-wise cumulative
    sums, so scoring a layout is a few vector operations over all units.
    """

    def __init__(self, y: Bool[np.ndarray, "unit R R"], max_shift: int = 2):
        self.u, self.r, _ = y.shape
        yf = y.astype(np.float64)
        self.integral = np.zeros((self.u, self.r + 1, self.r + 1))
        self.integral[:, 1:, 1:] = yf.cumsum(1).cumsum(2)
        self.rowcum = np.zeros((self.u, self.r, self.r + 1))
        self.rowcum[:, :, 1:] = yf.cumsum(2)
        self.max_shift = max_shift

    def _rect_mean(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """Mean of Y over rows r0..r1, cols c0..c1 (inclusive) per unit; 0 when empty."""
        if r1 < r0 or c1 < c0:
            return np.zeros(self.u)
        i = self.integral
        total = i[:, r1 + 1, c1 + 1] - i[:, r0, c1 + 1] - i[:, r1 + 1, c0] + i[:, r0, c0]
        return total / ((r1 - r0 + 1) * (c1 - c0 + 1))

    def _inside_err(self, s: int, e: int, m: int) -> np.ndarray:
        """Fraction of zeros over rows s..e, cols s..row-m of the block (0 if the region is empty)."""
        rows = np.arange(s + m, e + 1)
        if rows.size == 0:
            return np.zeros(self.u)
        ones = (self.rowcum[:, rows, rows - m + 1] - self.rowcum[:, rows, s]).sum(1)
        count = float((rows - m - s + 1).sum())
        return 1.0 - ones / count

    def span_score(self, s: int, e: int) -> np.ndarray:
        """Best score over shifts of one segment (s, e): clip((1 - outside)(1 - inside), 0, 1)."""
        length = e - s + 1
        m = max(int(round(0.25 * length)), 4)
        best = np.full(self.u, -np.inf)
        for d in range(-self.max_shift, self.max_shift + 1):
            if s + d > self.r - 1 or e + d < 0:
                continue  # entirely outside the ROI
            s2, e2 = min(max(s + d, 0), self.r - 1), min(max(e + d, 0), self.r - 1)
            outside = self._rect_mean(s2, e2, max(0, e2 - length - 1), s2 - 1)
            inside = self._inside_err(s2, e2, m)
            best = np.maximum(best, np.clip((1 - outside) * (1 - inside), 0, 1))
        return best

    def score(self, spans: Spans) -> np.ndarray:
        """Layer-sample score per unit: sum_k L_k best_k / sum_k L_k (1 without segments)."""
        if not spans:
            return np.ones(self.u)
        lengths = np.array([e - s + 1 for s, e in spans], dtype=np.float64)
        best = np.stack([self.span_score(s, e) for s, e in spans], 1)  # (unit, segment)
        return best @ lengths / lengths.sum()


# ============================================================================= plain AUC (not the paper's)


def auc_pairs(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Query and key indices (i, j) of the ROI pairs with j <= i - 3."""
    i, j = np.tril_indices(size, -PAIR_MIN_DIST)
    return i, j


def auc_from_ranks(ranks: Float[np.ndarray, "unit pair"], labels: Bool[np.ndarray, "draw pair"]) -> np.ndarray:
    """Mann-Whitney AUC of every unit (its ranks, ties averaged) against every label vector:
    (unit, draw); NaN where a label vector lacks positives or negatives."""
    lab = labels.astype(np.float64)
    n1 = lab.sum(1)
    n0 = lab.shape[1] - n1
    with np.errstate(divide="ignore", invalid="ignore"):
        return (ranks @ lab.T - n1 * (n1 + 1) / 2) / (n1 * n0)


def auc_distmatched(values: Float[np.ndarray, "unit pair"], labels: Bool[np.ndarray, " pair"],
                    dist: np.ndarray) -> np.ndarray:
    """AUC within each distance stratum |i - j| = d, averaged with weights = positive counts."""
    num = np.zeros(values.shape[0])
    den = 0.0
    for d in np.unique(dist):
        sel = dist == d
        y = labels[sel]
        n1 = int(y.sum())
        if n1 == 0 or n1 == y.size:
            continue
        ranks = rankdata(values[:, sel], axis=1)
        auc = auc_from_ranks(ranks, y[None])[:, 0]
        num += n1 * auc
        den += n1
    return num / den if den else np.full(values.shape[0], np.nan)


# ============================================================================= one sample, all units


def score_sample(
    roi: Float[np.ndarray, "unit R R"],
    spans: Spans,
    null_spans: list[Spans],
    max_shift: int = 2,
    mode: str = "topk",
) -> dict[str, np.ndarray]:
    """Every structure score of one sample's ROI maps.

    Returns concentration (unit,), concentration_null (draw, unit), auc (unit,), auc_null
    (draw, unit), auc_distmatched (unit,), locality_auc (scalar) and the processed maps Y.
    """
    r = roi.shape[-1]
    m = template(spans, r)
    y = processed_map(roi, int(m.sum()), mode)
    scorer = SpanScorer(y, max_shift)
    conc = scorer.score(spans)
    conc_null = np.stack([scorer.score(sp) for sp in null_spans]) if null_spans else np.zeros((0, roi.shape[0]))

    i, j = auc_pairs(r)
    labels = np.stack([m[i, j]] + [template(sp, r)[i, j] for sp in null_spans])  # (1 + draw, pair)
    values = roi[:, i, j].astype(np.float64)
    ranks = rankdata(values, axis=1)
    aucs = auc_from_ranks(ranks, labels)  # (unit, 1 + draw)
    dist = i - j
    loc = auc_from_ranks(rankdata(-dist.astype(np.float64))[None], labels[:1])[0, 0]
    return {
        "concentration": conc,
        "concentration_null": conc_null,
        "auc": aucs[:, 0],
        "auc_null": aucs[:, 1:].T,
        "auc_distmatched": auc_distmatched(values, labels[0], dist),
        "locality_auc": np.float64(loc),
        "processed": y,
        "template": m,
    }
