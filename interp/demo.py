"""`interp demo`: every probe's run at one size on the embedded model, the dashboard served from the start.

The dashboard (a child process) comes up at once and the runs go on in this process behind it, so the Runs page
shows each run live (its stage, progress and elapsed time, from the progress record `RunContext.report` writes) and
a probe's page fills in as its run finishes. The terminal gets one line per stage of each run ("3/11 atoms:
training 12/200 · 45 s (~60 s last time)"), a line every `HEARTBEAT` seconds within a long stage, and a closing
table (probe, status, seconds, headline) with the dashboard's address. With `--no-app` the runs go and the command
returns. Ctrl-C (or SIGTERM) ends the run in flight, stops the dashboard and returns 130.

Estimates come from earlier runs on this machine: the newest done run of the same config under the artifacts root,
else the seconds the last demo recorded for the probe, size and model in ``<cache>/demo-timings.json``.
While it runs, ``<out>/.demo.json`` says which probes the demo runs and which process runs them, so the Runs page
keeps polling between two runs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._files import _now, atomic_write_text
from .errors import Interrupted
from .store import DEMO_MARKER as MARKER

HEARTBEAT = 15.0
"""Seconds of a stage without a line before the demo prints where it is."""
STAGE_EVERY = 5.0
"""Seconds between two lines for stages a run has been in before (a loop whose body has stages of its own)."""


@dataclass
class Outcome:
    probe: str
    status: str
    """done | failed | interrupted"""
    seconds: float | None = None
    headline: str = ""
    path: Path | None = None


def headline(metrics: dict[str, Any], n: int = 3) -> str:
    """The first `n` scalar metrics as "name=value, ..." (strings unquoted)."""
    from .display import fmt

    parts = []
    for k, v in metrics.items():
        if isinstance(v, (list, tuple, dict)):
            continue
        parts.append(f"{k}={(v.strip() or repr(v)) if isinstance(v, str) else fmt(v)}")
        if len(parts) == n:
            break
    return ", ".join(parts)


def fmt_seconds(s: float) -> str:
    """"45 s", "4 m 05 s"."""
    s = int(round(s))
    return f"{s} s" if s < 60 else f"{s // 60} m {s % 60:02d} s"


# ----------------------------------------------------------------------------- estimates


def timings_file() -> Path:
    from .embedded import cache_root

    return cache_root() / "demo-timings.json"


def _key(cfg) -> str:
    return f"{cfg.model}/{getattr(cfg, 'size', '?')}/{cfg.device}"


def estimate(out: Path, probe: str, cfg, chash: str) -> tuple[float, str] | None:
    """(seconds, where from) of an earlier run like this one on this machine, or None: the newest done run of the
    same config (same hash) under `out`, else the last demo's seconds for this probe, size, model and device."""
    from .store import list_runs

    for r in list_runs(out, probe=probe, verify=False):
        if r.status == "done" and r.config_hash == chash and r.seconds:
            return float(r.seconds), "last run"
    try:
        known = json.loads(timings_file().read_text(encoding="utf-8"))
        return float(known[probe][_key(cfg)]), "last demo"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember(probe: str, cfg, seconds: float) -> None:
    """Record a done run's seconds in the timings file (best effort: an unwritable cache only loses estimates)."""
    path = timings_file()
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    entry = known.get(probe) if isinstance(known.get(probe), dict) else {}
    known[probe] = {**entry, _key(cfg): round(seconds, 1)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(known, indent=1, sort_keys=True))
    except OSError:
        pass


# ----------------------------------------------------------------------------- progress lines


class Lines:
    """Prints the demo's progress lines: one per stage change of the run in flight (the progress records of
    `interp.context.add_progress_listener`), and one every `heartbeat` seconds within a stage."""

    def __init__(self, n: int, heartbeat: float = HEARTBEAT, file=None, quiet: bool = False):
        self.n, self.heartbeat, self.file, self.quiet = n, heartbeat, file, quiet
        self.lock = threading.Lock()
        self.k, self.probe, self.t0, self.expect = 0, "", 0.0, None
        self.stage: str | None = None
        self.step: tuple[Any, Any] = (None, None)
        self.shown: set[str] = set()
        self.last = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="interp-demo-lines", daemon=True)

    def say(self, text: str) -> None:
        with self.lock:
            print(text, file=self.file or sys.stdout, flush=True)
            self.last = time.monotonic()

    def begin(self, k: int, probe: str, expect: tuple[float, str] | None) -> None:
        self.k, self.probe, self.expect, self.t0 = k, probe, expect, time.monotonic()
        self.stage, self.step, self.shown = None, (None, None), set()
        guess = f" (about {fmt_seconds(expect[0])}, from the {expect[1]} on this machine)" if expect else ""
        self.say(f"[{k}/{self.n}] {probe}: starting{guess}")

    def end(self, outcome: Outcome) -> None:
        took = f" in {fmt_seconds(outcome.seconds)}" if outcome.seconds is not None else ""
        self.say(f"[{self.k}/{self.n}] {outcome.probe}: {outcome.status}{took}"
                 + (f" · {outcome.headline}" if outcome.headline else ""))
        self.probe = ""

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        step, total = self.step
        where = self.stage or "working"
        if step is not None:
            where += f" {step}/{total}" if total else f" {step}"
        left = ""
        if self.expect:
            left = f" of about {fmt_seconds(self.expect[0])}"
        return f"[{self.k}/{self.n}] {self.probe}: {where} · {fmt_seconds(elapsed)}{left}"

    def record(self, run_dir, record: dict[str, Any]) -> None:
        """A progress listener: a line when the stage changes (a stage the run was in before, as a loop's stage
        between the stages of its body, only once `STAGE_EVERY` seconds passed since the last line)."""
        if not self.probe or self.quiet:
            return
        changed = record.get("stage") != self.stage
        self.stage, self.step = record.get("stage"), (record.get("step"), record.get("total"))
        if changed and self.stage and (self.stage not in self.shown or time.monotonic() - self.last >= STAGE_EVERY):
            self.shown.add(self.stage)
            self.say(self.line())

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            if self.probe and not self.quiet and time.monotonic() - self.last >= self.heartbeat:
                self.say(self.line())

    def __enter__(self) -> Lines:
        from .context import add_progress_listener

        self._remove = add_progress_listener(self.record)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._remove()
        self._thread.join(timeout=2)


# ----------------------------------------------------------------------------- the runs


def prepare_all(names: list[str], size: str, model: str | None) -> list[tuple[Any, Any]]:
    """(spec, cfg) of every probe at `size`, all validated (torch-free) before anything starts: a typo fails at
    once, before the dashboard or any run."""
    from .runner import prepare

    return [prepare(name, {"size": size, **({"model": model} if model else {})}) for name in names]


def run_probes(prepared: list[tuple[Any, Any]], out: Path, lines: Lines, progress: bool = False,
               outcomes: list[Outcome] | None = None) -> list[Outcome]:
    """Run each prepared (spec, cfg) in turn with the progress lines; a failed run is recorded and the demo goes
    on. KeyboardInterrupt ends it. Each outcome is appended to `outcomes` as it comes (the caller's list keeps
    them when a run is interrupted)."""
    from .config import config_hash
    from .runner import execute
    from .store import load_run

    outcomes = [] if outcomes is None else outcomes
    for k, (spec, cfg) in enumerate(prepared, 1):
        lines.begin(k, spec.name, estimate(out, spec.name, cfg, config_hash(spec.name, cfg)))
        t0 = time.monotonic()
        try:
            path = execute(spec, cfg, out=out, progress=progress)
        except BrokenPipeError:  # stdout is gone, not the run
            raise
        except Exception as e:  # noqa: BLE001 - the demo goes on; the run records the failure
            outcome = Outcome(spec.name, "failed", time.monotonic() - t0, f"{type(e).__name__}: {e}"[:120])
        else:
            run = load_run(path, verify=False)
            seconds = run.manifest.get("seconds") or time.monotonic() - t0
            outcome = Outcome(spec.name, "done", seconds, headline(run.metrics), path)
            remember(spec.name, cfg, seconds)
        outcomes.append(outcome)
        lines.end(outcome)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    """The closing table: probe, status, seconds, headline."""
    rows = [f"{'probe':24s} {'status':11s} {'seconds':>8s}  headline"]
    for o in outcomes:
        secs = f"{o.seconds:8.1f}" if o.seconds is not None else f"{'-':>8s}"
        rows.append(f"{o.probe:24s} {o.status:11s} {secs}  {o.headline}")
    total = sum(o.seconds or 0 for o in outcomes)
    rows.append(f"{len(outcomes)} runs, {sum(o.status == 'done' for o in outcomes)} done, {fmt_seconds(total)}")
    return "\n".join(rows)


# ----------------------------------------------------------------------------- the dashboard


def serve(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """The dashboard as a child process in this process group (Ctrl-C at the terminal reaches both), its output
    in `log` so it does not interleave with the progress lines."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        return subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def wait_up(url: str, proc: subprocess.Popen, lines: Lines, log: Path, timeout: float = 120) -> None:
    """Say when the dashboard answers (a thread: the runs do not wait for it), or that it died."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            lines.say(f"dashboard: exited with status {proc.returncode} (its log: {log})")
            return
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                lines.say(f"dashboard: up at {url} (runs appear as they go)")
                return
        except OSError:
            pass
        time.sleep(0.5)


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _Stop(Interrupted):
    """SIGTERM to the demo outside a run (the runner raises its own Interrupted inside one)."""


def _raise_stop(signum, frame):  # pragma: no cover - exercised by a subprocess test
    raise _Stop(f"terminated by signal {signum}")


def main(names: list[str], size: str, model: str | None, out: Path, app_cmd: tuple[list[str], dict, str] | None,
         quiet: bool = False) -> int:
    """The demo: `app_cmd` (command, environment, URL) serves the dashboard from the start; None runs and returns.
    `quiet`: a line as each run starts and ends, none within a run.
    Exit status 0 when every run is done, 1 when one failed, 130 when interrupted."""
    prepared = prepare_all(names, size, model)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    proc, serving, outcomes = None, False, []
    lines = Lines(len(names), quiet=quiet)
    old = signal.signal(signal.SIGTERM, _raise_stop) if threading.current_thread() is threading.main_thread() else None
    marker = out / MARKER
    atomic_write_text(marker, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "probes": names,
                                          "size": size, "started": _now()}))
    try:
        with lines:
            if app_cmd is not None:
                cmd, env, url = app_cmd
                log = out / ".demo-dashboard.log"
                proc = serve(cmd, env, log)
                lines.say(f"dashboard: starting at {url} (log: {log}); {len(names)} {size} runs go on behind it")
                threading.Thread(target=wait_up, args=(url, proc, lines, log), daemon=True).start()
            else:
                lines.say(f"{len(names)} {size} runs under {out}")
            run_probes(prepared, out, lines, outcomes=outcomes)
            marker.unlink(missing_ok=True)
            print(table(outcomes), flush=True)
            failed = [o.probe for o in outcomes if o.status != "done"]
            if failed:
                print(f"interp: demo runs failed: {', '.join(failed)}", file=sys.stderr)
            if proc is None:
                return 1 if failed else 0
            print(f"dashboard: {url}  (artifacts: {out}; Ctrl-C stops it)", flush=True)
            serving = True
        proc.wait()
        return 1 if failed else 0
    except (KeyboardInterrupt, Interrupted) as e:  # Ctrl-C or SIGTERM (the run in flight reads interrupted)
        if serving:  # every run ended: it stops the dashboard, as for `interp app`
            sys.stderr.write("interp: dashboard stopped\n")
            return 1 if failed else 0
        if outcomes:
            print(table(outcomes), flush=True)
        sys.stderr.write(f"interp: demo stopped after {len(outcomes)} of {len(names)} runs\n")
        if isinstance(e, KeyboardInterrupt):
            return 130
        raise  # the CLI's exit status for a signal
    finally:
        marker.unlink(missing_ok=True)
        stop(proc)
        if old is not None:
            signal.signal(signal.SIGTERM, old)
