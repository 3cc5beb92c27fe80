"""Graph-sawtooth figures: the probe's tables and ROI maps in, Plotly figures out.

Artifacts (interp_probes/graph_sawtooth): ``layer_scores`` (per layer: concentration, AUC and their
nulls, sink mass, entropy, set membership), ``null_draws`` (draw x layer null scores),
``head_scores``, ``selection.json`` (S_score, S_ent with the entropy series and peaks, S),
``roi_maps`` (raw / binary / template ROI maps of a few samples), ``gamma_sweep``, ``eval``.
The plain AUC is not the paper's metric: every figure that shows it says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp_app.figures import head_label, modebar_room, numeric_axis, token_labels

SET_COLOURS = {"S_score": "rgba(31,119,180,0.10)", "S_ent": "rgba(255,127,14,0.12)", "S": "rgba(44,160,44,0.22)"}
#: The gap between the ROI maps (a fraction of the figure's width): room for the first map's colour bar.
ROI_GAP = 0.07
CONDITIONS = {"base": "base (γ = 1)", "slash": "SLASH on S", "random_s": "SLASH on random layers"}


def _runs(layers: Sequence[int]) -> list[tuple[int, int]]:
    """Contiguous runs [lo, hi] of sorted layer indices."""
    out: list[tuple[int, int]] = []
    for layer in sorted(int(x) for x in layers):
        if out and layer == out[-1][1] + 1:
            out[-1] = (out[-1][0], layer)
        else:
            out.append((layer, layer))
    return out


#: Pixels between two stacked labels at the top of a panel (a 10-11 px font with its padding).
LANE_PX = 16


def _shade_sets(fig: go.Figure, sets: dict[str, Sequence[int]], rows: Sequence[int] | None = None,
                first_lane: int = 0) -> None:
    """Shade each set's layers (on every row in `rows`) and name each set once, on the top panel, in a lane of its
    own (`_lane_label`): set labels that start on the same layer no longer print over one another."""
    axes = [("x", "y")] if rows is None else [
        (sp.xaxis.plotly_name.replace("axis", ""), sp.yaxis.plotly_name.replace("axis", ""))
        for sp in (fig.get_subplot(r, 1) for r in rows)]
    shapes = []  # built as dicts and added at once: add_vrect(row=...) per run and row took 4.5 s on a busy core
    for lane, (name, layers) in enumerate(sets.items(), start=first_lane):
        for lo, hi in _runs(layers):
            shapes += [{"type": "rect", "xref": x, "yref": f"{y} domain", "x0": lo - 0.5, "x1": hi + 0.5, "y0": 0,
                        "y1": 1, "fillcolor": SET_COLOURS[name], "line": {"width": 0}, "layer": "below"}
                       for x, y in axes]
        if len(layers):
            _lane_label(fig, min(int(x) for x in layers) - 0.5, name, lane)
    fig.update_layout(shapes=[*fig.layout.shapes, *shapes])


def _lane_label(fig: go.Figure, x: float, text: str, lane: int, colour: str = "#333") -> None:
    """A label at layer `x` (its left edge there) in lane `lane` from the top of the first panel: lane k sits
    k * LANE_PX pixels below the top, so labels in different lanes never overlap wherever their layers fall."""
    fig.add_annotation(x=x, xref="x", y=1, yref="y domain", yanchor="top", xanchor="left", yshift=-LANE_PX * lane,
                       text=text, showarrow=False, font={"size": 10, "color": colour},
                       bgcolor="rgba(255,255,255,0.75)", borderpad=1)


def layer_strip(layers: pd.DataFrame, nulls: pd.DataFrame, l_star: int, sets: dict[str, Sequence[int]]) -> go.Figure:
    """Per layer: the concentration score (paper) with its null band, the plain AUC (not the
    paper's) with the distance-matched variant, its null band and the locality baseline, then sink
    mass and spectral entropy. Shaded: S_score, S_ent and S; l* marked."""
    lay = layers.sort_values("layer")
    x = lay["layer"].to_numpy()
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("Concentration score (paper) vs segment-shuffled null",
                                        "Plain AUC (not the paper's metric) vs null and recency",
                                        "Attention sink and spectral entropy"),
                        specs=[[{}], [{}], [{"secondary_y": True}]])
    band = nulls.groupby("layer").agg(c_lo=("concentration_null", lambda v: np.percentile(v, 5)),
                                      c_hi=("concentration_null", lambda v: np.percentile(v, 95))).reindex(x)
    _band(fig, x, band["c_lo"].to_numpy(), band["c_hi"].to_numpy(), "null 5-95 %", 1)
    fig.add_trace(go.Scatter(x=x, y=lay["concentration"], mode="lines+markers", name="concentration"), row=1, col=1)
    lo = (lay["auc_null"] - 2 * lay["auc_null_sd"]).to_numpy()
    hi = (lay["auc_null"] + 2 * lay["auc_null_sd"]).to_numpy()
    _band(fig, x, lo, hi, "null AUC ± 2 sd", 2)
    fig.add_trace(go.Scatter(x=x, y=lay["auc_null"], mode="lines", name="null AUC",
                             line={"dash": "dot", "color": "grey"}), row=2, col=1)
    fig.add_trace(go.Scatter(x=x, y=lay["auc"], mode="lines+markers", name="AUC"), row=2, col=1)
    fig.add_trace(go.Scatter(x=x, y=lay["auc_distmatched"], mode="lines+markers", name="AUC, distance-matched"),
                  row=2, col=1)
    loc = float(lay["locality_auc"].iloc[0]) if len(lay) else np.nan
    if np.isfinite(loc):
        fig.add_hline(y=loc, line_dash="dash", line_color="black", row=2, col=1,
                      annotation_text=f"locality −(i−j): {loc:.3f}", annotation_position="bottom right")
    fig.add_trace(go.Scatter(x=x, y=lay["sink_mass"], mode="lines+markers", name="sink mass"), row=3, col=1)
    fig.add_trace(go.Scatter(x=x, y=lay["entropy"], mode="lines+markers", name="spectral entropy",
                             line={"dash": "dot"}), row=3, col=1, secondary_y=True)
    for r in (1, 2, 3):
        fig.add_vline(x=l_star, line_color="crimson", line_width=1, row=r, col=1)
    _lane_label(fig, l_star, f"l* = {l_star}", 0, "crimson")
    _shade_sets(fig, sets, rows=(1, 2, 3), first_lane=1)
    fig.update_xaxes(title_text="layer", row=3, col=1)
    fig.update_yaxes(title_text="score", row=1, col=1)
    fig.update_yaxes(title_text="AUC", row=2, col=1)
    fig.update_yaxes(title_text="sink mass", row=3, col=1)
    fig.update_yaxes(title_text="entropy (nats)", row=3, col=1, secondary_y=True)
    fig.update_layout(height=820, legend={"orientation": "h", "y": -0.08}, margin={"t": 40})
    return modebar_room(fig)


def _band(fig: go.Figure, x, lo, hi, name: str, row: int) -> None:
    fig.add_trace(go.Scatter(x=x, y=hi, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip"),
                  row=row, col=1)
    fig.add_trace(go.Scatter(x=x, y=lo, mode="lines", line={"width": 0}, fill="tonexty",
                             fillcolor="rgba(128,128,128,0.25)", name=name), row=row, col=1)


def excess_plot(layers: pd.DataFrame, threshold: float, l_star: int) -> go.Figure:
    """AUC − null AUC per layer (plain AUC, not the paper's) against the selection-matched
    threshold max(0.05, auc_excess_q95)."""
    lay = layers.sort_values("layer")
    exc = (lay["auc"] - lay["auc_null"]).to_numpy()
    colours = ["crimson" if int(x) == l_star else "steelblue" for x in lay["layer"]]
    fig = go.Figure(go.Bar(x=lay["layer"], y=exc, marker_color=colours, name="AUC − null AUC"))
    fig.add_hline(y=threshold, line_dash="dash", line_color="black")  # named in the title, not over the bars
    fig.add_hline(y=0, line_color="grey", line_width=1)
    fig.update_layout(title="Excess of the plain AUC over its segment-shuffled null (l* in red; dashed: the gate "
                            f"max(0.05, q95) = {threshold:.3f})",
                      xaxis_title="layer", yaxis_title="AUC − null AUC", height=320, margin={"t": 50})
    return modebar_room(fig)


def _segment_shapes(spans: Sequence[Sequence[int]], col: int) -> list[dict]:
    """Outlines of each segment's block (the sawtooth's triangles live inside them)."""
    xref, yref = ("x", "y") if col == 1 else (f"x{col}", f"y{col}")
    return [{"type": "rect", "xref": xref, "yref": yref, "x0": s - 0.5, "x1": e + 0.5, "y0": s - 0.5, "y1": e + 0.5,
             "line": {"color": "limegreen", "width": 1}} for s, e in spans]


def roi_panels(raw: np.ndarray, binary: np.ndarray, template: np.ndarray, tokens: Sequence[str],
               spans: Sequence[Sequence[int]], title: str = "") -> go.Figure:
    """Three ROI maps side by side: the raw head-mean attention (query rows, key columns, token
    labels, segment blocks outlined), the processed binary map and the template M."""
    r = raw.shape[0]
    labels = token_labels(tokens) if len(tokens) == r else [str(i) for i in range(r)]
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=ROI_GAP,
                        subplot_titles=("attention (head mean)", "binarised + closed", "template M"))
    hover = [[f"q {labels[i]} ({i}) → k {labels[j]} ({j})" for j in range(r)] for i in range(r)]
    # the first map's colour bar in the gap after it (the next maps hide their tick labels, which it would cover)
    right = fig.layout.xaxis.domain[1]
    fig.add_trace(go.Heatmap(z=raw, colorscale="Viridis", text=hover, hovertemplate="%{text}: %{z:.3f}<extra></extra>",
                             colorbar={"x": right + 0.005, "xanchor": "left", "len": 0.8, "thickness": 10,
                                       "tickfont": {"size": 9}}), row=1, col=1)
    fig.add_trace(go.Heatmap(z=binary.astype(float), colorscale="Greys", showscale=False, zmin=0, zmax=1), row=1, col=2)
    fig.add_trace(go.Heatmap(z=template.astype(float), colorscale="Greys", showscale=False, zmin=0, zmax=1),
                  row=1, col=3)
    shapes = []
    for col in (1, 2, 3):
        shapes += _segment_shapes(spans, col)
    fig.update_layout(shapes=shapes, height=480, title=title, margin={"t": 60})
    axis = numeric_axis(labels) if r <= 60 else {}
    for col in (1, 2, 3):
        fig.update_yaxes(autorange="reversed", row=1, col=col, scaleanchor=f"x{'' if col == 1 else col}",
                         showticklabels=col == 1, **(axis if col == 1 else {}))  # rows: the same queries as map 1
        fig.update_xaxes(row=1, col=col, tickangle=-90, tickfont_size=7, **(axis if col == 1 else {}))
    fig.update_yaxes(tickfont_size=7, row=1, col=1)
    return modebar_room(fig)



def slash_toggle_panels(base: np.ndarray, slashed: np.ndarray, spans, layer: int) -> go.Figure:
    """The ROI map one layer after S without and with SLASH on S (its change is the downstream effect)."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=(f"L{layer} base", f"L{layer} with SLASH on S", "difference"))
    fig.add_trace(go.Heatmap(z=base, colorscale="Viridis", showscale=False), row=1, col=1)
    fig.add_trace(go.Heatmap(z=slashed, colorscale="Viridis", showscale=False), row=1, col=2)
    diff = slashed - base
    bound = float(np.abs(diff).max()) or 1.0
    fig.add_trace(go.Heatmap(z=diff, colorscale="RdBu_r", zmid=0, zmin=-bound, zmax=bound), row=1, col=3)
    shapes = []
    for col in (1, 2, 3):
        shapes += _segment_shapes(spans, col)
    fig.update_layout(shapes=shapes, height=380, margin={"t": 50})
    for col in (1, 2, 3):
        fig.update_yaxes(autorange="reversed", row=1, col=col)
    return modebar_room(fig)


def head_grid(heads: np.ndarray, layer: int, spans=(), cols: int = 5) -> go.Figure:
    """Small multiples of one layer's heads over the ROI (CircuitsVis style), titled L{l}H{h}."""
    n = heads.shape[0]
    rows = int(np.ceil(n / cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[head_label(layer, h) for h in range(n)],
                        horizontal_spacing=0.02, vertical_spacing=0.08)
    for h in range(n):
        fig.add_trace(go.Heatmap(z=heads[h].astype(float), colorscale="Viridis", showscale=False),
                      row=h // cols + 1, col=h % cols + 1)
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(height=230 * rows, margin={"t": 40})
    return modebar_room(fig)


def head_heatmap(heads: pd.DataFrame, value: str = "auc_excess") -> go.Figure:
    """Layer x head grid of a per-head score (default: plain AUC − null AUC, not the paper's metric)."""
    grid = heads.pivot(index="layer", columns="head", values=value).sort_index()
    z = grid.to_numpy(dtype=float)
    kw: dict[str, Any] = {"colorscale": "RdBu_r", "zmid": 0} if value == "auc_excess" else {"colorscale": "Viridis"}
    text = [[head_label(layer, h) for h in grid.columns] for layer in grid.index]
    fig = go.Figure(go.Heatmap(z=z, x=list(grid.columns), y=list(grid.index), text=text,
                               hovertemplate="%{text}: %{z:.3f}<extra></extra>", **kw))
    fig.update_layout(xaxis_title="head", yaxis_title="layer", height=520, title=f"per-head {value}")
    return modebar_room(fig)


def entropy_panel(ent: dict) -> go.Figure:
    """The entropy series (raw, winsorised, smoothed), its peaks with prominence, and the chosen band."""
    raw = np.asarray(ent["raw"], float)
    x = np.arange(raw.size)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=raw, mode="markers", name="raw", marker={"color": "grey"}))
    fig.add_trace(go.Scatter(x=x, y=ent["winsorised"], mode="lines", name="winsorised (5-95 %)",
                             line={"dash": "dot"}))
    fig.add_trace(go.Scatter(x=x, y=ent["smoothed"], mode="lines", name="smoothed", line={"width": 3}))
    sm = np.asarray(ent["smoothed"], float)
    for p, pr in zip(ent.get("peaks", []), ent.get("prominences", [])):
        fig.add_annotation(x=p, y=sm[p], text=f"prom {pr:.3f}", showarrow=True, arrowhead=2)
    lo, hi = ent["band"]
    fig.add_vrect(x0=lo - 0.5, x1=hi + 0.5, fillcolor=SET_COLOURS["S_ent"], line_width=0,
                  annotation_text="S_ent" + (" (no peak: top 40 %)" if ent.get("no_peak_fallback") else ""))
    fig.update_layout(title="Spectral entropy of the head-mean attention, per layer", xaxis_title="layer",
                      yaxis_title="entropy (nats)", height=360, margin={"t": 50})
    return modebar_room(fig)


def gamma_curve(sweep: pd.DataFrame, gamma_best: float) -> go.Figure:
    """Calibration accuracy against gamma, per task and over tasks (gamma = 1 is the base model)."""
    fig = go.Figure()
    for task, g in sweep.groupby("task", sort=False):
        g = g.sort_values("gamma")
        width = 4 if task == "all" else 1.5
        fig.add_trace(go.Scatter(x=g["gamma"], y=g["acc_cal"], mode="lines+markers",
                                 name="mean over tasks" if task == "all" else task, line={"width": width}))
    fig.add_vline(x=gamma_best, line_dash="dash", line_color="crimson", annotation_text=f"γ_best = {gamma_best:g}")
    fig.update_layout(title="γ sweep on the calibration split (SLASH on S)", xaxis_title="γ (sink kept)",
                      yaxis_title="accuracy", yaxis_range=[-0.02, 1.02], height=360, margin={"t": 50})
    return modebar_room(fig)


def accuracy_bars(evals: pd.DataFrame) -> go.Figure:
    """Test accuracy (mean over tasks) of base, SLASH on S and SLASH on random layers (median over
    seeds, seeds as dots), with the bootstrap 95 % intervals."""
    allrows = evals[evals["task"] == "all"]
    fig = go.Figure()
    for cond, label in CONDITIONS.items():
        rows = allrows[allrows["condition"] == cond]
        if rows.empty:
            continue
        acc = float(np.median(rows["acc"]))
        lo, hi = rows.get("ci_lo", pd.Series([np.nan])).iloc[0], rows.get("ci_hi", pd.Series([np.nan])).iloc[0]
        err = None
        if pd.notna(lo) and pd.notna(hi):
            err = {"type": "data", "symmetric": False, "array": [max(hi - acc, 0)], "arrayminus": [max(acc - lo, 0)]}
        fig.add_trace(go.Bar(x=[label], y=[acc], error_y=err, name=label, showlegend=False))
        if cond == "random_s":
            fig.add_trace(go.Scatter(x=[label] * len(rows), y=rows["acc"], mode="markers", name="random seeds",
                                     marker={"color": "black", "size": 7}))
    fig.update_layout(title="Test accuracy, mean over tasks (95 % bootstrap intervals)", yaxis_title="accuracy",
                      yaxis_range=[0, 1.02], height=360, margin={"t": 50})
    return modebar_room(fig)


def task_bars(evals: pd.DataFrame) -> go.Figure:
    """Per-task test accuracy by condition (random layers: median over seeds)."""
    per = evals[evals["task"] != "all"].groupby(["condition", "task"], sort=False)["acc"].median().reset_index()
    fig = go.Figure()
    for cond, label in CONDITIONS.items():
        rows = per[per["condition"] == cond]
        if not rows.empty:
            fig.add_trace(go.Bar(x=rows["task"], y=rows["acc"], name=label))
    fig.update_layout(barmode="group", title="Test accuracy per task", yaxis_title="accuracy",
                      yaxis_range=[0, 1.02], height=340, margin={"t": 50})
    return modebar_room(fig)


CURVE_COLOURS = {"base": "#616161", "slash": "#c62828", "random_s": "#1565c0"}
CURVE_NAMES = {"base": "base model", "slash": "SLASH on S", "random_s": "SLASH on random layers"}


def gamma_response(curve: pd.DataFrame) -> go.Figure:
    """The graded study: test accuracy (left) and the mean change of the answer's margin over the best other
    candidate against the base model (right) per gamma, for base, SLASH on S and SLASH on random layers, with the
    bootstrap 95 % intervals as error bars (random layers: one line per seed)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("test accuracy", "Δ answer margin vs base (log-prob)"))
    for (cond, seed), g in curve.groupby(["condition", "seed"], sort=False):
        g = g.sort_values("gamma")
        name = CURVE_NAMES.get(cond, cond) + (f" (seed {seed})" if cond == "random_s" and seed else "")
        colour = CURVE_COLOURS.get(cond, "#000")
        hover = [f"layers {x or '—'}, flipped {f:.2f}" for x, f in zip(g["layers"], g["frac_flipped"])]
        fig.add_trace(go.Scatter(
            x=g["gamma"], y=g["acc"], mode="lines+markers", name=name, legendgroup=name, line={"color": colour},
            error_y={"type": "data", "symmetric": False, "array": g["acc_ci_hi"] - g["acc"],
                     "arrayminus": g["acc"] - g["acc_ci_lo"]}, hovertext=hover), row=1, col=1)
        fig.add_trace(go.Scatter(
            x=g["gamma"], y=g["margin_change"], mode="lines+markers", name=name, legendgroup=name, showlegend=False,
            line={"color": colour}, error_y={"type": "data", "symmetric": False,
                                             "array": g["margin_change_ci_hi"] - g["margin_change"],
                                             "arrayminus": g["margin_change"] - g["margin_change_ci_lo"]},
            hovertext=hover), row=1, col=2)
    fig.add_hline(y=0, line_dash="dot", line_color="#888", row=1, col=2)
    fig.update_xaxes(title_text="γ (sink mass kept)")
    fig.update_yaxes(range=[-0.02, 1.02], row=1, col=1)
    fig.update_layout(title="SLASH response over the γ grid (test split, 95 % bootstrap intervals)", height=400,
                      margin={"t": 70})
    return modebar_room(fig)


def headline(run) -> go.Figure:
    """The figure a run shows in a notebook next to its metrics (`interp.Run._repr_html_`)."""
    m = run.metrics
    sel = run.json("selection")
    l_star = int(m.get("best_layer", sel.get("l_star", 0)))
    return excess_plot(run.table("layer_scores"), max(0.05, m.get("auc_excess_q95") or 0.0), l_star)
