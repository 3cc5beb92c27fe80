"""The page of a probe without one of its own (and of any run that is not done): everything the run has.

Metrics, timings and config from the manifest, then each table (st.dataframe), each tensor file's
arrays (shape, dtype, range) and each JSON artifact, all read through the store.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from interp.registry import probes_available
from interp.store import Run
from interp_app import common

MAX_ROWS = 5000


def render(run: Run) -> None:
    spec = probes_available().get(run.probe)
    question = spec.summary if spec and spec.summary else f"Artifacts of a {run.probe} run."
    common.intro(question, common.method_link(run.probe), run)
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
