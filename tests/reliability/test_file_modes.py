"""Files honour the umask: a run directory's artifacts and manifest, and cache files, are created with the process's
umask (0644 under 022, 0600 under 077), still written atomically (tempfile.mkstemp made 0600 whatever the umask)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path

    os.umask(int(sys.argv[1], 8))
    root, cache = Path(sys.argv[2]), Path(sys.argv[3])
    os.environ["INTERP_CACHE"] = str(cache)

    import numpy as np
    import torch
    from safetensors.numpy import save_file

    from interp._files import atomic_dir, atomic_write_text
    from interp.models.load import _weights_sha256
    from interp.sae.io import save_density
    from interp.store import RunWriter

    w = RunWriter.create(root, "logit_lens", {"a": 1}, "ab12cd34ef", 0)
    w.save_tensors("t", {"x": np.zeros(3, dtype=np.float32)})
    w.save_table("tab", {"a": [1, 2]})
    w.save_json("j", {"b": 2})
    w.save_jsonl("rows", [{"c": 3}])
    w.save_dir("sae", lambda d: (d / "cfg.json").write_text("{}"))
    w.finish()

    weights = root / "weights"
    weights.mkdir()
    save_file({"w": np.ones(2, dtype=np.float32)}, str(weights / "model.safetensors"))
    _weights_sha256(weights)                                                # the weights-hash cache
    entry = cache / "saes" / "entry"
    atomic_dir(entry, lambda d: (d / "cfg.json").write_text("{}"))          # a cache entry (SAEs, transcoders)
    save_density(entry, torch.full((4,), 0.5))                              # its sparsity file
    atomic_write_text(cache / "note.json", "{}")
    print(json.dumps({"run": str(w.path)}))
""")


def _modes(tmp_path: Path, umask: str) -> tuple[Path, Path, dict[str, int]]:
    root, cache = tmp_path / f"out{umask}", tmp_path / f"cache{umask}"
    r = subprocess.run([sys.executable, "-c", SCRIPT, umask, str(root), str(cache)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    run = Path(json.loads(r.stdout.strip().splitlines()[-1])["run"])
    modes = {}
    for base in (run, cache):
        for p in [base, *base.rglob("*")]:
            modes[str(p)] = stat.S_IMODE(p.stat().st_mode)
    return run, cache, modes


@pytest.mark.parametrize("umask,file_mode,dir_mode", [("022", 0o644, 0o755), ("077", 0o600, 0o700)])
def test_artifacts_manifests_and_caches_follow_the_umask(tmp_path, umask, file_mode, dir_mode):
    run, cache, modes = _modes(tmp_path, umask)
    files = {p: m for p, m in modes.items() if os.path.isfile(p)}
    dirs = {p: m for p, m in modes.items() if os.path.isdir(p)}
    names = {os.path.relpath(p, run) for p in files if p.startswith(str(run))}
    assert {"manifest.json", "t.safetensors", "tab.parquet", "j.json", "rows.jsonl", "sae/cfg.json"} <= names, names
    cached = {os.path.relpath(p, cache) for p in files if p.startswith(str(cache))}
    assert {"saes/entry/cfg.json", "saes/entry/sparsity.safetensors", "note.json"} <= cached, cached
    assert any(n.startswith("hashes/") for n in cached), cached
    wrong = {p: oct(m) for p, m in files.items() if m != file_mode}
    assert not wrong, f"umask {umask}: files not {oct(file_mode)}: {wrong}"
    wrong = {p: oct(m) for p, m in dirs.items() if m != dir_mode}
    assert not wrong, f"umask {umask}: directories not {oct(dir_mode)}: {wrong}"
    assert not [p for p in modes if p.endswith(".tmp")], "a temporary file was left behind"


def test_temp_siblings_are_unique_hidden_and_umask_moded(tmp_path):
    from interp._files import temp_sibling

    old = os.umask(0o027)
    try:
        a, b = temp_sibling(tmp_path / "x.json"), temp_sibling(tmp_path / "x.json")
        d = temp_sibling(tmp_path / "dir", directory=True)
    finally:
        os.umask(old)
    assert a != b and a.name.startswith(".x.json.") and a.name.endswith(".tmp") and a.parent == tmp_path
    assert a.is_file() and a.stat().st_size == 0 and d.is_dir()
    assert stat.S_IMODE(a.stat().st_mode) == 0o640 and stat.S_IMODE(d.stat().st_mode) == 0o750
