"""Sweeps: grid expansion, resume by config hash, failures isolated, local and Ray executors."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from interp.errors import InterpError
from interp.sweep import expand, load_sweep, run_sweep

SWEEP = """
probe = "logit_lens"
models = ["smollm2-135m", "gemma3-270m"]
[base]
size = "micro"
[grid]
prompt = ["The capital of France is", "The Eiffel Tower stands in the city of"]
"""


def write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_expansion_with_zip(tmp_path):
    spec = load_sweep(write(tmp_path, 'probe = "logit_lens"\n[grid]\ntop_k = [1, 2, 3]\n'
                                      '[[zip]]\nprompt = ["a b", "c d"]\nmax_tokens = [10, 20]\n'))
    points = expand(spec)
    assert len(points) == 6
    assert {(p.overrides["prompt"], p.overrides["max_tokens"]) for p in points} == {("a b", 10), ("c d", 20)}


@pytest.mark.parametrize("text, needle", [
    ("probe = 1", "probe"), ('probe = "logit_lens"\n[grid]\ntop_k = 3', "top_k"),
    ('probe = "logit_lens"\nbogus = 1', "bogus"), ("not toml ===", "TOML"),
    ('probe = "logit_lens"\n[[zip]]\na = [1]\nb = [1, 2]', "one length"),
])
def test_bad_sweep_files(tmp_path, text, needle):
    with pytest.raises(InterpError) as e:
        load_sweep(write(tmp_path, text))
    assert needle in str(e.value)


@pytest.mark.slow
@pytest.mark.gemma
def test_local_sweep_resume_and_redo(tmp_path):
    f, out = write(tmp_path, SWEEP), tmp_path / "out"
    rec = run_sweep(f, out=out, progress=False)
    assert [p["status"] for p in rec["points"]] == ["done"] * 4
    assert (out / "sweeps" / "s" / "sweep.json").is_file()
    t0 = time.perf_counter()
    again = run_sweep(f, out=out, progress=False)
    assert time.perf_counter() - t0 < 10 and [p["status"] for p in again["points"]] == ["skipped"] * 4
    victim = rec["points"][2]["run_dir"]
    shutil.rmtree(victim)
    third = run_sweep(f, out=out, progress=False)
    assert [p["status"] for p in third["points"]] == ["skipped", "skipped", "done", "skipped"]


@pytest.mark.slow
def test_invalid_point_fails_alone(tmp_path, model):
    f = write(tmp_path, 'probe = "logit_lens"\n[base]\nsize = "micro"\n[grid]\ntop_k = [3, 0, 4]\n')
    rec = run_sweep(f, out=tmp_path / "out", progress=False)
    assert [p["status"] for p in rec["points"]] == ["done", "invalid", "done"]
    assert "top_k" in rec["points"][1]["error"]


@pytest.mark.slow
@pytest.mark.gemma
@pytest.mark.ray
def test_ray_sweep_on_a_local_runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        f, out = write(tmp_path, SWEEP), tmp_path / "out"
        rec = run_sweep(f, out=out, executor="ray", max_parallel=2, progress=False)
    finally:
        ray.shutdown()
    assert [p["status"] for p in rec["points"]] == ["done"] * 4, [p["error"] for p in rec["points"]]
    metrics = [p["metrics"]["final_top1"] for p in rec["points"]]
    assert metrics[0] == " Paris"
    record = json.loads((out / "sweeps" / "s" / "sweep.json").read_text())
    assert record["executor"] == "ray" and len(record["points"]) == 4
