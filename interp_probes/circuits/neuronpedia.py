"""A pruned attribution graph in Neuronpedia's graph JSON (the schema of circuit-tracer's
`frontend/graph_models.py` and `utils/create_graph_files.py`, which Neuronpedia's viewer loads).

Node ids follow circuit-tracer: feature "<layer>_<feature>_<pos>", error "0_<layer>_<pos>", embedding
"E_<token>_<pos>", logit "<n_layers + 1>_<token>_<pos>"; `influence` is the node's cumulative influence share, a
feature's `feature` the Cantor pairing of (layer, index). Links carry the raw edge weight, source to target.
"""

from __future__ import annotations

from typing import Any

from .graph import AttributionGraph
from .prune import Pruned


def _cantor(x: int, y: int) -> int:
    return (x + y) * (x + y + 1) // 2 + y


def graph_json(graph: AttributionGraph, pruned: Pruned, str_tokens: list[str], logit_strs: list[str], *,
               slug: str, scan: str, prompt: str, node_threshold: float) -> dict[str, Any]:
    """The document (a dict ready for json.dump)."""
    L, n = graph.n_layers, graph.n_pos
    cum = pruned.cumulative.tolist()
    nodes: dict[int, dict[str, Any]] = {}
    for i in pruned.node_mask.nonzero()[:, 0].tolist():
        if i < graph.n_feat:
            layer, pos, idx = graph.features[i].tolist()
            node = {"node_id": f"{layer}_{idx}_{pos}", "feature": _cantor(layer, idx), "layer": str(layer),
                    "ctx_idx": pos, "feature_type": "cross layer transcoder", "jsNodeId": f"{layer}_{idx}-0",
                    "activation": float(graph.activations[i])}
        elif i < graph.embed_index(0):
            layer, pos = divmod(i - graph.n_feat, n)
            node = {"node_id": f"0_{layer}_{pos}", "feature": -1, "layer": str(layer), "ctx_idx": pos,
                    "feature_type": "mlp reconstruction error", "jsNodeId": f"{layer}_{pos}-0"}
        elif i < graph.logit_index(0):
            pos = i - graph.embed_index(0)
            tok = graph.tokens[pos]
            node = {"node_id": f"E_{tok}_{pos}", "feature": pos, "layer": "E", "ctx_idx": pos,
                    "feature_type": "embedding", "jsNodeId": f"E_{tok}-{pos}"}
        else:
            j = i - graph.logit_index(0)
            tok, prob = int(graph.logit_tokens[j]), float(graph.logit_probs[j])
            node = {"node_id": f"{L + 1}_{tok}_{n - 1}", "feature": tok, "layer": str(L + 1), "ctx_idx": n - 1,
                    "feature_type": "logit", "token_prob": prob, "is_target_logit": j == 0,
                    "jsNodeId": f"L_{tok}-{n - 1}", "clerp": f'Output "{logit_strs[j]}" (p={prob:.3f})'}
        node.setdefault("token_prob", 0.0)
        node.setdefault("is_target_logit", False)
        node.setdefault("clerp", "")
        node.update(run_idx=0, reverse_ctx_idx=0, influence=cum[i])
        nodes[i] = node
    kept = graph.edges.select(pruned.edge_mask)
    links = [{"source": nodes[s]["node_id"], "target": nodes[d]["node_id"], "weight": w}
             for s, d, w in zip(kept.source.tolist(), kept.target.tolist(), kept.weight.tolist(), strict=True)
             if s in nodes and d in nodes]
    used = {x for link in links for x in (link["source"], link["target"])}
    kept = [v for v in nodes.values() if v["node_id"] in used or v["feature_type"] in ("embedding", "logit")]
    meta = {"slug": slug, "scan": scan, "transcoder_list": [], "prompt_tokens": str_tokens, "prompt": prompt,
            "node_threshold": node_threshold, "schema_version": 1}
    qparams = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": meta, "qParams": qparams, "nodes": kept, "links": links}


__all__ = ["graph_json"]
