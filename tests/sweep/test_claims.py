"""Sweep points on Ray and under concurrency: the device -> Ray resources mapping, per-point claims (O_EXCL
files in the output root), two local drivers of one sweep, and the CLI's one-line refusals."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interp.errors import ConfigError
from interp.store import list_runs, verify_files
from interp.sweep import (
    PointResources,
    claim_holder,
    claim_path,
    done_runs,
    point_resources,
    read_claim,
    try_claim,
)

# ============================================================================= device -> Ray resources


@pytest.mark.parametrize("device, cluster_gpus, cpus, gpus, want", [
    ("cpu", 0, 1, 1, PointResources(1, 0)),
    ("cpu", 4, 2, 1, PointResources(2, 0)),           # a CPU point never takes a GPU, even where there are some
    ("cuda", 0, 1, 1, PointResources(1, 1)),          # asked for explicitly: Ray waits for a GPU node
    ("cuda:0", 8, 4, 0.5, PointResources(4, 0.5)),    # a fraction shares a GPU between points
    ("auto", 0, 1, 1, PointResources(1, 0)),          # auto on a CPU-only cluster: the CPU
    ("auto", 2, 1, 1, PointResources(1, 1)),          # auto where the cluster has GPUs: one GPU
    ("auto", 2, 0.5, 0.25, PointResources(0.5, 0.25)),
])
def test_device_maps_to_num_gpus_and_cpus_by_config(device, cluster_gpus, cpus, gpus, want):
    assert point_resources(device, cpus, gpus, cluster_gpus) == want


@pytest.mark.parametrize("device, cpus, gpus, needle", [
    ("cuda:1", 1, 1, "device='cuda:1'"),   # a Ray worker sees its GPU as cuda:0
    ("mps", 1, 1, "device='mps'"),
    ("cpu", 0, 1, "cpus_per_point=0"),
    ("cuda", 1, -1, "gpus_per_point=-1"),
    ("cpu", float("nan"), 1, "cpus_per_point=nan"),
])
def test_resources_the_cluster_cannot_give_are_config_errors(device, cpus, gpus, needle):
    with pytest.raises(ConfigError) as e:
        point_resources(device, cpus, gpus, 8)
    assert needle in str(e.value) and "\n" not in str(e.value)


# ============================================================================= claims


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_claim_is_exclusive_and_released_only_by_its_holder(tmp_path):
    path = claim_path(tmp_path, "logit_lens", "ab" * 32)
    first = try_claim(path)
    assert first is not None and path.is_file()
    record = read_claim(path)
    assert record["pid"] == os.getpid() and record["token"] == first.token
    assert try_claim(path) is None, "a live holder's claim was taken"
    assert claim_holder(path) == record
    first.release()
    assert not path.exists() and claim_holder(path) is None
    again = try_claim(path)
    assert again is not None
    first.release()  # a stale handle must not remove the new holder's claim
    assert read_claim(path)["token"] == again.token
    again.release()


def test_an_abandoned_claim_is_taken_over(tmp_path):
    here = socket.gethostname()
    path = claim_path(tmp_path, "logit_lens", "cd" * 32)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"host": here, "pid": _dead_pid(), "token": "dead"}))
    assert claim_holder(path) is None
    taken = try_claim(path)
    assert taken is not None and read_claim(path)["token"] == taken.token, "a dead pid's claim was not taken over"
    taken.release()
    # another host's claim: alive while its heartbeat (the mtime) is younger than the ttl
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "far"}))
    assert try_claim(path, ttl=30) is None
    old = time.time() - 60
    os.utime(path, (old, old))
    assert claim_holder(path, ttl=30) is None
    taken = try_claim(path, ttl=30)
    assert taken is not None and read_claim(path)["token"] == taken.token
    taken.heartbeat(0.05)  # the holder's heartbeat keeps its claim young
    os.utime(path, (old, old))
    time.sleep(0.3)
    assert time.time() - path.stat().st_mtime < 5
    taken.release()
    # a claim being written (empty) is judged by its age alone
    path.write_text("")
    assert try_claim(path, ttl=30) is None
    os.utime(path, (old, old))
    assert try_claim(path, ttl=30) is not None


def test_a_takeover_in_progress_blocks_others_until_its_lock_is_abandoned(tmp_path):
    path = claim_path(tmp_path, "logit_lens", "ef" * 32)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "token": "dead"}))
    lock = path.with_name(f".{path.name}.takeover")
    lock.write_text("")  # another process is taking this abandoned claim over
    assert try_claim(path) is None, "a second process took over a claim while another held the takeover lock"
    assert read_claim(path)["token"] == "dead"
    old = time.time() - 60
    os.utime(lock, (old, old))  # ... and died midway: its lock is cleared, the claim taken on the next try
    assert try_claim(path) is None and not lock.exists()
    taken = try_claim(path)
    assert taken is not None and read_claim(path)["token"] == taken.token and not lock.exists()
    taken.release()


def _race(path: str, start: float, q, everyone_tried) -> None:
    while time.time() < start:
        time.sleep(0.001)
    claim = try_claim(Path(path))
    q.put(claim is not None)
    everyone_tried.wait(60)  # hold it (stay alive) until every racer has tried: a dead holder's claim is fair game


@pytest.mark.parametrize("stale", [False, True])
def test_processes_racing_for_one_claim_one_wins(tmp_path, stale):
    ctx = mp.get_context("fork")
    for round_ in range(5):
        path = claim_path(tmp_path, "logit_lens", f"{round_:02d}" * 32)
        if stale:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "token": "dead"}))
        q, everyone_tried = ctx.Queue(), ctx.Event()
        start = time.time() + 0.3
        procs = [ctx.Process(target=_race, args=(str(path), start, q, everyone_tried)) for _ in range(6)]
        for p in procs:
            p.start()
        wins = [q.get(timeout=30) for _ in procs]
        everyone_tried.set()
        for p in procs:
            p.join(timeout=30)
        assert sum(wins) == 1, f"round {round_}: {sum(wins)} of 6 processes took the claim"


# ============================================================================= two local drivers


def test_two_local_drivers_run_every_point_once(tmp_path, tiny_model_dir):
    """Two `interp sweep` processes of one sweep at once (local executor, tiny model): every point is done
    exactly once under the root, and both records list every point once as done or skipped."""
    f = tmp_path / "pair.toml"
    f.write_text(f'probe = "logit_lens"\n[base]\nsize = "micro"\nmodel = {json.dumps(str(tiny_model_dir))}\n'
                 '[grid]\ntop_k = [1, 2, 3, 4, 5, 6]\n')
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "interp.cli", "sweep", str(f), "--out", str(out), "-q"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    runs = list_runs(out, probe="logit_lens")
    by_hash: dict[str, list] = {}
    for r in runs:
        by_hash.setdefault(r.config_hash, []).append(r)
    record = json.loads((out / "sweeps" / "pair" / "sweep.json").read_text())
    hashes = [p["config_hash"] for p in record["points"]]
    assert len(set(hashes)) == 6 and record["state"] == "finished"
    assert {h: len(v) for h, v in by_hash.items()} == {h: 1 for h in hashes}, "a point ran twice, or not at all"
    for r in runs:
        assert r.status == "done"
        verify_files(r.path, json.loads((r.path / "manifest.json").read_text()))
    assert {p["status"] for p in record["points"]} <= {"done", "skipped"}
    assert {p["run_dir"] for p in record["points"]} == {str(r.path) for r in runs}
    assert not list((out / "sweeps" / ".claims").iterdir()), "a claim was left behind"
    assert [len(done_runs(out, "logit_lens", h)) for h in hashes] == [1] * 6


# ============================================================================= the CLI


@pytest.mark.parametrize("args, needle", [
    (["--executor", "ray", "--cpus-per-point", "0"], "cpus_per_point=0.0"),
    (["--executor", "ray", "--gpus-per-point", "-1"], "gpus_per_point=-1.0"),
    (["--ray-address", "127.0.0.1:6379"], "ray_address"),
    (["--executor", "ray", "--ray-address", "127.0.0.1:1"], "cannot reach the Ray cluster at 127.0.0.1:1"),
    (["--executor", "ray", "--ray-address", "nonsense"], "ray_address='nonsense'"),
])
def test_bad_sweep_options_exit_2_with_one_line(tmp_path, args, needle):
    f = tmp_path / "s.toml"
    f.write_text('probe = "logit_lens"\n[base]\nsize = "micro"\n[grid]\ntop_k = [1, 2]\n')
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "interp.cli", "sweep", str(f), "--out", str(tmp_path / "o"), "-q",
                        *args], capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], p.stderr[-2000:]
    assert took < 30, f"{took:.1f}s to refuse"
    assert not list((tmp_path / "o").glob("logit_lens/*")), "a run was started"


def test_a_run_stopped_by_sigterm_is_redone_a_failed_one_only_with_retry_failed(tmp_path, tiny_model_dir):
    """Ray stops a dead driver's workers with SIGTERM: such a run ends failed by the signal, and a rerun of the
    sweep redoes it without --retry-failed; a run that failed on its own waits for --retry-failed."""
    from interp.runner import _Terminated
    from interp.store import RunWriter
    from interp.sweep import load_sweep, plan

    f = tmp_path / "s.toml"
    f.write_text(f'probe = "logit_lens"\n[base]\nsize = "micro"\nmodel = {json.dumps(str(tiny_model_dir))}\n'
                 '[grid]\ntop_k = [1, 2]\n')
    out = tmp_path / "out"
    spec = load_sweep(f)
    points, todo = plan(spec, out)
    assert len(todo) == 2
    for p, error in zip(points, [_Terminated("terminated by signal 15"), ValueError("bad luck")]):
        RunWriter.create(out, "logit_lens", p.overrides, p.config_hash, 0).finish(error=error)
    points, todo = plan(spec, out)
    assert [p.index for p in todo] == [0] and points[1].status == "failed" and "bad luck" in points[1].error
    _, todo = plan(spec, out, retry_failed=True)
    assert [p.index for p in todo] == [0, 1]
