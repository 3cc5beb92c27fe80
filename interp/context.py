"""RunContext: what a probe gets: the config, the loaded model, seeded RNGs and the run's store."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ._files import _now
from .config import ProbeConfig
from .errors import NumericError
from .store import RunWriter

_MODELS: dict[tuple, Any] = {}
MODEL_LOAD = "model load"
"""The stage (`RunContext.stage`) of loading the model."""
log = logging.getLogger("interp")
PROGRESS_EVERY = 2.0
"""Seconds between two progress records within one stage (a stage change is written at once)."""
_LISTENERS: list[Callable[[Any, dict[str, Any]], None]] = []


def add_progress_listener(fn: Callable[[Any, dict[str, Any]], None]) -> Callable[[], None]:
    """Call fn(run_dir, record) with each progress record a run of this process writes (`RunContext.report`);
    returns the function that removes it. `interp demo` prints its progress lines from one."""
    _LISTENERS.append(fn)
    return lambda: _LISTENERS.remove(fn) if fn in _LISTENERS else None


def cached_model(cfg: ProbeConfig):
    """The model for `cfg`, loaded once per process (sweeps and the demo reuse it)."""
    from .models.load import load_model

    key = (cfg.model, cfg.backend, cfg.device, cfg.dtype, cfg.remote)
    if key not in _MODELS:
        _MODELS.clear()  # keep one model resident
        _MODELS[key] = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype, backend=cfg.backend, remote=cfg.remote)
    return _MODELS[key]


class RunContext:
    """Handed to every probe's run(cfg, ctx). Files go through it; randomness comes from it."""

    def __init__(self, cfg: ProbeConfig, writer: RunWriter, model: Any = None, progress: bool = True):
        import torch

        self.cfg = cfg
        self.writer = writer
        self._model = model
        self.progress = progress
        self.rng = np.random.default_rng(cfg.seed)
        self.torch_rng = torch.Generator().manual_seed(cfg.seed)
        self.log = log.getChild(writer.manifest["probe"])
        self._t0 = time.perf_counter()
        self._stage: str | None = None
        self._step: tuple[int, int | None] | None = None  # (items done, total) of the stage's ctx.tqdm loop
        self._written = -float("inf")  # perf_counter of the last progress record
        if model is not None:
            self._record_model(model)

    @property
    def path(self):
        return self.writer.path

    @property
    def stage(self) -> str | None:
        """The stage running now, as `timed`, `tqdm(desc=...)` and the model's loading name it; a failure leaves it
        at the stage it happened in (the run's out-of-memory message names it). None outside every named stage.
        Setting it writes a progress record (`report`)."""
        return self._stage

    @stage.setter
    def stage(self, stage: str | None) -> None:
        self._set_stage(stage, None)

    def _set_stage(self, stage: str | None, step: tuple[int, int | None] | None) -> None:
        """The stage and its loop's step (an outer stage's, restored when an inner one ends); a record if new."""
        changed = (stage, step) != (self._stage, self._step)
        self._stage, self._step = stage, step
        if changed:
            self.report(force=True)

    def report(self, force: bool = False) -> None:
        """Write the run's progress record, the manifest's ``progress``: ``{"stage", "step", "total", "elapsed",
        "updated"}`` (step and total from the stage's `tqdm` loop, else None), at most every `PROGRESS_EVERY`
        seconds unless `force` (a stage change); listeners (`add_progress_listener`) get each record written."""
        now = time.perf_counter()
        if not force and now - self._written < PROGRESS_EVERY:
            return
        self._written = now
        step, total = self._step or (None, None)
        record = {"stage": self._stage, "step": step, "total": total, "elapsed": round(now - self._t0, 1),
                  "updated": _now()}
        self.writer.manifest["progress"] = record
        self.writer.flush()
        for fn in list(_LISTENERS):
            fn(self.writer.path, record)

    @property
    def model(self):
        if self._model is None:
            outer, step = self.stage, self._step
            self.stage = MODEL_LOAD
            self._model = cached_model(self.cfg)
            self._set_stage(outer, step)
            self._record_model(self._model)
        return self._model

    def _record_model(self, model) -> None:
        self.writer.manifest["env"]["device"] = str(model.device)
        self.writer.manifest["env"]["dtype"] = str(model.dtype).replace("torch.", "")
        self.writer.manifest["env"]["backend"] = model.backend
        self.writer.set("model", model.info.to_dict())

    @property
    def device(self) -> str:
        return self.model.device

    def generator(self, offset: int = 0, device: str | None = None):
        """A fresh torch.Generator seeded from the config seed (+ offset) on `device`."""
        import torch

        return torch.Generator(device=device or "cpu").manual_seed(self.cfg.seed * 1_000_003 + offset)

    def tqdm(self, it: Iterable, **kw):
        """A progress bar over `it`; its `desc` names the stage (`self.stage`) until the loop ends."""
        from tqdm.auto import tqdm

        if kw.get("desc"):
            if hasattr(it, "__len__"):
                kw.setdefault("total", len(it))
            outer, step = self.stage, self._step
            self.stage = kw["desc"]
            it = self._staged(it, (outer, step), kw["desc"], kw.get("total"))
        return tqdm(it, disable=not self.progress, leave=False, **kw)

    def _staged(self, it: Iterable, outer: tuple, stage: str, total: int | None) -> Iterator[Any]:
        for i, item in enumerate(it):
            if self._stage == stage:  # not while a stage inside the loop's body runs
                self._step = (i, total)
                self.report()
            yield item
        self._set_stage(*outer)  # only when the loop ran to its end: a failure leaves its own stage

    # -- artifacts ------------------------------------------------------------------
    def save_tensors(self, name: str, tensors: Mapping[str, Any], metadata: dict[str, str] | None = None):
        return self.writer.save_tensors(name, tensors, metadata)

    def save_table(self, name: str, frame: Any):
        return self.writer.save_table(name, frame)

    def save_json(self, name: str, obj: Any):
        return self.writer.save_json(name, obj)

    def save_jsonl(self, name: str, rows: Iterable[Any]):
        return self.writer.save_jsonl(name, rows)

    def save_lens(self, name: str, lens):
        """name.pt: a Jacobian lens in the reference jlens layout (float32), readable by the reference code."""
        return self.writer.save_lens(name, lens)

    def save_dir(self, name: str, write):
        """A directory artifact filled by write(tmp_dir), e.g. a SAELens SAE."""
        return self.writer.save_dir(name, write)

    def log_metrics(self, **metrics: Any) -> None:
        self.writer.log_metrics(**metrics)

    def log_timings(self, **timings: Any) -> None:
        self.writer.log_timings(**timings)

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Time the enclosed stage: `seconds_<stage>` (wall clock) and `cpu_seconds_<stage>` (CPU seconds of this
        process, robust to other jobs on the machine) in the manifest's timings, also when the stage raises; it is
        `self.stage` meanwhile."""
        t0, c0 = time.perf_counter(), time.process_time()
        outer, step = self.stage, self._step
        self.stage = stage
        try:
            yield
            self._set_stage(outer, step)  # a failure leaves the stage it happened in
        finally:
            self.log_timings(**{f"seconds_{stage}": round(time.perf_counter() - t0, 3),
                                f"cpu_seconds_{stage}": round(time.process_time() - c0, 3)})

    @contextlib.contextmanager
    def weights_unchanged(self, what: str) -> Iterator[None]:
        """Prove the enclosed stages leave the model's weights bit-identical (`interp.weights_digest`, over every
        parameter's bytes): logs the metric `lm_weights_unchanged`, and raises NumericError naming `what` if they
        differ (a run that changed the shared model measured something else after the change)."""
        from ._intervene import weights_digest

        before = weights_digest(self.model)
        yield
        same = weights_digest(self.model) == before
        self.log_metrics(lm_weights_unchanged=same)
        if not same:
            raise NumericError(f"the model's weights differ from the original after {what}")

    def check_finite(self, where: str, value: Any) -> None:
        """NumericError naming `where` if a tensor/array/number holds NaN or inf."""
        if hasattr(value, "isfinite"):
            ok = bool(value.isfinite().all())
        else:
            arr = np.asarray(value, dtype=float)
            ok = bool(np.isfinite(arr).all())
        if not ok:
            raise NumericError(f"non-finite values (NaN or inf) in {where}")

    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

