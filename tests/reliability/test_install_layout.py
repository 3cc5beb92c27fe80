"""A real install, not its config: `pip install -e .` into a fresh venv adds the packages `interp`, `interp_probes`
and `interp_app` and no generic top-level `app` or `probes` module (issue "One probe, one folder", acceptance).

Offline and in seconds: the venv has no pip or setuptools of its own and borrows this interpreter's through a .pth
line, pip runs with --no-index --no-deps --no-build-isolation, and the install is of a copy of the checkout, so
nothing (an egg-info, a build/ folder) is written into the repository."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"interp", "interp_probes", "interp_app"}
SKIP = shutil.ignore_patterns(".git", ".venv", "venv", "artifacts", "build", "dist", "*.egg-info", "__pycache__",
                              ".pytest_cache", ".ruff_cache", ".mypy_cache")

PROBE = """
import importlib.util, json, sys
host = sys.argv[1]
sys.path[:] = [p for p in sys.path if p != host]  # only what the install put here
spec = lambda name: importlib.util.find_spec(name)
print(json.dumps({name: (s.origin if (s := spec(name)) else None) for name in sys.argv[2:]}))
"""


def test_editable_install_adds_only_the_named_packages(tmp_path):
    src, env = tmp_path / "src", tmp_path / "venv"
    shutil.copytree(ROOT, src, ignore=SKIP)
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    purelib = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True, env=clean).stdout.strip())
    host = next(p for p in site.getsitepackages() if (Path(p) / "setuptools").is_dir())
    (purelib / "zz_host.pth").write_text(host + "\n")  # pip and setuptools from this interpreter's environment
    before = set(p.name for p in purelib.iterdir())
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", "-e", str(src)], capture_output=True, text=True, cwd=tmp_path,
                          env=clean)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    added = sorted(set(p.name for p in purelib.iterdir()) - before - {"__pycache__"})

    assert not [n for n in added if n.split(".")[0] in ("app", "probes")], added
    assert all(n.startswith(("__editable__", "interp-")) for n in added), f"the install added {added}"
    finders = list(purelib.glob("__editable___*_finder.py"))
    assert len(finders) == 1, added
    mapping = {}
    exec(compile(finders[0].read_text(), str(finders[0]), "exec"), mapping)  # MAPPING: top-level name -> folder
    assert set(mapping["MAPPING"]) == PACKAGES, mapping["MAPPING"]

    names = ["app", "probes", *sorted(PACKAGES)]
    found = json.loads(subprocess.run([python, "-c", PROBE, host, *names], capture_output=True, text=True,
                                      check=True, cwd=tmp_path, env=clean).stdout)
    assert found["app"] is None and found["probes"] is None, found
    assert all(found[p] == str(src / p / "__init__.py") for p in PACKAGES), found

    dist = next(purelib.glob("interp-*.dist-info"))
    entry_points = (dist / "entry_points.txt").read_text() if (dist / "entry_points.txt").exists() else ""
    targets = [line.partition("=")[2].strip() for line in entry_points.splitlines() if "=" in line]
    assert targets and all(t.split(".")[0].split(":")[0] in PACKAGES for t in targets), targets
