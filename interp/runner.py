"""run(): validate, create the run directory, call the probe, write status last."""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import signal
import sys
from pathlib import Path
from typing import Any

from .config import config_hash, to_dict
from .errors import ConfigError, InterpError, Interrupted, OutOfMemory
from .registry import get_probe
from .store import RunWriter, default_root, load_run


def prepare(probe: str, overrides: dict[str, Any] | None = None):
    """(spec, cfg) with the config, the model name and the data the config names validated; imports no torch."""
    from .models.resolve import check_architecture, model_family, model_limits, resolve_model

    spec = get_probe(probe)
    cfg = spec.config(overrides)
    check_backend(spec.name, cfg)
    res = resolve_model(cfg.model)
    check_architecture(res)
    check_family(spec.name, cfg, model_family(res), res.name)
    limits = model_limits(res)
    cfg = cfg.at_depth(limits.n_layers)  # "resid_post@0.2" -> the layer of this model's depth
    cfg.validate_for_model(limits.n_layers)
    cfg.validate_data(limits)
    return spec, cfg


def check_backend(probe: str, cfg) -> None:
    """ConfigError naming the probe, the backend and what it lacks, before any model loads."""
    from .errors import ConfigError
    from .sites import CAPABILITIES

    missing = [need for need in cfg.REQUIRES if need not in CAPABILITIES[cfg.backend]]
    if missing:
        raise ConfigError("backend", cfg.backend, f"probe {probe} needs {', '.join(missing)}, which the "
                          f"{cfg.backend} backend lacks; use backend=tl")


def check_family(probe: str, cfg, family: str | None, model: str) -> None:
    """ConfigError naming the probe, the architecture and the capability it lacks, before any model loads: every
    site kind in the config's NEEDS_EXACT that this family cannot serve exactly (interp.families)."""
    from .errors import ConfigError
    from .families import unsupported
    from .sites import site_kind

    if family is None:
        return
    for kind in cfg.NEEDS_EXACT:
        why = unsupported(kind, family)
        if why:
            raise ConfigError("model", model, f"probe {probe}: site {kind} {why} ({family})")
    for name in cfg.SITE_FIELDS:  # a site the user named that this family cannot serve (mlp_up of a plain MLP)
        value = cfg.field_value(name)
        for v in value if isinstance(value, tuple) else (value,):
            kind = site_kind(v)
            why = unsupported(kind, family)
            if why and kind not in ("attn_rot_q", "attn_rot_k"):
                raise ConfigError(name, v, f"probe {probe}: site {kind} {why} ({family})")


def check_device(device: str) -> None:
    """ConfigError, torch-free, when `device` names a CUDA device this machine does not show: no GPU at all, or an
    index N of cuda:N beyond the GPUs it shows. Nothing where that cannot be told without CUDA (`cuda_device_count`
    is None): `interp.models.pick_device` checks again when the model loads."""
    if not device.startswith("cuda"):
        return
    n = cuda_device_count()
    if n is None:
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    env = f"CUDA_VISIBLE_DEVICES={visible!r}"
    if n == 0:
        why = f"{env} hides every GPU" if _nvidia_gpus() else "no NVIDIA GPU or driver here"
        raise ConfigError("device", device, f"CUDA is not available ({why}); use cpu or auto")
    if int(device.partition(":")[2] or 0) >= n:
        shown = f"{n} GPU{'s' if n > 1 else ''}" + (f" ({env})" if visible is not None else "")
        raise ConfigError("device", device, f"this machine shows {shown}: cuda, cuda:0..cuda:{n - 1}, cpu or auto")


def cuda_device_count() -> int | None:
    """How many GPUs CUDA would show this process, read from the NVIDIA driver's entries alone (no torch, no CUDA
    call, microseconds): the GPUs under /proc/driver/nvidia/gpus (else the /dev/nvidiaN nodes), narrowed by
    CUDA_VISIBLE_DEVICES as CUDA reads it. None where a count of 0 could be wrong: a ROCm (/dev/kfd) or WSL
    (/dev/dxg) machine, a system other than Linux and macOS (which has no CUDA)."""
    n = _nvidia_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return n if n is None or visible is None else _visible_count(visible, n)


def _nvidia_gpus() -> int | None:
    """The machine's NVIDIA GPUs by the driver's entries (all of them, whatever CUDA_VISIBLE_DEVICES says)."""
    if sys.platform == "darwin":
        return 0
    if not sys.platform.startswith("linux") or any(os.path.exists(p) for p in ("/dev/kfd", "/dev/dxg")):
        return None
    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        return len(list(gpus.iterdir())) if gpus.is_dir() else len(list(Path("/dev").glob("nvidia[0-9]*")))
    except OSError:
        return None


def _visible_count(visible: str, n: int) -> int:
    """GPUs CUDA shows under CUDA_VISIBLE_DEVICES=`visible` of `n`: the entries before the first invalid one (an
    index outside 0..n-1 or repeated; "-1" hides all); UUIDs (GPU-..., MIG-...) count as valid."""
    seen: set[str] = set()
    for item in (v.strip() for v in visible.split(",")):
        ok = item.startswith(("GPU-", "MIG-")) or (item.isdigit() and int(item) < n)
        if not ok or item in seen:
            break
        seen.add(item)
    return min(len(seen), n)


def env_info() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("interp", "torch", "transformers", "transformer_lens", "sae_lens", "nnsight"):
        try:
            out[pkg] = version(pkg.replace("_", "-"))
        except PackageNotFoundError:
            pass
    return out


class _Terminated(Interrupted):
    """SIGTERM: a BaseException so no `except Exception` carries on past it; the run reads interrupted."""


def _raise_terminated(signum, frame):  # pragma: no cover - exercised by the reliability tests
    raise _Terminated(f"terminated by signal {signum} ({signal.Signals(signum).name})")


def _record_end(writer, error: BaseException) -> None:
    """`writer.finish(error=error)` with SIGINT and SIGTERM held off (main thread): a second Ctrl-C while the
    manifest is written cannot leave the run reading running."""
    if not _main_thread():
        writer.finish(error=error)
        return
    held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        writer.finish(error=error)
    finally:
        for s, handler in held.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def execute(spec, cfg, out: str | Path | None = None, model: Any = None, progress: bool = True):
    """Run a validated config; returns the run directory. Failures are recorded, then re-raised; running out of
    memory as OutOfMemory naming the stage and the settings to lower (`out_of_memory`). SIGINT (KeyboardInterrupt)
    and SIGTERM (`_Terminated`, raised here in the main thread) end the run as interrupted, then propagate.

    A CUDA device the machine lacks is refused first (`check_device`), before torch loads or a directory is made."""
    from .context import RunContext

    if model is None:
        check_device(cfg.device)
    root = Path(out) if out is not None else default_root()
    writer = RunWriter.create(root, spec.name, to_dict(cfg), config_hash(spec.name, cfg), cfg.seed, env_info())
    old = signal.getsignal(signal.SIGTERM) if _main_thread() else None
    if old is not None:
        signal.signal(signal.SIGTERM, _raise_terminated)
    ctx = oom = None
    try:
        run_fn = spec.run_function()
        ctx = RunContext(cfg, writer, model=model, progress=progress)
        run_fn(cfg, ctx)
        writer.log_timings(seconds_total=round(ctx.elapsed(), 3))
        writer.finish()
    except BaseException as e:
        oom = out_of_memory(e, cfg, ctx.stage if ctx is not None else None)
        if oom is None:
            _record_end(writer, e)  # interrupted for SIGINT (KeyboardInterrupt) and SIGTERM, else failed
            raise
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    if oom is not None:  # out of the except block: the failed stage's frames and tensors are gone
        _free_device_memory()
        writer.finish(error=oom)
        raise oom
    return writer.path


#: Config fields that set how much a stage holds at once: batch sizes (batch_size, attn_batch_size, sft.micro_batch,
#: batch_seqs) and sequence lengths (seq_len, ctx_len, sft.max_len).
_MEMORY_FIELD = re.compile(r"(^|[._])([a-z_]*batch(_size|_seqs)?|[a-z_]*_len)$")


def out_of_memory(e: BaseException, cfg, stage: str | None) -> OutOfMemory | None:
    """The OutOfMemory a run fails with when `e` is torch's out-of-memory error (CUDA) or the host ran out (a
    MemoryError, torch's CPU allocator), naming the stage (`RunContext.stage`) and the config's batch-size and
    length fields to lower, with a halved value to try; None for any other error."""
    torch = sys.modules.get("torch")
    cuda_oom = getattr(torch, "OutOfMemoryError", None) or getattr(getattr(torch, "cuda", None), "OutOfMemoryError",
                                                                   None)
    if cuda_oom is not None and isinstance(e, cuda_oom):
        what = "CUDA out of memory"
    elif (isinstance(e, MemoryError) and not isinstance(e, InterpError)) or (
            isinstance(e, RuntimeError) and "can't allocate memory" in str(e)):
        what = "out of host memory"
    else:
        return None
    from .context import MODEL_LOAD

    what += f" in stage {stage!r}" if stage else " outside any named stage"
    if stage == MODEL_LOAD:
        return OutOfMemory(f"{what}: the weights of {cfg.model} do not fit; use a smaller model, a smaller dtype or "
                           f"another device")
    settings = {name: value for name, value in _flat(cfg) if _MEMORY_FIELD.search(name) and type(value) is int}
    asked = re.search(r"[Tt]ried to allocate ([0-9.]+ ?[KMGT]?i?B)", str(e))
    shown = [f"{k}={v}" for k, v in settings.items()] + ([f"tried to allocate {asked.group(1)}"] if asked else [])
    what += f" ({', '.join(shown)})" if shown else ""
    if not settings:
        return OutOfMemory(f"{what}: use a smaller size (--size quick), a smaller model or a smaller dtype")
    batch = [k for k in settings if "batch" in k.rpartition(".")[2]]
    length = [k for k in settings if k not in batch]
    lower = " or ".join(x for x in (", ".join(batch), ", ".join(length)) if x)
    can = [k for k in batch if settings[k] > 1] or [k for k in length if settings[k] > 1]  # batches first
    hint = f" (--set {can[0]}={settings[can[0]] // 2})" if len(can) == 1 else ""  # only where it is clear which
    return OutOfMemory(f"{what}: lower {lower}{hint}")


def _flat(cfg, prefix: str = ""):
    """(dotted name, value) of every field of config `cfg`, nested configs' fields included."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            yield from _flat(value, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, value


def _free_device_memory() -> None:
    """Give the CUDA cache's free blocks back after a run ran out of memory (a sweep runs the next point here)."""
    import gc

    torch = sys.modules.get("torch")
    gc.collect()
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread() and os.name == "posix"


def run(probe: str, out: str | Path | None = None, progress: bool = True, **overrides: Any):
    """Run `probe` with config overrides (dotted keys allowed: **{"sft.enable": True}).

    >>> r = interp.run("logit_lens", prompt="The capital of France is")
    >>> r.metrics["final_top1"]
    ' Paris'
    """
    spec, cfg = prepare(probe, overrides)
    return load_run(execute(spec, cfg, out=out, progress=progress))
