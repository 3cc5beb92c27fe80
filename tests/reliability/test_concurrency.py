"""Concurrency: runs written by another process while the dashboard's listing reads the same root.

Every listed run is `running` (or `interrupted`) or a `done` run that loads with every file checked; a listing
never raises and never shows a `damaged` run. The readers are the app's own listing (`interp_app.common.runs`, cached
as on the page), the store's (`interp.store.list_runs`, what `interp ls` prints) and one AppTest render of the
Runs page. Two `interp run` processes writing to one --out:
tests/cli/test_cli.py::test_concurrent_runs_get_distinct_dirs.

Bug found: `RunWriter.create` made the run directory (an exclusive mkdir) and wrote its manifest just after, so a
listing in between saw a run without a manifest, `damaged` (35 of ~7,000 listings while 200 runs were written).
The directory is now filled under a hidden name and renamed into place with its manifest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interp.store import RunInfo, list_runs, load_run

ROOT = Path(__file__).resolve().parents[2]
FINE = {"running", "interrupted", "done"}

WRITER = """
import sys
import numpy as np
from interp.store import RunWriter

root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    w = RunWriter.create(root, "demo", {"i": i}, f"{i:064x}", 0)
    w.save_tensors("x", {"x": np.full(64, i, dtype=np.float32)})
    w.save_table("t", {"i": [i] * 8})
    w.log_metrics(i=i)
    w.finish()
"""


def check(infos: list[RunInfo], where: str) -> None:
    for info in infos:
        assert info.status in FINE, f"{where}: {info.path.name} listed as {info.status} ({info.error})"
        if info.status == "done":
            run = load_run(info.path)  # re-hashes every file against the manifest
            assert all((info.path / f).is_file() for f in run.manifest["files"]), info.path


def read_until_exit(proc: subprocess.Popen, root: Path, on_listing=None) -> dict[str, int]:
    """List `root` with the store's and the app's listing until `proc` exits; counts of what was seen.
    `on_listing(infos)` is called with each of the app's listings."""
    from interp_app import common

    seen = {"listings": 0, "running": 0, "done": 0}
    while True:
        alive = proc.poll() is None
        listings = (("interp.store.list_runs", list_runs(root)), ("interp_app.common.runs", common.runs(root)))
        for where, infos in listings:
            check(infos, where)
            seen["listings"] += 1
            for status in ("running", "done"):
                seen[status] += sum(i.status == status for i in infos)
        if on_listing is not None:
            on_listing(infos)
        if not alive:
            return seen
        time.sleep(0.005)  # leave the writer a core (two here)


def test_listings_while_a_process_writes_runs(tmp_path):
    """No model: 150 small runs written as fast as the store allows (the window of the bug above)."""
    root, n = tmp_path / "out", 150
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(n)], stderr=subprocess.PIPE, text=True)
    try:
        seen = read_until_exit(proc, root)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, proc.stderr.read()
    assert seen["running"] > 0, f"the readers never saw a run being written: {seen}"
    final = list_runs(root)
    assert len(final) == n and {i.status for i in final} == {"done"}
    check(final, "after")
    assert not [p for p in (root / "demo").iterdir() if p.name.startswith(".")], "a temporary directory is left"


@pytest.mark.slow
def test_a_sweep_and_the_dashboard_see_consistent_runs(tmp_path, tiny_model_dir, monkeypatch):
    """A local sweep of logit_lens micro points on the tiny model, in a subprocess, while this process lists the
    root and renders the Runs page once a run is done."""
    from streamlit.testing.v1 import AppTest

    n = 12
    prompts = [f"Fact number {i}: the capital of France is" for i in range(n)]
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(f'probe = "logit_lens"\n[base]\nsize = "micro"\nmodel = {json.dumps(str(tiny_model_dir))}\n'
                          f"[grid]\nprompt = {json.dumps(prompts)}\n")
    root = tmp_path / "out"
    monkeypatch.setenv("INTERP_OUT", str(root))
    rendered: list[list[str]] = []

    def render_once(infos: list[RunInfo]) -> None:
        if rendered or not any(i.status == "done" for i in infos):
            return
        at = AppTest.from_file(str(ROOT / "interp_app" / "main.py"), default_timeout=120).run()
        assert not at.exception, at.exception
        assert [t.value for t in at.title] == ["Runs"]
        rendered.append(list(at.dataframe[0].value["status"]))

    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "interp.cli", "sweep", str(sweep_file), "--out", str(root), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = read_until_exit(proc, root, render_once)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err[-2000:]
    assert rendered, f"the Runs page was never rendered while the sweep ran ({time.perf_counter() - t0:.0f}s)"
    statuses = rendered[0]
    assert statuses and all(s.split()[-1] in FINE for s in statuses), statuses
    assert seen["running"] > 0, f"the readers never saw a run being written: {seen}"
    final = list_runs(root)
    assert len(final) == n and {i.status for i in final} == {"done"}, [(i.run_id, i.status) for i in final]
    check(final, "after")
    record = json.loads((root / "sweeps" / "s" / "sweep.json").read_text())
    assert [p["status"] for p in record["points"]] == ["done"] * n


@pytest.mark.parametrize(
    ("env", "spin"),
    [({}, "20000"), ({"OMP_WAIT_POLICY": "PASSIVE"}, None), ({"GOMP_SPINCOUNT": "7"}, "7")],
)
def test_import_caps_openmp_spinning_unless_the_user_chose(env, spin):
    """`import interp` caps libgomp's idle spin (two processes sharing the cores ran ~4x faster each, a lone
    one as fast); a wait policy or spin count the user set is left alone."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = "import os, interp; print(os.environ.get('GOMP_SPINCOUNT'))"
    out = subprocess.run([sys.executable, "-c", code], env=base | env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(spin)
