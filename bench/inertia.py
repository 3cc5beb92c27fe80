"""Conversational inertia: behaviour decoding under bfloat16 autocast vs float32, and the core's in-place decoding
(`interp.generate.growing_cache`, `interp.precision.inference_autocast`) vs transformers' cache and autocast.

The probe's behaviour stage is batched greedy decoding of long multi-turn prompts (`decode.shared_prefix_greedy`),
most of its wall-clock. With `decode_dtype="auto"` it runs under bfloat16 autocast where the hardware has native
bfloat16 (CUDA, AVX512-BF16/AMX CPUs) and float32 elsewhere. Both runs decode the same DoorExplore bait prompts
(Long, N = 8); the figure is the bfloat16 seconds / the float32 seconds, and the detail says how many prompts got
the same greedy action (the colour the reply opens) and the same tokens. Where bfloat16 is not native, the row
reports the ratio without a target.

`inertia_decode_in_place` times the probe's decoding as it runs (the KV cache written in place, each frozen weight
cast once) against the same decode on transformers' `DynamicCache` (a `torch.cat` of the whole cache per step and
layer) under a plain `autocast` (every weight cast again at every call), in the probe's decode dtype; the detail
says whether both gave the same tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from interp.precision import autocast, autocast_dtype, inference_autocast, native_bf16
from interp_probes.conversational_inertia import behavior, envs
from interp_probes.conversational_inertia.decode import shared_prefix_greedy

from .common import Row, interleaved, row


def inertia_decode(model, smoke: bool = False) -> list[Row]:
    """bfloat16 decode seconds / float32 decode seconds (<= 0.8 where bfloat16 is native)."""
    count, n, max_new = (4, 2, 8) if smoke else (16, 8, 40)
    eps = envs.bait_episodes("doorexplore", "bait", count, n, 4, 4, np.random.default_rng(0))
    prompts = [behavior.request(model, e, "long", 2, 4).ids for e in eps]
    stops = behavior.stop_ids(model)
    out: dict[torch.dtype, dict] = {}

    def run(dtype: torch.dtype):
        with autocast(dtype, model.device):
            out[dtype] = shared_prefix_greedy(model, prompts, max_new, stops)

    t = interleaved({"bf16": lambda: run(torch.bfloat16), "fp32": lambda: run(torch.float32)},
                    repeats=1 if smoke else 2, device=model)
    texts = {d: [model.tokenizer.decode(out[d][tuple(p)], skip_special_tokens=True) for p in prompts] for d in out}
    acts = {d: [envs.parse_action(envs.reply_text(x, model.info.chat))[0] for x in texts[d]] for d in texts}
    same_act = sum(a == b for a, b in zip(acts[torch.bfloat16], acts[torch.float32]))
    same_tok = sum(a == b for a, b in zip(texts[torch.bfloat16], texts[torch.float32]))
    native = native_bf16(model.device)
    return [row("inertia_decode", "behaviour decode, bfloat16 autocast / float32 (time ratio)",
                t["bf16"] / t["fp32"], "<= 0.8" if native else "report",
                f"{count} DoorExplore bait prompts (Long, N = {n}, {sum(map(len, prompts)) / count:.0f} tokens) "
                f"x {max_new} new tokens; bf16 {t['bf16']:.1f}s, fp32 {t['fp32']:.1f}s; same action {same_act}/"
                f"{count}, same tokens {same_tok}/{count}; native bf16: {native}"),
            in_place_decode(model, prompts, max_new, stops, smoke)]


def in_place_decode(model, prompts, max_new: int, stops, smoke: bool) -> Row:
    """The probe's decode (in-place cache, weights cast once) / transformers' cache and per-call autocast."""
    dtype = autocast_dtype("auto", model)
    out: dict[str, dict] = {}

    def ours():
        with inference_autocast(dtype, model.hf, model.device):
            out["ours"] = shared_prefix_greedy(model, prompts, max_new, stops)

    def theirs():
        with autocast(dtype, model.device):
            out["hf"] = shared_prefix_greedy(model, prompts, max_new, stops, in_place=False)

    t = interleaved({"ours": ours, "hf": theirs}, repeats=1 if smoke else 2, device=model)
    return row("inertia_decode_in_place", "behaviour decode, in-place KV cache + weights cast once / "
               "transformers' DynamicCache + per-call autocast (time ratio)", t["ours"] / t["hf"], "<= 0.95",
               f"{len(prompts)} prompts x {max_new} new tokens in {str(dtype).removeprefix('torch.')}; ours "
               f"{t['ours']:.1f}s, transformers' {t['hf']:.1f}s; same tokens: {out['ours'] == out['hf']}")
