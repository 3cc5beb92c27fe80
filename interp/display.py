"""Rich display in notebooks: HTML for a run, a run list and a sweep record (`_repr_html_`).

A run shows its status, model, headline metrics, timings, the probe's headline figure (the `headline(run)` its
`@probe(figures=...)` module declares, handed over by the registry) and how to open its dashboard page; a run
list is a table with the same links; a sweep shows its points and its first numeric metric against its first
swept key (the dashboard's `interp.figures` entry point `sweep`). Plotly's JavaScript is inlined (works with
no network; about 3.5 MB per figure): set INTERP_PLOTLYJS=cdn for small
notebooks when online. Everything here reads only what the store already loaded; nothing needs torch.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

_COLOUR = {"done": "#2e7d32", "failed": "#c62828", "running": "#1565c0", "interrupted": "#ef6c00",
           "damaged": "#c62828", "skipped": "#2e7d32", "invalid": "#c62828", "pending": "#757575"}
HEADLINE_METRICS = 12
DASHBOARD = "http://127.0.0.1:8501"


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def fmt(v: Any, width: int = 40) -> str:
    """A metric value as short text: 4 significant digits, quoted strings (cut at `width` characters), sizes of
    lists and dicts."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    if isinstance(v, str):
        return repr(v) if len(v) <= width else repr(v[:width - 1] + "…")
    if isinstance(v, (list, tuple)):
        return f"[{len(v)} values]"
    if isinstance(v, Mapping):
        return f"{{{len(v)} keys}}"
    return str(v)


def badge(status: str) -> str:
    c = _COLOUR.get(status, "#757575")
    return (f'<span class="interp-status" style="background:{c};color:white;border-radius:4px;padding:0 6px;'
            f'font-size:0.85em">{_e(status)}</span>')


def figure_html(fig: Any) -> str:
    """A Plotly figure as an HTML fragment (plotly.js inlined unless INTERP_PLOTLYJS=cdn)."""
    mode = "cdn" if os.environ.get("INTERP_PLOTLYJS") == "cdn" else True
    return fig.to_html(full_html=False, include_plotlyjs=mode, config={"displaylogo": False})


def metrics_table(metrics: Mapping[str, Any], limit: int = HEADLINE_METRICS) -> str:
    """The first `limit` scalar metrics as a two-column table; the rest folded in a <details>."""
    items = [(k, v) for k, v in metrics.items() if not isinstance(v, (list, tuple, Mapping))]
    rows = "".join(f"<tr><td><code>{_e(k)}</code></td><td>{_e(fmt(v))}</td></tr>" for k, v in items[:limit])
    more = ""
    if len(items) > limit:
        rest = "".join(f"<tr><td><code>{_e(k)}</code></td><td>{_e(fmt(v))}</td></tr>" for k, v in items[limit:])
        more = f"<details><summary>{len(items) - limit} more metrics</summary><table>{rest}</table></details>"
    return f'<table class="interp-metrics">{rows}</table>{more}' if items else "<i>no metrics</i>"


def _headline_figure(run: Any) -> Any:
    """The probe's headline figure of a done run (its own `headline(run)`, handed over by the registry), or None
    (no headline declared, or the run lacks an artifact it needs: an older or micro run)."""
    from .errors import InterpError
    from .registry import probes_available

    spec = probes_available().get(run.probe)
    fn = spec.headline() if spec is not None else None
    if fn is None:
        return None
    try:
        return fn(run)
    except (InterpError, KeyError, IndexError, ValueError):
        return None


def _sweep_figure(record: Any) -> Any:
    """The `interp.figures` entry point `sweep`'s figure of a sweep record (the dashboard's), or None."""
    from .registry import figure_function

    fn = figure_function("sweep")
    return fn(record) if fn is not None else None


def page_url(probe: str, ref: str) -> str:
    return f"{DASHBOARD}/{probe}?run={ref}"


def _root_of(path: Any) -> str:
    from pathlib import Path

    return str(Path(path).resolve().parent.parent)


def run_html(run: Any, figure: bool = True) -> str:
    """HTML of a loaded `interp.store.Run`."""
    m = run.manifest
    model = (m.get("model") or {}).get("name") or run.config.get("model") or "?"
    ref = f"{run.path.parent.name}/{run.path.name}"
    seconds = m.get("seconds")
    head = (f'<div class="interp-run"><h4 style="margin:4px 0">{_e(run.probe)} <code>{_e(run.path.name)}</code> '
            f"{badge(run.status)}</h4>"
            f"<div>model <b>{_e(model)}</b> · started {_e(str(m.get('started') or '?')[:19])}"
            + (f" · {seconds:.1f} s" if isinstance(seconds, (int, float)) else "") + "</div>")
    if m.get("error"):
        head += f'<pre style="color:#c62828;white-space:pre-wrap">{_e(m["error"])}</pre>'
    timings = ", ".join(f"{_e(k)} {_e(fmt(v))}" for k, v in run.timings.items())
    body = f"<h5>Metrics</h5>{metrics_table(run.metrics)}"
    if timings:
        body += f"<div><b>Timings</b>: {timings}</div>"
    fig = ""
    if figure and run.status == "done":
        try:
            f = _headline_figure(run)
        except Exception as e:  # noqa: BLE001 - a figure bug must not hide the run: say what failed instead
            f = None
            fig = f'<div class="interp-figure-error">headline figure failed: {_e(type(e).__name__)}: {_e(e)}</div>'
        if f is not None:
            fig = f'<div class="interp-figure">{figure_html(f)}</div>'
    link = (f'<div>Dashboard: <code>interp app --out {_e(_root_of(run.path))}</code>, then '
            f'<a href="{_e(page_url(run.probe, ref))}" target="_blank">{_e(page_url(run.probe, ref))}</a></div>')
    return head + body + fig + link + "</div>"


def runs_html(infos: Sequence[Any], limit: int = 200) -> str:
    """HTML table of `RunInfo`s (newest first), each with its dashboard link."""
    if not infos:
        return "<i>no runs</i>"
    rows = []
    for i in list(infos)[:limit]:
        ref = f"{i.path.parent.name}/{i.path.name}"
        metrics = ", ".join(f"{k}={fmt(v)}" for k, v in list(i.metrics.items())[:4]
                            if not isinstance(v, (list, tuple, Mapping)))
        seconds = f"{i.seconds:.1f}" if isinstance(i.seconds, (int, float)) else ""
        rows.append(f"<tr><td>{_e(i.probe)}</td><td><code>{_e(i.run_id)}</code></td><td>{badge(i.status)}</td>"
                    f"<td>{_e(i.model or '')}</td><td>{_e(str(i.started or '')[:19])}</td><td>{seconds}</td>"
                    f"<td>{_e(metrics)}</td><td><a href=\"{_e(page_url(i.probe, ref))}\" target=\"_blank\">open</a>"
                    "</td></tr>")
    more = f"<div>… {len(infos) - limit} more</div>" if len(infos) > limit else ""
    head = "".join(f"<th>{h}</th>" for h in ("probe", "run", "status", "model", "started", "s", "metrics", "page"))
    return (f'<div class="interp-runs"><div>{len(infos)} run{"s" * (len(infos) != 1)}</div>'
            f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}</div>")


def sweep_html(record: Mapping[str, Any], figure: bool = True) -> str:
    """HTML of a sweep record (what `interp.sweep` returns and writes as sweep.json)."""
    points = list(record.get("points") or [])
    keys = list(record.get("keys") or [])
    counts: dict[str, int] = {}
    for p in points:
        counts[p.get("status", "?")] = counts.get(p.get("status", "?"), 0) + 1
    head = (f'<div class="interp-sweep"><h4 style="margin:4px 0">sweep {_e(record.get("name"))} '
            f"({_e(record.get('probe'))}) {badge(str(record.get('state', '?')))}</h4>"
            f"<div>{len(points)} points: " + ", ".join(f"{n} {_e(s)}" for s, n in sorted(counts.items())) + "</div>")
    rows = []
    for p in points:
        vary = ", ".join(f"{k}={fmt((p.get('overrides') or {}).get(k))}" for k in keys)
        metrics = ", ".join(f"{k}={fmt(v)}" for k, v in list((p.get("metrics") or {}).items())[:3]
                            if not isinstance(v, (list, tuple, Mapping)))
        rows.append(f"<tr><td>{p.get('index')}</td><td>{badge(str(p.get('status')))}</td><td>{_e(vary)}</td>"
                    f"<td>{_e(p.get('error') or metrics)}</td></tr>")
    table = "<table><tr><th>#</th><th>status</th><th>point</th><th>metrics / error</th></tr>" + "".join(rows) + \
        "</table>"
    fig = ""
    if figure:
        f = _sweep_figure(record)
        if f is not None:
            fig = f'<div class="interp-figure">{figure_html(f)}</div>'
    link = (f'<div>Dashboard: <a href="{DASHBOARD}/sweeps?sweep={_e(record.get("name"))}" target="_blank">'
            f"{DASHBOARD}/sweeps?sweep={_e(record.get('name'))}</a></div>")
    return head + table + fig + link + "</div>"


class RunList(list):
    """A list of `RunInfo`s that renders as a table in a notebook."""

    def _repr_html_(self) -> str:
        return runs_html(self)


class SweepResult(dict):
    """A sweep record (a dict, as written to sweep.json) that renders with its points and figure in a notebook."""

    def _repr_html_(self) -> str:
        return sweep_html(self)


__all__ = ["RunList", "SweepResult", "figure_html", "run_html", "runs_html", "sweep_html"]
