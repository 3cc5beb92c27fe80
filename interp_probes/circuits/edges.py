"""A graph's edges as a list (target, source, weight): what the attribution graph keeps instead of a dense matrix.

A dense adjacency over every node grows as (features + layers x positions)^2, and its rows over every active
feature grow with the prompt too (circuit-tracer keeps both dense, hence its out-of-memory reports on long prompts).
Here each target keeps its strongest `max_edges_per_row` edges (the rest is added to its `unattributed` input, so
completeness still holds exactly), and every product the pruning needs is a scatter over the list.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Edges:
    """Edges of an `n`-node graph: edge i goes from `source[i]` into `target[i]` with `weight[i]` (A[t, s])."""

    target: Tensor
    """(E,) long."""
    source: Tensor
    """(E,) long."""
    weight: Tensor
    """(E,) float."""
    n: int

    def __len__(self) -> int:
        return self.weight.shape[0]

    def dense(self) -> Tensor:
        """(n, n) A[target, source] (for small graphs: tests, a figure)."""
        A = torch.zeros(self.n, self.n, dtype=self.weight.dtype, device=self.weight.device)
        return A.index_put_((self.target, self.source), self.weight, accumulate=True)

    def row_sums(self) -> Tensor:
        """(n,) each target's summed incoming weight."""
        return torch.zeros(self.n, dtype=self.weight.dtype, device=self.weight.device).index_add_(
            0, self.target, self.weight)

    def left(self, x: Tensor) -> Tensor:
        """x @ A: (n,) -> (n,), each target's value sent back to its sources."""
        return torch.zeros(self.n, dtype=x.dtype, device=x.device).index_add_(
            0, self.source, x[self.target] * self.weight.to(x.dtype))

    def right(self, x: Tensor) -> Tensor:
        """A @ x: (n,) -> (n,), each target's weighted sum of its sources' values."""
        return torch.zeros(self.n, dtype=x.dtype, device=x.device).index_add_(
            0, self.target, x[self.source] * self.weight.to(x.dtype))

    def normalized(self) -> Edges:
        """|A| with each row scaled to sum to 1 (circuit-tracer's `normalize_matrix`)."""
        a = self.weight.abs()
        sums = torch.zeros(self.n, dtype=a.dtype, device=a.device).index_add_(0, self.target, a)
        return Edges(self.target, self.source, a / sums.clamp_min(1e-10)[self.target], self.n)

    def select(self, keep: Tensor) -> Edges:
        """The edges where `keep` (E,) bool is set."""
        return Edges(self.target[keep], self.source[keep], self.weight[keep], self.n)

    @staticmethod
    def from_rows(targets: Tensor, cols: Tensor, vals: Tensor, n: int) -> Edges:
        """Rows of kept entries (targets (R,), cols and vals (R, m), col -1 for none) as a list without zeros."""
        t = targets[:, None].expand_as(cols)
        keep = (cols >= 0) & (vals != 0)
        return Edges(t[keep], cols[keep], vals[keep], n)


def strongest(rows: Tensor, m: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each row's `m` largest-magnitude entries: (cols (R, m') long, vals (R, m'), the rest's sum (R,)); m' =
    min(m, columns). Keeping a whole row (m >= columns) is the dense graph exactly."""
    if m >= rows.shape[1]:
        cols = torch.arange(rows.shape[1], device=rows.device).expand(rows.shape[0], -1)
        return cols, rows, torch.zeros(rows.shape[0], dtype=rows.dtype, device=rows.device)
    cols = rows.abs().topk(m, dim=1).indices
    return cols, rows.gather(1, cols), rows.scatter(1, cols, 0.0).sum(1)


__all__ = ["Edges", "strongest"]
