"""Synthetic sparse data for the SAE tests: known unit atoms, `k` active per row (a helper module the tests import by
name, through pytest's pythonpath)."""

from __future__ import annotations

import torch


def sparse_data(n: int = 4000, d_in: int = 16, n_atoms: int = 48, k: int = 2, seed: int = 0,
                offset: float = 0.5) -> torch.Tensor:
    """`n` rows of `k` random unit atoms (of `n_atoms` in `d_in` dimensions) with weights in [1, 2), plus `offset`."""
    g = torch.Generator().manual_seed(seed)
    D = torch.randn(n_atoms, d_in, generator=g)
    D /= D.norm(dim=-1, keepdim=True)
    idx = torch.rand(n, n_atoms, generator=g).topk(k, dim=-1).indices
    codes = torch.zeros(n, n_atoms).scatter_(1, idx, 1 + torch.rand(n, k, generator=g))
    return codes @ D + offset if offset else codes @ D
