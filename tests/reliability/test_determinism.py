"""Determinism: each probe's micro config, run twice with one seed on the CPU, gives identical metrics."""

from __future__ import annotations

import pytest

from interp.registry import probes_available
from interp.store import load_run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("probe", sorted(probes_available()))
def test_same_seed_same_metrics(probe, micro_runs, model, tmp_path):
    from interp.runner import execute, prepare

    first = load_run(micro_runs(probe))
    spec, cfg = prepare(probe, {"size": "micro"})
    second = load_run(execute(spec, cfg, out=tmp_path, model=model, progress=False))
    assert first.manifest["config_hash"] == second.manifest["config_hash"]
    assert first.metrics == second.metrics, {
        k: (first.metrics.get(k), second.metrics.get(k))
        for k in set(first.metrics) | set(second.metrics) if first.metrics.get(k) != second.metrics.get(k)}
