"""Where a model runs: the device, the dtype, the CPU threads, whether its weights fit the free memory, and waiting
for the device's queued work (`synchronize`, which every timer calls)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .resolve import Resolved, check_model_files

if TYPE_CHECKING:
    import torch



def pick_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device", device, "CUDA is not available here; use cpu or auto")
    return device


def synchronize(where=None) -> None:
    """Wait for the kernels queued on `where`'s device: a model (its `.device`), a tensor, a torch.device or a name
    ("cuda:1"); a no-op on the CPU and for None. A timer calls it before it starts and before it stops: CUDA kernels
    run asynchronously, so an unsynchronised timer measures the launches, not the work."""
    dev = getattr(where, "device", where)
    if dev is None or (getattr(dev, "type", None) or str(dev).partition(":")[0]) != "cuda":
        return
    import torch

    torch.cuda.synchronize(torch.device(dev))


def pick_dtype(device: str, dtype: str | None) -> "torch.dtype":
    import torch

    if dtype is None:
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def set_cpu_threads() -> int:
    """Torch threads = the cores actually free to us (affinity), at most the physical cores."""
    import torch

    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    physical = n
    try:
        import psutil

        physical = psutil.cpu_count(logical=False) or n
    except ImportError:  # pragma: no cover
        pass
    n = max(1, min(n, physical))
    for var in ("INTERP_THREADS", "OMP_NUM_THREADS"):  # Ray sets OMP_NUM_THREADS to a task's CPUs
        if os.environ.get(var, "").isdigit() and int(os.environ[var]) > 0:
            n = int(os.environ[var])
            break
    torch.set_num_threads(n)
    return n


def check_fits(res: Resolved, path: str, shapes: dict[str, tuple[int, ...]], device: str, dtype: "torch.dtype") -> None:
    """OutOfMemory, in one line naming the model's size and the free memory, when its weights in `dtype` (their
    sizes from the safetensors headers, nothing loaded) do not fit what `device` has free, nor the host RAM they
    load through, with a 10 % margin; before the weights load. Skipped for a hub id not yet downloaded."""
    import math

    from ..errors import OutOfMemory

    if res.source == "hub":
        return
    shapes = shapes or check_model_files(Resolved(res.name, "local", path))  # an embedded model: its cached files
    need = sum(math.prod(s) for s in shapes.values()) * dtype.itemsize
    for where in dict.fromkeys(("cpu", device)):
        free = free_memory(where)
        if need * 1.1 > free:
            raise OutOfMemory(f"model {res.name!r} needs {_bytes(need)} for its weights in "
                              f"{str(dtype).removeprefix('torch.')}, but {where} has {_bytes(free)} free: use a "
                              f"smaller model, a smaller dtype or another device")


def free_memory(device: str) -> int:
    """Bytes free for new tensors on `device`: on CUDA the driver's free memory (torch.cuda.mem_get_info) plus what
    torch's cache holds unused; on the CPU the available RAM (psutil)."""
    if device.startswith("cuda"):
        import torch

        dev = torch.device(device)
        return torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    import psutil

    return psutil.virtual_memory().available


def _bytes(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
