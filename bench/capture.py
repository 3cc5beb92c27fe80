"""Capture benchmarks: overhead vs a bare HF forward, streaming memory, batch scaling."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from interp import AbsMean, capture
from interp.generate import decoding_attention
from interp.sites import Site

from .common import Row, check, interleaved, interleaved_runs, model_batches, ratio_spread, row


def _batches(model, batch: int, seq: int, n: int, seed: int = 0):
    """Random token batches on the model's device (`common.model_batches`)."""
    return model_batches(model, batch, seq, n, seed)


def capture_overhead(model, smoke: bool = False) -> list[Row]:
    """Every layer's MLP post, abs-mean reduced, vs the bare HF forward on the same batches, with SDPA attention
    (what a Hugging Face user runs; `interp.generate.decoding_attention` switches the plain model to it)."""
    batches = _batches(model, 2, 32, 1) if smoke else _batches(model, 8, 256, 1)
    sites = {Site("mlp_post", layer): [AbsMean()] for layer in range(model.info.n_layers)}

    def bare():
        with torch.no_grad(), decoding_attention(model.hf):
            for b in batches:
                model.hf(**b)

    def bare_eager():  # the attention every layer ran before `attention_on_demand` (reported, for scale)
        with torch.no_grad():
            for b in batches:
                model.hf(**b)

    def ours():
        capture(model, batches, {s: [AbsMean()] for s in sites})

    def tl_cache():  # TransformerLens run_with_cache of every hook, for comparison
        with torch.no_grad():
            for b in batches:
                model.bridge.run_with_cache(b["input_ids"], attention_mask=b["attention_mask"])

    fns = {"bare": bare, "capture": ours, "bare_eager": bare_eager}
    if getattr(model, "bridge", None) is not None:
        fns["tl_run_with_cache"] = tl_cache
    runs = interleaved_runs(fns, repeats=2 if smoke else 7, device=model)
    ratio, lo, hi = ratio_spread(runs["capture"], runs["bare"])
    rows = [Row("capture_overhead", "capture(all mlp_post, abs-mean) / bare HF SDPA forward, median of paired "
                "repeats", ratio, "<= 1.05", check(ratio, "<= 1.05"),
                f"spread {lo:.3f}-{hi:.3f} over {len(runs['bare'])} repeats; capture stops after the last site "
                f"(no final norm or unembedding), the bare forward computes the logits; attention "
                f"{model.info.attention}")]
    r, lo, hi = ratio_spread(runs["bare_eager"], runs["bare"])
    rows.append(Row("hf_eager_vs_sdpa", "bare HF eager forward / bare HF SDPA forward", r, "report", None,
                    f"spread {lo:.3f}-{hi:.3f}: what capture paid when every layer reconstructed attention eagerly"))
    if "tl_run_with_cache" in runs:
        r, lo, hi = ratio_spread(runs["tl_run_with_cache"], runs["bare"])
        rows.append(Row("tl_run_with_cache", "TransformerLens run_with_cache(all hooks) / bare", r, "report", None,
                        f"spread {lo:.3f}-{hi:.3f}"))
    return rows


_MEM_SCRIPT = """
import json, sys, torch
from interp.models import load_model
from interp import capture, AbsMean
from interp.sites import Site
n_batches, name, seq, batch = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = load_model(name)
sites = {Site("mlp_post", l): [AbsMean()] for l in range(m.info.n_layers)}
def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
def reset_hwm():  # VmHWM := VmRSS, so the next reading is the peak since now
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
points = []
def batches():  # generated lazily (the stream is never held); each request closes the previous batch's window
    g = torch.Generator().manual_seed(0)
    for i in range(n_batches):
        ids = torch.randint(100, 40000, (batch, seq), generator=g)
        if i:
            points.append([i * batch * seq, status_kb("VmHWM")])
        reset_hwm()
        yield {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    points.append([n_batches * batch * seq, status_kb("VmHWM")])
ids = torch.randint(100, 40000, (batch, seq))
first = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
capture(m, [first], {s: [AbsMean()] for s in sites})  # warm up allocator and kernels
base = status_kb("VmRSS")
capture(m, batches(), sites)
print(json.dumps({"base_kb": base, "points": points}))
"""

#: glibc keeps freed memory resident by an amount that depends on the heap's history (a process's RSS after
#: the same model load differed by 400 MB between runs); with every allocation of 64 KiB or more mapped on
#: its own, a freed tensor leaves the RSS at once and the per-batch peak follows the live tensors
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_ARENA_MAX": "2"}


def streaming_memory(model=None, smoke: bool = False) -> list[Row]:
    """Peak RSS of each batch of a streamed abs-mean capture, against the tokens streamed so far, in fresh
    processes: the least-squares slope (MB per 100k tokens) with its standard error must stay under the target,
    since a capture that streams its statistics holds nothing per token. Every batch is one point (its own
    high-water mark, reset as the next batch is drawn), so one stream gives dozens of points and no comparison
    between two processes' baselines, which once made a pair of runs read -94 and +456 MB."""
    import os
    from pathlib import Path

    from scipy.stats import linregress

    if not Path("/proc/self/clear_refs").exists():  # the per-batch high-water mark needs Linux's /proc
        return [Row("streaming_memory", "peak RSS growth per 100k streamed tokens (MB)", float("nan"), "report",
                    None, "needs Linux's /proc/self/clear_refs to reset the RSS high-water mark; skipped")]
    name = model.info.name if model is not None else "smollm2-135m"
    n_batches, seq, batch, repeats = (12, 64, 4, 1) if smoke else (14, 256, 8, 2)
    env = {**os.environ, **_MALLOC_ENV}
    xs, ys, peaks = [], [], []
    for _ in range(repeats):
        cmd = [sys.executable, "-c", _MEM_SCRIPT, str(n_batches), name, str(seq), str(batch)]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        got = json.loads(r.stdout.strip().splitlines()[-1])
        mb = [(hwm - got["base_kb"]) / 1024 for _, hwm in got["points"][1:]]  # the 1st batch sets the level
        xs += [tokens for tokens, _ in got["points"][1:]]
        ys += mb
        peaks.append([round(min(mb), 1), round(max(mb), 1)])
    fit = linregress(xs, ys)
    tokens = n_batches * seq * batch
    return [row("streaming_memory", f"peak RSS growth per 100k streamed tokens (MB; slope over {len(xs)} batch peaks, "
                f"{repeats} streams of {tokens:,} tokens)", fit.slope * 100_000, "<= 100",
                f"+- {fit.stderr * 100_000:.1f} (stderr); per-batch peak over the warm RSS, min-max per stream (MB): "
                f"{json.dumps(peaks)}")]


def batch_scaling(model, smoke: bool = False) -> list[Row]:
    """Capture tokens/s at batch 1, 4 and 16 (the curve, relative to batch 1)."""
    seq = 8 if smoke else 128
    sites = {Site("mlp_post", layer): [AbsMean()] for layer in range(model.info.n_layers)}
    fns = {}
    for b in (1, 4, 16):
        batches = _batches(model, b, seq, max(1, 16 // b))
        fns[str(b)] = (lambda bs=batches: capture(model, bs, {s: [AbsMean()] for s in sites}))
    t = interleaved(fns, repeats=1 if smoke else 3, device=model)
    tps = {b: 16 * seq / t[b] for b in t}
    rows = [Row(f"batch_scaling_{b}", f"capture tokens/s at batch {b} / batch 1", tps[b] / tps["1"], "report", None,
                f"{tps[b]:.0f} tok/s") for b in ("1", "4", "16")]
    return rows
