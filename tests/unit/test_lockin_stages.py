"""lockin stages on synthetic data with known answers, and the slice machinery on the tiny model."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from interp_probes.lockin import analysis
from interp_probes.lockin.curvature import lanczos, power_iteration, principal_angles_deg
from interp_probes.lockin.synthetic import Quadratic, gates, run_synthetic, single_thread
from interp_probes.lockin.track import Stiff, Tracker, erank_pr, overlap_angles, random_frame, update_subspace
from interp_probes.lockin.train import RunSpec, log_schedule, model_grid

F64 = torch.zeros(1, dtype=torch.float64)


def sym(eigs: list[float], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    Q = torch.linalg.qr(torch.randn(len(eigs), len(eigs), generator=g, dtype=torch.float64))[0]
    return Q @ torch.diag(torch.tensor(eigs, dtype=torch.float64)) @ Q.T, Q


# ============================================================================= eigensolvers


def test_lanczos_restart_recovers_a_repeated_eigenvalue():
    H, Q = sym([100.0] * 5 + [0.1] * 95)
    with single_thread():
        spec = lanczos(lambda v: H @ v, 100, 30, 5, torch.Generator().manual_seed(1), F64)
    angles = principal_angles_deg(spec.vectors, Q[:, :5])
    assert spec.n_restarts >= 4, f"only {spec.n_restarts} restarts: the Krylov space of 2 eigenvalues is 2-dim"
    assert float(angles.max()) <= 1e-4, f"max principal angle {float(angles.max()):.3g} deg"
    np.testing.assert_allclose(spec.values.numpy(), 100.0, rtol=1e-10)
    assert torch.allclose(spec.vectors.T @ spec.vectors, torch.eye(5, dtype=torch.float64), atol=1e-10)


def test_lanczos_top_k_of_distinct_spectrum_and_power_iteration_with_deflation_agree():
    eigs = [10.0, 7.0, 5.0, 3.0] + list(np.linspace(0.01, 1.0, 56))
    H, Q = sym(eigs, seed=3)
    g = torch.Generator().manual_seed(2)
    spec = lanczos(lambda v: H @ v, 60, 40, 3, g, F64)
    np.testing.assert_allclose(spec.values.numpy(), [10, 7, 5], rtol=1e-8)
    lam1, v1, _ = power_iteration(lambda v: H @ v, 60, 500, g, F64, rtol=1e-12)
    lam2, _, _ = power_iteration(lambda v: H @ v, 60, 500, g, F64, deflate=[(lam1, v1)], rtol=1e-12)
    assert abs(lam1 - 10) < 1e-6 and abs(lam2 - 7) < 1e-4, (lam1, lam2)
    assert abs(float(v1 @ Q[:, 0])) > 1 - 1e-6


# ============================================================================= subspace instruments


def test_update_subspace_singular_values_rank_and_basis():
    P = 50
    basis = torch.linalg.qr(torch.randn(P, 3, dtype=torch.float64))[0]
    coef = torch.diag(torch.tensor([3.0, 1.0, 0.1], dtype=torch.float64)) @ torch.linalg.qr(
        torch.randn(6, 3, dtype=torch.float64))[0].T  # (3, 6) with orthonormal rows
    U = (basis @ coef).T  # 6 updates in a 3-dim span with singular values 3, 1, 0.1
    s, V = update_subspace(U, 0.9)
    np.testing.assert_allclose(s[:3], [3, 1, 0.1], rtol=1e-9)
    assert np.allclose(s[3:], 0, atol=1e-7)
    assert V.shape == (P, 2), "the top vector covers 9 / 10.01 = 0.899 < 0.9 of the energy"
    assert update_subspace(U, 0.85)[1].shape == (P, 1)
    assert update_subspace(U, 0.9999)[1].shape == (P, 3)
    V2 = V
    ov, ang, _ = overlap_angles(V2, basis[:, :2])
    assert ov > 1 - 1e-9 and ang < 1e-4


def test_erank_and_participation_ratio_formulas():
    er, pr = erank_pr(np.array([1.0, 1.0, 1.0, 1.0]))
    assert er == pytest.approx(4) and pr == pytest.approx(4)
    er, pr = erank_pr(np.array([2.0, 0.0, 0.0]))
    assert er == pytest.approx(1) and pr == pytest.approx(1)


def test_overlap_of_identical_and_orthogonal_subspaces():
    E = torch.eye(6, dtype=torch.float64)
    assert overlap_angles(E[:, :2], E[:, :2])[:2] == pytest.approx((1.0, 0.0), abs=1e-6)
    assert overlap_angles(E[:, :2], E[:, 2:5])[:2] == pytest.approx((0.0, 90.0), abs=1e-6)


def test_tracker_harm_quantities_match_closed_forms_and_projection_zeroes_rho():
    P, k = 40, 3
    g = torch.Generator().manual_seed(0)
    V = random_frame(P, k, g, F64)
    lam = torch.tensor([5.0, 2.0, 1.0], dtype=torch.float64)
    gB = torch.randn(P, generator=g, dtype=torch.float64)
    st = Stiff(lam, V, gB, random_frame(P, k, g, F64), 5.0)
    tr = Tracker(torch.zeros(P, dtype=torch.float64), st, W=4, tau=2)
    theta = torch.zeros(P, dtype=torch.float64)
    tr.log(0, theta, 1.0, 1.0)
    d = torch.randn(P, generator=g, dtype=torch.float64)
    theta = theta + d
    tr.step(1, theta)
    row = tr.log(1, theta, 0.9, 1.1)
    c = V.T @ d
    assert row["rho"] == pytest.approx(float(c @ c / (d @ d)))
    assert row["h"] == pytest.approx(float(lam @ c**2 / (d @ d)))
    assert row["pred_deg"] == pytest.approx(float(gB @ d + 0.5 * lam @ c**2))
    assert row["curv_drift"] == pytest.approx(float(lam @ c**2))
    assert row["drift_norm"] == pytest.approx(float(d.norm())) and row["path_len"] == pytest.approx(float(d.norm()))
    dp = d - V @ (V.T @ d)
    theta = theta + dp
    tr.step(2, theta)
    assert tr.steps_rows[-1]["rho"] < 1e-25


# ============================================================================= across-run analysis


def curve_frame(rates: dict[str, float], shift: dict[str, float] | None = None) -> pd.DataFrame:
    """Runs that all follow b = u^2 (+ shift) at their own speed u = 1 - exp(-rate t)."""
    rows = []
    for rid, r in rates.items():
        for t in range(0, 101, 10):
            u = 1 - math.exp(-r * t)
            rows.append({"run_id": rid, "step": t, "u": u, "b": u**2 + (shift or {}).get(rid, 0.0) * u,
                         "drift_norm": t * r, "curv_drift": u**2})
    return pd.DataFrame(rows)


def test_collapse_on_one_curve_and_rate_ratio():
    fr = curve_frame({"a": 0.01, "b": 0.03, "c": 0.1})
    fit = analysis.collapse(fr, ["a", "b", "c"])
    assert fit["collapse_r2"] > 0.999 and fit["collapse_rel"] == pytest.approx(1.0, abs=1e-6)
    rates = analysis.rates(fr)
    t50 = rates.set_index("run_id")["t_u50"]
    # linear interpolation between logs of u = 1 - exp(-r t)
    assert t50["c"] == pytest.approx(10 * (0.5 - 0) / (1 - math.exp(-1)), rel=1e-9)
    assert analysis.rate_ratio(rates, ["a", "b", "c"]) == pytest.approx(t50["a"] / t50["c"])
    bad = analysis.collapse(curve_frame({"a": 0.03, "b": 0.03}, {"b": -0.8}), ["a", "b"])
    assert bad["collapse_rel"] < 0.5 < fit["collapse_rel"]


def test_crossing_interpolates_between_logs():
    run = pd.DataFrame({"step": [0, 10, 20], "u": [0.0, 0.4, 0.8], "b": [0.0, 1.0, 3.0]})
    hit = analysis.crossing(run, 0.5, ("b",))
    assert hit["step"] == pytest.approx(12.5) and hit["b"] == pytest.approx(1.5)
    assert analysis.crossing(run, 0.9) is None


def test_spearman_ties_exact_zeros_of_projected_runs():
    # three projected runs with q_hat at rounding level must tie at 0 (not be ranked by noise)
    q = [3.0, 2.0, 1.0, 0.5, 1e-30, -2e-31, 5e-32]
    b = [9.0, 8.0, 7.0, 6.0, 0.1, 0.3, 0.2]
    assert analysis.spearman(q, b) == pytest.approx(0.9636, abs=1e-3)
    assert math.isnan(analysis.spearman([1, 1, 1], [1, 2, 3]))


def test_paradox_levels_need_four_runs():
    fr = curve_frame({"a": 0.02, "b": 0.03, "c": 0.1, "d": 0.05})
    table, rho_d, rho_q = analysis.paradox(fr, ["a", "b", "c", "d"])
    assert sorted(table["u_level"].unique()) == [0.3, 0.5, 0.7]
    assert rho_q == pytest.approx(1.0) or math.isnan(rho_q)  # b = u^2 identical across runs at matched u
    _, rho_d3, _ = analysis.paradox(fr, ["a", "b", "c"])
    assert math.isnan(rho_d3)


def test_change_point_accepts_a_drop_and_rejects_a_rise():
    steps = np.arange(0, 200, 10)
    mu = np.where(steps < 100, 1.0, 0.02)
    overlap = np.where(steps == 100, 0.0, 1.0)
    angle = np.where(steps == 100, 90.0, 2.0)
    run = pd.DataFrame({"step": steps, "mu_bar": mu, "overlap": overlap, "max_angle_deg": angle})
    cp = analysis.change_point(run)
    assert cp["accepted"] and cp["t_star"] == 100, cp
    rise = run.assign(mu_bar=mu[::-1])
    assert not analysis.change_point(rise)["accepted"]
    smooth = run.assign(overlap=0.95, max_angle_deg=10.0)
    assert not analysis.change_point(smooth)["accepted"]


def test_below_curve_test():
    fr = curve_frame({"a": 0.02, "b": 0.05}).assign(b=lambda d: d["b"] + 0.001 * np.sin(d["step"]))
    fit = analysis.collapse(fr, ["a", "b"])
    proj = curve_frame({"p": 0.05}).assign(b=lambda d: 0.2 * d["u"] ** 2)
    ok, rows = analysis.below_curve(fit, pd.concat([fr, proj]), "p")
    assert ok and len(rows) >= 2, rows
    above = curve_frame({"p": 0.05}).assign(b=lambda d: 3 * d["u"] ** 2)
    assert not analysis.below_curve(fit, pd.concat([fr, above]), "p")[0]


def test_log_schedule_and_grids():
    assert log_schedule(40, 5, (8,)) == [0, 5, 8, 10, 15, 20, 25, 30, 35, 40]
    smoke = model_grid("smoke", 8, 4, 1e-3)
    assert len(smoke) == 7 and sum(s.kind == "projection" for s in smoke) == 1
    assert {s.kind for s in smoke} == {"full", "lora", "projection"}
    full = model_grid("full", 32, 4, 1e-3)
    assert len({s.seed for s in full}) == 2 and max(s.k_proj for s in full) == 32
    assert RunSpec("x", "full", 1e-4).row()["wd"] == 0.0


# ============================================================================= the ground truth


def test_quadratic_construction_matches_the_spec():
    q = Quadratic.build(0)
    theta0 = torch.zeros(200, dtype=torch.float64)
    assert q.narrow(theta0) == pytest.approx(1 + 3.025)  # stiff part 1, soft part 3.025
    assert q.broad(theta0) == 0.0
    assert torch.allclose(q.Q.T @ q.Q, torch.eye(200, dtype=torch.float64), atol=1e-10)


def test_synthetic_ground_truth_passes_every_instrument_check():
    syn = run_synthetic(0)
    bad = [(n, v, g) for n, v, g, ok in gates(syn["metrics"]) if not ok]
    assert not bad, f"synthetic checks failed: {bad}"
    m = syn["metrics"]
    assert 0.1 < m["wander_b_s0.005"] < 0.5 and 0.5 < m["wander_b_s0.01"] < 1.5, m  # ~0.22 and ~0.88 expected


# ============================================================================= the slice on a tiny model


@pytest.fixture(scope="module")
def tiny_problem(tiny_model):
    from interp.config import build_config
    from interp_probes.lockin import LockinConfig
    from interp_probes.lockin.problem import ModelProblem

    cfg = build_config(LockinConfig, {"size": "micro", "train_seqs": 4, "seq_len": 24, "batch_positions": 8,
                                      "broad_eval_positions": 32, "narrow_eval_positions": 32})
    return ModelProblem(tiny_model, cfg, np.random.default_rng(0), torch.Generator().manual_seed(0))


def test_cached_slice_reproduces_the_full_forward(tiny_model, tiny_problem):
    from interp_probes.lockin.slice import cache_exactness

    p = tiny_problem
    assert p.sl.P == 3 * 64 * 128
    err = cache_exactness(tiny_model, p.sl, p.broad_ids[:2], p.broad_pos[:2])
    assert err <= 1e-4, f"cached path differs from the full forward by {err:.2e}"


def test_bf16_training_loss_tracks_float32_and_evaluation_stays_float32(tiny_model):
    from interp.precision import fast_dtype
    from interp_probes.lockin.slice import Positions, Slice

    assert fast_dtype("float32", torch.device("cpu")) == torch.float32
    assert fast_dtype("auto", torch.device("cuda")) == torch.bfloat16
    f32, b16 = Slice(tiny_model, train_unembed="float32"), Slice(tiny_model, train_unembed="bfloat16")
    g = torch.Generator().manual_seed(0)
    batch = Positions(torch.randn(64, f32.W_U.shape[1], generator=g), torch.randint(0, f32.W_U.shape[0], (64,)))
    grads = []
    for sl in (f32, b16):
        th = sl.theta0.clone().requires_grad_(True)
        loss = sl.train_loss(th, batch)
        grads.append(torch.autograd.grad(loss, th)[0])
        assert loss.dtype == torch.float32
    rel = float((grads[0] - grads[1]).norm() / grads[0].norm())
    assert 0 < rel < 0.02, f"bf16 gradient differs from float32 by {rel:.3g}"
    assert b16.eval_loss(b16.theta0, batch) == f32.eval_loss(f32.theta0, batch)  # evaluation is float32 in both


def test_curvature_operators_are_symmetric_psd_and_match_explicit_forms(tiny_problem):
    from interp_probes.lockin.curvature import curvature_operator, hvp_fd_rel_err

    p = tiny_problem
    g = torch.Generator().manual_seed(0)
    u, v = (torch.randn(p.P, generator=g) for _ in range(2))
    G = curvature_operator(p.sl, p.theta0, p.broad, "ggn")
    assert float(u @ G(v)) == pytest.approx(float(v @ G(u)), rel=1e-3)
    assert float(v @ G(v)) > 0
    # empirical Fisher product against explicit per-position gradients
    Fop = curvature_operator(p.sl, p.theta0, p.broad, "empirical_fisher")
    grads = torch.stack([p.sl.grad(p.theta0, p.broad.take(torch.tensor([i])))[1] for i in range(len(p.broad))])
    explicit = grads.T @ (grads @ v) / len(p.broad)
    rel = float((Fop(v) - explicit).norm() / explicit.norm())
    assert rel < 1e-4, f"empirical-Fisher product vs explicit per-position gradients: relative error {rel:.2e}"
    (err,) = hvp_fd_rel_err(p.sl, p.theta0, p.broad, g, eps=(1e-3 * float(p.theta0.norm()),))
    assert err < 1e-2, f"finite-difference HVP error {err:.2e}"


def test_runs_never_write_the_shared_model_and_lora_starts_at_theta0(tiny_model, tiny_problem):
    from interp import weights_digest
    from interp_probes.lockin.problem import stiff_directions
    from interp_probes.lockin.train import AdamStepper, train

    p = tiny_problem
    before = weights_digest(tiny_model)
    sr = stiff_directions(p, torch.Generator().manual_seed(0))
    p.use_order(0, 4)
    for spec in (RunSpec("f", "full", 1e-3), RunSpec("l", "lora", 1e-2, lora_rank=2), RunSpec("p", "projection",
                                                                                               1e-3, k_proj=2)):
        stepper = AdamStepper(p, spec, 4, 0.0, torch.Generator().manual_seed(0))
        assert torch.equal(stepper.theta(), p.theta0)
        tr = Tracker(p.theta0, sr.stiff, W=3, tau=2, split=p.sl.split)
        train(stepper, tr, p.evaluate, 4, [0, 2, 4], project=sr.stiff.V[:, :2] if spec.k_proj else None)
        assert tr.rows[-1]["drift_norm"] > 0
        if spec.k_proj:
            assert tr.max_rho() < 1e-8, tr.max_rho()
    assert weights_digest(tiny_model) == before


def test_whole_smoke_grid_on_the_tiny_model(tiny_model, tiny_model_dir, tmp_path):
    """Every stage of the default path (7-run grid, Fisher C_t, overhead, artifacts) end to end, tiny."""
    from interp.runner import execute, prepare
    from interp.store import load_run

    spec, cfg = prepare("lockin", {
        "model": str(tiny_model_dir), "grid": "smoke", "steps": 12, "log_every": 4, "seq_len": 24, "train_seqs": 6,
        "batch_seqs": 2, "batch_positions": 8, "broad_eval_positions": 32, "narrow_eval_positions": 32,
        "k_stiff": 3, "lanczos_iters": 8, "window_W": 4, "tau": 4, "fisher_m": 4, "fisher_every": 4,
        "overhead_steps": 4, "synthetic": False, "lora_lr": 1e-2})
    run = load_run(execute(spec, cfg, out=tmp_path, model=tiny_model, progress=False))
    m, t = run.metrics, run.timings
    assert m["n_runs"] == 7 and m["lm_weights_unchanged"] and m["projection_max_rho"] < 1e-6
    assert t["probe_overhead_ratio"] > 0 and "stiff_setup_s" in t and "run_s_lora_r4_lr0.01" in t
    runs = run.table("runs")
    assert set(runs.kind) == {"full", "lora", "projection"}
    assert runs[runs.step == 4]["mu_bar_fisher"].notna().all(), "the empirical-Fisher C_t is logged every 4 steps"
    lora = runs[runs.kind == "lora"].sort_values("step")
    assert lora["drift_norm"].iloc[0] == 0 and lora["drift_norm"].iloc[-1] > 0, "LoRA merged weights moved"
    assert {"gate_proj", "up_proj", "down_proj"} <= {n.rsplit(".", 1)[-1] for n in run.table("matrices").matrix}
    assert len(run.table("overlaps")) > 0 and len(run.table("changepoints")) == 7


@pytest.mark.parametrize("curvature", ["hessian", "empirical_fisher"])
def test_other_operators_refresh_and_exact_curvature_drift_on_the_tiny_model(tiny_model, tiny_model_dir, tmp_path,
                                                                             curvature):
    from interp.runner import execute, prepare
    from interp.store import load_run

    spec, cfg = prepare("lockin", {
        "model": str(tiny_model_dir), "grid": "quick", "steps": 6, "log_every": 2, "seq_len": 24, "train_seqs": 4,
        "batch_seqs": 2, "batch_positions": 8, "broad_eval_positions": 32, "narrow_eval_positions": 32,
        "k_stiff": 2, "lanczos_iters": 6, "window_W": 3, "tau": 2, "fisher_m": 4, "fisher_every": 0,
        "overhead": False, "synthetic": False, "curvature": curvature, "refresh_every": 3,
        "exact_curvature_drift": True})
    run = load_run(execute(spec, cfg, out=tmp_path, model=tiny_model, progress=False))
    assert run.metrics["curvature"] == curvature and run.metrics["lm_weights_unchanged"]
    runs = run.table("runs")
    assert runs["curv_drift_exact"].notna().all() and (runs[runs.step > 0]["curv_drift_exact"] != 0).any()


def test_full_grid_needs_32_stiff_directions():
    from interp.config import build_config
    from interp.errors import ConfigError
    from interp_probes.lockin import LockinConfig

    with pytest.raises(ConfigError, match="k_stiff"):
        build_config(LockinConfig, {"grid": "full"})
    assert build_config(LockinConfig, {"grid": "full", "k_stiff": 32, "lanczos_iters": 80}).k_stiff == 32
