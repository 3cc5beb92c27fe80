"""Logit-lens figures: lens.safetensors arrays and the tokens/topk frames in, Plotly figures out.

Artifacts (interp_probes/logit_lens): ``final_rank``/``final_prob`` (layer, pos) are the rank (0 = top)
and probability, at each layer, of the token the model finally predicts at that position;
``topk.parquet`` has (layer, position, k, token, prob); ``tokens.parquet`` has (position, token).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from interp_app.figures import numeric_axis, token_label, token_labels

#: Above this many cells the heatmap shows the top-1 tokens on hover only.
MAX_CELL_TEXT = 1200


def top1_grid(topk: pd.DataFrame, n_layers: int, n_pos: int) -> np.ndarray:
    """The top-1 token (raw text) at each (layer, position), from the topk frame; "" where absent."""
    grid = np.full((n_layers, n_pos), "", dtype=object)
    first = topk[topk["k"] == 0]
    grid[first["layer"].to_numpy(), first["position"].to_numpy()] = first["token"].to_numpy()
    return grid


def rank_ticks(max_rank: int) -> tuple[list[float], list[str]]:
    """Colour-bar ticks for log10(1 + rank): 0, 1, 10, 100, ... up to max_rank."""
    ranks = [0, 1]
    while ranks[-1] * 10 <= max(max_rank, 1):
        ranks.append(ranks[-1] * 10)
    text = [f"{r:,}" for r in ranks]
    return [float(np.log10(1 + r)) for r in ranks], text


def lens_heatmap(
    final_rank: np.ndarray,
    final_prob: np.ndarray,
    tokens: Sequence[str],
    top1: np.ndarray | None = None,
    color: str = "rank",
) -> go.Figure:
    """Layer x position heatmap of the final prediction's rank (log colour) or probability.

    x: prompt positions labelled with their tokens; y: layer (0 at the bottom); the text of each
    cell is that layer's top-1 token (when `top1` is given and the grid is small enough).
    """
    if color not in ("rank", "prob"):
        raise ValueError(f"color={color!r}: 'rank' or 'prob'")
    rank = np.asarray(final_rank)
    prob = np.asarray(final_prob, dtype=float)
    n_layers, n_pos = rank.shape
    if len(tokens) != n_pos:
        raise ValueError(f"{len(tokens)} tokens for {n_pos} positions")
    if color == "rank":
        z = np.log10(1.0 + rank.astype(float))
        tickvals, ticktext = rank_ticks(int(rank.max()))
        scale = dict(colorscale="Blues", reversescale=True, zmin=0.0, zmax=max(tickvals[-1], float(z.max())))
        bar = dict(title=dict(text="rank<br>(0 = top-1)"), tickvals=tickvals, ticktext=ticktext)
    else:
        z = prob
        scale = dict(colorscale="Blues", zmin=0.0, zmax=1.0)
        bar = dict(title=dict(text="probability"))
    labels = token_labels(tokens)
    top1_text = np.vectorize(token_label, otypes=[object])(top1) if top1 is not None else None
    custom = np.stack(
        [
            np.broadcast_to(np.array(labels, dtype=object), (n_layers, n_pos)),
            rank.astype(object),
            prob.astype(object),
            top1_text if top1_text is not None else np.full((n_layers, n_pos), "", dtype=object),
        ],
        axis=-1,
    )
    show_text = top1_text is not None and n_layers * n_pos <= MAX_CELL_TEXT
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(n_pos)),
            y=list(range(n_layers)),
            text=top1_text if show_text else None,
            texttemplate="%{text}" if show_text else None,
            textfont=dict(size=10),
            customdata=custom,
            hovertemplate=(
                "layer %{y}, position %{x} (%{customdata[0]})<br>"
                "final token rank %{customdata[1]}, p %{customdata[2]:.3f}<br>"
                "this layer's top-1: %{customdata[3]}<extra></extra>"
            ),
            colorbar=bar,
            xgap=1,
            ygap=1,
            **scale,
        )
    )
    what = "rank (log colour)" if color == "rank" else "probability"
    fig.update_layout(
        title=dict(text=f"{what} of the final prediction at each layer; cells show each layer's top-1 token"),
        xaxis=dict(title=dict(text="position (token)"), side="bottom", **numeric_axis(labels)),
        yaxis=dict(title=dict(text="layer"), dtick=max(1, n_layers // 15)),
        height=140 + 20 * n_layers,
        margin=dict(l=60, r=20, t=50, b=60),
    )
    return fig


def rank_by_layer(final_rank: np.ndarray, final_prob: np.ndarray, position: int, token: str = "") -> go.Figure:
    """Rank (log axis, 1 + rank) and probability of the final prediction by layer at one position."""
    rank = np.asarray(final_rank)[:, position]
    prob = np.asarray(final_prob, dtype=float)[:, position]
    layers = list(range(len(rank)))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=layers, y=1 + rank, name="1 + rank", mode="lines+markers", yaxis="y"))
    fig.add_trace(go.Scatter(x=layers, y=prob, name="probability", mode="lines+markers", yaxis="y2"))
    where = f"position {position}" + (f" ({token_label(token)})" if token else "")
    fig.update_layout(
        title=dict(text=f"final prediction by layer, {where}", font=dict(size=13)),
        xaxis=dict(title=dict(text="layer")),
        yaxis=dict(title=dict(text="1 + rank (log)"), type="log"),
        yaxis2=dict(title=dict(text="probability"), overlaying="y", side="right", range=[0, 1]),
        legend=dict(orientation="h", y=-0.25),
        height=320,
        margin=dict(l=60, r=60, t=50, b=40),
    )
    return fig


def topk_table(topk: pd.DataFrame, position: int) -> pd.DataFrame:
    """One row per layer, one column per k ("top-1", ...): "token (prob)" at `position`."""
    sub = topk[topk["position"] == position]
    cell = [f"{token_label(t, 24, escape=False)} ({p:.2f})" for t, p in zip(sub["token"], sub["prob"])]
    cells = sub.assign(cell=cell)
    table = cells.pivot(index="layer", columns="k", values="cell").sort_index()
    table.columns = [f"top-{int(k) + 1}" for k in table.columns]
    table.index.name = "layer"
    return table


def headline(run) -> go.Figure:
    """The figure a run shows in a notebook next to its metrics (`interp.Run._repr_html_`)."""
    lens = run.tensor_file("lens")
    tokens = run.table("tokens").sort_values("position")["token"].tolist()
    rank = lens["final_rank"]
    return lens_heatmap(rank, lens["final_prob"], tokens, top1_grid(run.table("topk"), *rank.shape))
