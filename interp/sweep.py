"""Sweeps: a grid of runs of one probe from a TOML file, resumable, local or on Ray.

    probe = "logit_lens"
    models = ["smollm2-135m", "gemma3-270m"]      # optional; crossed with the grid
    [base]                                          # config fields shared by every point
    size = "micro"
    [grid]                                          # cartesian product over these keys
    prompt = ["The capital of France is", "The Eiffel Tower stands in"]
    [[zip]]                                         # each group's keys vary together
    top_k = [3, 5]
    max_tokens = [64, 128]

Each point's config hash identifies it: a point whose run is already `done` under the output
root is skipped; a `failed` one is retried only with `retry_failed`. The outcome table goes to
``<out>/sweeps/<name>/sweep.json``. With Ray, every worker must reach the same output root
(a shared filesystem on a cluster).
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .config import config_hash
from .errors import ConfigError, InterpError
from .store import atomic_write_text, default_root, jsonable, list_runs

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass
class SweepSpec:
    name: str
    probe: str
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    zips: list[dict[str, list[Any]]]
    models: list[str]

    @property
    def keys(self) -> list[str]:
        return (["model"] if self.models else []) + list(self.grid) + [k for z in self.zips for k in z]


@dataclass
class Point:
    index: int
    overrides: dict[str, Any]
    config_hash: str | None = None
    status: str = "pending"
    """pending | done | skipped (already done) | failed | invalid"""
    run_dir: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def load_sweep(path: str | Path) -> SweepSpec:
    """Parse and check a sweep file; InterpError naming the problem."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InterpError(f"sweep file {str(path)!r} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InterpError(f"sweep file {str(path)!r} is not valid TOML: {e}") from None
    unknown = set(doc) - {"probe", "name", "base", "grid", "zip", "models"}
    if unknown:
        raise InterpError(f"sweep file: unknown keys {sorted(unknown)}; allowed: probe, name, base, grid, zip, models")
    if not isinstance(doc.get("probe"), str):
        raise InterpError("sweep file: 'probe' (a probe name) is required")
    grid = doc.get("grid", {})
    zips = doc.get("zip", [])
    zips = [zips] if isinstance(zips, dict) else zips
    for key, values in list(grid.items()) + [(k, v) for z in zips for k, v in z.items()]:
        if not isinstance(values, list) or not values:
            raise InterpError(f"sweep file: grid key {key!r} needs a non-empty list of values")
    for z in zips:
        if len({len(v) for v in z.values()}) > 1:
            raise InterpError(f"sweep file: zipped keys {sorted(z)} need lists of one length")
    models = doc.get("models", [])
    if not isinstance(models, list):
        raise InterpError("sweep file: 'models' must be a list of model names")
    return SweepSpec(doc.get("name", path.stem), doc["probe"], dict(doc.get("base", {})), dict(grid), zips, models)


def expand(spec: SweepSpec) -> list[Point]:
    """Every point: models x cartesian(grid) x each zipped group, in a stable order."""
    axes: list[list[dict[str, Any]]] = []
    if spec.models:
        axes.append([{"model": m} for m in spec.models])
    for key, values in spec.grid.items():
        axes.append([{key: v} for v in values])
    for z in spec.zips:
        n = len(next(iter(z.values())))
        axes.append([{k: z[k][i] for k in z} for i in range(n)])
    points = []
    for i, combo in enumerate(itertools.product(*axes) if axes else [()]):
        over = dict(spec.base)
        for part in combo:
            over.update(part)
        points.append(Point(i, over))
    return points


def _prepare_point(probe: str, point: Point):
    from .runner import prepare

    try:
        spec, cfg = prepare(probe, point.overrides)
    except InterpError as e:
        point.status, point.error = "invalid", str(e)
        return None
    point.config_hash = config_hash(probe, cfg)
    return spec, cfg


def _execute_point(probe: str, overrides: dict[str, Any], out: str, progress: bool = False) -> dict[str, Any]:
    """Run one point (in this process or a Ray worker); never raises."""
    from .runner import execute, prepare
    from .store import load_run

    try:
        spec, cfg = prepare(probe, overrides)
        path = execute(spec, cfg, out=out, progress=progress)
        return {"status": "done", "run_dir": str(path), "metrics": load_run(path, verify=False).metrics}
    except BaseException as e:  # noqa: BLE001 - a point's failure is recorded, the sweep goes on
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}


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
        if done:
            p.status, p.run_dir, p.metrics = "skipped", str(done[0].path), done[0].metrics
        elif runs and not retry_failed and any(r.status == "failed" for r in runs):
            failed = next(r for r in runs if r.status == "failed")
            p.status, p.run_dir, p.error = "failed", str(failed.path), failed.error
        else:
            todo.append(p)
    return points, todo


def run_local(spec: SweepSpec, todo: list[Point], out: Path, progress: bool) -> None:
    from tqdm.auto import tqdm

    # points of one model run together so the cached model is reused, not reloaded
    for p in tqdm(sorted(todo, key=lambda p: str(p.overrides.get("model", ""))), desc="sweep", disable=not progress):
        result = _execute_point(spec.probe, p.overrides, str(out))
        _apply(p, result)


def run_ray(spec: SweepSpec, todo: list[Point], out: Path, address: str | None, max_parallel: int | None,
            progress: bool) -> None:
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise InterpError("the ray executor needs the 'ray' extra: pip install 'interp[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": max(1, min(os.cpu_count() or 1, max_parallel or 64))}))
    try:
        remote = ray.remote(max_retries=0)(_execute_point)
        pending: dict[Any, Point] = {}
        queue = list(todo)
        limit = max_parallel or len(queue) or 1
        while queue or pending:
            while queue and len(pending) < limit:
                p = queue.pop(0)
                gpu = 1 if str(p.overrides.get("device", "")).startswith("cuda") else 0
                ref = remote.options(num_cpus=1, num_gpus=gpu).remote(spec.probe, p.overrides, str(out.resolve()))
                pending[ref] = p
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                p = pending.pop(ref)
                try:
                    _apply(p, ray.get(ref))
                except Exception as e:  # noqa: BLE001 - a dead worker fails its point only
                    _apply(p, {"status": "failed", "error": f"worker failed: {type(e).__name__}: {e}"})
                if progress:
                    print(f"  point {p.index}: {p.status}", file=sys.stderr, flush=True)
    finally:
        if started_here:
            ray.shutdown()


def _apply(p: Point, result: dict[str, Any]) -> None:
    p.status = result["status"]
    p.run_dir = result.get("run_dir")
    p.metrics = result.get("metrics", {})
    p.error = result.get("error")


def sweep(file: str | Path, out: str | Path | None = None, executor: str = "local", ray_address: str | None = None,
          max_parallel: int | None = None, retry_failed: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run a sweep file; returns the sweep record (also written to <out>/sweeps/<name>/sweep.json)."""
    if executor not in ("local", "ray"):
        raise ConfigError("executor", executor, '"local" or "ray"')
    if max_parallel is not None and max_parallel < 1:
        raise ConfigError("max_parallel", max_parallel, "a positive integer")
    spec = load_sweep(file)
    from .registry import get_probe

    get_probe(spec.probe)
    out = Path(out) if out is not None else default_root()
    t0 = time.time()
    points, todo = plan(spec, out, retry_failed)
    if todo:
        if executor == "ray":
            run_ray(spec, todo, out, ray_address, max_parallel, progress)
        else:
            run_local(spec, todo, out, progress)
    record = {
        "schema": 1, "name": spec.name, "file": str(Path(file).resolve()), "probe": spec.probe,
        "keys": spec.keys, "executor": executor, "seconds": round(time.time() - t0, 3),
        "points": [asdict(p) for p in points],
    }
    dest = out / "sweeps" / spec.name
    dest.mkdir(parents=True, exist_ok=True)
    atomic_write_text(dest / "sweep.json", json.dumps(jsonable(record), indent=1))
    return record


def format_table(record: dict[str, Any], n_metrics: int = 3) -> str:
    rows = []
    for p in record["points"]:
        varying = {k: p["overrides"].get(k) for k in record["keys"]}
        head = ", ".join(f"{k}={v}" for k, v in list(p["metrics"].items())[:n_metrics] if not isinstance(v, list))
        note = p["error"] or head
        rows.append(f"{p['index']:>4}  {p['status']:8s}  {json.dumps(varying)[:60]:60s}  {note[:100]}")
    return "\n".join(rows)


def main(args) -> int:
    """`interp sweep FILE ...`: exit 0 when every point is done or skipped, else 1."""
    record = sweep(args.file, out=args.out, executor=args.executor, ray_address=args.ray_address,
                   max_parallel=args.max_parallel, retry_failed=args.retry_failed, progress=not args.quiet)
    print(format_table(record))
    dest = Path(args.out or default_root()) / "sweeps" / record["name"] / "sweep.json"
    print(dest)
    bad = [p for p in record["points"] if p["status"] not in ("done", "skipped")]
    return 1 if bad else 0
