"""Shared fixtures: the embedded model (loaded once per session), tiny random models (of every family), stores."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
from quick import pin_numerics  # noqa: E402

pin_numerics()  # before torch loads: the golden records hold exact metrics, which the CPU's vector ISA decides
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def model():
    """SmolLM2-135M-Instruct through the default backend, shared by every test of the session."""
    from interp.context import cached_model
    from interp.registry import get_probe

    return cached_model(get_probe("logit_lens").config({}))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer random Llama (d_model 64) with SmolLM2's tokenizer, saved as a local model dir."""
    from interp.testing import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory):
    """family -> a saved tiny random model directory of that family (`interp.testing.tiny_family_dir`, default
    seed), built on first use and shared by the whole session."""
    from interp.testing import tiny_family_dir

    root = tmp_path_factory.mktemp("families")
    made = {}

    def get(family: str):
        if family not in made:
            made[family] = tiny_family_dir(family, root / family)
        return made[family]

    return get


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from interp.models import load_model

    return load_model(str(tiny_model_dir), device="cpu")


@pytest.fixture
def out_dir(tmp_path) -> Path:
    """An empty artifacts root."""
    d = tmp_path / "artifacts"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def micro_runs(tmp_path_factory, model):
    """probe name -> run directory of its `micro` size on the embedded model, made once per session
    on first use (shared by the app, determinism and backend tests)."""
    from interp.runner import execute, prepare

    root = tmp_path_factory.mktemp("micro-runs")
    made: dict[str, Path] = {}

    def get(probe: str) -> Path:
        if probe not in made:
            spec, cfg = prepare(probe, {"size": "micro"})
            made[probe] = execute(spec, cfg, out=root, model=model if cfg.model == "smollm2-135m" else None,
                                  progress=False)
        return made[probe]

    get.root = root
    return get


@pytest.fixture(scope="session")
def quick_runs(tmp_path_factory, model):
    """probe name -> its `quick` run on the embedded model (a loaded Run), made once per session on first use,
    with the overrides of tests/golden/quick.py: the probe tests read it and the golden test holds its metrics."""
    from quick import overrides

    from interp.runner import execute, prepare
    from interp.store import load_run

    root = tmp_path_factory.mktemp("quick-runs")
    made: dict = {}

    def get(probe: str):
        if probe not in made:
            spec, cfg = prepare(probe, overrides(probe, "smollm2-135m"))
            made[probe] = load_run(execute(spec, cfg, out=root, model=model, progress=False))
        return made[probe]

    return get
