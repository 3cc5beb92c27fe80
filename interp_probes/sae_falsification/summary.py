"""sae_falsification's per-feature table and run metrics from the detection, injection, loop and steering results
(split from probe.py)."""

from __future__ import annotations

import pandas as pd

from .steering import summarize_steering

DRIVEN = ("token_driven", "partially")


def make_generator_name(cfg) -> str:
    return cfg.generator


def features_frame(det, candidates, tokens, per_feature, loop_feats, analysed, cfg) -> pd.DataFrame:
    by = det.set_index("feature")
    loop_by = {lf.feature: lf for lf in loop_feats}
    rows = []
    for f in candidates:
        ft = tokens[f]
        r = {"feature": f, "rank": int(by["rank"][f]), "d": float(by.d[f]), "auc": float(by.auc[f]),
             "auc_arith_vs_narrative": float(by.auc_arith_vs_narrative[f]),
             "mean_r": float(by.mean_r[f]), "mean_n": float(by.mean_n[f]), "concentration": ft.concentration,
             "entropy": ft.entropy, "token_dependent": ft.concentration > cfg.conc_threshold,
             "analysed": f in analysed}
        pf = per_feature.get(f, {})
        for k in ("best_strategy", "best_d", "best_p", "class", "transfer", "control_best_strategy",
                  "control_best_d", "control_best_p", "control_class", "control_transfer", "alt_best_strategy",
                  "alt_best_d", "alt_best_p", "alt_class", "alt_transfer"):
            r[k] = pf.get(k)
        lf = loop_by.get(f)
        if lf is not None:
            falsified = lf.n_valid_fp + lf.n_valid_fn > 0
            r.update(loop_status="forced" if lf.forced else "analysed", n_valid_fp=lf.n_valid_fp,
                     n_valid_fn=lf.n_valid_fn, iterations=lf.iterations, falsified=falsified,
                     judge_genuine=lf.judge_genuine, hypothesis=lf.hypothesis, tau_ref=lf.tau_ref)
        else:
            status = "not_analysed" if f not in analysed else (
                "token_driven" if pf.get("best_d", 0) >= 0.5 else "not_reached")
            r.update(loop_status=status, n_valid_fp=0, n_valid_fn=0, iterations=0, falsified=False,
                     judge_genuine=None, hypothesis=None, tau_ref=None)
        not_token = f in analysed and not (pf.get("best_d", 0) >= 0.5)
        judged = r["judge_genuine"] is True if cfg_judge(cfg) else True
        r["genuine"] = bool(lf is not None and not_token and not r["falsified"] and judged)
        rows.append(r)
    return pd.DataFrame(rows)


def cfg_judge(cfg) -> bool:
    return cfg.generator == "openai" and cfg.use_judge


def summarize(cfg, det, candidates, unfiltered, features, loop, oracles, violations, site, sae, steering,
              steer_checks, generator) -> dict:
    ana = features[features.analysed] if len(features) else features
    n_ana = len(ana)
    frac = lambda mask: float(mask.sum()) / n_ana if n_ana else None  # noqa: E731
    cls, ccls = ana["class"] if n_ana else pd.Series(dtype=str), ana["control_class"] if n_ana else pd.Series(
        dtype=str)
    acls = ana["alt_class"] if n_ana else pd.Series(dtype=str)
    loop_rows = features[features.loop_status.isin(["analysed", "forced"])] if len(features) else features
    cand = loop.candidates
    top_auc = float(det.set_index("feature").auc[candidates[0]]) if candidates else None
    m = {
        "n_candidates": int(det.passed.sum()),
        "n_candidates_kept": len(candidates),
        "candidates_unfiltered": unfiltered,
        **oracles,
        "top_candidate_auc": top_auc,
        "top_auc_beats_digit_oracle": bool(top_auc is not None and top_auc > oracles["digit_oracle_auc"]),
        "top_auc_beats_marker_oracle": bool(top_auc is not None and top_auc > oracles["marker_oracle_auc"]),
        "n_analysed_injection": n_ana,
        "frac_token_driven": frac(cls.isin(DRIVEN)),
        "frac_token_driven_control": frac(ccls.isin(DRIVEN)),
        # the same classes under both payload rules (the configured one is frac_token_driven)
        f"frac_token_driven_{cfg.injection_payload}_payload": frac(cls.isin(DRIVEN)),
        f"frac_token_driven_{'top' if cfg.injection_payload == 'reference' else 'reference'}_payload":
            frac(acls.isin(DRIVEN)),
        "frac_token_driven_strong": frac(cls == "token_driven"),
        "frac_token_driven_control_strong": frac(ccls == "token_driven"),
        "frac_token_driven_transfer": frac(cls.isin(DRIVEN) & (ana.transfer.astype(float) >= 0.5)) if n_ana else None,
        "frac_token_driven_transfer_control": frac(ccls.isin(DRIVEN) & (ana.control_transfer.astype(float) >= 0.5))
        if n_ana else None,
        "frac_token_concentrated": frac(ana.token_dependent) if n_ana else None,
        "n_token_driven": int((cls == "token_driven").sum()), "n_partially": int((cls == "partially").sum()),
        "n_weakly": int((cls == "weakly").sum()), "n_context_dependent": int((cls == "context_dependent").sum()),
        "injection_position_violations": int(violations),
        "n_loop_features": len(loop_rows),
        "loop_forced": bool(len(loop_rows) and (loop_rows.loop_status == "forced").all()),
        # over the context-dependent features the loop reached; forced fill-ups count only when none was
        "frac_falsified": float(_falsified_pool(loop_rows).falsified.mean()) if len(loop_rows) else None,
        "frac_falsified_all_looped": float(loop_rows.falsified.mean()) if len(loop_rows) else None,
        "n_genuine": int(features.genuine.sum()) if len(features) else 0,
        "n_unresolved": int((features.loop_status == "not_reached").sum()) if len(features) else 0,
        "generator_backend": generator,
        "n_candidates_generated": len(cand),
        "n_candidates_valid": int(cand.valid.sum()) if len(cand) else 0,
        "n_valid_fp": int(cand[cand.kind == "FP"].valid.sum()) if len(cand) else 0,
        "n_valid_fn": int(cand[cand.kind == "FN"].valid.sum()) if len(cand) else 0,
        "template_share": float((cand.source == "template").mean()) if len(cand) else None,
        "loop_max_iterations_used": int(loop_rows.iterations.max()) if len(loop_rows) else 0,
        **summarize_steering(steering, steer_checks),
    }
    return m


def _falsified_pool(loop_rows: pd.DataFrame) -> pd.DataFrame:
    analysed = loop_rows[loop_rows.loop_status == "analysed"]
    return analysed if len(analysed) else loop_rows
