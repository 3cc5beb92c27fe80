"""Keystone figures: artifacts of a keystone run in, Plotly figures out (no Streamlit).

Every function takes the tables / tensors as the store returns them (pandas frames, numpy arrays).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp_app.figures import DIVERGING, signed_range, token_labels
from interp_probes.keystone import NEURON_TYPES as TYPES

CONDITION_ORDER = ("base", "keystone", "random", "highnorm", "highnorm_top", "swap", "keystone_minus_massive",
                   "massive_only")
DECOMPOSITION = ("base", "massive_only", "keystone_minus_massive", "keystone")
COLOURS = {"base": "#4c72b0", "keystone": "#c44e52", "random": "#8c8c8c", "highnorm": "#dd8452",
           "highnorm_top": "#b5651d", "swap": "#8172b3", "keystone_minus_massive": "#da8bc3",
           "massive_only": "#55a868", "full": "#4c72b0", "mask_keystone": "#937860"}


# ----------------------------------------------------------------------------- selection (pure numpy)


def prompt_means(tensors: Mapping[str, np.ndarray], group: int = 1) -> dict[str, dict[str, np.ndarray]]:
    """prompt id -> type -> (layer, n) mean |act|, from mean_abs_act for one group."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, v in tensors.items():
        g, pid, t = key.split("/")
        if g == f"g{group}":
            out.setdefault(pid, {})[t] = np.asarray(v, dtype=np.float32)
    return out


# ----------------------------------------------------------------------------- set views


def count_heatmap(counts: pd.DataFrame, p: float, indices: Mapping[tuple[str, int], Sequence[int]] | None = None
                  ) -> go.Figure:
    """Keystone count per layer x type at p (from `cells`); hover lists the indices when given."""
    c = counts[np.isclose(counts["p"], p)]
    types = [t for t in TYPES if t in set(c["type"])]
    n_layers = int(c["layer"].max()) + 1 if len(c) else 0
    z = np.zeros((n_layers, len(types)))
    text = [["" for _ in types] for _ in range(n_layers)]
    for r in c.itertuples():
        j = types.index(r.type)
        z[r.layer, j] = r.n_intersection
        idx = list((indices or {}).get((r.type, int(r.layer)), []))
        shown = ", ".join(map(str, idx[:20])) + (" …" if len(idx) > 20 else "")
        text[r.layer][j] = f"{r.type} L{r.layer}: {r.n_intersection} of c={r.c} (overlap {r.overlap:.2f})" + (
            f"<br>indices: {shown}" if idx else "")
    fig = go.Figure(go.Heatmap(z=z, x=types, y=list(range(n_layers)), colorscale="Reds", zmin=0,
                               text=text, hovertemplate="%{text}<extra></extra>", colorbar={"title": "count"}))
    fig.update_layout(title=f"Keystone neurons per layer and type (p = {p:g})", xaxis_title="type",
                      yaxis_title="layer", height=max(320, 16 * n_layers + 120))
    return fig


def cell_indices(keystone: pd.DataFrame) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for r in keystone.itertuples():
        out.setdefault((r.type, int(r.layer)), []).append(int(r.index))
    return out


def prompt_columns(keystone: pd.DataFrame, prefix: str) -> list[str]:
    return [c for c in keystone.columns if c.startswith(prefix)]


def neuron_bars(row: pd.Series) -> go.Figure:
    """Mean |act| of one neuron per prompt, with its rank in each prompt as text."""
    cols = [c for c in row.index if c.startswith("mean_act_prompt_")]
    pids = [c[len("mean_act_prompt_"):] for c in cols]
    ranks = [row.get(f"rank_in_prompt_{p}") for p in pids]
    fig = go.Figure(go.Bar(x=pids, y=[row[c] for c in cols], text=[f"rank {int(r)}" for r in ranks],
                           marker_color=COLOURS["keystone"]))
    fig.update_layout(title=f"{row['type']} L{int(row['layer'])} #{int(row['index'])}: mean |act| per prompt",
                      xaxis_title="prompt", yaxis_title="mean |activation|", height=320)
    return fig


def cell_histogram(means: Mapping[str, Mapping[str, np.ndarray]], t: str, layer: int, index: int, c: int
                   ) -> go.Figure:
    """Mean |act| over the neuron's cell for every prompt, with each prompt's top-c cut-off (`c` from the run's
    cells table) and the neuron."""
    fig = go.Figure()
    for pid, m in means.items():
        v = m[t][layer]
        fig.add_trace(go.Histogram(x=v, name=pid, opacity=0.5, nbinsx=60))
        cut = np.sort(v)[::-1][c - 1]
        fig.add_vline(x=float(cut), line_dash="dash", line_width=1)
    first = next(iter(means.values()))[t][layer]
    fig.add_vline(x=float(first[index]), line_color=COLOURS["keystone"], line_width=2,
                  annotation_text=f"#{index}", annotation_position="top")
    fig.update_layout(barmode="overlay", title=f"{t} layer {layer}: mean |act| of the cell (dashed: top-c cut-offs)",
                      xaxis_title="mean |activation|", yaxis_title="neurons", yaxis_type="log", height=320)
    return fig


# ----------------------------------------------------------------------------- ablation


def ablation_ppl(ablation: pd.DataFrame) -> go.Figure:
    """Perplexity by condition on a log scale: one dot per seed and a median bar."""
    conds = [c for c in CONDITION_ORDER if c in set(ablation["condition"])]
    med = [float(ablation.loc[ablation.condition == c, "ppl"].median()) for c in conds]
    fig = go.Figure(go.Bar(x=conds, y=med, name="median", marker_color=[COLOURS.get(c, "#999") for c in conds],
                           opacity=0.6, text=[f"{v:.3g}" for v in med], textposition="outside"))
    for c in conds:
        rows = ablation[ablation.condition == c]
        fig.add_trace(go.Scatter(x=[c] * len(rows), y=rows["ppl"], mode="markers", showlegend=False,
                                 marker={"color": "black", "size": 7},
                                 text=[f"seed {s}" if pd.notna(s) else "" for s in rows["seed"]],
                                 hovertemplate="%{x} %{text}: %{y:.4g}<extra></extra>"))
    fig.update_layout(title="Perplexity by condition (log scale; dots: seeds, bar: median)", yaxis_type="log",
                      yaxis_title="perplexity", xaxis_title="condition", showlegend=False, height=380)
    return fig


def task_accuracy(ablation: pd.DataFrame) -> go.Figure:
    """Task-suite accuracy per task for the conditions that ran it."""
    rows = ablation[ablation["task_acc"].notna()]
    tasks = [c for c in ("task_acc", "task_acc_arith", "task_acc_capitals", "task_acc_sequences") if c in rows]
    fig = go.Figure()
    for r in rows.itertuples():
        label = r.condition + (f" (seed {int(r.seed)})" if pd.notna(r.seed) else "")
        fig.add_trace(go.Bar(x=[t.replace("task_acc_", "").replace("task_acc", "all") for t in tasks],
                             y=[getattr(r, t) for t in tasks], name=label,
                             marker_color=COLOURS.get(r.condition, "#999")))
    fig.update_layout(barmode="group", title="Task-suite accuracy", yaxis_title="accuracy", yaxis_range=[0, 1],
                      height=340)
    return fig


def p_sweep(sweep: pd.DataFrame, base_ppl: float | None = None) -> go.Figure:
    """Perplexity against p for the keystone set and one matched random set (log-log)."""
    s = sweep.sort_values("p")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=s["p"], y=s["ppl_keystone"], mode="lines+markers", name="keystone",
                             line={"color": COLOURS["keystone"]},
                             text=[f"{int(c)} neurons" for c in s["keystone_count"]],
                             hovertemplate="p=%{x}: %{y:.4g} (%{text})<extra></extra>"))
    fig.add_trace(go.Scatter(x=s["p"], y=s["ppl_random"], mode="lines+markers", name="random (seed 1)",
                             line={"color": COLOURS["random"]}))
    if base_ppl is not None:
        fig.add_hline(y=base_ppl, line_dash="dot", annotation_text="base")
    fig.update_layout(title="p sweep: perplexity after ablation", xaxis_type="log", yaxis_type="log",
                      xaxis_title="p (fraction kept per prompt, layer and type)", yaxis_title="perplexity", height=360)
    return fig


# ----------------------------------------------------------------------------- mechanism


def decomposition(ablation: pd.DataFrame) -> go.Figure:
    """Perplexity of base, massive writers only, keystone minus writers, and the whole keystone set."""
    conds = [c for c in DECOMPOSITION if c in set(ablation["condition"])]
    vals = [float(ablation.loc[ablation.condition == c, "ppl"].iloc[0]) for c in conds]
    n = [int(ablation.loc[ablation.condition == c, "n_ablated"].iloc[0]) for c in conds]
    fig = go.Figure(go.Bar(x=conds, y=vals, marker_color=[COLOURS[c] for c in conds],
                           text=[f"{v:.3g} ({k} zeroed)" for v, k in zip(vals, n)], textposition="outside"))
    fig.update_layout(title="How much of the collapse runs through the position-0 massive activation",
                      yaxis_type="log", yaxis_title="perplexity", height=360)
    return fig


def by_layer(sink: pd.DataFrame, column: str, conditions: Sequence[str], title: str, log: bool = False) -> go.Figure:
    """`column` (pos0_norm or sink_mass) against layer, one line per condition (seed 1 / no seed)."""
    fig = go.Figure()
    for c in conditions:
        rows = sink[(sink.condition == c) & (sink.seed.isna() | (sink.seed == 1))].sort_values("layer")
        if len(rows):
            fig.add_trace(go.Scatter(x=rows["layer"], y=rows[column], mode="lines+markers", name=c,
                                     line={"color": COLOURS.get(c, "#999")}))
    fig.update_layout(title=title, xaxis_title="layer", yaxis_title=column, yaxis_type="log" if log else "linear",
                      height=340)
    return fig


def token_strip(strip: pd.DataFrame) -> go.Figure:
    """Per-token loss change (keystone - base) for a few corpus sequences; RdBu centred at 0."""
    seqs = sorted(strip["seq"].unique())
    fig = make_subplots(rows=len(seqs), cols=1, vertical_spacing=0.08)
    z_all = strip["delta"].to_numpy()
    rng = signed_range(z_all)
    for i, s in enumerate(seqs):
        rows = strip[strip.seq == s].sort_values("pos")
        labels = token_labels(rows["token"].tolist(), 10)
        fig.add_trace(go.Heatmap(z=[rows["delta"].tolist()], x=list(range(len(rows))), y=[f"seq {s}"],
                                 text=[labels], texttemplate="%{text}", textfont={"size": 8}, colorscale=DIVERGING,
                                 zmid=0, **rng, showscale=i == 0, colorbar={"title": "ΔNLL"},
                                 hovertemplate="%{text}: Δ=%{z:.3f}<extra></extra>"), row=i + 1, col=1)
    fig.update_layout(title="Per-token loss change with the keystone set zeroed (red: worse)",
                      height=110 * len(seqs) + 80)
    return fig


# ----------------------------------------------------------------------------- stability, checks, SFT


def stability_matrix(stab: pd.DataFrame) -> go.Figure:
    groups = sorted(set(stab["group_a"]) | set(stab["group_b"]))
    k = len(groups)
    z = np.eye(k)
    chance = np.zeros((k, k))
    for r in stab.itertuples():
        a, b = groups.index(r.group_a), groups.index(r.group_b)
        z[a, b] = z[b, a] = r.iou
        chance[a, b] = chance[b, a] = r.iou_chance
    text = [[f"IoU {z[i, j]:.2f}" + (f"<br>chance {chance[i, j]:.4f}" if i != j else "") for j in range(k)]
            for i in range(k)]
    labels = [f"group {g}" for g in groups]
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, zmin=0, zmax=1, colorscale="Blues", text=text,
                               texttemplate="%{text}", hovertemplate="%{y} vs %{x}: %{text}<extra></extra>"))
    fig.update_layout(title="Keystone-set IoU across disjoint prompt groups", height=120 + 60 * k,
                      yaxis_autorange="reversed")
    return fig


def tf_error(tf: pd.DataFrame) -> go.Figure:
    types = [t for t in TYPES if t in set(tf["type"])]
    n_layers = int(tf["layer"].max()) + 1
    z = np.full((n_layers, len(types)), np.nan)
    for r in tf.itertuples():
        z[r.layer, types.index(r.type)] = r.max_rel_err
    fig = go.Figure(go.Heatmap(z=z, x=types, y=list(range(n_layers)), colorscale="Viridis",
                               hovertemplate="%{x} L%{y}: %{z:.2e}<extra></extra>",
                               colorbar={"title": "rel. err"}))
    fig.update_layout(title="Teacher-forced vs per-step recording: max|A_tf − A_step| / max|A_step|",
                      xaxis_title="type", yaxis_title="layer", height=max(320, 14 * n_layers + 120))
    return fig


def _lr_name(v: str, lr, many: bool) -> str:
    return f"{v} lr {lr:g}" if many else v


def sft_curves(curves: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    key = "run_lr" if "run_lr" in curves else None
    groups = curves.groupby(["variant", key] if key else ["variant"], sort=False)
    many = key is not None and curves[key].nunique() > 1
    for g_key, rows in groups:
        v, lr = (g_key if key else (g_key[0], None))
        rows = rows.sort_values("step")
        fig.add_trace(go.Scatter(x=rows["step"], y=rows["loss"], mode="lines", name=_lr_name(v, lr, many),
                                 line={"color": COLOURS.get(v, "#999")}))
    fig.update_layout(title="SFT loss (completion tokens)", xaxis_title="step", yaxis_title="loss", height=340)
    return fig


def gain_vs_forgetting(sft: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    many = "lr" in sft and sft["lr"].nunique() > 1
    for r in sft.itertuples():
        label = _lr_name(r.variant, getattr(r, "lr", None), many)
        fig.add_trace(go.Scatter(x=[r.gain], y=[r.ppl_ratio], mode="markers+text", name=label,
                                 text=[label], textposition="top center",
                                 marker={"size": 14, "color": COLOURS.get(r.variant, "#999")}))
    fig.add_hline(y=1.0, line_dash="dot")
    fig.add_vline(x=0.0, line_dash="dot")
    fig.update_layout(title="Gain vs forgetting (right and low is better)", xaxis_title="held-out accuracy gain",
                      yaxis_title="broad perplexity after / before", showlegend=False, height=360)
    return fig


def sft_lr_sweep(sft: pd.DataFrame) -> go.Figure:
    """Task gain (left) and broad perplexity ratio (right) against the learning rate, per variant (full: one lr)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("held-out accuracy gain", "broad perplexity after / before"))
    for v, g in sft.groupby("variant", sort=False):
        g = g.sort_values("lr")
        mode = "lines+markers" if len(g) > 1 else "markers"
        colour = COLOURS.get(v, "#999")
        fig.add_trace(go.Scatter(x=g["lr"], y=g["gain"], mode=mode, name=v, legendgroup=v, line={"color": colour},
                                 marker={"size": 10}), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["lr"], y=g["ppl_ratio"], mode=mode, name=v, legendgroup=v, showlegend=False,
                                 line={"color": colour}, marker={"size": 10}), row=1, col=2)
    fig.update_xaxes(type="log", title_text="learning rate")
    fig.add_hline(y=0.0, line_dash="dot", row=1, col=1)
    fig.add_hline(y=1.0, line_dash="dot", row=1, col=2)
    fig.update_layout(title="Learning-rate sweep (same steps, same data order)", height=380)
    return fig


def wilson(acc: pd.Series, n: int) -> tuple[pd.Series, pd.Series]:
    """95 % Wilson interval (low, high) of accuracies measured on n items each."""
    from scipy.stats import binomtest

    bounds = [binomtest(round(a * n), n).proportion_ci(method="wilson") for a in acc]
    return pd.Series([b.low for b in bounds], index=acc.index), pd.Series([b.high for b in bounds], index=acc.index)


def sft_progress(evals: pd.DataFrame, n_eval: int | None = None) -> go.Figure:
    """Held-out gain (left, with 95 % Wilson intervals of the accuracy when `n_eval` is known) and broad perplexity
    ratio (right) against the optimizer step, per (variant, lr)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("held-out accuracy gain", "broad perplexity after / before"))
    many = evals["lr"].nunique() > 1
    for (v, lr), g in evals.groupby(["variant", "lr"], sort=False):
        g = g.sort_values("step")
        name = _lr_name(v, lr, many)
        colour = COLOURS.get(v, "#999")
        err = None
        if n_eval:
            lo, hi = wilson(g["task_acc"], n_eval)
            err = {"type": "data", "symmetric": False, "array": hi - g["task_acc"], "arrayminus": g["task_acc"] - lo}
        fig.add_trace(go.Scatter(x=g["step"], y=g["gain"], mode="lines+markers", name=name, legendgroup=name,
                                 line={"color": colour}, error_y=err), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["step"], y=g["ppl_ratio"], mode="lines+markers", name=name, legendgroup=name,
                                 showlegend=False, line={"color": colour}), row=1, col=2)
    fig.update_xaxes(title_text="optimizer step")
    fig.update_layout(title="Gain and forgetting on the same steps", height=380)
    return fig


def headline(run) -> go.Figure:
    """The figure a run shows in a notebook next to its metrics (`interp.Run._repr_html_`)."""
    return ablation_ppl(run.table("ablation"))
