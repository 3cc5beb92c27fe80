"""Lazy re-exports for a package whose `__init__` is an index of its modules (`interp.sae`, `interp.models`,
`interp.sweep`): each public name loads its submodule on first use, so importing the package stays cheap."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any

Exports = tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]


def lazy_exports(package: str, table: dict[str, str]) -> Exports:
    """(`__getattr__`, `__dir__`, `__all__`) for `package`, where `table` maps each public name to the submodule
    (relative to the package) that defines it."""

    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(import_module(f"{package}.{table[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__, sorted(table)
