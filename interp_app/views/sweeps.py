"""The Sweeps page: the sweeps under the artifacts root, one sweep's metric against its grid, and its points.

`interp sweep FILE` writes ``<out>/sweeps/<name>/sweep.json`` (`interp.sweep`): the swept keys and, per
point, its config values, status, run directory and metrics. This page lists those records (newest
first; ``?sweep=<name>`` picks one), plots a numeric metric against one swept key (a line, or one line
per value of a second key) or two (a heatmap), and tables the points. A point opens its run on the
probe's page with ``st.page_link(..., query_params={"run": ...})``, as the Runs home links runs.

Metrics come from sweep.json, so a sweep whose runs were deleted still plots; the table says which
runs are gone. Failed, invalid and pending points are listed but not plotted. Only files inside the
artifacts root are read; a run is found as ``<root>/<probe>/<run_id>``, never at the recorded path.
"""

from __future__ import annotations

import functools
import json
import shlex
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from interp.errors import InterpError
from interp.store import RunInfo
from interp_app import common
from interp_app.figures import sweeps as F

SELECT_KEY = "sweeps.selected"
RECORD = "sweep.json"
HINT = (
    "No sweeps under `{root}` yet. Run one with `interp sweep sweeps/logit_lens_demo.toml --out {out}` (about a "
    "minute on a CPU); it writes `<out>/sweeps/<name>/sweep.json`, which this page reads (so `--out` names this "
    "page's artifacts root)."
)
_MARK = {"done": "✓", "skipped": "✓", "failed": "✗", "interrupted": "⏸", "invalid": "⚠", "pending": "…"}
NONE = "(none)"


# ============================================================================= reading


def sweep_files(root: Path) -> list[Path]:
    """``<root>/sweeps/<name>/sweep.json`` files inside the root, newest first."""
    base = Path(root) / "sweeps"
    if not base.is_dir() or not common.inside(base, root):
        return []
    found = [d / RECORD for d in base.iterdir() if (d / RECORD).is_file() and common.inside(d / RECORD, root)]
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.parent.name), reverse=True)


@st.cache_data(show_spinner=False, max_entries=64)
def _read(path: str, sig: tuple) -> dict[str, Any]:
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InterpError(f"{path} is not valid JSON ({e})") from None
    points = record.get("points") if isinstance(record, dict) else None
    if (
        not isinstance(points, list)
        or not isinstance(record.get("probe"), str)
        or not isinstance(record.get("keys"), list)
        or not all(isinstance(p, dict) and isinstance(p.get("overrides"), dict) and "status" in p for p in points)
    ):
        raise InterpError(f"{path} is not a sweep record (probe, keys and points written by `interp sweep`)")
    for i, p in enumerate(points):
        p.setdefault("index", i)
        p["metrics"] = p.get("metrics") or {}
    return record


def read_record(path: Path) -> dict[str, Any]:
    """The parsed sweep record (cached by size and mtime); InterpError when it is not one."""
    s = path.stat()
    return _read(str(path), (s.st_size, s.st_mtime_ns))


def point_run(point: Mapping[str, Any], probe: str, root: Path, by_hash: Mapping[str, RunInfo]
              ) -> tuple[str | None, RunInfo | None]:
    """(``<probe>/<run_id>``, its RunInfo) of a point's run; (ref, None) when that run is gone; (None, None)
    when the point has none (invalid or pending).

    A point that failed in this sweep has no recorded run directory (the run raised), so its run is the
    newest one under the root with its config hash (`by_hash`), when there is one.
    """
    if not point.get("run_dir"):
        info = by_hash.get(point.get("config_hash") or "") if point["status"] == "failed" else None
        return (common.ref(info), info) if info else (None, None)
    ref = f"{probe}/{Path(str(point['run_dir'])).name}"
    try:
        path = common.resolve_ref(root, ref, probe)
    except InterpError:
        return ref, None
    return ref, common.inspect(path, root)


def point_runs(record: Mapping[str, Any], root: Path) -> dict[int, tuple[str | None, RunInfo | None]]:
    """`point_run` of every point, by point index."""
    probe, points = record["probe"], record["points"]
    by_hash: dict[str, RunInfo] = {}
    if any(p["status"] == "failed" and not p.get("run_dir") for p in points):
        for info in common.runs(root, probe):  # newest first: keep the first of each hash
            by_hash.setdefault(info.config_hash or "", info)
    return {p["index"]: point_run(p, probe, root, by_hash) for p in points}


# ============================================================================= the page


def render(root: Path, pages: Mapping[str, Any]) -> None:
    """The Sweeps page; `pages` maps probe names to their st.Page (for the links to runs)."""
    st.title("Sweeps")
    st.markdown(
        "How does a probe's headline metric move across a grid of configs? Each sweep is a grid of runs "
        "from `interp sweep FILE`; pick one, a metric and the keys to plot it against."
    )
    files = sweep_files(root)
    if not files:
        st.info(HINT.format(root=root, out=shlex.quote(str(root))))
        return
    path = select_sweep(files)
    try:
        record = read_record(path)
    except InterpError as e:
        st.error(f"Cannot read sweep `{path.parent.name}`: {e}")
        return
    probe, points = record["probe"], record["points"]
    runs = point_runs(record, root)
    counts = Counter(p["status"] for p in points)
    st.caption(
        f"probe `{probe}` · {len(points)} point{'s' * (len(points) != 1)} · "
        + " · ".join(f"{n} {s}" for s, n in counts.items())
        + (f" · {record['seconds']:.1f} s" if isinstance(record.get("seconds"), (int, float)) else "")
        + (f" · file `{record['file']}`" if record.get("file") else "")
    )
    gone = [ref for ref, info in runs.values() if ref is not None and info is None]
    if gone:
        st.warning(
            f"{len(gone)} of this sweep's runs are no longer under the artifacts root (deleted or moved); "
            f"their metrics come from {RECORD}, and they have no page to open."
        )
    name = path.parent.name
    metric = plot(name, record)
    st.subheader("Points")
    table = points_frame(points, F.varying_keys(record["keys"], points) or list(record["keys"]), runs, metric)
    st.dataframe(
        table,
        hide_index=True,
        key=f"sweeps.table:{name}",
        on_select=functools.partial(_pick_row, name, list(table["point"])),
        selection_mode="single-row",
        column_config={"metrics": st.column_config.TextColumn(width="large"),
                       "error": st.column_config.TextColumn(width="medium")},
    )
    point_details(name, probe, points, runs, pages)


def _sync_query(key: str) -> None:
    st.query_params["sweep"] = st.session_state[key]


def select_sweep(files: list[Path]) -> Path:
    """The select box of sweeps (newest first), kept in ``?sweep=``; an unknown ``?sweep=`` is said and ignored."""
    by_name = {p.parent.name: p for p in files}
    wanted = st.query_params.get("sweep")
    if wanted in by_name:
        st.session_state[SELECT_KEY] = wanted
    else:
        if wanted:
            st.error(f"No sweep `{wanted}` under the artifacts root; showing the newest one.")
        if st.session_state.get(SELECT_KEY) not in by_name:
            st.session_state[SELECT_KEY] = next(iter(by_name))
    name = st.selectbox("Sweep", list(by_name), key=SELECT_KEY, on_change=_sync_query, args=(SELECT_KEY,),
                        help="Sweeps under the artifacts root, newest first. The choice is kept in the URL (?sweep=).")
    if st.query_params.get("sweep") != name:
        st.query_params["sweep"] = name
    return by_name[name]


def plot(name: str, record: Mapping[str, Any]) -> str | None:
    """The metric and key pickers and the figure; returns the metric shown (None when nothing is plottable)."""
    points = record["points"]
    metrics = F.metric_names(points)
    keys = F.varying_keys(record["keys"], points)
    if not keys:
        st.info("No swept key takes two values in this sweep: there is nothing to plot a metric against.")
        return metrics[0] if metrics else None
    if not metrics:
        st.info(
            "No point of this sweep has a numeric metric to plot: its points failed, are invalid or pending, "
            "or report only text and lists. The table below lists them."
        )
        return None
    cols = st.columns([3, 2, 2, 2])
    metric = cols[0].selectbox("Metric", metrics, key=f"sweeps.metric:{name}")
    keys = sorted(keys, key=lambda k: k == "model")  # the grid's own keys first
    x = cols[1].selectbox("Against", keys, key=f"sweeps.x:{name}")
    by = cols[2].selectbox("Second key", [NONE, *(k for k in keys if k != x)], key=f"sweeps.by:{name}")
    by = None if by == NONE else by
    view = cols[3].radio("Draw as", ["lines", "heatmap"], key=f"sweeps.view:{name}", horizontal=True,
                         disabled=by is None, help="A heatmap needs a second key.")
    if by is not None and view == "heatmap":
        fig = F.metric_heatmap(points, metric, x, by)
    else:
        fig = F.metric_lines(points, metric, x, by)
    st.plotly_chart(fig, key="sweeps.figure")
    shown = len(F.plotted(points, metric))
    unfinished = sum(p["status"] not in F.PLOTTED for p in points)
    no_value = len(points) - shown - unfinished
    notes = [f"{unfinished} failed, invalid or pending"] if unfinished else []
    notes += [f"{no_value} without a number for {metric}"] if no_value else []
    st.caption(
        f"{shown} of {len(points)} points plotted" + (f"; not plotted: {', '.join(notes)}" if notes else "")
        + ". Points that differ only in keys not on the plot are averaged (the hover says which)."
    )
    return metric


def points_frame(points: list[dict[str, Any]], keys: list[str], runs: Mapping[int, tuple], metric: str | None
                 ) -> pd.DataFrame:
    """The table of points: index, status, swept values, the plotted metric, the run's state, metrics, error."""
    rows = []
    for p in points:
        ref, info = runs[p["index"]]
        value = p["metrics"].get(metric) if metric else None
        rows.append({
            "point": p["index"],
            "status": f"{_MARK.get(p['status'], '?')} {p['status']}",
            **{k: F.value_label(p["overrides"].get(k)) for k in keys},
            **({metric: value if F.is_number(value) else None} if metric else {}),
            "run": "" if ref is None else "✗ deleted" if info is None else common.status_label(info.status),
            "metrics": common.short_metrics(p["metrics"]),
            "error": p.get("error") or "",
        })
    cols = ["point", "status", *keys, *([metric] if metric else []), "run", "metrics", "error"]
    return pd.DataFrame(rows, columns=cols)


def _point_key(name: str) -> str:
    return f"sweeps.point:{name}"


def _pick_row(name: str, order: list[int]) -> None:
    """A click on a table row picks that point below."""
    rows = st.session_state[f"sweeps.table:{name}"].selection.rows
    if rows:
        st.session_state[_point_key(name)] = order[rows[0]]


def point_details(name: str, probe: str, points: list[dict[str, Any]], runs: Mapping[int, tuple],
                  pages: Mapping[str, Any]) -> None:
    """One point: its status and error, its config values, and a link to its run's page."""
    by_index = {p["index"]: p for p in points}
    key = _point_key(name)
    if st.session_state.get(key) not in by_index:  # the first point with a run, else the first
        st.session_state[key] = next((i for i in by_index if runs[i][1] is not None), next(iter(by_index)))
    index = st.selectbox(
        "Point",
        list(by_index),
        key=key,
        format_func=lambda i: f"point {i} · {_MARK.get(by_index[i]['status'], '?')} {by_index[i]['status']}",
        help="Or click a row of the table.",
    )
    p = by_index[index]
    ref, info = runs[index]
    if p.get("error"):
        (st.warning if p["status"] == "invalid" else st.error)(f"Point {index} is **{p['status']}**.\n\n`{p['error']}`")
    if ref is None and p["status"] == "failed":
        st.caption(f"No run with the config hash of point {index} is left under the artifacts root.")
    elif ref is None:
        st.caption(f"Point {index} has no run ({p['status']}: it never ran).")
    elif info is None:
        st.warning(f"The run of point {index}, `{ref}`, is no longer under the artifacts root.")
    else:
        st.markdown(common.run_caption(info))
        if probe in pages:
            st.page_link(pages[probe], label=f"Open point {index} on the {probe} page",
                         icon=":material/open_in_new:", query_params={"run": ref})
    with st.expander("Config values of this point"):
        st.json(p["overrides"])
