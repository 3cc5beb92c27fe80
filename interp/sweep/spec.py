"""The sweep file: a TOML grid of one probe's configs, parsed (`load_sweep`) and expanded into points (`expand`).

    probe = "logit_lens"
    models = ["smollm2-135m", "gemma3-270m"]      # optional; crossed with the grid
    [base]                                          # config fields shared by every point
    size = "micro"
    [grid]                                          # cartesian product over these keys
    prompt = ["The capital of France is", "The Eiffel Tower stands in"]
    [[zip]]                                         # each group's keys vary together
    top_k = [3, 5]
    max_tokens = [64, 128]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._files import read_parsed
from ..errors import InterpError

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass
class SweepSpec:
    name: str
    probe: str
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    zips: list[dict[str, list[Any]]]
    models: list[str]

    @property
    def keys(self) -> list[str]:
        return (["model"] if self.models else []) + list(self.grid) + [k for z in self.zips for k in z]


@dataclass
class Point:
    index: int
    overrides: dict[str, Any]
    config_hash: str | None = None
    status: str = "pending"
    """pending | done | skipped (already done, or done meanwhile by another driver) | failed | invalid"""
    run_dir: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None



def load_sweep(path: str | Path) -> SweepSpec:
    """Parse and check a sweep file; InterpError naming the problem."""
    path = Path(path)
    where = f"sweep file {str(path)!r}"
    doc = read_parsed(path, tomllib.loads, tomllib.TOMLDecodeError, InterpError,
                      f"{where} does not exist", lambda e: f"{where} is not valid TOML: {e}")
    unknown = set(doc) - {"probe", "name", "base", "grid", "zip", "models"}
    if unknown:
        raise InterpError(f"sweep file: unknown keys {sorted(unknown)}; allowed: probe, name, base, grid, zip, models")
    if not isinstance(doc.get("probe"), str):
        raise InterpError("sweep file: 'probe' (a probe name) is required")
    name = doc.get("name", path.stem)
    if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or "\\" in name:
        raise InterpError(f"sweep file: name {name!r} is invalid: a directory name under <out>/sweeps/, "
                          "not starting with '.'")
    grid = doc.get("grid", {})
    zips = doc.get("zip", [])
    zips = [zips] if isinstance(zips, dict) else zips
    for key, values in list(grid.items()) + [(k, v) for z in zips for k, v in z.items()]:
        if not isinstance(values, list) or not values:
            raise InterpError(f"sweep file: grid key {key!r} needs a non-empty list of values")
    for z in zips:
        if len({len(v) for v in z.values()}) > 1:
            raise InterpError(f"sweep file: zipped keys {sorted(z)} need lists of one length")
    models = doc.get("models", [])
    if not isinstance(models, list):
        raise InterpError("sweep file: 'models' must be a list of model names")
    return SweepSpec(name, doc["probe"], dict(doc.get("base", {})), dict(grid), zips, models)


def expand(spec: SweepSpec) -> list[Point]:
    """Every point: models x cartesian(grid) x each zipped group, in a stable order."""
    axes: list[list[dict[str, Any]]] = []
    if spec.models:
        axes.append([{"model": m} for m in spec.models])
    for key, values in spec.grid.items():
        axes.append([{key: v} for v in values])
    for z in spec.zips:
        n = len(next(iter(z.values())))
        axes.append([{k: z[k][i] for k in z} for i in range(n)])
    points = []
    for i, combo in enumerate(itertools.product(*axes) if axes else [()]):
        over = dict(spec.base)
        for part in combo:
            over.update(part)
        points.append(Point(i, over))
    return points
