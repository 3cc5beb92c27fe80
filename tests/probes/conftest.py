"""What every probe test shares: each runs the embedded model, so each is marked `slow`; and `quick`, the
quick run of the probe a module is named after (tests/probes/test_<probe>.py)."""

from __future__ import annotations

import pytest


def pytest_itemcollected(item):
    """Mark every test collected under tests/probes `slow` (before `-m` selects)."""
    item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def quick(request, quick_runs):
    """The test module's probe's `quick` run (a loaded Run, made once per session): test_lockin.py -> lockin."""
    return quick_runs(request.path.stem.removeprefix("test_"))
