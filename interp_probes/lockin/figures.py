"""Figures of the lockin page: run tables in, Plotly figures out (no Streamlit)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

KIND_COLOURS = {"full": "#1f77b4", "lora": "#2ca02c", "projection": "#d62728", "gd": "#1f77b4",
                "wander": "#9467bd", "switch": "#ff7f0e"}
_DASHES = ("solid", "dot", "dash", "longdash", "dashdot", "longdashdot")


def _style(frame: pd.DataFrame) -> dict[str, dict]:
    """A colour per run by its stabiliser kind, and a dash pattern per run within its kind."""
    out, seen = {}, {}
    for rid, kind in frame.groupby("run_id", sort=False)["kind"].first().items():
        i = seen.get(kind, 0)
        seen[kind] = i + 1
        out[rid] = {"color": KIND_COLOURS.get(kind, "#7f7f7f"), "dash": _DASHES[i % len(_DASHES)],
                    "width": 3 if kind == "projection" else 1.8}
    return out


def _runs(frame: pd.DataFrame):
    style = _style(frame)
    for rid, grp in frame.groupby("run_id", sort=False):
        yield rid, grp.sort_values("step"), style[rid]


def collapse(runs: pd.DataFrame, curve: pd.DataFrame | None, sigma_res: float | None) -> go.Figure:
    """Broad degradation b against narrow progress u for every run, with the shared isotonic curve
    g(u) and its +-2 sigma_res band; the projection run is drawn thick."""
    fig = go.Figure()
    if curve is not None and len(curve):
        knots = curve.dropna(subset=["u_knot"]).sort_values("u_knot")
        u, g = knots["u_knot"].to_numpy(), knots["g"].to_numpy()
        s = 2 * (sigma_res or 0.0)
        fig.add_trace(go.Scatter(x=np.r_[u, u[::-1]], y=np.r_[g + s, (g - s)[::-1]], fill="toself", mode="none",
                                 fillcolor="rgba(0,0,0,0.10)", name="±2σ_res", hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=u, y=g, mode="lines", line={"color": "black", "width": 2.5},
                                 name="shared curve g(u)"))
    for rid, grp, st in _runs(runs):
        fig.add_trace(go.Scatter(x=grp["u"], y=grp["b"], mode="lines+markers", name=rid,
                                 line={"color": st["color"], "dash": st["dash"], "width": st["width"]},
                                 marker={"size": 4}, customdata=grp["step"],
                                 hovertemplate=f"{rid}<br>step %{{customdata}}<br>u %{{x:.3f}}<br>b %{{y:.4f}}"
                                               "<extra></extra>"))
    fig.update_layout(title="Broad degradation against narrow progress", xaxis_title="progress u",
                      yaxis_title="degradation b = L_B(t) − L_B(0)", height=460)
    return fig


def rates(runs: pd.DataFrame) -> go.Figure:
    """u(t) and b(t) against step: stabilisers change how fast a run moves along the curve."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("progress u(t)", "degradation b(t)"))
    for rid, grp, st in _runs(runs):
        line = {"color": st["color"], "dash": st["dash"], "width": st["width"]}
        fig.add_trace(go.Scatter(x=grp["step"], y=grp["u"], mode="lines", name=rid, line=line, legendgroup=rid),
                      1, 1)
        fig.add_trace(go.Scatter(x=grp["step"], y=grp["b"], mode="lines", name=rid, line=line, legendgroup=rid,
                                 showlegend=False), 1, 2)
    fig.add_hline(y=0.5, line={"color": "gray", "dash": "dot"}, row=1, col=1)
    fig.update_xaxes(title_text="step")
    fig.update_layout(height=420)
    return fig


def drift_vs_broad(runs: pd.DataFrame) -> go.Figure:
    """b against Euclidean drift ||D|| and against curvature-weighted drift q_hat, every log of every run."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Euclidean drift ‖θ − θ₀‖", "curvature-weighted drift q̂"))
    for rid, grp, st in _runs(runs):
        m = {"color": st["color"], "size": 5}
        fig.add_trace(go.Scatter(x=grp["drift_norm"], y=grp["b"], mode="markers+lines", name=rid, marker=m,
                                 line={"color": st["color"], "width": 1}, legendgroup=rid), 1, 1)
        fig.add_trace(go.Scatter(x=grp["curv_drift"], y=grp["b"], mode="markers+lines", name=rid, marker=m,
                                 line={"color": st["color"], "width": 1}, legendgroup=rid, showlegend=False), 1, 2)
    fig.update_xaxes(title_text="‖D‖", row=1, col=1)
    fig.update_xaxes(title_text="q̂ = Σ λᵢ (vᵢᵀD)²", row=1, col=2)
    fig.update_yaxes(title_text="b")
    fig.update_layout(height=420)
    return fig


def paradox(table: pd.DataFrame, level: float, rho_norm: float | None, rho_curv: float | None) -> go.Figure:
    """At one u level: b against ||D|| and against q_hat across runs, with the Spearman values."""
    sub = table[np.isclose(table["u_level"], level)]
    f = lambda r: "–" if r is None or (isinstance(r, float) and math.isnan(r)) else f"{r:+.2f}"  # noqa: E731
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"b vs ‖D‖ (mean Spearman {f(rho_norm)})",
                                                        f"b vs q̂ (mean Spearman {f(rho_curv)})"))
    for col, x in ((1, "drift_norm"), (2, "curv_drift")):
        fig.add_trace(go.Scatter(x=sub[x], y=sub["b"], mode="markers+text", text=sub["run_id"],
                                 textposition="top center", marker={"size": 9}, showlegend=False), 1, col)
    fig.update_xaxes(title_text="‖D‖ at matched u", row=1, col=1)
    fig.update_xaxes(title_text="q̂ at matched u", row=1, col=2)
    fig.update_yaxes(title_text=f"b at u = {level:g}")
    fig.update_layout(height=420)
    return fig


def harm_series(runs: pd.DataFrame, steps: pd.DataFrame) -> go.Figure:
    """Per step: stiff share rho_t and curvature along the update h_t; per log: curvature share c_t."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("stiff share ρ_t = ‖V_kᵀΔ‖²/‖Δ‖²", "curvature along the update h_t",
                                        "curvature share c_t of the predicted degradation"))
    style = _style(runs)
    for rid, grp in steps.groupby("run_id", sort=False):
        st = style.get(rid, {"color": "gray", "dash": "solid", "width": 1.5})
        grp = grp.sort_values("step")
        line = {"color": st["color"], "dash": st["dash"], "width": 1.5}
        fig.add_trace(go.Scatter(x=grp["step"], y=grp["rho"], mode="lines", name=rid, line=line, legendgroup=rid),
                      1, 1)
        fig.add_trace(go.Scatter(x=grp["step"], y=grp["h"], mode="lines", name=rid, line=line, legendgroup=rid,
                                 showlegend=False), 2, 1)
    for rid, grp, st in _runs(runs):
        fig.add_trace(go.Scatter(x=grp["step"], y=grp["curv_share"], mode="lines+markers", name=rid,
                                 line={"color": st["color"], "dash": st["dash"], "width": 1.5}, legendgroup=rid,
                                 showlegend=False, marker={"size": 4}), 3, 1)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title_text="step", row=3, col=1)
    fig.update_layout(height=720)
    return fig


def predicted_vs_observed(runs: pd.DataFrame) -> go.Figure:
    """Second-order predicted degradation P_hat against the observed b at every log."""
    fig = go.Figure()
    for rid, grp, st in _runs(runs):
        fig.add_trace(go.Scatter(x=grp["pred_deg"], y=grp["b"], mode="markers", name=rid,
                                 marker={"color": st["color"], "size": 6}))
    vals = np.r_[runs["pred_deg"].to_numpy(dtype=float), runs["b"].to_numpy(dtype=float)]
    vals = vals[np.isfinite(vals)]
    if len(vals):
        lo, hi = float(vals.min()), float(vals.max())
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line={"color": "gray", "dash": "dot"},
                                 name="y = x", hoverinfo="skip"))
    fig.update_layout(title="Predicted (g_Bᵀ D + ½ Σ λᵢ (vᵢᵀD)²) against observed degradation",
                      xaxis_title="predicted P̂", yaxis_title="observed b", height=420)
    return fig


def early_harm(rates_frame: pd.DataFrame, rho: float | None, rho_random: float | None) -> go.Figure:
    """Early harm signal against the final b, for the stiff subspace and the random-frame control."""
    f = lambda r: "–" if r is None or (isinstance(r, float) and math.isnan(r)) else f"{r:+.2f}"  # noqa: E731
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"stiff subspace (Spearman {f(rho)})",
                                                        f"random k-frame control (Spearman {f(rho_random)})"))
    for col, x in ((1, "harm_signal"), (2, "harm_signal_random")):
        fig.add_trace(go.Scatter(x=rates_frame[x], y=rates_frame["final_b"], mode="markers+text",
                                 text=rates_frame["run_id"], textposition="top center", marker={"size": 9},
                                 showlegend=False), 1, col)
        fig.update_xaxes(title_text="early predicted degradation", row=1, col=col)
    fig.update_yaxes(title_text="final b")
    fig.update_layout(height=420)
    return fig


def spearman_interval(rho: pd.Series, n: pd.Series) -> tuple[pd.Series, pd.Series]:
    """95 % interval of a Spearman rho over n runs: Fisher z with the Fieller-Hartley-Pearson standard error
    sqrt(1.06 / (n - 3)) (wide at 7 runs: rho -0.86 spans -0.98 .. -0.27)."""
    z = np.arctanh(rho.clip(-0.9999, 0.9999))
    se = np.sqrt(1.06 / (n - 3).clip(lower=1))
    return np.tanh(z - 1.96 * se), np.tanh(z + 1.96 * se)


def harm_curve(curve: pd.DataFrame, harm_step: float | None = None) -> go.Figure:
    """The harm signal as a curve: Spearman, across runs, of the predicted degradation at each logged step (stiff
    subspace and random-frame control) and of the observed b at that step against the final b; the band is the
    harm signal's 95 % interval (`spearman_interval`)."""
    fig = go.Figure()
    if "n_runs" in curve and (curve["n_runs"] > 3).all():
        lo, hi = spearman_interval(curve["harm_rho"], curve["n_runs"])
        fig.add_trace(go.Scatter(x=list(curve["step"]) + list(curve["step"])[::-1], y=list(hi) + list(lo)[::-1],
                                 fill="toself", fillcolor="rgba(198,40,40,0.12)", line={"width": 0},
                                 name="95 % interval (Fisher z)", hoverinfo="skip"))
    for col, name, colour, dash in (("harm_rho", "predicted degradation (stiff subspace)", "#c62828", "solid"),
                                    ("harm_random_rho", "random k-frame control", "#757575", "dash"),
                                    ("observed_b_rho", "observed b so far", "#1565c0", "dot")):
        fig.add_trace(go.Scatter(x=curve["step"], y=curve[col], mode="lines+markers", name=name,
                                 line={"color": colour, "dash": dash}))
    if harm_step is not None:
        fig.add_vline(x=harm_step, line_dash="dot", line_color="#888", annotation_text="early_frac step")
    fig.add_hline(y=0, line_color="#bbb")
    fig.update_layout(title="Harm signal against the final broad degradation, measured at every logged step",
                      xaxis_title="step the signal is read at", yaxis_title="Spearman ρ across runs",
                      yaxis_range=[-1.05, 1.05], height=400)
    return fig


def series(runs: pd.DataFrame, col: str, title: str, y_title: str, log_y: bool = False) -> go.Figure:
    """One logged column against step, a line per run."""
    fig = go.Figure()
    for rid, grp, st in _runs(runs):
        fig.add_trace(go.Scatter(x=grp["step"], y=grp[col], mode="lines+markers", name=rid, marker={"size": 4},
                                 line={"color": st["color"], "dash": st["dash"], "width": st["width"]}))
    fig.update_layout(title=title, xaxis_title="step", yaxis_title=y_title, height=380)
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def overlap_heatmap(overlaps: pd.DataFrame, run_id: str) -> go.Figure:
    """Checkpoint x checkpoint overlap ||V_a^T V_b||_F^2 / min(r_a, r_b) of one run's update bases."""
    sub = overlaps[overlaps["run_id"] == run_id]
    steps = sorted(set(sub["step_a"]) | set(sub["step_b"]))
    idx = {s: i for i, s in enumerate(steps)}
    z = np.full((len(steps), len(steps)), np.nan)
    for a, b, v in sub[["step_a", "step_b", "overlap"]].itertuples(index=False):
        z[idx[a], idx[b]] = z[idx[b], idx[a]] = v
    fig = go.Figure(go.Heatmap(z=z, x=steps, y=steps, zmin=0, zmax=1, colorscale="Viridis",
                               colorbar={"title": "overlap"},
                               hovertemplate="step %{x} vs %{y}<br>overlap %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"Update-subspace overlap between logs ({run_id})", xaxis_title="step",
                      yaxis_title="step", height=460)
    return fig


def singular_values(sv: np.ndarray, steps: Sequence[int], i: int) -> go.Figure:
    """Singular values of the stacked window of updates U_t at log i."""
    s = np.asarray(sv[i], dtype=float)
    s = s[np.isfinite(s)]
    fig = go.Figure(go.Bar(x=list(range(1, len(s) + 1)), y=s))
    fig.update_layout(title=f"Singular values of U_t at step {int(steps[i])}", xaxis_title="index",
                      yaxis_title="s_i", height=340)
    return fig


def spectrum(ritz: np.ndarray, lam: np.ndarray, lam_power: float | None) -> go.Figure:
    """Lanczos Ritz values (log y; the top k kept as stiff) with the power-iteration lambda_1."""
    ritz = np.asarray(ritz, dtype=float)
    k = len(lam)
    pos = ritz > 0
    idx = np.arange(1, len(ritz) + 1)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=idx[pos][:k], y=ritz[pos][:k], mode="markers", marker={"size": 10, "color": "#d62728"},
                             name=f"top {k} (stiff)"))
    fig.add_trace(go.Scatter(x=idx[pos][k:], y=ritz[pos][k:], mode="markers", marker={"size": 7, "color": "#7f7f7f"},
                             name="other Ritz values"))
    if lam_power is not None and math.isfinite(lam_power):
        fig.add_trace(go.Scatter(x=[1], y=[lam_power], mode="markers", name="power iteration λ₁",
                                 marker={"symbol": "x", "size": 14, "color": "black"}))
    if (~pos).any():
        fig.add_annotation(text=f"{int((~pos).sum())} non-positive Ritz values not shown (log axis)",
                           xref="paper", yref="paper", x=1, y=1, showarrow=False)
    fig.update_layout(title="Broad-loss curvature spectrum at θ₀ (Lanczos)", xaxis_title="index",
                      yaxis_title="eigenvalue", yaxis_type="log", height=400)
    return fig


def bifurcation(runs: pd.DataFrame, changepoints: pd.DataFrame) -> go.Figure:
    """mu_bar_t (curvature seen by the update subspace / lambda_1) and overlap_t per run, with
    accepted change points as vertical lines."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("μ̄_t = mean eig(V_tᵀ G V_t) / λ₁", "overlap_t with V_{t−τ}"))
    for rid, grp, st in _runs(runs):
        line = {"color": st["color"], "dash": st["dash"], "width": st["width"]}
        fig.add_trace(go.Scatter(x=grp["step"], y=grp["mu_bar"], mode="lines+markers", name=rid, line=line,
                                 legendgroup=rid, marker={"size": 4}), 1, 1)
        if "mu_bar_fisher" in grp and grp["mu_bar_fisher"].notna().any():
            f = grp.dropna(subset=["mu_bar_fisher"])
            fig.add_trace(go.Scatter(x=f["step"], y=f["mu_bar_fisher"], mode="markers", name=f"{rid} (Fisher)",
                                     marker={"color": st["color"], "symbol": "diamond-open", "size": 8},
                                     legendgroup=rid, showlegend=False), 1, 1)
        fig.add_trace(go.Scatter(x=grp["step"], y=grp["overlap"], mode="lines+markers", name=rid, line=line,
                                 legendgroup=rid, showlegend=False, marker={"size": 4}), 2, 1)
    for row in changepoints[changepoints["accepted"].astype(bool)].itertuples(index=False):
        fig.add_vline(x=row.t_star, line={"color": "black", "dash": "dash"})
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_layout(height=620)
    return fig


def matrices(mats: pd.DataFrame) -> go.Figure:
    """Per-matrix relative Frobenius change ||W - W_0||_F / ||W_0||_F at the last log of each run."""
    last = mats.sort_values("step").groupby(["run_id", "matrix"], sort=False).last().reset_index()
    fig = go.Figure()
    for name, grp in last.groupby("matrix", sort=False):
        fig.add_trace(go.Bar(x=grp["run_id"], y=grp["rel_frob"], name=name,
                             customdata=grp["stable_rank"],
                             hovertemplate="%{x}<br>rel. change %{y:.2e}<br>stable rank %{customdata:.2f}"
                                           "<extra></extra>"))
    fig.update_layout(barmode="group", title="Per-matrix relative change at the end of each run",
                      yaxis_title="‖ΔW‖_F / ‖W₀‖_F", height=380)
    return fig


def timings_table(timings: Mapping[str, float]) -> pd.DataFrame:
    """The manifest's wall-clock figures as a two-column table (overhead first)."""
    order = ["probe_overhead_ratio", "overhead_on_s", "overhead_off_s", "stiff_setup_s", "cache_s", "synthetic_s",
             "seconds_total"]
    keys = [k for k in order if k in timings] + sorted(k for k in timings if k not in order)
    return pd.DataFrame({"timing": keys, "value": [timings[k] for k in keys]})


def headline(run) -> go.Figure:
    """The figure a run shows in a notebook next to its metrics (`interp.Run._repr_html_`)."""
    names = {f.removesuffix(".parquet") for f in run.manifest.get("files", {})}
    curve = run.table("curve_fit") if "curve_fit" in names else None
    sigma = float(curve["sigma_res"].iloc[0]) if curve is not None and len(curve) else None
    return collapse(run.table("runs"), curve, sigma)
