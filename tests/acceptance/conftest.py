"""The acceptance tests run each probe's full configuration on the embedded model: every one is marked `slow`.
Their shared helpers are in acceptance.py (on the path through pyproject's pytest `pythonpath`)."""

from __future__ import annotations

import pytest


def pytest_itemcollected(item):
    """Mark every test collected under tests/acceptance `slow` (before `-m` selects)."""
    item.add_marker(pytest.mark.slow)
