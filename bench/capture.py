"""Capture benchmarks: overhead vs a bare HF forward, streaming memory, batch scaling."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from interp import AbsMean, capture
from interp.sites import Site

from .common import Row, check, interleaved, interleaved_runs, ratio_spread


def _batches(model, batch: int, seq: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(100, model.info.d_vocab - 100, (n, batch, seq), generator=g)
    return [{"input_ids": b, "attention_mask": torch.ones_like(b)} for b in ids]


def capture_overhead(model, smoke: bool = False) -> list[Row]:
    """Every layer's MLP post, abs-mean reduced, vs the bare HF forward on the same batches."""
    batches = _batches(model, 2, 32, 1) if smoke else _batches(model, 8, 128, 2)
    sites = {Site("mlp_post", layer): [AbsMean()] for layer in range(model.info.n_layers)}

    def bare():
        with torch.no_grad():
            for b in batches:
                model.hf(**b)

    def ours():
        capture(model, batches, {s: [AbsMean()] for s in sites})

    def tl_cache():  # TransformerLens run_with_cache of every hook, for comparison
        with torch.no_grad():
            for b in batches:
                model.bridge.run_with_cache(b["input_ids"], attention_mask=b["attention_mask"])

    fns = {"bare": bare, "capture": ours}
    if getattr(model, "bridge", None) is not None:
        fns["tl_run_with_cache"] = tl_cache
    runs = interleaved_runs(fns, repeats=2 if smoke else 7)
    ratio, lo, hi = ratio_spread(runs["capture"], runs["bare"])
    rows = [Row("capture_overhead", "capture(all mlp_post, abs-mean) / bare HF forward, median of paired repeats",
                ratio, "<= 1.05", check(ratio, "<= 1.05"),
                f"spread {lo:.3f}-{hi:.3f} over {len(runs['bare'])} repeats; capture stops after the last site "
                f"(no final norm or unembedding), the bare forward computes the logits")]
    if "tl_run_with_cache" in runs:
        r, lo, hi = ratio_spread(runs["tl_run_with_cache"], runs["bare"])
        rows.append(Row("tl_run_with_cache", "TransformerLens run_with_cache(all hooks) / bare", r, "report", None,
                        f"spread {lo:.3f}-{hi:.3f}"))
    return rows


_MEM_SCRIPT = """
import json, resource, sys, torch
from interp.models import load_model
from interp import capture, AbsMean
from interp.sites import Site
n_tokens, name, seq, batch = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = load_model(name)
def batches():  # generated lazily: the stream is never held
    g = torch.Generator().manual_seed(0)
    for _ in range(n_tokens // (seq * batch)):
        ids = torch.randint(100, 40000, (batch, seq), generator=g)
        yield {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
sites = {Site("mlp_post", l): [AbsMean()] for l in range(m.info.n_layers)}
first = next(iter(batches()))
capture(m, [first], {s: [AbsMean()] for s in sites})  # warm up allocator and kernels
def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
try:  # reset the high-water mark (VmHWM) so that model loading's peak does not hide the capture's
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base, how = status_kb("VmRSS"), "VmHWM after reset"
except OSError:
    base, how = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "ru_maxrss (no reset)"
capture(m, batches(), sites)
peak = status_kb("VmHWM") if how.startswith("VmHWM") else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"base_kb": base, "peak_kb": peak, "how": how}))
"""


def streaming_memory(model=None, smoke: bool = False) -> list[Row]:
    """Peak RSS over the model (MB) of an abs-mean capture at three stream lengths, twice each in fresh processes,
    and the least-squares slope of peak on tokens with its standard error: a streamed capture's peak must not grow
    with the stream (one pair of runs once differed by -94 and +456 MB on noise; a slope over six cannot flip so)."""
    from scipy.stats import linregress

    name = model.info.name if model is not None else "smollm2-135m"
    counts, seq, batch, repeats = ((512, 1024, 2048), 64, 4, 1) if smoke else ((10_240, 51_200, 102_400), 256, 8, 2)
    xs, ys, seen = [], [], {}
    for _ in range(repeats):
        for n in counts:
            cmd = [sys.executable, "-c", _MEM_SCRIPT, str(n), name, str(seq), str(batch)]
            r = subprocess.run(cmd, capture_output=True, text=True, check=True)
            got = json.loads(r.stdout.strip().splitlines()[-1])
            mb = (got["peak_kb"] - got["base_kb"]) / 1024
            xs.append(n)
            ys.append(mb)
            seen.setdefault(n, []).append(round(mb, 1))
    fit = linregress(xs, ys)
    per_100k = fit.slope * 100_000
    return [Row("streaming_memory", "peak RSS growth per 100k streamed tokens (MB, slope over 3 lengths x "
                f"{repeats})", per_100k, "<= 100", check(per_100k, "<= 100"),
                f"+- {fit.stderr * 100_000:.1f} (stderr); peak over the model by tokens: {json.dumps(seen)}")]


def batch_scaling(model, smoke: bool = False) -> list[Row]:
    """Capture tokens/s at batch 1, 4 and 16 (the curve, relative to batch 1)."""
    seq = 8 if smoke else 128
    sites = {Site("mlp_post", layer): [AbsMean()] for layer in range(model.info.n_layers)}
    fns = {}
    for b in (1, 4, 16):
        batches = _batches(model, b, seq, max(1, 16 // b))
        fns[str(b)] = (lambda bs=batches: capture(model, bs, {s: [AbsMean()] for s in sites}))
    t = interleaved(fns, repeats=1 if smoke else 3)
    tps = {b: 16 * seq / t[b] for b in t}
    rows = [Row(f"batch_scaling_{b}", f"capture tokens/s at batch {b} / batch 1", tps[b] / tps["1"], "report", None,
                f"{tps[b]:.0f} tok/s") for b in ("1", "4", "16")]
    return rows
