"""The Runs home: every run under the artifacts root, filters, and one run's manifest and files.

``?run=<probe>/<run_id>`` opens that run on its probe's page (or selects it here when the probe
has no page); a value outside the artifacts root is refused with an error. ``?sweep=<name>`` opens
that sweep on the Sweeps page.

While a run is running (or `interp demo` is between two runs), "Running now" shows each running run's stage,
the progress of the stage's loop as a bar and its elapsed time (the manifest's ``progress`` record), and refreshes
every `POLL` seconds; when a run starts or ends the whole page is drawn again, so its row and links appear.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from interp.errors import DamagedRun, InterpError
from interp.store import MANIFEST, RunInfo, read_manifest, running_demo
from interp_app import common

SELECT_KEY = "runs.selected"
POLL = 2.0
"""Seconds between two refreshes of "Running now"."""
ROW_PX, MAX_ROWS = 35, 40
"""The runs table's row height, and the most rows it shows before it scrolls."""
WIDTH_PX = {"small": 75, "medium": 200, "large": 400}
"""Pixels of Streamlit's named column widths."""


def render(root: Path, pages: Mapping[str, Any], sweeps: Any = None) -> None:
    """The home page; `pages` maps probe names to their st.Page (for links and ?run= redirects),
    `sweeps` is the Sweeps page (for ?sweep= redirects)."""
    if sweeps is not None and (name := st.query_params.get("sweep")):
        st.switch_page(sweeps, query_params={"sweep": name})
    st.title("Runs")
    preselect = None
    if wanted := st.query_params.get("run"):
        try:
            path = common.resolve_ref(root, wanted)
        except InterpError as e:
            st.error(f"Cannot open `?run={wanted}`: {e}")
        else:
            preselect = f"{path.parent.name}/{path.name}"
            if path.parent.name in pages:
                st.switch_page(pages[path.parent.name], query_params={"run": preselect})

    infos = common.runs(root)
    st.caption(f"Artifacts root `{root}` · {len(infos)} run{'s' * (len(infos) != 1)}")
    live(root, infos)
    if not infos:
        st.info(common.HINT.format(root=root))
        return

    latest_links(infos, pages)
    shown = filtered(infos)
    frame = runs_frame(shown)
    st.dataframe(
        frame,
        hide_index=True,
        height=table_height(len(frame)),
        column_config=COLUMNS,
        placeholder=common.BLANK,
    )
    if not shown:
        st.caption("No run matches the filters.")
        return
    details(shown, root, pages, preselect)


def latest_links(infos: list[RunInfo], pages: Mapping[str, Any]) -> None:
    """A row of links: each probe's newest done run, opened on its page."""
    latest: dict[str, RunInfo] = {}
    for i in infos:  # newest first
        if i.status == "done" and i.probe in pages:
            latest.setdefault(i.probe, i)
    if not latest:
        return
    st.caption("Newest done run of each probe:")
    with st.container(horizontal=True, gap="small"):
        for probe, i in sorted(latest.items()):
            st.page_link(pages[probe], label=f"{probe} · {i.run_id}", query_params={"run": common.ref(i)})


def filtered(infos: list[RunInfo]) -> list[RunInfo]:
    """The runs that pass the probe / status / model filters (empty filter = all)."""
    cols = st.columns(3)
    probes = cols[0].multiselect("Probe", sorted({i.probe for i in infos}), placeholder="all probes")
    statuses = cols[1].multiselect(
        "Status", [s for s in common.STATUSES if any(i.status == s for i in infos)], placeholder="any status"
    )
    models = cols[2].multiselect("Model", sorted({i.model or "?" for i in infos}), placeholder="all models")
    return [
        i
        for i in infos
        if (not probes or i.probe in probes)
        and (not statuses or i.status in statuses)
        and (not models or (i.model or "?") in models)
    ]


#: The runs table's columns: the metrics (a wide list column) come early, so they start on screen; the error
#: column, when any run has one, just before them.
COLUMNS = {
    "probe": st.column_config.TextColumn(width="medium"),
    "status": st.column_config.TextColumn(width="small"),
    "error": st.column_config.TextColumn(width="medium"),
    "metrics": st.column_config.ListColumn(width="large", help="Scalar metrics, one pill each "
                                           "(hover or widen the column for all; a run's full list below)"),
    "seconds": st.column_config.NumberColumn(format="%.1f", width="small"),
    "model": st.column_config.TextColumn(width="small"),
    "started": st.column_config.TextColumn(width="medium"),
    "run id": st.column_config.TextColumn(width="medium"),
}


def table_height(n_rows: int) -> int | str:
    """The runs table sized to its rows (Streamlit's default shows ten and scrolls the rest out of sight), up to
    `MAX_ROWS` rows."""
    return "content" if n_rows <= MAX_ROWS else ROW_PX * (MAX_ROWS + 1) + 3


def metric_text(v: Any) -> str:
    """A metric for a pill: `common.fmt_value`, but a string plainly (no Python quotes), a space at either end
    shown as "␣" (a token's leading space is part of it), cut at 24 characters."""
    if not isinstance(v, str):
        return common.fmt_value(v)
    core = v.strip(" ")
    lead, trail = len(v) - len(v.lstrip(" ")), len(v) - len(v.rstrip(" "))
    text = "␣" * lead + core + "␣" * trail if core else "␣" * len(v) or "(empty)"
    return text if len(text) <= 24 else text[:23] + "…"


def runs_frame(infos: list[RunInfo]) -> pd.DataFrame:
    """The table of runs: probe, status, error (only when a run has one), headline metrics (a list of
    "name=value", one pill each, so long lists stay readable), seconds, model, started, run id."""
    rows = [
        {
            "probe": i.probe,
            "status": common.status_label(i.status),
            "error": i.error or "",  # before the metrics, whose pills would push it off the screen
            "metrics": [f"{k}={metric_text(v)}" for k, v in i.metrics.items()
                        if not isinstance(v, (list, tuple, Mapping))],
            "seconds": i.seconds,
            "model": i.model,
            "started": (i.started or "").replace("T", " ")[:19] or None,
            "run id": i.run_id,
        }
        for i in infos
    ]
    cols = [c for c in COLUMNS if c != "error" or any(i.error for i in infos)]
    return pd.DataFrame(rows, columns=cols)


# ============================================================================= runs in flight


def _state(infos: list[RunInfo]) -> tuple:
    return tuple(sorted((common.ref(i), i.status) for i in infos))


def live(root: Path, infos: list[RunInfo]) -> None:
    """"Running now" when a run is running or a demo is under way (nothing otherwise)."""
    if any(i.status == "running" for i in infos) or running_demo(root) is not None:
        _live(root, _state(infos))


@st.fragment(run_every=POLL)
def _live(root: Path, drawn: tuple) -> None:
    infos = common.runs(root)
    if _state(infos) != drawn:  # a run started or ended: the whole page again (its row, its links)
        st.rerun()
    running = [i for i in infos if i.status == "running"]
    marker = running_demo(root)
    st.subheader("Running now")
    if marker is not None:
        probes = list(marker.get("probes") or [])
        done = {i.probe for i in infos if i.status == "done" and (i.started or "") >= str(marker.get("started"))}
        st.caption(f"`interp demo`: {len(done & set(probes))} of {len(probes)} {marker.get('size', '')} runs done; "
                   "each probe's page fills in as its run ends.")
    if not running:
        st.caption("Between two runs.")
        return
    for row in live_frame(running, infos).to_dict("records"):
        st.progress(row["progress"] or 0.0, text=live_text(row))
    st.caption(f"Refreshes every {POLL:g} s. The bar: the stage's loop (items done of its total); where the stage "
               "has no loop, the elapsed time against the last done run of the same config.")


def live_text(row: Mapping[str, Any]) -> str:
    """``**atoms** · training 12/200 · 45 s of about 60 s (last run) · `run id` `` for a row of `live_frame`."""
    stage = row["stage"] + (f" {row['step']}" if row["step"] else "")
    took = row["elapsed"] + (f" of about {row['last time']} (last run)" if row["last time"] else "")
    return f"**{row['probe']}** · {stage} · {took} · `{row['run id']}`"


def duration(seconds: float) -> str:
    """"45 s", "12 m 05 s"."""
    s = int(round(seconds))
    return f"{s} s" if s < 60 else f"{s // 60} m {s % 60:02d} s"


def live_frame(running: list[RunInfo], infos: list[RunInfo]) -> pd.DataFrame:
    """One row a running run: probe, stage, step ("12/200"), progress (0-1), elapsed, its estimate, run id."""
    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    for i in running:
        try:
            record = read_manifest(i.path).get("progress") or {}
        except DamagedRun:
            record = {}
        try:
            elapsed = (now - dt.datetime.fromisoformat(i.started)).total_seconds() if i.started else None
        except ValueError:
            elapsed = None
        before = next((o.seconds for o in infos if o.status == "done" and o.config_hash == i.config_hash
                       and o.seconds), None)
        step, total = record.get("step"), record.get("total")
        if step is not None and total:
            progress = step / total
        elif elapsed is not None and before:
            progress = min(elapsed / before, 0.99)
        else:
            progress = None
        rows.append({
            "probe": i.probe,
            "stage": record.get("stage") or ("running" if record else "starting"),
            "step": f"{step}/{total}" if step is not None and total else (str(step) if step is not None else ""),
            "progress": progress,
            "elapsed": duration(elapsed) if elapsed is not None else "",
            "last time": duration(before) if before else "",
            "run id": i.run_id,
        })
    return pd.DataFrame(rows, columns=["probe", "stage", "step", "progress", "elapsed", "last time", "run id"])


def details(shown: list[RunInfo], root: Path, pages: Mapping[str, Any], preselect: str | None) -> None:
    """One run: its status (and error), a link to its page, its manifest and its files."""
    by_ref = {common.ref(i): i for i in shown}
    if preselect in by_ref:
        st.session_state[SELECT_KEY] = preselect
    elif st.session_state.get(SELECT_KEY) not in by_ref:
        st.session_state[SELECT_KEY] = next(iter(by_ref))
    st.divider()
    selected = st.selectbox(
        "Run",
        list(by_ref),
        key=SELECT_KEY,
        format_func=lambda r: f"{r} · {common.status_label(by_ref[r].status)}",
    )
    info = by_ref[selected]
    st.subheader(selected)
    st.markdown(common.run_caption(info))
    common.show_status(info.status, info.error)
    if info.probe in pages:
        st.page_link(
            pages[info.probe],
            label=f"Open on the {info.probe} page",
            icon=":material/open_in_new:",
            query_params={"run": selected},
        )
    metrics_tab, manifest_tab, files_tab = st.tabs(["Metrics", "Manifest", "Files"])
    with metrics_tab:
        rows = [{"metric": k, "value": common.fmt_value(v)} for k, v in info.metrics.items()]
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, height=min(36 * (len(rows) + 1), 600))
        else:
            st.caption("No metrics recorded.")
    with manifest_tab:
        if MANIFEST in common.outside_links(info.path, root):
            st.caption(f"Not read: {MANIFEST} links outside the artifacts root.")
        else:
            try:
                st.json(read_manifest(info.path), expanded=1)
            except DamagedRun:
                text = raw_manifest(info.path)
                st.caption(f"{MANIFEST} does not parse; its first 4,000 characters:" if text else f"No {MANIFEST}.")
                if text:
                    st.code(text, language=None)
    with files_tab:
        st.dataframe(files_of(str(info.path), common.signature(info.path), str(root)), hide_index=True)


def raw_manifest(run_dir: Path, limit: int = 4000) -> str | None:
    p = run_dir / MANIFEST
    if not p.is_file():
        return None
    with open(p, "rb") as f:
        return f.read(limit).decode("utf-8", errors="replace")


@st.cache_data(show_spinner=False, max_entries=256)
def files_of(path: str, sig: tuple, root: str) -> pd.DataFrame:
    """The run's files with their recorded size and sha256 and whether each checks out (cached)."""
    manifest = None
    if MANIFEST not in common.outside_links(Path(path), Path(root)):
        try:
            manifest = read_manifest(Path(path))
        except DamagedRun:
            pass
    return common.file_checks(Path(path), manifest, Path(root))
