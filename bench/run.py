"""`make bench`: every benchmark as a ratio against a baseline measured in the same run.

Prints one table (benchmark, value, target, PASS/FAIL, figure) and writes bench/results.json.
    python bench/run.py [--only NAME ...]      the suite on the embedded model (<= 15 min on 2 cores)
    python bench/run.py --smoke [--only ...]   every benchmark at a toy size on the tiny random model (CI)
    python bench/run.py --markdown [FILE]      the table of bench/results.json (or FILE) as Markdown
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import math
import os
import platform
import shlex
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import capture as cap  # noqa: E402
from bench.common import Row, fmt  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
RAISED = "benchmark raised"


def _lazy(module: str, fn: str):
    """A benchmark imported when it runs (probe modules pull in their own dependencies)."""

    def run(model, smoke: bool = False):
        import importlib

        return getattr(importlib.import_module(f"bench.{module}"), fn)(model, smoke=smoke)

    run.__name__ = fn
    return run


#: name -> fn(model, smoke=False) -> list[Row]; `smoke` picks a toy size (checks, not figures)
BENCHMARKS = {
    "capture_overhead": cap.capture_overhead,
    "streaming_memory": cap.streaming_memory,
    "batch_scaling": cap.batch_scaling,
    "keystone": _lazy("keystone", "keystone_scoring"),
    "slash": _lazy("slash", "slash_hook"),
    "lockin": _lazy("lockin", "lockin_probes"),
    "inertia": _lazy("inertia", "inertia_decode"),
    "sae": _lazy("sae", "sae_training"),
    "dashboard": _lazy("dashboard", "dashboard"),
    "backend_capture": _lazy("backends", "backend_capture"),
    "patching": _lazy("patching", "patching_sweep"),
    "digest": _lazy("digest", "digest"),
    "circuits": _lazy("circuits", "circuits_graph"),
    "transcoder_buffer": _lazy("circuits", "transcoder_buffer"),
    "transcoder_quality": _lazy("circuits", "transcoder_quality"),
    "circuits_reference": _lazy("circuits", "circuits_vs_circuit_tracer"),
    "gpu": _lazy("gpu", "gpu"),
    "quick": _lazy("quick", "quick_runs"),
    "jlens": _lazy("jlens", "jlens_fit"),
}
#: Benchmarks that run only when named with --only (each longer than the default suite can hold)
OPT_IN = {"quick", "jlens"}


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("PASS" if ok else "FAIL")


def call(fn, model, smoke: bool) -> list[Row]:
    """fn(model, smoke=smoke); a benchmark without a smoke size runs as it is."""
    return fn(model, smoke=smoke) if "smoke" in inspect.signature(fn).parameters else fn(model)


def run_one(name: str, model, smoke: bool) -> tuple[list[Row], float]:
    """The benchmark's rows and its seconds; an exception becomes a FAIL row (the suite goes on)."""
    t = time.perf_counter()
    try:
        rows = call(BENCHMARKS[name], model, smoke)
    except Exception as e:  # noqa: BLE001 - reported as a failed row, the traceback on stderr
        traceback.print_exc()
        rows = [Row(name, RAISED, float("nan"), "-", False, f"{type(e).__name__}: {e}")]
    return rows, time.perf_counter() - t


def table(rows: list[dict]) -> str:
    lines = [f"{'benchmark':24s} {'value':>10s}  {'target':10s} {'result':6s} figure"]
    for r in rows:
        value = fmt(r["value"]) if r["value"] is not None else "-"
        lines.append(f"{r['name']:24s} {value:>10s}  {r['target']:10s} {verdict(r['ok']):6s} {r['figure']}"
                     + (f"  [{r['detail']}]" if r["detail"] else ""))
    return "\n".join(lines)


def markdown(results: dict) -> str:
    """The results as a Markdown table with the date, the command and the machine."""
    env = results.get("env", {})
    head = (f"Measured {results.get('date', '?')} with `{results.get('command', 'python bench/run.py')}` "
            f"on {env.get('machine', '?')} ({env.get('cpus', '?')} CPUs, torch {env.get('torch', '?')}, "
            f"{env.get('threads', '?')} threads)" + (", smoke size" if results.get("smoke") else "") + ".")
    out = [head, "", "| benchmark | figure | value | target | result | detail |", "|---|---|---:|---|---|---|"]
    for r in results["rows"]:
        value = fmt(r["value"]) if r["value"] is not None else "-"
        cells = [r["name"], r["figure"], value, r["target"], verdict(r["ok"]), r["detail"]]
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    secs = results.get("seconds")
    if secs:
        out += ["", "Seconds per benchmark: " + ", ".join(f"{k} {v:.0f}" for k, v in secs.items())
                + f" (total {sum(secs.values()):.0f})."]
    return "\n".join(out)


def env_info(model) -> dict:
    import torch

    return {"machine": platform.machine() + " " + platform.system(), "cpus": len(os.sched_getaffinity(0)),
            "threads": torch.get_num_threads(), "torch": torch.__version__, "model": model.info.name,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", choices=list(BENCHMARKS), help="run only these benchmarks")
    p.add_argument("--smoke", action="store_true", help="toy sizes on the tiny random model (checks, not figures)")
    p.add_argument("--out", type=Path, help="where to write the results (default bench/results.json; "
                   "a smoke run writes none unless asked)")
    p.add_argument("--markdown", nargs="?", const=RESULTS, type=Path, metavar="FILE",
                   help="print FILE (default bench/results.json) as a Markdown table and exit")
    args = p.parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0

    if args.smoke:
        from bench.common import tiny_model

        model = tiny_model()
    else:
        from interp.models import load_model

        model = load_model("smollm2-135m")
    rows: list[Row] = []
    seconds: dict[str, float] = {}
    for name in args.only or [n for n in BENCHMARKS if n not in OPT_IN]:
        print(f"... {name}", file=sys.stderr, flush=True)
        got, seconds[name] = run_one(name, model, args.smoke)
        rows += got
        print(f"    {name}: {seconds[name]:.1f}s", file=sys.stderr, flush=True)
    results = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python bench/run.py" + (" " + shlex.join(argv if argv is not None else sys.argv[1:])).rstrip(),
        "smoke": args.smoke,
        "env": env_info(model),
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "rows": [{**asdict(r), "value": r.value if math.isfinite(r.value) else None} for r in rows],
    }
    print(table(results["rows"]))
    print(f"total {sum(seconds.values()):.0f}s", file=sys.stderr)
    out = args.out or (None if args.smoke else RESULTS)
    if out is not None:
        # numpy scalars (a pass flag computed with numpy is numpy.bool) as plain Python values
        out.write_text(json.dumps(results, indent=1, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
    if args.smoke:  # toy sizes miss targets by design: only a benchmark that raised fails a smoke run
        return 1 if any(r.figure == RAISED for r in rows) else 0
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
