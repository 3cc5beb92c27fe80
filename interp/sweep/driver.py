"""`run_sweep`: check the arguments, plan the points, run them with the chosen executor and keep the outcome table,
``<out>/sweeps/<name>/sweep.json``, rewritten atomically when the sweep starts and after every point."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InterpError, Interrupted
from ..store import _now, atomic_write_text, default_root, jsonable
from .claims import CLAIM_TTL
from .execute import run_local
from .planning import plan
from .ray_executor import check_ray_address, point_devices, run_ray
from .resources import check_resources
from .spec import Point, load_sweep


def run_sweep(file: str | Path, out: str | Path | None = None, executor: str = "local", ray_address: str | None = None,
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
    from ..registry import get_probe

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

            try:
                if executor == "ray":
                    run_ray(spec, todo, out, ray_address, max_parallel, progress, cpus_per_point, gpus_per_point,
                            claim_ttl, on_point)
                else:
                    run_local(spec, todo, out, progress, claim_ttl, on_point)
            except (KeyboardInterrupt, Interrupted):  # the record says so; a rerun redoes the interrupted point
                write("interrupted")
                raise
    from ..display import SweepResult

    return SweepResult(write("finished"))  # a dict that renders with its points and figure in a notebook
