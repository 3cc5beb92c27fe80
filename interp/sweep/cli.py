"""`interp sweep FILE ...`: run a sweep file and print its outcome table and the path of its sweep.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..store import default_root
from .driver import run_sweep


def format_table(record: dict[str, Any], n_metrics: int = 3) -> str:
    rows = []
    for p in record["points"]:
        varying = {k: p["overrides"].get(k) for k in record["keys"]}
        head = ", ".join(f"{k}={v}" for k, v in list(p["metrics"].items())[:n_metrics] if not isinstance(v, list))
        note = p["error"] or head
        rows.append(f"{p['index']:>4}  {p['status']:8s}  {json.dumps(varying)[:60]:60s}  {note[:100]}")
    return "\n".join(rows)



def main(args) -> int:
    """`interp sweep FILE ...`: exit 0 when every point is done or skipped, else 1."""
    record = run_sweep(args.file, out=args.out, executor=args.executor, ray_address=args.ray_address,
                   max_parallel=args.max_parallel, retry_failed=args.retry_failed, progress=not args.quiet,
                   cpus_per_point=args.cpus_per_point, gpus_per_point=args.gpus_per_point)
    print(format_table(record))
    dest = Path(args.out or default_root()) / "sweeps" / record["name"] / "sweep.json"
    print(dest)
    bad = [p for p in record["points"] if p["status"] not in ("done", "skipped")]
    return 1 if bad else 0
