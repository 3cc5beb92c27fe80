"""Record (or check) every probe's quick-config (or micro-config) metrics on an embedded model: the refactor guard.

    python tests/golden/record.py MODEL [--micro] [--check] [--probes=a,b]

writes tests/golden/quick_<MODEL>.json ({probe: {metric: value}}; with --micro the micro configs, to
micro_<MODEL>.json), or with --check compares a fresh run against it and exits 1 on any difference. The configs
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
    got = run_all(model, size, only)
    path = GOLDEN / f"{size}_{model}.json"
    if "--check" not in argv:
        path.write_text(json.dumps({"_numerics": numerics(), **got}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}")
        return 0
    want = json.loads(path.read_text())
    if why := numerics_differ(want):
        print(why)
        return 2
    want.pop("_numerics")
    bad = {}
    for p in (only or set(want) | set(got)):
        w, g = comparable(want.get(p, {})), got.get(p, {})
        bad[p] = sorted(k for k in set(w) | set(g) if w.get(k) != g.get(k))
    bad = {p: ks for p, ks in bad.items() if ks}
    print(json.dumps(bad, indent=1) if bad else "identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
