"""atoms acceptance (method spec, "Acceptance on the embedded model") on smollm2-135m, default size.

One run covers A (synthetic ground truth), B (the embedded core at blocks.6.hook_resid_post, angles also at
blocks.14.hook_resid_post) and C (the small capacity x data grid). The SAE cache is off, so the training
timings are real. Evidence: A's recovery, q* and knee, and C's two grid effects; the angle, neuron, L0,
round-trip and TSAE-vs-SAE checks are sanity checks that must hold too. Every check's value goes to
artifacts/acceptance/atoms.json with the metrics and timings; the test fails listing every unmet check.
Budgets are wall-clock on the 2-core CPU, multiplied by INTERP_BUDGET_SLACK on a shared machine.
"""

from __future__ import annotations

import json
import math

from acceptance import ARTIFACTS, ROOT, SLACK

from interp.runner import execute, prepare
from interp.store import load_run

BUDGET_A, BUDGET_B, BUDGET_C = 120, 7 * 60, 5 * 60


def checks(run) -> dict[str, tuple[bool, str, str]]:
    """name -> (ok, measured, kind) with kind evidence | sanity | budget."""
    m, t = run.metrics, run.timings
    g = lambda k: m.get(k) if m.get(k) is not None else float("nan")  # noqa: E731
    out: dict[str, tuple[bool, str, str]] = {}

    def check(name, ok, detail, kind="sanity"):
        out[name] = (bool(ok), detail, kind)

    # A. synthetic ground truth
    check("A: synthetic_recovery >= 0.9", g("synthetic_recovery") >= 0.9, f"{g('synthetic_recovery'):.3f}", "evidence")
    check("A: synthetic_q_star >= 0.9", g("synthetic_q_star") >= 0.9, f"{g('synthetic_q_star'):.3f}", "evidence")
    check("A: knee R2(N*/4) <= R2(N*) - 0.05", g("synthetic_r2_aip_small_d") <= g("synthetic_r2_aip") - 0.05,
          f"{g('synthetic_r2_aip_small_d'):.3f} vs {g('synthetic_r2_aip'):.3f}", "evidence")
    check("A: |synthetic Euclid angle - 90| >= 20", abs(g("synthetic_angle_mean_euclid_deg") - 90) >= 20,
          f"{g('synthetic_angle_mean_euclid_deg'):.2f}")
    check("A: |synthetic AIP angle - 90| <= 2", abs(g("synthetic_angle_mean_aip_deg") - 90) <= 2,
          f"{g('synthetic_angle_mean_aip_deg'):.2f}")
    check("A: synthetic_r2_aip >= 0.98", g("synthetic_r2_aip") >= 0.98, f"{g('synthetic_r2_aip'):.4f}")
    check("A: synthetic L0 median in [2, 4]", 2 <= g("synthetic_l0_median") <= 4, f"{g('synthetic_l0_median')}")
    check("A: synthetic neurons R2 >= 0.9999", g("synthetic_r2_aip_neurons") >= 0.9999,
          f"{g('synthetic_r2_aip_neurons'):.6f}")
    check("A: synthetic neurons q* <= 0.05", g("synthetic_q_star_neurons") <= 0.05, f"{g('synthetic_q_star_neurons')}")
    sa = t.get("seconds_synthetic", math.inf)
    check(f"A: <= {BUDGET_A * SLACK:.0f} s", sa <= BUDGET_A * SLACK, f"{sa:.0f} s", "budget")

    # B. embedded core
    check("B: |angle_mean_euclid_deg - 90| >= 10", abs(g("angle_mean_euclid_deg") - 90) >= 10,
          f"{g('angle_mean_euclid_deg'):.2f} (l14: {g('angle_mean_euclid_deg_l14'):.2f})")
    check("B: |angle_mean_aip_deg - 90| <= 2", abs(g("angle_mean_aip_deg") - 90) <= 2,
          f"{g('angle_mean_aip_deg'):.2f} (l14: {g('angle_mean_aip_deg_l14'):.2f})")
    check("B: r2_aip_neurons >= 0.9999", g("r2_aip_neurons") >= 0.9999, f"{g('r2_aip_neurons'):.6f}")
    check("B: q_star_neurons <= 0.05", g("q_star_neurons") <= 0.05, f"{g('q_star_neurons')}")
    target = run.config["target_l0"]
    check("B: l0_tsae within 25% of target", abs(g("l0_tsae") - target) <= 0.25 * target,
          f"{g('l0_tsae'):.2f} (train {g('l0_train_tsae'):.2f})")
    check("B: l0_median_tsae >= 2", g("l0_median_tsae") >= 2, f"{g('l0_median_tsae')}")
    check("B: l0_sae within 25% of l0_tsae", abs(g("l0_sae") - g("l0_tsae")) <= 0.25 * g("l0_tsae"),
          f"{g('l0_sae'):.2f} vs {g('l0_tsae'):.2f}")
    check("B: saelens_roundtrip_ok", m.get("saelens_roundtrip_ok") is True, f"{m.get('saelens_roundtrip_ok')}")
    check("B: saelens_max_rel_err <= 1e-4", g("saelens_max_rel_err") <= 1e-4, f"{g('saelens_max_rel_err'):.2e}")
    check("B: r2_aip_tsae >= 0.4", g("r2_aip_tsae") >= 0.4, f"{g('r2_aip_tsae'):.4f}")
    check("B: r2_aip_tsae >= r2_aip_sae + 0.05", g("r2_aip_tsae") >= g("r2_aip_sae") + 0.05,
          f"{g('r2_aip_tsae'):.4f} vs {g('r2_aip_sae'):.4f}")
    check("B: r2_euclid_sae >= r2_euclid_tsae", g("r2_euclid_sae") >= g("r2_euclid_tsae"),
          f"{g('r2_euclid_sae'):.4f} vs {g('r2_euclid_tsae'):.4f}")
    check("B: q_star_tsae >= q_star_neurons + 0.05", g("q_star_tsae") >= g("q_star_neurons") + 0.05,
          f"{g('q_star_tsae'):.3f} vs {g('q_star_neurons'):.3f}")
    check("B: q_star_tsae + 0.02 >= q_star_sae", g("q_star_tsae") + 0.02 >= g("q_star_sae"),
          f"{g('q_star_tsae'):.3f} vs {g('q_star_sae'):.3f}")
    sb = sum(t.get(f"seconds_{s}", 0) for s in ("collection", "metric", "training", "evaluation"))
    check(f"B: <= {BUDGET_B * SLACK:.0f} s", sb <= BUDGET_B * SLACK, f"{sb:.0f} s", "budget")

    # C. grid
    grid = run.table("grid")
    top = grid[grid.n_train == grid.n_train.max()].sort_values("d_sae")
    low = grid[grid.n_train == grid.n_train.min()].sort_values("d_sae")
    r_big, r_small = top.r2_aip_heldout.iloc[-1], top.r2_aip_heldout.iloc[0]
    g_big, g_small = low.memorization_gap.iloc[-1], low.memorization_gap.iloc[0]
    check("C: at max n, R2(8H) >= R2(H/2) + 0.05", r_big >= r_small + 0.05, f"{r_big:.4f} vs {r_small:.4f}",
          "evidence")
    check("C: at min n, gap(8H) >= gap(H/2) + 0.05", g_big >= g_small + 0.05, f"{g_big:.4f} vs {g_small:.4f}",
          "evidence")
    sc = t.get("seconds_grid", math.inf)
    check(f"C: <= {BUDGET_C * SLACK:.0f} s", sc <= BUDGET_C * SLACK, f"{sc:.0f} s", "budget")
    return out


def test_atoms_acceptance():
    from interp.context import cached_model

    spec, cfg = prepare("atoms", {"sae.cache": False})
    run = load_run(execute(spec, cfg, out=ARTIFACTS, model=cached_model(cfg), progress=False))
    results = checks(run)
    report = {
        "probe": "atoms",
        "run": str(run.path.relative_to(ROOT)) if run.path.is_relative_to(ROOT) else str(run.path),
        "model": cfg.model,
        "budget_slack": SLACK,
        "checks": {k: {"ok": ok, "measured": v, "kind": kind} for k, (ok, v, kind) in results.items()},
        "metrics": run.metrics,
        "timings": run.timings,
        "grid": run.table("grid").to_dict(orient="records"),
        "synthetic": run.table("synthetic").to_dict(orient="records"),
    }
    path = ARTIFACTS / "acceptance" / "atoms.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str))
    for k, (ok, v, kind) in results.items():
        print(f"{'PASS' if ok else 'FAIL'} [{kind}] {k}: {v}")
    failed = [f"{k}: {v}" for k, (ok, v, _) in results.items() if not ok]
    assert not failed, "unmet atoms checks:\n" + "\n".join(failed)
