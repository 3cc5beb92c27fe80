"""Testing a graph by intervening on the real model: ablate features, compare the predicted and observed change.

Prediction (the graph's): ablating a set S changes its features' activations by -a_s; every other attributed
feature t moves by its change in input, sum_s (A[t, s] / a_s) delta_s (A's columns carry the source's
activation, and a JumpReLU / TopK feature above its threshold moves one for one with its pre-activation), but
not below zero (it turns off), solved layer by layer; the logit node moves by sum_s (A[logit, s] / a_s)
delta_s. Error nodes and embeddings stay fixed, as in the replacement model.

Observation (the model's): the real model, with the ablated features' decoder vectors times their activations
subtracted from the MLP outputs they write to, at their positions, and everything downstream recomputed by the
real MLPs. Two ways: with attention patterns and norm denominators frozen at the prompt's values (what the
graph assumes) and unfrozen (what the model really does). The measured quantity is the logit node's input: the
final residual (after the final norm) read along the token's demeaned unembedding.

Controls: the same number of random active features, and the top features by activation alone.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp.replacement import frozen
from interp.sae import Transcoders
from interp.sites import Site

from .graph import AttributionGraph, Prompt
from .prune import influence

SELECTIONS = ("graph", "random", "activation")


def feature_influence(graph: AttributionGraph, node: int) -> Tensor:
    """(n_feat,) each feature's indirect influence on node `node` (circuit-tracer's normalised |A| walk)."""
    w = torch.zeros(graph.n_nodes)
    w[node] = 1.0
    return influence(graph.edges.normalized(), w)[: graph.n_feat]


def predict(graph: AttributionGraph, chosen: Tensor, node: int) -> float:
    """The change of node `node`'s input the graph predicts when the features `chosen` (row indices) are ablated."""
    a, F = graph.activations.float(), graph.n_feat
    E = graph.edges
    E = E.select(E.source < F)  # edges from features, per unit of each source feature's activation:
    E = type(E)(E.target, E.source, E.weight / a[E.source].clamp_min(1e-30), E.n)
    delta = torch.zeros(F)
    delta[chosen] = -a[chosen]

    def step(d: Tensor) -> Tensor:  # (F,) feature changes -> (n_nodes,) changes of every target's input
        return E.right(torch.nn.functional.pad(d, (0, E.n - F)))

    for _ in range(graph.n_layers + 1):  # features read only earlier layers: the walk settles within n_layers steps
        new = step(delta)[:F].clamp_min(-a)  # an activation cannot fall below zero (the feature turns off)
        new[chosen] = -a[chosen]
        if torch.equal(new, delta):
            break
        delta = new
    return float(step(delta)[node])


@torch.no_grad()
def observe(model, tc: Transcoders, p: Prompt, sets: list[tuple[Tensor, Tensor]], vec: Tensor,
            freeze: bool) -> list[float]:
    """For each set of features ((k, 3): layer, pos, index; and their activations), the change of <final residual
    at the last position, vec> in the real model when they are removed from the MLP outputs they write to. One
    batched forward: row 0 is the clean prompt, row i + 1 has set i removed."""
    deltas: dict[int, list[tuple[int, int, Tensor]]] = {}  # output layer -> (batch row, pos, delta)
    for row, (feats, acts) in enumerate(sets, start=1):
        for (layer, pos, idx), a in zip(feats.tolist(), acts.tolist(), strict=True):
            for out in tc.out_layers(layer):
                deltas.setdefault(out, []).append((row, pos, -a * tc.dec(layer, out)[idx]))

    def edit(out):
        def hook(y):
            y = y.clone()
            for row, pos, d in deltas[out]:
                y[row, pos] += d.to(y.dtype)
            return y
        return hook

    box: dict[str, Tensor] = {}
    final = (Site("final"), lambda f: box.__setitem__("f", f[:, -1].float()))
    ids = p.ids.to(model.device).expand(len(sets) + 1, -1)
    with frozen(model, p.fz) if freeze else nullcontext(), \
            model.hooks([final] + [(Site("mlp_out", out), edit(out)) for out in deltas]):
        model(ids)
    change = (box["f"][1:] - box["f"][:1]) @ vec.float()
    return change.tolist()


def choose(graph: AttributionGraph, how: str, k: int, node: int, gen: torch.Generator) -> Tensor:
    """k feature rows: by influence on `node` (graph), uniformly among the active ones (random), or by activation."""
    k = min(k, graph.n_feat)
    if how == "graph":
        return feature_influence(graph, node).topk(k).indices
    if how == "random":
        return torch.randperm(graph.n_feat, generator=gen)[:k]
    return graph.activations.topk(k).indices


def ablation_rows(model, tc: Transcoders, graph: AttributionGraph, p: Prompt, ks: tuple[int, ...],
                  gen: torch.Generator, prompt_id: int) -> list[dict]:
    """One row per (k, selection): predicted and observed (frozen, unfrozen) change of the top logit's node."""
    node = graph.logit_index(0)
    vec = p.logit_vecs[0]
    rows, sets = [], []
    for k in ks:
        for how in SELECTIONS:
            chosen = choose(graph, how, k, node, gen)
            sets.append((graph.features[chosen], graph.activations[chosen]))
            rows.append({"prompt": prompt_id, "k": int(k), "selection": how, "n_features": int(len(chosen)),
                         "predicted": predict(graph, chosen, node)})
    for col, freeze in (("observed_frozen", True), ("observed", False)):
        for r, v in zip(rows, observe(model, tc, p, sets, vec, freeze), strict=True):
            r[col] = v
    return rows


def faithfulness(rows: pd.DataFrame) -> dict[str, float]:
    """Spearman's rho between predicted and observed changes (the graph's choices; and every row), the mean
    |observed change| per selection, and how often the graph's choice moves the logit more than each control."""
    from scipy.stats import spearmanr

    out: dict[str, float] = {}
    g = rows[rows.selection == "graph"]

    def rho(part: pd.DataFrame, col: str) -> float:
        ok = part[np.isfinite(part[col])]
        if len(ok) < 3 or ok.predicted.nunique() < 2 or ok[col].nunique() < 2:
            return float("nan")  # undefined (a constant side)
        return float(spearmanr(ok.predicted, ok[col]).statistic)

    for col, name in (("observed", ""), ("observed_frozen", "_frozen")):
        out[f"spearman_graph{name}"] = rho(g, col)
        out[f"spearman_all{name}"] = rho(rows, col)
    # with the norm denominators frozen, a large ablation can push a later MLP's input far off its scale until it
    # overflows; such rows are left out of the frozen statistics and counted
    out["n_frozen_nonfinite"] = int((~np.isfinite(rows.observed_frozen)).sum())
    for how in SELECTIONS:
        out[f"mean_abs_observed_{how}"] = float(rows[rows.selection == how].observed.abs().mean())
    wide = rows.pivot_table(index=["prompt", "k"], columns="selection", values="observed", aggfunc="first").abs()
    for ctrl in ("random", "activation"):
        out[f"graph_beats_{ctrl}"] = float(np.mean(wide["graph"] > wide[ctrl])) if len(wide) else float("nan")
    return out


__all__ = ["SELECTIONS", "ablation_rows", "choose", "faithfulness", "feature_influence", "observe", "predict"]
