"""A sweep on a real two-node Ray cluster under faults (issue #22).

The cluster: a head started with `ray start --head` and a second node with `ray start --address`, each with
its own temp dir and one CPU, both on a loopback address, each `ray start --block` in its own process group.
The sweep: logit_lens micro over both embedded models x three prompts (six points), driven by
`interp sweep --executor ray --ray-address` in subprocesses. The faults, in order:

1. a Ray worker running a point is SIGKILLed by its pid: the driver records that point `failed` with the
   cause, and its run directory never reads `done`;
2. the driver is SIGKILLed mid-sweep (some points done, some not): Ray stops its workers (SIGTERM: their runs
   end `failed` by the signal, never `done`), and `sweep.json` keeps its last complete state;
3. two drivers start the same sweep at once, one with `--retry-failed` and one without: points finished before
   are skipped, the others (the killed worker's included) run once, under their claims.

Afterwards every point has exactly one `done` run with every file's sha256 intact, `sweep.json` (read
hundreds of times while the drivers wrote it, never half-written) lists each point once, and the Sweeps page
shows that final state. The nodes are stopped by their process groups whatever happens, and no process that
carries this cluster's marker in its environment survives.

Ray rewrites a node address of 127.0.0.1 to the machine's routable address (`resolve_ip_for_localhost`), so
the nodes use 127.0.0.2, another loopback address; Ray's gRPC servers listen on every interface regardless.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import psutil
import pytest

from interp.store import effective_status, inspect_run, list_runs, read_manifest, verify_files

pytestmark = [pytest.mark.slow, pytest.mark.gemma, pytest.mark.ray, pytest.mark.timeout(900)]

LOOPBACK = "127.0.0.2"
RAY = str(Path(sys.executable).with_name("ray"))
MARK = "INTERP_TEST_RAY_CLUSTER"
NAME = "cluster"
SWEEP = f"""
name = "{NAME}"
probe = "logit_lens"
models = ["smollm2-135m", "gemma3-270m"]
[base]
size = "micro"
device = "cpu"
[grid]
prompt = ["The capital of France is", "The Eiffel Tower stands in the city of", "Water boils at a temperature of"]
"""
N_POINTS = 6


def _env(token: str, home: Path | None = None) -> dict[str, str]:
    # HOME is the cluster's own dir: a ~/.ray/auth_token left by an earlier local Ray runtime makes the
    # head demand a token the second node does not send; the model cache stays the user's.
    cache = os.environ.get("INTERP_CACHE") or str(Path.home() / ".cache" / "interp")
    extra = {"HOME": str(home), "INTERP_CACHE": cache} if home else {}
    return dict(os.environ, **extra, RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", **{MARK: token})


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait(what: str, check, timeout: float, every: float = 0.2):
    """check() until it returns something truthy; AssertionError naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def _marked(token: str) -> list[psutil.Process]:
    """Every live process whose environment carries this cluster's marker (nodes, their workers, drivers)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(MARK) == token and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds, to the process group that `proc` leads."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


class Cluster:
    """Two `ray start --block` nodes (head + one more), one CPU each, on LOOPBACK; `stop()` ends them."""

    def __init__(self, base: Path, token: str):
        self.base, self.token, self.procs = base, token, []
        self.port = _free_ports(1)[0]
        self.address = f"{LOOPBACK}:{self.port}"

    def _start(self, name: str, args: list[str]) -> None:
        agent, grpc, env_agent, metrics, *extra = _free_ports(6)
        log = open(self.base / f"{name}.log", "w")
        cmd = [RAY, "start", "--block", "--node-ip-address", LOOPBACK, "--num-cpus", "1", "--num-gpus", "0",
               "--temp-dir", str(self.base / name), "--object-store-memory", str(80 * 2**20), "--disable-usage-stats",
               "--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(grpc),
               "--runtime-env-agent-port", str(env_agent), "--metrics-export-port", str(metrics), *args]
        if "--head" in args:
            cmd += ["--include-dashboard", "false", "--dashboard-port", str(extra[0]),
                    "--ray-client-server-port", str(extra[1])]
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(self.token, self.base),
                                           start_new_session=True))
        log.close()
        _wait(f"ray start ({name}) to come up; log {self.base / name}.log",
              lambda: self._up(name), timeout=120, every=0.5)

    def _up(self, name: str) -> bool:
        text = (self.base / f"{name}.log").read_text(errors="replace")
        if self.procs[-1].poll() is not None:
            raise AssertionError(f"ray start ({name}) exited {self.procs[-1].returncode}:\n{text[-3000:]}")
        return "Ray runtime started" in text

    def start(self) -> None:
        self._start("head", ["--head", "--port", str(self.port)])
        self._start("node", ["--address", self.address])
        probe = ("import ray; ray.init(address=%r, log_to_driver=False); "
                 "print(sum(n['Alive'] for n in ray.nodes()), int(ray.cluster_resources().get('CPU', 0)))")
        def two_nodes():
            p = subprocess.run([sys.executable, "-c", probe % self.address], capture_output=True, text=True,
                               env=_env(self.token, self.base), timeout=60)
            return p.stdout.split() == ["2", "2"]
        _wait("both nodes to register with 1 CPU each", two_nodes, timeout=90, every=1)

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the whole group, also when `ray start` itself has exited
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
        for proc in _marked(self.token):  # anything of this cluster that left its node's process group
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        left = _wait("every process of the cluster to exit", lambda: not _marked(self.token) or None, timeout=30)
        assert left, "processes of the test cluster survived"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    import tempfile

    # Starting two nodes on a loaded 2-core machine has failed once in a fresh clone (the second node's first
    # GCS handshake was refused); the cluster's start-up is not what this test is about, so a failed start is
    # stopped and tried once more on fresh ports and a fresh temp dir. A second failure fails the test.
    for attempt in (1, 2):
        base = Path(tempfile.mkdtemp(prefix="ic-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
        c = Cluster(base, secrets.token_hex(8))
        try:
            c.start()
            break
        except AssertionError:
            c.stop()
            if attempt == 2:
                raise
    try:
        yield c
    finally:
        c.stop()


class RecordReader(threading.Thread):
    """Reads sweep.json over and over while drivers write it: every read must parse and list every point."""

    def __init__(self, path: Path, n_points: int):
        super().__init__(daemon=True)
        self.path, self.n, self.reads, self.bad, self.stop = path, n_points, 0, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                text = self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                time.sleep(0.02)
                continue
            self.reads += 1
            try:
                record = json.loads(text)
                n = len(record["points"])
                if n != self.n or sorted(p["index"] for p in record["points"]) != list(range(self.n)):
                    self.bad.append(f"{n} points")
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                self.bad.append(f"{type(e).__name__}: {e}")
            time.sleep(0.02)


class Drivers:
    """`interp sweep ... --executor ray --ray-address` processes, each in its own process group."""

    def __init__(self, file: Path, out: Path, cluster: Cluster):
        self.file, self.out, self.cluster, self.procs = file, out, cluster, []

    def start(self, *extra: str) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "interp.cli", "sweep", str(self.file), "--executor", "ray", "--ray-address",
               self.cluster.address, "--max-parallel", "2", "--out", str(self.out), "-q", *extra]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_env(self.cluster.token, self.cluster.base), start_new_session=True)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            _kill_group(proc, grace=5)


def _record(out: Path) -> dict:
    return json.loads((out / "sweeps" / NAME / "sweep.json").read_text(encoding="utf-8"))


def _running(out: Path) -> list[dict]:
    """Manifests of the runs under `out` whose writer is alive."""
    found = []
    for m in sorted((out / "logit_lens").glob("*/manifest.json")) if (out / "logit_lens").is_dir() else []:
        try:
            manifest = read_manifest(m.parent)
        except Exception:  # noqa: BLE001 - a directory being created or renamed
            continue
        if effective_status(manifest) == "running":
            found.append(manifest)
    return found


def test_sweep_on_a_two_node_cluster_survives_a_killed_worker_a_killed_driver_and_two_drivers(
        tmp_path, cluster, monkeypatch):
    faults(tmp_path, cluster, monkeypatch, SWEEP, N_POINTS)


def faults(tmp_path: Path, cluster: Cluster, monkeypatch, sweep_text: str, n_points: int) -> None:
    """The faults and checks of the module docstring, on the sweep `sweep_text` (named NAME) of `n_points`."""
    f, out = tmp_path / "cluster.toml", tmp_path / "out"
    f.write_text(sweep_text)
    reader = RecordReader(out / "sweeps" / NAME / "sweep.json", n_points)
    reader.start()
    drivers = Drivers(f, out, cluster)
    most_running = 0
    with ExitStack() as stack:
        stack.callback(drivers.close)
        stack.callback(reader.stop.set)

        # -- 1. a worker running a point is killed by its pid ---------------------------------------------
        d1 = drivers.start()

        def worker_running_a_point():
            nonlocal most_running
            running = _running(out)
            most_running = max(most_running, len(running))
            workers = [m for m in running if m["pid"] != d1.pid]
            assert d1.poll() is None, f"the first driver exited {d1.returncode}: {d1.stderr.read()[-3000:]}"
            return workers[0] if workers else None

        victim = _wait("a Ray worker to start a point", worker_running_a_point, timeout=180, every=0.1)
        worker = psutil.Process(victim["pid"])
        assert worker.environ().get(MARK) == cluster.token, "the run's writer is not a worker of this cluster"
        os.kill(victim["pid"], signal.SIGKILL)
        victim_dir = out / "logit_lens" / victim["run_id"]

        def victim_failed_and_one_done():
            nonlocal most_running
            most_running = max(most_running, len(_running(out)))
            if not (out / "sweeps" / NAME / "sweep.json").is_file():
                return None
            points = {p["config_hash"]: p for p in _record(out)["points"]}
            done = [p for p in points.values() if p["status"] == "done"]
            pending = [p for p in points.values() if p["status"] == "pending"]
            if points[victim["config_hash"]]["status"] == "failed" and done and pending:
                return points
            assert d1.poll() is None, f"the first driver finished before it could be killed: {d1.stderr.read()}"
            return None

        before_kill = _wait("the killed worker's point to fail and another to finish",
                            victim_failed_and_one_done, timeout=300, every=0.1)

        # -- 2. the driver is killed mid-sweep ------------------------------------------------------------
        os.killpg(d1.pid, signal.SIGKILL)
        d1.wait(timeout=30)
        killed = _record(out)
        assert killed["state"] == "running", "the killed driver's sweep.json says it finished"
        by_hash = {p["config_hash"]: p for p in killed["points"]}
        failed = by_hash[victim["config_hash"]]
        assert failed["status"] == "failed" and "worker failed" in failed["error"], failed
        assert "WorkerCrashedError" in failed["error"] or "died" in failed["error"], failed["error"]
        finished_first = {h for h, p in by_hash.items() if p["status"] == "done"}
        unfinished = {h for h, p in by_hash.items() if p["status"] != "done"}
        assert finished_first and len(unfinished) >= 2, {h[:8]: p["status"] for h, p in by_hash.items()}
        assert set(before_kill) == set(by_hash)
        # Ray ends the dead driver's workers (SIGTERM); their runs are then failed by the signal, never done
        _wait("the dead driver's workers to end", lambda: not _running(out) or None, timeout=60)
        assert inspect_run(victim_dir).status == "interrupted", inspect_run(victim_dir)
        # a worker can finish its point between its driver's death and Ray's SIGTERM (seen on CI: done 18 s
        # before the restart): that run is complete, so the new drivers must take it as done, not redo it
        late = {r.config_hash for r in list_runs(out, probe="logit_lens") if r.status == "done"} & unfinished
        assert victim["config_hash"] not in late

        # -- 3. two drivers start the same sweep at once (one retries failed points; the other needs not) -----
        t_restart = time.time()
        d2, d3 = drivers.start("--retry-failed"), drivers.start()
        seen_running = []
        def both_exited():
            nonlocal most_running
            running = _running(out)
            most_running = max(most_running, len(running))
            seen_running.append(len(running))
            return d2.poll() is not None and d3.poll() is not None
        _wait("the two drivers to finish", both_exited, timeout=420, every=0.2)
        outputs = [(d.returncode, *d.communicate()) for d in (d2, d3)]
        assert [o[0] for o in outputs] == [0, 0], outputs
    reader.join(timeout=5)

    # -- every point done exactly once, files intact; sweep.json lists each once ---------------------------
    final = _record(out)
    assert final["state"] == "finished" and len(final["points"]) == n_points
    hashes = [p["config_hash"] for p in final["points"]]
    assert len(set(hashes)) == n_points and sorted(p["index"] for p in final["points"]) == list(range(n_points))
    runs = list_runs(out, probe="logit_lens")
    done = {}
    for r in runs:
        # a point's other runs were SIGKILLed (interrupted) or stopped by Ray's SIGTERM when their driver died
        assert r.status == "interrupted" or r.status == "done" or (
            r.status == "failed" and r.error.endswith("terminated by signal 15")), (r.path, r.status, r.error)
        if r.status == "done":
            assert r.config_hash not in done, f"{r.config_hash[:8]} done twice: {done[r.config_hash].path}, {r.path}"
            verify_files(r.path, read_manifest(r.path))  # every file's sha256 and size
            assert read_manifest(r.path)["files"], r.path
            done[r.config_hash] = r
    assert set(done) == set(hashes), "a point has no done run"
    for p in final["points"]:
        assert p["status"] in ("done", "skipped") and p["run_dir"] == str(done[p["config_hash"]].path), p
        assert p["metrics"]["final_top1"] == done[p["config_hash"]].metrics["final_top1"]
    for h in finished_first:  # finished before the driver was killed: skipped by both new drivers
        assert done[h].started < killed["updated"] and next(
            p for p in final["points"] if p["config_hash"] == h)["status"] == "skipped"
    for h in unfinished:  # redone after the restart, the killed worker's point included; late ones skipped
        started = read_manifest(done[h].path)["started"]
        after = started > time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_restart - 1))
        status = next(p for p in final["points"] if p["config_hash"] == h)["status"]
        assert (not after and status == "skipped") if h in late else after, (h[:8], started, status, h in late)
    assert not list((out / "sweeps" / ".claims").iterdir()), "a claim was left behind"
    assert reader.reads >= 50 and not reader.bad, f"{reader.reads} reads of sweep.json, bad: {reader.bad[:5]}"
    assert most_running >= 2, "two points never ran at once: the second node took no work"

    # -- the Sweeps page shows the final state -------------------------------------------------------------
    from interp_app.testing import app_test

    monkeypatch.setenv("INTERP_OUT", str(out))
    at = app_test(sweep=NAME).run()
    assert not at.exception, [e.value for e in at.exception]
    caption = " ".join(c.value for c in at.caption)
    n_skipped = sum(p["status"] == "skipped" for p in final["points"])
    assert f"{n_points} points" in caption and f"{n_skipped} skipped" in caption, caption
    assert "failed" not in caption and "pending" not in caption, caption
    table = at.dataframe[0].value
    assert len(table) == n_points and all(s.startswith("✓") for s in table["status"]), table["status"].tolist()
    assert not table["run"].str.contains("deleted").any()
