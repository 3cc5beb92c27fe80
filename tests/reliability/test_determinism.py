"""Determinism: each probe's micro config on the CPU gives exactly the metrics recorded for it before
(tests/golden/micro_smollm2-135m.json, written by `python tests/golden/record.py smollm2-135m --micro` in
another process), wall-clock metrics aside. A same-seed rerun in another process reproducing every number is
determinism across processes, and the record doubles as the refactor guard of the micro configs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from interp.registry import probes_available
from interp.store import load_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
from quick import GOLDEN, comparable, numerics_differ  # noqa: E402

pytestmark = pytest.mark.slow
WANT = json.loads((GOLDEN / "micro_smollm2-135m.json").read_text())


@pytest.mark.parametrize("probe", sorted(probes_available()))
def test_same_seed_same_metrics(probe, micro_runs):
    if why := numerics_differ(WANT, probe):
        pytest.skip(why)
    assert probe in WANT, f"no recorded micro metrics for {probe}: python tests/golden/record.py smollm2-135m --micro"
    got = comparable(load_run(micro_runs(probe)).metrics)
    want = comparable(WANT[probe])
    diff = {k: (want.get(k), got.get(k)) for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)}
    assert not diff, f"{probe}: {len(diff)} micro metrics differ from the record: {dict(list(diff.items())[:8])}"
