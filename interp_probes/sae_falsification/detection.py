"""Step 2: contrastive detection. Per feature, the per-sample maxima on reasoning (r) and non-reasoning (n) text:
Cohen's d (pooled SD), ROC-AUC (ties half), two-sided Mann-Whitney U (Bonferroni over d_sae; Benjamini-Hochberg
as an extra column), Welch's t, activation frequency on each side; the filter and a total ranking; the digit and
marker oracles that the top candidate must beat.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.metrics import roc_auc_score


def auc_columns(r: np.ndarray, n: np.ndarray) -> np.ndarray:
    """P(r > n) + P(r = n) / 2 per column of r (n_r, F) and n (n_n, F), from average ranks."""
    both = np.concatenate([r, n], 0)
    ranks = stats.rankdata(both, axis=0)  # average ranks: ties count half
    u = ranks[: len(r)].sum(0) - len(r) * (len(r) + 1) / 2
    return u / (len(r) * len(n))


def cohen_d_pooled(r: np.ndarray, n: np.ndarray) -> np.ndarray:
    """(mean_r - mean_n) / pooled SD with (n-1) weights, per column; 0 where both sides are constant."""
    nr, nn = len(r), len(n)
    vr, vn = r.var(0, ddof=1), n.var(0, ddof=1)
    sd = np.sqrt(((nr - 1) * vr + (nn - 1) * vn) / (nr + nn - 2))
    diff = r.mean(0) - n.mean(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(sd > 0, diff / np.where(sd > 0, sd, 1), np.where(diff == 0, 0.0, np.sign(diff) * np.inf))
    return d


def cohen_d_avg(inj: np.ndarray, base: np.ndarray, ddof: int = 1, constant: float | None = None) -> float:
    """(mean_inj - mean_base) / sqrt((v_inj + v_base) / 2), the paper's injection d, variances with `ddof` (the
    released code: 0). Both sides constant: `constant` (the code: 0), else 0 if equal, signed inf if not."""
    diff = float(np.mean(inj) - np.mean(base))
    v = (np.var(inj, ddof=ddof) + np.var(base, ddof=ddof)) / 2 if min(len(inj), len(base)) > ddof else 0.0
    if v <= 0:
        if constant is not None:
            return constant
        return 0.0 if diff == 0 else float(np.sign(diff) * np.inf)
    return diff / float(np.sqrt(v))


def student_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Student t-test p (pooled variance, scipy's default; the released code's injection test); the same
    constant-side rule as `welch_p`."""
    return _ttest_p(a, b, equal_var=True)


def welch_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Welch t-test p (1 when both sides are constant and equal, 0 when constant and different)."""
    return _ttest_p(a, b, equal_var=False)


def _ttest_p(a: np.ndarray, b: np.ndarray, equal_var: bool) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.var() == 0 and b.var() == 0:
        return 1.0 if a.mean() == b.mean() else 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_ind(a, b, equal_var=equal_var).pvalue)
    return p if np.isfinite(p) else 1.0


def detect(r: np.ndarray, n: np.ndarray, min_auc: float, max_p_bonf: float, min_d: float,
           ranking: str = "spec") -> pd.DataFrame:
    """One row per feature: the statistics, `passed`, and `rank` (0-based among passing features, else -1)."""
    r, n = np.asarray(r, np.float64), np.asarray(n, np.float64)
    n_feat = r.shape[1]
    d = cohen_d_pooled(r, n)
    auc = auc_columns(r, n)
    const = (np.ptp(np.concatenate([r, n]), axis=0) == 0)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant (dead) features: handled below
        mw = stats.mannwhitneyu(r, n, alternative="two-sided", axis=0, method="asymptotic")
        welch = stats.ttest_ind(r, n, equal_var=False, axis=0)
    p = np.where(const | ~np.isfinite(mw.pvalue), 1.0, mw.pvalue)
    t = np.where(np.isfinite(welch.statistic), welch.statistic, 0.0)
    p_welch = np.where(np.isfinite(welch.pvalue), welch.pvalue, 1.0)
    frame = pd.DataFrame({
        "feature": np.arange(n_feat), "mean_r": r.mean(0), "mean_n": n.mean(0), "d": d, "auc": auc,
        "u": mw.statistic, "p_mw": p, "p_bonf": np.minimum(1.0, p * n_feat),
        "q_bh": stats.false_discovery_control(p), "t_welch": t, "p_welch": p_welch,
        "freq_r": (r > 0).mean(0), "freq_n": (n > 0).mean(0),
    })
    frame["passed"] = ((frame.auc >= min_auc) & (frame.p_bonf <= max_p_bonf) & (frame.d >= min_d)
                       & (frame.mean_r > frame.mean_n))
    frame["score"] = composite_score(frame)
    order = rank_order(frame, ranking)
    frame["rank"] = -1
    passing = [f for f in order if frame.passed.iat[f]]
    frame.loc[passing, "rank"] = np.arange(len(passing))
    frame["rank_all"] = -1
    frame.loc[order, "rank_all"] = np.arange(len(order))
    return frame


def composite_score(frame: pd.DataFrame) -> np.ndarray:
    """The documentation's weighted composite (an option): 0.4 AUC gain + 0.3 capped d + 0.2 -log10 p + 0.1 freq."""
    logp = np.minimum(-np.log10(np.maximum(frame.p_bonf.to_numpy(), 1e-300)), 10) / 10
    return (0.4 * (2 * (frame.auc.to_numpy() - 0.5)) + 0.3 * np.clip(frame.d.to_numpy(), 0, 3) / 3
            + 0.2 * logp + 0.1 * frame.freq_r.to_numpy())


def rank_order(frame: pd.DataFrame, ranking: str = "spec") -> list[int]:
    """All feature ids in ranking order (a total order, so runs are deterministic).

    spec: (min(d, 3) desc, AUC desc, d desc, id asc); composite: (score desc, id asc).
    """
    d = frame.d.to_numpy()
    ids = frame.feature.to_numpy()
    if ranking == "composite":
        keys = (ids, -frame.score.to_numpy())
    else:
        dd = np.where(np.isfinite(d), d, np.sign(d) * 1e300)
        keys = (ids, -dd, -frame.auc.to_numpy(), -np.minimum(dd, 3))
    return [int(i) for i in np.lexsort(keys)]


def oracle_auc(labels: Sequence[int], flags: Sequence[bool]) -> float:
    """ROC-AUC of a 0/1 detector (ties count half) against labels (1 = reasoning)."""
    return float(roc_auc_score(np.asarray(labels), np.asarray(flags, dtype=float)))


def family_auc(values: np.ndarray, families: Sequence[str], pos: str = "arithmetic", neg: str = "narrative") -> float:
    """AUC of one feature's sample maxima within family `pos` against family `neg` (the confound check)."""
    fam = np.asarray(families)
    a, b = values[fam == pos], values[fam == neg]
    if len(a) == 0 or len(b) == 0:
        return float("nan")
    return float(auc_columns(a[:, None], b[:, None])[0])
