"""Planning: each point's config checked and hashed, and matched against the runs already under the output root."""

from __future__ import annotations

from pathlib import Path

from ..config import config_hash
from ..errors import InterpError
from ..store import RunInfo, list_runs
from .spec import Point, SweepSpec, expand


def _prepare_point(probe: str, point: Point):
    from ..runner import prepare

    try:
        spec, cfg = prepare(probe, point.overrides)
    except InterpError as e:
        point.status, point.error = "invalid", str(e)
        return None
    point.config_hash = config_hash(probe, cfg)
    return spec, cfg



def stopped_by_signal(run: RunInfo) -> bool:
    """A run that a signal stopped: status interrupted (SIGINT, SIGTERM as Ray stops a dead driver's workers, or a
    killed process), or failed by SIGTERM as runs recorded before interrupted existed read. Not failed on its own,
    so a rerun redoes it without `retry_failed`."""
    from ..runner import _Terminated

    return run.status == "interrupted" or (run.status == "failed"
                                           and (run.error or "").startswith(f"{_Terminated.__name__}: "))



def plan(spec: SweepSpec, out: Path, retry_failed: bool = False) -> tuple[list[Point], list[Point]]:
    """(all points, those that need a run), matching existing runs by config hash."""
    points = expand(spec)
    existing: dict[str, list] = {}
    for info in list_runs(out, probe=spec.probe):
        existing.setdefault(info.config_hash or "", []).append(info)
    todo = []
    for p in points:
        if _prepare_point(spec.probe, p) is None:
            continue
        runs = existing.get(p.config_hash or "", [])
        done = [r for r in runs if r.status == "done"]
        failed = [r for r in runs if r.status == "failed" and not stopped_by_signal(r)]
        if done:
            p.status, p.run_dir, p.metrics = "skipped", str(done[0].path), done[0].metrics
        elif failed and not retry_failed:
            p.status, p.run_dir, p.error = "failed", str(failed[0].path), failed[0].error
        else:
            todo.append(p)
    return points, todo
