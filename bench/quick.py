"""Quick runs: each probe's `quick` config, run in this process on the shared model, and its `micro` run just
before it (the baseline in the same run).

The issue's target is absolute (a quick run within 90 s on this 2-core machine when it runs alone, so a newcomer
sees every page within about 15 minutes of `make demo`), so the figure is the quick run's wall seconds, as the
dashboard benchmark's is. The detail carries what tells a slow machine from a slow probe: the CPU seconds of the
process during the run (robust to other jobs on the cores), the micro run's seconds and the quick / micro ratio
in the same run, and the load average at the start. The model is loaded once, outside the figures; the CLI adds
its start-up and model load (about 10 s here). Caches (SAEs, transcoders) are used as they are: the micro run
before does not fill a quick run's caches, so on a fresh machine the first `--only quick` pays for them.
Not part of the default suite (about 15 minutes on its own): `python bench/run.py --only quick`.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from interp.registry import get_probe, probes_available
from interp.runner import execute

from .common import Row, row

TARGET = "<= 90"


def timed_run(name: str, size: str, model, out: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of probe `name` at `size` on `model`."""
    spec = get_probe(name)
    cfg = spec.config({"size": size})
    t, c = time.perf_counter(), time.process_time()
    execute(spec, cfg, out=out, model=model, progress=False)
    return time.perf_counter() - t, time.process_time() - c


def quick_runs(model, smoke: bool = False, names: list[str] | None = None) -> list[Row]:
    """One row a probe: its quick run's wall seconds against `TARGET`, with its micro run in the same run.
    `smoke`: logit_lens alone, micro against micro (the tiny model runs no quick config)."""
    names = names or (["logit_lens"] if smoke else list(probes_available()))
    rows = []
    with tempfile.TemporaryDirectory(prefix="interp-bench-quick-") as tmp:
        out = Path(tmp)
        for name in names:
            load = os.getloadavg()[0]
            micro, _ = timed_run(name, "micro", model, out)
            wall, cpu = timed_run(name, "micro" if smoke else "quick", model, out)
            detail = (f"cpu {cpu:.0f} s; micro {micro:.1f} s in the same run (quick / micro {wall / micro:.1f}); "
                      f"load {load:.1f} on {len(os.sched_getaffinity(0))} cores at the start")
            rows.append(row(f"quick_{name}", "quick run wall seconds (in process, model loaded)", wall,
                            TARGET if not smoke else "report", detail))
    return rows
