"""The vectors to describe: topic vectors (residual after block `layer` at the last token of the
chat-formatted "Tell me about {topic}." minus the mean over all topics), token-embedding vectors
(the positive control) and their logit-lens readout (the token-echo baseline).

The mean is taken over all topics, held-out ones included: a small, documented leak; a per-split
mean would be worse (it would differ between train and test).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from interp import run_with_cache
from interp.sites import Site

from .inject import topic_prompt


@torch.no_grad()
def prompt_vectors(model, prompts: Sequence[str], layers: Sequence[int], batch_size: int = 32,
                   templated: bool = True, progress=None) -> dict[int, Float[Tensor, "n d"]]:
    """Residual after each block in `layers` (resid_post) at each prompt's last token, float32 on the CPU.

    Right padding keeps the real tokens' positions. Below the last layer this reads the plain HF
    model's hidden_states[l + 1] (= blocks.l.hook_resid_post; only the last position's logits are
    computed); the last layer's HF state is already normed, so it is read through the hooked site.
    """
    out: dict[int, list[Tensor]] = {layer: [] for layer in layers}
    use_hf = max(layers) < model.info.n_layers - 1
    starts = range(0, len(prompts), batch_size)
    for i in progress(starts, desc="topic vectors") if progress else starts:
        enc = model.tokenize(list(prompts[i : i + batch_size]), padding_side="right", templated=templated)
        last = enc["attention_mask"].sum(1) - 1  # (b,)
        rows = torch.arange(last.shape[0], device=last.device)
        if use_hf:
            hs = model.hf(**enc, output_hidden_states=True, use_cache=False, logits_to_keep=1).hidden_states
            acts = {layer: hs[layer + 1] for layer in layers}
        else:
            sites = {layer: Site("resid_post", layer) for layer in layers}
            _, cache = run_with_cache(model, enc["input_ids"], enc["attention_mask"], list(sites.values()))
            acts = {layer: cache[site] for layer, site in sites.items()}
        for layer, act in acts.items():  # (b, pos, d)
            out[layer].append(act[rows, last].float().cpu())
    return {layer: torch.cat(v) for layer, v in out.items()}


def topic_vectors(model, topics: Sequence[str], layers: Sequence[int], batch_size: int = 32,
                  progress=None) -> tuple[dict[int, Tensor], dict[int, Tensor]]:
    """({layer: centred vectors (n, d)}, {layer: mean (d,)}) for the topic prompts."""
    prompts = [topic_prompt(model, t) for t in topics]
    raw = prompt_vectors(model, prompts, layers, batch_size, templated=model.info.chat, progress=progress)
    means = {layer: v.mean(0) for layer, v in raw.items()}
    return {layer: raw[layer] - means[layer] for layer in raw}, means


def first_tokens(model, topics: Sequence[str]) -> tuple[list[int], list[bool]]:
    """Each topic's first token with a leading space, and whether that is its whole tokenisation."""
    ids = [model.tokenizer.encode(" " + t, add_special_tokens=False) for t in topics]
    return [i[0] for i in ids], [len(i) == 1 for i in ids]


@torch.no_grad()
def embedding_vectors(model, token_ids: Sequence[int]) -> tuple[Tensor, Tensor]:
    """(rows minus their mean (m, d), the mean (d,)) of the input-embedding rows of `token_ids`."""
    w = model.hf.get_input_embeddings().weight
    rows = w[torch.tensor(list(token_ids), device=w.device)].float().cpu()
    mean = rows.mean(0)
    return rows - mean, mean


def median_embedding_norm(model) -> float:
    """Median L2 norm of the input-embedding rows (the unit of the identity scales)."""
    w = model.hf.get_input_embeddings().weight
    norms = w.detach().float().norm(dim=-1)
    # rows as the embedding module emits them (Gemma multiplies by sqrt(d_model) inside the module)
    probe_ids = torch.arange(min(8, w.shape[0]), device=w.device)
    ratio = model.hf.get_input_embeddings()(probe_ids).float().norm(dim=-1) / norms[probe_ids].clamp_min(1e-8)
    return float(norms.median() * ratio.median())


@torch.no_grad()
def logit_lens_tokens(model, vectors: Float[Tensor, "n d"], top: int) -> tuple[list[list[str]], Tensor]:
    """Decode each vector through the final norm and unembedding: its top `top` tokens as stripped
    strings (empty ones dropped) and the top token ids (n, top)."""
    logits = model.unembed(vectors.to(model.device, model.dtype)).float()
    top_ids = logits.topk(top, dim=-1).indices.cpu()
    strs = [[s for s in (model.tokenizer.decode([i]).strip() for i in row) if s] for row in top_ids.tolist()]
    return strs, top_ids


@torch.no_grad()
def _resid_at(model, texts: Sequence[str], site: Site, batch_size: int = 16) -> list[Tensor]:
    """The activation at `site` over every real token of each plain text: a list of (pos, d)."""
    out: list[Tensor] = []
    for i in range(0, len(texts), batch_size):
        enc = model.tokenize(list(texts[i : i + batch_size]) or [""], padding_side="right")
        _, cache = run_with_cache(model, enc["input_ids"], enc["attention_mask"], [site])
        lengths = enc["attention_mask"].sum(1).tolist()
        out += [cache[site][j, : int(n)].float().cpu() for j, n in enumerate(lengths)]
    return out
