"""circuits figures: the pruned graph (layers up, positions across), transcoder quality, the ablation test.

Artifacts (interp_probes/circuits): ``graph.safetensors`` (the edge list: edge_index (target, source) and
edge_weight; unattributed inputs, features (layer, pos, index), activations, the pruned graph's node mask and edge
mask (over the list), influence, logit tokens and probabilities, tokens),
``graph_meta.json`` (n_layers, n_pos, n_feat, str_tokens, logit_strs), ``transcoder_quality.parquet`` (per
layer: fve, l0, dead_fraction, loss_zero, loss_spliced, recovered), ``ablations.parquet`` (prompt, k,
selection, predicted, observed, observed_frozen), ``feature_contexts.parquet``.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

SELECTION_COLORS = {"graph": "#d62728", "random": "#7f7f7f", "activation": "#1f77b4"}
KIND_COLORS = {"feature": "#ff7f0e", "error": "#9e9e9e", "embedding": "#2ca02c", "logit": "#d62728"}


def nodes_table(g: dict[str, Any], meta: dict[str, Any]) -> pd.DataFrame:
    """One row per node of the pruned graph: index, kind, layer (embeddings -1, logits n_layers), position,
    feature index, activation, influence, label."""
    L, n, F = meta["n_layers"], meta["n_pos"], meta["n_feat"]
    mask = np.asarray(g["node_mask"], dtype=bool)
    infl = np.asarray(g["influence"], dtype=float)
    feats = np.asarray(g["features"]).reshape(-1, 3)
    acts = np.asarray(g["activations"], dtype=float)
    rows = []
    for i in np.nonzero(mask)[0].tolist():
        if i < F:
            layer, pos, idx = feats[i].tolist()
            rows.append(("feature", layer, pos, idx, acts[i], f"L{layer} #{idx} @ {pos}"))
        elif i < F + L * n:
            layer, pos = divmod(i - F, n)
            rows.append(("error", layer, pos, -1, np.nan, f"error L{layer} @ {pos}"))
        elif i < F + (L + 1) * n:
            pos = i - F - L * n
            rows.append(("embedding", -1, pos, -1, np.nan, f"emb {meta['str_tokens'][pos]!r}"))
        else:
            j = i - F - (L + 1) * n
            prob = float(np.asarray(g["logit_probs"])[j])
            rows.append(("logit", L, n - 1 + 0.25 * j, -1, np.nan, f"logit {meta['logit_strs'][j]!r} p={prob:.2f}"))
    t = pd.DataFrame(rows, columns=["kind", "layer", "pos", "feature", "activation", "label"])
    t.insert(0, "node", np.nonzero(mask)[0])
    t["influence"] = infl[t["node"].to_numpy()]
    return t


def edges_table(g: dict[str, Any]) -> pd.DataFrame:
    """Pruned edges: source, target, weight."""
    keep = np.asarray(g["edge_mask"], dtype=bool)
    dst, src = np.asarray(g["edge_index"])[:, keep]
    return pd.DataFrame({"source": src, "target": dst, "weight": np.asarray(g["edge_weight"], dtype=float)[keep]})


def _layout(nodes: pd.DataFrame) -> pd.DataFrame:
    """x: position, spread within a (layer, position) cell; y: layer (embeddings below, logits above)."""
    nodes = nodes.copy()
    nodes["x"] = nodes["pos"].astype(float)
    for _, idx in nodes.groupby(["layer", nodes["pos"].astype(int)]).groups.items():
        k = len(idx)
        if k > 1:
            nodes.loc[idx, "x"] += np.linspace(-0.35, 0.35, k)
    nodes["y"] = nodes["layer"].astype(float)
    return nodes


def graph_figure(g: dict[str, Any], meta: dict[str, Any], max_edges: int = 1500) -> go.Figure:
    """The pruned graph: nodes by (position, layer), edges coloured by sign, width by |weight|."""
    nodes = _layout(nodes_table(g, meta))
    edges = edges_table(g)
    edges = edges.reindex(edges.weight.abs().sort_values(ascending=False).index)[:max_edges]
    where = nodes.set_index("node")[["x", "y"]]
    fig = go.Figure()
    wmax = float(edges.weight.abs().max()) if len(edges) else 1.0
    for sign, color in ((1, "rgba(31,119,180,{a})"), (-1, "rgba(214,39,40,{a})")):
        part = edges[np.sign(edges.weight) == sign]
        part = part[part.source.isin(where.index) & part.target.isin(where.index)]
        for bucket in (0.25, 0.5, 1.0):  # three widths keep the trace count small
            lo = {0.25: 0, 0.5: 0.25, 1.0: 0.5}[bucket]
            sel = part[(part.weight.abs() / wmax > lo) & (part.weight.abs() / wmax <= bucket)]
            if not len(sel):
                continue
            xs, ys = [], []
            for s, t in zip(sel.source, sel.target, strict=True):
                xs += [where.x[s], where.x[t], None]
                ys += [where.y[s], where.y[t], None]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                     line={"width": 0.5 + 3 * bucket, "color": color.format(a=0.25 + 0.5 * bucket)}))
    for kind, part in nodes.groupby("kind"):
        fig.add_trace(go.Scatter(
            x=part.x, y=part.y, mode="markers", name=kind, customdata=part.node,
            marker={"size": 9 if kind == "feature" else 12, "color": KIND_COLORS[kind],
                    "symbol": {"feature": "circle", "error": "diamond", "embedding": "square", "logit": "star"}[kind],
                    "line": {"width": 0.5, "color": "#333"}},
            text=[f"{lab}<br>influence {inf:.3f}" + ("" if np.isnan(a) else f"<br>activation {a:.3g}")
                  for lab, inf, a in zip(part.label, part.influence, part.activation, strict=True)],
            hovertemplate="%{text}<extra></extra>"))
    L = meta["n_layers"]
    fig.update_layout(
        height=max(420, 18 * (L + 2)), margin={"l": 60, "r": 20, "t": 30, "b": 90},
        xaxis={"tickmode": "array", "tickvals": list(range(meta["n_pos"])),
               "ticktext": [repr(t)[1:-1][:14] for t in meta["str_tokens"]], "tickangle": -45, "title": "position"},
        yaxis={"tickmode": "array", "tickvals": [-1, *range(0, L, max(1, L // 10)), L],
               "ticktext": ["emb", *[str(x) for x in range(0, L, max(1, L // 10))], "logits"], "title": "layer"},
        legend={"orientation": "h", "y": 1.05})
    return fig


def quality_figure(table: pd.DataFrame) -> go.Figure:
    """Per layer: fraction of MLP-output variance explained and share of the zero-ablation loss gap recovered."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=table.layer, y=table.fve, name="FVE of the MLP output"))
    if table.recovered.notna().any():
        fig.add_trace(go.Bar(x=table.layer, y=table.recovered, name="loss gap recovered (spliced in)"))
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
    nodes = _layout(nodes_table(g, meta)).set_index("node")
    L, n = graph.n_layers, graph.n_pos
    height = 40 + 14 * (L + 2)

    def xy(i):
        return 30 + (nodes.x[i] + 0.5) * (width - 60) / max(n, 1), height - 20 - (nodes.y[i] + 1) * 14

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'style="background:#fff;font:10px sans-serif">']
    e = edges_table(g)
    wmax = float(e.weight.abs().max()) if len(e) else 1.0
    for s, t, w in zip(e.source, e.target, e.weight, strict=True):
        if s in nodes.index and t in nodes.index:
            (x1, y1), (x2, y2) = xy(s), xy(t)
            color = "#1f77b4" if w > 0 else "#d62728"
            parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
                         f'stroke-opacity="0.5" stroke-width="{0.3 + 2.5 * abs(w) / wmax:.2f}"/>')
    for i, row in nodes.iterrows():
        x, y = xy(i)
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{KIND_COLORS[row.kind]}">'
                     f"<title>{html.escape(row.label)}</title></circle>")
    parts.append(f'<text x="4" y="12">{graph.n_feat} features, {int(pr.node_mask.sum())} nodes and '
                 f"{int(pr.edge_mask.sum())} edges after pruning</text></svg>")
    return "".join(parts)
