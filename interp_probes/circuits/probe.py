"""circuits: train (or load) transcoders, draw a prompt's attribution graph, prune it, check it, test it.

The story of `run`: the transcoders replace the MLPs (trained on the model's own MLP inputs and outputs, cached);
their quality is measured as SAELens measures a transcoder; the headline prompt's graph is computed with frozen
attention and norms, checked for exactness (replacement + errors = the real logits; every node's input = its
incoming edges + bias), pruned by influence and written in Neuronpedia's JSON; then, on `n_prompts` more prompts,
features chosen by the graph, at random and by activation are ablated in the real model, and the changes the
graph predicts are compared with the ones observed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from interp.context import RunContext
from interp.errors import NumericError

from . import CircuitsConfig
from .checks import exactness
from .graph import AttributionGraph, attribute_prepared, prepare
from .interventions import ablation_rows, faithfulness
from .neuronpedia import graph_json
from .prompts import prompts
from .prune import prune, scores
from .transcoders import chunks, feature_logits, obtain, quality, top_contexts


def run(cfg: CircuitsConfig, ctx: RunContext) -> None:
    model = ctx.model
    train_ids, eval_ids = chunks(model, cfg)                                # 1. text
    with ctx.timed("transcoders"):
        tc, how = obtain(model, cfg, train_ids, ctx.progress)               # 2. the replacement's MLPs
    ctx.log_metrics(transcoders_from_cache=how["from_cache"], transcoder_kind=tc.spec.kind,
                    d_transcoder=tc.spec.d_transcoder)
    ctx.log_timings(transcoder_train_s=how.get("train_seconds"))
    with ctx.timed("quality"):
        table, q = quality(model, tc, eval_ids)                             # 3. FVE, L0, dead, spliced loss
    ctx.save_table("transcoder_quality", table)
    ctx.log_metrics(**q)
    ids = prompt_ids(model, cfg.prompt)
    with ctx.timed("graph"):                                                # 4. the headline graph
        p = prepare(model, tc, ids, cfg.desired_logit_prob, cfg.max_n_logits, cfg.bos_error)
        graph = attribute_prepared(model, tc, p, max_feature_nodes=cfg.max_feature_nodes, **sizes(cfg))
        ex = exactness(model, tc, p)
        pruned = prune(graph, cfg.node_threshold, cfg.edge_threshold)
    replacement_score, completeness_score = scores(graph)
    ctx.log_metrics(**ex, completeness_rel_err=graph.completeness_error(), n_active_features=graph.n_active,
                    n_attributed_features=graph.n_feat, n_nodes=graph.n_nodes,
                    n_pruned_nodes=int(pruned.node_mask.sum()), n_pruned_edges=int(pruned.edge_mask.sum()),
                    replacement_score=replacement_score, completeness_score=completeness_score,
                    top_token=model.to_str_tokens([int(graph.logit_tokens[0])])[0],
                    top_prob=float(graph.logit_probs[0]))
    save_graph(ctx, model, cfg, graph, pruned)
    if cfg.n_prompts:                                                       # 5. ablations that test graphs
        with ctx.timed("faithfulness"):
            rows = test_prompts(model, tc, cfg, ctx.torch_rng)
        ctx.save_table("ablations", rows)
        ctx.log_metrics(**faithfulness(rows), n_faithfulness_prompts=int(rows.prompt.nunique()))
    with ctx.timed("contexts"):                                             # 6. what the kept features read
        kept = sorted({(int(graph.features[i, 0]), int(graph.features[i, 2]))
                       for i in pruned.node_mask[: graph.n_feat].nonzero()[:, 0].tolist()})
        ctx.save_table("feature_contexts", top_contexts(model, tc, eval_ids, kept, cfg.n_contexts))
        ctx.save_table("feature_logits", feature_logits(model, tc, kept))


def sizes(cfg: CircuitsConfig) -> dict:
    """The graph's batch and edge budgets."""
    return {"batch_size": cfg.batch_size, "batch_tokens": cfg.batch_tokens, "max_edges_per_row": cfg.max_edges_per_row}


def prompt_ids(model, text: str) -> torch.Tensor:
    """(1, pos) ids of `text` after one special token (BOS, else EOS), whose position carries no features."""
    tok = model.tokenizer
    first = next((t for t in (model.info.bos_id, tok.bos_token_id, tok.eos_token_id) if t is not None), None)
    body = tok(text, add_special_tokens=False)["input_ids"]
    if first is not None and (not body or body[0] != first):
        body = [first] + body
    return torch.tensor([body])


def test_prompts(model, tc, cfg: CircuitsConfig, gen: torch.Generator) -> pd.DataFrame:
    rows = []
    for i, text in enumerate(prompts(cfg.n_prompts, cfg.seed)):
        ids = prompt_ids(model, text)
        p = prepare(model, tc, ids, cfg.desired_logit_prob, cfg.max_n_logits, cfg.bos_error)
        g = attribute_prepared(model, tc, p, max_feature_nodes=cfg.test_max_feature_nodes, **sizes(cfg))
        if g.n_feat == 0:
            continue
        for r in ablation_rows(model, tc, g, p, cfg.ablate_k, gen, i):
            rows.append({"text": text, **r})
    out = pd.DataFrame(rows)
    if len(out) and not np.isfinite(out[["predicted", "observed"]].to_numpy()).all():
        raise NumericError("circuits: a predicted or observed (real model) logit change is NaN or inf")
    return out


def save_graph(ctx: RunContext, model, cfg: CircuitsConfig, graph: AttributionGraph, pruned) -> None:
    """The graph as tables (nodes, edges of the pruned graph), its tensors, and Neuronpedia's JSON."""
    str_tokens = model.to_str_tokens(graph.tokens)
    logit_strs = model.to_str_tokens(graph.logit_tokens.tolist())
    ctx.save_tensors("graph", {"edge_index": torch.stack([graph.edges.target, graph.edges.source]),
                               "edge_weight": graph.edges.weight, "unattributed": graph.unattributed,
                               "features": graph.features,
                               "activations": graph.activations, "inputs": graph.inputs, "bias": graph.bias,
                               "node_mask": pruned.node_mask, "edge_mask": pruned.edge_mask,
                               "influence": pruned.node_influence, "logit_tokens": graph.logit_tokens,
                               "logit_probs": graph.logit_probs, "tokens": torch.tensor(graph.tokens)})
    ctx.save_json("graph_meta", {"n_layers": graph.n_layers, "n_pos": graph.n_pos, "n_feat": graph.n_feat,
                                 "n_nodes": graph.n_nodes, "n_active": graph.n_active,
                                 "str_tokens": str_tokens, "logit_strs": logit_strs, "prompt": cfg.prompt})
    ctx.save_json("neuronpedia_graph", graph_json(
        graph, pruned, str_tokens, logit_strs, slug=f"interp-{model.info.name}", scan=f"{model.info.name}-"
        f"{cfg.kind}-{cfg.d_transcoder}", prompt=cfg.prompt, node_threshold=cfg.node_threshold))
