"""Across-run statistics on the logged trajectories (pure pandas / numpy, no torch).

Progress u and degradation b, the shared isotonic degradation curve (collapse_r2), rates,
the drift-paradox test, the harm signal against its random-subspace control, the projection
run's below-curve test, and the joint change point of (mu_bar, overlap).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from sklearn.isotonic import IsotonicRegression

U_LEVELS = (0.3, 0.5, 0.7)
BELOW_LEVELS = (0.3, 0.5, 0.7, 0.9)
SNAP = 1e-9
"""Values within SNAP x max|values| of zero are exact zeros (projected runs' q_hat) and tie."""


def add_progress(runs: pd.DataFrame, lt_min: float) -> pd.DataFrame:
    """Columns u = (L_T(0) - L_T) / (L_T(0) - L_T^min) and b = L_B - L_B(0), per run_id."""
    out = runs.copy()
    first = out.sort_values("step").groupby("run_id").first()
    lt0 = out["run_id"].map(first["L_T"])
    lb0 = out["run_id"].map(first["L_B"])
    out["u"] = (lt0 - out["L_T"]) / (lt0 - lt_min)
    out["b"] = out["L_B"] - lb0
    return out


def snap(x: Sequence[float]) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    scale = np.nanmax(np.abs(x)) if len(x) and np.isfinite(x).any() else 0.0
    return np.where(np.abs(x) <= SNAP * scale, 0.0, x)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rho with average ranks for ties; NaN with fewer than 3 pairs or a constant side."""
    x, y = snap(x), snap(y)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(spearmanr(x, y).statistic)


def crossing(run: pd.DataFrame, level: float, cols: Sequence[str] = ()) -> dict | None:
    """The first log-to-log crossing of u = level (linear interpolation), with `cols` interpolated
    there: {"step": t, col: value, ...}; None if the run never reaches the level."""
    run = run.sort_values("step")
    u = run["u"].to_numpy()
    hit = np.nonzero(u >= level)[0]
    if not len(hit):
        return None
    j = int(hit[0])
    if j == 0:
        return {"step": float(run["step"].iloc[0]), **{c: float(run[c].iloc[0]) for c in cols}}
    w = (level - u[j - 1]) / (u[j] - u[j - 1])
    pick = lambda c: float(run[c].iloc[j - 1] + w * (run[c].iloc[j] - run[c].iloc[j - 1]))  # noqa: E731
    return {"step": pick("step"), **{c: pick(c) for c in cols}}


# ============================================================================= collapse


def isotonic(u: np.ndarray, b: np.ndarray) -> IsotonicRegression:
    return IsotonicRegression(increasing=True, out_of_bounds="clip").fit(u, b)


def collapse(frame: pd.DataFrame, runs: Sequence[str]) -> dict:
    """One monotone b(u) over the pooled (u, b) of `runs`: collapse_r2, collapse_rel, residual sd,
    the fit's knots, and each run's residual sd."""
    pts = frame[frame["run_id"].isin(runs)].dropna(subset=["u", "b"])
    u, b = pts["u"].to_numpy(), pts["b"].to_numpy()
    fit = isotonic(u, b)
    res = b - fit.predict(u)
    ss_tot = float(((b - b.mean()) ** 2).sum())
    ss_shared = float((res**2).sum())
    ss_per = 0.0
    per_run_sd = {}
    for rid, grp in pts.groupby("run_id"):
        gu, gb = grp["u"].to_numpy(), grp["b"].to_numpy()
        ss_per += float(((gb - isotonic(gu, gb).predict(gu)) ** 2).sum())
        per_run_sd[rid] = float(np.std(gb - fit.predict(gu)))
    return {
        "collapse_r2": 1 - ss_shared / ss_tot if ss_tot > 0 else math.nan,
        "collapse_rel": ss_per / ss_shared if ss_shared > 1e-12 * max(ss_tot, 1e-300) else 1.0,
        "sigma_res": float(np.std(res)),
        "u_knot": np.asarray(fit.X_thresholds_, dtype=float),
        "g": np.asarray(fit.y_thresholds_, dtype=float),
        "per_run_sd": per_run_sd,
        "fit": fit,
    }


def rates(frame: pd.DataFrame, levels: Sequence[float] = BELOW_LEVELS) -> pd.DataFrame:
    rows = []
    for rid, run in frame.groupby("run_id", sort=False):
        run = run.sort_values("step")
        row = {"run_id": rid}
        for lv in levels:
            hit = crossing(run, lv)
            row[f"t_u{round(lv * 100)}"] = hit["step"] if hit else math.nan
        row["final_u"] = float(run["u"].iloc[-1])
        row["final_b"] = float(run["b"].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows)


def rate_ratio(rate_frame: pd.DataFrame, runs: Sequence[str]) -> float:
    t = rate_frame[rate_frame["run_id"].isin(runs)]["t_u50"].dropna()
    t = t[t > 0]
    return float(t.max() / t.min()) if len(t) >= 2 else math.nan


# ============================================================================= paradox, harm


def paradox(
    frame: pd.DataFrame, runs: Sequence[str], curv_col: str = "curv_drift", levels=U_LEVELS, min_runs: int = 4
) -> tuple[pd.DataFrame, float, float]:
    """At each u level that >= min_runs runs reach: b, ||D|| and q_hat interpolated at each run's
    first crossing; Spearman of b against ||D|| and against q_hat, averaged over the levels."""
    rows, rho_d, rho_q = [], [], []
    for lv in levels:
        hits = []
        for rid in runs:
            hit = crossing(frame[frame["run_id"] == rid], lv, ("b", "drift_norm", curv_col))
            if hit is not None:
                hits.append({"u_level": lv, "run_id": rid, "b": hit["b"], "drift_norm": hit["drift_norm"],
                             "curv_drift": hit[curv_col]})
        if len(hits) < min_runs:
            continue
        rows += hits
        b = [h["b"] for h in hits]
        rho_d.append(spearman([h["drift_norm"] for h in hits], b))
        rho_q.append(spearman([h["curv_drift"] for h in hits], b))
    mean = lambda xs: float(np.nanmean(xs)) if xs and np.isfinite(xs).any() else math.nan  # noqa: E731
    table = pd.DataFrame(rows, columns=["u_level", "run_id", "b", "drift_norm", "curv_drift"])
    return table, mean(rho_d), mean(rho_q)


def value_at(frame: pd.DataFrame, rid: str, step: int, col: str) -> float:
    run = frame[frame["run_id"] == rid].sort_values("step")
    return float(np.interp(step, run["step"], run[col]))


def harm(frame: pd.DataFrame, steps_frame: pd.DataFrame, runs: Sequence[str], harm_step: int) -> dict:
    """Harm signal (predicted degradation at harm_step) per run against the final b, with the
    random-subspace control and the early mean stiff share."""
    sig, rnd, share, final = [], [], [], []
    for rid in runs:
        run = frame[frame["run_id"] == rid].sort_values("step")
        sig.append(value_at(frame, rid, harm_step, "pred_deg"))
        rnd.append(value_at(frame, rid, harm_step, "pred_deg_random"))
        early = steps_frame[(steps_frame["run_id"] == rid) & (steps_frame["step"] <= harm_step)]["rho"]
        share.append(float(early.mean()) if len(early) else math.nan)
        final.append(float(run["b"].iloc[-1]))
    return {
        "per_run": pd.DataFrame({"run_id": list(runs), "harm_signal": sig, "harm_signal_random": rnd,
                                 "stiff_share_early": share}),
        "harm_signal_spearman": spearman(sig, final),
        "harm_signal_random_spearman": spearman(rnd, final),
        "stiff_share_early_spearman": spearman(share, final),
    }


def harm_curve(frame: pd.DataFrame, runs: Sequence[str]) -> pd.DataFrame:
    """The harm signal measured at every logged step: Spearman of each run's predicted degradation at that step
    (and of the random-subspace control's) against the runs' final b, and of the observed b at that step against
    the final b (what watching b alone tells). Rows: step, harm_rho, harm_random_rho, observed_b_rho, n_runs."""
    final = {rid: float(frame[frame["run_id"] == rid].sort_values("step")["b"].iloc[-1]) for rid in runs}
    steps = sorted(set.intersection(*[set(frame[frame["run_id"] == rid]["step"]) for rid in runs])) if runs else []
    rows = []
    for t in steps:
        if t == 0:
            continue
        at = frame[frame["step"] == t].set_index("run_id")
        f = [final[r] for r in runs]
        rows.append({"step": int(t), "harm_rho": spearman([at.pred_deg[r] for r in runs], f),
                     "harm_random_rho": spearman([at.pred_deg_random[r] for r in runs], f),
                     "observed_b_rho": spearman([at.b[r] for r in runs], f), "n_runs": len(runs)})
    return pd.DataFrame(rows, columns=["step", "harm_rho", "harm_random_rho", "observed_b_rho", "n_runs"])


def below_curve(fit: dict, frame: pd.DataFrame, rid: str, levels=BELOW_LEVELS) -> tuple[bool, list[dict]]:
    """True if the run's b lies below g(u) - 2 sigma_res at >= 2 reached levels and never above
    g(u) + 2 sigma_res."""
    run = frame[frame["run_id"] == rid]
    out = []
    for lv in levels:
        hit = crossing(run, lv, ("b",))
        if hit is None:
            continue
        g = float(fit["fit"].predict([lv])[0])
        out.append({"u_level": lv, "b": hit["b"], "g": g, "sigma_res": fit["sigma_res"]})
    below = sum(o["b"] < o["g"] - 2 * o["sigma_res"] for o in out)
    above = any(o["b"] > o["g"] + 2 * o["sigma_res"] for o in out)
    return bool(below >= 2 and not above), out


# ============================================================================= bifurcation


def change_point(run: pd.DataFrame, min_seg: int = 3) -> dict:
    """The single split of the standardised (mu_bar, overlap) series minimising the within-segment
    squared error; accepted when the gain beats 2 d log(n) sigma^2, mean mu_bar after <= 0.5 x
    before, overlap at t* < 0.5 and the largest principal angle at t* > 60 degrees."""
    s = run.sort_values("step").dropna(subset=["mu_bar", "overlap"])
    none = {"t_star": math.nan, "accepted": False, "sse_gain": math.nan, "penalty": math.nan,
            "mu_ratio": math.nan, "overlap_at": math.nan, "angle_at": math.nan}
    n, d = len(s), 2
    if n < 2 * min_seg:
        return none
    X = s[["mu_bar", "overlap"]].to_numpy(dtype=float)
    sd = X.std(0)
    Z = np.where(sd > 0, (X - X.mean(0)) / np.where(sd > 0, sd, 1), 0.0)
    sse0 = float(((Z - Z.mean(0)) ** 2).sum())
    best, best_i = math.inf, -1
    for i in range(min_seg, n - min_seg + 1):
        a, b = Z[:i], Z[i:]
        sse = float(((a - a.mean(0)) ** 2).sum() + ((b - b.mean(0)) ** 2).sum())
        if sse < best:
            best, best_i = sse, i
    sigma2 = best / (d * n)
    gain, penalty = sse0 - best, 2 * d * math.log(n) * sigma2
    mu = X[:, 0]
    before, after = mu[:best_i].mean(), mu[best_i:].mean()
    mu_ratio = after / before if before > 0 else math.inf
    row = s.iloc[best_i]
    accepted = bool(gain > penalty and mu_ratio <= 0.5 and row["overlap"] < 0.5 and row["max_angle_deg"] > 60)
    return {"t_star": float(row["step"]), "accepted": accepted, "sse_gain": gain, "penalty": penalty,
            "mu_ratio": float(mu_ratio), "overlap_at": float(row["overlap"]), "angle_at": float(row["max_angle_deg"])}


def change_points(frame: pd.DataFrame, runs: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": rid, **change_point(frame[frame["run_id"] == rid])} for rid in runs])
