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

from .edges import Edges


def normalize(A: Tensor) -> Tensor:
    """A dense |A| with rows summing to 1 (`Edges.normalized` is the graph's own)."""
    a = A.abs()
    return a / a.sum(1, keepdim=True).clamp_min(1e-10)


def influence(A: Tensor | Edges, weights: Tensor, max_iter: int = 1000) -> Tensor:
    """weights @ (A + A^2 + ...), by repeated products until the (nilpotent) walk dies out; A dense or an edge list."""
    step = A.left if isinstance(A, Edges) else (lambda x: x @ A)
    cur = step(weights)
    total = cur.clone()
    for _ in range(max_iter):
        if not cur.any():
            return total
        cur = step(cur)
        total += cur
    raise RuntimeError(f"influence did not converge in {max_iter} products (is the graph cyclic?)")


def partial_influence(rows: Edges, logit_p: Tensor, max_iter: int = 128) -> Tensor:
    """Influence on the logits (the last len(logit_p) nodes) through the rows computed so far (edges into the
    nodes that have rows): circuit-tracer's `compute_partial_influences`, used to choose which features get rows
    next."""
    norm = rows.normalized()
    prod = torch.zeros(rows.n, device=logit_p.device)
    prod[-len(logit_p):] = logit_p
    out = torch.zeros(rows.n, device=logit_p.device)
    for _ in range(max_iter):
        prod = norm.left(prod)
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
    """(E,) bool over the graph's edge list (`graph.edges`): the edges kept."""
    node_influence: Tensor
    """Each node's influence on the probability-weighted logits (unpruned graph)."""
    cumulative: Tensor
    """Each node's cumulative share of the total influence when sorted (circuit-tracer's `cumulative_scores`)."""
    edge_score: Tensor
    """(E,) each edge's score for the edge threshold (influence-weighted normalised weight among the nodes the node
    threshold kept; 0 for an edge outside them)."""
    node_cut: float
    """The node threshold's score: nodes with influence >= it were kept before the no-edge drops."""
    edge_cut: float
    """The edge threshold's score: edges with `edge_score` >= it were kept before the no-edge drops."""


def logit_weights(graph) -> Tensor:
    w = torch.zeros(graph.n_nodes)
    w[graph.logit_index(0):] = graph.logit_probs
    return w


def prune(graph, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> Pruned:
    """circuit-tracer's `prune_graph` on `graph` (an `AttributionGraph`), over its edge list."""
    if not (0 <= node_threshold <= 1 and 0 <= edge_threshold <= 1):
        raise ValueError("prune: thresholds must be in [0, 1]")
    E = graph.edges
    n_logit, n_tok, n_feat = graph.n_logit, graph.n_pos, graph.n_feat
    w = logit_weights(graph)
    node_inf = influence(E.normalized(), w)
    node_cut = threshold_for(node_inf, node_threshold)
    node_mask = node_inf >= node_cut
    node_mask[-n_logit - n_tok:] = True
    inside = node_mask[E.target] & node_mask[E.source]
    norm = E.select(inside).normalized()
    edge_scores = norm.weight * (influence(norm, w) + w)[norm.target]
    edge_cut = threshold_for(edge_scores, edge_threshold)
    edge_mask = torch.zeros(len(E), dtype=torch.bool)
    at = inside.nonzero()[:, 0]
    edge_mask[at] = edge_scores >= edge_cut
    edge_score = torch.zeros(len(E), dtype=edge_scores.dtype, device=edge_scores.device)
    edge_score[at] = edge_scores
    sources = slice(None, -n_logit - n_tok)  # features and errors: dropped when they send nothing kept
    while True:
        old = node_mask.clone()
        sends = torch.zeros_like(node_mask).index_fill_(0, E.source[edge_mask], True)
        gets = torch.zeros_like(node_mask).index_fill_(0, E.target[edge_mask], True)
        node_mask[sources] &= sends[sources]
        node_mask[:n_feat] &= gets[:n_feat]
        edge_mask &= node_mask[E.target] & node_mask[E.source]
        if torch.equal(node_mask, old):
            break
    s, i = node_inf.sort(descending=True)
    cum = torch.zeros_like(node_inf)
    cum[i] = s.cumsum(0) / s.sum().clamp_min(1e-30)
    return Pruned(node_mask=node_mask, edge_mask=edge_mask, node_influence=node_inf, cumulative=cum,
                  edge_score=edge_score, node_cut=float(node_cut), edge_cut=float(edge_cut))


def scores(graph) -> tuple[float, float]:
    """circuit-tracer's replacement score (token-to-logit influence through features rather than errors) and
    completeness score (influence-weighted share of non-error inputs)."""
    n_feat, n_tok, L = graph.n_feat, graph.n_pos, graph.n_layers
    e0, e1 = n_feat, n_feat + n_tok * L
    w = logit_weights(graph)
    norm = graph.edges.normalized()
    inf = influence(norm, w)
    tok, err = inf[e1 : e1 + n_tok].sum(), inf[e0:e1].sum()
    replacement = float(tok / (tok + err).clamp_min(1e-30))
    from_errors = (norm.source >= e0) & (norm.source < e1)
    non_err = 1 - norm.select(from_errors).row_sums()
    out = inf + w
    return replacement, float((non_err * out).sum() / out.sum())


__all__ = ["Pruned", "influence", "normalize", "partial_influence", "prune", "scores", "threshold_for"]
