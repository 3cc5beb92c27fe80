"""Running points: one point under its claim (in the driver or a Ray worker), the driver loop both executors share,
and the local executor (the driver runs its points itself, one at a time)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..config import config_hash
from ..errors import interrupted_by
from .claims import CLAIM_TTL, claim_holder, claim_path, done_runs, try_claim
from .spec import Point, SweepSpec

POLL = 1.0
"""Seconds between the driver's looks at points another process holds."""



def _execute_point(probe: str, overrides: dict[str, Any], out: str, progress: bool = False,
                   claim_ttl: float = CLAIM_TTL, stop_on_interrupt: bool = False) -> dict[str, Any]:
    """Run one point under its claim (in this process or a Ray worker); never raises, but with
    `stop_on_interrupt` (the local executor: the driver itself was stopped) re-raises SIGINT's KeyboardInterrupt
    and SIGTERM's `Interrupted` after the run is recorded interrupted.

    status: done | failed | interrupted (a signal stopped the run: a rerun redoes it) | skipped (another process
    finished it before the claim was taken) | claimed (another live process holds it: the driver waits for that one).
    """
    from ..runner import execute, prepare
    from ..store import load_run

    claim = None
    try:
        spec, cfg = prepare(probe, overrides)
        chash = config_hash(probe, cfg)
        claim = try_claim(claim_path(out, probe, chash), claim_ttl)
        if claim is None:
            return {"status": "claimed"}
        claim.heartbeat(max(0.5, claim_ttl / 4))
        done = done_runs(out, probe, chash)
        if done:
            return {"status": "skipped", "run_dir": str(done[0].path), "metrics": done[0].metrics}
        path = execute(spec, cfg, out=out, progress=progress)
        return {"status": "done", "run_dir": str(path), "metrics": load_run(path, verify=False).metrics}
    except BaseException as e:  # noqa: BLE001 - a point's failure is recorded, the sweep goes on
        why = interrupted_by(e)
        if why is not None and stop_on_interrupt:
            raise
        if why is not None:
            return {"status": "interrupted", "error": f"interrupted: {why}"}
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    finally:
        if claim is not None:
            claim.release()



def _settle(probe: str, p: Point, out: Path, claim_ttl: float) -> str:
    """"finished" when a done run of the point exists (it is then recorded as skipped), "held" while another
    live process holds its claim, else "free"."""
    runs = done_runs(out, probe, p.config_hash or "")
    if runs:
        p.status, p.run_dir, p.metrics, p.error = "skipped", str(runs[0].path), runs[0].metrics, None
        return "finished"
    return "held" if claim_holder(claim_path(out, probe, p.config_hash or ""), claim_ttl) else "free"



def _drive(probe: str, todo: list[Point], out: Path, limit: int, claim_ttl: float,
           start: Callable[[Point], None], wait: Callable[[float], Iterable[tuple[Point, dict[str, Any]]]],
           on_point: Callable[[Point], None]) -> None:
    """The driver loop of both executors. A point whose claim is free is started (`start`); results come back
    from `wait(timeout)`. A point another process holds is parked and looked at every POLL seconds until that
    process finishes it (recorded `skipped`) or its claim is abandoned (started here)."""
    # points of one model run together so a worker's cached model is reused, not reloaded
    queue = sorted(todo, key=lambda p: str(p.overrides.get("model", "")))
    parked: list[Point] = []
    running = 0
    looked = time.monotonic()
    while queue or parked or running:
        if parked and time.monotonic() - looked >= POLL:
            looked = time.monotonic()
            queue += parked
            parked = []
        while queue and running < limit:
            p = queue.pop(0)
            state = _settle(probe, p, out, claim_ttl)
            if state == "finished":
                on_point(p)
            elif state == "held":
                parked.append(p)
            else:
                start(p)
                running += 1
        if not running:
            if parked:
                time.sleep(POLL)
            continue
        for p, result in wait(POLL):
            running -= 1
            if result["status"] == "claimed":
                parked.append(p)
            else:
                _apply(p, result)
                on_point(p)



def _apply(p: Point, result: dict[str, Any]) -> None:
    p.status = result["status"]
    p.run_dir = result.get("run_dir")
    p.metrics = result.get("metrics", {})
    p.error = result.get("error")



def run_local(spec: SweepSpec, todo: list[Point], out: Path, progress: bool, claim_ttl: float = CLAIM_TTL,
              on_point: Callable[[Point], None] = lambda p: None) -> None:
    started: list[Point] = []

    def wait(timeout: float) -> list[tuple[Point, dict[str, Any]]]:
        p = started.pop()
        try:
            return [(p, _execute_point(spec.probe, p.overrides, str(out), claim_ttl=claim_ttl,
                                       stop_on_interrupt=True))]
        except BaseException as e:  # only SIGINT / SIGTERM come out: the point reads interrupted, the sweep stops
            p.status, p.error = "interrupted", f"interrupted: {interrupted_by(e)}"
            raise

    _drive(spec.probe, todo, out, 1, claim_ttl, started.append, wait, on_point)
