"""graph_sawtooth acceptance (method spec, "Acceptance on the embedded model") at the default size.

Runs the default config on smollm2-135m once, checks every item, writes the measured metrics and the
verdicts to artifacts/acceptance/graph_sawtooth.json and fails listing every unmet check. Check 5 (the
graded downstream effect) is reported, not gated, as the spec says for a 135M model.
"""

from __future__ import annotations

import math

from acceptance import SLACK, full_run, report

BUDGET_S = 8 * 60
"""The spec's budget on the 2-core CPU."""


def checks(run) -> tuple[dict[str, tuple[bool, str]], dict[str, tuple[bool, str]]]:
    """(gated checks, reported-only checks): name -> (passed, measured)."""
    m = run.metrics
    g = lambda k: m.get(k, float("nan"))  # noqa: E731
    gated: dict[str, tuple[bool, str]] = {}
    reported: dict[str, tuple[bool, str]] = {}

    def check(name, ok, detail, into=gated):
        into[name] = (bool(ok), detail)

    # 1. exact invariants
    check("slash_rows_sum_max_err <= 1e-5", g("slash_rows_sum_max_err") <= 1e-5,
          f"{g('slash_rows_sum_max_err'):.2e} over {m.get('slash_rows_checked')} rows")
    check("sink ratio error <= 1e-6", g("slash_sink_ratio_max_err") <= 1e-6, f"{g('slash_sink_ratio_max_err'):.2e}")
    check("non-sink ratio spread <= 1e-5", g("slash_nonsink_ratio_max_err") <= 1e-5,
          f"relative {g('slash_nonsink_ratio_max_err'):.2e} (absolute {g('slash_nonsink_ratio_max_abs_err'):.2e})")
    check("pattern_edit_reaches_z", m.get("pattern_edit_reaches_z") is True,
          f"z change {g('pattern_edit_z_change'):.3g}, |z - p'V| {g('pattern_edit_z_match_err'):.2e}")
    check("gamma = 1 reproduces the base logits (max |dlogit| <= 1e-5)", g("slash_gamma1_max_dlogit") <= 1e-5,
          f"{g('slash_gamma1_max_dlogit'):.2e}")
    # 2. sawtooth against the null
    gap = max(0.05, 3 * g("null_concentration_sd"))
    check("best_layer_concentration >= null_concentration + max(0.05, 3 sd)",
          g("best_layer_concentration") >= g("null_concentration") + gap,
          f"{g('best_layer_concentration'):.3f} vs {g('null_concentration'):.3f} + {gap:.3f}")
    thr = max(0.05, g("auc_excess_q95"))
    check("best_layer_auc - null_auc >= max(0.05, auc_excess_q95)", g("best_layer_auc") - g("null_auc") >= thr,
          f"{g('best_layer_auc') - g('null_auc'):+.3f} at l*=L{m.get('best_layer')} (AUC {g('best_layer_auc'):.3f} "
          f"vs null {g('null_auc'):.3f} sd {g('null_auc_sd'):.3f}) vs {thr:.3f}")
    check("best_layer_auc_distmatched >= 0.55 at l*", g("best_layer_auc_distmatched") >= 0.55,
          f"{g('best_layer_auc_distmatched'):.3f}")
    check("locality_auc reported", math.isfinite(g("locality_auc")), f"{g('locality_auc'):.3f}")
    # 3. sink
    check("sink_mass_mean >= 0.25", g("sink_mass_mean") >= 0.25, f"{g('sink_mass_mean'):.3f}")
    check("max sink mass over layers >= 0.5", g("sink_mass_max") >= 0.5,
          f"{g('sink_mass_max'):.3f} at L{m.get('sink_mass_max_layer')}")
    # 4. selection well-formed
    S = str(m.get("selected_layers", ""))
    try:
        layers = [int(x) for x in S.split(",")]
    except ValueError:
        layers = []
    n_layers = len(run.table("layer_scores"))
    check("S non-empty and selected_layers parses", bool(layers) and all(0 <= x < n_layers for x in layers)
          and layers == sorted(set(layers)), f"S = {S!r}")
    fb = m.get("selection_fallback")
    check("selection_fallback recorded", isinstance(fb, bool), f"{fb}")
    seconds = run.timings.get("seconds_total", float("nan"))
    check(f"wall-clock <= {BUDGET_S * SLACK:.0f} s (budget {BUDGET_S} s x slack {SLACK:g})",
          seconds <= BUDGET_S * SLACK, f"{seconds:.0f} s")
    # 5. graded downstream effect: reported, not gated on a 135M model
    check("acc_slash >= acc_base - 0.01", g("acc_slash") >= g("acc_base") - 0.01,
          f"{g('acc_slash'):.3f} vs base {g('acc_base'):.3f} (gamma_best {m.get('gamma_best')})", reported)
    check("acc_slash - acc_random_layers with bootstrap CI", True,
          f"{g('acc_slash_minus_random'):+.3f} [{g('acc_slash_minus_random_ci_lo'):+.3f}, "
          f"{g('acc_slash_minus_random_ci_hi'):+.3f}] (random {g('acc_random_layers'):.3f})", reported)
    check("ppl_ratio_nongraph <= 1.05", g("ppl_ratio_nongraph") <= 1.05,
          f"{g('ppl_ratio_nongraph'):.4f} at gamma {m.get('gamma_controls')}", reported)
    if m.get("curve_best_gamma") is not None:  # graded: the gamma curve (gamma_curve.parquet)
        check("curve: best SLASH accuracy gain over base > 0", g("curve_best_acc_gain") > 0,
              f"{g('curve_best_acc_gain'):+.3f} at gamma {m.get('curve_best_gamma')} (95 % CI of that accuracy "
              f"{g('curve_best_acc_ci_lo'):.3f} .. {g('curve_best_acc_ci_hi'):.3f}); max |mean margin change| "
              f"{g('curve_max_abs_margin_change_slash'):.3f} on S vs {g('curve_max_abs_margin_change_random'):.3f} "
              "on random layers", reported)
    return gated, reported


def test_acceptance_on_the_embedded_model(model):
    run = full_run("graph_sawtooth", model, {"gamma_curve": True})  # the graded gamma study rides along
    gated, reported = checks(run)
    report("graph_sawtooth", run, gated, reported=reported)
