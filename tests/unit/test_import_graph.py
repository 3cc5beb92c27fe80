"""The layering of the source tree, read from the code (ast, nothing imported): the core (`interp`) imports no
probe and no dashboard module, and no module imports itself back through others (no cycle). Imports inside
functions count as much as those at the top of a module."""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("interp", "interp_probes", "interp_app")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The longest known module that `name` (a module or a name in one) lies in."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imports(mod: str, path: Path, mods: dict[str, Path]) -> set[str]:
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` is an arrow to pkg.mod; `from mod import name` one to mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        for t in targets:
            if (r := _resolve(t, mods)) is not None and r != mod:
                out.add(r)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def test_the_core_imports_no_probe_and_no_dashboard():
    graph = _graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.split(".")[0] == "interp"
                 for t in ts if t.split(".")[0] != "interp")
    assert not bad, "the core reaches up to probes or the dashboard:\n" + "\n".join(bad)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state and (found := visit(t)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycles():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_graph_sees_imports():  # the walk itself: relative, dotted and function-level imports all resolve
    graph = _graph()
    assert "interp.errors" in graph["interp.registry"]
    assert "interp_app.common" in graph["interp_app.views.generic"]
    assert "interp.registry" in graph["interp.display"]  # imported inside a function


def test_the_distributions_ship_no_generic_top_level_package():
    """`app` and `probes` would collide with other distributions' packages in site-packages."""
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for pattern in found["include"]:
        top = pattern.split(".")[0]
        assert top in PACKAGES, f"packages.find includes {pattern!r}: only {PACKAGES} are shipped"
    for name in ("app", "probes"):
        assert not (ROOT / name).exists(), f"a top-level {name}/ package is back"
