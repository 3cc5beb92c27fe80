"""File helpers the store and its neighbours share: atomic writes, hashing, JSON-able values, and reading a file
that may be missing or malformed with an error that says which (split from interp.store, which re-exports them)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import os
import tempfile
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


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temporary sibling of `path`, fsync it, then os.replace into place."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_dir(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temporary sibling directory of `path`, then rename it into place; if another process
    filled `path` first, keep theirs (cache entries: same key, same content)."""
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        write(tmp)
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
