"""The registry: the one list of probes that the CLI, sweeps, API and dashboard read.

A probe registers its config class (torch-free) with `@probe(name, run="module:function")`,
so names and configs are known and validated before any heavy import; the run function is
imported only when a run starts.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import ProbeConfig, build_config
from .errors import ConfigError

_REGISTRY: dict[str, "ProbeSpec"] = {}


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    config_cls: type[ProbeConfig]
    run_ref: str
    """"package.module:function" of the run function, imported lazily."""
    summary: str
    page: str | None = None
    """"package.module" of the dashboard page with render(run), if any."""

    def load_run(self) -> Callable[..., Any]:
        module, _, func = self.run_ref.partition(":")
        return getattr(importlib.import_module(module), func)

    def config(self, overrides: dict[str, Any] | None = None) -> ProbeConfig:
        return build_config(self.config_cls, overrides)


def probe(name: str, run: str, page: str | None = None) -> Callable[[type], type]:
    """Class decorator registering a probe config under `name`.

    The first line of the config class docstring is the probe's one-line summary.
    """

    def deco(cls: type) -> type:
        if not issubclass(cls, ProbeConfig):
            raise TypeError(f"{cls.__name__} must subclass ProbeConfig")
        summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        _REGISTRY[name] = ProbeSpec(name, cls, run, summary, page)
        return cls

    return deco


def _discover() -> None:
    """Import every probe package's registration (its torch-free __init__)."""
    import probes

    for info in pkgutil.iter_modules(probes.__path__):
        importlib.import_module(f"probes.{info.name}")


_DISCOVERED = False


def probes_available() -> dict[str, ProbeSpec]:
    """All registered probes by name, in name order."""
    global _DISCOVERED
    if not _DISCOVERED:  # not `if not _REGISTRY`: importing one probe package first must not hide the rest
        _discover()
        _DISCOVERED = True
    return dict(sorted(_REGISTRY.items()))


def get_probe(name: str) -> ProbeSpec:
    """The spec of probe `name`; ConfigError listing the known names otherwise."""
    known = probes_available()
    if name not in known:
        raise ConfigError("probe", name, "one of " + ", ".join(known))
    return known[name]
