"""Sweep figures: the points of a sweep record (``<out>/sweeps/<name>/sweep.json``) in, Plotly figures out.

A point is a dict as `interp.sweep` writes it: ``index``, ``overrides`` (the point's config values,
the swept keys among them), ``status`` (done | skipped | failed | invalid | pending), ``run_dir``,
``metrics`` and ``error``. Only points whose run finished (``done``, or ``skipped`` because an earlier
run with the same config hash was done) and whose metric is a finite number are plotted; failed,
invalid and pending points and non-numeric values (strings, lists, null) are left out.

Grid values become axis positions: numbers on a numeric axis in ascending order; anything else
(prompts, hook names, lists) at positions 0..n-1 in the sweep's order, labelled with `value_label`.
Points that share a cell (they differ only in keys not on the plot) are averaged; the hover says how many.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from . import DIVERGING, numeric_axis, signed_range

#: Point statuses whose metrics are plotted: the run finished (now, or in an earlier sweep).
PLOTTED = ("done", "skipped")


def is_number(v: Any) -> bool:
    """A finite int or float (booleans are not numbers here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def value_label(v: Any, max_len: int = 40) -> str:
    """A grid value as a short label: strings as they are, everything else as JSON; a long one keeps its
    start and its end (prompts differ at the start, model paths at the end)."""
    text = v if isinstance(v, str) else json.dumps(v)
    if len(text) <= max_len:
        return text
    head = (max_len - 1) // 2
    return text[:head] + "…" + text[len(text) - (max_len - 1 - head):]


def metric_names(points: Sequence[Mapping[str, Any]]) -> list[str]:
    """Metrics that are a number in at least one plotted point, in the order they first appear."""
    names: dict[str, None] = {}
    for p in points:
        if p.get("status") in PLOTTED:
            for k, v in (p.get("metrics") or {}).items():
                if is_number(v):
                    names.setdefault(k, None)
    return list(names)


def varying_keys(keys: Sequence[str], points: Sequence[Mapping[str, Any]]) -> list[str]:
    """The swept keys that take at least two distinct values across the points."""
    return [k for k in keys if len({_key(p["overrides"].get(k)) for p in points}) > 1]


def _key(v: Any) -> str:
    """A grid value as a hashable key (lists and dicts included)."""
    return json.dumps(v, sort_keys=True)


def axis(values: Sequence[Any]) -> tuple[list[Any], list[str], bool]:
    """(distinct values in axis order, their labels, whether the axis is numeric)."""
    seen: dict[str, Any] = {}
    for v in values:
        seen.setdefault(_key(v), v)
    distinct = list(seen.values())
    numeric = bool(distinct) and all(is_number(v) for v in distinct)
    if numeric:
        distinct = sorted(distinct)
    return distinct, [value_label(v) for v in distinct], numeric


def plotted(points: Sequence[Mapping[str, Any]], metric: str) -> list[Mapping[str, Any]]:
    """The points that are plotted for `metric`: finished, with a finite number for it."""
    return [p for p in points if p.get("status") in PLOTTED and is_number((p.get("metrics") or {}).get(metric))]


def cells(points: Sequence[Mapping[str, Any]], metric: str, x: str, by: str | None = None) -> pd.DataFrame:
    """One row per (x, by) cell that has plotted points, in axis order (x fastest).

    Columns: ``x``, ``by`` (the values; ``by`` is None without a second key), ``value`` (the mean of the
    cell's points), ``n`` (how many) and ``points`` (their indices).
    """
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for p in plotted(points, metric):
        groups.setdefault((_key(p["overrides"].get(x)), _key(p["overrides"].get(by)) if by else ""), []).append(p)
    xs, _, _ = axis([p["overrides"].get(x) for p in points])
    bys = axis([p["overrides"].get(by) for p in points])[0] if by else [None]
    out = []
    for b in bys:
        for xv in xs:
            hit = groups.get((_key(xv), _key(b) if by else ""))
            if hit:
                out.append({"x": xv, "by": b, "value": float(np.mean([p["metrics"][metric] for p in hit])),
                            "n": len(hit), "points": [int(p["index"]) for p in hit]})
    return pd.DataFrame(out, columns=["x", "by", "value", "n", "points"])


def _grid(points: Sequence[Mapping[str, Any]], metric: str, x: str, by: str | None):
    """(x axis, by axis, {(x key, by key): cell row}) shared by both figures."""
    x_axis = axis([p["overrides"].get(x) for p in points])
    by_axis = axis([p["overrides"].get(by) for p in points]) if by else ([None], [""], False)
    table = cells(points, metric, x, by)
    found = {(_key(r.x), _key(r.by) if by else ""): r for r in table.itertuples()}
    return x_axis, by_axis, found


def metric_lines(points: Sequence[Mapping[str, Any]], metric: str, x: str, by: str | None = None) -> go.Figure:
    """`metric` against the values of key `x`: one line, or one line per value of key `by`.

    Cells without a plotted point are gaps (None), never zeros.
    """
    (xs, x_labels, x_numeric), (bys, by_labels, _), found = _grid(points, metric, x, by)
    fig = go.Figure()
    for b, b_label in zip(bys, by_labels):
        row = [found.get((_key(xv), _key(b) if by else "")) for xv in xs]
        custom = [[xl, b_label, "" if r is None else ", ".join(map(str, r.points)), 0 if r is None else r.n]
                  for xl, r in zip(x_labels, row)]
        head = f"{x}=%{{customdata[0]}}" + (f"<br>{by}=%{{customdata[1]}}" if by else "")
        fig.add_trace(go.Scatter(
            x=xs if x_numeric else list(range(len(xs))), y=[None if r is None else r.value for r in row],
            mode="lines+markers", name=f"{by}={b_label}" if by else metric, customdata=custom, connectgaps=False,
            hovertemplate=head + f"<br>{metric}=%{{y:.4g}}<br>point(s) %{{customdata[2]}} (mean of "
            "%{customdata[3]})<extra></extra>",
        ))
    fig.update_layout(title=f"{metric} by {x}" + (f", one line per {by}" if by else ""), xaxis_title=x,
                      yaxis_title=metric, showlegend=bool(by), legend_title_text=by,
                      margin=dict(l=10, r=10, t=50, b=10))
    if not x_numeric:  # every value keeps its tick, plotted or not
        fig.update_xaxes(**numeric_axis(x_labels), range=[-0.5, len(xs) - 0.5])
    return fig


def metric_heatmap(points: Sequence[Mapping[str, Any]], metric: str, x: str, y: str) -> go.Figure:
    """`metric` over the grid of keys `x` (columns) and `y` (rows); cells without a plotted point stay blank.

    Signed values get the diverging scale centred at 0; others a sequential one.
    """
    (xs, x_labels, _), (ys, y_labels, _), found = _grid(points, metric, x, y)
    grid = [[found.get((_key(xv), _key(yv))) for xv in xs] for yv in ys]
    z = [[None if r is None else r.value for r in row] for row in grid]
    custom = [[[xl, yl, "" if r is None else ", ".join(map(str, r.points)), 0 if r is None else r.n]
               for xl, r in zip(x_labels, row)] for yl, row in zip(y_labels, grid)]
    vals = np.array([v for row in z for v in row if v is not None], dtype=float)
    signed = vals.size > 0 and vals.min() < 0 < vals.max()
    scale = dict(colorscale=DIVERGING, zmid=0, **signed_range(vals)) if signed else dict(colorscale="Viridis")
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(len(xs))), y=list(range(len(ys))), customdata=custom,
        text=[["" if v is None else f"{v:.4g}" for v in row] for row in z], texttemplate="%{text}",
        hovertemplate=f"{x}=%{{customdata[0]}}<br>{y}=%{{customdata[1]}}<br>{metric}=%{{z:.4g}}<br>"
        "point(s) %{customdata[2]} (mean of %{customdata[3]})<extra></extra>",
        colorbar=dict(title=dict(text=metric)), **scale,
    ))
    fig.update_layout(title=f"{metric} by {x} and {y}", xaxis_title=x, yaxis_title=y,
                      margin=dict(l=10, r=10, t=50, b=10))
    fig.update_xaxes(**numeric_axis(x_labels))
    fig.update_yaxes(**numeric_axis(y_labels))
    return fig


def sweep_figure(record: Mapping[str, Any]) -> go.Figure | None:
    """A sweep record's notebook figure (the `interp.figures` entry point `sweep`): its first numeric metric
    against its first swept key (by its second, if any), or None."""
    points = list(record.get("points") or [])
    metrics = metric_names(points)
    keys = varying_keys(list(record.get("keys") or []), points)
    if not metrics or not keys:
        return None
    return metric_lines(points, metrics[0], keys[0], keys[1] if len(keys) > 1 else None)
