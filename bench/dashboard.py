"""Dashboard render time: the Runs page and every probe's page under Streamlit's AppTest, on micro runs.

An absolute time (the issue's target is <= 2 s a page), so it depends on the machine more than the ratios do.
Each page is rendered the way the app tests render it (`interp_app.testing.app_test`, ?run= for a probe page) on a
fresh artifacts root holding one done run per probe; the figure is the median of a few renders, each after
`st.cache_data.clear()` (a first visit: the run's artifacts are read, the figures built), once the app's
imports are warm (one render of the Runs page first, not counted).

The runs are the demo artifacts (the newest done run of each probe under the default artifacts root, what
`make demo` leaves there); for a probe without one, its `micro` run on the embedded model, made with the app
tests' own helper
(`interp_app.testing.micro_runs`) the first time and kept under $INTERP_BENCH_RUNS (default
<INTERP_CACHE or ~/.cache/interp>/bench-runs) for later benchmarks; any done run of a probe already there is
used (the newest, micro size preferred), so pointing $INTERP_BENCH_RUNS at a `make demo` root renders those.
Making the micro runs takes about 15-20 minutes here, outside the benchmark's figures.
With `smoke`, one logit_lens micro run on the given model and two pages.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from interp.embedded import cache_root
from interp.registry import probes_available
from interp.store import default_root, list_runs
from interp_app.testing import app_test, micro_runs, ref

from .common import Row, row

TARGET = "<= 2"
REPEATS = 3


def runs_root() -> Path:
    """Where the benchmark keeps (and looks for) the runs it renders."""
    env = os.environ.get("INTERP_BENCH_RUNS")
    return Path(env) if env else cache_root() / "bench-runs"


def pick_runs(source: Path, names: list[str]) -> dict[str, Path]:
    """The newest done run of each probe under `source`, a micro one when there is one."""
    out = {}
    for name in names:
        done = [r for r in list_runs(source, probe=name, verify=False) if r.status == "done"]
        micro = [r for r in done if r.config.get("size") == "micro"]
        if done:
            out[name] = (micro or done)[0].path
    return out


@contextlib.contextmanager
def _interp_out(root: Path) -> Iterator[None]:
    old = os.environ.get("INTERP_OUT")
    os.environ["INTERP_OUT"] = str(root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("INTERP_OUT", None)
        else:
            os.environ["INTERP_OUT"] = old


@contextlib.contextmanager
def _quiet_streamlit() -> Iterator[None]:
    """No "No runtime found" / "missing ScriptRunContext" warnings from clearing the cache outside a server."""
    import logging

    loggers = [logging.getLogger(f"streamlit.runtime.{name}")
               for name in ("caching.cache_data_api", "scriptrunner_utils.script_run_context")]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg in loggers:
            lg.disabled = False


def render_seconds(run: str | None, repeats: int, title: str) -> tuple[float, str | None]:
    """Median seconds of a cache-cold render of the page of `run` (None: the Runs page), and what went wrong
    if the page raised or is not the one titled `title`."""
    import streamlit as st

    times, error = [], None
    for _ in range(repeats):
        st.cache_data.clear()
        at = app_test(run)
        t = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - t)
        if at.exception:
            error = f"page raised: {at.exception[0].message}"
        elif [e.value for e in at.title][:1] != [title]:
            error = f"rendered {[e.value for e in at.title]}, not the {title} page"
    return statistics.median(times), error


def dashboard(model, smoke: bool = False) -> list[Row]:
    """Render seconds of the Runs page and each probe's page (<= 2 s each, absolute)."""
    with tempfile.TemporaryDirectory(prefix="interp-bench-app-") as tmp:
        root = Path(tmp) / "artifacts"
        root.mkdir()
        if smoke:
            made, errors = micro_runs(root, ["logit_lens"], {"model": model.info.name}, model_for=lambda name: model)
            pages = {"logit_lens": ref(made["logit_lens"])}
            note = f"logit_lens micro run on {Path(model.info.name).name}"
        else:
            source, names = runs_root(), list(probes_available())
            demo = default_root()  # the "demo artifacts": what `make demo` left there, if anything
            have = pick_runs(demo, names) if demo.is_dir() else {}
            have.update(pick_runs(source, [n for n in names if n not in have]))
            missing = [n for n in names if n not in have]
            errors = {}
            if missing:
                t0 = time.perf_counter()
                shared = lambda name: model if name == model.info.name else None
                _, errors = micro_runs(source, missing, model_for=shared)
                print(f"... made micro runs of {', '.join(missing)} under {source} in "
                      f"{time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
                have.update(pick_runs(source, missing))
            pages = {}
            for name, path in have.items():
                shutil.copytree(path, root / name / path.name)
                pages[name] = ref(root / name / path.name)
            note = "runs from " + ", ".join(sorted({str(p.parent.parent) for p in have.values()}))
        repeats = 1 if smoke else REPEATS
        rows = []
        with _interp_out(root), _quiet_streamlit():
            render_seconds(None, 1, "Runs")  # warm: streamlit, plotly and the app's modules imported once
            for name, run in [("runs", None), *sorted(pages.items())]:
                secs, error = render_seconds(run, repeats, "Runs" if run is None else name)
                detail = f"absolute seconds, median of {repeats} cache-cold renders; {note}"
                if run is not None:
                    size = _size(root / run)
                    detail += f"; {run} ({size})"
                r = row(f"dashboard_{name}", f"AppTest render of the {name} page (s)", secs, TARGET, detail)
                if error:
                    r.ok, r.detail = False, f"{error}; {r.detail}"
                rows.append(r)
        for name, err in errors.items():  # a probe with no done run to render
            if name not in pages:
                rows.append(Row(f"dashboard_{name}", f"AppTest render of the {name} page (s)", float("nan"), TARGET,
                                False, f"no done run: its micro run failed: {err}"))
        return rows


def _size(run_dir: Path) -> str:
    from interp.store import read_manifest

    m = read_manifest(run_dir)
    n = sum(f.get("bytes", 0) for f in m.get("files", {}).values())
    return f"{m['config'].get('size', '?')} size, {n / 1e6:.1f} MB of artifacts"
