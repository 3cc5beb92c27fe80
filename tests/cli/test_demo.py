"""`interp demo`: the runs' progress record, the progress lines (k/n, stage, elapsed, an estimate from the last run)
and the closing table; the dashboard served from the start is tested in tests/app/test_demo_browser.py."""

from __future__ import annotations

import json
import re

import pytest

from interp import context
from interp.config import ProbeConfig
from interp.store import MANIFEST, RunWriter, running_demo


def test_stages_and_loops_write_a_progress_record(tmp_path, monkeypatch):
    """A stage change writes the manifest's progress record at once; a loop's steps at most every PROGRESS_EVERY
    seconds (0 here: every step); listeners get what is written, and stop getting it once removed."""
    monkeypatch.setattr(context, "PROGRESS_EVERY", 0.0)
    writer = RunWriter.create(tmp_path, "demo", {}, "ab" * 32, 0)
    ctx = context.RunContext(ProbeConfig(), writer, progress=False)  # the model loads only when asked for
    heard = []
    remove = context.add_progress_listener(lambda path, record: heard.append(dict(record)))
    seen = []
    try:
        with ctx.timed("collect"):
            seen.append(json.loads((writer.path / MANIFEST).read_text())["progress"])
            for _ in ctx.tqdm(range(3), desc="train"):
                seen.append(json.loads((writer.path / MANIFEST).read_text())["progress"])
        seen.append(json.loads((writer.path / MANIFEST).read_text())["progress"])
    finally:
        remove()
    assert [(r["stage"], r["step"], r["total"]) for r in seen] == [
        ("collect", None, None), ("train", 0, 3), ("train", 1, 3), ("train", 2, 3), (None, None, None)], seen
    assert all(set(r) == {"stage", "step", "total", "elapsed", "updated"} for r in seen)
    assert [h["stage"] for h in heard][:2] == ["collect", "train"] and heard[-1]["stage"] is None
    n = len(heard)
    ctx.stage = "after"
    assert len(heard) == n, "a removed listener was called"


def test_a_loop_within_the_throttle_writes_its_stage_only(tmp_path):
    """Steps closer together than PROGRESS_EVERY (2 s) are not written: the stage change is, once."""
    writer = RunWriter.create(tmp_path, "demo", {}, "cd" * 32, 0)
    ctx = context.RunContext(ProbeConfig(), writer, progress=False)
    heard = []
    remove = context.add_progress_listener(lambda path, record: heard.append(record["step"]))
    try:
        for _ in ctx.tqdm(range(50), desc="fast"):
            pass
    finally:
        remove()
    assert heard[0] is None and len(heard) <= 3, heard


def test_an_inner_stage_gives_the_loop_its_step_back(tmp_path):
    """A stage inside a loop's body (ctx.timed in a ctx.tqdm loop) ends: the record is the loop's stage with its
    step again, not the loop's stage without one."""
    writer = RunWriter.create(tmp_path, "demo", {}, "ef" * 32, 0)
    ctx = context.RunContext(ProbeConfig(), writer, progress=False)
    after = []
    for _ in ctx.tqdm(range(2), desc="runs"):
        with ctx.timed("fine-tune"):
            pass
        after.append(json.loads((writer.path / MANIFEST).read_text())["progress"])
    assert [(r["stage"], r["step"], r["total"]) for r in after] == [("runs", 0, 2), ("runs", 1, 2)], after


def test_progress_lines(monkeypatch):
    """[k/n] probe: stage step/total · elapsed of about the estimate; a stage seen before (a loop's, between the
    stages of its body) gets no new line within STAGE_EVERY seconds; the end line has status, seconds, headline."""
    import io

    from interp import demo

    buf = io.StringIO()
    lines = demo.Lines(11, file=buf)
    lines.begin(3, "atoms", (50.0, "last run"))
    for stage, step in [("collect", None), ("runs", 0), ("fine-tune", None), ("runs", 1), ("fine-tune", None)]:
        lines.record(None, {"stage": stage, "step": step, "total": 3 if step is not None else None})
    lines.end(demo.Outcome("atoms", "done", 61.2, "r2=0.9"))
    got = buf.getvalue().splitlines()
    assert got[0] == "[3/11] atoms: starting (about 50 s, from the last run on this machine)", got
    assert re.fullmatch(r"\[3/11\] atoms: collect · 0 s of about 50 s", got[1]), got
    assert re.fullmatch(r"\[3/11\] atoms: runs 0/3 · 0 s of about 50 s", got[2]), got
    assert re.fullmatch(r"\[3/11\] atoms: fine-tune · 0 s of about 50 s", got[3]), got
    assert got[4:] == ["[3/11] atoms: done in 1 m 01 s · r2=0.9"], got
    assert demo.headline({"top": " Paris", "r2": 0.91234, "xs": [1, 2], "ok": True}) == "top=Paris, r2=0.9123, ok=true"


@pytest.mark.slow
def test_demo_prints_k_of_n_stages_estimate_and_a_table(model, tmp_path, capsys, monkeypatch):
    """`interp demo --no-app --size micro`: "[1/2] probe: starting", a line per stage, a closing table with each
    probe, its status, seconds and headline; the second demo estimates each run from the first's."""
    from interp import demo
    from interp.cli import main

    monkeypatch.setattr(demo, "timings_file", lambda: tmp_path / "demo-timings.json")

    out = tmp_path / "artifacts"
    assert main(["demo", "--no-app", "--size", "micro", "--out", str(out), "logit_lens", "patching"]) == 0
    first = capsys.readouterr().out
    assert "[1/2] logit_lens: starting" in first and "[2/2] patching: starting" in first, first
    assert re.search(r"\[2/2\] patching: \S.* · \d+ s", first), first  # a stage line with the elapsed time
    assert "about" not in first, "an estimate without an earlier run"
    table = first[first.index("probe "):]
    assert re.search(r"probe +status +seconds +headline", table), table
    assert re.search(r"logit_lens +done +\d+\.\d +final_top1=Paris", table), table
    assert re.search(r"patching +done +\d+\.\d", table), table
    assert not running_demo(out), "the demo's marker is left behind"
    known = json.loads((tmp_path / "demo-timings.json").read_text())
    assert set(known) == {"logit_lens", "patching"} and list(known["patching"]) == ["smollm2-135m/micro/auto"], known

    assert main(["demo", "--no-app", "--size", "micro", "--out", str(out), "logit_lens"]) == 0
    again = capsys.readouterr().out
    assert re.search(r"\[1/1\] logit_lens: starting \(about \d+ s, from the last run on this machine\)", again), \
        again


@pytest.mark.slow
def test_sigterm_stops_the_demo_its_run_and_its_dashboard(tmp_path):
    """SIGTERM while a run goes: the run reads interrupted, the dashboard (a child process) is stopped, the
    demo's marker is removed, and the demo exits 143 with the table of what ran."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    from interp.store import list_runs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "artifacts"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "interp.cli", "demo", "--size", "micro", "--out", str(out),
                             "--port", str(port), "logit_lens", "patching"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    try:
        for line in proc.stdout:  # until the second run is under way
            lines.append(line)
            if "[2/2] patching: starting" in line:
                break
        else:
            pytest.fail("".join(lines))
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines) + rest
    assert proc.returncode == 143, text
    assert "demo stopped after 1 of 2 runs" in text and re.search(r"logit_lens +done", text), text
    statuses = {r.probe: r.status for r in list_runs(out)}
    assert statuses == {"logit_lens": "done", "patching": "interrupted"}, statuses
    assert not running_demo(out) and not (out / ".demo.json").exists()
    with socket.socket() as s:  # the dashboard's port is free again: its server is gone
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the dashboard outlived the demo"


def test_a_typo_fails_before_the_dashboard_or_any_run(tmp_path):
    """Every probe is validated first: a wrong name exits 2 with one line, and nothing starts (no artifacts root,
    no dashboard)."""
    import subprocess
    import sys

    out = tmp_path / "artifacts"
    r = subprocess.run([sys.executable, "-m", "interp.cli", "demo", "--out", str(out), "logit_lens", "nosuchprobe"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "nosuchprobe" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "dashboard" not in r.stdout and not out.exists(), r.stdout
