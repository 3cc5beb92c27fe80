"""Fixture runs for the dashboard tests, made by running the real probes (see conftest.py).

One session root holds every registered probe's `micro` run (sharing the session's model), a
failed run (a prompt longer than max_tokens), an interrupted run (status running, dead pid), a
running one (this process's pid) and damaged runs made by corrupting copies of the logit_lens run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from interp.store import MANIFEST, sha256_file
from interp_app.testing import APP, new_run, ref  # noqa: F401 - shared with bench/dashboard.py; re-exported here

ROOT = Path(__file__).resolve().parents[2]


def selected_probes() -> set[str]:
    """The probes whose micro runs the session makes: all registered ones, or (to iterate faster on
    one page) those named in $INTERP_TEST_PROBES, comma-separated; logit_lens always (fixtures copy it)."""
    from interp.registry import probes_available

    names = set(probes_available())
    if wanted := os.environ.get("INTERP_TEST_PROBES"):
        names &= {n.strip() for n in wanted.split(",")}
    return names | {"logit_lens"}


#: Damaged copies of the logit_lens run: kind -> what was done to it.
DAMAGE = {
    "manifest-json": "manifest.json is not valid JSON",
    "sha-mismatch": "a byte of tokens.parquet flipped (sha256 mismatch)",
    "truncated-safetensors": "lens.safetensors cut in half (size mismatch)",
    "missing-file": "topk.parquet deleted",
    "unreadable-safetensors": "lens.safetensors cut in half, manifest re-hashed (the reader fails)",
    "unreadable-parquet": "topk.parquet overwritten in the middle, manifest re-hashed (the reader fails)",
    "link-outside": "tokens.parquet replaced by a link to a file outside the root",
}
#: Damage only reading finds (the manifest's hashes match): listed as done, damaged on the page.
FOUND_ON_READ = {"unreadable-safetensors", "unreadable-parquet"}


@dataclass
class Runs:
    root: Path
    done: dict[str, str] = field(default_factory=dict)
    """probe -> "<probe>/<run_id>" of its micro run"""
    errors: dict[str, str] = field(default_factory=dict)
    """probe -> the error of its micro run, when that failed"""
    failed: str = ""
    interrupted: str = ""
    running: str = ""
    damaged: dict[str, str] = field(default_factory=dict)
    """DAMAGE kind -> run ref"""
    outside: str = ""
    """a ref whose directory is a link to a run outside the root (never listed, never read)"""
    foreign: str = ""
    """a done run of a probe that is not registered"""


def copy_run(src: Path, n: int, parent: Path | None = None) -> Path:
    """A copy of run `src` under a new run id (same stamp and hash, last 4 hex = n)."""
    run_id = f"{src.name[:-4]}{n:04x}"
    dst = (parent or src.parent) / run_id
    shutil.copytree(src, dst)
    edit_manifest(dst, run_id=run_id)
    return dst


def edit_manifest(run_dir: Path, **changes) -> None:
    m = json.loads((run_dir / MANIFEST).read_text())
    m.update(changes)
    (run_dir / MANIFEST).write_text(json.dumps(m, indent=1))


def rehash(run_dir: Path, filename: str) -> None:
    m = json.loads((run_dir / MANIFEST).read_text())
    p = run_dir / filename
    m["files"][filename] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
    (run_dir / MANIFEST).write_text(json.dumps(m, indent=1))


def damage(run_dir: Path, kind: str, outside: Path) -> None:
    if kind == "manifest-json":
        (run_dir / MANIFEST).write_text('{"schema": 1, "probe": "logit_lens", "status": "do')
    elif kind == "sha-mismatch":
        p = run_dir / "tokens.parquet"
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF
        p.write_bytes(bytes(data))
    elif kind in ("truncated-safetensors", "unreadable-safetensors"):
        p = run_dir / "lens.safetensors"
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
        if kind == "unreadable-safetensors":
            rehash(run_dir, "lens.safetensors")
    elif kind == "missing-file":
        (run_dir / "topk.parquet").unlink()
    elif kind == "unreadable-parquet":
        p = run_dir / "topk.parquet"
        data = bytearray(p.read_bytes())
        mid = len(data) // 2
        data[mid - 200 : mid + 200] = b"\x00" * 400
        p.write_bytes(bytes(data))
        rehash(run_dir, "topk.parquet")
    elif kind == "link-outside":
        target = outside / "secret.parquet"
        shutil.copy(run_dir / "tokens.parquet", target)
        (run_dir / "tokens.parquet").unlink()
        (run_dir / "tokens.parquet").symlink_to(target)
    else:  # pragma: no cover
        raise ValueError(kind)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
