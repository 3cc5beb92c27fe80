"""Ctrl-C is an interruption, not a failure: a run stopped by SIGINT (or SIGTERM) reads `interrupted` in `interp ls`,
`interp.list_runs()` and the dashboard, leaves no half-written artifact, and a sweep rerun redoes it without
--retry-failed; the CLI exits 130 with one line. A probe page opens on the newest done run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import interp
from interp.store import MANIFEST, RunWriter, list_runs, read_manifest, verify_files

ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
           TOKENIZERS_PARALLELISM="false")


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "interp.cli", *args], capture_output=True, text=True, env=ENV,
                          timeout=120, **kw)


def _wait_for_model(out: Path, proc: subprocess.Popen, probe: str, timeout: float = 300) -> Path:
    """The run directory once its manifest records the loaded model (the run is past its model load, mid-run)."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        for d in (out / probe).glob("2*"):
            try:
                m = json.loads((d / MANIFEST).read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if m.get("model") and m["status"] == "running":
                return d
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"never got mid-run: rc={proc.poll()} {proc.stderr.read()[-2000:] if proc.stderr else ''}")


@pytest.mark.slow
def test_sigint_mid_run_reads_interrupted_everywhere_and_a_sweep_redoes_it(tmp_path, monkeypatch):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "interp.cli", "run", "atoms", "--size", "micro", "-q",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    run_dir = _wait_for_model(out, proc, "atoms")
    os.kill(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, stderr[-2000:])
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "interp: interrupted", stderr[-2000:]
    assert [line for line in stderr.splitlines() if "interrupted" in line] == ["interp: interrupted"], stderr
    assert stdout == "", "no run directory is printed for a run that did not finish"

    # the manifest, interp.list_runs() and interp ls (with its column headers) all say interrupted, never failed
    manifest = read_manifest(run_dir)
    assert manifest["status"] == "interrupted" and manifest["error"] == "interrupted: SIGINT (Ctrl-C)", manifest
    (info,) = interp.list_runs(out)
    assert info.status == "interrupted" and info.path == run_dir, info
    ls = _cli("ls", "--out", str(out))
    head, row = ls.stdout.splitlines()
    assert head.split() == ["PROBE", "RUN", "STATUS", "MODEL", "METRICS"], ls.stdout
    assert row.split()[:3] == ["atoms", run_dir.name, "interrupted"], ls.stdout
    assert [r["status"] for r in json.loads(_cli("ls", "--out", str(out), "--json").stdout)] == ["interrupted"]

    # no half-written artifact in place: every file there is listed and checks out, no temporary left behind
    verify_files(run_dir, manifest)
    listed = set(manifest["files"]) | {MANIFEST}
    present = {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}
    assert present <= listed, f"unlisted (half-written) files: {sorted(present - listed)}"

    # the dashboard: the run list reads interrupted, and the page opens on no run but it (no done run yet)
    from interp_app import common

    (shown,) = common.runs(out.resolve(), "atoms")
    assert shown.status == "interrupted" and common.default_run([shown]) is shown
    from interp_app.testing import app_test

    monkeypatch.setenv("INTERP_OUT", str(out))
    at = app_test().run()  # the Runs home
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    rows = table[table.astype(str).apply(lambda r: any(run_dir.name in v for v in r), axis=1)]
    assert len(rows) == 1 and str(rows.iloc[0]["status"]).endswith("interrupted"), table.to_dict("records")

    # a sweep of the same config plans it again without --retry-failed (an interrupted run is not failed)
    from interp.sweep import load_sweep, plan

    f = tmp_path / "atoms.toml"
    f.write_text('probe = "atoms"\n[base]\nsize = "micro"\n[grid]\nseed = [0]\n')
    points, todo = plan(load_sweep(f), out)
    assert points[0].config_hash == manifest["config_hash"], "the sweep point is not the interrupted run's config"
    assert [p.index for p in todo] == [0] and points[0].status == "pending", points[0]


def _tiny_sweep(tmp_path: Path, tiny_model_dir: Path) -> Path:
    f = tmp_path / "s.toml"
    f.write_text(f'probe = "logit_lens"\n[base]\nsize = "micro"\nmodel = {json.dumps(str(tiny_model_dir))}\n'
                 '[grid]\ntop_k = [1, 2]\n')
    return f


def test_ctrl_c_stops_a_local_sweep_and_its_rerun_redoes_the_point(tmp_path, tiny_model_dir, monkeypatch):
    """Ctrl-C in a local sweep stops the sweep (not just the point): the run and the point read interrupted,
    the record's state is interrupted, and a rerun without retry_failed runs the point again and finishes."""
    import interp_probes.logit_lens.probe as ll

    f, out = _tiny_sweep(tmp_path, tiny_model_dir), tmp_path / "out"
    real = ll.run_with_cache
    calls = []

    def ctrl_c(*a, **k):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(ll, "run_with_cache", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        interp.run_sweep(f, out=out, progress=False)
    assert len(calls) == 1, "the sweep went on to the next point after Ctrl-C"
    (run,) = list_runs(out, probe="logit_lens")
    assert run.status == "interrupted" and run.error == "interrupted: SIGINT (Ctrl-C)", run
    record = json.loads((out / "sweeps" / "s" / "sweep.json").read_text())
    assert record["state"] == "interrupted", record["state"]
    assert sorted(p["status"] for p in record["points"]) == ["interrupted", "pending"], record["points"]

    monkeypatch.setattr(ll, "run_with_cache", real)
    again = interp.run_sweep(f, out=out, progress=False)
    assert [p["status"] for p in again["points"]] == ["done", "done"], again["points"]
    assert sorted(r.status for r in list_runs(out, probe="logit_lens")) == ["done", "done", "interrupted"]


def test_sigterm_and_sigint_end_interrupted_any_other_error_failed(tmp_path):
    """RunWriter.finish: KeyboardInterrupt and the runner's SIGTERM exception record interrupted, with what
    stopped the run; an error of the run's own records failed."""
    from interp.runner import _Terminated

    ends = {}
    for name, error in [("int", KeyboardInterrupt()), ("term", _Terminated("terminated by signal 15 (SIGTERM)")),
                        ("own", ValueError("bad luck"))]:
        w = RunWriter.create(tmp_path, "logit_lens", {"n": name}, f"{len(ends):08x}", 0)
        w.finish(error=error)
        ends[name] = read_manifest(w.path)
    assert (ends["int"]["status"], ends["int"]["error"]) == ("interrupted", "interrupted: SIGINT (Ctrl-C)")
    assert (ends["term"]["status"], ends["term"]["error"]) == ("interrupted",
                                                               "interrupted: terminated by signal 15 (SIGTERM)")
    assert (ends["own"]["status"], ends["own"]["error"]) == ("failed", "ValueError: bad luck")


def test_a_probe_page_opens_on_the_newest_done_run(tmp_path):
    """Newer failed and interrupted runs do not hide the done one: the page opens on it, and the others stay in
    its select box."""
    from streamlit.testing.v1 import AppTest

    def make(status: str, error: BaseException | None) -> str:
        w = RunWriter.create(tmp_path, "logit_lens", {"s": status}, "ab12cd34", 0)
        w.finish(error=error)
        time.sleep(1.05)  # run ids carry whole seconds: newest first by id
        return f"logit_lens/{w.path.name}"

    done = make("done", None)
    failed = make("failed", ValueError("boom"))
    interrupted = make("interrupted", KeyboardInterrupt())

    def page(root: str) -> None:
        from pathlib import Path

        from interp_app import common

        infos = common.runs(Path(root), "logit_lens")
        common.select_run("logit_lens", infos, None)

    at = AppTest.from_function(page, args=(str(tmp_path),), default_timeout=60).run()
    assert not at.exception, at.exception
    box = at.selectbox(key="run-select:logit_lens")
    assert box.value == done, (box.value, box.options)
    assert [o.split()[-1] for o in box.options] == [r.partition("/")[2] for r in (interrupted, failed, done)]


def test_ls_prints_column_headers_and_json_is_unchanged(tmp_path):
    w = RunWriter.create(tmp_path, "logit_lens", {}, "ab12cd34ef", 0)
    w.log_metrics(final_top1=" Paris")
    w.finish(error=KeyboardInterrupt())
    r = _cli("ls", "--out", str(tmp_path))
    head, row = r.stdout.splitlines()
    assert head.split() == ["PROBE", "RUN", "STATUS", "MODEL", "METRICS"], r.stdout
    for word in ("RUN", "STATUS", "METRICS"):  # each header sits over its column
        assert row[head.index(word)] != " ", (word, r.stdout)
    assert row.split()[:3] == ["logit_lens", w.path.name, "interrupted"], r.stdout
    (entry,) = json.loads(_cli("ls", "--out", str(tmp_path), "--json").stdout)
    assert list(entry) == ["path", "probe", "run_id", "status", "model", "started", "seconds", "metrics", "error"]
    assert entry["status"] == "interrupted" and entry["error"] == "interrupted: SIGINT (Ctrl-C)", entry
