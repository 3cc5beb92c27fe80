"""sae_falsification acceptance (method spec, "Acceptance on the embedded model") on smollm2-135m at the default
size: the SAE gates (checks 1), detection and tokens (2), injection against the frequency-matched control (3), the
loop mechanics with the local generator and the template fallback (4), steering (5) and hygiene (6), each within
its budget. The measured metrics, timings and verdicts go to artifacts/acceptance/sae_falsification.json; the test
fails listing every unmet check. INTERP_BUDGET_SLACK multiplies the budgets on machines shared with other jobs
(the timings are always reported).
"""

from __future__ import annotations

import json
import math

from acceptance import ARTIFACTS, SLACK, Checks, full_run

from interp_probes.sae_falsification.checks import FN_FLAGS, FP_FLAGS

BUDGETS = {"sae": 10 * 60, "detection": 3 * 60, "injection": 6 * 60, "loop": 4 * 60, "steering": 3 * 60}


def checks(run) -> dict[str, tuple[bool, str]]:
    m, t, cfg = run.metrics, run.timings, run.config
    out = Checks(run)
    check, g = out.check, out.value

    for stage, budget in BUDGETS.items():
        s = t.get(f"seconds_{stage}", float("inf"))
        extra = " (SAE from cache)" if stage == "sae" and m.get("sae_from_cache") else ""
        check(f"budget: {stage} <= {budget * SLACK:.0f} s", s <= budget * SLACK, f"{s:.0f} s{extra}")
    # 1. SAE setup
    ev = g("sae_explained_variance")
    check("1: sae_explained_variance >= 0.65", ev >= 0.65, f"{ev:.3f}")
    check("1: sae_ce_recovered >= 0.7", g("sae_ce_recovered") >= 0.7,
          f"{g('sae_ce_recovered'):.3f} (clean {g('sae_ce_clean'):.3f}, sae {g('sae_ce_sae'):.3f}, "
          f"zero {g('sae_ce_zero'):.3f})")
    check("1: sae_dead_frac <= 0.3", g("sae_dead_frac") <= 0.3, f"{g('sae_dead_frac'):.4f}")
    check("1: quality on >= 8192 held-out tokens", g("sae_quality_tokens") >= 8192, f"{m.get('sae_quality_tokens')}")
    check("1: SAELens round trip <= 1e-5", g("sae_roundtrip_err") <= 1e-5, f"{g('sae_roundtrip_err'):.2e}")
    # 2. detection and tokens
    corpora = run.table("corpora")
    non = corpora[(corpora.split == "detection") & (corpora.label == "non")]
    digit_share = float(non.has_digit.mean())
    check("2: n_candidates >= 10", g("n_candidates") >= 10, f"{m.get('n_candidates')}")
    check("2: top_candidate_auc >= 0.8", g("top_candidate_auc") >= 0.8, f"{g('top_candidate_auc'):.3f}")
    check("2: top_candidate_auc > digit_oracle_auc", m.get("top_auc_beats_digit_oracle") is True,
          f"{g('top_candidate_auc'):.3f} vs {g('digit_oracle_auc'):.3f} (marker oracle {g('marker_oracle_auc'):.3f})")
    check("2: >= 30 % of non-reasoning samples hold digits", digit_share >= 0.3, f"{digit_share:.3f}")
    check("2: digit_oracle_auc <= 0.85", g("digit_oracle_auc") <= 0.85, f"{g('digit_oracle_auc'):.3f}")
    # 3. injection and control
    inj = run.table("injection")
    shape = (inj.feature.nunique(), inj.strategy.nunique(), int(inj.n.max()) if len(inj) else 0)
    check("3: 16 features x 4 strategies x 40 texts, real, control and the other payload",
          shape == (16, 4, 40) and set(inj.arm) == {"real", "control", "alt"}, f"{shape}")
    real, ctrl = g("frac_token_driven"), g("frac_token_driven_control")
    check("3: frac_token_driven >= 0.4", real >= 0.4,
          f"{real:.3f} ({m.get('n_token_driven')} token-driven, {m.get('n_partially')} partially, "
          f"{m.get('n_weakly')} weakly, {m.get('n_context_dependent')} context-dependent)")
    check("3: frac_token_driven_control <= 0.1", ctrl <= 0.1, f"{ctrl:.3f}")
    check("3: frac_token_driven - control >= 0.3", real - ctrl >= 0.3, f"{real - ctrl:.3f}")
    check("3: injected tokens inside positions 1..seq_len-1", m.get("injection_position_violations") == 0,
          f"{m.get('injection_position_violations')} violations")
    # 4. loop mechanics
    cand = run.table("candidates")
    flags_ok = all(cand[cand.kind == k][list(f)].notna().all().all() for k, f in (("FP", FP_FLAGS), ("FN", FN_FLAGS)))
    check("4: every candidate row has all validity flags of its kind", len(cand) > 0 and flags_ok,
          f"{len(cand)} rows")
    check("4: the stop rule holds", stop_rule_ok(cand, cfg), stop_detail(cand, cfg))
    check("4: >= 1 valid counterexample", g("n_candidates_valid") >= 1,
          f"{m.get('n_candidates_valid')} valid ({m.get('n_valid_fp')} FP, {m.get('n_valid_fn')} FN) of "
          f"{m.get('n_candidates_generated')}, template share {g('template_share'):.2f}")
    check("4: frac_falsified and n_genuine present", "frac_falsified" in m and "n_genuine" in m,
          f"frac_falsified {m.get('frac_falsified')}, n_genuine {m.get('n_genuine')}, "
          f"n_unresolved {m.get('n_unresolved')}")
    # 5. steering
    check("5: steer_applied_ok", m.get("steer_applied_ok") is True,
          f"acc base {g('steer_acc_base'):.3f}, best {g('steer_acc_best'):.3f}, style delta "
          f"{g('steer_style_delta'):.2f}")
    # 6. hygiene
    check("6: the hook used equals the SAE config's", m.get("sae_hook_matches_config") is True,
          f"{m.get('sae_hook_name')} vs {m.get('sae_config_hook_name')}")
    contexts = run.table("top_contexts")
    check("6: no position-0 activation in any stored context", all(a[0] == 0.0 for a in contexts.acts),
          f"{len(contexts)} contexts")
    return out


def stop_rule_ok(cand, cfg) -> bool:
    if not len(cand):
        return True
    if cand.iteration.max() > cfg["loop_max_iters"]:
        return False
    stop = cfg["loop_stop_valid"]
    for _, g in cand.groupby("feature"):
        for it in sorted(set(g.iteration)):
            done = g[g.iteration <= it]
            if (done[done.kind == "FP"].valid.sum() >= stop and done[done.kind == "FN"].valid.sum() >= stop
                    and (g.iteration > it).any()):
                return False
    return True


def stop_detail(cand, cfg) -> str:
    parts = [f"feature {f}: {int(g.iteration.max())} iter, {int(g[g.kind == 'FP'].valid.sum())} FP + "
             f"{int(g[g.kind == 'FN'].valid.sum())} FN valid" for f, g in cand.groupby("feature")]
    return "; ".join(parts) + f" (max {cfg['loop_max_iters']} iterations)"


def test_sae_falsification_acceptance(model):
    run = full_run("sae_falsification", model)
    result = checks(run)
    report = {
        "probe": "sae_falsification", "run": str(run.path), "config": run.config,
        "metrics": {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in run.metrics.items()},
        "timings": run.timings, "budget_slack": SLACK,
        "checks": {name: {"ok": ok, "measured": detail} for name, (ok, detail) in result.items()},
    }
    out = ARTIFACTS / "acceptance" / "sae_falsification.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    for name, (ok, detail) in result.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    failed = [f"{name}: {detail}" for name, (ok, detail) in result.items() if not ok]
    assert not failed, "unmet acceptance checks:\n" + "\n".join(failed)
