"""Run in circuit-tracer 0.5.0's side environment (tests/compat/circuit_tracer_env.py builds it), never imported by
the project: load a transcoder set saved by `interp.sae.save_transcoders` with circuit-tracer's own loader, build
circuit-tracer's replacement model on an embedded model's weights, and write its attribution graph of each prompt
(safetensors and JSON only) for the project side to compare.

    python circuit_tracer_side.py JOB.json

JOB: {"model_dir", "tl_name" (a TransformerLens official name, or null: the config comes from model_dir),
"tl_overrides" ({field: value} set on the HookedTransformerConfig, each named by the caller with its reason),
"set_dir" (absolute), "variants" (activations: "as_loaded", "topk", "topk_relu"), "k", "prompts" (lists of token
ids), "max_feature_nodes", "batch_size", "node_threshold", "edge_threshold", "out", "load_only", "warm"}.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_hwm() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def load_set(set_dir: str):
    """circuit-tracer's own loader, the directory as it is: `load_transcoder_from_hub` finds an absolute directory
    holding config.yaml as a cached set; and `load_transcoders(config.yaml as read)`, the route that needs the
    layer list (without it: KeyError 'repo_id'). Both must load; the first is used."""
    import torch
    import yaml
    from circuit_tracer.utils.hf_utils import load_transcoder_from_hub, load_transcoders

    tc, config = load_transcoder_from_hub(set_dir, device=torch.device("cpu"), dtype=torch.float32,
                                          lazy_encoder=False, lazy_decoder=False)
    cfg = yaml.safe_load((Path(set_dir) / "config.yaml").read_text())
    other = load_transcoders(cfg, device=torch.device("cpu"), dtype=torch.float32, lazy_encoder=False,
                             lazy_decoder=False) if cfg.get("model_kind") == "transcoder_set" else None
    return tc, config, other


def _own_rope_tables(model) -> dict:
    """circuit-tracer 0.5's `_deduplicate_attention_buffers` gives every layer the last layer's RoPE tables (it
    assumes they are the same everywhere). Gemma 3's local layers rotate with base 10,000 and its global ones with
    1,000,000, so with shared tables its forward is not the model's (the top logits differ by ~10 % relative on
    gemma3-270m). Each layer gets back the tables TransformerLens built for it (its own attention type's base);
    the attention masks stay shared, as circuit-tracer shares them. Returns what was fixed, with the logit
    difference to the unfixed forward."""
    import torch

    cfg = model.cfg
    if cfg.positional_embedding_type != "rotary" or cfg.rotary_base_local is None:
        return {}
    fixed = 0
    for block in model.blocks:
        attn = block.attn
        base = cfg.rotary_base_local if attn.attn_type == "local" else cfg.rotary_base
        sin, cos = attn.calculate_sin_cos_rotary(cfg.rotary_dim, cfg.n_ctx, base=base, dtype=cfg.dtype)
        if not torch.equal(sin, attn.rotary_sin):
            fixed += 1
        attn.rotary_sin, attn.rotary_cos = sin.to(attn.rotary_sin.device), cos.to(attn.rotary_cos.device)
    return {"rope_tables_restored": fixed}


def build_model(job: dict, transcoders):
    """circuit-tracer's TransformerLens replacement model on the weights in job["model_dir"]: what
    `TransformerLensReplacementModel.from_pretrained_and_transcoders` does (HookedTransformer.from_pretrained with
    fold_ln, center_writing_weights and center_unembed off, then `_configure_replacement_model`), with the config
    and the weights given, since TransformerLens lists no SmolLM2 and nothing is downloaded here. A model it lists
    (gemma-3-270m) goes through `ReplacementModel.from_pretrained_and_transcoders` itself, with the HF model given
    and each layer's RoPE tables restored after circuit-tracer shares the last layer's (`_own_rope_tables`)."""
    import torch
    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
    from transformer_lens import loading_from_pretrained as loading
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(job["model_dir"], torch_dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(job["model_dir"])
    if job["tl_name"]:  # a model TransformerLens lists: circuit-tracer's own constructor, the weights given
        from circuit_tracer import ReplacementModel

        model = ReplacementModel.from_pretrained_and_transcoders(
            job["tl_name"], transcoders, backend="transformerlens", hf_model=hf, tokenizer=tok,
            device=torch.device("cpu"), dtype=torch.float32)
        return model.eval(), hf, _own_rope_tables(model)
    name = job["model_dir"]
    cfg = loading.get_pretrained_model_config(name, hf_cfg=hf.config.to_dict(), fold_ln=False, device="cpu",
                                              dtype=torch.float32)
    found = {k: getattr(cfg, k) for k in job["tl_overrides"]}
    for k, v in job["tl_overrides"].items():
        setattr(cfg, k, v)
    model = TransformerLensReplacementModel(cfg, tokenizer=tok)
    state = loading.get_pretrained_state_dict(name, cfg, hf, dtype=torch.float32)
    model.load_and_process_state_dict(state, fold_ln=False, center_writing_weights=False, center_unembed=False)
    model._configure_replacement_model(transcoders)
    model.eval()
    return model, hf, found


def _activation(name: str, k: int, original):
    """The activation a variant gives every layer: as circuit-tracer loaded it, or its own TopK class (a 0/1 mask of
    the k largest pre-activations, negative values kept), or that TopK followed by ReLU (what interp's TopK is)."""
    import torch
    from circuit_tracer.transcoder.activation_functions import TopK

    if name == "as_loaded":
        return original
    if name == "topk":
        return TopK(k)
    if name == "topk_relu":
        return torch.nn.Sequential(TopK(k), torch.nn.ReLU())
    raise ValueError(f"unknown activation variant {name!r}")


def _prune_scores(g, node_threshold: float, edge_threshold: float, node_mask, edge_mask) -> dict:
    """What `prune_graph` decided its masks on, recomputed with its own functions in its own order (it returns only
    the masks): each node's influence and the node threshold's score, each edge's score (dense [target, source],
    among the nodes the node threshold kept) and the edge threshold's score. The project side reads them to tell a
    decision taken within float rounding of a threshold (a tie) from a real difference. Checked: the recomputed
    thresholds give masks that contain prune_graph's (which only drops nodes and edges after them)."""
    import torch
    from circuit_tracer.graph import compute_edge_influence, compute_node_influence, find_threshold

    A = g.adjacency_matrix
    n_tok, n_logit = len(g.input_tokens), len(g.logit_targets)
    w = torch.zeros(A.shape[0], device=A.device)
    w[-n_logit:] = g.logit_probabilities
    node_inf = compute_node_influence(A, w)
    node_cut = find_threshold(node_inf, node_threshold)
    first = node_inf >= node_cut
    first[-n_logit - n_tok:] = True
    pruned = A.clone()
    pruned[~first] = 0
    pruned[:, ~first] = 0
    edge_scores = compute_edge_influence(pruned, w)
    edge_cut = find_threshold(edge_scores.flatten(), edge_threshold)
    consistent = bool((first | ~node_mask.bool()).all() and ((edge_scores >= edge_cut) | ~edge_mask.bool()).all())
    return {"node_influence": node_inf.float().contiguous(), "edge_scores": edge_scores.float().contiguous(),
            "node_cut": float(node_cut), "edge_cut": float(edge_cut), "prune_recomputed_consistent": consistent}


def main(job_path: str) -> None:
    import importlib.metadata as md

    import torch
    from safetensors.torch import save_file

    job = json.loads(Path(job_path).read_text())
    out = Path(job["out"])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    tc, config, other = load_set(job["set_dir"])
    result = {"versions": {p: md.version(p) for p in ("circuit-tracer", "transformers", "transformer-lens", "torch")}}
    act = tc[0].activation_function if hasattr(tc, "transcoders") else None
    result["loaded"] = {"class": type(tc).__name__, "n_layers": len(tc), "d_transcoder": int(tc.d_transcoder),
                        "activation": getattr(act, "__name__", type(act).__name__),
                        "hooks": [tc.feature_input_hook, tc.feature_output_hook],
                        "load_transcoders_route": other is not None, "config_keys": sorted(config)}
    if other is not None:  # the two loading routes give the same weights
        result["loaded"]["routes_agree"] = all(
            torch.equal(a.W_enc, b.W_enc) and torch.equal(a.W_dec, b.W_dec) for a, b in zip(tc, other, strict=True))
    if job.get("load_only"):  # what circuit-tracer read, for the project side to compare with what it saved
        tensors = {}
        for layer, t in enumerate(tc):
            tensors.update({f"{layer}.W_enc": t.W_enc, f"{layer}.W_dec": t.W_dec, f"{layer}.b_enc": t.b_enc,
                            f"{layer}.b_dec": t.b_dec})
            thr = getattr(t.activation_function, "threshold", None)
            if thr is not None:
                tensors[f"{layer}.threshold"] = thr
        save_file({k: v.detach().float().contiguous() for k, v in tensors.items()}, str(out / "loaded.safetensors"))
        (out / "result.json").write_text(json.dumps(result, indent=1))
        return
    from circuit_tracer import attribute
    from circuit_tracer.graph import compute_graph_scores, prune_graph

    originals = [t.activation_function for t in tc]
    model, hf, found = build_model(job, tc)
    result["model_fixes"] = found  # SmolLM2: the config fields overridden (what TL gave); Gemma 3: RoPE tables
    result["graphs"] = {}
    for variant in job["variants"]:
        for t, orig in zip(tc, originals, strict=True):
            t.activation_function = _activation(variant, job["k"], orig)
        graphs = []
        for i, ids in enumerate(job["prompts"]):
            tokens = torch.tensor(ids)
            with torch.no_grad():
                hf_logits = hf(tokens[None]).logits[0, -1].float()
                tl_logits = model(tokens[None])[0, -1].float()
            if float((tl_logits - hf_logits).abs().max() / hf_logits.abs().max()) > 1e-4:
                raise RuntimeError(f"circuit-tracer's model is not the HF model on prompt {i}: logits differ by "
                                   f"{float((tl_logits - hf_logits).abs().max()):.3g}")
            kw = {"max_feature_nodes": job["max_feature_nodes"], "batch_size": job["batch_size"]}
            if job.get("warm"):
                with torch.enable_grad():
                    attribute(tokens, model, **kw)  # the first graph's one-off allocations are not timed
            _reset_hwm()
            before = _hwm_mb()
            t = time.perf_counter()
            with torch.enable_grad():
                g = attribute(tokens, model, **kw)
            secs = time.perf_counter() - t
            peak = _hwm_mb() - before
            node_mask, edge_mask, _ = prune_graph(g, job["node_threshold"], job["edge_threshold"])
            cuts = _prune_scores(g, job["node_threshold"], job["edge_threshold"], node_mask, edge_mask)
            replacement, completeness = compute_graph_scores(g)
            save_file({"adjacency": g.adjacency_matrix.float().contiguous(),
                       "active_features": g.active_features.long().contiguous(),
                       "selected_features": g.selected_features.long().contiguous(),
                       "activation_values": g.activation_values.float().contiguous(),
                       "logit_ids": g.logit_token_ids.long().contiguous(),
                       "logit_probs": g.logit_probabilities.float().contiguous(),
                       "node_mask": node_mask.contiguous(), "edge_mask": edge_mask.contiguous(),
                       "node_influence": cuts.pop("node_influence"), "edge_scores": cuts.pop("edge_scores"),
                       "node_cut": torch.tensor(cuts["node_cut"]), "edge_cut": torch.tensor(cuts["edge_cut"])},
                      str(out / f"graph_{variant}_{i}.safetensors"))
            graphs.append({"seconds": secs, "peak_mb": peak, "replacement_score": float(replacement),
                           "completeness_score": float(completeness), **cuts,
                           "tl_vs_hf_logit_rel": float((tl_logits - hf_logits).abs().max() / hf_logits.abs().max())})
        result["graphs"][variant] = graphs
    (out / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
