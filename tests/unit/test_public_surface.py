"""Probes and the dashboard import the core only through its public surface: `interp`'s own names and the public
modules its docstring lists (`interp.PUBLIC_MODULES`); never a private `interp._x` module, a module outside that
list, or a `_name` of a public one. A probe that needs more gets a re-export, or the module is declared public."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

import interp

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("interp_probes", "interp_app")
PUBLIC = {f"interp.{m}" for m in interp.PUBLIC_MODULES}


def _is_module(name: str) -> bool:
    parent, _, leaf = name.rpartition(".")
    base = ROOT.joinpath(*parent.split("."), leaf)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def violations(tree: ast.AST) -> list[str]:
    """`line: what` for every import of the core outside its public surface."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("interp.") and a.name not in PUBLIC:
                    bad.append(f"{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mod = node.module
            if mod == "interp":
                for a in node.names:
                    if a.name not in interp.__all__ and f"interp.{a.name}" not in PUBLIC:
                        bad.append(f"{node.lineno}: from interp import {a.name}")
            elif mod.startswith("interp."):
                if mod not in PUBLIC:
                    bad.append(f"{node.lineno}: from {mod} import ...")
                    continue
                for a in node.names:
                    if a.name.startswith("_"):
                        bad.append(f"{node.lineno}: from {mod} import {a.name} (a private name)")
                    elif _is_module(f"{mod}.{a.name}") and f"{mod}.{a.name}" not in PUBLIC:
                        bad.append(f"{node.lineno}: from {mod} import {a.name} (a module that is not public)")
    return bad


def _files() -> list[Path]:
    return sorted(p for d in SCANNED for p in (ROOT / d).rglob("*.py"))


def test_probes_and_app_use_only_the_public_surface():
    found = {}
    for path in _files():
        bad = violations(ast.parse(path.read_text(), str(path)))
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert not found, f"imports outside interp's public surface (interp/__init__.py's docstring): {found}"


def test_the_scan_sees_the_imports():
    assert len(_files()) > 50
    bad = violations(ast.parse(
        "import interp.sites\nimport interp._capture\nfrom interp._intervene import steer\n"
        "from interp.sae.source import load_sae\nfrom interp.sae import source\nfrom interp.store import _atomic\n"
        "from interp import steer, data, schedule\nfrom .x import y\n"
    ))
    assert [b.split(":")[0] for b in bad] == ["2", "3", "4", "5", "6", "7"], bad
    assert "schedule" in bad[-1]


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_module_exists(name):
    assert importlib.util.find_spec(name) is not None, f"{name} is declared public but does not exist"


def test_the_docstring_lists_the_public_modules():
    listed = set(re.findall(r"^    (interp\.[a-z_]+) ", interp.__doc__, re.M))
    assert listed == PUBLIC, f"docstring {sorted(listed ^ PUBLIC)} vs PUBLIC_MODULES"
    assert not any(m.rpartition(".")[2].startswith("_") for m in PUBLIC)
    missing = [n for n in interp.__all__ if not hasattr(interp, n)]
    assert not missing, f"interp.__all__ names that do not resolve: {missing}"
