"""Keystone scoring: one teacher-forced pass vs the paper's per-step regeneration.

Runs the probe's own equality check (`interp_probes.keystone.record.tf_check`) on the probe's first prompt,
exactly as `interp_probes.keystone.probe.run` does, but over 48 generated tokens: greedy generation with the
probe's repetition penalty and no stop token, then the mean |activation| of every neuron type recorded
both ways (per-step loop first, one pass second, each after a warm-up pass). The speed-up is timed against the
paper's own unpadded loop (growing prefixes: `tf_check(paper_loop=True)`); the error is against the check's
reference, the regeneration padded to the one pass's shape (0 by construction), with the paper loop's error, which
is rounding alone, in the detail.
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
    check = tf_check(model, gen, n, types, paper_loop=True)
    speedup = check.t_paper / check.t_tf
    cpu = check.cpu_step / max(check.cpu_tf, 1e-9)
    where = check.frame.loc[check.frame["max_rel_err"].idxmax()]
    return [
        row("keystone_scoring", f"the paper's per-step loop / one teacher-forced pass ({check.n_tokens} tokens, "
            "time ratio)", speedup, ">= 10",
            f"paper loop {check.t_paper:.2f}s, one pass {check.t_tf:.3f}s; padded regeneration {check.t_step:.2f}s "
            f"(CPU-time ratio {cpu:.1f}); {len(types)} neuron types, prompt {len(gen.prompt_ids)} tokens"),
        row("keystone_tf_error", "max relative error, one pass vs the padded per-step regeneration (mean |act| rows)",
            check.max_rel_err, "<= 1e-4", f"worst at {where['type']} layer {int(where['layer'])} "
            f"(abs {fmt(where['max_abs_err'])}); against the paper's unpadded loop {fmt(check.paper_max_rel_err)}"),
    ]
