"""The CLI contract: exit codes, one-line errors before heavy imports, run dirs, kill safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

INTERP = [sys.executable, "-m", "interp.cli"]


def cli(*args, timeout=600, **kw):
    return subprocess.run([*INTERP, *args], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.mark.parametrize("args, needle", [
    (["run", "nosuchprobe"], "nosuchprobe"),
    (["run", "logit_lens", "--model", "nosuchmodel"], "nosuchmodel"),
    (["run", "logit_lens", "--set", "top_k=0"], "top_k"),
    (["run", "logit_lens", "--set", "nofield=1"], "nofield"),
    (["run", "logit_lens", "--set", "prompt="], "prompt"),
    (["run", "logit_lens", "--set", "novalue"], "novalue"),
])
def test_bad_input_exits_2_with_one_line_fast(args, needle, tmp_path):
    t0 = time.perf_counter()
    r = cli(*args, "--out", str(tmp_path))
    elapsed = time.perf_counter() - t0
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert elapsed < 10, f"bad input took {elapsed:.1f}s"
    assert not list(tmp_path.iterdir()), "no run directory for bad input"


def test_validation_imports_no_torch():
    code = ("import sys; from interp.cli import main\n"
            "rc = main(['run', 'logit_lens', '--model', 'nosuchmodel'])\n"
            "heavy = [m for m in ('torch', 'transformers', 'transformer_lens') if m in sys.modules]\n"
            "print(rc, heavy)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "2 []", r.stdout + r.stderr


def test_list_models_and_help():
    r = cli("list")
    assert r.returncode == 0 and "logit_lens" in r.stdout
    r = cli("models")
    assert "smollm2-135m" in r.stdout and "gemma3-270m" in r.stdout
    r = cli("run", "logit_lens", "--help")
    assert r.returncode == 0 and "top_k = 5  (in [1, 100])" in r.stdout and "Tokens kept" in r.stdout


@pytest.mark.slow
def test_logit_lens_paris_and_ls(tmp_path):
    r = cli("run", "logit_lens", "--model", "smollm2-135m", "--set", "prompt=The capital of France is",
            "--out", str(tmp_path), "-q")
    assert r.returncode == 0, r.stderr
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "done" and m["metrics"]["final_top1"] == " Paris"
    assert m["files"] and all(len(f["sha256"]) == 64 for f in m["files"].values())
    assert m["model"]["n_layers"] == 30 and m["model"]["weights_sha256"]
    ls = json.loads(cli("ls", "--out", str(tmp_path), "--json").stdout)
    assert [x["status"] for x in ls] == ["done"]


@pytest.mark.slow
def test_sigkill_never_leaves_done(tmp_path):
    proc = subprocess.Popen([*INTERP, "run", "logit_lens", "--out", str(tmp_path), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob("logit_lens/*/manifest.json")):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (manifest,) = tmp_path.glob("logit_lens/*/manifest.json")
    assert json.loads(manifest.read_text())["status"] != "done"
    ls = json.loads(cli("ls", "--out", str(tmp_path), "--json").stdout)
    assert ls[0]["status"] == "interrupted"
    assert "interrupted" in cli("ls", "--out", str(tmp_path)).stdout


@pytest.mark.slow
def test_concurrent_runs_get_distinct_dirs(tmp_path):
    procs = [subprocess.Popen([*INTERP, "run", "logit_lens", "--out", str(tmp_path), "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    dirs = {o[0].strip().splitlines()[-1] for o in outs}
    assert len(dirs) == 2
    for d in dirs:
        assert json.loads((Path(d) / "manifest.json").read_text())["status"] == "done"
