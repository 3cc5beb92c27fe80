"""Bad input on the GPU through the CLI and the API: an absent CUDA device fails in one line before torch loads or a
run directory exists; a stage that runs out of CUDA memory fails its run naming the stage and the setting to lower."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

import pytest

from interp.config import PositiveInt, ProbeConfig
from interp.runner import _nvidia_gpus

INTERP = [sys.executable, "-m", "interp.cli"]
NO_GPU = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU whatever the machine has
needs_driver_count = pytest.mark.skipif(_nvidia_gpus() is None, reason="GPUs cannot be counted without CUDA here")


@needs_driver_count
@pytest.mark.parametrize("device, needle", [
    ("cuda", "device='cuda' is invalid: CUDA is not available"),
    ("cuda:3", "device='cuda:3' is invalid: CUDA is not available"),
    ("cuda:x", "device='cuda:x' is invalid: one of \"auto\", \"cpu\", \"cuda\", \"cuda:N\""),
    ("gpu", "device='gpu' is invalid: one of \"auto\", \"cpu\", \"cuda\", \"cuda:N\""),
])
def test_an_absent_or_malformed_device_fails_in_one_line_without_a_run(device, needle, tmp_path):
    t0 = time.perf_counter()
    r = subprocess.run([*INTERP, "run", "logit_lens", "--device", device, "--out", str(tmp_path)], env=NO_GPU,
                       capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - t0
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr
    assert not list(tmp_path.iterdir()), "a run directory for an absent device"
    assert elapsed < 10, f"an absent device took {elapsed:.1f}s to refuse"


@needs_driver_count
def test_the_device_check_imports_no_torch_in_the_cli_and_the_api(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        import interp
        from interp.cli import main
        from interp.errors import ConfigError
        rc = main(["run", "logit_lens", "--device", "cuda:3", "--out", {str(tmp_path)!r}])
        try:
            interp.run("logit_lens", out={str(tmp_path)!r}, device="cuda")
        except ConfigError as e:
            api = e.field
        print(rc, api, [m for m in ("torch", "transformers", "transformer_lens") if m in sys.modules])
    """)
    r = subprocess.run([sys.executable, "-c", code], env=NO_GPU, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "2 device []", r.stdout + r.stderr
    assert not list(tmp_path.iterdir()), "a run directory for an absent device"


# ----------------------------------------------------------------------------- out of memory in a stage

STAGES = '''
import torch


def run(cfg, ctx):
    with ctx.timed("warmup"):
        for _ in ctx.tqdm(range(2), desc="warmup"):
            pass
    with ctx.timed("recording"):
        for i in ctx.tqdm(range(4), desc="record batches"):
            if i == 2:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total "
                                             "capacity of 139.81 GiB of which 1.12 GiB is free.")
'''


@dataclass(frozen=True)
class OOMConfig(ProbeConfig):
    """Out of memory: a probe whose second stage runs out of CUDA memory."""

    batch_size: PositiveInt = 8
    """Prompts per forward."""
    seq_len: PositiveInt = 64
    """Tokens per prompt."""


def test_out_of_memory_in_a_stage_fails_the_run_naming_the_stage_and_the_setting(tmp_path, monkeypatch, capsys):
    from interp import registry
    from interp.cli import main
    from interp.store import list_runs

    (tmp_path / "oom_stage_probe.py").write_text(STAGES, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.probes_available()
    monkeypatch.setitem(registry._REGISTRY, "oom_probe",
                        registry.ProbeSpec("oom_probe", OOMConfig, "oom_stage_probe:run", OOMConfig.__doc__))
    out = tmp_path / "artifacts"
    rc = main(["run", "oom_probe", "--out", str(out), "--set", "seq_len=128", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    want = ("CUDA out of memory in stage 'record batches' (batch_size=8, seq_len=128, tried to allocate 20.00 GiB): "
            "lower batch_size or seq_len (--set batch_size=4)")
    assert rc == 2 and err == [f"interp: {want}"], err
    runs = list_runs(out)
    assert [r.status for r in runs] == ["failed"], [(r.status, r.error) for r in runs]
    manifest = json.loads((runs[0].path / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["error"] == f"OutOfMemory: {want}", manifest["error"]
    assert "seconds_warmup" in manifest["timings"] and "seconds_recording" in manifest["timings"]
