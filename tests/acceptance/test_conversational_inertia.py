"""conversational_inertia acceptance (method spec, "Acceptance on the embedded model") at the default size.

Runs the default config on smollm2-135m once and the micro config once (its 60 s budget), checks every gated
item of the spec as revised 2026-12-01 (the enrichment clause is graded, reported, not gated), writes the measured
metrics and the verdicts to artifacts/acceptance/conversational_inertia.json and fails listing every unmet check.
"""

from __future__ import annotations

import numpy as np
from acceptance import SLACK, Checks, full_run, report

BUDGET_S = 8 * 60
"""The spec's budget on the 2-core CPU with DPO off."""
MICRO_BUDGET_S = 60
"""The spec's micro budget (revised 2026-12-01)."""


def checks(run, model) -> tuple[dict[str, tuple[bool, str]], dict[str, str]]:
    """(gated checks: name -> (passed, measured), graded items: name -> measured)."""
    m = run.metrics
    g = lambda k: m.get(k, float("nan"))  # noqa: E731
    out, graded = Checks(run), {}
    check = out.check

    # 1. diagonal signature
    check("max_diag_z >= 6", g("max_diag_z") >= 6, f"{g('max_diag_z'):.2f}")
    check("n_inertia_heads >= 1", g("n_inertia_heads") >= 1, f"{g('n_inertia_heads')}")
    check("max_diag_z_control <= 0.5 max_diag_z", g("max_diag_z_control") <= 0.5 * g("max_diag_z"),
          f"{g('max_diag_z_control'):.2f} vs {0.5 * g('max_diag_z'):.2f}")
    # 2. round trends
    check("prev_assistant_share_rho >= 0.5, p < 0.05",
          g("prev_assistant_share_rho") >= 0.5 and g("prev_assistant_share_p") < 0.05,
          f"rho {g('prev_assistant_share_rho'):.3f}, p {g('prev_assistant_share_p'):.2g}")
    check("system_share_rho < 0, p < 0.05", g("system_share_rho") < 0 and g("system_share_p") < 0.05,
          f"rho {g('system_share_rho'):.3f}, p {g('system_share_p'):.2g}")
    # graded, not gated (revised 2026-12-01): per-key enrichment of earlier replies against user turns
    graded["prev_assistant_enrichment_rho vs user_enrichment_rho"] = (
        f"{g('prev_assistant_enrichment_rho'):.3f} vs {g('user_enrichment_rho'):.3f} "
        f"(p {g('prev_assistant_enrichment_p'):.2g} / {g('user_enrichment_p'):.2g})")
    graded["prev_assistant_enrichment_last vs user_enrichment_last (largest N)"] = (
        f"{g('prev_assistant_enrichment_last'):.3f} vs {g('user_enrichment_last'):.3f}")
    graded["recent_assistant_enrichment_rho"] = (
        f"{g('recent_assistant_enrichment_rho'):.3f} (p {g('recent_assistant_enrichment_p'):.2g}; "
        f"at the largest N {g('recent_assistant_enrichment_last'):.3f})")
    # 3. behaviour (DoorExplore, N = 8)
    check("bait N = 8", g("bait_n") == 8, f"{g('bait_n')}")
    check("repeat_rate_long >= 0.5", g("repeat_rate_long") >= 0.5, f"{g('repeat_rate_long'):.3f}")
    check("repeat rate rises with N (Spearman > 0)", g("repeat_rate_long_n_rho") > 0,
          f"rho {g('repeat_rate_long_n_rho'):.3f}; by N {m.get('repeat_rate_long_by_n')}")
    check("repeat_rate_long - repeat_rate_window >= 0.3", g("repeat_rate_long") - g("repeat_rate_window") >= 0.3,
          f"{g('repeat_rate_long') - g('repeat_rate_window'):.3f}")
    check("paired 95% CI of Long - Window excludes 0", g("repeat_diff_long_window_ci_low") > 0,
          f"[{g('repeat_diff_long_window_ci_low'):.3f}, {g('repeat_diff_long_window_ci_high'):.3f}]")
    check("repeat_rate_long - repeat_rate_short >= 0.10", g("repeat_rate_long") - g("repeat_rate_short") >= 0.10,
          f"{g('repeat_rate_long') - g('repeat_rate_short'):.3f}")
    check("repeat_rate_clip <= repeat_rate_long", g("repeat_rate_clip") <= g("repeat_rate_long"),
          f"{g('repeat_rate_clip'):.3f} vs {g('repeat_rate_long'):.3f}")
    for policy in ("long", "window", "last1"):
        rate = g(f"unparsed_rate_{policy}")
        check(f"unparsed_rate_{policy} <= 0.3", rate <= 0.3, f"{rate:.3f}")
    check("DoorWorld rates reported", "doorworld_repeat_rate_long" in m and "doorworld_repeat_rate_short" in m,
          f"long {g('doorworld_repeat_rate_long')}, short {g('doorworld_repeat_rate_short')}")
    # 4. CPL
    pairs = run.jsonl("cpl_pairs")
    bait = [p for p in pairs if p["env"] == "doorexplore" and p["kind"] == "bait"]
    check("n_cpl_pairs >= 10 from DoorExplore bait histories", len(bait) >= 10 and g("n_cpl_pairs") == len(pairs),
          f"{len(bait)} of {len(pairs)} pairs")
    check("every pair has chosen != rejected", all(p["chosen"] != p["rejected"] for p in pairs), f"{len(pairs)} pairs")
    same = _prompts_match_long_runs(run, pairs, model)
    full = [len(p["prompt"]) == 2 + 2 * p["N"] and p["prompt"][-1]["content"].startswith(f"Round {p['N'] + 1}.")
            for p in pairs]
    check("every prompt is the Long context of its state", all(same) and all(full) and len(same) >= len(bait),
          f"{sum(same)} of {len(same)} pairs with a behaviour run match its Long prompt's tokens; "
          f"{sum(full)} of {len(pairs)} hold all N rounds")
    # 5. invariants
    check("partition shares sum to 1 +- 1e-4", g("share_sum_max_err") <= 1e-4 and g("pattern_row_sum_max_err") <= 1e-4,
          f"{g('share_sum_max_err'):.2e}, rows {g('pattern_row_sum_max_err'):.2e}")
    shares = run.table("segment_shares")
    part = shares[shares.segment.isin(["system", "user", "prev_assistant", "self", "other"])]
    sums = part.groupby(["transcript_id", "layer"]).share.sum().to_numpy()
    check("stored shares sum to 1 per transcript and layer", np.allclose(sums, 1, atol=1e-4),
          f"max error {np.abs(sums - 1).max():.2e}")
    check("null calibration: |z| <= 3 in >= 95 of 100 structureless blocks", g("null_calibration_within_3") >= 95,
          f"{g('null_calibration_within_3')} of {g('null_calibration_n')}")
    check("constant block reports z = 0", g("null_constant_block_z") == 0, f"{g('null_constant_block_z')}")
    seconds = run.manifest["timings"].get("seconds_total", float("nan"))
    check(f"wall-clock <= {BUDGET_S * SLACK:.0f} s (budget {BUDGET_S} s x slack {SLACK:g})",
          seconds <= BUDGET_S * SLACK, f"{seconds:.0f} s")
    return out, graded


def _prompts_match_long_runs(run, pairs: list[dict], model) -> list[bool]:
    """For each pair whose state was also run under Long in the behaviour table: its prompt, rendered with
    the generation prompt, has exactly that run's context tokens."""
    from interp_probes.conversational_inertia.render import render

    rows = run.table("behavior")
    long = rows[rows.policy == "long"].set_index(["episode_id", "N"]).context_tokens.to_dict()
    out = []
    for p in pairs:
        key = (p["state_id"].rsplit("-n", 1)[0], p["N"])
        if key in long:
            r = render(model.tokenizer, p["prompt"], model.info.chat, generation_prompt=True)
            out.append(len(r) == long[key])
    return out


def test_acceptance_on_the_embedded_model(model):
    run = full_run("conversational_inertia", model)
    results, graded = checks(run, model)
    micro = full_run("conversational_inertia", model, {"size": "micro"})
    secs = micro.manifest["timings"].get("seconds_total", float("nan"))
    mm = micro.metrics
    results[f"micro wall-clock <= {MICRO_BUDGET_S * SLACK:.0f} s"] = (
        secs <= MICRO_BUDGET_S * SLACK, f"{secs:.0f} s (max_diag_z {mm.get('max_diag_z', float('nan')):.1f}, "
        f"repeat Long {mm.get('repeat_rate_long')} vs Window {mm.get('repeat_rate_window')})")
    report("conversational_inertia", run, results, graded=graded, micro_run=str(micro.path),
           micro_timings=micro.timings)
