"""circuits figures: the pruned graph as Neuronpedia's viewer draws it (token columns, layers up, the strongest
edges), a feature's contexts as text, the weak-transcoder checks, transcoder quality, the ablation test.

Artifacts (interp_probes/circuits): ``graph.safetensors`` (the edge list: edge_index (target, source) and
edge_weight; unattributed inputs, features (layer, pos, index), activations, the pruned graph's node mask and edge
mask (over the list), influence, logit tokens and probabilities, tokens),
``graph_meta.json`` (n_layers, n_pos, n_feat, str_tokens, logit_strs), ``transcoder_quality.parquet`` (per
layer: fve, l0, dead_fraction, loss_zero, loss_spliced, recovered), ``ablations.parquet`` (prompt, k,
selection, predicted, observed, observed_frozen), ``feature_contexts.parquet`` (layer, feature, rank, activation,
tokens, values, at) and ``feature_logits.parquet``.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

SELECTION_COLORS = {"graph": "#d62728", "random": "#7f7f7f", "activation": "#1f77b4"}
KIND_COLORS = {"feature": "#ff7f0e", "error": "#9e9e9e", "embedding": "#2ca02c", "logit": "#d62728"}
KIND_SYMBOLS = {"feature": "circle", "error": "diamond", "embedding": "square", "logit": "star"}
KIND_NAMES = {"feature": "feature", "error": "error (what the transcoders miss)", "embedding": "token embedding",
              "logit": "logit (a next-token candidate)"}
#: Edge colours by sign, the ends of Neuronpedia's purple-green scale: (legend name, "r,g,b").
EDGE_COLORS = {1: ("excitatory edge (+): raises its target", "27,120,55"),
               -1: ("inhibitory edge (−): lowers its target", "118,42,131")}
DEFAULT_EDGES = 200
"""Edges the graph draws by default: the strongest of the pruned graph's (thousands draw a hairball)."""
OWN_EDGES = 25
"""The selected node's own strongest edges, drawn even when they are not among the strongest overall."""
WEAK = (("fve_mean", "<", 0.6, "variance of the MLP outputs explained (FVE, mean over layers)", "{:.2f}"),
        ("dead_fraction_mean", ">", 0.3, "features dead (never fire on held-out text)", "{:.0%}"),
        ("recovered_mean", "<", 0.7, "loss gap recovered, each layer spliced in alone (mean)", "{:.2f}"),
        ("recovered_min", "<", 0.5, "loss gap recovered by the worst layer", "{:.2f}"),
        ("replacement_score", "<", 0.3, "replacement score (influence reaching the logits through features, "
         "not error nodes)", "{:.2f}"))
"""Transcoder checks the page warns on: (metric, direction, threshold, what it is, format). The default size on
SmolLM2 measured FVE 0.70, 16 % dead, 0.86 recovered, worst layer 0.71 and a replacement score of 0.40 with
circuit-tracer's first-position convention (tests/acceptance/test_circuits.py::test_circuits_acceptance,
2026-12-07); quick: 0.34, 43 %, 0.48, -3.16 and 0.27 (0.17 with bos_error=true; tests/golden, re-made 2026-12-06).
Each bound sits between quick and default on its metric."""

_PIECES = {"▁": " ", "Ġ": " ", "Ċ": "\n", "ĉ": "\t"}  # SentencePiece's and byte-level BPE's whitespace markers
_SHOWN = {"\n": "↵", "\t": "→", "\r": "↵"}


def plain(tok: str) -> str:
    """A token as text: SentencePiece's "▁" and byte-level BPE's "Ġ" / "Ċ" turned back into spaces and newlines."""
    return "".join(_PIECES.get(c, c) for c in str(tok))


def shown(tok: str) -> str:
    """A token as the page shows it: `plain`, with line breaks and tabs made visible (↵, →)."""
    return "".join(_SHOWN.get(c, c) for c in plain(tok))


def quoted(tok: str, max_len: int = 24) -> str:
    """A token in quotes, its spaces kept and line breaks shown as ↵: ``' Paris'``."""
    s = shown(tok)
    return "'" + (s if len(s) <= max_len else s[: max_len - 1] + "…") + "'"


def nodes_table(g: dict[str, Any], meta: dict[str, Any]) -> pd.DataFrame:
    """One row per node of the pruned graph: node index, kind, layer (embeddings -1, logits n_layers), position
    (logits: the last one, whose next token they are), feature index, activation, logit probability, token (the
    position's; a logit's own), influence and a label in words ("feature 54 in layer 3, at position 5 (' is')")."""
    L, n, F = meta["n_layers"], meta["n_pos"], meta["n_feat"]
    toks = [quoted(t) for t in meta["str_tokens"]]
    mask = np.asarray(g["node_mask"], dtype=bool)
    feats = np.asarray(g["features"]).reshape(-1, 3)
    acts = np.asarray(g["activations"], dtype=float)
    probs = np.asarray(g["logit_probs"], dtype=float)
    rows = []
    for i in np.nonzero(mask)[0].tolist():
        if i < F:
            layer, pos, idx = feats[i].tolist()
            rows.append(("feature", layer, pos, idx, acts[i], np.nan, meta["str_tokens"][pos],
                         f"feature {idx} in layer {layer}, at position {pos} ({toks[pos]})"))
        elif i < F + L * n:
            layer, pos = divmod(i - F, n)
            rows.append(("error", layer, pos, -1, np.nan, np.nan, meta["str_tokens"][pos],
                         f"error of layer {layer}, at position {pos} ({toks[pos]})"))
        elif i < F + (L + 1) * n:
            pos = i - F - L * n
            rows.append(("embedding", -1, pos, -1, np.nan, np.nan, meta["str_tokens"][pos],
                         f"embedding of {toks[pos]}, position {pos}"))
        else:
            j = i - F - (L + 1) * n
            rows.append(("logit", L, n - 1, -1, np.nan, probs[j], meta["logit_strs"][j],
                         f"logit {quoted(meta['logit_strs'][j])} (p = {probs[j]:.2f})"))
    t = pd.DataFrame(rows, columns=["kind", "layer", "pos", "feature", "activation", "prob", "token", "label"])
    t.insert(0, "node", np.nonzero(mask)[0])
    t["influence"] = np.asarray(g["influence"], dtype=float)[t["node"].to_numpy()]
    return t


def edges_table(g: dict[str, Any]) -> pd.DataFrame:
    """Pruned edges, the strongest first: source, target, weight (the source's direct effect on the target's
    input; positive excites, negative inhibits)."""
    keep = np.asarray(g["edge_mask"], dtype=bool)
    dst, src = np.asarray(g["edge_index"])[:, keep]
    t = pd.DataFrame({"source": src, "target": dst, "weight": np.asarray(g["edge_weight"], dtype=float)[keep]})
    return t.iloc[np.argsort(-t.weight.abs().to_numpy(), kind="stable")].reset_index(drop=True)


def columns(nodes: pd.DataFrame, n_pos: int) -> pd.DataFrame:
    """Each position's column on the x axis (left, right, center), as wide as its most crowded layer, as
    Neuronpedia's viewer sizes them (at least a fifth of the widest, so every token's label has room)."""
    crowd = nodes.groupby(["pos", "layer"]).size().groupby(level="pos").max()
    crowd = crowd.reindex(range(n_pos), fill_value=0).astype(float)
    width = np.maximum(crowd, max(1.0, 0.2 * float(crowd.max() or 1)))
    right = width.cumsum()
    left = right.shift(1, fill_value=0.0)  # the previous column's right edge exactly
    return pd.DataFrame({"left": left, "right": right, "center": (left + right) / 2, "slots": np.maximum(crowd, 1)})


def layout(nodes: pd.DataFrame, n_pos: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(nodes with x and y, columns): y is the layer (embeddings -1, logits on top); the nodes of a (layer,
    position) cell sit side by side inside their column, the most influential (or likeliest logit) first."""
    cols = columns(nodes, n_pos)
    nodes = nodes.assign(order=np.where(nodes.kind == "logit", -nodes.prob.fillna(0), -nodes.influence))
    nodes = nodes.sort_values(["pos", "layer", "order", "node"]).drop(columns="order")
    rank = nodes.groupby(["pos", "layer"]).cumcount().to_numpy()
    k = nodes.groupby(["pos", "layer"])["node"].transform("size").to_numpy()
    c = cols.loc[nodes["pos"].to_numpy()]
    step = (c.right - c.left).to_numpy() / c.slots.to_numpy()
    nodes["x"] = c.center.to_numpy() + (rank - (k - 1) / 2) * step
    nodes["y"] = nodes["layer"].astype(float)
    return nodes.sort_index(), cols


def _edge_text(edges: pd.DataFrame, label: pd.Series) -> list[str]:
    return [f"{label[s]} → {label[t]}<br>weight {w:+.3g} ({'excitatory' if w > 0 else 'inhibitory'})"
            for s, t, w in zip(edges.source, edges.target, edges.weight, strict=True)]


def graph_figure(g: dict[str, Any], meta: dict[str, Any], max_edges: int = DEFAULT_EDGES,
                 selected: int | None = None) -> go.Figure:
    """The pruned graph as Neuronpedia's viewer draws it: one column per token position (shaded), layers up,
    logits on top of the last position's column with their tokens written above them (slanted). Only the
    `max_edges` strongest edges are drawn, coloured by sign and as wide as their |weight|; with a `selected` node,
    its edges among them and its own `OWN_EDGES` strongest are drawn strong, the rest faded. The middle of each
    edge hovers its source, target and weight. Every node marker carries its node index as customdata."""
    L, n = meta["n_layers"], meta["n_pos"]
    nodes, cols = layout(nodes_table(g, meta), n)
    at = nodes.set_index("node")
    edges = edges_table(g)
    shown = edges.head(max_edges)
    if selected is not None:
        mine = edges[(edges.source == selected) | (edges.target == selected)].head(OWN_EDGES)
        shown = pd.concat([shown, mine]).drop_duplicates(["source", "target"])
    fig = go.Figure()
    tops = [-1.6, L + 1.9]
    fig.update_layout(shapes=[{"type": "rect", "xref": "x", "yref": "y", "layer": "below", "line": {"width": 0},
                               "x0": c.left, "x1": c.right, "y0": tops[0], "y1": tops[1], "name": f"position {p}",
                               "fillcolor": "#f2f0e8" if p % 2 else "#faf9f5"} for p, c in cols.iterrows()])
    wmax = float(shown.weight.abs().max()) if len(shown) else 1.0
    mine_mask = (shown.source == selected) | (shown.target == selected) if selected is not None else \
        pd.Series(False, index=shown.index)
    for sign, (name, rgb) in EDGE_COLORS.items():
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=name, legendgroup=name,
                                 line={"width": 3, "color": f"rgb({rgb})"}))
        part = shown[np.sign(shown.weight) == sign]
        for strong in (False, True):
            faded = selected is not None and not strong
            sub = part[mine_mask[part.index] == strong] if selected is not None else part
            if selected is None and strong:
                continue
            rel = sub.weight.abs() / wmax
            for lo, hi in ((0, 0.25), (0.25, 0.5), (0.5, 1.0)):  # three widths keep the trace count small
                sel = sub[(rel > lo) & (rel <= hi)]
                if not len(sel):
                    continue
                xs = np.column_stack([at.x[sel.source].to_numpy(), at.x[sel.target].to_numpy(),
                                      np.full(len(sel), np.nan)]).ravel()
                ys = np.column_stack([at.y[sel.source].to_numpy(), at.y[sel.target].to_numpy(),
                                      np.full(len(sel), np.nan)]).ravel()
                alpha = 0.08 if faded else (0.3 + 0.6 * hi if selected is None else 0.95)
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                         legendgroup=name, meta={"edges": len(sel)},
                                         line={"width": (0.6 + 3 * hi) * (1.6 if strong else 1),
                                               "color": f"rgba({rgb},{alpha})"}))
    fig.add_trace(go.Scatter(  # every drawn edge hovers at its middle, the faded ones too
        x=(at.x[shown.source].to_numpy() + at.x[shown.target].to_numpy()) / 2,
        y=(at.y[shown.source].to_numpy() + at.y[shown.target].to_numpy()) / 2,
        mode="markers", name="edge weights", showlegend=False, marker={"size": 8, "color": "rgba(0,0,0,0)"},
        hovertext=_edge_text(shown, at.label), hovertemplate="%{hovertext}<extra></extra>"))
    for kind in ("embedding", "error", "feature", "logit"):
        part = nodes[nodes.kind == kind]
        if not len(part):
            continue
        hover = [f"{lab}<br>influence on the logits {inf:.3f}" + ("" if np.isnan(a) else f"<br>activation {a:.3g}")
                 for lab, inf, a in zip(part.label, part.influence, part.activation, strict=True)]
        logit = kind == "logit"
        fig.add_trace(go.Scatter(
            x=part.x, y=part.y, mode="markers", name=KIND_NAMES[kind], customdata=[[int(i)] for i in part.node],
            marker={"size": 12 if logit else 9, "color": KIND_COLORS[kind], "symbol": KIND_SYMBOLS[kind],
                    "line": {"width": 0.5, "color": "#333"}},
            unselected={"marker": {"opacity": 1}},  # a click selects (the page reruns); nothing dims meanwhile
            hovertext=hover, hovertemplate="%{hovertext}<extra></extra>"))
        if logit:  # the tokens slanted above their markers (one layout update: add_annotation is slow)
            fig.update_layout(annotations=[
                {"x": x, "y": L, "yshift": 9, "text": html.escape(quoted(tok, 14), quote=False),
                 "name": f"logit {node}", "textangle": -45, "showarrow": False, "xanchor": "left",
                 "yanchor": "bottom", "font": {"size": 11, "color": "#222"}}
                for node, x, tok in zip(part.node, part.x, part.token, strict=True)])
    if selected is not None and selected in at.index:
        fig.add_trace(go.Scatter(x=[at.x[selected]], y=[at.y[selected]], mode="markers", name="selected node",
                                 hoverinfo="skip", marker={"size": 20, "symbol": "circle-open", "color": "#000",
                                                           "line": {"width": 3}}))
    step = max(1, L // 10)
    fig.update_layout(
        height=max(560, 20 * (L + 4) + 190), margin={"l": 90, "r": 20, "t": 56, "b": 150}, plot_bgcolor="#fff",
        xaxis={"tickmode": "array", "tickvals": cols.center.tolist(), "range": [0, float(cols.right.iloc[-1])],
               "ticktext": [f"{quoted(t, 14)}<br>{p}" for p, t in enumerate(meta["str_tokens"])],
               "title": "token, position in the prompt", "showgrid": False, "zeroline": False},
        yaxis={"tickmode": "array", "tickvals": [-1, *range(0, L, step), L], "range": tops, "showgrid": False,
               "ticktext": ["embeddings", *[f"layer {x}" for x in range(0, L, step)], "logits"], "zeroline": False},
        legend={"orientation": "h", "yanchor": "top", "y": -0.16, "x": 0}, hoverlabel={"align": "left"})
    return fig


def edge_count(fig: go.Figure) -> int:
    """Edges a `graph_figure` draws (its line traces' segments)."""
    return sum(int(t.meta["edges"]) for t in fig.data if isinstance(t.meta, dict) and "edges" in t.meta)


def weak_transcoders(metrics: dict[str, Any]) -> list[str]:
    """The transcoder checks (`WEAK`) a run's metrics fail, each in words with its value and threshold."""
    out = []
    for key, how, bound, what, form in WEAK:
        v = metrics.get(key)
        if isinstance(v, int | float) and np.isfinite(v) and (v < bound if how == "<" else v > bound):
            out.append(f"{what}: {form.format(v)} ({how} {form.format(bound)})")
    return out


def contexts_html(part: pd.DataFrame) -> str:
    """Top contexts of one feature (rows of feature_contexts.parquet), one block each: the activation, then the
    text with each token shaded by the feature's value there and the token it was read at outlined. Tokens read
    as text (no "▁" or "Ġ") and lines wrap."""
    vmax = max(float(part.activation.max()) if len(part) else 1.0, 1e-12)
    blocks = []
    for r in part.itertuples():
        spans = []
        for i, (t, v) in enumerate(zip(r.tokens, r.values, strict=True)):
            a = min(1.0, max(0.0, float(v) / vmax))
            style = f"background: rgba(255,127,14,{a:.2f});"
            if i == int(r.at):
                style += " outline: 1.5px solid #222; font-weight: 600;"
            text = html.escape(shown(t), quote=False)
            spans.append(f'<span class="tok{" kept" if i == int(r.at) else ""}" title="{float(v):.3g}" '
                         f'style="{style}">{text}</span>')
        blocks.append('<div style="display: flex; gap: .8em; margin: .25em 0;">'
                      f'<code style="flex: none; min-width: 3.5em;">{r.activation:.3g}</code>'
                      '<div class="ctx" style="white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.7;">'
                      + "".join(spans) + "</div></div>")
    return '<div class="circuits-contexts">' + "".join(blocks) + "</div>"


def quality_figure(table: pd.DataFrame) -> go.Figure:
    """Per layer: fraction of MLP-output variance explained and share of the zero-ablation loss gap recovered, each
    with the mean the page's warning holds against its threshold (`WEAK`) as a dashed line."""
    fig = go.Figure()
    bound = {key: b for key, _, b, *_ in WEAK}
    span = [float(table.layer.min()) - 0.5, float(table.layer.max()) + 0.5]
    for col, name, key, colour in (("fve", "FVE of the MLP output", "fve_mean", "#1f77b4"),
                                   ("recovered", "loss gap recovered (spliced in)", "recovered_mean", "#ff7f0e")):
        if not table[col].notna().any():
            continue
        fig.add_trace(go.Bar(x=table.layer, y=table[col], name=name, marker_color=colour))
        fig.add_trace(go.Scatter(x=span, y=[bound[key]] * 2, mode="lines", hoverinfo="skip",
                                 name=f"weak below {bound[key]:g} (mean)", line={"dash": "dash", "color": colour}))
    fig.update_layout(barmode="group", height=320, margin={"l": 50, "r": 20, "t": 30, "b": 40},
                      xaxis_title="layer", yaxis_title="fraction", legend={"orientation": "h", "y": 1.15})
    return fig


def ablation_figure(rows: pd.DataFrame, observed: str = "observed") -> go.Figure:
    """Predicted vs observed change of the top logit, one point per (prompt, k, selection)."""
    fig = go.Figure()
    for how, part in rows.groupby("selection"):
        fig.add_trace(go.Scatter(x=part.predicted, y=part[observed], mode="markers", name=str(how),
                                 marker={"color": SELECTION_COLORS.get(str(how), "#333"), "size": 7},
                                 text=[f"{t!r} k={k}" for t, k in zip(part.text, part.k, strict=True)],
                                 hovertemplate="%{text}<br>predicted %{x:.3f}<br>observed %{y:.3f}<extra></extra>"))
    lim = float(np.nanmax(np.abs(rows[["predicted", observed]].to_numpy()))) if len(rows) else 1.0
    fig.add_trace(go.Scatter(x=[-lim, lim], y=[-lim, lim], mode="lines", line={"dash": "dot", "color": "#999"},
                             showlegend=False, hoverinfo="skip"))
    fig.update_layout(height=380, margin={"l": 60, "r": 20, "t": 30, "b": 50},
                      xaxis_title="predicted change (graph)", yaxis_title=f"{observed.replace('_', ' ')} change",
                      legend={"orientation": "h", "y": 1.1})
    return fig


def headline(run) -> go.Figure:
    return graph_figure(run.tensor_file("graph"), run.json("graph_meta"))


def graph_svg(graph, width: int = 720, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> str:
    """An `AttributionGraph`'s pruned graph as inline SVG (a notebook's `_repr_html_`)."""
    import torch

    from .prune import prune

    pr = prune(graph, node_threshold, edge_threshold)
    meta = {"n_layers": graph.n_layers, "n_pos": graph.n_pos, "n_feat": graph.n_feat,
            "str_tokens": [str(t) for t in graph.tokens], "logit_strs": [str(int(t)) for t in graph.logit_tokens]}
    g = {"node_mask": pr.node_mask.cpu().numpy(), "influence": pr.node_influence.cpu().numpy(),
         "features": graph.features.cpu().numpy(), "activations": graph.activations.cpu().numpy(),
         "logit_probs": graph.logit_probs.cpu().numpy(), "edge_mask": pr.edge_mask.cpu().numpy(),
         "edge_index": torch.stack([graph.edges.target, graph.edges.source]).cpu().numpy(),
         "edge_weight": graph.edges.weight.cpu().numpy()}
    nodes, cols = layout(nodes_table(g, meta), graph.n_pos)
    nodes = nodes.set_index("node")
    L, span = graph.n_layers, float(cols.right.iloc[-1])
    height = 40 + 14 * (L + 2)

    def xy(i):
        return 30 + nodes.x[i] * (width - 60) / span, height - 20 - (nodes.y[i] + 1) * 14

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'style="background:#fff;font:10px sans-serif">']
    e = edges_table(g).head(DEFAULT_EDGES)
    wmax = float(e.weight.abs().max()) if len(e) else 1.0
    for s, t, w in zip(e.source, e.target, e.weight, strict=True):
        (x1, y1), (x2, y2) = xy(s), xy(t)
        parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                     f'stroke="rgb({EDGE_COLORS[1 if w > 0 else -1][1]})" '
                     f'stroke-opacity="0.6" stroke-width="{0.3 + 2.5 * abs(w) / wmax:.2f}"/>')
    for i, row in nodes.iterrows():
        x, y = xy(i)
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{KIND_COLORS[row.kind]}">'
                     f"<title>{html.escape(row.label)}</title></circle>")
    parts.append(f'<text x="4" y="12">{graph.n_feat} features, {int(pr.node_mask.sum())} nodes and '
                 f"{int(pr.edge_mask.sum())} edges after pruning (the {len(e)} strongest drawn)</text></svg>")
    return "".join(parts)
