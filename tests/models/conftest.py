"""Tiny random-weight models of every family in interp.testing.FAMILIES, loaded one at a time (their directories
come from the session fixture `family_dirs` of tests/conftest.py)."""

from __future__ import annotations

import pytest


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
