"""Record (or check) every probe's quick-config (or micro-config) metrics on an embedded model: the refactor guard.

    python tests/golden/record.py MODEL [--micro] [--check] [--probes=a,b]

writes tests/golden/quick_<MODEL>.json ({probe: {metric: value}}; with --micro the micro configs, to
micro_<MODEL>.json), or with --check compares a fresh run against it and exits 1 on any difference. With --probes
only those are re-recorded, into the existing file; one recorded on other float kernels than the file's carries its
own "_numerics", so each machine compares exactly what it can reproduce and skips the rest. The configs
are the probe tests' own (tests/golden/quick.py), so on smollm2-135m the suite's quick and micro runs are compared
for free (tests/reliability/test_golden.py, test_determinism.py); gemma3-270m is checked with this script.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quick import GOLDEN, comparable, numerics, numerics_differ, overrides, pin_numerics  # noqa: E402

pin_numerics()  # before torch loads


def run_all(model: str, size: str = "quick", only: list[str] | None = None) -> dict[str, dict]:
    from interp.registry import probes_available
    from interp.runner import execute, prepare
    from interp.store import load_run

    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for probe in only or sorted(probes_available()):
            try:
                spec, cfg = prepare(probe, overrides(probe, model, size))
                run = load_run(execute(spec, cfg, out=tmp, progress=False))
                out[probe] = comparable(run.metrics)
            except Exception as e:  # a probe that cannot run is recorded as its error
                out[probe] = {"error": f"{type(e).__name__}: {e}"[:300]}
            print(probe, "error" in out[probe] and out[probe]["error"] or f"{len(out[probe])} metrics", flush=True)
    return out


def main(argv: list[str]) -> int:
    model = argv[0]
    size = "micro" if "--micro" in argv else "quick"
    only = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--probes=")), None)
    path = GOLDEN / f"{size}_{model}.json"
    if "--check" in argv:
        return check(model, size, only, json.loads(path.read_text()))
    got = run_all(model, size, only)
    record = {"_numerics": numerics(), **got}
    if only and path.exists():  # re-record some probes: the others keep their values and their numerics
        record = json.loads(path.read_text())
        for p in only:
            record[p] = got[p] if record["_numerics"] == numerics() else {"_numerics": numerics(), **got[p]}
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")
    return 0


def check(model: str, size: str, only: list[str] | None, want: dict) -> int:
    """Run the probes this machine can reproduce exactly and compare: 0 identical, 1 a difference, 2 none comparable."""
    probes = only or sorted(p for p in want if not p.startswith("_"))
    runnable = [p for p in probes if not numerics_differ(want, p)]
    if skipped := [p for p in probes if p not in runnable]:
        print(f"not compared, recorded on other float kernels: {', '.join(skipped)}")
    if not runnable:
        return 2
    got = run_all(model, size, runnable)
    bad = {}
    for p in runnable:
        w, g = comparable(want.get(p, {})), got.get(p, {})
        if diff := sorted(k for k in set(w) | set(g) if w.get(k) != g.get(k)):
            bad[p] = diff
    print(json.dumps(bad, indent=1) if bad else "identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
