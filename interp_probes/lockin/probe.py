"""Lock-in: what decides how much broad capability a narrow fine-tune costs?

Method: ../shared/methods/lockin.md. The paper was not found; every definition and threshold is
the project's reconstruction (from arXiv 2602.15799, 2405.09673, Gur-Ari et al. 2018, PyHessian).

The trainable slice (the last block's MLP) is a pure function of a flat vector theta applied to
cached residuals, so the shared model is never written. A grid of runs (learning rate, weight
decay, L2-to-init, LoRA, projection off the stiff subspace) is tracked online, then compared:
one shared degradation curve b(u)? drift or curvature-weighted drift? an early harm signal?
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from interp.context import RunContext
from interp.errors import NumericError
from interp.precision import dtype_name

from . import RECONSTRUCTION, LockinConfig, analysis
from .problem import ModelProblem, StiffResult, instrument_checks, stiff_directions
from .synthetic import gates, run_synthetic
from .track import Tracker
from .train import AdamStepper, RunSpec, log_schedule, model_grid, train


def run(cfg: LockinConfig, ctx: RunContext) -> None:
    model = ctx.model
    if cfg.synthetic:
        ground_truth(cfg, ctx)  # A. the instruments against known answers
    with ctx.weights_unchanged("the lock-in runs"):  # every run trains its own copy of the slice
        t0 = time.perf_counter()
        problem = ModelProblem(model, cfg, ctx.rng, ctx.generator(1))  # 0. data and cached slice inputs
        ctx.log_timings(cache_s=round(time.perf_counter() - t0, 2), n_cached_tokens=problem.n_cached_tokens)
        sr = stiff_directions(problem, ctx.generator(2))  # 2. stiff directions of the broad loss
        ctx.log_timings(stiff_setup_s=round(sr.seconds, 2))
        t0 = time.perf_counter()
        checks = instrument_checks(problem, sr, ctx.generator(3))  # B. HVP, PSD, Lanczos vs power, cache
        ctx.log_timings(checks_s=round(time.perf_counter() - t0, 2))
        ctx.log_metrics(**checks, curvature=cfg.curvature, lanczos_restarts=sr.n_restarts,
                        train_unembed_dtype=dtype_name(problem.sl.train_dtype))  # in the manifest early
        grid = model_grid(cfg.grid, cfg.k_stiff, cfg.lora_rank, cfg.lora_lr)
        logs = run_grid(problem, sr, grid, cfg, ctx)  # 1, 3, 4, 7. the runs, tracked online
        stats = across_runs(logs, grid, cfg)  # 5, 6, 7, 8. collapse, paradox, harm, projection, bifurcation
        if cfg.overhead:  # 9. per-step overhead of the probes
            ctx.log_timings(**measure_overhead(problem, sr, cfg, cfg.overhead_steps))
    save(ctx, cfg, problem, sr, grid, logs, stats)
    ctx.log_metrics(**stats["metrics"], reconstruction=RECONSTRUCTION)


# ============================================================================= A. synthetic


def ground_truth(cfg: LockinConfig, ctx: RunContext) -> dict:
    t0 = time.perf_counter()
    syn = run_synthetic(cfg.seed, lanczos_iters=30, energy_frac=cfg.energy_frac)
    ctx.log_timings(synthetic_s=round(time.perf_counter() - t0, 2))
    m = syn["metrics"]
    ctx.save_table("synthetic", syn["summary"])
    ctx.save_table("synthetic_runs", syn["runs"])
    ctx.log_metrics(**{f"synthetic_{k}": v for k, v in m.items()})
    for name, value, gate, ok in gates(m):
        ctx.log.info("synthetic %s = %s (gate %s): %s", name, value, gate, "ok" if ok else "FAILED")
    return syn


# ============================================================================= the runs


def run_grid(problem: ModelProblem, sr: StiffResult, grid: list[RunSpec], cfg: LockinConfig, ctx: RunContext) -> dict:
    """Every run of the grid from theta_0 with the same data order; returns the logged frames."""
    harm_step = math.ceil(cfg.early_frac * cfg.steps)
    log_steps = log_schedule(cfg.steps, cfg.log_every, (harm_step,))
    frames, steps, mats, overlaps, svals, seconds = [], [], [], [], {}, {}
    G = problem.curvature() if cfg.exact_curvature_drift else None
    refresh = None
    if cfg.refresh_every:
        refresh = lambda th: stiff_directions(problem, ctx.generator(4), th, sr.stiff.g, sr.stiff.R).stiff  # noqa: E731
    for spec in ctx.tqdm(grid, desc="lockin runs"):
        problem.use_order(spec.seed, cfg.steps)
        tracker = Tracker(
            problem.theta0, sr.stiff, W=cfg.window_W, energy_frac=cfg.energy_frac, tau=cfg.tau,
            split=problem.sl.split, fisher=problem.fisher_grads if cfg.fisher_every else None,
            fisher_every=cfg.fisher_every, curv_exact=G, heatmap_bytes=cfg.heatmap_mb << 20,
            refresh=refresh, refresh_every=cfg.refresh_every,
        )
        stepper = AdamStepper(problem, spec, cfg.steps, cfg.warmup_frac, ctx.generator(100 + len(frames)))
        project = sr.stiff.V[:, : spec.k_proj] if spec.kind == "projection" else None
        seconds[spec.run_id] = train(stepper, tracker, problem.evaluate, cfg.steps, log_steps, project=project)
        ctx.log_timings(**{f"run_s_{spec.run_id}": round(seconds[spec.run_id], 2)})
        ctx.log.info("run %s: L_T %.4f -> %.4f, L_B %.4f -> %.4f (%.0f s)", spec.run_id, tracker.rows[0]["L_T"],
                     tracker.rows[-1]["L_T"], tracker.rows[0]["L_B"], tracker.rows[-1]["L_B"], seconds[spec.run_id])
        tag = {"run_id": spec.run_id}
        frames.append(pd.DataFrame(tracker.rows).assign(**tag, kind=spec.kind, lr=spec.lr))
        steps.append(pd.DataFrame(tracker.steps_rows).assign(**tag))
        mats.append(pd.DataFrame(tracker.matrix_rows).assign(**tag))
        overlaps.append(pd.DataFrame(tracker.overlap_rows, columns=["step_a", "step_b", "overlap"]).assign(**tag))
        svals[spec.run_id] = np.stack(tracker.svals)
    frame = pd.concat(frames, ignore_index=True)
    for col in ("L_T", "L_B", "drift_norm", "pred_deg"):
        if not np.isfinite(frame[col].to_numpy(dtype=float)).all():
            raise NumericError(f"lockin: non-finite {col} in the run logs")
    return {"runs": frame, "steps": pd.concat(steps, ignore_index=True), "matrices": pd.concat(mats, ignore_index=True),
            "overlaps": pd.concat(overlaps, ignore_index=True), "svals": svals, "log_steps": log_steps,
            "harm_step": harm_step}


# ============================================================================= across runs


def across_runs(logs: dict, grid: list[RunSpec], cfg: LockinConfig) -> dict:
    """Progress and degradation, the shared curve, rates, paradox, harm, projection, change points."""
    frame = logs["runs"]
    frame = analysis.add_progress(frame, float(frame["L_T"].min()))  # L_T^min over all runs and logs
    ids = [s.run_id for s in grid]
    plain = [s.run_id for s in grid if s.kind != "projection"]
    proj = [s.run_id for s in grid if s.kind == "projection"]
    fit = analysis.collapse(frame, plain) if len(plain) else None
    rates = analysis.rates(frame)
    curv_col = "curv_drift_exact" if cfg.exact_curvature_drift else "curv_drift"
    paradox, rho_d, rho_q = analysis.paradox(frame, ids, curv_col=curv_col)
    harm = analysis.harm(frame, logs["steps"], ids, logs["harm_step"])
    below, below_rows = [], []
    for rid in proj:
        if fit is not None:
            ok, rows = analysis.below_curve(fit, frame, rid)
            below.append(ok)
            below_rows += [{"run_id": rid, **r} for r in rows]
    cps = analysis.change_points(frame, ids)
    hcurve = analysis.harm_curve(frame, ids)
    rates = rates.merge(harm["per_run"], on="run_id", how="left")
    if fit is not None:
        rates["resid_sd"] = rates["run_id"].map(fit["per_run_sd"])
    final = frame.sort_values("step").groupby("run_id").last()
    steps = logs["steps"]
    max_rho = {rid: float(steps[steps["run_id"] == rid]["rho"].max()) for rid in ids}
    metrics = {
        "collapse_r2": fit["collapse_r2"] if fit else math.nan,
        "rate_ratio": analysis.rate_ratio(rates, plain),
        "drift_norm_spearman": rho_d,
        "curvature_drift_spearman": rho_q,
        "harm_signal_spearman": harm["harm_signal_spearman"],
        "projection_run_below_curve": bool(below) and all(below),
        "bifurcation_detected": bool(cps["accepted"].any()),
        "collapse_rel": fit["collapse_rel"] if fit else math.nan,
        "sigma_res": fit["sigma_res"] if fit else math.nan,
        "harm_signal_random_spearman": harm["harm_signal_random_spearman"],
        "stiff_share_early_spearman": harm["stiff_share_early_spearman"],
        "mean_erank_final": float(final["erank"].mean()),
        "n_runs": len(ids),
        "projection_max_rho": max((max_rho[r] for r in proj), default=math.nan),
        "max_rho_by_run": max_rho,
        "final_u_by_run": rates.set_index("run_id")["final_u"].to_dict(),
        "final_b_by_run": rates.set_index("run_id")["final_b"].to_dict(),
        "t_u50_by_run": rates.set_index("run_id")["t_u50"].to_dict(),
        "lt_min": float(frame["L_T"].min()),
    }
    late = hcurve[hcurve.step >= cfg.steps / 2]
    metrics.update({  # the harm signal as a curve over the run (harm_curve.parquet), summarised
        "harm_signal_spearman_best": float(hcurve.harm_rho.min()) if len(hcurve) else math.nan,
        "harm_signal_spearman_late": float(late.harm_rho.mean()) if len(late) else math.nan,
        "harm_signal_random_spearman_late": float(late.harm_random_rho.mean()) if len(late) else math.nan,
    })
    return {"frame": frame, "fit": fit, "rates": rates, "paradox": paradox, "below": pd.DataFrame(below_rows),
            "changepoints": cps, "harm_curve": hcurve, "metrics": metrics}


# ============================================================================= 9. overhead


def measure_overhead(problem: ModelProblem, sr: StiffResult, cfg: LockinConfig, steps: int) -> dict:
    """Wall time of `steps` steps of the base run (full subset, lr 1e-4) with the probes off, then on.
    Both evaluate L_T and L_B on the same log schedule, so the ratio measures the probes alone; with the
    probes on, the curvature is refreshed as the grid's runs refresh it (C_t every fisher_every steps, the
    stiff subspace every refresh_every steps)."""
    spec = RunSpec("overhead", "full", 1e-4)
    problem.use_order(0, steps)
    log_steps = log_schedule(steps, cfg.log_every)
    refresh = None
    if cfg.refresh_every:
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 4)  # run_grid's ctx.generator(4)
        refresh = lambda th: stiff_directions(problem, gen, th, sr.stiff.g, sr.stiff.R).stiff  # noqa: E731
    out = {}
    for on in (False, True):
        tracker = Tracker(
            problem.theta0, sr.stiff, W=cfg.window_W, energy_frac=cfg.energy_frac, tau=cfg.tau, probes=on,
            split=problem.sl.split, fisher=problem.fisher_grads if cfg.fisher_every else None,
            fisher_every=cfg.fisher_every, heatmap_bytes=cfg.heatmap_mb << 20,
            refresh=refresh, refresh_every=cfg.refresh_every,
        )
        stepper = AdamStepper(problem, spec, steps, cfg.warmup_frac, torch.Generator().manual_seed(0))
        out["overhead_on_s" if on else "overhead_off_s"] = train(stepper, tracker, problem.evaluate, steps, log_steps)
    out["probe_overhead_ratio"] = out["overhead_on_s"] / out["overhead_off_s"]
    return {k: round(v, 4) for k, v in out.items()}


def overhead_benchmark(model, steps: int = 300, **overrides) -> dict:
    """For benchmarks: a `steps`-step fine-tuning run of the base configuration with the geometric
    probes off and on (same data, same log-time loss evaluations). Returns seconds and the ratio,
    plus the one-time stiff-subspace cost. `overrides` are LockinConfig fields (size=... allowed)."""
    from interp.config import build_config

    cfg = build_config(LockinConfig, {"synthetic": False, **overrides, "steps": max(steps, 1)})
    gen = torch.Generator().manual_seed(cfg.seed)
    problem = ModelProblem(model, cfg, np.random.default_rng(cfg.seed), gen)
    sr = stiff_directions(problem, gen)
    return {**measure_overhead(problem, sr, cfg, steps), "stiff_setup_s": sr.seconds, "steps": steps}


# ============================================================================= artifacts


def save(ctx: RunContext, cfg: LockinConfig, problem: ModelProblem, sr: StiffResult, grid: list[RunSpec],
         logs: dict, stats: dict) -> None:
    frame = stats["frame"]
    cols = ["run_id", "kind", "step", "L_T", "L_B", "u", "b", "drift_norm", "path_len", "erank", "pr", "r", "overlap",
            "max_angle_deg", "rho", "h", "pred_deg", "curv_share", "mu_bar", "mu_bar_fisher", "lr", "curv_drift",
            "pred_deg_random"] + (["curv_drift_exact"] if cfg.exact_curvature_drift else [])
    ctx.save_table("runs", frame[cols])
    ctx.save_table("steps", logs["steps"])
    ctx.save_table("run_configs", pd.DataFrame([s.row() for s in grid]))
    ctx.save_table("matrices", logs["matrices"])
    ctx.save_table("overlaps", logs["overlaps"])
    fit = stats["fit"]
    if fit is not None:
        knots = pd.DataFrame({"u_knot": fit["u_knot"], "g": fit["g"]})
        sds = pd.DataFrame({"run_id": list(fit["per_run_sd"]), "resid_sd": list(fit["per_run_sd"].values())})
        ctx.save_table("curve_fit", pd.concat([knots, sds], ignore_index=True).assign(sigma_res=fit["sigma_res"]))
    rate_cols = ["run_id", "t_u30", "t_u50", "t_u70", "t_u90", "final_u", "final_b", "harm_signal",
                 "harm_signal_random", "stiff_share_early"] + (["resid_sd"] if fit is not None else [])
    ctx.save_table("rates", stats["rates"][rate_cols])
    ctx.save_table("paradox", stats["paradox"])
    ctx.save_table("below_curve", stats["below"])
    ctx.save_table("changepoints", stats["changepoints"])
    ctx.save_table("harm_curve", stats["harm_curve"])
    st = sr.stiff
    tensors = {
        "lambda": st.lam.float(),
        "g_B_proj": (st.V.T @ st.g).float(),
        "ritz_all": sr.ritz.float(),
        "lambda_power": torch.tensor([sr.lam_power], dtype=torch.float32),
    }
    if st.V.numel() * 2 <= 256 << 20:
        tensors["V_k"] = st.V.half().cpu().numpy()  # numpy float16 is stored as float16
    for rid, sv in logs["svals"].items():
        tensors[f"sv_{rid}"] = sv.astype(np.float32)
        tensors[f"sv_steps_{rid}"] = np.asarray(logs["log_steps"], dtype=np.int64)
    ctx.save_tensors("spectra", tensors, metadata={"curvature": cfg.curvature, "reconstruction": RECONSTRUCTION})
