"""Figures of the conversational_inertia page: artifacts in, Plotly figures (or HTML) out."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from interp_app.figures import DIVERGING, head_label, numeric_axis, signed_range, token_label, token_labels

SEGMENT_COLOURS = {
    "system": "#7f7f7f", "user": "#1f77b4", "prev_assistant": "#d62728", "self": "#2ca02c", "other": "#bcbd22",
    "sink": "#000000", "recent_assistant": "#ff7f0e",
}
POLICY_NAMES = {"long": "Long", "window": "Window(W)", "last1": "Last1", "clip": "Clip(W)", "short": "Short"}


def head_heatmap(z: np.ndarray, title: str, threshold: float | None = None) -> go.Figure:
    """Layer x head heatmap of z-scores (diverging, centred at 0), heads labelled L{l}H{h}."""
    n_layers, n_heads = z.shape
    text = [[f"{head_label(layer, h)}<br>z = {z[layer, h]:.1f}" for h in range(n_heads)] for layer in range(n_layers)]
    fig = go.Figure(go.Heatmap(z=z, x=[f"H{h}" for h in range(n_heads)], y=[f"L{layer}" for layer in range(n_layers)],
                               colorscale=DIVERGING, zmid=0, **signed_range(z), text=text, hoverinfo="text",
                               colorbar={"title": "z"}))
    if threshold is not None:
        ls, hs = np.nonzero(z >= threshold)
        fig.add_trace(go.Scatter(x=[f"H{h}" for h in hs], y=[f"L{layer}" for layer in ls], mode="markers",
                                 marker={"symbol": "circle-open", "color": "black", "size": 9},
                                 name=f"z ≥ {threshold:g}", hoverinfo="skip"))
    fig.update_layout(title=title, height=max(320, 18 * n_layers + 120), yaxis={"autorange": "reversed"},
                      legend={"orientation": "h", "y": -0.08})
    return fig


def block_heatmap(block: np.ndarray, row_tokens: Sequence[str], col_tokens: Sequence[str], title: str) -> go.Figure:
    """The current reply (rows, destination) against an earlier reply (columns, source); the i = i
    diagonal is drawn as a dotted line."""
    n, m = block.shape
    fig = go.Figure(go.Heatmap(z=block, colorscale="Blues", zmin=0, colorbar={"title": "attn"},
                               hovertemplate="dest %{y}<br>src %{x}<br>%{z:.3f}<extra></extra>"))
    k = min(n, m)
    fig.add_trace(go.Scatter(x=[-0.5, k - 0.5], y=[-0.5, k - 0.5], mode="lines", showlegend=False,
                             line={"color": "red", "dash": "dot", "width": 1}, hoverinfo="skip"))
    fig.update_layout(
        title=title, height=max(360, 14 * n + 160),
        xaxis={**numeric_axis(token_labels(col_tokens, 10)), "title": "earlier reply (source)", "tickangle": -60},
        yaxis={**numeric_axis(token_labels(row_tokens, 10)), "title": "current reply (destination)",
               "autorange": "reversed"},
    )
    return fig


def reply_rows_heatmap(rows: np.ndarray, row_tokens: Sequence[str], key_tokens: Sequence[str],
                       segments: Sequence[str], title: str) -> go.Figure:
    """Attention of the reply rows to every key (sink excluded from the colour range), with segment bands."""
    z = rows.copy()
    z[:, 0] = np.nan  # the sink would wash out the scale
    fig = go.Figure(go.Heatmap(z=z, colorscale="Blues", zmin=0, colorbar={"title": "attn"},
                               hovertemplate="dest %{y}<br>key %{x}<br>%{z:.3f}<extra></extra>"))
    start = 0
    for pos in range(1, len(segments) + 1):
        if pos == len(segments) or segments[pos] != segments[start]:
            fig.add_shape(type="rect", x0=start - 0.5, x1=pos - 0.5, y0=-0.06, y1=-0.01, yref="paper",
                          fillcolor=SEGMENT_COLOURS.get(segments[start], "#ccc"), line={"width": 0})
            start = pos
    step = max(1, len(key_tokens) // 60)
    ticks = list(range(0, len(key_tokens), step))
    fig.update_layout(
        title=title, height=max(360, 14 * len(row_tokens) + 180),
        xaxis={"tickmode": "array", "tickvals": ticks, "ticktext": [token_label(key_tokens[i], 8) for i in ticks],
               "tickangle": -60, "title": "key (source); bands: segments"},
        yaxis={**numeric_axis(token_labels(row_tokens, 10)), "autorange": "reversed", "title": "reply token"},
    )
    return fig


def reply_rows_view(rows: np.ndarray, top: np.ndarray, tok: pd.DataFrame, max_keys: int = 160
                    ) -> tuple[np.ndarray, list[str], list[str]] | None:
    """The stored reply rows of every top head as CircuitsVis wants them: a square (heads, n, n) pattern over the n
    keys from the start of the most recent earlier reply (the block's columns) to the end of the current reply, at
    most the last `max_keys`, each reply row at its query position and the other rows empty; with its tokens and
    head names. The current reply is the bottom rows and the earlier reply the left columns, so the first screen
    shows the diagonal the probe measures. None when the stored shapes disagree."""
    rows = np.asarray(rows)  # (heads, rows, keys)
    pos = tok[tok.row >= 0].sort_values("row").position.to_numpy()  # query position of each reply row
    if rows.ndim != 3 or not len(pos) or len(pos) != rows.shape[1] or rows.shape[2] != len(tok):
        return None
    end = int(pos.max()) + 1
    cols = tok[tok.col >= 0].position
    start = max(int(cols.min()) if len(cols) else 0, end - max_keys)
    full = np.zeros((rows.shape[0], end - start, end - start), dtype=np.float32)  # (heads, q, k)
    keep = pos >= start
    full[:, pos[keep] - start, :] = rows[:, keep, start:end]
    tokens = tok.sort_values("position").token.tolist()[start:end]
    return full, tokens, [head_label(int(a), int(b)) for a, b in top]


def segment_legend() -> str:
    """Markdown of the segment colours."""
    return " ".join(f"<span style='color:{c}'>■</span> {s}" for s, c in SEGMENT_COLOURS.items())


def shares_by_n(shares: pd.DataFrame, layer: int | None = None) -> go.Figure:
    """Stacked area of the attention share of each partition segment against N (mean over transcripts)."""
    d = shares[(shares.kind == "normal") & shares.segment.isin(["system", "user", "prev_assistant", "self", "other"])]
    if layer is not None:
        d = d[d.layer == layer]
    per = d.groupby(["transcript_id", "N", "segment"]).share.mean().groupby(["N", "segment"]).mean().unstack()
    fig = go.Figure()
    for seg in ["system", "user", "prev_assistant", "self", "other"]:
        if seg in per:
            fig.add_trace(go.Scatter(x=per.index, y=per[seg], name=seg, stackgroup="one", mode="lines+markers",
                                     line={"color": SEGMENT_COLOURS[seg]}))
    where = "" if layer is None else f" (layer {layer})"
    fig.update_layout(title="Share of non-sink attention from the reply" + where,
                      xaxis={"title": "prior rounds N"}, yaxis={"title": "share", "range": [0, 1]}, height=380)
    return fig


def enrichment_by_n(shares: pd.DataFrame, layer: int | None = None) -> go.Figure:
    """Enrichment (share of attention / share of keys) of each segment against N; 1 = attention in
    proportion to the keys."""
    segs = ["system", "user", "prev_assistant", "recent_assistant"]
    d = shares[(shares.kind == "normal") & shares.segment.isin(segs)]
    if layer is not None:
        d = d[d.layer == layer]
    per = d.groupby(["transcript_id", "N", "segment"])[["share", "key_frac"]].mean()
    per["enrichment"] = per.share / per.key_frac
    per = per.groupby(["N", "segment"]).enrichment.mean().unstack()
    fig = go.Figure()
    for seg in per.columns:
        fig.add_trace(go.Scatter(x=per.index, y=per[seg], name=seg, mode="lines+markers",
                                 line={"color": SEGMENT_COLOURS.get(seg)}))
    fig.add_hline(y=1, line={"dash": "dot", "color": "gray"})
    fig.update_layout(title="Enrichment: share of attention / share of keys", xaxis={"title": "prior rounds N"},
                      yaxis={"title": "enrichment", "type": "log"}, height=380)
    return fig


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson 95 % interval of a rate k/n."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return centre - half, centre + half


def policy_rates(summary: pd.DataFrame, title: str) -> go.Figure:
    """Repeat and success rate per policy (one env, kind and N) with Wilson 95 % intervals."""
    fig = go.Figure()
    names = [POLICY_NAMES.get(p, p) for p in summary.policy]
    for col, colour in (("repeat_rate", "#d62728"), ("success_rate", "#2ca02c")):
        bounds = [wilson(r * n, n) for r, n in zip(summary[col], summary.n_episodes)]
        lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
        fig.add_trace(go.Bar(x=names, y=summary[col], name=col.replace("_", " "), marker_color=colour,
                             error_y={"type": "data", "symmetric": False,
                                      "array": hi - summary[col].to_numpy(),
                                      "arrayminus": summary[col].to_numpy() - lo}))
    fig.update_layout(title=title, barmode="group", yaxis={"range": [0, 1.05], "title": "rate"}, height=360)
    return fig


def policy_differences(summary: pd.DataFrame, title: str) -> go.Figure:
    """Paired Long - policy difference of the repeat rate with its bootstrap 95 % interval."""
    d = summary[summary.policy != "long"].dropna(subset=["diff"])
    fig = go.Figure(go.Bar(
        x=[POLICY_NAMES.get(p, p) for p in d.policy], y=d["diff"], marker_color="#9467bd",
        error_y={"type": "data", "symmetric": False, "array": d.ci_high - d["diff"],
                 "arrayminus": d["diff"] - d.ci_low},
    ))
    fig.add_hline(y=0, line={"color": "gray"})
    fig.update_layout(title=title, yaxis={"title": "repeat rate: Long − policy"}, height=340)
    return fig


def repeat_by_n(summary: pd.DataFrame) -> go.Figure:
    """Long-context repeat rate of the bait histories against the number of prior rounds."""
    fig = go.Figure()
    for (env, kind), g in summary[summary.policy == "long"].groupby(["env", "kind"]):
        g = g.sort_values("N")
        lo, hi = zip(*(wilson(r * n, n) for r, n in zip(g.repeat_rate, g.n_episodes)))
        fig.add_trace(go.Scatter(x=g.N, y=g.repeat_rate, mode="lines+markers", name=f"{env} {kind}",
                                 error_y={"type": "data", "symmetric": False, "array": np.array(hi) - g.repeat_rate,
                                          "arrayminus": g.repeat_rate - np.array(lo)}))
    fig.update_layout(title="Long-context repeat rate by prior rounds", xaxis={"title": "prior rounds N"},
                      yaxis={"title": "repeat rate", "range": [-0.02, 1.05]}, height=340)
    return fig


def context_cost(summary: pd.DataFrame) -> go.Figure:
    """Mean prompt tokens per policy (the cost side of Window and Clip)."""
    fig = go.Figure(go.Bar(x=[POLICY_NAMES.get(p, p) for p in summary.policy], y=summary.mean_context_tokens,
                           marker_color="#8c564b"))
    fig.update_layout(title="Context tokens per policy", yaxis={"title": "mean prompt tokens"}, height=300)
    return fig


def colored_tokens(tokens: Sequence[str], weights: np.ndarray, segments: Sequence[str] | None = None,
                   highlight: int | None = None) -> str:
    """HTML of the tokens shaded by weight (the sink left white), the selected token outlined."""
    w = np.asarray(weights, float).copy()
    if len(w):
        w[0] = 0
    top = float(w.max()) if len(w) and w.max() > 0 else 1.0
    spans = []
    for i, tok in enumerate(tokens):
        alpha = min(1.0, w[i] / top) if i < len(w) else 0.0
        border = "outline:2px solid #2ca02c;" if i == highlight else ""
        seg = segments[i] if segments is not None else ""
        colour = SEGMENT_COLOURS.get(seg, "#888")
        text = html.escape(tok).replace("\n", "↵<br>")
        value = w[i] if i < len(w) else 0.0
        style = f"background:rgba(214,39,40,{alpha:.2f});border-bottom:2px solid {colour};{border}"
        spans.append(f"<span title='{html.escape(seg)} {value:.3f}' style='{style}'>{text}</span>")
    return "<div style='font-family:monospace;font-size:12px;line-height:1.9'>" + "".join(spans) + "</div>"


def headline(run) -> go.Figure:
    """The figure a run shows in a notebook next to its metrics (`interp.Run._repr_html_`)."""
    scores = run.tensor_file("diag_scores")
    offsets, bands = scores["offsets"].tolist(), scores["bands"].tolist()
    d = offsets.index(0) if 0 in offsets else 0
    z = scores["z"][:, :, d, 0]
    return head_heatmap(z, f"Diagonal z per head (δ = {offsets[d]:+d}, w = {bands[0]})",
                          run.config.get("z_thresh"))
