"""Every sweep file in sweeps/ parses, and every point's config validates against its probe, with no model loaded.

The checks are the sweep's own: `interp.sweep.plan` expands the grid and runs each point through
`interp.runner.prepare` (the probe's config class: field names, types, ranges; the backend; the model's layer
count and context; the data the config names), marking a point `invalid` with the reason. The paper-scale files
name hub models whose weights are not here, so `resolve_model` answers for them from a config.json holding
their published layer count and context (ARCH); hub datasets are accepted by name (INTERP_ONLINE=1 here;
nothing is downloaded). A renamed or re-ranged config field, a layer index past the model or a length past
its context therefore fails this test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from interp.sweep import expand, load_sweep, plan

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "sweeps").glob("*.toml"))

#: Hub models the sweep files name: (decoder layers, context length) from each model's published config.json.
ARCH = {
    "google/gemma-2-2b": (26, 8192),
    "google/gemma-2-2b-it": (26, 8192),
    "meta-llama/Llama-3.1-8B": (32, 131072),
    "meta-llama/Llama-3.1-8B-Instruct": (32, 131072),
}


@pytest.fixture
def known_models(monkeypatch, tmp_path):
    """`resolve_model` without weights or network: embedded names from the embedded table, hub ids from ARCH."""
    from interp import embedded
    from interp.models import resolve as resolution

    def resolve(name: str) -> resolution.Resolved:
        if name in embedded.EMBEDDED:
            return resolution.Resolved(name, "embedded", str(embedded.model_cache_dir(name)))
        if name not in ARCH:
            pytest.fail(f"a sweep file names model {name!r}: add its layers and context to ARCH in {__file__}")
        n_layers, n_ctx = ARCH[name]
        d = tmp_path / "hub" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps({"num_hidden_layers": n_layers, "max_position_embeddings": n_ctx}))
        return resolution.Resolved(name, "hf-cache", str(d))

    monkeypatch.setattr(resolution, "resolve_model", resolve)
    monkeypatch.setenv("INTERP_ONLINE", "1")  # hub datasets pass by name; resolve_model above never goes online


def test_there_are_paper_scale_files():
    probes = {load_sweep(f).probe for f in FILES}
    assert {"keystone", "atoms", "graph_sawtooth", "lockin"} <= probes, probes


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_point_of_a_sweep_file_is_a_valid_config(path, known_models, tmp_path):
    spec = load_sweep(path)
    points, todo = plan(spec, tmp_path / "out")
    bad = [f"point {p.index} {p.overrides.get('model')}: {p.error}" for p in points if p.status != "pending"]
    assert not bad, "\n".join(bad)
    assert len(todo) == len(points) >= 1
    assert len({p.config_hash for p in points}) == len(points), "two points share one config"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_sweep_file_states_its_gpu_memory_and_time(path):
    header = "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert "GPU memory" in header and re.search(r"\btime\b", header, re.I), f"{path.name}: no memory and time"
    if any(str(p.overrides.get("device", "")).startswith("cuda") for p in expand(load_sweep(path))):
        assert "ESTIMATE" in header and "estimate" in header, f"{path.name}: say that the numbers are estimates"


def test_a_renamed_field_is_caught(known_models, tmp_path):
    text = (ROOT / "sweeps" / "keystone_gpu.toml").read_text()
    assert "\ntop_p = " in text
    renamed = tmp_path / "renamed.toml"
    renamed.write_text(text.replace("\ntop_p = ", "\ntop_fraction = "))
    points, _ = plan(load_sweep(renamed), tmp_path / "out")
    assert {p.status for p in points} == {"invalid"} and all("top_fraction" in p.error for p in points)
