"""The workspace band: the paper's four per-layer statistics, the CKA of the lens matrices, and the rule that picks
the band. Pure functions on tensors and arrays (unit-tested on synthetic inputs).

Statistics of layer l (for the Jacobian lens; the logit and tuned lenses get the first three too):
- next-token top-k accuracy of the readout on held-out text (`interp_probes.jlens.quality`);
- excess kurtosis of the readout logits over the vocabulary, m4 / m2^2 - 3, averaged over positions;
- top-1 autocorrelation: the share of adjacent positions whose readouts have the same top-1 token, against the same
  share after shuffling the positions of each text (the null: its mean and 95th percentile over shuffles);
- effective dimensionality of U J_l, U the unembedding through the final norm's Jacobian averaged over real final
  residuals: the participation ratio (sum s^2)^2 / sum s^4 of its singular values s.
"""

from __future__ import annotations

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor


def excess_kurtosis(logits: Float[Tensor, "... vocab"]) -> Float[Tensor, "..."]:
    """m4 / m2^2 - 3 of each row of logits over the vocabulary (float32): 0 for a Gaussian."""
    x = logits.float()
    c = (x - x.mean(-1, keepdim=True)).square_()  # squared in place: one (..., vocab) block, not three
    m2 = c.mean(-1)
    return c.square_().mean(-1) / m2.pow(2).clamp_min(1e-30) - 3.0  # c^4 as (c^2)^2: a third faster than pow(4)


def same_next(top1: Int[Tensor, "text pos"]) -> float:
    """Share of adjacent position pairs (p, p+1) of each text whose top-1 tokens are equal."""
    return float((top1[:, 1:] == top1[:, :-1]).float().mean())


def autocorrelation(top1: Int[Tensor, "text pos"], n_shuffles: int, gen: torch.Generator) -> dict[str, float]:
    """Top-1 autocorrelation against a shuffled null: {"obs", "null_mean", "null_q95", "excess"} (excess = obs -
    null_mean). Each shuffle permutes the positions of every text independently."""
    obs = same_next(top1)
    null = []
    for _ in range(n_shuffles):
        perm = torch.argsort(torch.rand(top1.shape, generator=gen), dim=1).to(top1.device)
        null.append(same_next(top1.gather(1, perm)))
    arr = np.asarray(null)
    return {"obs": obs, "null_mean": float(arr.mean()), "null_q95": float(np.quantile(arr, 0.95)),
            "excess": obs - float(arr.mean())}


def gram_of(unembed: Float[Tensor, "vocab d_model"]) -> Float[Tensor, "d_model d_model"]:
    """U^T U (the singular values of U M are the square roots of the eigenvalues of M^T U^T U M), float32."""
    u = unembed.float()
    return u.T @ u


def participation_ratio(gram: Float[Tensor, "d d"], matrix: Float[Tensor, "d d"]) -> float:
    """Effective dimensionality of U M from G = U^T U: (sum s^2)^2 / sum s^4, s the singular values of U M. With
    S = M^T G M (symmetric, eigenvalues s^2): sum s^2 = tr S and sum s^4 = |S|_F^2, so no eigendecomposition."""
    m = matrix.float().to(gram.device)
    s = (m.T @ gram.float() @ m).double()
    return float(torch.trace(s) ** 2 / s.pow(2).sum().clamp_min(1e-300))


def linear_cka(x: Float[Tensor, "n d"], y: Float[Tensor, "n d"]) -> float:
    """Linear CKA of two matrices with the same rows (here a lens matrix's output dimensions), columns centred:
    ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)."""
    x = x.double() - x.double().mean(0)
    y = y.double() - y.double().mean(0)
    num = (y.T @ x).norm() ** 2
    den = (x.T @ x).norm() * (y.T @ y).norm()
    return float(num / den.clamp_min(1e-300))


def cka_matrix(mats: list[Tensor]) -> np.ndarray:
    """Layer-by-layer `linear_cka` of lens matrices (symmetric, 1 on the diagonal), through the row Gram matrices:
    ||Y^T X||_F^2 = <X X^T, Y Y^T>_F, so one matrix product per layer instead of three per pair."""
    grams = []
    for m in mats:
        x = m.float() - m.float().mean(0)
        k = (x @ x.T).double().flatten()
        grams.append(k / k.norm().clamp_min(1e-300))
    g = torch.stack(grams)
    return (g @ g.T).cpu().numpy()


BAND_RULE = ("a layer below the target is verbalizable when (1) its J-lens next-token top-k accuracy is at least half "
             "the model's own (the target layer's readout) and (2) its top-1 autocorrelation exceeds the 95th "
             "percentile of the shuffled null; the band is the longest contiguous run of verbalizable layers, at least "
             "2 layers long, whose mean CKA within the run exceeds its mean CKA with the other source layers "
             "(a block in the similarity matrix); none otherwise")
"""The band rule, fixed before looking at any model (the issue: do not tune it until it finds one)."""


def pick_band(topk_acc: np.ndarray, model_acc: float, autocorr_obs: np.ndarray, autocorr_q95: np.ndarray,
              cka: np.ndarray) -> tuple[int, int] | None:
    """(first, last) layer of the band by BAND_RULE, or None. Arrays are per source layer (index = layer)."""
    ok = (np.asarray(topk_acc) >= 0.5 * model_acc) & (np.asarray(autocorr_obs) > np.asarray(autocorr_q95))
    runs, start = [], None
    for i, v in enumerate([*ok, False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i - 1))
            start = None
    n = cka.shape[0]
    for a, b in sorted(runs, key=lambda r: (r[0] - r[1], r[0])):  # longest first, then the earliest
        if b - a + 1 < 2:
            break
        inside = [cka[i, j] for i in range(a, b + 1) for j in range(a, b + 1) if i != j]
        outside = [cka[i, j] for i in range(a, b + 1) for j in range(n) if not a <= j <= b]
        if not outside or np.mean(inside) > np.mean(outside):
            return a, b
    return None
