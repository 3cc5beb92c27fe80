"""Synthetic ground truth: K-sparse combinations of known random atoms, mixed by an anisotropic
map and offset, so that whitening must undo the Euclidean "shift" and the atoms can be scored.

m = A (D delta) + c: N* unit atoms d_j in H_s dimensions, K active per sample with coefficients
uniform on [1, 2]; A has log-uniform singular values in [0.05, 1]; ||c|| = 3 x median ||A D delta||.
The true atoms in raw coordinates are the rows of D A^T.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from .metric import Whitening


@dataclass
class Synthetic:
    train: Float[Tensor, "n h"]
    heldout: Float[Tensor, "nh h"]
    atoms: Float[Tensor, "n_atoms h"]
    """True atoms in raw coordinates (rows of D A^T)."""
    mix: Float[Tensor, "h h"]
    offset: Float[Tensor, " h"]


def make_synthetic(dim: int, n_atoms: int, k: int, n_train: int, n_heldout: int, gen: torch.Generator) -> Synthetic:
    D = torch.randn(n_atoms, dim, generator=gen)
    D /= D.norm(dim=-1, keepdim=True)
    U, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen))
    V, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen))
    s = torch.exp(torch.empty(dim).uniform_(math.log(0.05), 0.0, generator=gen))
    A = (U * s) @ V.T
    n = n_train + n_heldout
    # k distinct atoms per sample: the first k of a random ranking of the atoms
    idx = torch.rand(n, n_atoms, generator=gen).topk(k, dim=-1).indices
    coef = 1 + torch.rand(n, k, generator=gen)
    x0 = torch.zeros(n, dim)
    for j in range(k):
        x0 += coef[:, j : j + 1] * D[idx[:, j]]
    xa = x0 @ A.T
    c = torch.randn(dim, generator=gen)
    c = c / c.norm() * 3 * xa.norm(dim=-1).median()
    m = xa + c
    return Synthetic(m[:n_train].contiguous(), m[n_train:].contiguous(), D @ A.T, A, c)


def atom_match(atoms: Float[Tensor, "n_atoms h"], decoder: Float[Tensor, "units h"], w: Whitening) -> Tensor:
    """For each true atom, the best |cos_S| with any learned decoder row (AIP-normalised forms)."""
    W = w.W.double()
    t = atoms.double() @ W
    t = t / t.norm(dim=-1, keepdim=True)
    d = decoder.double() @ W
    d = d / d.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return (t @ d.T).abs().amax(-1).float()


def recovery(best_cos: Tensor, threshold: float = 0.95) -> float:
    """Fraction of true atoms whose best match reaches |cos_S| >= threshold."""
    return float((best_cos >= threshold).float().mean())
