"""bench/backends.py at its smoke size on the tiny random model: one row per backend, finite ratios."""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def test_backend_capture_at_smoke_size(tiny_model):
    from bench.backends import backend_capture
    from bench.common import Row

    rows = backend_capture(tiny_model, smoke=True)
    assert [r.name for r in rows] == ["backend_capture_tl", "backend_capture_nnsight", "backend_capture_nnsight_vs_tl"]
    for r in rows:
        assert isinstance(r, Row) and r.target == "report" and r.ok is None, r
        assert math.isfinite(r.value) and r.value > 0, r
