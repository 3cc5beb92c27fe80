"""File helpers the store and its neighbours share: atomic writes, hashing, JSON-able values, and reading a file
that may be missing or malformed with an error that says which (split from interp.store, which re-exports them)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import os
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def temp_sibling(path: Path, directory: bool = False) -> Path:
    """A new, empty temporary file (or directory) beside `path`, hidden and uniquely named, made with the process's
    umask as `open()` and `mkdir` make files (0644 / 0755 under umask 022, 0600 / 0700 under 077). Every atomic
    writer starts here: `tempfile.mkstemp` and `mkdtemp` make 0600 / 0700 whatever the umask, so a colleague or a
    dashboard running as another user could not read a shared artifacts root."""
    path = Path(path)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            if directory:
                os.mkdir(tmp, 0o777)
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary name beside {path}")  # pragma: no cover - 100 collisions


def umask_modes(tmp: Path) -> Callable[[], None]:
    """A function that gives `tmp` (a `temp_sibling`, just made) and, for a directory, everything written into it
    the mode `tmp` was made with, the umask's (files without execute bits). Call it after the writer: some
    writers make 0600 files whatever the umask (safetensors' save_file writes a private file and renames it)."""
    made = stat.S_IMODE(os.stat(tmp).st_mode) & 0o777
    file_mode = made & 0o666

    def settle() -> None:
        if not tmp.is_dir():
            os.chmod(tmp, file_mode)
            return
        for p in [tmp, *tmp.rglob("*")]:
            if p.is_symlink():
                continue
            want = made if p.is_dir() else file_mode
            if stat.S_IMODE(p.stat().st_mode) != want:
                os.chmod(p, want)

    return settle


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temporary sibling of `path` (`temp_sibling`: the umask's mode), fsync it, then
    os.replace into place."""
    path = Path(path)
    tmp = temp_sibling(path)
    settle = umask_modes(tmp)
    try:
        write(Path(tmp))
        settle()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_dir(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temporary sibling directory of `path` (`temp_sibling`: the umask's mode), then rename
    it into place; if another process filled `path` first, keep theirs (cache entries: same key, same content)."""
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path, directory=True)
    settle = umask_modes(tmp)
    try:
        write(tmp)
        settle()
        try:
            os.replace(tmp, path)
        except OSError:  # another process filled it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def jsonable(obj: Any) -> Any:
    """Plain JSON types: numpy/torch scalars to Python, non-finite floats to None."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return jsonable(obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


def read_parsed(path: Path, parse: Callable[[str], Any], malformed: type[Exception] | tuple[type[Exception], ...],
                error: Callable[[str], Exception], missing: str, invalid: Callable[[Exception], str]) -> Any:
    """`parse` of the UTF-8 text at `path`; raises `error(missing)` when there is no file, `error(invalid(e))` when
    it is not UTF-8 or `parse` raises one of `malformed`."""
    malformed = malformed if isinstance(malformed, tuple) else (malformed,)
    try:
        return parse(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(missing) from None
    except (*malformed, UnicodeDecodeError) as e:
        raise error(invalid(e)) from None
