"""The run grid and the training loop shared by the model runs and the quadratic ground truth.

Every run starts from the same theta_0 with the same data order. A stepper owns the optimizer
and exposes the current (merged, for LoRA) parameter vector; the loop applies the projection
intervention to the actual update and hands theta_t to the tracker.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from interp import warmup_schedule

from .track import Tracker


@dataclass(frozen=True)
class RunSpec:
    """One fine-tuning run of the grid."""

    run_id: str
    kind: str
    """full | lora | projection (model); gd | projection | wander | switch (synthetic)."""
    lr: float
    wd: float = 0.0
    """Decoupled (AdamW) weight decay; for plain GD, theta <- theta - lr (grad + wd theta)."""
    l2_init: float = 0.0
    """L2-to-init penalty mu: loss + mu/2 ||theta - theta_0||^2 (not a decay)."""
    lora_rank: int = 0
    k_proj: int = 0
    seed: int = 0
    noise: float = 0.0
    switch_at: int = 0

    def row(self) -> dict:
        d = asdict(self)
        return {k: d[k] for k in ("run_id", "kind", "lr", "wd", "l2_init", "lora_rank", "k_proj", "seed")}


def model_grid(grid: str, k_stiff: int, lora_rank: int, lora_lr: float) -> list[RunSpec]:
    """The run grids of the method spec (smoke: 7 CPU runs; full: GPU, two seeds)."""
    if grid == "micro":
        return [RunSpec("full_lr3e-4", "full", 3e-4),
                RunSpec(f"proj_k{k_stiff}_lr1e-4", "projection", 1e-4, k_proj=k_stiff)]
    if grid == "quick":
        return [
            RunSpec("full_lr3e-4", "full", 3e-4),
            RunSpec("full_lr3e-5", "full", 3e-5),
            RunSpec(f"proj_k{k_stiff}_lr1e-4", "projection", 1e-4, k_proj=k_stiff),
        ]
    if grid == "smoke":
        return [
            RunSpec("full_lr1e-4", "full", 1e-4),
            RunSpec("full_lr3e-4", "full", 3e-4),
            RunSpec("full_lr3e-5", "full", 3e-5),
            RunSpec("wd0.1_lr1e-4", "full", 1e-4, wd=0.1),
            RunSpec("l2init0.1_lr1e-4", "full", 1e-4, l2_init=0.1),
            RunSpec(f"lora_r{lora_rank}_lr{lora_lr:g}", "lora", lora_lr, lora_rank=lora_rank),
            RunSpec(f"proj_k{k_stiff}_lr1e-4", "projection", 1e-4, k_proj=k_stiff),
        ]
    if grid == "full":
        out = []
        for seed in (0, 1):
            s = f"_s{seed}"
            out += [RunSpec(f"full_lr{lr:g}{s}", "full", lr, seed=seed) for lr in (1e-5, 3e-5, 1e-4)]
            out += [RunSpec(f"wd0.1_lr1e-4{s}", "full", 1e-4, wd=0.1, seed=seed)]
            out += [RunSpec(f"l2init{m:g}_lr1e-4{s}", "full", 1e-4, l2_init=m, seed=seed) for m in (1e-2, 1e-1)]
            out += [RunSpec(f"lora_r{r}_lr{lora_lr:g}{s}", "lora", lora_lr, lora_rank=r, seed=seed) for r in (4, 16)]
            out += [RunSpec(f"proj_k{k}_lr1e-4{s}", "projection", 1e-4, k_proj=k, seed=seed) for k in (8, 32)]
        return out
    raise ValueError(f"unknown grid {grid!r}")


def log_schedule(steps: int, log_every: int, extra: tuple[int, ...] = ()) -> list[int]:
    """Step 0, every log_every steps, the last step, and `extra` steps (the harm-signal step)."""
    return sorted({0, steps, *range(log_every, steps + 1, log_every), *[e for e in extra if 0 <= e <= steps]})


def train(
    stepper,
    tracker: Tracker,
    evaluate: Callable[[Tensor], tuple[float, float]],
    steps: int,
    log_steps: list[int],
    project: Tensor | None = None,
    on_log: Callable[[dict], None] | None = None,
) -> float:
    """Run `steps` steps, logging at `log_steps`; returns wall seconds. `project` (P, k) removes the
    update's component in span(project) after each optimizer step (theta = theta_old + (I - V V^T) delta)."""
    t0 = time.perf_counter()
    logs = set(log_steps)
    theta = stepper.theta()
    row = tracker.log(0, theta, *evaluate(theta))
    _check(row, 0)
    for t in range(1, steps + 1):
        old = theta
        stepper.step(t)
        theta = stepper.theta()
        if project is not None:
            d = theta - old
            d = d - project @ (project.T @ d)
            theta = old + d
            stepper.set_theta(theta)
        tracker.step(t, theta)
        if t in logs:
            row = tracker.log(t, theta, *evaluate(theta))
            _check(row, t)
            if on_log is not None:
                on_log(row)
    return time.perf_counter() - t0


def _check(row: dict, t: int) -> None:
    from interp.errors import NumericError

    for key in ("L_T", "L_B"):
        if not math.isfinite(row[key]):
            raise NumericError(f"lockin: non-finite {key} at step {t}")


# ============================================================================= model stepper


class AdamStepper:
    """AdamW (beta = 0.9, 0.999, constant lr after an optional linear warmup) on the slice:
    directly on theta (full / projection runs) or on LoRA factors with theta = theta_0 + vec(B A)."""

    def __init__(self, problem, spec: RunSpec, steps: int, warmup_frac: float, gen: torch.Generator):
        self.p, self.spec = problem, spec
        theta0 = problem.theta0
        if spec.kind == "lora":
            self.A, self.B = [], []
            for _, (rows, cols) in zip(problem.sl.names, problem.sl.shapes):
                bound = 1 / math.sqrt(cols)
                a = (torch.rand(spec.lora_rank, cols, generator=gen) * 2 - 1) * bound  # host: CPU generator; .to below
                self.A.append(torch.nn.Parameter(a.to(theta0)))
                self.B.append(torch.nn.Parameter(theta0.new_zeros(rows, spec.lora_rank)))
            params = self.A + self.B
        else:
            self.w = torch.nn.Parameter(theta0.clone())
            params = [self.w]
        self.opt = torch.optim.AdamW(params, lr=spec.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=spec.wd)
        warm = max(0, round(warmup_frac * steps))
        self.sched = warmup_schedule(self.opt, "constant", warm, steps)

    def _theta(self) -> Tensor:
        if self.spec.kind == "lora":
            return self.p.theta0 + torch.cat([(b @ a).reshape(-1) for a, b in zip(self.A, self.B)])
        return self.w

    def theta(self) -> Tensor:
        with torch.no_grad():
            return self._theta().detach().clone()

    def set_theta(self, theta: Tensor) -> None:
        if self.spec.kind == "lora":
            raise ValueError("the projection intervention applies to full-subset runs only")
        with torch.no_grad():
            self.w.copy_(theta)

    def step(self, t: int) -> float:
        self.opt.zero_grad(set_to_none=True)
        theta = self._theta()
        loss = self.p.sl.train_loss(theta, self.p.batch(t))
        if self.spec.l2_init:
            loss = loss + 0.5 * self.spec.l2_init * (theta - self.p.theta0).square().sum()
        loss.backward()
        self.opt.step()
        self.sched.step()
        return float(loss.detach())
