"""What one point asks Ray for: CPUs, and GPUs when its device is CUDA."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError


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
