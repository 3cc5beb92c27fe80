"""The quadratic ground truth (Acceptance A): every instrument against known answers.

In the eigenbasis x = Q^T theta of H_B (Q a random orthogonal 200 x 200 matrix):
- broad loss L_B = 1/2 theta^T H_B theta, lambda = 100 on 5 stiff directions, 0.1 on 195 others;
- narrow loss L_T = 1/2 sum_i m_i (x_i - x*_i)^2, m = 0.5 on the stiff five, 5 on 20 soft ones and
  0 on the remaining 175; x* has a stiff part of norm 2 and a soft part of norm 1.1.
Plain gradient descent, 1,000 steps, logs every 10; the instruments are the model's own (Lanczos
with restarts, the tracker, the across-run analysis).
"""
# host-module: the quadratic ground truth is a 200-parameter float64 toy, on the host by design

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from . import analysis
from .curvature import lanczos, power_iteration, principal_angles_deg
from .track import Stiff, Tracker, random_frame
from .train import RunSpec, log_schedule, train

P, N_STIFF, N_SEEN = 200, 5, 20
STEPS, LOG_EVERY, HARM_STEP = 1000, 10, 200
LR_RUNS = ("gd_lr0.002", "gd_lr0.005", "gd_lr0.01")
MAIN_RUNS = (*LR_RUNS, "gd_lr0.005_wd0.2", "proj_lr0.005", "wander_s0.005", "wander_s0.01")


@dataclass
class Quadratic:
    Q: Tensor
    lam: Tensor
    m: Tensor
    xstar: Tensor

    @classmethod
    def build(cls, seed: int) -> "Quadratic":
        gen = torch.Generator().manual_seed(seed)
        Q = torch.linalg.qr(torch.randn(P, P, generator=gen, dtype=torch.float64))[0]
        lam = torch.full((P,), 0.1, dtype=torch.float64)
        lam[:N_STIFF] = 100.0
        m = torch.zeros(P, dtype=torch.float64)
        m[:N_STIFF], m[N_STIFF : N_STIFF + N_SEEN] = 0.5, 5.0
        xstar = torch.zeros(P, dtype=torch.float64)
        s = torch.randn(N_STIFF, generator=gen, dtype=torch.float64)
        f = torch.randn(N_SEEN, generator=gen, dtype=torch.float64)
        xstar[:N_STIFF] = 2.0 * s / s.norm()
        xstar[N_STIFF : N_STIFF + N_SEEN] = 1.1 * f / f.norm()
        return cls(Q, lam, m, xstar)

    def H(self, v: Tensor) -> Tensor:
        return self.Q @ (self.lam * (self.Q.T @ v))

    def broad(self, theta: Tensor) -> float:
        return float(0.5 * theta @ self.H(theta))

    def narrow(self, theta: Tensor) -> float:
        x = self.Q.T @ theta
        return float(0.5 * (self.m * (x - self.xstar).square()).sum())

    def narrow_grad(self, theta: Tensor, seen: Tensor) -> Tensor:
        x = self.Q.T @ theta
        return self.Q @ (seen * self.m * (x - self.xstar))

    def evaluate(self, theta: Tensor) -> tuple[float, float]:
        return self.narrow(theta), self.broad(theta)


class GDStepper:
    """theta <- theta - lr (grad L_T + wd theta) [+ sigma xi in the soft subspace]; the switch run's
    narrow loss sees only the stiff directions until `switch_at`, then only the soft ones."""

    def __init__(self, quad: Quadratic, spec: RunSpec, gen: torch.Generator):
        self.q, self.spec, self.gen = quad, spec, gen
        self.w = torch.zeros(P, dtype=torch.float64)
        self.all = torch.ones(P, dtype=torch.float64)
        self.stiff_only = torch.zeros(P, dtype=torch.float64)
        self.stiff_only[:N_STIFF] = 1.0
        self.soft_only = 1.0 - self.stiff_only

    def theta(self) -> Tensor:
        return self.w.clone()

    def set_theta(self, theta: Tensor) -> None:
        self.w = theta.clone()

    def step(self, t: int) -> None:
        s = self.spec
        seen = self.all
        if s.switch_at:
            seen = self.stiff_only if t <= s.switch_at else self.soft_only
        g = self.q.narrow_grad(self.w, seen) + s.wd * self.w
        self.w = self.w - s.lr * g
        if s.noise:
            z = torch.randn(P - N_STIFF, generator=self.gen, dtype=torch.float64)
            self.w = self.w + s.noise * (self.q.Q[:, N_STIFF:] @ z)


def runs() -> list[RunSpec]:
    return [
        RunSpec("gd_lr0.002", "gd", 0.002),
        RunSpec("gd_lr0.005", "gd", 0.005),
        RunSpec("gd_lr0.01", "gd", 0.01),
        RunSpec("gd_lr0.005_wd0.2", "gd", 0.005, wd=0.2),
        RunSpec("proj_lr0.005", "projection", 0.005, k_proj=N_STIFF),
        RunSpec("wander_s0.005", "wander", 0.005, k_proj=N_STIFF, noise=0.005),
        RunSpec("wander_s0.01", "wander", 0.005, k_proj=N_STIFF, noise=0.01),
        RunSpec("switch_lr0.005", "switch", 0.005, switch_at=500),
    ]


@contextlib.contextmanager
def single_thread():
    """One torch thread for the tiny float64 algebra here: on a shared machine, a thread pool
    waiting for descheduled workers made each 10 x 200 product cost milliseconds (6x slower)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def run_synthetic(seed: int = 0, lanczos_iters: int = 30, energy_frac: float = 0.9) -> dict:
    """All synthetic runs and checks; returns {"metrics", "runs", "steps", "summary", "ritz", "n_power"}."""
    with single_thread():
        return _run_synthetic(seed, lanczos_iters, energy_frac)


def _run_synthetic(seed: int, lanczos_iters: int, energy_frac: float) -> dict:
    quad = Quadratic.build(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    like = torch.zeros(1, dtype=torch.float64)
    spec = lanczos(quad.H, P, lanczos_iters, N_STIFF, gen, like)
    lam1_power, _, n_power = power_iteration(quad.H, P, lanczos_iters, gen, like)
    angles = principal_angles_deg(spec.vectors, quad.Q[:, :N_STIFF])
    stiff = Stiff(spec.values, spec.vectors, quad.H(torch.zeros(P, dtype=torch.float64)),
                  random_frame(P, N_STIFF, gen, like), float(spec.values[0]))

    log_steps = log_schedule(STEPS, LOG_EVERY, (HARM_STEP,))
    frames, steps_frames = [], []
    for rs in runs():
        tracker = Tracker(torch.zeros(P, dtype=torch.float64), stiff, W=10, energy_frac=energy_frac, tau=10)
        stepper = GDStepper(quad, rs, torch.Generator().manual_seed(seed * 7919 + len(frames)))
        project = stiff.V if rs.k_proj else None
        train(stepper, tracker, quad.evaluate, STEPS, log_steps, project=project)
        frames.append(pd.DataFrame(tracker.rows).assign(run_id=rs.run_id, kind=rs.kind, lr=rs.lr))
        steps_frames.append(pd.DataFrame(tracker.steps_rows).assign(run_id=rs.run_id))
    frame = pd.concat(frames, ignore_index=True)
    steps = pd.concat(steps_frames, ignore_index=True)
    lt_min = float(frame[frame["run_id"].isin(MAIN_RUNS)]["L_T"].min())
    frame = analysis.add_progress(frame, lt_min)

    fit = analysis.collapse(frame, LR_RUNS)
    rates = analysis.rates(frame)
    _, rho_d, rho_q = analysis.paradox(frame, MAIN_RUNS)
    harm = analysis.harm(frame, steps, MAIN_RUNS, HARM_STEP)
    below, _ = analysis.below_curve(fit, frame, "proj_lr0.005")
    cps = analysis.change_points(frame, [r.run_id for r in runs()])
    switch_detected = bool(cps[cps["run_id"] == "switch_lr0.005"]["accepted"].any())
    control_detected = bool(cps[cps["run_id"].isin(LR_RUNS)]["accepted"].any())
    wander = rates.set_index("run_id")["final_b"]
    metrics = {
        "stiff_max_angle_deg": float(angles.max()),
        "lanczos_power_rel_diff": abs(lam1_power - float(spec.values[0])) / float(spec.values[0]),
        "lambda_1": float(spec.values[0]),
        "lanczos_restarts": spec.n_restarts,
        "collapse_r2": fit["collapse_r2"],
        "rate_ratio": analysis.rate_ratio(rates, LR_RUNS),
        "drift_norm_spearman": rho_d,
        "curvature_drift_spearman": rho_q,
        "harm_signal_spearman": harm["harm_signal_spearman"],
        "harm_signal_random_spearman": harm["harm_signal_random_spearman"],
        "projection_run_below_curve": below,
        "bifurcation_detected": switch_detected,
        "bifurcation_detected_control": control_detected,
        "wander_b_s0.005": float(wander["wander_s0.005"]),
        "wander_b_s0.01": float(wander["wander_s0.01"]),
    }
    metrics["passed"] = bool(
        metrics["stiff_max_angle_deg"] <= 1.0
        and metrics["collapse_r2"] >= 0.95
        and metrics["curvature_drift_spearman"] >= 0.9
        and metrics["drift_norm_spearman"] <= 0.5
        and metrics["harm_signal_spearman"] >= 0.9
        and below
        and switch_detected
        and not control_detected
    )
    cfg = pd.DataFrame([r.row() | {"noise": r.noise, "switch_at": r.switch_at} for r in runs()])
    summary = cfg.merge(rates, on="run_id").merge(harm["per_run"], on="run_id", how="left").merge(cps, on="run_id")
    return {"metrics": metrics, "runs": frame, "steps": steps, "summary": summary,
            "ritz": spec.ritz_all.cpu().numpy(), "n_power": n_power}


def gates(m: dict) -> list[tuple[str, float, str, bool]]:
    """(name, value, gate, ok) for each required synthetic check."""
    g = [
        ("stiff_max_angle_deg", m["stiff_max_angle_deg"], "<= 1", m["stiff_max_angle_deg"] <= 1.0),
        ("collapse_r2", m["collapse_r2"], ">= 0.95", m["collapse_r2"] >= 0.95),
        ("curvature_drift_spearman", m["curvature_drift_spearman"], ">= 0.9", m["curvature_drift_spearman"] >= 0.9),
        ("drift_norm_spearman", m["drift_norm_spearman"], "<= 0.5", m["drift_norm_spearman"] <= 0.5),
        ("harm_signal_spearman", m["harm_signal_spearman"], ">= 0.9", m["harm_signal_spearman"] >= 0.9),
        ("projection_run_below_curve", m["projection_run_below_curve"], "true", bool(m["projection_run_below_curve"])),
        ("bifurcation_detected", m["bifurcation_detected"], "true", bool(m["bifurcation_detected"])),
        ("bifurcation_detected_control", m["bifurcation_detected_control"], "false",
         not m["bifurcation_detected_control"]),
    ]
    return [(n, v if not isinstance(v, float) or math.isfinite(v) else float("nan"), gate, ok) for n, v, gate, ok in g]
