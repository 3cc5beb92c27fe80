"""Shared bits of the benchmarks: timing by interleaved repeats, a result row, the tiny model.

Every timer here synchronises the device it is given (a model, a tensor, a torch.device or its name) before it
starts and before it stops, through the core's `interp.models.synchronize`: CUDA kernels run asynchronously, so an
unsynchronised timer measures the launches, not the work. On the CPU the sync is a no-op."""

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

from interp.models import synchronize


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


class Timer:
    """`with Timer(model) as t: ...` then `t.seconds`: wall seconds of the block, the device synchronised at
    both ends."""

    def __init__(self, where=None):
        self.where, self.seconds = where, float("nan")

    def __enter__(self) -> Timer:
        synchronize(self.where)
        self._t = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.where)
        self.seconds = time.perf_counter() - self._t


def timed(fn: Callable[[], object], where=None) -> float:
    """Seconds of one call of `fn`, `where`'s device synchronised before and after."""
    with Timer(where) as t:
        fn()
    return t.seconds


def interleaved_runs(fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1, device=None
                     ) -> dict[str, list[float]]:
    """Seconds of each function in every repeat, run in turns so machine noise hits all alike; `device` (a
    model, tensor or device) is synchronised around every timed call."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    synchronize(device)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            times[k].append(timed(fn, device))
    return times


def interleaved(fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1, device=None
                ) -> dict[str, float]:
    """Median seconds of each function, run in turns so machine noise hits all alike (`device`: as above)."""
    return {k: statistics.median(v) for k, v in interleaved_runs(fns, repeats, warmup, device).items()}


def model_batches(model, batch: int, seq: int, n: int, seed: int = 0, low: int = 100) -> list[dict]:
    """`n` batches of `batch` x `seq` random token ids (seeded on the CPU, so every device draws the same ones)
    with full attention masks, on the model's device."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(low, model.info.d_vocab - low, (n, batch, seq), generator=g).to(model.device)
    return [{"input_ids": b, "attention_mask": torch.ones_like(b)} for b in ids]


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
