"""No public function or class of interp, or of one of its packages, is named like a submodule of that package.

Importing a submodule sets it as an attribute of its package, so a function `interp.sweep` was replaced by the
module `interp.sweep` as soon as anything imported that (the trap that broke `interp.capture` before).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import interp


def packages() -> list[str]:
    found = ["interp"]
    for m in pkgutil.walk_packages(interp.__path__, "interp."):
        if m.ispkg:
            found.append(m.name)
    return found


@pytest.mark.parametrize("name", packages())
def test_no_public_name_shadows_a_submodule(name):
    """A public name that is also a submodule's name fails, whatever it holds now: a lazy name (`_LAZY`) reads as
    the module once that is imported, and an eager one as whichever was bound last."""
    pkg = importlib.import_module(name)
    submodules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    lazy = set(getattr(pkg, "_LAZY", ()))
    public = getattr(pkg, "__all__", None) or [n for n in vars(pkg) if not n.startswith("_")]
    clashes = [n for n in public if n in submodules and (n in lazy or not inspect.ismodule(getattr(pkg, n)))]
    assert not clashes, f"{name}: public names {clashes} are also submodules of {name}: rename one"


def test_interp_public_functions_are_not_submodule_names():
    submodules = {m.name for m in pkgutil.iter_modules(interp.__path__)}
    functions = {n for n in interp.__all__ if inspect.isfunction(getattr(interp, n))}
    assert not functions & submodules, f"interp functions named like its submodules: {sorted(functions & submodules)}"
    assert interp.sweep.__name__ == "interp.sweep" and callable(interp.run_sweep)
