"""A newcomer's first commands: a closed pipe, a probe field given as a flag, an unknown probe or model folder,
a demo without the dashboard, and a dashboard that stops when `interp app` is told to."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INTERP = [sys.executable, "-m", "interp.cli"]


def cli(*args, timeout=120, **kw):
    return subprocess.run([*INTERP, *args], capture_output=True, text=True, timeout=timeout, **kw)


# ----------------------------------------------------------------------------- 1. a closed stdout


@pytest.mark.parametrize("args", [["list"], ["ls", "--out", "{tmp}"], ["models"]])
def test_a_closed_stdout_ends_quietly(args, tmp_path):
    """`interp list | head -1` the worst way round: the reader is gone before the first write (no race: every
    try sees EPIPE), three times."""
    args = [a.format(tmp=tmp_path) for a in args]
    for attempt in range(3):
        r, w = os.pipe()
        os.close(r)  # nobody reads: the child's first flush meets a broken pipe
        with open(tmp_path / "stderr", "w+b") as err:
            proc = subprocess.Popen([*INTERP, *args], stdout=w, stderr=err)
            os.close(w)
            rc = proc.wait(timeout=120)
            err.seek(0)
            stderr = err.read().decode()
        assert rc in (0, 141), f"try {attempt}: exit {rc}: {stderr}"
        assert stderr == "", f"try {attempt}: {stderr}"


def test_head_reads_one_line_and_closes(tmp_path):
    """The pipe as a shell makes it, `interp list | head -1`, five times."""
    for attempt in range(5):
        r = subprocess.run(["bash", "-c", 'set -o pipefail; "$@" 2>err | head -1', "-", *INTERP, "list"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
        stderr = (tmp_path / "err").read_text()
        assert r.returncode in (0, 141) and len(r.stdout.splitlines()) == 1, f"try {attempt}: {r.returncode}"
        assert "Traceback" not in stderr and "BrokenPipe" not in stderr, f"try {attempt}: {stderr}"


# ----------------------------------------------------------------------------- 2. a field given as a flag


@pytest.mark.parametrize("args, hint", [
    (["--prompt", "The capital of France is"], "--set 'prompt=The capital of France is'"),
    (["--prompt=Paris"], "--set prompt=Paris"),
    (["--top-k", "3"], "--set top_k=3"),
])
def test_a_config_field_as_a_flag_points_to_set(args, hint, tmp_path):
    r = cli("run", "logit_lens", *args, "--out", str(tmp_path))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and hint in lines[0], r.stderr
    assert not list(tmp_path.iterdir())


def test_an_unknown_flag_keeps_argparse_message(tmp_path):
    r = cli("run", "logit_lens", "--nosuchflag", "1", "--out", str(tmp_path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "unrecognized arguments: --nosuchflag 1" in lines[0], r.stderr
    assert "--set" not in lines[0]


# ----------------------------------------------------------------------------- 3. ls --probe nope


def test_ls_names_an_unknown_probe(tmp_path):
    r = cli("ls", "--probe", "nope", "--out", str(tmp_path))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "nope" in lines[0] and "logit_lens" in lines[0] and "keystone" in lines[0], r.stderr
    r = cli("ls", "--probe", "logit_lens", "--out", str(tmp_path))  # a known probe without runs stays fine
    assert r.returncode == 0 and "no runs" in r.stdout, r.stderr


# ----------------------------------------------------------------------------- 4. --model ./no-such-dir


@pytest.mark.parametrize("name", ["./no-such-dir", "../no-such-dir", "/no/such/dir", "~/no-such-dir-xyz",
                                  "models/sub/no-such-dir"])
def test_a_missing_model_folder_is_named(name, tmp_path):
    r = cli("run", "logit_lens", "--model", name, "--out", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"folder {name} does not exist" in lines[0], r.stderr


def test_model_names_that_are_not_paths_resolve_as_before(tmp_path, monkeypatch):
    from interp.errors import ModelNotFound
    from interp.models import resolve_model

    monkeypatch.delenv("INTERP_ONLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    for name in ("nosuchmodel", "nobody/no-such-model-xyz"):  # a hub id has one slash: not a folder
        with pytest.raises(ModelNotFound) as e:
            resolve_model(name)
        assert "does not exist" not in str(e.value) and "smollm2-135m" in str(e.value)
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelNotFound, match="is not a folder"):
        resolve_model("./weights.bin")


# ----------------------------------------------------------------------------- 5. make demo NO_APP=1


def test_make_demo_no_app():
    def demo_line(*extra: str) -> str:
        r = subprocess.run(["make", "-n", "demo", *extra], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return next(line for line in r.stdout.splitlines() if "interp demo" in line)

    assert re.search(r"interp demo .*--no-app", demo_line("NO_APP=1"))
    assert "--no-app" not in demo_line()
    assert "--no-app" in cli("demo", "--help").stdout


# ----------------------------------------------------------------------------- 6. SIGTERM stops the dashboard


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


def servers_on(port: int) -> list[int]:
    """Pids of streamlit processes whose command line names `port`."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"streamlit" in b" ".join(argv) and str(port).encode() in argv:
                pids.append(int(d.name))
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_interp_app_stops_the_server(sig, tmp_path):
    port = free_port()
    log = open(tmp_path / "app.log", "wb")
    proc = subprocess.Popen([*INTERP, "app", "--port", str(port), "--out", str(tmp_path / "artifacts")],
                            stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 90
        while not answers(port):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "app.log").read_text()[-2000:]
            time.sleep(0.3)
        os.kill(proc.pid, sig)
        deadline = time.monotonic() + 10
        while (answers(port) or servers_on(port)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not answers(port), "the dashboard still answers after the signal"
        assert not servers_on(port), f"streamlit left running: {servers_on(port)}"
        assert proc.wait(timeout=10) is not None
    finally:
        for pid in [proc.pid, *servers_on(port)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)
        log.close()
