"""The model-side problem: narrow and broad data, the cached slice inputs, the fixed data order,
evaluation, the stiff directions at theta_0, and the instrument checks (Acceptance B)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from interp.errors import InterpError

from . import LockinConfig
from .curvature import (
    broad_grad,
    curvature_operator,
    hvp_fd_rel_err,
    lanczos,
    power_iteration,
    psd_min_rayleigh,
)
from .data import broad_texts, token_sequences, weather_reports
from .slice import Positions, Slice, cache_exactness, gather_positions, slice_inputs
from .track import Stiff, random_frame

EVAL_POS_PER_SEQ = 16


def sample_positions(n_seqs: int, k: int, seq_len: int, gen: torch.Generator) -> Tensor:
    """(n_seqs, k) distinct positions per sequence from 1 .. seq_len - 2 (position 0 is never used)."""
    scores = torch.rand(n_seqs, seq_len - 2, generator=gen)
    return scores.argsort(dim=1)[:, :k].sort(dim=1).values + 1


class ModelProblem:
    """Everything a run of the grid needs on the model, built once and shared by every run."""

    def __init__(self, model, cfg: LockinConfig, rng: np.random.Generator, gen: torch.Generator):
        self.model, self.cfg = model, cfg
        if any(p.requires_grad for p in model.hf.parameters()):  # the cache is exact only if nothing below moves
            raise InterpError("lockin: the model has trainable parameters; cached slice inputs need it frozen")
        self.sl = Slice(model, train_unembed=cfg.train_unembed, part=cfg.trainable)
        self.theta0 = self.sl.theta0
        self.P = self.sl.P
        n_reports = math.ceil(cfg.train_seqs * cfg.seq_len / 12) + 16
        train_texts = weather_reports(n_reports, False, rng)
        self.train_ids = token_sequences(model, train_texts, cfg.train_seqs, cfg.seq_len, rng)
        n_narrow = cfg.narrow_eval_positions // EVAL_POS_PER_SEQ
        n_broad = cfg.broad_eval_positions // EVAL_POS_PER_SEQ
        self.narrow_ids = token_sequences(
            model, weather_reports(math.ceil(n_narrow * cfg.seq_len / 12) + 16, True, rng), n_narrow, cfg.seq_len, rng
        )
        self.broad_ids = token_sequences(model, broad_texts(), n_broad, cfg.seq_len, rng)
        self.narrow_pos = sample_positions(n_narrow, EVAL_POS_PER_SEQ, cfg.seq_len, gen).to(model.device)
        self.broad_pos = sample_positions(n_broad, EVAL_POS_PER_SEQ, cfg.seq_len, gen).to(model.device)
        self.n_cached_tokens = 0
        if cfg.cache_inputs:
            self.train_resid = slice_inputs(model, self.sl, self.train_ids)
            self.n_cached_tokens += self.train_ids.numel()
        self.narrow = self._positions(self.narrow_ids, self.narrow_pos)
        self.broad = self._positions(self.broad_ids, self.broad_pos)
        self.n_cached_tokens += self.narrow_ids.numel() + self.broad_ids.numel()
        fisher_idx = torch.randperm(len(self.broad), generator=gen)[: cfg.fisher_m]
        self.fisher_batch = self.broad.take(fisher_idx.to(self.broad.targets.device))
        self._orders: dict[int, tuple[Tensor, Tensor]] = {}
        self.data_seed = 0

    def _positions(self, ids: Tensor, pos: Tensor) -> Positions:
        return gather_positions(slice_inputs(self.model, self.sl, ids), ids, pos)

    # -- the fixed data order -------------------------------------------------------------
    def order(self, seed: int, steps: int) -> tuple[Tensor, Tensor]:
        """(steps, batch_seqs) sequence indices (epoch-wise permutations) and (steps, batch_seqs,
        batch_positions) positions; the same for every run with the same data seed."""
        key = (seed, steps)
        if key not in self._orders:
            cfg = self.cfg
            gen = torch.Generator().manual_seed(1_000_003 * (self.cfg.seed + 1) + seed)
            need = steps * cfg.batch_seqs
            perms = []
            while sum(len(p) for p in perms) < need:
                perms.append(torch.randperm(cfg.train_seqs, generator=gen))
            seqs = torch.cat(perms)[:need].view(steps, cfg.batch_seqs)
            pos = sample_positions(need, cfg.batch_positions, cfg.seq_len, gen).view(steps, cfg.batch_seqs, -1)
            self._orders[key] = (seqs, pos)
        return self._orders[key]

    def use_order(self, seed: int, steps: int) -> None:
        self.data_seed = seed
        self.seqs, self.pos = self.order(seed, steps)

    def batch(self, t: int) -> Positions:
        """The training batch of step t (1-based)."""
        seqs = self.seqs[t - 1].to(self.train_ids.device)
        pos = self.pos[t - 1].to(self.train_ids.device)
        ids = self.train_ids[seqs]
        if self.cfg.cache_inputs:
            resid = self.train_resid[seqs]
        else:
            resid = slice_inputs(self.model, self.sl, ids)
        return gather_positions(resid, ids, pos)

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self, theta: Tensor) -> tuple[float, float]:
        """(held-out narrow loss L_T, broad loss L_B) at the fixed evaluation positions."""
        return self.sl.eval_loss(theta, self.narrow), self.sl.eval_loss(theta, self.broad)

    def fisher_grads(self, theta: Tensor) -> Tensor:
        """(fisher_m, P) per-example gradients of the broad loss at theta (one position each)."""
        out = []
        for i in range(len(self.fisher_batch)):
            out.append(self.sl.grad(theta, self.fisher_batch.take(torch.tensor([i])))[1])
        return torch.stack(out)

    def curvature(self, theta: Tensor | None = None):
        return curvature_operator(self.sl, self.theta0 if theta is None else theta, self.broad, self.cfg.curvature)


@dataclass
class StiffResult:
    stiff: Stiff
    ritz: Tensor
    lam_power: float
    n_power: int
    n_restarts: int
    seconds: float


def stiff_directions(problem: ModelProblem, gen: torch.Generator, theta: Tensor | None = None,
                     g: Tensor | None = None, R: Tensor | None = None) -> StiffResult:
    """Top-k Ritz pairs of the broad curvature (Lanczos), lambda_1 by power iteration, g_B."""
    cfg = problem.cfg
    t0 = time.perf_counter()
    theta = problem.theta0 if theta is None else theta
    G = problem.curvature(theta)
    spec = lanczos(G, problem.P, cfg.lanczos_iters, cfg.k_stiff, gen, problem.theta0)
    lam_p, _, n_p = power_iteration(G, problem.P, cfg.lanczos_iters, gen, problem.theta0, rtol=1e-3)
    if g is None:
        g = broad_grad(problem.sl, problem.theta0, problem.broad)
    if R is None:
        R = random_frame(problem.P, cfg.k_stiff, gen, problem.theta0)
    stiff = Stiff(spec.values, spec.vectors, g, R, float(spec.values[0]))
    return StiffResult(stiff, spec.ritz_all, lam_p, n_p, spec.n_restarts, time.perf_counter() - t0)


def instrument_checks(problem: ModelProblem, sr: StiffResult, gen: torch.Generator) -> dict:
    """hvp_fd_rel_err, the PSD check, the Lanczos/power agreement and the cache exactness."""
    sl = problem.sl
    eps_rel = 1e-3 * float(problem.theta0.norm())
    fd, fd_abs = hvp_fd_rel_err(sl, problem.theta0, problem.broad, gen, eps=(eps_rel, 1e-3))
    lam1 = float(sr.stiff.lam[0])
    if problem.cfg.curvature == "ggn":
        min_rq, _ = psd_min_rayleigh(problem.curvature(), problem.P, gen, problem.theta0)
        scale = lam1
    else:  # the PSD check is about the GGN whatever operator the run uses
        min_rq, scale = psd_min_rayleigh(curvature_operator(sl, problem.theta0, problem.broad, "ggn"), problem.P,
                                         gen, problem.theta0)
    n = min(4, problem.broad_ids.shape[0])
    exact = cache_exactness(problem.model, sl, problem.broad_ids[:n], problem.broad_pos[:n])
    return {
        "hvp_fd_rel_err": fd,
        "hvp_fd_eps": eps_rel,
        "hvp_fd_rel_err_abs_eps": fd_abs,
        "lambda_1": lam1,
        "lambda_1_power": sr.lam_power,
        "lanczos_power_rel_diff": abs(sr.lam_power - lam1) / abs(lam1),
        "psd_min_rayleigh": min_rq,
        "psd_check_passed": bool(min_rq >= -1e-6 * abs(scale)),
        "cache_max_abs_diff": exact,
        "cache_exact": bool(exact <= 1e-4),
    }
