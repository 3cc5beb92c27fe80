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
root is skipped; a `failed` one is retried only with `retry_failed`; one whose run was interrupted
(its process killed, or stopped by SIGTERM) is run again. The outcome table goes to ``<out>/sweeps/<name>/sweep.json``,
rewritten atomically when the sweep starts and after every point, so a killed driver leaves the
last complete state. With Ray, every worker must reach the same output root (a shared filesystem
on a cluster).

A point runs only under its claim, ``<out>/sweeps/.claims/<probe>-<config hash>.json``, created
with O_EXCL by the process that runs it (a Ray worker, or the driver itself with the local
executor) and removed when the run ends. A claim whose holder is gone (its pid on this host, or no
heartbeat for `claim_ttl` seconds from another host) is taken over. So two drivers of one sweep run
every point once: a driver that finds a point claimed waits until the holder finishes it (then
records it `skipped`) or dies (then runs it).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .config import config_hash
from .errors import ConfigError, InterpError
from .store import _RUN_ID, RunInfo, _now, _pid_alive, atomic_write_text, default_root, inspect_run, jsonable, list_runs

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

CLAIMS = ".claims"
CLAIM_TTL = 60.0
"""Seconds without a heartbeat after which a claim written on another host counts as abandoned."""
POLL = 1.0
"""Seconds between the driver's looks at points another process holds."""


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
    """pending | done | skipped (already done, or done meanwhile by another driver) | failed | invalid"""
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
    name = doc.get("name", path.stem)
    if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or "\\" in name:
        raise InterpError(f"sweep file: name {name!r} is invalid: a directory name under <out>/sweeps/, "
                          "not starting with '.'")
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
    return SweepSpec(name, doc["probe"], dict(doc.get("base", {})), dict(grid), zips, models)


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


# ============================================================================= resources


@dataclass(frozen=True)
class PointResources:
    """What one point asks Ray for (`ray.remote(...).options(num_cpus=..., num_gpus=...)`)."""

    num_cpus: float
    """CPUs reserved for the point: the sweep's `cpus_per_point`."""
    num_gpus: float
    """GPUs: the sweep's `gpus_per_point` when the point's device is CUDA ("cuda", "cuda:0", or "auto" on a
    cluster that has GPUs), else 0. Ray then sets the worker's CUDA_VISIBLE_DEVICES to the GPUs it gave."""


def point_resources(device: str, cpus_per_point: float = 1.0, gpus_per_point: float = 1.0,
                    cluster_gpus: float = 0.0) -> PointResources:
    """The Ray request of a point whose config says `device`; ConfigError for a device Ray cannot give.

    A Ray worker sees only the GPUs it was given, numbered from 0, so "cuda:N" with N > 0 is refused
    (use "cuda"). "auto" picks CUDA when present: it asks for a GPU exactly when the cluster has one.
    """
    check_resources(cpus_per_point, gpus_per_point)
    if device == "cpu":
        return PointResources(cpus_per_point, 0.0)
    if device == "auto":
        return PointResources(cpus_per_point, gpus_per_point if cluster_gpus > 0 else 0.0)
    if device in ("cuda", "cuda:0"):
        return PointResources(cpus_per_point, gpus_per_point)
    if device.startswith("cuda:"):
        raise ConfigError("device", device, 'on Ray a point sees only the GPU it is given, as cuda:0: use "cuda"')
    raise ConfigError("device", device, 'one of "auto", "cpu", "cuda", "cuda:0" under the Ray executor')


def check_resources(cpus_per_point: float, gpus_per_point: float) -> None:
    for name, value in (("cpus_per_point", cpus_per_point), ("gpus_per_point", gpus_per_point)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError(name, value, "a positive number (fractions share a CPU or GPU between points)")


# ============================================================================= claims


def claim_path(out: Path | str, probe: str, chash: str) -> Path:
    """The claim file of the point with this config hash under the output root."""
    return Path(out) / "sweeps" / CLAIMS / f"{probe}-{chash}.json"


@dataclass
class Claim:
    """A point's claim, held by this process until `release()`; a thread refreshes its mtime (the heartbeat)."""

    path: Path
    """The claim file."""
    token: str
    """The random token written in it: only the holder that wrote it removes it."""
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)

    def heartbeat(self, every: float) -> None:
        def beat():
            while not self._stop.wait(every):
                try:
                    os.utime(self.path)
                except FileNotFoundError:
                    return

        threading.Thread(target=beat, name="interp-claim-heartbeat", daemon=True).start()

    def release(self) -> None:
        self._stop.set()
        held = read_claim(self.path)
        if held is not None and held.get("token") == self.token:
            self.path.unlink(missing_ok=True)


def read_claim(path: Path) -> dict[str, Any] | None:
    """The claim's record; None when there is no claim, {} while it is being written (or unreadable)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def _alive(record: dict[str, Any], path: Path, ttl: float) -> bool:
    """Whether a claim's holder may still be running its point."""
    pid = record.get("pid")
    if record.get("host") == socket.gethostname() and isinstance(pid, int):
        return _pid_alive(pid)
    try:
        return time.time() - path.stat().st_mtime < ttl  # another host (or a claim being written): the heartbeat
    except FileNotFoundError:
        return False


def claim_holder(path: Path, ttl: float = CLAIM_TTL) -> dict[str, Any] | None:
    """The record of a live claim on `path`, or None when nobody holds it (no claim, or an abandoned one)."""
    record = read_claim(path)
    return record if record is not None and _alive(record, path, ttl) else None


def try_claim(path: Path, ttl: float = CLAIM_TTL) -> Claim | None:
    """Take the claim on `path` (an O_EXCL create); None when a live process holds it. An abandoned claim is
    moved aside (one rename wins) and taken; if what was moved turns out to be a fresh claim, it is put back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    record = {"host": socket.gethostname(), "pid": os.getpid(), "token": token, "claimed": _now()}
    for _ in range(8):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            held = read_claim(path)
            if held is None:
                continue  # released meanwhile: try again
            if _alive(held, path, ttl):
                return None
            aside = path.with_name(f".{path.name}.{token}.stale")
            try:
                os.rename(path, aside)
            except FileNotFoundError:
                continue
            if read_claim(aside) != held:  # a fresh claim replaced the abandoned one meanwhile: give it back
                try:
                    os.link(aside, path)
                except FileExistsError:
                    pass
                aside.unlink(missing_ok=True)
                return None
            aside.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(record))
            f.flush()
            os.fsync(f.fileno())
        return Claim(path, token)
    return None


def done_runs(out: Path | str, probe: str, chash: str) -> list[RunInfo]:
    """The `done` runs (files verified) of the config hash `chash` under `out`, found by the hash in the run id."""
    base = Path(out) / probe
    if not base.is_dir():
        return []
    found = []
    for d in base.glob(f"*-{chash[:8]}-*"):
        if d.is_dir() and _RUN_ID.match(d.name):
            info = inspect_run(d)
            if info.status == "done" and info.config_hash == chash:
                found.append(info)
    return sorted(found, key=lambda r: r.run_id)


# ============================================================================= planning and running


def _prepare_point(probe: str, point: Point):
    from .runner import prepare

    try:
        spec, cfg = prepare(probe, point.overrides)
    except InterpError as e:
        point.status, point.error = "invalid", str(e)
        return None
    point.config_hash = config_hash(probe, cfg)
    return spec, cfg


def _execute_point(probe: str, overrides: dict[str, Any], out: str, progress: bool = False,
                   claim_ttl: float = CLAIM_TTL) -> dict[str, Any]:
    """Run one point under its claim (in this process or a Ray worker); never raises.

    status: done | failed | skipped (another process finished it before the claim was taken) | claimed (another
    live process holds it: the driver waits for that one).
    """
    from .runner import execute, prepare
    from .store import load_run

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
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    finally:
        if claim is not None:
            claim.release()


def stopped_by_signal(run: RunInfo) -> bool:
    """A failed run that SIGTERM stopped (as Ray stops a dead driver's workers): interrupted, not failed on its own,
    so a rerun redoes it without `retry_failed`."""
    from .runner import _Terminated

    return (run.error or "").startswith(f"{_Terminated.__name__}: ")


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


def run_local(spec: SweepSpec, todo: list[Point], out: Path, progress: bool, claim_ttl: float = CLAIM_TTL,
              on_point: Callable[[Point], None] = lambda p: None) -> None:
    started: list[Point] = []
    _drive(spec.probe, todo, out, 1, claim_ttl, started.append,
           lambda timeout: [(p, _execute_point(spec.probe, p.overrides, str(out), claim_ttl=claim_ttl))
                            for p in [started.pop()]],
           on_point)


def check_ray_address(address: str | None) -> None:
    """InterpError in one line when a cluster address is malformed or nothing listens there (5 s at most),
    before Ray's own connection attempts (which retry for a minute)."""
    if address in (None, "auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError("ray_address", address, "host:port of a Ray cluster's head (or ray://host:port, auto)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise InterpError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


def point_devices(spec: SweepSpec, todo: list[Point], cpus_per_point: float, gpus_per_point: float) -> dict[int, str]:
    """Each point's config device by index; ConfigError for one that Ray cannot give (`point_resources`)."""
    from .registry import get_probe

    devices = {p.index: get_probe(spec.probe).config(p.overrides).device for p in todo}
    for device in set(devices.values()):
        point_resources(device, cpus_per_point, gpus_per_point)
    return devices


def run_ray(spec: SweepSpec, todo: list[Point], out: Path, address: str | None, max_parallel: int | None,
            progress: bool, cpus_per_point: float = 1.0, gpus_per_point: float = 1.0,
            claim_ttl: float = CLAIM_TTL, on_point: Callable[[Point], None] = lambda p: None) -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise InterpError("the ray executor needs the 'ray' extra: pip install 'interp[ray]'") from None
    devices = point_devices(spec, todo, cpus_per_point, gpus_per_point)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": max(1, min(os.cpu_count() or 1, max_parallel or 64))}))
    try:
        cluster_gpus = float(ray.cluster_resources().get("GPU", 0))
        remote = ray.remote(max_retries=0)(_execute_point)
        pending: dict[Any, Point] = {}
        root = str(out.resolve())

        def start(p: Point) -> None:
            res = point_resources(devices[p.index], cpus_per_point, gpus_per_point, cluster_gpus)
            ref = remote.options(num_cpus=res.num_cpus, num_gpus=res.num_gpus).remote(
                spec.probe, p.overrides, root, False, claim_ttl)
            pending[ref] = p

        def wait(timeout: float):
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
            for ref in ready:
                p = pending.pop(ref)
                try:
                    yield p, ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a dead worker or node fails its point only
                    cause = " ".join(str(e).split())[:400]
                    yield p, {"status": "failed", "error": f"worker failed: {type(e).__name__}: {cause}"}

        _drive(spec.probe, todo, out, max_parallel or len(todo) or 1, claim_ttl, start, wait, on_point)
    finally:
        if started_here:
            ray.shutdown()


def _apply(p: Point, result: dict[str, Any]) -> None:
    p.status = result["status"]
    p.run_dir = result.get("run_dir")
    p.metrics = result.get("metrics", {})
    p.error = result.get("error")


def sweep(file: str | Path, out: str | Path | None = None, executor: str = "local", ray_address: str | None = None,
          max_parallel: int | None = None, retry_failed: bool = False, progress: bool = True,
          cpus_per_point: float = 1.0, gpus_per_point: float = 1.0, claim_ttl: float = CLAIM_TTL) -> dict[str, Any]:
    """Run a sweep file; returns the sweep record (also written to <out>/sweeps/<name>/sweep.json, atomically,
    when the sweep starts, after every point and at the end).

    With executor="ray", each point is a Ray task asking for `cpus_per_point` CPUs and, when its device is CUDA,
    `gpus_per_point` GPUs (`point_resources`); `ray_address` names an existing cluster, else a local runtime
    starts. `claim_ttl`: seconds without a heartbeat after which another host's claim on a point is abandoned.
    """
    if executor not in ("local", "ray"):
        raise ConfigError("executor", executor, '"local" or "ray"')
    if ray_address is not None and executor != "ray":
        raise ConfigError("ray_address", ray_address, 'only with executor="ray"')
    if max_parallel is not None and (isinstance(max_parallel, bool) or not isinstance(max_parallel, int)
                                     or max_parallel < 1):
        raise ConfigError("max_parallel", max_parallel, "a positive integer")
    check_resources(cpus_per_point, gpus_per_point)
    if isinstance(claim_ttl, bool) or not isinstance(claim_ttl, (int, float)) or not claim_ttl > 0:
        raise ConfigError("claim_ttl", claim_ttl, "a positive number of seconds")
    spec = load_sweep(file)
    from .registry import get_probe

    get_probe(spec.probe)
    out = Path(out) if out is not None else default_root()
    t0 = time.time()
    if executor == "ray":
        check_ray_address(ray_address)
    points, todo = plan(spec, out, retry_failed)
    if executor == "ray":
        point_devices(spec, todo, cpus_per_point, gpus_per_point)  # before anything is written
    dest = out / "sweeps" / spec.name
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InterpError(f"cannot create the sweep directory {dest}: {e.strerror or e}") from None
    lock = threading.Lock()

    def write(state: str) -> dict[str, Any]:
        record = {
            "schema": 1, "name": spec.name, "file": str(Path(file).resolve()), "probe": spec.probe,
            "keys": spec.keys, "executor": executor, "state": state, "seconds": round(time.time() - t0, 3),
            "driver": {"host": socket.gethostname(), "pid": os.getpid()}, "updated": _now(),
            "points": [asdict(p) for p in points],
        }
        with lock:
            atomic_write_text(dest / "sweep.json", json.dumps(jsonable(record), indent=1))
        return record

    write("running")
    if todo:
        from tqdm.auto import tqdm

        with tqdm(total=len(todo), desc=f"sweep {spec.name}", disable=not progress) as bar:
            def on_point(p: Point) -> None:
                write("running")
                bar.set_postfix_str(f"point {p.index}: {p.status}")
                bar.update()

            if executor == "ray":
                run_ray(spec, todo, out, ray_address, max_parallel, progress, cpus_per_point, gpus_per_point,
                        claim_ttl, on_point)
            else:
                run_local(spec, todo, out, progress, claim_ttl, on_point)
    from .display import SweepResult

    return SweepResult(write("finished"))  # a dict that renders with its points and figure in a notebook


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
                   max_parallel=args.max_parallel, retry_failed=args.retry_failed, progress=not args.quiet,
                   cpus_per_point=args.cpus_per_point, gpus_per_point=args.gpus_per_point)
    print(format_table(record))
    dest = Path(args.out or default_root()) / "sweeps" / record["name"] / "sweep.json"
    print(dest)
    bad = [p for p in record["points"] if p["status"] not in ("done", "skipped")]
    return 1 if bad else 0
