"""Patching figures: the grids of grids.safetensors and the tokens / top / agreement frames in, Plotly out.

Artifacts (interp_probes/patching): ``act_<grid>`` and ``attr_<grid>`` (pairs, layers, columns | heads [, columns]) hold
the normalised effect ``(patched - corrupt) / (clean - corrupt)`` of activation patching and its attribution
estimate; grids ``resid_pre``, ``attn_out``, ``mlp_out`` by (layer, column), ``z`` by (layer, head), ``z_pos``
by (layer, head, column). Columns are token positions, shorter pairs right-aligned (NaN where a pair has no
token); ``layers`` names the swept layers; ``tokens.parquet`` has (pair, column, position, clean_token,
corrupt_token, differs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from interp_app.figures import DIVERGING, head_label, numeric_axis, signed_range, token_label

GRID_TITLES = {"resid_pre": "residual stream (resid_pre)", "attn_out": "attention output (attn_out)",
               "mlp_out": "MLP output (mlp_out)", "z": "attention heads (z, all positions)",
               "z_pos": "attention heads (z) by position"}


def select(grid: np.ndarray, pair: int | None) -> np.ndarray:
    """One pair's grid, or the mean over pairs (NaN where no pair has the cell) when `pair` is None."""
    g = np.asarray(grid, dtype=float)
    if pair is not None:
        return g[pair]
    with np.errstate(all="ignore"):
        count = np.isfinite(g).sum(0)
        total = np.where(np.isfinite(g), g, 0).sum(0)
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def column_labels(tokens: pd.DataFrame, n_cols: int, pair: int | None) -> list[str]:
    """Token labels of the grid columns: the pair's clean token (``clean→corrupt`` where they differ); for the
    mean, those of the longest pair."""
    if pair is None:
        lengths = tokens.groupby("pair")["position"].max()
        pair = int(lengths.idxmax())
    sub = tokens[tokens["pair"] == pair].set_index("column")
    out = []
    for c in range(n_cols):
        if c not in sub.index:
            out.append("")
            continue
        r = sub.loc[c]
        a = token_label(r["clean_token"], 12)
        out.append(a if not bool(r["differs"]) else f"{a}→{token_label(r['corrupt_token'], 12)}")
    return out


def grid_heatmap(values: np.ndarray, layers: Sequence[int], x_labels: Sequence[str], title: str,
                 heads: bool = False, zrange: dict | None = None) -> go.Figure:
    """Layer x column (or layer x head) heatmap of a signed effect, diverging colour centred at 0.

    `zrange` (zmin/zmax) lets two heatmaps share one colour scale.
    """
    v = np.asarray(values, dtype=float)
    n_layers, n_x = v.shape
    if len(layers) != n_layers or len(x_labels) != n_x:
        raise ValueError(f"{len(layers)} layers x {len(x_labels)} labels for a {v.shape} grid")
    names = np.array([[head_label(layer, h) if heads else f"L{layer}" for h in range(n_x)] for layer in layers],
                     dtype=object)
    xl = np.broadcast_to(np.array(list(x_labels), dtype=object), v.shape)
    text = np.where(np.isfinite(v), np.round(v, 3).astype(object), "")
    fig = go.Figure(go.Heatmap(
        z=np.where(np.isfinite(v), v, None), x=list(range(n_x)), y=list(range(n_layers)),
        colorscale=DIVERGING, zmid=0, **(zrange or signed_range(v)),
        customdata=np.stack([names, xl, text], -1),
        hovertemplate="%{customdata[0]} · %{customdata[1]}<br>effect %{customdata[2]}<extra></extra>",
        colorbar=dict(title=dict(text="normalised<br>effect")), xgap=1, ygap=1))
    fig.update_layout(
        title=dict(text=title, font=dict(size=13)),
        xaxis=dict(title=dict(text="head" if heads else "position (token)"), **numeric_axis(list(x_labels))),
        yaxis=dict(title=dict(text="layer"), **numeric_axis([str(layer) for layer in layers])),
        height=160 + 18 * n_layers, margin=dict(l=60, r=20, t=50, b=80))
    return fig


def head_labels(n_heads: int) -> list[str]:
    return [f"H{h}" for h in range(n_heads)]


def agreement_scatter(act: np.ndarray, attr: np.ndarray, layers: Sequence[int], x_labels: Sequence[str],
                      rho: float | None, heads: bool = False) -> go.Figure:
    """Attribution estimate against activation patching, one point per cell, with the y = x line."""
    a, b = np.asarray(act, dtype=float), np.asarray(attr, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    li, xi = np.nonzero(ok)
    names = [(head_label(layers[i], j) if heads else f"L{layers[i]} · {x_labels[j]}") for i, j in zip(li, xi)]
    lo = float(min(a[ok].min(), b[ok].min())) if ok.any() else -1.0
    hi = float(max(a[ok].max(), b[ok].max())) if ok.any() else 1.0
    fig = go.Figure([
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(dash="dot", color="grey"), name="y = x"),
        go.Scatter(x=a[ok], y=b[ok], mode="markers", text=names, name="cells",
                   hovertemplate="%{text}<br>activation %{x:.3f}<br>attribution %{y:.3f}<extra></extra>"),
    ])
    r = "n/a" if rho is None or not np.isfinite(rho) else f"{rho:.3f}"
    fig.update_layout(title=dict(text=f"attribution vs activation patching (Spearman {r})", font=dict(size=13)),
                      xaxis=dict(title=dict(text="activation patching")),
                      yaxis=dict(title=dict(text="attribution patching")), height=360, showlegend=False,
                      margin=dict(l=60, r=20, t=50, b=40))
    return fig


def spearman(act: np.ndarray, attr: np.ndarray) -> float | None:
    """Spearman rank correlation of the finite cells (None when fewer than 3 or constant)."""
    a, b = np.asarray(act, dtype=float).ravel(), np.asarray(attr, dtype=float).ravel()
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    ra, rb = pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


def signed_range_of(*grids: np.ndarray) -> dict[str, float]:
    """One symmetric colour range for several grids (so two heatmaps read on the same scale)."""
    return signed_range(np.concatenate([np.asarray(x, dtype=float).ravel() for x in grids]))
