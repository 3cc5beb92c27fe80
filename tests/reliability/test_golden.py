"""The refactor guard: every probe's quick-config metrics on smollm2-135m equal the ones recorded before the core
was reshaped (tests/golden/quick_smollm2-135m.json, written by tests/golden/record.py), wall-clock metrics aside, on a
machine whose float kernels equal the recording one's (tests/golden/quick.py: numerics; the suite pins them).

The runs are the probe tests' own (`quick_runs`), so this costs nothing beyond them; gemma3-270m is held by
`python tests/golden/record.py gemma3-270m --check` (about 15 min here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
from quick import GOLDEN, comparable, numerics_differ  # noqa: E402

pytestmark = pytest.mark.slow
WANT = json.loads((GOLDEN / "quick_smollm2-135m.json").read_text())


@pytest.mark.parametrize("probe", sorted(p for p in WANT if not p.startswith("_")))
def test_quick_metrics_unchanged(probe, quick_runs):
    if why := numerics_differ(WANT, probe):
        pytest.skip(why)
    got = comparable(quick_runs(probe).metrics)
    want = comparable(WANT[probe])
    diff = {k: (want.get(k), got.get(k)) for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)}
    assert not diff, f"{probe}: {len(diff)} quick metrics changed: {dict(list(diff.items())[:8])}"
