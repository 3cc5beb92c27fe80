"""Pruning an attribution graph by indirect influence on the logits (circuit-tracer's `graph.py`, same maths).

Rows of |A| are normalised to sum to 1; the indirect influence is B = A + A^2 + ... (= (I - A)^-1 - I on the
acyclic graph), and a node's score is its influence on the logit nodes weighted by their probabilities. Keep the
fewest nodes holding `node_threshold` of the total (embeddings and logits always), then the fewest edges holding
`edge_threshold` of the edge scores, then drop, until nothing changes, features and errors left without an
outgoing edge and features left without an incoming one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def normalize(A: Tensor) -> Tensor:
    a = A.abs()
    return a / a.sum(1, keepdim=True).clamp_min(1e-10)


def influence(A: Tensor, weights: Tensor, max_iter: int = 1000) -> Tensor:
    """weights @ (A + A^2 + ...), by repeated products until the (nilpotent) walk dies out."""
    cur = weights @ A
    total = cur.clone()
    for _ in range(max_iter):
        if not cur.any():
            return total
        cur = cur @ A
        total += cur
    raise RuntimeError(f"influence did not converge in {max_iter} products (is the graph cyclic?)")


def partial_influence(rows: Tensor, logit_p: Tensor, row_nodes: Tensor, n_nodes: int, max_iter: int = 128) -> Tensor:
    """Influence on the logits from the rows computed so far (`rows[i]` is node `row_nodes[i]`'s incoming edges):
    circuit-tracer's `compute_partial_influences`, used to choose which features get rows next."""
    norm = normalize(rows)
    prod = torch.zeros(n_nodes, device=rows.device)
    prod[-len(logit_p):] = logit_p
    out = torch.zeros(n_nodes, device=rows.device)
    for _ in range(max_iter):
        prod = prod[row_nodes] @ norm
        if not prod.any():
            break
        out += prod
    return out


def threshold_for(scores: Tensor, keep: float) -> Tensor:
    """The score above which the sorted scores hold `keep` of their total (circuit-tracer's find_threshold)."""
    s = scores.flatten().sort(descending=True).values
    cum = s.cumsum(0) / s.sum().clamp_min(1e-30)
    i = min(int(torch.searchsorted(cum, torch.tensor(keep, dtype=cum.dtype, device=cum.device))), len(s) - 1)
    return s[i]


@dataclass(frozen=True)
class Pruned:
    node_mask: Tensor
    edge_mask: Tensor
    node_influence: Tensor
    """Each node's influence on the probability-weighted logits (unpruned graph)."""
    cumulative: Tensor
    """Each node's cumulative share of the total influence when sorted (circuit-tracer's `cumulative_scores`)."""


def logit_weights(graph) -> Tensor:
    w = torch.zeros(graph.n_nodes)
    w[graph.logit_index(0):] = graph.logit_probs
    return w


def prune(graph, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> Pruned:
    """circuit-tracer's `prune_graph` on `graph` (an `AttributionGraph`)."""
    if not (0 <= node_threshold <= 1 and 0 <= edge_threshold <= 1):
        raise ValueError("prune: thresholds must be in [0, 1]")
    A = graph.adjacency
    n_logit, n_tok, n_feat = graph.n_logit, graph.n_pos, graph.n_feat
    w = logit_weights(graph)
    node_inf = influence(normalize(A), w)
    node_mask = node_inf >= threshold_for(node_inf, node_threshold)
    node_mask[-n_logit - n_tok:] = True
    pruned = A.clone()
    pruned[~node_mask] = 0
    pruned[:, ~node_mask] = 0
    norm = normalize(pruned)
    edge_scores = norm * (influence(norm, w) + w)[:, None]
    edge_mask = edge_scores >= threshold_for(edge_scores, edge_threshold)
    old = node_mask.clone()
    node_mask[: -n_logit - n_tok] &= edge_mask[:, : -n_logit - n_tok].any(0)
    node_mask[:n_feat] &= edge_mask[:n_feat].any(1)
    while not torch.equal(node_mask, old):
        old = node_mask.clone()
        edge_mask[~node_mask] = False
        edge_mask[:, ~node_mask] = False
        node_mask[: -n_logit - n_tok] &= edge_mask[:, : -n_logit - n_tok].any(0)
        node_mask[:n_feat] &= edge_mask[:n_feat].any(1)
    s, i = node_inf.sort(descending=True)
    cum = torch.zeros_like(node_inf)
    cum[i] = s.cumsum(0) / s.sum().clamp_min(1e-30)
    return Pruned(node_mask=node_mask, edge_mask=edge_mask, node_influence=node_inf, cumulative=cum)


def scores(graph) -> tuple[float, float]:
    """circuit-tracer's replacement score (token-to-logit influence through features rather than errors) and
    completeness score (influence-weighted share of non-error inputs)."""
    n_feat, n_tok, L = graph.n_feat, graph.n_pos, graph.n_layers
    e0, e1 = n_feat, n_feat + n_tok * L
    w = logit_weights(graph)
    norm = normalize(graph.adjacency)
    inf = influence(norm, w)
    tok, err = inf[e1 : e1 + n_tok].sum(), inf[e0:e1].sum()
    replacement = float(tok / (tok + err).clamp_min(1e-30))
    non_err = 1 - norm[:, e0:e1].sum(-1)
    out = inf + w
    return replacement, float((non_err * out).sum() / out.sum())


__all__ = ["Pruned", "influence", "normalize", "partial_influence", "prune", "scores", "threshold_for"]
