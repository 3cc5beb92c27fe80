"""self_interp acceptance (method spec, "Acceptance on the embedded model", core and extended) at the default size.

Runs the default config on smollm2-135m once (core: identity, bias_only, scalar_affine and both controls on 400
topics, 100 held out; extended: scale_only, low_rank, full_rank and recall by layer), checks every gated item of
the spec as revised 2026-12-01 (recall@1, paired over the held-out topics), reports the graded ones, writes the
measured metrics and verdicts to artifacts/acceptance/self_interp.json and fails listing every unmet check.
"""

from __future__ import annotations

import json
import math

from acceptance import SLACK, Checks, full_run, report

CORE_BUDGET_S = 10 * 60
EXTENDED_BUDGET_S = 6 * 60
PARAMS = {"identity": 0, "scale_only": 1, "bias_only": 576, "scalar_affine": 577, "low_rank": 9793,
          "full_rank": 332_352}


def checks(run) -> tuple[dict[str, tuple[bool, str]], dict[str, str]]:
    """(gated checks: name -> (passed, measured), graded items: name -> measured)."""
    m, t = run.metrics, run.timings
    g = lambda k: m[k] if isinstance(m.get(k), (int, float)) else float("nan")  # noqa: E731
    out, graded = Checks(run), {}
    check = out.check

    def gain(other: str) -> tuple[float, float, float]:
        k = f"recall1_gain_vs_{other}"
        return g(k), g(f"{k}_ci_lo"), g(f"{k}_ci_hi")

    sa1, id1, sh1 = g("recall_at_1_scalar_affine"), g("recall_at_1_identity"), g("recall_at_1_shuffled")
    check("retrieval_scorer == embedding (packaged MiniLM)", m.get("retrieval_scorer") == "embedding",
          str(m.get("retrieval_scorer")))
    check("400 topics, 100 held out", m.get("n_topics") == 400 and m.get("n_heldout") == 100,
          f"{m.get('n_topics')} topics, {m.get('n_heldout')} held out ({m.get('n_train')} train, "
          f"{m.get('n_val')} val); template system turn: {run.config.get('template_system')}")
    # 1. frozen LM
    check("lm_weights_unchanged", m.get("lm_weights_unchanged") is True, str(m.get("lm_weights_unchanged")))
    check("the optimiser holds only adapter tensors", m.get("optimizer_adapter_only") is True,
          str(m.get("optimizer_adapter_only")))
    # 2. parameter counts
    check("adapter_params == 577", m.get("adapter_params") == 577, str(m.get("adapter_params")))
    for v, n in PARAMS.items():
        check(f"params_{v} == {n}", m.get(f"params_{v}") == n, str(m.get(f"params_{v}")))
    # 3. positive control
    check("recall_at_10_embed_control >= 0.4", g("recall_at_10_embed_control") >= 0.4,
          f"{g('recall_at_10_embed_control'):.3f} (recall@1 {g('recall_at_1_embed_control'):.3f}, "
          f"{m.get('n_embed_control_heldout')} held-out single-token topics)")
    # 4. topic vectors, recall@1 paired over the held-out topics
    check("chance at 1 = 1/400", abs(g("recall_chance_at_1") - 1 / 400) < 1e-12, f"{g('recall_chance_at_1'):.4f}")
    check("recall_at_1_scalar_affine >= 0.10", sa1 >= 0.10, f"{sa1:.3f}")
    for other, base in (("identity", id1), ("shuffled", sh1)):
        d, lo, hi = gain(other)
        check(f"recall_at_1_scalar_affine - recall_at_1_{other} >= 0.08", d >= 0.08 and abs(d - (sa1 - base)) < 1e-9,
              f"{sa1:.3f} - {base:.3f} = {d:+.3f}" + (f" (identity at s* = {g('identity_best_scale'):.3g})"
                                                     if other == "identity" else ""))
        check(f"paired 95% bootstrap interval of the gain over {other} excludes 0", lo > 0,
              f"[{lo:+.3f}, {hi:+.3f}]")
    # 5. shuffled control against the untrained injection
    check("recall_at_1_shuffled <= recall_at_1_identity + 0.05", sh1 <= id1 + 0.05, f"{sh1:.3f} vs {id1:.3f} + 0.05")
    # 5b. the logit-lens baseline, beside every variant (graded, not gated)
    ll1, ll10 = g("recall_at_1_logit_lens"), g("recall_at_10_logit_lens")
    check("logit-lens baseline reported", math.isfinite(ll1) and math.isfinite(ll10), f"@1 {ll1:.3f}, @10 {ll10:.3f}")
    graded["self-interpretation margin at 1 (scalar_affine - logit lens)"] = (
        f"{sa1 - ll1:+.3f} ({sa1:.3f} vs {ll1:.3f}; at 10 {g('self_interp_margin_at_10'):+.3f})")
    rec = run.table("recall")
    main = rec[(rec.layer == m["layer"]) & (rec.split == "heldout")]
    check("logit lens beside every variant in recall.parquet", "logit_lens" in set(main.variant)
          and set(PARAMS) <= set(main.variant), ", ".join(sorted(set(main.variant))))
    # 6. prefix cache
    check("|loss_cached - loss_uncached| <= 1e-4", g("prefix_cache_loss_diff") <= 1e-4,
          f"{g('prefix_cache_loss_diff'):.2e}")
    # every recall@10 with its interval; the lexical rescoring beside the embedding scorer
    at10 = rec[(rec.layer == m["layer"]) & (rec.split == "heldout") & (rec.k == 10)]
    check("every recall@10 reported with its interval", len(at10) >= len(PARAMS) + 3
          and at10[["ci_low", "ci_high"]].notna().all().all(),
          "; ".join(f"{r.variant} {r.recall:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}]" for r in at10.itertuples()))
    lex = {v: g(f"recall_at_1_{v}_lexical") for v in [*PARAMS, "shuffled", "embed_control"]}
    check("lexical rescoring reported (recall_at_1_<variant>_lexical)", all(math.isfinite(x) for x in lex.values()),
          ", ".join(f"{v} {x:.3f}" for v, x in lex.items()))
    # 7. extended: every recall metric and recall by layer
    missing = [f"recall_at_{k}_{v}" for v in PARAMS for k in (1, 10) if not math.isfinite(g(f"recall_at_{k}_{v}"))]
    check("all recall metrics present", not missing, ", ".join(missing) or "all 12")
    by_layer = m.get("recall_at_1_by_layer") or {}
    layers = sorted(int(x) for x in (by_layer.get("scalar_affine") or {}))
    check("recall by layer over [12, 18, 24, 27] (adapter, identity, logit lens)",
          layers == [12, 18, 24, 27] and all(len(by_layer.get(v) or {}) == 4 for v in ("identity", "logit_lens")),
          "recall@1 " + json.dumps(by_layer))
    # 8. overfitting gap by adapter size (graded, not gated)
    gaps = {v: g(f"train_minus_heldout_recall1_{v}") for v in PARAMS if v != "identity"}
    check("train_minus_heldout_recall1_<variant> reported for every trained variant",
          all(math.isfinite(x) for x in gaps.values()), ", ".join(f"{v} {x:+.3f}" for v, x in gaps.items()))
    graded["overfitting gap grows with size (full_rank above scalar_affine)"] = (
        f"{'yes' if gaps['full_rank'] > gaps['scalar_affine'] else 'no'}: full_rank {gaps['full_rank']:+.3f} "
        f"(train {g('train_recall_at_1_full_rank'):.3f}, held out {g('recall_at_1_full_rank'):.3f}) vs scalar_affine "
        f"{gaps['scalar_affine']:+.3f}")
    # 9. bias share (graded, not gated)
    ident10, sa10 = g("recall_at_10_identity"), g("recall_at_10_scalar_affine")
    check("bias_share reported", "bias_share" in m, str(m.get("bias_share")))
    den = sa10 - ident10
    graded["bias_share >= 0.5 when the denominator >= 0.05"] = (
        f"{m.get('bias_share')} (denominator {den:.3f}"
        + (f"; {'met' if g('bias_share') >= 0.5 else 'not met'}" if den >= 0.05 else "; not applicable") + ")")
    # budgets
    core, ext = t.get("core_s", float("nan")), t.get("extended_s", float("nan"))
    check(f"core wall-clock <= {CORE_BUDGET_S * SLACK:.0f} s", core <= CORE_BUDGET_S * SLACK, f"{core:.0f} s")
    check(f"extended wall-clock <= {EXTENDED_BUDGET_S * SLACK:.0f} s", ext <= EXTENDED_BUDGET_S * SLACK,
          f"{ext:.0f} s")
    return out, graded


def test_acceptance_on_the_embedded_model(model):
    run = full_run("self_interp", model)
    results, graded = checks(run)
    report("self_interp", run, results, graded=graded)
