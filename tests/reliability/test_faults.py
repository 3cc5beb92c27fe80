"""Faults: SIGKILL at three points never leaves `done`; failing writes and NaNs end `failed`."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interp.errors import NumericError
from interp.store import list_runs

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("point", ["load", "loop", "write"])
def test_sigkill_at_each_point(point, tmp_path, model):
    out, marker = tmp_path / "out", tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, str(HERE / "_stall.py"), str(out), point, str(marker)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while not marker.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), f"never reached {point}: {proc.stderr.read().decode()[-1000:] if proc.poll() else ''}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (info,) = list_runs(out)
    assert info.status == "interrupted", info
    assert json.loads((info.path / "manifest.json").read_text())["status"] == "running"
    if point == "write":
        assert not (info.path / "lens.safetensors").exists(), "a half-written artifact is in place"
    ls = subprocess.run([sys.executable, "-m", "interp.cli", "ls", "--out", str(out)], capture_output=True, text=True)
    assert "interrupted" in ls.stdout
    # a re-run of the same config succeeds beside it
    from interp.runner import execute, prepare

    spec, cfg = prepare("logit_lens", {})
    execute(spec, cfg, out=out, model=model, progress=False)
    assert sorted(r.status for r in list_runs(out)) == ["done", "interrupted"]


def test_sigterm_ends_interrupted_with_the_signal(tmp_path):
    """SIGTERM (a scheduler's stop) raises a BaseException in the run, so no `except Exception` carries on past
    it: the run ends `interrupted` (not failed) with the signal in the manifest (stalled during the model load: no
    model needed)."""
    out, marker = tmp_path / "out", tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, str(HERE / "_stall.py"), str(out), "load", str(marker)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not marker.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), proc.stderr.read().decode()[-1000:] if proc.poll() is not None else "never stalled"
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) != 0
    (info,) = list_runs(out)
    assert info.status == "interrupted" and "terminated by signal 15 (SIGTERM)" in info.error, info


def test_write_error_ends_failed_with_the_error(tmp_path, model, monkeypatch):
    import safetensors.numpy

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.numpy, "save_file", full_disk)
    from interp.runner import execute, prepare

    spec, cfg = prepare("logit_lens", {})
    with pytest.raises(OSError):
        execute(spec, cfg, out=tmp_path, model=model, progress=False)
    (info,) = list_runs(tmp_path)
    assert info.status == "failed" and "No space left" in info.error
    assert not [p for p in info.path.iterdir() if p.name.endswith(".tmp")], "temporary file left behind"


def test_read_only_output_root_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "interp.cli", "run", "logit_lens", "--out", "/proc/interp-no-such"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_nan_in_activations_fails_the_run(tmp_path, model):
    from interp import WeightEdit, edit_weights
    from interp.runner import execute, prepare

    spec, cfg = prepare("logit_lens", {})
    with edit_weights(model, [WeightEdit("model.layers.3.mlp.down_proj.weight", 1, [0, 1], factor=float("nan"))]):
        with pytest.raises(NumericError, match="NaN"):
            execute(spec, cfg, out=tmp_path, model=model, progress=False)
    (info,) = list_runs(tmp_path)
    assert info.status == "failed" and "NaN" in info.error
