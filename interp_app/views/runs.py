"""The Runs home: every run under the artifacts root, filters, and one run's manifest and files.

``?run=<probe>/<run_id>`` opens that run on its probe's page (or selects it here when the probe
has no page); a value outside the artifacts root is refused with an error. ``?sweep=<name>`` opens
that sweep on the Sweeps page.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from interp.errors import DamagedRun, InterpError
from interp.store import MANIFEST, RunInfo, read_manifest
from interp_app import common

SELECT_KEY = "runs.selected"


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
    if not infos:
        st.info(common.HINT.format(root=root))
        return

    latest_links(infos, pages)
    shown = filtered(infos)
    st.dataframe(
        runs_frame(shown),
        hide_index=True,
        column_config={
            "seconds": st.column_config.NumberColumn(format="%.1f"),
            "metrics": st.column_config.ListColumn(width="large", help="Scalar metrics, one pill each "
                                                   "(hover or widen the column for all; a run's full list below)"),
            "error": st.column_config.TextColumn(width="medium"),
        },
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


def runs_frame(infos: list[RunInfo]) -> pd.DataFrame:
    """The table of runs: probe, run id, model, status, started, seconds, error, headline metrics (a
    list of "name=value", one pill each, so long lists stay readable)."""
    rows = [
        {
            "probe": i.probe,
            "run id": i.run_id,
            "model": i.model,
            "status": common.status_label(i.status),
            "started": (i.started or "").replace("T", " ")[:19] or None,
            "seconds": i.seconds,
            "error": i.error or "",  # before the metrics, whose pills would push it off the screen
            "metrics": common.metric_items(i.metrics),
        }
        for i in infos
    ]
    cols = ["probe", "run id", "model", "status", "started", "seconds", "error", "metrics"]
    return pd.DataFrame(rows, columns=cols)


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
