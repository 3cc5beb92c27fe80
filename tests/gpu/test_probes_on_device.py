"""Every registered probe's micro config on the test device (CUDA) in bfloat16 and float32: the run is done,
its metrics finite, and the identities it asserts hold in both dtypes (keystone's teacher-forced recording,
patching's agreement with TransformerLens, weight edits undone exactly)."""

from __future__ import annotations

import math

import pytest

from interp.registry import probes_available

DTYPES = ("bfloat16", "float32")
PROBES = sorted(probes_available())


def _finite(value) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("probe", PROBES)
def test_micro_run_is_done_finite_and_restores_weights(gpu_runs, probe, dtype):
    run = gpu_runs(probe, dtype)
    assert run.status == "done", run.manifest.get("error")
    m = run.metrics
    bad = {k: v for k, v in m.items() if not _finite(v)}
    assert not bad, f"non-finite metrics: {bad}"
    for k, v in m.items():
        if "weights_unchanged" in k:
            assert v is True, f"{k} = {v}: an edit was not undone exactly"
    if probe == "keystone":
        assert m["teacher_forced_max_rel_err"] <= 1e-3, f"{m['teacher_forced_max_rel_err']:.2e} in {dtype}"
        assert m["tf_keystone_sets_identical"] is True


@pytest.mark.parametrize("dtype", DTYPES)
def test_patching_agrees_with_transformer_lens(gpu_models, dtype):
    from bench.patching import patching_sweep

    rows = {r.name: r for r in patching_sweep(gpu_models(dtype), smoke=True)}
    r = rows["patching_vs_tl_max_diff"]
    assert r.ok, f"{r.value:.3g} {r.target} in {dtype}: {r.detail}"
