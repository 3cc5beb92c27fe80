"""`make bench`: every benchmark as a ratio against a baseline measured in the same run.

Prints one table (benchmark, figure, value, target, PASS/FAIL) and writes bench/results.json.
    python bench/run.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import capture as cap  # noqa: E402
from bench.common import Row  # noqa: E402

BENCHMARKS = {
    "capture_overhead": cap.capture_overhead,
    "streaming_memory": cap.streaming_memory,
    "batch_scaling": cap.batch_scaling,
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS))
    args = p.parse_args(argv)
    from interp.models import load_model

    model = load_model("smollm2-135m")
    rows: list[Row] = []
    for name in args.only or BENCHMARKS:
        print(f"... {name}", file=sys.stderr, flush=True)
        rows += BENCHMARKS[name](model)
    print(f"{'benchmark':24s} {'value':>9s}  {'target':10s} {'result':6s} figure")
    for r in rows:
        verdict = "-" if r.ok is None else ("PASS" if r.ok else "FAIL")
        print(f"{r.name:24s} {r.value:9.3f}  {r.target:10s} {verdict:6s} {r.figure}  {r.detail}")
    out = Path(__file__).resolve().parent / "results.json"
    out.write_text(json.dumps({"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                               "rows": [asdict(r) for r in rows]}, indent=1))
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
