"""pyproject's lowest transformers runs every probe: each micro config, in one subprocess, on the embedded SmolLM2
in bfloat16 (the GPU's default dtype; the suite's other micro runs are float32: this is where bf16 stays green).

The venv holds the newest transformers, so a field or argument that only newer releases have (self_interp read
`outputs.cache`, which 5.24 added; 5.17 names it `past_key_values`) passes every other test. Here the lowest
declared release is installed with `pip --no-deps --target` into a cache keyed by version (reruns skip the
install) and put first on PYTHONPATH; the rest of the stack is the venv's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import sys, time, transformers
    print("TRANSFORMERS", transformers.__version__, transformers.__file__, flush=True)
    from interp.models import load_model
    from interp.registry import probes_available
    from interp.runner import execute, prepare
    model = load_model("smollm2-135m", device="cpu", dtype="bfloat16")  # loaded once, shared by every probe
    failed = []
    for name in sorted(probes_available()):
        t = time.perf_counter()
        try:
            spec, cfg = prepare(name, {"size": "micro", "model": "smollm2-135m", "dtype": "bfloat16"})
            execute(spec, cfg, out=sys.argv[1], model=model, progress=False)
            print("OK", name, f"{time.perf_counter() - t:.1f}s", flush=True)
        except Exception as e:  # reported, then the run fails below
            failed.append(name)
            print("FAIL", name, type(e).__name__, str(e)[:300], flush=True)
    sys.exit(1 if failed else 0)
''')


def lowest_transformers() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r'"transformers>=([0-9.]+)', text)
    assert m, "pyproject declares no lower bound for transformers"
    return m.group(1)


def installed(version: str) -> Path:
    """transformers==version in the cache (installed once, with --no-deps); skips if PyPI is unreachable. A folder
    left by an interrupted install is removed first; only a finished one (renamed into place) is reused."""
    cache = Path(os.environ.get("INTERP_CACHE") or Path.home() / ".cache" / "interp") / "compat"
    target = cache / f"transformers-{version}"
    if any(target.glob("transformers-*.dist-info")):
        return target
    tmp = cache / f".transformers-{version}.partial"
    for stale in (tmp, target):
        shutil.rmtree(stale, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "PIP_NO_INDEX")}
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp),
                           f"transformers=={version}"], capture_output=True, text=True, timeout=300, env=env)
    if proc.returncode != 0:
        err = proc.stderr + proc.stdout
        if re.search(r"(?i)connection|resolve|network|unreachable|timed out", err):
            pytest.skip(f"PyPI unreachable, cannot install transformers=={version}: {err.strip()[-200:]}")
        raise AssertionError(f"pip install transformers=={version} failed:\n{err[-2000:]}")
    tmp.rename(target)
    return target


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_probe_micro_on_lowest_transformers(tmp_path):
    version = lowest_transformers()
    site = installed(version)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          timeout=540, env=env, cwd=ROOT)
    out = proc.stdout + proc.stderr
    got = re.search(r"^TRANSFORMERS (\S+) (\S+)", proc.stdout, re.M)
    assert got and Version(got.group(1)) == Version(version) and got.group(2).startswith(str(site)), \
        f"the subprocess did not import transformers {version} from {site}:\n{out[-3000:]}"
    assert proc.returncode == 0, f"probes failed on transformers {version}:\n{out[-6000:]}"
