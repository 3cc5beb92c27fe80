"""The coverage matrix: every probe's micro config, with its defaults, on a tiny random model of every family.

    python tests/models/matrix.py [--out docs/architectures.md] [--families a,b] [--probes x,y]

A cell is `ok`, a refusal before the model loads (interp.errors.Refused / ConfigError naming the probe, the
architecture and the capability), or a crash (anything else). tests/models/test_matrix.py runs it and
asserts no crash; `--out` regenerates docs/architectures.md from the results.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

#: Per-probe overrides that make the method meaningful on random weights (never to dodge a crash). keystone: at
#: the default top_p 0.005 a 256-wide MLP keeps 1 neuron per layer and type per prompt, and random weights share
#: none across the prompts on Gemma 2/3, GPT-2 and GPT-J (an empty keystone set, which the probe reports as such);
#: at 0.05 (12 per type) every family has a keystone set, so the ablation and its controls run too.
MEANINGFUL: dict[str, dict] = {"keystone": {"top_p": 0.05}}


#: Families whose cells run through the CLI (`interp run PROBE --model DIR --size micro`), the others in-process.
VIA_CLI = ("qwen2", "gpt2")


def run_cell(probe: str, model_dir: Path, out: Path, via_cli: bool = False) -> dict:
    """One cell: refused (prepare() raised InterpError before the model loaded), ok, or crash."""
    from interp.errors import InterpError
    from interp.runner import execute, prepare

    t = time.perf_counter()
    try:
        spec, cfg = prepare(probe, {"size": "micro", "model": str(model_dir), **MEANINGFUL.get(probe, {})})
    except InterpError as e:  # refused before the model loads
        why = str(e).splitlines()[0].replace(repr(str(model_dir)), "DIR").replace(str(model_dir), "DIR")
        return {"status": "refused", "why": why[:300], "s": round(time.perf_counter() - t, 1)}
    try:
        if via_cli:
            from interp.cli import main

            over = [a for k, v in MEANINGFUL.get(probe, {}).items() for a in ("--set", f"{k}={json.dumps(v)}")]
            rc = main(["run", probe, "--model", str(model_dir), "--size", "micro", "--out", str(out), "--quiet",
                       *over])
            if rc != 0:
                raise RuntimeError(f"interp run {probe} exited {rc}")
        else:
            execute(spec, cfg, out=out, progress=False)
        return {"status": "ok", "s": round(time.perf_counter() - t, 1), **({"cli": True} if via_cli else {})}
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb) if "/interp/" in f.filename
                      or "/interp_probes/" in f.filename), "")
        return {"status": "crash", "why": f"{type(e).__name__}: {e}".splitlines()[0][:300], "where": where,
                "s": round(time.perf_counter() - t, 1)}


def run_row(family: str, probes: list[str], root: Path) -> dict[str, dict]:
    """Every probe's cell on a tiny model of `family` (built under root/models)."""
    from interp.testing import tiny_family_dir

    d = root / "models" / family
    if not d.exists():
        tiny_family_dir(family, d)
    row = {}
    for probe in probes:
        row[probe] = cell = run_cell(probe, d, root / "artifacts" / family, via_cli=family in VIA_CLI)
        print(f"{family:12s} {probe:24s} {cell['status']:8s} {cell['s']:6.1f}s {cell.get('why', '')[:150]}",
              flush=True)
    return row


def run_matrix(families: list[str], probes: list[str], root: Path, workers: int = 2) -> dict[str, dict[str, dict]]:
    """The matrix, one family per task over `workers` processes of one torch thread each (tiny models are
    overhead-bound, so two single-thread processes finish about twice as fast as one with two threads)."""
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor

    if workers <= 1:
        return {fam: run_row(fam, probes, root) for fam in families}
    old = {k: os.environ.get(k) for k in ("INTERP_THREADS", "OMP_NUM_THREADS")}
    os.environ.update(INTERP_THREADS="1", OMP_NUM_THREADS="1")  # read by the workers as they start
    try:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            futures = {fam: pool.submit(run_row, fam, probes, root) for fam in families}
            return {fam: f.result() for fam, f in futures.items()}
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def markdown(results: dict[str, dict[str, dict]]) -> str:
    """docs/architectures.md from a matrix's results."""
    from interp.testing import FAMILIES

    probes = sorted({p for row in results.values() for p in row})
    cells = [c for row in results.values() for c in row.values()]
    n_ok = sum(c["status"] == "ok" for c in cells)
    lines = [
        "# Architectures",
        "",
        "Every probe's `micro` config, with its defaults, on a tiny random-weight model of each decoder family",
        "(4 layers, d_model 128, SmolLM2's tokenizer; built in-process from the family's Hugging Face config, no",
        "download). `ok`: the run finished; `refused`: it stopped before the model loaded, naming the probe, the",
        "architecture and the capability it lacks. Generated by `python tests/models/matrix.py --out",
        "docs/architectures.md`; `tests/models/test_matrix.py` runs the same matrix in `make test`.",
        "",
        f"**{n_ok} of {len(cells)} cells ok**; no cell crashes.",
        "",
        "One setting differs from the defaults, to make a method meaningful on random weights: "
        + "; ".join(f"{p} runs with " + ", ".join(f"`{k}={v}`" for k, v in o.items()) for p, o in MEANINGFUL.items())
        + " (at the default top_p 0.005 the random weights of Gemma 2/3, GPT-2 and GPT-J share no top-p neuron "
        "across the prompts, an empty keystone set that the probe reports as such).",
        "",
        "| family | " + " | ".join(probes) + " |",
        "|---|" + "---|" * len(probes),
    ]
    notes = []
    for fam, row in results.items():
        out = []
        for p in probes:
            c = row.get(p, {"status": "-"})
            if c["status"] == "ok":
                out.append("ok")
            else:
                notes.append(f"- **{fam} / {p}** ({c['status']}): {c.get('why', '')}")
                out.append(f"{c['status']} [{len(notes)}]")
        lines.append(f"| {fam} | " + " | ".join(out) + " |")
    if notes:
        lines += ["", "Notes", ""] + [f"{i + 1}. {n[2:]}" for i, n in enumerate(notes)]
    lines += ["", "Tiny-model settings per family (`interp.testing.FAMILIES`):", ""]
    lines += [f"- `{fam}`: " + ", ".join(f"{k}={v}" for k, v in FAMILIES[fam].items()) for fam in results]
    lines += ["", "## Bring your own model", "",
              "Any local directory with a `config.json` of a decoder-only causal LM, its `*.safetensors` weights and",
              "its tokenizer works as `--model DIR` (or `interp.load_model(DIR)`); the layer defaults are",
              "depth-relative (`resid_post@0.2`), so they fit any depth. What differs between families (fused q/k/v,",
              "Conv1D weights, gated or plain MLPs, parallel blocks, rotary or learned positions, logit scaling) is",
              "read by `interp.anatomy`; what a family cannot serve is refused before the weights load.", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from interp.registry import probes_available
    from interp.testing import FAMILIES

    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--probes", default=",".join(sorted(probes_available())))
    ap.add_argument("--json", default=None)
    ap.add_argument("--out", default=None, help="write the markdown table here (docs/architectures.md)")
    ap.add_argument("--workers", type=int, default=2, help="processes (one torch thread each)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        res = run_matrix(args.families.split(","), args.probes.split(","), Path(tmp), args.workers)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).write_text(markdown(res))
    crashes = [(f, p) for f, row in res.items() for p, c in row.items() if c["status"] == "crash"]
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
