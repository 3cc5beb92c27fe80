"""Every benchmark of bench/ at its smoke size on the tiny random model: the rows are well formed and the
figures finite. No timing is asserted (that is what `make bench` is for)."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import Row, check  # noqa: E402
from bench.run import BENCHMARKS, call, main, markdown  # noqa: E402

TARGET = re.compile(r"^(report|[<>]= \d+(\.\d+)?(e-?\d+)?)$")


def well_formed(rows: list[Row], prefix: str = "") -> None:
    assert rows, "no rows"
    for r in rows:
        assert isinstance(r, Row) and r.name.startswith(prefix) and r.figure, r
        assert TARGET.match(r.target), f"{r.name}: target {r.target!r}"
        assert math.isfinite(r.value), f"{r.name}: value {r.value}"
        assert r.ok == check(r.value, r.target), r
        assert (r.ok is None) == (r.target == "report"), r


SLOW = {"streaming_memory"}  # two fresh interpreters load torch and the model (~13 s)
APART = {"gpu", "circuits_reference"}  # gpu: below; circuits_reference runs circuit-tracer on an embedded model


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in BENCHMARKS if n not in APART])
def test_benchmark_at_smoke_size(tiny_model, name):
    well_formed(call(BENCHMARKS[name], tiny_model, smoke=True))


def test_gpu_benchmark_runs_its_bf16_path_on_the_cpu(tiny_model):
    from bench.gpu import gpu

    rows = gpu(tiny_model, smoke=True, device="cpu")
    well_formed(rows, "gpu_")
    by = {r.name: r for r in rows}
    assert {"gpu_matmul_peak", "gpu_capture", "gpu_capture_peak_frac", "gpu_sae", "gpu_sae_peak_frac"} <= set(by)
    assert 0 < by["gpu_capture_peak_frac"].value and 0 < by["gpu_sae_peak_frac"].value


def test_gpu_benchmark_without_cuda_is_one_row_saying_so(tiny_model, monkeypatch):
    import torch

    from bench.gpu import gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (r,) = gpu(tiny_model)
    assert r.ok is None and "no GPU" in r.detail and math.isnan(r.value)


def test_markdown_table_from_results_json(tmp_path, capsys):
    rows = [{"name": "a", "figure": "x / y", "value": 1.02, "target": "<= 1.05", "ok": True, "detail": "p|q"},
            {"name": "gpu", "figure": "z", "value": None, "target": "report", "ok": None, "detail": "no GPU"}]
    results = {"date": "2026-11-30T00:00:00+00:00", "command": "python bench/run.py", "smoke": False,
               "env": {"machine": "x86_64 Linux", "cpus": 2, "threads": 2, "torch": "2"}, "rows": rows,
               "seconds": {"a": 3.0, "gpu": 0.0}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    assert main(["--markdown", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == markdown(results)
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(rows)
    assert "| a | x / y | 1.02 | <= 1.05 | PASS | p\\|q |" in table
    assert "| gpu | z | - | report | - | no GPU |" in table
    assert "`python bench/run.py`" in out and "total 3" in out


@pytest.mark.slow
def test_streaming_memory_fails_a_capture_that_holds_memory_per_batch(tiny_model, monkeypatch):
    """The same measurement with 4 MB kept per batch of 256 tokens (a leak of ~1.5 GB per 100k tokens) must miss
    the target that the real stream meets: the benchmark can fail."""
    import bench.capture as cap

    leaky = cap._MEM_SCRIPT.replace("        reset_hwm()\n", "        held.append(torch.ones(1 << 20))\n"
                                    "        reset_hwm()\n").replace("points = []", "points, held = [], []")
    assert "held.append" in leaky and "points, held" in leaky, "the benchmark's script changed: update this test's leak"
    monkeypatch.setattr(cap, "_MEM_SCRIPT", leaky)
    (row,) = cap.streaming_memory(tiny_model, smoke=True)
    assert row.ok is False and row.value > 200, row
