"""The registry: the one list of probes that the CLI, sweeps, API and dashboard read.

A probe registers its config class (torch-free) with `@probe(name, run="module:function")`,
so names and configs are known and validated before any heavy import; the run function is
imported only when a run starts.

Probes come from the `interp.probes` entry-point group: each entry point names a torch-free module
(or an object in one) whose import registers one or more probes, with their config, run function
and page. The built-in probes are listed there by this project's pyproject.toml, third-party
packages add their own; a new built-in probe is seen once the project is installed again
(`pip install -e .` rewrites the entry points). A plugin that fails to import is left out with a
warning (`plugin_errors()` says why) instead of taking every other probe down.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, did_you_mean

_REGISTRY: dict[str, "ProbeSpec"] = {}


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    config_cls: type
    """The probe's `interp.config.ProbeConfig` subclass."""
    run_ref: str
    """"package.module:function" of the run function, imported lazily."""
    summary: str
    page: str | None = None
    """"package.module" of the dashboard page with render(run), if any."""
    figures: str | None = None
    """"package.module" of the probe's pure figure functions; its `headline(run)` is the run's notebook figure."""
    source: str = "interp"
    """The distribution that registered the probe (its entry point's), "interp" for the built-in ones."""
    question: str | None = None
    """The one question the probe asks, which its dashboard page opens with: the config class docstring's
    paragraph after the summary line (None when it has only the summary)."""
    method: str | None = None
    """A link to the probe's method: the first arXiv id (as an abs URL), else the first URL, in the docstring of
    the module that registers it."""

    def run_function(self) -> Callable[..., Any]:
        """The probe's run(cfg, ctx), imported from `run_ref` (not a stored run: that is `interp.load_run`)."""
        module, _, func = self.run_ref.partition(":")
        return getattr(importlib.import_module(module), func)

    def config(self, overrides: dict[str, Any] | None = None) -> Any:
        return self.config_cls.build(overrides)

    def headline(self) -> Callable[[Any], Any] | None:
        """The probe's `headline(run) -> Figure`: from its figures module, else its page module, else None."""
        for ref in (self.figures, self.page):
            if ref:
                fn = getattr(importlib.import_module(ref), "headline", None)
                if callable(fn):
                    return fn
        return None


def probe(name: str, run: str, page: str | None = None, figures: str | None = None) -> Callable[[type], type]:
    """Class decorator registering a probe config under `name`, with where its parts live.

    `run` is "module:function"; `page` the dashboard page module (render(run)); `figures` the module of its
    pure figure functions, whose `headline(run)` (or the page's) is the figure a run shows in a notebook.

    The probe's words live in two docstrings: the config class's first line is its one-line summary (`interp
    list`) and the paragraph after it the question its page opens with; the first arXiv id or URL in the
    registering module's docstring is the link to its method.
    """

    def deco(cls: type) -> type:
        if not getattr(cls, "IS_PROBE_CONFIG", False):  # ProbeConfig's marker (the registry imports no config)
            raise TypeError(f"{cls.__name__} must subclass ProbeConfig")
        paragraphs = [p for p in inspect.cleandoc(cls.__doc__ or "").split("\n\n") if p.strip()]
        summary = paragraphs[0].strip().splitlines()[0] if paragraphs else ""
        question = " ".join(paragraphs[1].split()) if len(paragraphs) > 1 else None
        method = _method_link(getattr(sys.modules.get(cls.__module__), "__doc__", None))
        _REGISTRY[name] = ProbeSpec(name, cls, run, summary, page, figures, _LOADING_SOURCE, question, method)
        return cls

    return deco


def _method_link(doc: str | None) -> str | None:
    """The first arXiv id in `doc` as its abs URL, else the first URL in it (trailing punctuation left off)."""
    if m := re.search(r"arXiv[:\s]*(\d{4}\.\d{4,5})", doc or "", re.I):
        return f"https://arxiv.org/abs/{m.group(1)}"
    if m := re.search(r"https?://[^\s)>\]]+", doc or ""):
        return m.group(0).rstrip(".,;:")
    return None


ENTRY_POINT_GROUP = "interp.probes"
_LOADING_SOURCE = "interp"
_PLUGIN_ERRORS: dict[str, str] = {}


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    """The `interp.probes` entry points of every installed distribution, one per name (first wins)."""
    seen: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        seen.setdefault(ep.name, ep)
    return [seen[k] for k in sorted(seen)]


def _discover() -> None:
    """Import every probe's registration: the `interp.probes` entry points, the one way probes are found."""
    global _LOADING_SOURCE
    for ep in _entry_points():
        dist = getattr(ep, "dist", None)
        _LOADING_SOURCE = getattr(dist, "name", None) or "interp"
        try:
            ep.load()
        except Exception as e:  # noqa: BLE001 - one broken plugin must not hide the other probes
            _failed(ep.name, ep.value, e)
        finally:
            _LOADING_SOURCE = "interp"


FIGURES_GROUP = "interp.figures"


def figure_function(name: str) -> Callable[..., Any] | None:
    """The function the `interp.figures` entry point `name` names ("sweep": a sweep record's figure), or None
    where no installed distribution provides one (the dashboard package provides them)."""
    for ep in importlib.metadata.entry_points(group=FIGURES_GROUP):
        if ep.name == name:
            return ep.load()
    return None


def _failed(name: str, where: str, e: Exception) -> None:
    _PLUGIN_ERRORS[name] = f"{where}: {type(e).__name__}: {e}"
    warnings.warn(f"interp: probe {name!r} ({where}) failed to load: {type(e).__name__}: {e}", stacklevel=3)


def plugin_errors() -> dict[str, str]:
    """{entry-point name: why it failed to load} for the plugins left out of the registry."""
    probes_available()
    return dict(_PLUGIN_ERRORS)


def refresh() -> None:
    """Discover again on the next `probes_available()` (after installing a plugin into a running process)."""
    global _DISCOVERED
    importlib.invalidate_caches()
    _DISCOVERED = False
    _PLUGIN_ERRORS.clear()


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
        raise ConfigError("probe", name, did_you_mean(name, known) + "one of " + ", ".join(known))
    return known[name]
