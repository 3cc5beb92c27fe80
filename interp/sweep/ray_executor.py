"""The Ray executor: each point a Ray task with the resources its device asks for, on a local runtime or a
cluster (`ray_address`). Every worker must reach the same output root (a shared filesystem on a cluster)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InterpError
from .claims import CLAIM_TTL
from .execute import _drive, _execute_point
from .resources import point_resources
from .spec import Point, SweepSpec


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
    from ..registry import get_probe

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
