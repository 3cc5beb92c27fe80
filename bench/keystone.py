"""Keystone scoring: one teacher-forced pass vs the paper's per-step regeneration.

Runs the probe's own equality check (`interp_probes.keystone.record.tf_check`) on the probe's first prompt,
exactly as `interp_probes.keystone.probe.run` does, but over 48 generated tokens: greedy generation with the
probe's repetition penalty and no stop token, then the mean |activation| of every neuron type recorded
both ways (per-step loop first, one pass second, each after a warm-up pass).
"""

from __future__ import annotations

from interp_probes.keystone import KeystoneConfig
from interp_probes.keystone.data import load_prompts
from interp_probes.keystone.record import generate, tf_check

from .common import Row, fmt, row

TOKENS = 48
SMOKE_TOKENS = 8


def keystone_scoring(model, smoke: bool = False) -> list[Row]:
    """Per-step seconds / one-pass seconds for 48 tokens (>= 10) and the max relative error (<= 1e-4)."""
    n = SMOKE_TOKENS if smoke else TOKENS
    cfg = KeystoneConfig()
    types = list(cfg.neuron_types)
    prompt = load_prompts(cfg.prompt_source, cfg.n_groups)[0]
    gen = generate(model, [prompt], n, cfg.repetition_penalty, cfg.penalty_window, stop=False)[0]
    check = tf_check(model, gen, n, types)
    speedup = check.t_step / check.t_tf
    cpu = check.cpu_step / max(check.cpu_tf, 1e-9)
    where = check.frame.loc[check.frame["max_rel_err"].idxmax()]
    return [
        row("keystone_scoring", f"per-step regeneration / one teacher-forced pass ({check.n_tokens} tokens, "
            "time ratio)", speedup, ">= 10",
            f"per-step {check.t_step:.2f}s, one pass {check.t_tf:.3f}s (CPU-time ratio {cpu:.1f}); "
            f"{len(types)} neuron types, prompt {len(gen.prompt_ids)} tokens"),
        row("keystone_tf_error", "max relative error, one pass vs per-step (mean |act| rows)", check.max_rel_err,
            "<= 1e-4", f"worst at {where['type']} layer {int(where['layer'])} (abs {fmt(where['max_abs_err'])})"),
    ]
