"""The page of a probe without one of its own (and of any run that is not done): everything the run has.

Metrics, timings and config from the manifest, then each table (st.dataframe), each tensor file's
arrays (shape, dtype, range) and each JSON artifact, all read through the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from interp.errors import DamagedRun, InterpError
from interp.registry import probes_available
from interp.store import Run, RunInfo
from interp_app import common

MAX_ROWS = 5000


def render(run: Run) -> None:
    spec = probes_available().get(run.probe)
    if spec is not None:
        common.probe_intro(spec, run)
    else:
        common.intro(f"Artifacts of a {run.probe} run.", None, run)
    common.show_status(run.status, run.manifest.get("error"))

    st.subheader("Metrics")
    scalars, others = split_metrics(run.metrics)
    if scalars.empty and not others:
        st.caption("No metrics recorded.")
    if not scalars.empty:
        st.dataframe(scalars, hide_index=True)
    if others:
        st.json(others, expanded=False)
    left, right = st.columns(2)
    with left:
        st.subheader("Timings")
        st.json(run.timings, expanded=True)
    with right:
        st.subheader("Config")
        st.json(run.config, expanded=False)

    files = list(run.manifest.get("files") or {})
    tables = [f.removesuffix(".parquet") for f in files if f.endswith(".parquet")]
    tensors = [f.removesuffix(".safetensors") for f in files if f.endswith(".safetensors")]
    jsons = [f for f in files if f.endswith((".json", ".jsonl"))]
    if tables:
        st.subheader("Tables")
    for name in tables:
        frame = run.table(name)
        st.markdown(f"**{name}.parquet** · {len(frame):,} rows × {frame.shape[1]} columns")
        st.dataframe(frame.head(MAX_ROWS), hide_index=True)
    if tensors:
        st.subheader("Tensors")
    for name in tensors:
        st.markdown(f"**{name}.safetensors**")
        st.dataframe(array_summary(run.tensor_file(name)), hide_index=True)
    for filename in jsons:
        st.markdown(f"**{filename}**")
        if filename.endswith(".jsonl"):
            rows = run.jsonl(filename.removesuffix(".jsonl"))
            st.caption(f"{len(rows):,} lines; the first 200:")
            st.json(rows[:200], expanded=False)
        else:
            st.json(run.json(filename.removesuffix(".json")), expanded=False)


def split_metrics(metrics: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(name, value) rows of the scalar metrics, and the lists and dicts left over."""
    rows, others = [], {}
    for k, v in metrics.items():
        if isinstance(v, (list, tuple, dict)):
            others[k] = v
        else:
            rows.append({"metric": k, "value": common.fmt_value(v)})
    return pd.DataFrame(rows, columns=["metric", "value"]), others


def array_summary(arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per array: name, shape, dtype, and min / mean / max of the finite values when numeric."""
    rows = []
    for key, a in arrays.items():
        row = {"array": key, "shape": " × ".join(map(str, a.shape)) or "scalar", "dtype": str(a.dtype)}
        if a.size and (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
            finite = a[np.isfinite(a)] if np.issubdtype(a.dtype, np.floating) else a.astype(float)
            if finite.size:
                row.update(min=float(finite.min()), mean=float(finite.mean()), max=float(finite.max()))
        rows.append(row)
    return pd.DataFrame(rows, columns=["array", "shape", "dtype", "min", "mean", "max"])


def probe_page(name: str, root: Path) -> None:
    """A probe's page: pick one of its runs (sidebar or ``?run=``), then draw it with the probe's render(run)."""
    spec = probes_available()[name]
    st.title(name)
    chosen = None
    if wanted := st.query_params.get("run"):
        try:
            path = common.resolve_ref(root, wanted, name)
            chosen = f"{name}/{path.name}"
        except InterpError as e:
            st.error(f"Cannot open `?run={wanted}`: {e}")
    infos = common.runs(root, name)
    if not infos:
        common.probe_intro(spec)
        st.info(f"No {name} runs under `{root}` yet. Make one with `interp run {name}`.")
        return
    render_run(spec, common.select_run(name, infos, chosen), root)


def render_run(spec, info: RunInfo, root: Path) -> None:
    """Draw one run: the probe's page when done, else the generic page, or the reason it is damaged.

    A probe whose registration has a question (the config class docstring's paragraph after its summary; the method
    link comes from its module docstring) gets its intro drawn here, above its page's render(run); so does a page
    that declares QUESTION (and METHOD) itself, as a third-party page may. Any other page draws its own (`intro`)."""
    if info.status == "damaged":
        common.probe_intro(spec, info)
        common.show_status("damaged", info.error)
        return
    try:
        run = common.load(info.path, root)
    except DamagedRun as e:
        common.probe_intro(spec, info)
        common.show_status("damaged", str(e))
        return
    page = common.page_module(spec) if run.status == "done" else None
    question = getattr(page, "QUESTION", None) or spec.question
    if page is not None and question:
        common.intro(question, common.method_link(spec.name), run)
    try:
        (page.render if page is not None else render)(run)
    except DamagedRun as e:
        common.show_status("damaged", str(e))
    except Exception as e:  # noqa: BLE001 - a page bug: show it (tests see st.exception), then the raw artifacts
        if page is None:
            raise
        st.exception(e)
        st.divider()
        try:
            render(run)
        except DamagedRun as e2:
            common.show_status("damaged", str(e2))
