"""Tiny random-weight models of every family in interp.testing.FAMILIES, built once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory):
    """family -> a saved tiny model directory (built on first use)."""
    from interp.testing import tiny_family_dir

    root = tmp_path_factory.mktemp("families")
    made = {}

    def get(family: str):
        if family not in made:
            made[family] = tiny_family_dir(family, root / family)
        return made[family]

    return get


@pytest.fixture(scope="session")
def family_models(family_dirs):
    """family -> the loaded tiny model (CPU, float32, eager), one at a time (the last one is kept)."""
    from interp.models import load_model

    held: dict = {}

    def get(family: str):
        if family not in held:
            held.clear()
            held[family] = load_model(str(family_dirs(family)), device="cpu")
        return held[family]

    return get
