"""Run directories: manifest, atomic writes, safetensors + parquet + JSON, listing and loading.

Layout: ``<root>/<probe>/<run_id>/`` holding ``manifest.json`` and the artifacts. Every file is
written to a temporary name and moved into place; ``status: done`` is written last, after
every file is hashed. Only safetensors, parquet and JSON are written or read, with one exception: a Jacobian lens
is also kept as the reference jlens package's `.pt` (a dict of tensors, lists and numbers) so that the reference and
TransformerLens read it as it is; it is written by `interp.lens.save_lens` and read only with
`torch.load(weights_only=True)`, which refuses anything but tensors and plain containers (never pickle).
Reading needs no torch, except for that one file kind: tensors come back as numpy arrays.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import re
import secrets
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._files import (  # noqa: F401  (re-exported)
    _now,
    atomic_write,
    atomic_write_text,
    jsonable,
    read_parsed,
    sha256_file,
    temp_sibling,
    umask_modes,
)
from .errors import DamagedRun, InterpError, interrupted_by

SCHEMA = 1
MANIFEST = "manifest.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{8}-[0-9a-f]{4}$")
ARTIFACT_SUFFIXES = (".safetensors", ".parquet", ".json", ".jsonl")


def default_root() -> Path:
    """The artifacts root: $INTERP_OUT or ./artifacts."""
    return Path(os.environ.get("INTERP_OUT", "artifacts"))


def check_name(name: str, what: str = "artifact name") -> str:
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise InterpError(f"{what} {name!r} is invalid: letters, digits, '_', '.', '-' only")
    return name


def check_relpath(rel: str) -> str:
    """An artifact path: a file name, or "directory/file" one level down (SAELens directories)."""
    parts = rel.split("/") if isinstance(rel, str) else [rel]
    if len(parts) > 2:
        raise InterpError(f"artifact path {rel!r} is invalid: at most one directory level")
    for part in parts:
        check_name(part)
    return rel


# ============================================================================= writing


class RunWriter:
    """Creates one run directory and writes its artifacts and manifest atomically."""

    def __init__(self, path: Path, manifest: dict[str, Any]):
        self.path = path
        self.manifest = manifest

    @classmethod
    def create(
        cls,
        root: Path | str,
        probe: str,
        config: dict[str, Any],
        config_hash: str,
        seed: int,
        env: dict[str, Any] | None = None,
    ) -> "RunWriter":
        """A new run directory, born with its manifest (status running).

        The directory is filled under a hidden temporary name and renamed into place, so a listing never sees a
        run directory without a manifest (an exclusive mkdir followed by the manifest write left a window in
        which readers saw a "damaged" run). A run directory is never empty, so the rename fails on a taken run id
        (ENOTEMPTY / EEXIST) and a new id is tried.
        """
        check_name(probe, "probe name")
        parent = Path(root) / probe
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InterpError(f"cannot create the run directory under {parent}: {e.strerror or e}") from None
        for _ in range(100):
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
            run_id = f"{stamp}-{config_hash[:8]}-{secrets.token_hex(2)}"
            tmp = parent / f".{run_id}.{secrets.token_hex(4)}.tmp"
            try:
                os.mkdir(tmp)
            except OSError as e:
                raise InterpError(f"cannot create the run directory under {parent}: {e.strerror or e}") from None
            writer = cls(tmp, cls._new_manifest(probe, run_id, config, config_hash, seed, env))
            try:
                writer.flush()
                os.rename(tmp, parent / run_id)
            except OSError as e:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
                if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    continue
                raise
            writer.path = parent / run_id
            return writer
        raise InterpError(f"could not create a run directory under {parent}")  # pragma: no cover - 100 collisions

    @staticmethod
    def _new_manifest(probe: str, run_id: str, config: dict[str, Any], config_hash: str, seed: int,
                      env: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "probe": probe,
            "run_id": run_id,
            "status": "running",
            "error": None,
            "config": config,
            "config_hash": config_hash,
            "model": {},
            "metrics": {},
            "timings": {},
            "files": {},
            "env": env or {},
            "seed": seed,
            "started": _now(),
            "finished": None,
            "seconds": None,
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }

    # -- artifacts ------------------------------------------------------------------
    def _record(self, filename: str) -> None:
        p = self.path / filename
        self.manifest["files"][filename] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
        self.flush()

    def save_tensors(self, name: str, tensors: Mapping[str, Any], metadata: dict[str, str] | None = None) -> Path:
        """name.safetensors from torch tensors or numpy arrays (bf16 stored as float32)."""
        import numpy as np
        from safetensors.numpy import save_file

        arrays = {}
        for key, t in tensors.items():
            if hasattr(t, "detach"):
                t = t.detach().cpu()
                if str(t.dtype) in ("torch.bfloat16", "torch.float16"):
                    t = t.float()
                t = t.cpu().numpy()
            arrays[str(key)] = np.ascontiguousarray(t)
        filename = check_name(name) + ".safetensors"
        atomic_write(self.path / filename, lambda p: save_file(arrays, str(p), metadata=metadata))
        self._record(filename)
        return self.path / filename

    def save_table(self, name: str, frame: Any) -> Path:
        """name.parquet from a pandas DataFrame (or anything DataFrame() accepts)."""
        import pandas as pd

        frame = frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(frame)
        filename = check_name(name) + ".parquet"
        atomic_write(self.path / filename, lambda p: frame.to_parquet(p, index=False))
        self._record(filename)
        return self.path / filename

    def save_json(self, name: str, obj: Any) -> Path:
        filename = check_name(name) + ".json"
        atomic_write_text(self.path / filename, json.dumps(jsonable(obj), indent=1))
        self._record(filename)
        return self.path / filename

    def save_jsonl(self, name: str, rows: Iterable[Any]) -> Path:
        filename = check_name(name) + ".jsonl"
        text = "".join(json.dumps(jsonable(r)) + "\n" for r in rows)
        atomic_write_text(self.path / filename, text)
        self._record(filename)
        return self.path / filename

    def save_dir(self, name: str, write: Callable[[Path], None]) -> Path:
        """A directory artifact (e.g. a SAELens SAE: cfg.json + sae_weights.safetensors).

        `write(tmp_dir)` fills a temporary directory, which is then moved into place; each of
        its files is hashed as "name/file". Only safetensors and JSON files are allowed.
        """
        check_name(name)
        tmp = temp_sibling(self.path / name, directory=True)
        settle = umask_modes(tmp)
        try:
            write(tmp)
            settle()
            files = sorted(p for p in tmp.rglob("*") if p.is_file())
            for p in files:
                if p.parent != tmp or not p.name.endswith(ARTIFACT_SUFFIXES):
                    raise InterpError(f"directory artifact {name!r}: unexpected file {p.relative_to(tmp)}")
            os.replace(tmp, self.path / name)
        except BaseException:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for p in files:
            self._record(f"{name}/{p.name}")
        return self.path / name

    def save_lens(self, name: str, lens: Any) -> Path:
        """name.pt: a Jacobian lens in the reference jlens package's layout, float32 (`interp.lens.save_lens`), so
        the reference code, TransformerLens and Neuronpedia's viewer read it as it is. Read back with
        `RunInfo.lens(name)` (weights_only)."""
        from .lens import save_lens

        filename = check_name(name) + ".pt"
        save_lens(lens, self.path / filename)
        self._record(filename)
        return self.path / filename

    # -- manifest -------------------------------------------------------------------
    def log_metrics(self, **metrics: Any) -> None:
        self.manifest["metrics"].update(jsonable(metrics))
        self.flush()

    def log_timings(self, **timings: Any) -> None:
        self.manifest["timings"].update(jsonable(timings))
        self.flush()

    def set(self, key: str, value: Any) -> None:
        self.manifest[key] = jsonable(value)
        self.flush()

    def flush(self) -> None:
        atomic_write_text(self.path / MANIFEST, json.dumps(self.manifest, indent=1))

    def finish(self, error: BaseException | None = None) -> None:
        """Re-hash every file, then write status done last; with an error, status interrupted when a signal
        stopped the run (KeyboardInterrupt from SIGINT, `Interrupted` from SIGTERM: `interrupted_by`), else
        failed, with the error."""
        m = self.manifest
        m["finished"] = _now()
        started = _dt.datetime.fromisoformat(m["started"])
        m["seconds"] = (_dt.datetime.fromisoformat(m["finished"]) - started).total_seconds()
        if error is None:
            for filename in list(m["files"]):
                self._record(filename)
            m["status"] = "done"
        elif (why := interrupted_by(error)) is not None:
            m["status"] = "interrupted"
            m["error"] = f"interrupted: {why}"
        else:
            m["status"] = "failed"
            m["error"] = f"{type(error).__name__}: {error}"
        self.flush()


# ============================================================================= reading


@dataclass
class RunInfo:
    """One row of a listing: what the manifest says, plus whether it checks out."""

    path: Path
    probe: str
    run_id: str
    status: str
    """done | failed | running | interrupted | damaged"""
    model: str | None = None
    config_hash: str | None = None
    started: str | None = None
    seconds: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        from .display import runs_html

        return runs_html([self])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The parsed manifest; DamagedRun when it is missing or not valid JSON."""
    manifest = read_parsed(Path(run_dir) / MANIFEST, json.loads, json.JSONDecodeError, DamagedRun,
                           f"{run_dir}: no {MANIFEST}", lambda e: f"{run_dir}: {MANIFEST} is not valid JSON ({e})")
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise DamagedRun(f"{run_dir}: {MANIFEST} has no schema {SCHEMA}")
    return manifest


def effective_status(manifest: dict[str, Any]) -> str:
    """The manifest's status, but 'running' only while the writing process lives (same host); else 'interrupted',
    as a run a signal stopped is recorded (`RunWriter.finish`)."""
    status = manifest.get("status", "damaged")
    if status == "running" and manifest.get("host") == socket.gethostname():
        pid = manifest.get("pid")
        if isinstance(pid, int) and not _pid_alive(pid):
            return "interrupted"
    return status


def verify_files(run_dir: Path, manifest: dict[str, Any]) -> None:
    """DamagedRun unless every listed file exists with its recorded sha256 and size."""
    for filename, meta in manifest.get("files", {}).items():
        p = Path(run_dir) / check_relpath(filename)
        if not p.is_file():
            raise DamagedRun(f"{run_dir}: {filename} is missing")
        if p.stat().st_size != meta.get("bytes") or sha256_file(p) != meta.get("sha256"):
            raise DamagedRun(f"{run_dir}: {filename} does not match its sha256 in the manifest")


def inspect_run(run_dir: Path, verify: bool = True) -> RunInfo:
    """A RunInfo for one directory; status 'damaged' (with the reason) when it does not check out."""
    run_dir = Path(run_dir)
    probe, run_id = run_dir.parent.name, run_dir.name
    try:
        m = read_manifest(run_dir)
        status = effective_status(m)
        if verify and status == "done":
            verify_files(run_dir, m)
    except DamagedRun as e:
        return RunInfo(run_dir, probe, run_id, "damaged", error=str(e))
    return RunInfo(
        run_dir,
        m.get("probe", probe),
        m.get("run_id", run_id),
        status,
        model=(m.get("model") or {}).get("name") or (m.get("config") or {}).get("model"),
        config_hash=m.get("config_hash"),
        started=m.get("started"),
        seconds=m.get("seconds"),
        metrics=m.get("metrics") or {},
        error=m.get("error"),
        config=m.get("config") or {},
    )


def list_runs(root: Path | str | None = None, probe: str | None = None, verify: bool = True) -> list[RunInfo]:
    """Every run under `root` (newest first), damaged ones included and marked; a list that renders as a table
    in a notebook (`interp.display.RunList`)."""
    from .display import RunList

    root = Path(root) if root is not None else default_root()
    if not root.is_dir():
        return RunList()
    out = []
    for probe_dir in sorted(root.iterdir()):
        if not probe_dir.is_dir() or (probe and probe_dir.name != probe):
            continue
        for run_dir in probe_dir.iterdir():
            if run_dir.is_dir() and _RUN_ID.match(run_dir.name):
                out.append(inspect_run(run_dir, verify=verify))
    # the id's timestamp has whole seconds; the manifest's start time breaks ties within a second
    return RunList(sorted(out, key=lambda r: (r.run_id[:15], r.started or ""), reverse=True))


def resolve_run(root: Path | str, ref: str) -> Path:
    """The run directory `ref` ("probe/run_id" or a path) inside `root`; InterpError outside it."""
    root = Path(root).resolve()
    path = Path(ref)
    path = (path if path.is_absolute() else root / path).resolve()
    if root != path and root not in path.parents:
        raise InterpError(f"run {ref!r} is outside the artifacts root {root}")
    if not (path / MANIFEST).is_file():
        raise InterpError(f"run {ref!r} has no manifest under {root}")
    return path


DEMO_MARKER = ".demo.json"
"""The file under the artifacts root that says an `interp demo` is running there (removed when it ends)."""


def running_demo(root: Path | str) -> dict[str, Any] | None:
    """What a running `interp demo` wrote under `root` (`DEMO_MARKER`: its pid, host, probes, size and start), so
    the dashboard keeps watching between two of its runs; None when there is none, it does not parse, or its
    process is gone (on this host)."""
    try:
        marker = json.loads((Path(root) / DEMO_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict):
        return None
    pid = marker.get("pid")
    if marker.get("host") == socket.gethostname() and (not isinstance(pid, int) or not _pid_alive(pid)):
        return None
    return marker


@dataclass
class Run:
    """A loaded run: its manifest and lazily loaded artifacts (numpy, pandas, JSON)."""

    path: Path
    manifest: dict[str, Any]

    @property
    def probe(self) -> str:
        return self.manifest["probe"]

    @property
    def status(self) -> str:
        return effective_status(self.manifest)

    @property
    def metrics(self) -> dict[str, Any]:
        return self.manifest.get("metrics") or {}

    @property
    def timings(self) -> dict[str, Any]:
        return self.manifest.get("timings") or {}

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest.get("config") or {}

    def names(self, suffix: str) -> list[str]:
        """Top-level artifacts with this suffix, without it (directory artifacts excluded)."""
        return sorted(f[: -len(suffix)] for f in self.manifest.get("files", {}) if f.endswith(suffix) and "/" not in f)

    @property
    def tables(self) -> dict[str, Any]:
        return {n: self.table(n) for n in self.names(".parquet")}

    @property
    def tensors(self) -> dict[str, dict[str, Any]]:
        return {n: self.tensor_file(n) for n in self.names(".safetensors")}

    def _file(self, filename: str) -> Path:
        if filename not in self.manifest.get("files", {}):
            raise InterpError(
                f"{self.path}: no artifact {filename!r} (has: {', '.join(self.manifest.get('files', {}))})"
            )
        return self.path / check_relpath(filename)

    def dir_path(self, name: str) -> Path:
        """The directory artifact `name` (e.g. to load a SAELens SAE from it)."""
        if not any(f.startswith(name + "/") for f in self.manifest.get("files", {})):
            raise InterpError(f"{self.path}: no directory artifact {name!r}")
        return self.path / check_name(name)

    def has(self, name: str) -> bool:
        """Whether the run wrote artifact `name` (a table, tensor file or JSON, by name without extension)."""
        return any(f.split(".")[0] == name for f in self.manifest.get("files", {}))

    def table(self, name: str):
        import pandas as pd

        p = self._file(name + ".parquet")
        try:
            return pd.read_parquet(p)
        except Exception as e:  # noqa: BLE001 - any reader failure means a damaged file
            raise DamagedRun(f"{p}: unreadable parquet ({type(e).__name__}: {e})") from None

    def tensor_file(self, name: str) -> dict[str, Any]:
        from safetensors.numpy import load_file

        p = self._file(name + ".safetensors")
        try:
            return load_file(str(p))
        except Exception as e:  # noqa: BLE001
            raise DamagedRun(f"{p}: unreadable safetensors ({type(e).__name__}: {e})") from None

    def lens(self, name: str, model: Any = None):
        """The Jacobian lens written as name.pt (`RunWriter.save_lens`), read with torch.load(weights_only=True)."""
        from .lens import load_lens

        return load_lens(self._file(name + ".pt"), model=model)

    def json(self, name: str) -> Any:
        p = self._file(name + ".json")
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DamagedRun(f"{p}: invalid JSON ({e})") from None

    def jsonl(self, name: str) -> list[Any]:
        p = self._file(name + ".jsonl")
        try:
            return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line]
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DamagedRun(f"{p}: invalid JSON lines ({e})") from None

    def _repr_html_(self) -> str:
        """Status, model, headline metrics, timings, the probe's headline figure and its dashboard page."""
        from .display import run_html

        return run_html(self)


def load_run(path: Path | str, verify: bool = True) -> Run:
    """Load a run directory; DamagedRun if its manifest is invalid or a file's sha256 mismatches."""
    path = Path(path)
    manifest = read_manifest(path)
    if verify:
        verify_files(path, manifest)
    return Run(path, manifest)
