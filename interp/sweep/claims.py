"""The claim protocol: a point runs only under its claim, and finished runs are found by config hash.

A claim is ``<out>/sweeps/.claims/<probe>-<config hash>.json``, created with O_EXCL by the process that runs the
point (a Ray worker, or the driver itself with the local executor) and removed when the run ends. A claim whose
holder is gone (its pid on this host, or no heartbeat for `claim_ttl` seconds from another host) is taken over.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store import _RUN_ID, RunInfo, _now, _pid_alive, inspect_run

CLAIMS = ".claims"
CLAIM_TTL = 60.0
"""Seconds without a heartbeat after which a claim written on another host counts as abandoned."""



def claim_path(out: Path | str, probe: str, chash: str) -> Path:
    """The claim file of the point with this config hash under the output root."""
    return Path(out) / "sweeps" / CLAIMS / f"{probe}-{chash}.json"



@dataclass
class Claim:
    """A point's claim, held by this process until `release()`; a thread refreshes its mtime (the heartbeat)."""

    path: Path
    """The claim file."""
    token: str
    """The random token written in it: only the holder that wrote it removes it."""
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)

    def heartbeat(self, every: float) -> None:
        def beat():
            while not self._stop.wait(every):
                try:
                    os.utime(self.path)
                except FileNotFoundError:
                    return

        threading.Thread(target=beat, name="interp-claim-heartbeat", daemon=True).start()

    def release(self) -> None:
        self._stop.set()
        held = read_claim(self.path)
        if held is not None and held.get("token") == self.token:
            self.path.unlink(missing_ok=True)



def read_claim(path: Path) -> dict[str, Any] | None:
    """The claim's record; None when there is no claim, {} while it is being written (or unreadable)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def _alive(record: dict[str, Any], path: Path, ttl: float) -> bool:
    """Whether a claim's holder may still be running its point."""
    pid = record.get("pid")
    if record.get("host") == socket.gethostname() and isinstance(pid, int):
        return _pid_alive(pid)
    try:
        return time.time() - path.stat().st_mtime < ttl  # another host (or a claim being written): the heartbeat
    except FileNotFoundError:
        return False



def claim_holder(path: Path, ttl: float = CLAIM_TTL) -> dict[str, Any] | None:
    """The record of a live claim on `path`, or None when nobody holds it (no claim, or an abandoned one)."""
    record = read_claim(path)
    return record if record is not None and _alive(record, path, ttl) else None



def try_claim(path: Path, ttl: float = CLAIM_TTL) -> Claim | None:
    """Take the claim on `path` (an O_EXCL create); None when a live process holds it.

    An abandoned claim is removed under a takeover lock (a second O_EXCL file beside it), and only if it is still
    the abandoned record once the lock is held; then the O_EXCL create decides who takes the point. A takeover
    lock older than `TAKEOVER_TTL` seconds belonged to a process that died midway and is cleared."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    record = {"host": socket.gethostname(), "pid": os.getpid(), "token": token, "claimed": _now()}
    for _ in range(8):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            held = read_claim(path)
            if held is None:
                continue  # released meanwhile: try again
            if _alive(held, path, ttl) or not _remove_abandoned(path, held):
                return None
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(record))
            f.flush()
            os.fsync(f.fileno())
        return Claim(path, token)
    return None


TAKEOVER_TTL = 10.0
"""Seconds after which a takeover lock is taken for the remains of a process that died while holding it."""


def _remove_abandoned(path: Path, held: dict[str, Any]) -> bool:
    """Remove the claim `held` from `path` under the takeover lock; False when another process holds the lock
    (it is taking the point over) or the claim changed meanwhile (someone took it)."""
    lock = path.with_name(f".{path.name}.takeover")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        try:
            if time.time() - lock.stat().st_mtime > TAKEOVER_TTL:
                lock.unlink(missing_ok=True)
        except FileNotFoundError:
            pass
        return False
    os.close(fd)
    try:
        if read_claim(path) != held:
            return False
        path.unlink(missing_ok=True)  # nobody else removes or replaces a claim that exists while we hold the lock
        return True
    finally:
        lock.unlink(missing_ok=True)



def done_runs(out: Path | str, probe: str, chash: str) -> list[RunInfo]:
    """The `done` runs (files verified) of the config hash `chash` under `out`, found by the hash in the run id."""
    base = Path(out) / probe
    if not base.is_dir():
        return []
    found = []
    for d in base.glob(f"*-{chash[:8]}-*"):
        if d.is_dir() and _RUN_ID.match(d.name):
            info = inspect_run(d)
            if info.status == "done" and info.config_hash == chash:
                found.append(info)
    return sorted(found, key=lambda r: r.run_id)
