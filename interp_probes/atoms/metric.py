"""The atomic inner product: second moments, whitening, and angles under Euclid and the AIP.

<u, v>_S = u^T S v with S = (M2 + lambda I)^-1, M2 the uncentred second moment of activations
(or the covariance, with centred vectors). W = S^(1/2) is the whitening: cos_S(u, v) is the
Euclidean cosine of (uW, vW). Row-vector convention throughout; W is symmetric.
"""
# host-module: atoms' activation buffers and metrics live on the host (collect_activations' default)

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.sae import InputTransform


@dataclass
class Whitening:
    """One AIP metric: W and its inverse from the eigendecomposition of a regularised moment."""

    moment: Float[Tensor, "d d"]
    """M2 (uncentred) or the covariance (centred), float64."""
    eigvals: Float[Tensor, " d"]
    """Eigenvalues of moment + lambda I (ascending), float64."""
    W: Float[Tensor, "d d"]
    W_inv: Float[Tensor, "d d"]
    ridge_lambda: float
    shift: Float[Tensor, " d"] | None
    """The mean for the centred metric (vectors are centred before W), else None."""

    @property
    def condition(self) -> float:
        return float(self.eigvals.max() / self.eigvals.min())

    def whiten(self, x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        x = x.float()
        if self.shift is not None:
            x = x - self.shift.float()
        return x @ self.W.float()

    def transform(self) -> InputTransform:
        shift = None if self.shift is None else self.shift.float()
        return InputTransform(self.W.float(), self.W_inv.float(), shift)


@dataclass
class Metric:
    """Both metrics at one site, estimated on the training split."""

    mean: Float[Tensor, " d"]
    n_tokens: int
    uncentered: Whitening
    centered: Whitening

    def get(self, kind: str) -> Whitening:
        return self.uncentered if kind == "uncentered" else self.centered


def moments(x: Float[Tensor, "n d"], chunk: int = 16384) -> tuple[Tensor, Tensor, int]:
    """(mean, M2 = E[x x^T]) accumulated in float64 over chunks, and the count."""
    d = x.shape[1]
    s = torch.zeros(d, dtype=torch.float64)
    m2 = torch.zeros(d, d, dtype=torch.float64)
    for i in range(0, x.shape[0], chunk):
        xi = x[i : i + chunk].double()
        s += xi.sum(0)
        m2 += xi.T @ xi
    n = x.shape[0]
    return s / n, m2 / n, n


def whitening(moment: Float[Tensor, "d d"], ridge: float, shift: Tensor | None = None) -> Whitening:
    """W = Q diag(e^-1/2) Q^T for moment + lambda I = Q diag(e) Q^T, lambda = ridge tr(moment)/d."""
    d = moment.shape[0]
    lam = ridge * float(torch.trace(moment)) / d
    e, Q = torch.linalg.eigh(moment + lam * torch.eye(d, dtype=torch.float64))
    e = e.clamp_min(1e-300)
    W = (Q * e.rsqrt()) @ Q.T
    W_inv = (Q * e.sqrt()) @ Q.T
    return Whitening(moment, e, W, W_inv, lam, shift)


def estimate_metric(x: Float[Tensor, "n d"], ridge: float) -> Metric:
    """Uncentred and centred AIP metrics of the rows of `x`."""
    mean, m2, n = moments(x)
    cov = m2 - torch.outer(mean, mean)
    return Metric(mean, n, whitening(m2, ridge), whitening(cov, ridge, shift=mean))


def sample_pairs(seq: np.ndarray, n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`n_pairs` random index pairs (i, j) whose tokens come from different sequences."""
    n = len(seq)
    if len(np.unique(seq)) < 2:
        raise ValueError("angle pairs need tokens from at least two sequences")
    i = rng.integers(0, n, size=n_pairs * 2)
    j = rng.integers(0, n, size=n_pairs * 2)
    keep = seq[i] != seq[j]
    i, j = i[keep], j[keep]
    while len(i) < n_pairs:  # pragma: no cover - only with very few sequences
        a, b = rng.integers(0, n, size=n_pairs), rng.integers(0, n, size=n_pairs)
        ok = seq[a] != seq[b]
        i, j = np.concatenate([i, a[ok]]), np.concatenate([j, b[ok]])
    return i[:n_pairs], j[:n_pairs]


def angles_deg(u: Float[Tensor, "n d"], v: Float[Tensor, "n d"]) -> Float[Tensor, " n"]:
    """Angle in degrees between the rows of u and v."""
    u, v = u.double(), v.double()
    cos = (u * v).sum(-1) / (u.norm(dim=-1) * v.norm(dim=-1)).clamp_min(1e-300)
    return torch.rad2deg(torch.arccos(cos.clamp(-1, 1))).float()


def pair_angles(x: Float[Tensor, "n d"], i: np.ndarray, j: np.ndarray, metric: Metric) -> dict[str, np.ndarray]:
    """Euclidean, AIP (uncentred) and centred-AIP angles (and centred Euclid) of the pairs (i, j)."""
    ti, tj = torch.as_tensor(i), torch.as_tensor(j)
    u, v = x[ti].float(), x[tj].float()
    mu = metric.mean.float()
    return {
        "euclid_deg": angles_deg(u, v).cpu().numpy(),
        "aip_deg": angles_deg(metric.uncentered.whiten(u), metric.uncentered.whiten(v)).cpu().numpy(),
        "aip_centered_deg": angles_deg(metric.centered.whiten(u), metric.centered.whiten(v)).cpu().numpy(),
        "euclid_centered_deg": angles_deg(u - mu, v - mu).cpu().numpy(),
    }


def whitened_norm_sq(x: Float[Tensor, "n d"], w: Whitening) -> float:
    """Mean ||W x||^2 (about d on data from the distribution the metric was estimated on)."""
    return float(w.whiten(x).double().pow(2).sum(-1).mean())


def massive_dims(mean: Float[Tensor, " d"], k: int = 3) -> list[int]:
    """The coordinates of largest |mean| (the few dimensions that carry the shared mean direction)."""
    return [int(i) for i in mean.abs().topk(min(k, mean.numel())).indices]
