"""Stiff directions of the broad loss: curvature-vector products, Lanczos, power iteration, checks.

Operators act on parameter-space vectors v (P,):
- `hessian`: Hv by double backward;
- `ggn` (default): J^T H_out J v with H_out = diag(p) - p p^T per position (softmax CE); PSD, and
  equal to the true Fisher, so it needs no labels;
- `empirical_fisher`: (1/N) sum_n g_n g_n^T v from per-position gradients, without forming them
  (a jvp of the per-position losses, then their vjp).

Lanczos runs with full reorthogonalisation and restarts from a fresh random vector (beta = 0 in the
tridiagonal matrix) when the Krylov space is exhausted, which is what recovers a repeated
eigenvalue; power iteration with deflation cross-checks lambda_1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor
from torch.func import jvp, vjp

MatVec = Callable[[Tensor], Tensor]


# ============================================================================= operators


def curvature_operator(sl, theta: Tensor, batch, kind: str, chunk: int = 512) -> MatVec:
    """v -> G v at `theta` over the broad `batch` (a slice.Positions), mean over positions."""
    theta = theta.detach()
    n = len(batch)
    parts = [batch.take(torch.arange(i, min(i + chunk, n))) for i in range(0, n, chunk)]
    if kind == "hessian":
        return lambda v: sum(_hvp(sl, theta, part, v) * (len(part) / n) for part in parts)
    if kind == "ggn":
        probs = []
        with torch.no_grad():
            for part in parts:
                probs.append(sl.logits(theta, part.resid).softmax(-1))
        W = sl.W_U.float() if sl.W_U.dtype in (torch.bfloat16, torch.float16) else sl.W_U

        def ggn(v: Tensor) -> Tensor:
            out = torch.zeros_like(theta)
            for part, p in zip(parts, probs):
                f = lambda th, part=part: sl.hidden(th, part.resid).to(W.dtype)  # noqa: E731
                _, jv = jvp(f, (theta,), (v,))  # (n, d_model): J v in hidden space
                zv = jv @ W.T  # (n, vocab): J v in logit space
                hz = p * (zv - (p * zv).sum(-1, keepdim=True))  # H_out J v
                _, back = vjp(f, theta)
                out += back(hz @ W / n)[0]
            return out

        return ggn
    if kind == "empirical_fisher":

        def fisher(v: Tensor) -> Tensor:
            out = torch.zeros_like(theta)
            for part in parts:
                f = lambda th, part=part: sl.token_losses(th, part)  # noqa: E731
                _, s = jvp(f, (theta,), (v,))  # (n,): g_n . v
                _, back = vjp(f, theta)
                out += back(s / n)[0]
            return out

        return fisher
    raise ValueError(f"unknown curvature operator {kind!r}")


def _hvp(sl, theta: Tensor, batch, v: Tensor) -> Tensor:
    th = theta.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(sl.loss(th, batch), th, create_graph=True)
    (hv,) = torch.autograd.grad(g @ v, th)
    return hv


def hessian_vp(sl, theta: Tensor, batch, v: Tensor, chunk: int = 512) -> Tensor:
    """The exact Hessian-vector product of the mean broad loss (double backward)."""
    return curvature_operator(sl, theta, batch, "hessian", chunk)(v)


def broad_grad(sl, theta: Tensor, batch, chunk: int = 512) -> Tensor:
    """Gradient of the mean loss over `batch` (chunked)."""
    n = len(batch)
    g = torch.zeros_like(theta)
    for i in range(0, n, chunk):
        part = batch.take(torch.arange(i, min(i + chunk, n)))
        g += sl.grad(theta, part)[1] * (len(part) / n)
    return g


def hvp_fd_rel_err(sl, theta: Tensor, batch, gen: torch.Generator, eps: Sequence[float] = (1e-3,)) -> list[float]:
    """|| (grad(theta + eps v) - grad(theta - eps v)) / 2 eps - H v || / || H v || for a random unit v
    and each eps (float32), against the exact Hessian-vector product by double backward (same batch).

    In float32 the difference quotient is rounding-limited: the error falls tenfold per tenfold eps
    (measured on SmolLM2's last MLP: 3.7e-2 at eps 1e-3, 4.1e-3 at 1e-2, 4.1e-4 at 1e-1, where
    ||g|| / ||Hv|| ~ 40), so the probe also reads it at eps = 1e-3 ||theta_0||."""
    v = _unit(torch.randn(theta.shape, generator=gen, dtype=torch.float64).to(theta))
    hv = hessian_vp(sl, theta, batch, v)
    out = []
    for e in eps:
        fd = (broad_grad(sl, theta + e * v, batch) - broad_grad(sl, theta - e * v, batch)) / (2 * e)
        out.append(float((fd - hv).norm() / hv.norm()))
    return out


def psd_min_rayleigh(matvec: MatVec, P: int, gen: torch.Generator, like: Tensor, n: int = 5) -> tuple[float, float]:
    """(min, max) of the Rayleigh quotient v^T G v over `n` random unit vectors."""
    rq = []
    for _ in range(n):
        v = _unit(torch.randn(P, generator=gen, dtype=torch.float64).to(like))
        rq.append(float(v @ matvec(v)))
    return min(rq), max(rq)


# ============================================================================= eigensolvers


@dataclass
class Spectrum:
    """Top-k Ritz pairs of a symmetric operator."""

    values: Float[Tensor, " k"]
    vectors: Float[Tensor, "P k"]
    ritz_all: Float[Tensor, " m"]
    """Every Ritz value of the final tridiagonal matrix, descending."""
    n_restarts: int
    n_products: int


def _unit(v: Tensor) -> Tensor:
    return v / v.norm()


def _orth(w: Tensor, Q: list[Tensor]) -> Tensor:
    """w minus its projection on the columns of Q, twice (classical Gram-Schmidt, reorthogonalised)."""
    if not Q:
        return w
    M = torch.stack(Q, 1)
    for _ in range(2):
        w = w - M @ (M.T @ w)
    return w


def lanczos(matvec: MatVec, P: int, iters: int, k: int, gen: torch.Generator, like: Tensor) -> Spectrum:
    """Top-k eigenpairs by Lanczos with full reorthogonalisation and the restart rule.

    A tiny beta (<= 1e-6 x the largest |alpha| so far) means the Krylov space is exhausted: the
    next vector is a fresh random one orthogonalised against the basis, with beta = 0 in T.
    """
    iters = min(iters, P)
    Q: list[Tensor] = []
    alphas: list[float] = []
    betas: list[float] = []
    q = _unit(torch.randn(P, generator=gen, dtype=torch.float64).to(like))
    q_prev, beta_prev, restarts = None, 0.0, 0
    for j in range(iters):
        Q.append(q)
        w = matvec(q)
        alpha = float(q @ w)
        w = w - alpha * q
        if q_prev is not None and beta_prev:
            w = w - beta_prev * q_prev
        w = _orth(w, Q)
        alphas.append(alpha)
        if j == iters - 1:
            break
        beta = float(w.norm())
        if beta <= 1e-6 * max(abs(a) for a in alphas) or not math.isfinite(beta):
            fresh = _orth(torch.randn(P, generator=gen, dtype=torch.float64).to(like), Q)
            q_prev, q, beta_prev = None, _unit(fresh), 0.0
            betas.append(0.0)
            restarts += 1
        else:
            q_prev, q, beta_prev = q, w / beta, beta
            betas.append(beta)
    m = len(alphas)
    T = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if m > 1:
        off = torch.tensor(betas[: m - 1], dtype=torch.float64)
        T += torch.diag(off, 1) + torch.diag(off, -1)
    evals, S = torch.linalg.eigh(T)
    order = evals.argsort(descending=True)
    evals, S = evals[order], S[:, order]
    k = min(k, m)
    V = torch.stack(Q, 1) @ S[:, :k].to(like)
    V = torch.linalg.qr(V)[0] * torch.sign(torch.linalg.qr(V)[1].diagonal())  # clean orthonormality
    return Spectrum(evals[:k].to(like), V, evals.to(like), restarts, m)


def power_iteration(
    matvec: MatVec,
    P: int,
    iters: int,
    gen: torch.Generator,
    like: Tensor,
    deflate: list[tuple[float, Tensor]] | None = None,
    rtol: float = 1e-4,
) -> tuple[float, Tensor, int]:
    """(lambda, v, products) of the top eigenpair of G minus the deflated pairs (lambda_i, v_i).
    Stops when the Rayleigh quotient changes by less than `rtol` (relative) or after `iters`."""
    deflate = deflate or []

    def op(v: Tensor) -> Tensor:
        out = matvec(v)
        for lam, u in deflate:
            out = out - lam * u * (u @ v)
        return out

    v = _unit(torch.randn(P, generator=gen, dtype=torch.float64).to(like))
    lam, n = 0.0, 0
    for n in range(1, iters + 1):
        w = op(v)
        new = float(v @ w)
        v = _unit(w)
        if n > 1 and abs(new - lam) <= rtol * abs(new):
            lam = new
            break
        lam = new
    return lam, v, n


def principal_angles_deg(A: Tensor, B: Tensor) -> Tensor:
    """Principal angles (degrees, ascending) between the column spans of orthonormal A and B."""
    cos = torch.linalg.svdvals(A.T @ B).clamp(0, 1)
    return torch.rad2deg(torch.arccos(cos)).sort().values
