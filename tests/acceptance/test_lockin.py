"""lockin acceptance (method spec, "Acceptance on the embedded model": A synthetic, B setup, C smoke grid)
at the default size on smollm2-135m.

Runs the default config once, checks every gated item, writes the measured metrics, the graded findings
and the verdicts to artifacts/acceptance/lockin.json and fails listing every unmet check. The graded
findings (hypotheses of a paper that was not found) are reported, never gated.
"""

from __future__ import annotations

import math

from acceptance import SLACK, Checks, full_run, report

BUDGET_A_S, BUDGET_B_S, BUDGET_C_S = 60, 3 * 60, 8 * 60


def checks(run) -> dict[str, tuple[bool, str]]:
    m, t = run.metrics, run.timings
    out = Checks(run)
    check, g = out.check, out.value

    # A. synthetic ground truth
    check("A: Lanczos recovers the stiff subspace (max angle <= 1 deg)", g("synthetic_stiff_max_angle_deg") <= 1,
          f"{g('synthetic_stiff_max_angle_deg'):.2e} deg")
    check("A: collapse_r2 >= 0.95 (3 lr runs)", g("synthetic_collapse_r2") >= 0.95, f"{g('synthetic_collapse_r2'):.4f}")
    check("A: curvature_drift_spearman >= 0.9", g("synthetic_curvature_drift_spearman") >= 0.9,
          f"{g('synthetic_curvature_drift_spearman'):.3f}")
    check("A: drift_norm_spearman <= 0.5", g("synthetic_drift_norm_spearman") <= 0.5,
          f"{g('synthetic_drift_norm_spearman'):.3f}")
    check("A: harm_signal_spearman >= 0.9", g("synthetic_harm_signal_spearman") >= 0.9,
          f"{g('synthetic_harm_signal_spearman'):.3f} (random frame {g('synthetic_harm_signal_random_spearman'):.3f})")
    check("A: projection_run_below_curve", m.get("synthetic_projection_run_below_curve") is True,
          f"{m.get('synthetic_projection_run_below_curve')}")
    check("A: bifurcation detected for the switch run", m.get("synthetic_bifurcation_detected") is True,
          f"{m.get('synthetic_bifurcation_detected')}")
    check("A: no bifurcation in the learning-rate runs (control)", m.get("synthetic_bifurcation_detected_control")
          is False, f"{m.get('synthetic_bifurcation_detected_control')}")
    check(f"A: wall-clock <= {BUDGET_A_S * SLACK:.0f} s", t.get("synthetic_s", math.inf) <= BUDGET_A_S * SLACK,
          f"{t.get('synthetic_s')} s")
    # B. setup on the embedded model
    check("B: hvp_fd_rel_err <= 1e-2", g("hvp_fd_rel_err") <= 1e-2,
          f"{g('hvp_fd_rel_err'):.2e} at eps {g('hvp_fd_eps'):.3g} (eps 1e-3: {g('hvp_fd_rel_err_abs_eps'):.2e})")
    check("B: Lanczos and power iteration agree on lambda_1 within 5%", g("lanczos_power_rel_diff") <= 0.05,
          f"{g('lambda_1'):.4g} vs {g('lambda_1_power'):.4g} ({g('lanczos_power_rel_diff'):.2e})")
    check("B: GGN PSD check", m.get("psd_check_passed") is True, f"min Rayleigh quotient {g('psd_min_rayleigh'):.3g}")
    check("B: cached logits equal the full forward within 1e-4", g("cache_max_abs_diff") <= 1e-4,
          f"{g('cache_max_abs_diff'):.2e}")
    setup = sum(t.get(k, math.inf) for k in ("cache_s", "stiff_setup_s", "checks_s"))
    check(f"B: wall-clock <= {BUDGET_B_S * SLACK:.0f} s", setup <= BUDGET_B_S * SLACK,
          f"{setup:.0f} s (cache {t.get('cache_s')}, Lanczos {t.get('stiff_setup_s')}, checks {t.get('checks_s')}; "
          f"{t.get('n_cached_tokens')} tokens cached)")
    # C. smoke grid
    check("C: 7 runs x 150 steps", g("n_runs") == 7 and run.config["steps"] == 150, f"{g('n_runs')} runs")
    check("C: rate_ratio >= 2", g("rate_ratio") >= 2, f"{g('rate_ratio'):.2f}")
    check("C: projection run max rho <= 1e-6", g("projection_max_rho") <= 1e-6, f"{g('projection_max_rho'):.2e}")
    t50, u, b = m.get("t_u50_by_run", {}), m.get("final_u_by_run", {}), m.get("final_b_by_run", {})
    for rid in ("full_lr1e-4", "full_lr3e-4"):
        reached = t50.get(rid) is not None and math.isfinite(t50[rid])
        check(f"C: {rid} reaches u >= 0.5", reached, f"t_u50 {t50.get(rid)}, final u {u.get(rid)}")
    check("C: b > 0 at the end of the lr 3e-4 run", (b.get("full_lr3e-4") or -1) > 0, f"{b.get('full_lr3e-4')}")
    ratio = t.get("probe_overhead_ratio", math.inf)
    check("C: probe_overhead_ratio <= 2.0", ratio <= 2.0,
          f"{ratio} ({t.get('overhead_on_s')} s on / {t.get('overhead_off_s')} s off)")
    grid_s = sum(v for k, v in t.items() if k.startswith("run_s_")) + t.get("overhead_on_s", 0) + t.get(
        "overhead_off_s", 0)
    check(f"C: wall-clock <= {BUDGET_C_S * SLACK:.0f} s", grid_s <= BUDGET_C_S * SLACK, f"{grid_s:.0f} s")
    check("reconstruction stated in the manifest", m.get("reconstruction") == "paper not found; project reconstruction",
          f"{m.get('reconstruction')!r}")
    check("shared model weights unchanged", m.get("lm_weights_unchanged") is True, f"{m.get('lm_weights_unchanged')}")
    return out


def graded(run) -> dict[str, object]:
    m = run.metrics
    d = (m.get("curvature_drift_spearman") or float("nan")) - (m.get("drift_norm_spearman") or float("nan"))
    return {
        "collapse_r2 (expected >= 0.7)": m.get("collapse_r2"),
        "collapse_rel": m.get("collapse_rel"),
        "curvature_drift_spearman - drift_norm_spearman": d,
        "curvature_drift_spearman": m.get("curvature_drift_spearman"),
        "drift_norm_spearman": m.get("drift_norm_spearman"),
        "harm_signal_spearman": m.get("harm_signal_spearman"),
        "harm_signal_random_spearman": m.get("harm_signal_random_spearman"),
        "stiff_share_early_spearman": m.get("stiff_share_early_spearman"),
        "projection_run_below_curve": m.get("projection_run_below_curve"),
        "bifurcation_detected": m.get("bifurcation_detected"),
    }


def test_acceptance_on_the_embedded_model(model):
    run = full_run("lockin", model)
    report("lockin", run, checks(run), graded=graded(run))
