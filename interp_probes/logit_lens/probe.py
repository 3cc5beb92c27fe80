"""Logit lens (nostalgebraist 2020): read the residual stream after every layer as if it were
the last one, i.e. logits_l = W_U · norm(resid_post_l)."""

from __future__ import annotations

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp import run_with_cache
from interp.context import RunContext
from interp.errors import ConfigError
from interp.sites import Site

from . import LogitLensConfig


def run(cfg: LogitLensConfig, ctx: RunContext) -> None:
    model = ctx.model
    text = model.chat_text(cfg.prompt) if cfg.chat else cfg.prompt
    enc = model.tokenize(text, templated=cfg.chat)
    n_tok = enc["input_ids"].shape[1]
    if n_tok > cfg.max_tokens:
        raise ConfigError("prompt", f"<{n_tok} tokens>", f"at most max_tokens={cfg.max_tokens} tokens")

    resid = read_residuals(model, enc)  # 1. measure
    probs = decode(model, resid)  # 2. decode
    ctx.check_finite("logit-lens probabilities", probs)
    final_ids = probs[-1].argmax(-1)  # the model's own prediction
    ranks = rank_of(probs, final_ids)  # 3. compare
    top_p, top_i = probs.topk(cfg.top_k, dim=-1)

    tokens = model.to_str_tokens(enc["input_ids"][0])
    ctx.save_tensors(
        "lens",
        {
            "topk_ids": top_i,
            "topk_probs": top_p,
            "final_rank": ranks,
            "final_prob": probs.gather(-1, final_ids.expand(probs.shape[0], -1)[..., None])[..., 0],
        },
    )
    ctx.save_table("tokens", pd.DataFrame({"position": range(len(tokens)), "token": tokens}))
    ctx.save_table("topk", topk_frame(model, top_i, top_p))
    ctx.log_metrics(**summarize(model, ranks, final_ids), n_tokens=n_tok)


def read_residuals(model, enc) -> Float[Tensor, "layer pos d_model"]:
    sites = [Site("resid_post", layer) for layer in range(model.info.n_layers)]
    _, cache = run_with_cache(model, enc["input_ids"], enc["attention_mask"], sites)
    return torch.stack([cache[s][0] for s in sites])


@torch.no_grad()
def decode(model, resid: Float[Tensor, "layer pos d_model"]) -> Float[Tensor, "layer pos d_vocab"]:
    return model.unembed(resid).float().softmax(-1)


def rank_of(probs: Float[Tensor, "layer pos vocab"], ids: Tensor) -> Tensor:
    """Rank (0 = top) of token ids[pos] in each layer's distribution at pos: (layer, pos)."""
    target = probs.gather(-1, ids.expand(probs.shape[0], -1)[..., None])  # (layer, pos, 1)
    return (probs > target).sum(-1)


def topk_frame(model, top_i: Tensor, top_p: Tensor) -> pd.DataFrame:
    L, P, K = top_i.shape
    rows = [
        {
            "layer": layer,
            "position": pos,
            "k": k,
            "token": model.tokenizer.decode([int(top_i[layer, pos, k])]),
            "prob": float(top_p[layer, pos, k]),
        }
        for layer in range(L)
        for pos in range(P)
        for k in range(K)
    ]
    return pd.DataFrame(rows)


def summarize(model, ranks: Tensor, final_ids: Tensor) -> dict:
    last = ranks[:, -1]
    hits = (last == 0).nonzero()
    return {
        "final_top1": model.tokenizer.decode([int(final_ids[-1])]),
        "first_layer_final_top1": int(hits[0]) if len(hits) else None,
        "final_rank_by_layer": last.tolist(),
    }
