"""Shared bits of the benchmarks: timing by interleaved repeats, a result row."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


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


def interleaved(fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1) -> dict[str, float]:
    """Median seconds of each function, run in turns so machine noise hits all alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def check(value: float, target: str) -> bool | None:
    if target == "report":
        return None
    op, num = target.split()
    return value <= float(num) if op == "<=" else value >= float(num)
