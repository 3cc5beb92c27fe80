"""Layer selection (section 7): Otsu over structure scores, the middle wide peak of the spectral
entropy, and their intersection with the project's fallback. Pure numpy / scipy.

The entropy band has three rules (`GraphSawtoothConfig.entropy_rule`):
- reference (default): the released `select_layers_peak_auto_entropy` (liuyiming01/SLASH, src/slash/utils.py)
  without its last step: peak heights clamped at 1e-12 (`max(height, 1e-12)`, so a peak below the median still
  grows a band), the best peak by the exact score, ties to the narrower band, then the lower amplitude rank,
  then the later peak; the no-peak fallback keeps every layer at or above the ceil(0.4 L)-th smoothed value.
- reference_newest: the same, plus the code's newest step, which appends one more layer after the (padded)
  band. It is not the default: neither the paper nor the method spec has that step, and it widens S_ent by a
  layer on most series.
- spec: the method spec as first written (no clamp; ties to the wider band, then the lower amplitude rank,
  then the first peak; the no-peak fallback keeps exactly ceil(0.4 L) layers).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.ndimage import gaussian_filter1d
from scipy.signal import find_peaks


def otsu_set(scores: np.ndarray) -> dict[str, Any]:
    """S_score: layers at or above the 1-D Otsu threshold of their scores.

    The threshold is the midpoint between the two sorted values at the split of largest
    between-class variance w0 w1 (mu0 - mu1)^2; if that variance is <= 1e-6, the top 40 %.
    """
    v = np.asarray(scores, dtype=np.float64)
    n = v.size
    srt = np.sort(v)
    best_var, best_t = -1.0, 1
    for t in range(1, n):
        w0, w1 = t / n, 1 - t / n
        var = w0 * w1 * (srt[:t].mean() - srt[t:].mean()) ** 2
        if var > best_var:
            best_var, best_t = var, t
    fallback = n < 2 or best_var <= 1e-6
    if fallback:
        kth = srt[::-1][min(n, math.ceil(0.4 * n)) - 1]
        threshold = float(kth)
    else:
        threshold = float((srt[best_t - 1] + srt[best_t]) / 2)
    layers = [int(i) for i in np.flatnonzero(v >= threshold)]
    return {"layers": layers, "threshold": threshold, "between_var": float(max(best_var, 0.0)),
            "top40_fallback": bool(fallback)}


def spectral_entropy(a: np.ndarray) -> float:
    """H = -sum p log p with p_j = sigma_j^2 / sum sigma^2 over the singular values of `a`."""
    s = np.linalg.svd(np.asarray(a, dtype=np.float64), compute_uv=False)
    p = s**2 / max(float((s**2).sum()), 1e-300)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _grow(series: np.ndarray, p: int, level: float) -> tuple[int, int]:
    """The maximal contiguous run around p with series >= level (p itself always included)."""
    lo = hi = p
    while lo - 1 >= 0 and series[lo - 1] >= level:
        lo -= 1
    while hi + 1 < series.size and series[hi + 1] >= level:
        hi += 1
    return lo, hi


def _pct_rank(values: np.ndarray, x: float) -> float:
    """Percentile rank of x among values: the fraction of values <= x."""
    return float((np.asarray(values) <= x).mean()) if np.size(values) else 1.0


ENTROPY_RULES = ("reference", "reference_newest", "spec")


def entropy_band(entropy: np.ndarray, rule: str = "reference") -> dict[str, Any]:
    """S_ent: the middle wide peak of the per-layer entropy series (section 7 b, c), under `rule`.

    Returns the band's layers plus every diagnostic the dashboard draws (winsorised and smoothed
    series, peaks with prominence and score, the chosen peak, thr_frac, right padding, extra layer).
    """
    if rule not in ENTROPY_RULES:
        raise ValueError(f"entropy rule {rule!r}: one of {', '.join(ENTROPY_RULES)}")
    ref = rule != "spec"
    floor = 1e-12 if ref else -math.inf
    raw = np.asarray(entropy, dtype=np.float64)
    n = raw.size
    lo_w, hi_w = np.percentile(raw, [5, 95])
    wins = np.clip(raw, lo_w, hi_w)
    smooth = gaussian_filter1d(wins, sigma=max(1.0, n / 70))
    span = float(smooth.max() - smooth.min())
    peaks, props = find_peaks(smooth, prominence=0.08 * span if span > 0 else None)
    prom = props.get("prominences", np.zeros(len(peaks)))
    out: dict[str, Any] = {
        "raw": raw.tolist(), "winsorised": wins.tolist(), "smoothed": smooth.tolist(),
        "peaks": [int(p) for p in peaks], "prominences": [float(x) for x in prom],
    }
    if len(peaks) == 0 or span <= 0:
        k = max(1, math.ceil(0.4 * n))
        if ref:  # the code: every layer at or above the k-th largest smoothed value (ties included)
            layers = [int(i) for i in np.flatnonzero(smooth >= np.partition(smooth, -k)[-k])]
        else:
            layers = sorted(int(i) for i in np.argsort(-smooth, kind="stable")[:k])
        out.update(layers=layers, peak=None, band=[min(layers), max(layers)], thr_frac=None,
                   no_peak_fallback=True, right_padded=False, extra_layer=False, peak_scores=[])
        return out
    baseline = float(np.median(smooth))
    min_width = max(3, math.ceil(0.32 * n))
    cands = []
    for p, pr in zip(peaks.tolist(), prom.tolist()):
        height = max(float(smooth[p] - baseline), floor)
        thr = 0.35
        lo, hi = _grow(smooth, p, baseline + thr * height)
        while hi - lo + 1 < min_width and thr > 0.12:
            thr = max(0.12, 0.85 * thr)
            lo, hi = _grow(smooth, p, baseline + thr * height)
        width = hi - lo + 1
        amp_rank = _pct_rank(smooth, smooth[p])
        prom_rank = _pct_rank(prom, pr)
        center_w = math.exp(-0.5 * ((p - (n - 1) / 2) / max(1.0, 0.22 * n)) ** 2)
        width_w = min(1.0, width / max(3.0, 0.2 * n))
        score = center_w * (0.45 * amp_rank + 0.35 * prom_rank + 0.20 * width_w)
        cands.append({"peak": int(p), "lo": lo, "hi": hi, "width": width, "thr_frac": thr, "score": score,
                      "amp_rank": amp_rank, "prom_rank": prom_rank, "center_w": center_w, "width_w": width_w})
    if ref:  # the code: best score, ties to the narrower band, the lower amplitude rank, then the later peak
        best = max(cands, key=lambda c: (c["score"], -c["width"], -c["amp_rank"], c["peak"]))
    else:  # the spec: ties to the wider band, then the lower amplitude rank (then the first peak)
        best = max(cands, key=lambda c: (round(c["score"], 12), c["width"], -c["amp_rank"]))
    lo, hi = best["lo"], best["hi"]
    padded = False
    if hi + 1 < n:
        base_w = float(np.median(wins))
        height_w = max(float(wins[best["peak"]] - base_w), floor)
        nxt = wins[hi + 1]
        if nxt >= wins[hi] or nxt >= base_w + max(0.02, 0.5 * best["thr_frac"]) * height_w:
            hi += 1
            padded = True
    layers = list(range(lo, hi + 1))
    extra = rule == "reference_newest" and hi + 1 < n
    if extra:  # the code's newest step: one more layer after the band
        layers.append(hi + 1)
    out.update(layers=layers, peak=best["peak"], band=[lo, hi], thr_frac=best["thr_frac"],
               no_peak_fallback=False, right_padded=padded, extra_layer=extra, peak_scores=cands,
               baseline=baseline)
    return out


def final_set(scores: np.ndarray, s_score: list[int], ent: dict[str, Any]) -> tuple[list[int], bool]:
    """S = S_score ∩ S_ent; if empty (a project rule), the best-scoring layer of S_score within two
    layers of the S_ent band, else the best layer of S_score. Returns (S, fallback)."""
    s_ent = set(ent["layers"])
    s = sorted(set(s_score) & s_ent)
    if s:
        return s, False
    lo, hi = min(s_ent), max(s_ent)
    near = [layer for layer in s_score if lo - 2 <= layer <= hi + 2]
    pool = near or list(s_score)
    best = max(pool, key=lambda layer: scores[layer])
    return [int(best)], True
