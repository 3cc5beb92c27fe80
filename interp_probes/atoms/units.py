"""Units as dictionaries: codes, faithfulness R², support, local coherence and the stability q*.

A unit set is a decoder D (rows d_j in raw coordinates) plus codes a_i; the reconstruction is
m_hat_i = sum_j a_ij d_j + b. Neurons: D = I, a_i = m_i (signed). SAE and TSAE: SAELens SAEs.
All statistics are pure functions of tensors, so they are unit-tested on synthetic data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp.sae import decode, encode

from .metric import Whitening

SUPPORT_EPS = 1e-6
"""|a_ij| > SUPPORT_EPS * ||m_i|| puts unit j in the support of sample i (every unit type)."""


@dataclass
class UnitCodes:
    """Codes and reconstructions of one unit set on some tokens."""

    name: str
    codes: Float[Tensor, "n units"]
    recon: Float[Tensor, "n d"]
    decoder: Float[Tensor, "units d"]
    """Decoder rows in raw coordinates."""


def neuron_codes(m: Float[Tensor, "n d"]) -> UnitCodes:
    """The standard basis: codes are the coordinates (signed), the reconstruction is exact."""
    d = m.shape[1]
    return UnitCodes("neurons", m.float(), m.float().clone(), torch.eye(d))


def sae_codes(name: str, sae, m: Float[Tensor, "n d"]) -> UnitCodes:
    a = encode(sae, m.float())
    return UnitCodes(name, a, decode(sae, a), sae.W_dec.detach().float())


def r2(m: Float[Tensor, "n d"], m_hat: Float[Tensor, "n d"], mean: Float[Tensor, " d"],
       w: Whitening | None = None) -> float:
    """1 - sum ||W(m - m_hat)||^2 / sum ||W(m - mean)||^2 (Euclidean without W)."""
    err = (m - m_hat).double()
    dev = (m - mean.to(m)).double()
    if w is not None:
        W = w.W.double()
        err, dev = err @ W, dev @ W
    return float(1 - err.pow(2).sum() / dev.pow(2).sum().clamp_min(1e-300))


def support_mask(codes: Float[Tensor, "n units"], m: Float[Tensor, "n d"]) -> Tensor:
    """S_i = {j : |a_ij| > SUPPORT_EPS * ||m_i||} as a boolean (n, units) mask."""
    return codes.abs() > SUPPORT_EPS * m.float().norm(dim=-1, keepdim=True)


def aip_gram(decoder: Float[Tensor, "units d"], w: Whitening) -> Float[Tensor, "units units"]:
    """|d~_j . d~_k| with d~_j = W d_j / ||W d_j|| (unit AIP norm), diagonal zeroed."""
    dt = decoder.double() @ w.W.double()
    dt = dt / dt.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    g = (dt @ dt.T).abs().float()
    g.fill_diagonal_(0)
    return g


def local_coherence(codes: Float[Tensor, "n units"], support: Tensor, gram: Float[Tensor, "units units"],
                    max_k: int = 256, chunk: int = 64) -> Float[Tensor, " n"]:
    """mu_i = max over j != k in S_i of |d~_j . d~_k| (0 when K_i <= 1).

    Supports larger than `max_k` keep their `max_k` entries of largest |a|.
    """
    n = codes.shape[0]
    mu = torch.zeros(n)
    K = support.sum(-1)
    for i in range(0, n, chunk):
        a = codes[i : i + chunk].abs() * support[i : i + chunk]
        k = int(min(max_k, int(K[i : i + chunk].max()) if a.shape[0] else 0))
        if k < 2:
            continue
        vals, idx = a.topk(k, dim=-1)  # (b, k)
        valid = vals > 0
        sub = gram[idx.unsqueeze(-1), idx.unsqueeze(-2)]  # (b, k, k)
        sub = sub * (valid.unsqueeze(-1) & valid.unsqueeze(-2))
        mu[i : i + chunk] = sub.flatten(1).amax(-1)
    return mu


def q_star(K: np.ndarray, mu: np.ndarray, levels: int = 1000) -> tuple[float, pd.DataFrame]:
    """q* = max{q : mu_q < 1/(2 K_q - 1)} over q in (0, 1] (0 if none), on samples with K >= 1.

    K_q and mu_q are the q-quantiles (inverted CDF: observed values) of K and mu.
    """
    keep = K >= 1
    K, mu = K[keep].astype(float), mu[keep].astype(float)
    q = np.arange(1, levels + 1) / levels
    if len(K) == 0:
        frame = pd.DataFrame({"q": q, "K_q": np.nan, "mu_q": np.nan, "bound": np.nan})
        return 0.0, frame
    Kq = np.quantile(K, q, method="inverted_cdf")
    muq = np.quantile(mu, q, method="inverted_cdf")
    bound = 1.0 / (2 * Kq - 1)
    ok = muq < bound
    qs = float(q[ok].max()) if ok.any() else 0.0
    return qs, pd.DataFrame({"q": q, "K_q": Kq, "mu_q": muq, "bound": bound})


def unique_frac(K: np.ndarray, mu: np.ndarray) -> float:
    """Mean of U_i = [mu_i < 1/(2 K_i - 1)] over samples with K_i >= 1."""
    keep = K >= 1
    if not keep.any():
        return 0.0
    return float((mu[keep] < 1.0 / (2 * K[keep] - 1)).mean())


@dataclass
class UnitStats:
    row: dict
    """One row of units.parquet."""
    support: pd.DataFrame
    """unit, sample_id, K, mu."""
    curve: pd.DataFrame
    """unit, q, K_q, mu_q, bound."""


def evaluate_units(
    uc: UnitCodes,
    m: Float[Tensor, "n d"],
    m_train: Float[Tensor, "nt d"],
    recon_train: Float[Tensor, "nt d"],
    mean: Float[Tensor, " d"],
    w: Whitening,
    eval_idx: Tensor,
    max_k: int,
    levels: int,
    extra: dict | None = None,
) -> UnitStats:
    """Held-out R² (AIP, Euclid), train R²_AIP, L0, support/coherence on `eval_idx`, q*, dead fraction."""
    sup = support_mask(uc.codes, m)
    K_all = sup.sum(-1)
    sub_codes, sub_sup = uc.codes[eval_idx], sup[eval_idx]
    gram = aip_gram(uc.decoder, w)
    mu = local_coherence(sub_codes, sub_sup, gram, max_k=max_k)
    K = sub_sup.sum(-1).cpu().numpy()
    mu_np = mu.cpu().numpy()
    qs, curve = q_star(K, mu_np, levels)
    curve.insert(0, "unit", uc.name)
    row = {
        "unit": uc.name,
        "r2_aip_train": r2(m_train, recon_train, mean, w),
        "r2_aip_heldout": r2(m, uc.recon, mean, w),
        "r2_euclid_heldout": r2(m, uc.recon, mean, None),
        "l0_mean": float(K_all.float().mean()),
        "l0_median": float(K_all.float().median()),
        "q_star": qs,
        "unique_frac": unique_frac(K, mu_np),
        "frac_k0": float((K_all == 0).float().mean()),
        "dead_frac": float((~sup.any(0)).float().mean()),
    }
    row.update(extra or {})
    support = pd.DataFrame({"unit": uc.name, "sample_id": eval_idx.cpu().numpy(), "K": K, "mu": mu_np})
    return UnitStats(row, support, curve)
