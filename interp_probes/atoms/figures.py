"""Atoms figures: the probe's tables in, Plotly figures out (no Streamlit).

Artifacts (interp_probes/atoms): ``angles`` (hook, pair_id, euclid_deg, aip_deg, aip_centered_deg),
``spectrum`` (hook, metric, rank, eigval, top_dim), ``units`` (one row per unit type),
``support_stats`` (unit, sample_id, K, mu), ``q_curve`` (unit, q, K_q, mu_q, bound), ``grid``
(d_sae, n_train, R² train/held-out, memorization_gap, l0_mean, knee), ``synthetic``, and the
TSAE atom tables (``tsae_latents``, ``tsae_top_contexts``, ``tsae_acts``, ``tsae_logits``, ``tsae_neighbors``).
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp_app.figures import DIVERGING, LABEL_GAP, plot_height, spread, token_label

UNIT_ORDER = ["neurons", "sae", "tsae"]
UNIT_NAMES = {"neurons": "neurons (identity)", "sae": "SAE features (Euclid)", "tsae": "TSAE atoms (AIP)"}
ANGLE_NAMES = {"euclid_deg": "Euclidean", "aip_deg": "AIP (uncentred)", "aip_centered_deg": "AIP (centred)"}


def angle_histogram(angles: pd.DataFrame, hook: str) -> go.Figure:
    """Overlaid histograms of the pair angles at one site, with a dashed line at 90°."""
    sub = angles[angles["hook"] == hook]
    fig = go.Figure()
    for col, name in ANGLE_NAMES.items():
        if col in sub:
            fig.add_trace(go.Histogram(x=sub[col], name=name, opacity=0.55, nbinsx=120,
                                       histnorm="probability density"))
    fig.add_vline(x=90, line_dash="dash", line_color="black")
    fig.update_layout(barmode="overlay", xaxis_title="angle between random held-out tokens (degrees)",
                      yaxis_title="density", title=f"Representation shift at {hook}", legend_title="geometry")
    return fig


def spectrum_figure(spectrum: pd.DataFrame, hook: str, metric: str = "uncentered") -> go.Figure:
    """Eigenvalues of M2 (or the covariance) on a log scale, with the massive directions annotated."""
    sub = spectrum[(spectrum["hook"] == hook) & (spectrum["metric"] == metric)].sort_values("rank")
    vals = np.clip(sub["eigval"].to_numpy(dtype=float), 1e-12, None)
    fig = go.Figure(go.Scatter(x=sub["rank"], y=vals, mode="lines+markers", marker={"size": 3}, name="eigenvalue"))
    name = "second moment M2" if metric == "uncentered" else "covariance"
    logs = np.log10(vals) if len(vals) else np.zeros(1)
    pad = 0.05 * (float(logs.max() - logs.min()) or 1.0)
    y_range = [float(logs.min()) - pad, float(logs.max()) + pad]
    fig.update_layout(yaxis_type="log", yaxis_range=y_range, xaxis_title="eigenvalue rank", yaxis_title="eigenvalue",
                      title=f"Spectrum of the {name} at {hook}", height=450, margin={"t": 60, "b": 60})
    # the massive directions of the leading ranks sit a pixel or two apart: their labels go in a column right of
    # the points, pushed apart (`spread`), each with an arrow to its point
    marked = [(r, float(np.log10(v)), int(dim)) for r, v, dim in zip(sub["rank"], vals, sub["top_dim"]) if dim >= 0]
    h = plot_height(fig)
    px = [(y - y_range[0]) / (y_range[1] - y_range[0]) * h for _, y, _ in marked]
    for (r, y, dim), p, q in zip(marked, px, spread(px, LABEL_GAP, 0, h)):
        fig.add_annotation(x=r, y=y, text=f"dim {dim}", showarrow=True, arrowhead=2, arrowwidth=1, ax=60,
                           ay=p - q, xanchor="left", font={"size": 11})
    return fig


def units_bars(units: pd.DataFrame) -> go.Figure:
    """Grouped bars of held-out R²_AIP, R²_Euclid and q* for each unit type (L0 in the labels)."""
    u = units.set_index("unit").reindex([x for x in UNIT_ORDER if x in set(units["unit"])])
    labels = [f"{UNIT_NAMES.get(i, i)}<br>L0 {u.loc[i, 'l0_mean']:.1f}" for i in u.index]
    fig = go.Figure()
    for col, name in (("r2_aip_heldout", "R² (AIP)"), ("r2_euclid_heldout", "R² (Euclid)"), ("q_star", "q*")):
        fig.add_trace(go.Bar(x=labels, y=u[col], name=name, text=[f"{v:.3f}" for v in u[col]], textposition="outside"))
    low = min(0.0, float(u[["r2_aip_heldout", "r2_euclid_heldout"]].min().min()))
    fig.update_layout(barmode="group", yaxis_range=[low, 1.1],
                      title="Faithfulness and stability by unit type (held-out)")
    return fig


def units_table(units: pd.DataFrame) -> pd.DataFrame:
    """The unit-type comparison as a display table."""
    cols = {"r2_aip_heldout": "R² AIP (held-out)", "r2_aip_train": "R² AIP (train)",
            "r2_euclid_heldout": "R² Euclid (held-out)", "q_star": "q*", "unique_frac": "unique frac",
            "l0_mean": "L0 mean", "l0_median": "L0 median", "l0_train_calibrated": "L0 train (calibrated)",
            "frac_k0": "frac K=0", "dead_frac": "dead frac"}
    u = units.set_index("unit").reindex([x for x in UNIT_ORDER if x in set(units["unit"])])
    out = u[[c for c in cols if c in u]].rename(columns=cols)
    out.index = [UNIT_NAMES.get(i, i) for i in out.index]
    return out


def support_scatter(support: pd.DataFrame, max_points: int = 4000) -> go.Figure:
    """K_i against local coherence mu_i per unit type, with the uniqueness boundary mu = 1/(2K - 1)."""
    fig = go.Figure()
    kmax = 1
    for unit in [u for u in UNIT_ORDER if u in set(support["unit"])]:
        sub = support[support["unit"] == unit]
        if len(sub) > max_points:
            sub = sub.sample(max_points, random_state=0)
        kmax = max(kmax, int(sub["K"].max()))
        jitter = np.random.default_rng(0).uniform(-0.2, 0.2, len(sub))
        fig.add_trace(go.Scattergl(x=sub["K"] + jitter, y=sub["mu"], mode="markers", name=UNIT_NAMES.get(unit, unit),
                                   marker={"size": 3, "opacity": 0.4}))
    k = np.arange(1, kmax + 1)
    fig.add_trace(go.Scatter(x=k, y=1 / (2 * k - 1), mode="lines", name="μ = 1/(2K−1)",
                             line={"dash": "dash", "color": "black"}))
    fig.update_layout(xaxis_type="log", xaxis_title="support size K (log)", yaxis_title="local coherence μ",
                      title="Support and local coherence (co-active atoms only)")
    return fig


def q_curves(curve: pd.DataFrame, units: pd.DataFrame) -> go.Figure:
    """K_q and mu_q against q per unit type, with the bound and q* marked."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("support quantile K_q", "coherence quantile μ_q vs bound"))
    qstar = units.set_index("unit")["q_star"].to_dict()
    for i, unit in enumerate([u for u in UNIT_ORDER if u in set(curve["unit"])]):
        sub = curve[curve["unit"] == unit]
        colour = ["#636efa", "#ef553b", "#00cc96"][i % 3]
        name = UNIT_NAMES.get(unit, unit)
        fig.add_trace(go.Scatter(x=sub["q"], y=sub["K_q"], name=name, line={"color": colour}, legendgroup=unit), 1, 1)
        fig.add_trace(go.Scatter(x=sub["q"], y=sub["mu_q"], name=name, line={"color": colour}, legendgroup=unit,
                                 showlegend=False), 1, 2)
        fig.add_trace(go.Scatter(x=sub["q"], y=sub["bound"], line={"color": colour, "dash": "dot"}, legendgroup=unit,
                                 showlegend=False, name=f"{name} bound"), 1, 2)
        q = qstar.get(unit)
        if q is not None and q > 0:
            fig.add_vline(x=q, line_color=colour, line_dash="dash", row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title_text="q")
    fig.update_layout(title="q* = largest q with μ_q < 1/(2K_q − 1) (dashed)")
    return fig


GRID_VIEWS = {"r2_aip_heldout": "held-out R² (AIP)", "r2_aip_train": "train R² (AIP)",
              "memorization_gap": "memorisation gap (train − held-out R²)"}


def grid_heatmap(grid: pd.DataFrame, value: str = "r2_aip_heldout") -> go.Figure:
    """(n_train x d_sae) heatmap of a grid column, annotated with L0, knees marked with a star."""
    piv = grid.pivot(index="n_train", columns="d_sae", values=value).sort_index()
    l0 = grid.pivot(index="n_train", columns="d_sae", values="l0_mean").reindex_like(piv)
    knee = grid.pivot(index="n_train", columns="d_sae", values="knee").reindex_like(piv).fillna(False)
    text = [[f"{v:.3f}<br>L0 {n:.1f}{' ★' if k else ''}" for v, n, k in zip(vr, lr, kr)]
            for vr, lr, kr in zip(piv.to_numpy(), l0.to_numpy(), knee.to_numpy())]
    x = [f"d={c}" for c in piv.columns]
    y = [f"n={r:,}" for r in piv.index]
    kwargs = {"colorscale": DIVERGING, "zmid": 0} if value == "memorization_gap" else {"colorscale": "Viridis"}
    fig = go.Figure(go.Heatmap(z=piv.to_numpy(), x=x, y=y, text=text, texttemplate="%{text}", **kwargs))
    fig.update_layout(title=f"Capacity × data: {GRID_VIEWS.get(value, value)} (★ knee: smallest d ≥ 0.95 × row max)",
                      xaxis_title="dictionary size d_sae", yaxis_title="training tokens n")
    return fig


def synthetic_table(synth: pd.DataFrame) -> pd.DataFrame:
    cols = ["d_sae", "n_train", "recovery", "r2_aip", "r2_aip_train", "q_star", "l0", "l0_median", "dead_frac",
            "best_cos_median"]
    return synth[[c for c in cols if c in synth]]


def coherence_histogram(support: pd.DataFrame) -> go.Figure:
    """Per-sample local coherence mu_i of each unit type (co-active atoms only)."""
    fig = go.Figure()
    for unit in [u for u in UNIT_ORDER if u in set(support["unit"])]:
        sub = support[(support["unit"] == unit) & (support["K"] >= 2)]
        fig.add_trace(go.Histogram(x=sub["mu"], name=UNIT_NAMES.get(unit, unit), opacity=0.6, nbinsx=80,
                                   histnorm="probability"))
    fig.update_layout(barmode="overlay", xaxis_title="local coherence μᵢ (max |cos_AIP| among co-active units)",
                      yaxis_title="fraction of samples (K ≥ 2)", title="Local coherence per sample")
    return fig


def activation_histogram(acts: pd.DataFrame, latent: int) -> go.Figure:
    sub = acts[acts["latent"] == latent]
    fig = go.Figure(go.Histogram(x=sub["act"], nbinsx=60))
    fig.update_layout(title=f"Latent {latent}: held-out activations (when active)", xaxis_title="activation",
                      yaxis_title="count", height=300)
    return fig


def context_html(row: pd.Series) -> str:
    """One top-activating context as HTML with the max token highlighted."""
    toks = list(row["context"])
    c = int(row["center"])
    parts = []
    for i, t in enumerate(toks):
        label = html.escape(token_label(t, 24, escape=False))
        if i == c:
            parts.append(f"<b style='background:#ffd54f'>{label}</b>")
        else:
            parts.append(label)
    return " ".join(parts) + f" &nbsp; <span style='color:#888'>({row['act']:.2f})</span>"


def headline(run) -> go.Figure:
    """The figure a run shows in a notebook next to its metrics (`interp.Run._repr_html_`)."""
    return units_bars(run.table("units"))
