"""Shared bits of the benchmarks: timing by interleaved repeats, a result row, the tiny model."""

from __future__ import annotations

import atexit
import math
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass
class Row:
    name: str
    figure: str
    """What the number is, e.g. "capture / bare forward (time ratio)"."""
    value: float
    target: str
    """e.g. "<= 1.15"; "report" when there is no target."""
    ok: bool | None
    detail: str = ""


def interleaved_runs(fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1
                     ) -> dict[str, list[float]]:
    """Seconds of each function in every repeat, run in turns so machine noise hits all alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return times


def interleaved(fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1) -> dict[str, float]:
    """Median seconds of each function, run in turns so machine noise hits all alike."""
    return {k: statistics.median(v) for k, v in interleaved_runs(fns, repeats, warmup).items()}


def ratio_spread(num: list[float], den: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of the per-repeat ratios num[i] / den[i] (each pair ran back to back)."""
    r = sorted(a / b for a, b in zip(num, den))
    return statistics.median(r), r[0], r[-1]


def check(value: float, target: str) -> bool | None:
    if target == "report":
        return None
    if not math.isfinite(value):
        return False
    op, num = target.split()  # a plain bool, also for a numpy value (numpy.bool is not False)
    return bool(value <= float(num) if op == "<=" else value >= float(num))


def row(name: str, figure: str, value: float, target: str, detail: str = "") -> Row:
    """A row whose verdict is `value` against `target`."""
    return Row(name, figure, float(value), target, check(float(value), target), detail)


def fmt(value: float) -> str:
    """A figure in at most 4 significant digits (1e-05 style below 1e-3)."""
    if not math.isfinite(value):
        return str(value)
    return f"{value:.2e}" if value != 0 and abs(value) < 1e-3 else f"{value:.4g}"


def is_tiny(model) -> bool:
    """The tiny random model of the tests (interp.testing), not a real one."""
    return model.info.d_model <= 64


@cache
def tiny_model():
    """The tests' tiny random Llama (interp.testing), built once per process in a temporary directory."""
    from interp.models import load_model
    from interp.testing import tiny_model_dir

    tmp = Path(tempfile.mkdtemp(prefix="interp-bench-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    return load_model(str(tiny_model_dir(tmp / "tiny-llama")), device="cpu")
