"""Self-interpretation adapters (Pepper et al. 2026): train tiny adapters that map an internal vector
into the frozen model's input-embedding space, let the model say what the vector means, and score
its labels by retrieval against all topics; compare adapter sizes, controls and the logit-lens echo.

Method: ../shared/methods/self_interp.md (arXiv 2602.10352).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from interp.context import RunContext

from . import SelfInterpConfig, sweep_layers
from .artifacts import save_adapters, save_vectors, topics_frame
from .inject import build_template, inject
from .state import Experiment, LayerResult
from .summary import summarize, timings
from .topics import Topic, load_topics, split_topics
from .vectors import topic_vectors


def run(cfg: SelfInterpConfig, ctx: RunContext) -> None:
    model = ctx.model
    t0 = time.perf_counter()
    layer = cfg.resolved_layer(model.info.n_layers)
    layers = sorted({layer, *sweep_layers(cfg.layer_sweep, model.info.n_layers)})
    with ctx.weights_unchanged("training the adapters"):  # 5. the LM is untouched
        topics, split = choose_topics(cfg)  # 1. data: topics, template, vectors
        tmpl = build_template(model, cfg.placeholder, cfg.template_system)
        vecs, means = topic_vectors(model, [t.topic for t in topics], layers, cfg.extract_batch, ctx.tqdm)
        for lay, v in vecs.items():
            ctx.check_finite(f"topic vectors at layer {lay}", v)
        exp = Experiment.create(model, cfg, ctx, topics, split, tmpl)
        extract_s = time.perf_counter() - t0

        main = exp.fit_and_evaluate(vecs[layer], layer, cfg.variants)  # 2. adapters at the main layer
        controls = exp.controls(vecs[layer], layer, main)  # 3. shuffled labels, token embeddings
        sweep = [main if lay == layer else exp.fit_and_evaluate(vecs[lay], lay, ("identity", "scalar_affine"),
                                                                train_recall=False)
                 for lay in layers]  # 4. recall by layer

    save_vectors(ctx, vecs[layer], means[layer], controls, layer, tmpl)
    ctx.save_table("topics", topics_frame(topics, split, exp))
    save_adapters(ctx, main, controls, sweep, layer, tmpl)
    ctx.save_table("scale_sweep", pd.concat([r.scale_frame() for r in sweep], ignore_index=True))
    ctx.save_table("train_curves", pd.concat([r.curves for r in [*sweep, controls]], ignore_index=True))
    ctx.save_table("generations", pd.concat([r.generations for r in [*sweep, controls]], ignore_index=True))
    ctx.save_table("recall", pd.concat([r.recall for r in [*sweep, controls]], ignore_index=True))
    if "bias_only" in main.adapters or "scalar_affine" in main.adapters:
        ctx.save_table("bias_probe", bias_probe(exp, main))
    if cfg.sae_on:  # 6. SAE decoder rows (optional)
        from .sae_branch import run_sae_branch

        ctx.save_table("sae_branch", run_sae_branch(exp, main, cfg, ctx))
    ctx.log_metrics(**summarize(exp, main, controls, sweep, layer))
    ctx.log_timings(**timings(main, controls, sweep, extract_s))


# ============================================================================= data


def choose_topics(cfg: SelfInterpConfig) -> tuple[list[Topic], list[str]]:
    """Kept topics and their split: heldout (stratified by category), val (a share of the rest), train."""
    topics, split = split_topics(load_topics(cfg.topics_file), cfg.heldout_frac, cfg.topic_cap, seed=cfg.seed)
    train_idx = [i for i, s in enumerate(split) if s == "train"]
    rng = np.random.default_rng([cfg.seed, 1])
    n_val = max(1, round(cfg.val_frac * len(train_idx)))
    for i in rng.permutation(train_idx)[:n_val]:
        split[int(i)] = "val"
    return topics, split


@torch.no_grad()
def bias_probe(exp: Experiment, main: LayerResult, top: int = 20) -> pd.DataFrame:
    """What the learned bias alone switches on: the next-token distribution after the template when
    b is injected with no vector, and the tokens whose embeddings lie nearest to b."""
    model, tmpl = exp.model, exp.tmpl
    ad = main.adapters.get("scalar_affine") or main.adapters["bias_only"]
    b = ad.bias.detach()[None].to(model.device)
    emb = inject(model, torch.tensor([tmpl.ids], device=model.device), b, tmpl.positions)
    logits = model.hf(inputs_embeds=emb, logits_to_keep=1).logits[0, -1].float()
    top_l, top_i = logits.topk(top)
    w = model.hf.get_input_embeddings().weight  # cosine ignores Gemma's constant embedding scale
    rows = [{"kind": "next_token", "variant": ad.variant, "token": model.tokenizer.decode([int(i)]), "logit": float(v),
             "bias_norm": float(b.norm())} for v, i in zip(top_l.tolist(), top_i.tolist())]
    cos = (w @ b[0].to(w.dtype)).float() / (w.float().norm(dim=-1) * b.float().norm()).clamp_min(1e-8)
    c_v, c_i = cos.topk(top)
    rows += [{"kind": "nearest_embedding", "variant": ad.variant, "token": model.tokenizer.decode([int(i)]),
              "logit": float(v), "bias_norm": float(b.norm())} for v, i in zip(c_v.tolist(), c_i.tolist())]
    return pd.DataFrame(rows)
