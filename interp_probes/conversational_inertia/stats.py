"""Diagonal mass, its permutation null, paired bootstrap intervals and rank trends (numpy/scipy only).

A *block* B is the attention of the current reply's content tokens (rows) to an earlier reply's
content tokens (columns), for any number of leading units (heads, layers): shape (..., n, m).
With K = min(n, m), Diag_{δ,w}(B) = (1/K) Σ_{i<K} Σ_{|e|≤w} B[i, i+δ+e] over in-range columns.
The null permutes the columns of every block independently (or shifts them circularly), which keeps
each row's mass in the block and destroys only the positional alignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

MIN_SD = 1e-9
"""A null with a smaller standard deviation (a constant block) reports z = 0, not infinity."""


def band_index(n: int, m: int, delta: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows (K, 2w+1), column positions (K, 2w+1), in-range mask) of the δ-shifted band of width w."""
    k = min(n, m)
    rows = np.repeat(np.arange(k)[:, None], 2 * w + 1, axis=1)
    cols = rows + delta + np.arange(-w, w + 1)[None, :]
    valid = (cols >= 0) & (cols < m)
    return rows, np.clip(cols, 0, max(m - 1, 0)), valid


def diag_mass(block: np.ndarray, delta: int, w: int) -> np.ndarray:
    """Diag_{δ,w} of (..., n, m) blocks -> (...)."""
    n, m = block.shape[-2:]
    rows, cols, valid = band_index(n, m, delta, w)
    k = rows.shape[0]
    if k == 0:
        return np.zeros(block.shape[:-2])
    return (block[..., rows, cols] * valid).sum((-1, -2)) / k


def diag_ratio(block: np.ndarray, delta: int, w: int) -> np.ndarray:
    """DR = Diag / ((2w+1) mean(B)): 1 for a uniform block (descriptive; 0 where the block is empty)."""
    mean = block.mean((-1, -2))
    d = diag_mass(block, delta, w)
    return np.where(mean > 0, d / np.maximum((2 * w + 1) * mean, 1e-30), 0.0)


def column_orders(m: int, n_perm: int, rng: np.random.Generator, mode: str = "permute") -> np.ndarray:
    """(n_perm, m) column orders: uniform permutations, or circular shifts by at least ceil(m/4)."""
    if mode == "permute":
        return np.argsort(rng.random((n_perm, m)), axis=1)
    if mode == "circular":
        lo = int(np.ceil(m / 4))
        hi = m - lo
        if hi < lo:
            return np.tile(np.arange(m), (n_perm, 1))
        shifts = rng.integers(lo, hi + 1, size=n_perm)
        return (np.arange(m)[None, :] + shifts[:, None]) % m
    raise ValueError(f"unknown null {mode!r}; permute or circular")


@dataclass
class NullTest:
    """Observed mean diagonal mass over blocks against its null, per unit."""

    observed: np.ndarray
    null_mean: np.ndarray
    null_sd: np.ndarray
    z: np.ndarray
    ratio: np.ndarray


def null_test(blocks: Sequence[np.ndarray], delta: int, w: int, n_perm: int, rng: np.random.Generator,
              mode: str = "permute") -> NullTest:
    """T = mean over blocks of Diag(B_s) for every unit (leading dims), with its null and z.

    Each block is (..., n_s, m_s) with the same leading dims; every draw re-orders the columns of
    every block independently.
    """
    if not blocks:
        raise ValueError("null_test needs at least one block")
    lead = blocks[0].shape[:-2]
    obs = np.zeros(lead)
    null = np.zeros(lead + (n_perm,))
    ratio = np.zeros(lead)
    for b in blocks:
        n, m = b.shape[-2:]
        rows, cols, valid = band_index(n, m, delta, w)
        k = rows.shape[0]
        obs += diag_mass(b, delta, w)
        ratio += diag_ratio(b, delta, w)
        if k == 0:
            continue
        orders = column_orders(m, n_perm, rng, mode)  # (P, m)
        perm_cols = orders[:, cols]  # (P, K, 2w+1): the original column now at each band position
        vals = b[..., rows[None], perm_cols]  # (..., P, K, 2w+1)
        null += (vals * valid).sum((-1, -2)) / k
    s = len(blocks)
    obs, null, ratio = obs / s, null / s, ratio / s
    mean, sd = null.mean(-1), null.std(-1, ddof=1) if n_perm > 1 else np.zeros(lead)
    z = np.where(sd > MIN_SD, (obs - mean) / np.maximum(sd, MIN_SD), 0.0)
    return NullTest(obs, mean, sd, z, ratio)


def null_calibration(n_blocks: int, n: int, m: int, n_perm: int, rng: np.random.Generator,
                     delta: int = 0, w: int = 0, mode: str = "permute") -> np.ndarray:
    """z of `n_blocks` structureless blocks (rows ~ Dirichlet(1)), each tested on its own."""
    zs = []
    for _ in range(n_blocks):
        b = rng.dirichlet(np.ones(m), size=n)
        zs.append(float(null_test([b], delta, w, n_perm, rng, mode).z))
    return np.array(zs)


# ============================================================================= behaviour and trends


def paired_bootstrap(a: np.ndarray, b: np.ndarray, n_boot: int, rng: np.random.Generator,
                     level: float = 0.95) -> tuple[float, float, float]:
    """(mean(a - b), low, high): a percentile interval of the paired mean difference over resampled pairs."""
    d = np.asarray(a, float) - np.asarray(b, float)
    if d.size == 0:
        return float("nan"), float("nan"), float("nan")
    idx = rng.integers(0, d.size, size=(n_boot, d.size))
    means = d[idx].mean(1)
    alpha = (1 - level) / 2
    return float(d.mean()), float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """(rho, p); (nan, nan) when either side is constant or there are fewer than 3 points."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan")
    res = sps.spearmanr(x, y)
    return float(res.statistic), float(res.pvalue)
