"""jlens figures: the run's tables in, Plotly figures out (pure; the page and notebooks draw them).

Artifacts (interp_probes/jlens/probe.py): ``grid.parquet`` (lens, layer, position, k, token, prob) and
``grid_tokens.parquet`` (position, token): the readout of one two-hop prompt; ``quality.parquet`` one row per
(lens, layer) with kl, topk_acc, kurtosis, autocorr (+ _null, _null_q95), eff_dim, bridge_pass (+ _lo, _hi);
``cka.safetensors`` the Jacobian lens's layer-by-layer CKA; ``effects.parquet`` (experiment, method, measure, mean,
lo, hi, n).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp_app.figures import token_label, token_labels

LENS_COLOURS = {"logit": "#1f77b4", "tuned": "#2ca02c", "jacobian": "#d62728", "random": "#7f7f7f",
                "model": "#000000"}
LENS_NAMES = {"logit": "logit lens", "tuned": "tuned lens", "jacobian": "Jacobian lens", "random": "random"}


def readout_grid(grid: pd.DataFrame, tokens: Sequence[str], lens: str) -> go.Figure:
    """Layers down, positions across: each cell the lens's top-1 token, its probability as colour, the top-5 on
    hover."""
    g = grid[grid["lens"] == lens]
    layers = sorted(g["layer"].unique())
    n_pos = len(tokens)
    prob = np.full((len(layers), n_pos), np.nan)
    text = np.full((len(layers), n_pos), "", dtype=object)
    hover = np.full((len(layers), n_pos), "", dtype=object)
    row_of = {layer: i for i, layer in enumerate(layers)}
    for (layer, pos), cell in g.sort_values("k").groupby(["layer", "position"], sort=False):
        i = row_of[layer]
        prob[i, pos] = float(cell["prob"].iloc[0])
        text[i, pos] = token_label(cell["token"].iloc[0], 10)
        hover[i, pos] = "<br>".join(f"{token_label(t, 20)}: {p:.3f}" for t, p in zip(cell["token"], cell["prob"]))
    labels = token_labels(tokens, 12)
    fig = go.Figure(go.Heatmap(
        z=prob, x=list(range(n_pos)), y=layers, text=text, texttemplate="%{text}", textfont={"size": 9},
        customdata=hover, colorscale="Blues", zmin=0.0, zmax=1.0, xgap=1, ygap=1,
        colorbar={"title": {"text": "top-1 p"}},
        hovertemplate="layer %{y}, position %{x}<br>%{customdata}<extra></extra>"))
    fig.update_layout(title=f"{LENS_NAMES.get(lens, lens)} readout (top-1 per cell; top-5 on hover)",
                      height=max(300, 22 * len(layers) + 120),
                      xaxis={"tickvals": list(range(n_pos)), "ticktext": labels, "tickangle": -45},
                      yaxis={"title": "layer", "autorange": "reversed", "dtick": 1})
    return fig


def quality_curves(quality: pd.DataFrame, top_k: int = 10) -> go.Figure:
    """Per layer, each lens: next-token KL to the model, top-k accuracy, bridge-entity pass@k (Wilson 95 %)."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=("next-token KL to the model (nats)",
                                                        f"next-token top-{top_k} accuracy",
                                                        f"bridge entity pass@{top_k} (two-hop)"))
    for lens, q in quality.groupby("lens", sort=False):
        q = q.sort_values("layer")
        c = LENS_COLOURS.get(lens)
        name = LENS_NAMES.get(lens, lens)
        fig.add_trace(go.Scatter(x=q["layer"], y=q["kl"], name=name, legendgroup=lens, line={"color": c}), 1, 1)
        fig.add_trace(go.Scatter(x=q["layer"], y=q["topk_acc"], name=name, legendgroup=lens, showlegend=False,
                                 line={"color": c}), 1, 2)
        fig.add_trace(go.Scatter(
            x=q["layer"], y=q["bridge_pass"], name=name, legendgroup=lens, showlegend=False, line={"color": c},
            error_y={"type": "data", "symmetric": False, "array": q["bridge_hi"] - q["bridge_pass"],
                     "arrayminus": q["bridge_pass"] - q["bridge_lo"], "thickness": 1}), 1, 3)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title_text="layer")
    fig.update_layout(height=380, legend={"orientation": "h", "y": -0.25})
    return fig


def workspace_stats(quality: pd.DataFrame, band: tuple[int, int] | None, lens: str = "jacobian") -> go.Figure:
    """The four workspace statistics of one lens per layer, the band shaded."""
    q = quality[quality["lens"] == lens].sort_values("layer")
    fig = make_subplots(rows=1, cols=4, subplot_titles=("top-k accuracy", "excess kurtosis of the logits",
                                                        "top-1 autocorrelation", "effective dim of W_U J_l"))
    c = LENS_COLOURS.get(lens)
    fig.add_trace(go.Scatter(x=q["layer"], y=q["topk_acc"], name="top-k accuracy", line={"color": c}), 1, 1)
    fig.add_trace(go.Scatter(x=q["layer"], y=q["kurtosis"], name="kurtosis", line={"color": c}), 1, 2)
    fig.add_trace(go.Scatter(x=q["layer"], y=q["autocorr"], name="observed", line={"color": c}), 1, 3)
    fig.add_trace(go.Scatter(x=q["layer"], y=q["autocorr_null_q95"], name="shuffled null (95th pct)",
                             line={"color": "gray", "dash": "dot"}), 1, 3)
    fig.add_trace(go.Scatter(x=q["layer"], y=q["eff_dim"], name="participation ratio", line={"color": c}), 1, 4)
    if band is not None:
        for col in range(1, 5):
            fig.add_vrect(x0=band[0] - 0.5, x1=band[1] + 0.5, fillcolor="gold", opacity=0.25, line_width=0,
                          row=1, col=col)
    fig.update_xaxes(title_text="layer")
    fig.update_layout(height=360, showlegend=False,
                      title=f"workspace statistics ({LENS_NAMES.get(lens, lens)}); band: "
                            + ("none" if band is None else f"layers {band[0]}-{band[1]}"))
    return fig


def cka_heatmap(cka: np.ndarray, band: tuple[int, int] | None) -> go.Figure:
    """Layer-by-layer linear CKA of the Jacobian lens's matrices."""
    fig = go.Figure(go.Heatmap(z=np.asarray(cka), colorscale="Viridis", zmin=0.0, zmax=1.0,
                               hovertemplate="layers %{y} and %{x}: CKA %{z:.3f}<extra></extra>"))
    if band is not None:
        fig.add_shape(type="rect", x0=band[0] - 0.5, x1=band[1] + 0.5, y0=band[0] - 0.5, y1=band[1] + 0.5,
                      line={"color": "gold", "width": 2})
    fig.update_layout(title="CKA of the lens matrices J_l", height=420, xaxis={"title": "layer"},
                      yaxis={"title": "layer", "autorange": "reversed"})
    return fig


EFFECT_TITLES = {("steer", "dlogp"): "steering: change of log p(token) at the output",
                 ("swap", "dlogodds"): "swap: change of log-odds target answer vs source answer",
                 ("ablate", "kl"): "ablation: KL(original || ablated) at the output"}


def effects_figure(effects: pd.DataFrame) -> go.Figure:
    """Each intervention's mean effect per method (lens directions against random) with 95 % bootstrap intervals."""
    keys = [k for k in EFFECT_TITLES if ((effects["experiment"] == k[0]) & (effects["measure"] == k[1])).any()]
    fig = make_subplots(rows=1, cols=max(1, len(keys)), subplot_titles=[EFFECT_TITLES[k] for k in keys] or [""])
    for col, (exp, measure) in enumerate(keys, start=1):
        e = effects[(effects["experiment"] == exp) & (effects["measure"] == measure)]
        fig.add_trace(go.Bar(
            x=[LENS_NAMES.get(m, m) for m in e["method"]], y=e["mean"],
            marker_color=[LENS_COLOURS.get(m, "gray") for m in e["method"]],
            error_y={"type": "data", "symmetric": False, "array": e["hi"] - e["mean"],
                     "arrayminus": e["mean"] - e["lo"]},
            customdata=e["n"], hovertemplate="%{x}: %{y:.3f} (n=%{customdata})<extra></extra>", showlegend=False),
            1, col)
    fig.update_layout(height=380, title="interventions at layer "
                      + (str(int(effects["layer"].iloc[0])) if len(effects) else "-"))
    return fig


def band_of(metrics: dict) -> tuple[int, int] | None:
    first, last = metrics.get("band_first"), metrics.get("band_last")
    return None if first is None or last is None else (int(first), int(last))


def headline(run) -> go.Figure:
    """The run's notebook figure: the three lenses' quality curves."""
    return quality_curves(run.table("quality"), int(run.config.get("top_k", 10)))
