"""What the acceptance tests share: a probe's full run on the embedded model (written under artifacts/), the
checks it is held to, and the report each writes to artifacts/acceptance/<probe>.json."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interp.runner import execute, prepare
from interp.store import Run, load_run

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
SLACK = float(os.environ.get("INTERP_BUDGET_SLACK", "1"))
"""Multiplier of the wall-clock budgets for machines shared with other jobs (timings are always reported)."""


def full_run(probe: str, model: Any, overrides: Mapping[str, Any] | None = None, progress: bool = False) -> Run:
    """The probe's run with `overrides` on `model`, written under artifacts/ and loaded back."""
    spec, cfg = prepare(probe, dict(overrides or {}))
    return load_run(execute(spec, cfg, out=ARTIFACTS, model=model, progress=progress))


class Checks(dict):
    """name -> (passed, measured) of one run's checks, each added by `check`; `value(key)` is the run's metric, NaN
    where it is missing or None (so a comparison with it fails instead of raising)."""

    def __init__(self, run: Run):
        super().__init__()
        self.metrics = run.metrics

    def check(self, name: str, ok: Any, detail: str) -> None:
        self[name] = (bool(ok), detail)

    def value(self, key: str) -> Any:
        v = self.metrics.get(key)
        return float("nan") if v is None else v


def report(probe: str, run: Run, checks: Mapping[str, tuple[bool, str]], *, graded: Mapping[str, Any] | None = None,
           reported: Mapping[str, tuple[bool, str]] | None = None, **extra: Any) -> None:
    """Write artifacts/acceptance/<probe>.json (the run, its metrics and timings, `extra`, each check with what it
    measured, the graded items and the reported-only checks), print one line each, then fail on any unmet check."""
    doc = {"probe": probe, "model": run.manifest["model"].get("name"), "run": str(run.path),
           "metrics": run.metrics, "timings": run.timings, **extra,
           "checks": {name: {"passed": ok, "measured": detail} for name, (ok, detail) in checks.items()}}
    if graded is not None:
        doc["graded"] = dict(graded)
    if reported is not None:
        doc["reported"] = {name: {"passed": ok, "measured": detail} for name, (ok, detail) in reported.items()}
    out = ARTIFACTS / "acceptance"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{probe}.json").write_text(json.dumps(doc, indent=1, default=str))
    for name, (ok, detail) in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    for name, detail in (graded or {}).items():
        print(f"GRADED  {name}: {detail}")
    for name, (ok, detail) in (reported or {}).items():
        print(f"{'(ok)' if ok else '(no)'}  {name}: {detail}  [reported, not gated]")
    failed = [f"{name} ({detail})" for name, (ok, detail) in checks.items() if not ok]
    assert not failed, "unmet acceptance checks: " + "; ".join(failed)
