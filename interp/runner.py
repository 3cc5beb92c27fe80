"""run(): validate, create the run directory, call the probe, write status last."""

from __future__ import annotations

import os
import platform
import signal
from pathlib import Path
from typing import Any

from .config import config_hash, to_dict
from .registry import get_probe
from .store import RunWriter, default_root, load_run


def prepare(probe: str, overrides: dict[str, Any] | None = None):
    """(spec, cfg) with the config, the model name and the data the config names validated; imports no torch."""
    from .models import check_architecture, model_family, model_limits, resolve_model

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


def env_info() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("interp", "torch", "transformers", "transformer_lens", "sae_lens", "nnsight"):
        try:
            out[pkg] = version(pkg.replace("_", "-"))
        except PackageNotFoundError:
            pass
    return out


class _Terminated(BaseException):
    """SIGTERM: a BaseException so no `except Exception` carries on past it."""


def _raise_terminated(signum, frame):  # pragma: no cover - exercised by the reliability tests
    raise _Terminated(f"terminated by signal {signum}")


def execute(spec, cfg, out: str | Path | None = None, model: Any = None, progress: bool = True):
    """Run a validated config; returns the run directory. Failures are recorded, then re-raised."""
    from .context import RunContext

    root = Path(out) if out is not None else default_root()
    writer = RunWriter.create(root, spec.name, to_dict(cfg), config_hash(spec.name, cfg), cfg.seed, env_info())
    old = signal.getsignal(signal.SIGTERM) if _main_thread() else None
    if old is not None:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        run_fn = spec.run_function()
        ctx = RunContext(cfg, writer, model=model, progress=progress)
        run_fn(cfg, ctx)
        writer.log_timings(seconds_total=round(ctx.elapsed(), 3))
        writer.finish()
    except BaseException as e:
        writer.finish(error=e)
        raise
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    return writer.path


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
