"""Candidate scoring with SLASH on the prompt pass only (section 9).

Per batch of prompts: one hooked prefill (SLASH hooks active, keys and values of every layer
captured) gives each candidate's first-token log-probability at the last prompt position; the
captured keys and values become a KV cache, and the candidates' remaining tokens are fed through
the plain HF model (no hooks fire there), so they attend to the modified cache exactly as decode
steps would. The prompt pass runs once per prompt; its candidates share its cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from interp.generate import kv_cache_kwargs
from interp.sites import Site

from .attention import Tokenised, forward_last, pad_left
from .graphs import ANSWER_END
from .slash import Slash


def candidate_tokens(model, candidates: Sequence[str]) -> list[list[int]]:
    """Each candidate's full tokenisation with the newline that ends the answer line."""
    return [model.tokenizer(c + ANSWER_END, add_special_tokens=False)["input_ids"] for c in candidates]


def _cache_from(model, keys: dict[int, torch.Tensor], values: dict[int, torch.Tensor], rows: torch.Tensor):
    """A DynamicCache holding the captured (batch, pos, kv_head, d_head) keys/values of `rows`."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.hf.config)
    for layer in range(model.info.n_layers):
        k = keys[layer][rows].transpose(1, 2).contiguous()  # (rows, kv_head, pos, d_head)
        v = values[layer][rows].transpose(1, 2).contiguous()
        cache.update(k, v, layer)
    return cache


@torch.no_grad()
def score_batch(model, items: list[Tokenised], cand_ids: list[list[list[int]]], slash: Slash | None = None,
                return_logits: bool = False):
    """Summed log-probability of every candidate's full tokenisation, per prompt (list of arrays).

    `cand_ids[r]` are the token lists of prompt r's candidates. With `return_logits`, also the
    last-position logits of the prefill (for the gamma = 1 check).
    """
    ids, mask, _ = pad_left(model, items)
    n_layers = model.info.n_layers
    keys: dict[int, torch.Tensor] = {}
    values: dict[int, torch.Tensor] = {}

    def keep(store, layer):
        def fn(x):
            store[layer] = x.detach()

        return fn

    pairs = [(Site("attn_rot_k", layer), keep(keys, layer)) for layer in range(n_layers)]
    pairs += [(Site("attn_v", layer), keep(values, layer)) for layer in range(n_layers)]
    if slash is not None:
        pairs = slash.pairs() + pairs
    with model.hooks(pairs):
        if slash is not None:
            with slash.batch(mask):
                last = forward_last(model, ids, mask)
        else:
            last = forward_last(model, ids, mask)
    first_lp = last.float().log_softmax(-1)  # (b, vocab)

    scores = [np.array([float(first_lp[r, c[0]]) for c in cands]) for r, cands in enumerate(cand_ids)]
    # continuation rows: (prompt, candidate) pairs with more than one token
    rows = [(r, j) for r, cands in enumerate(cand_ids) for j, c in enumerate(cands) if len(c) > 1]
    if rows:
        width = max(len(cand_ids[r][j]) - 1 for r, j in rows)
        pad_id = int(ids[0, 0]) if model.tokenizer.pad_token_id is None else model.tokenizer.pad_token_id
        cont = torch.full((len(rows), width), pad_id, dtype=torch.long)
        cmask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (r, j) in enumerate(rows):
            toks = cand_ids[r][j][:-1]
            cont[i, : len(toks)] = torch.tensor(toks)
            cmask[i, : len(toks)] = 1
        src = torch.tensor([r for r, _ in rows], device=ids.device)
        cont, cmask = cont.to(ids.device), cmask.to(ids.device)
        full_mask = torch.cat([mask[src], cmask], 1)
        pos = mask[src].sum(1, keepdim=True) + torch.arange(width, device=ids.device)[None]
        cache = _cache_from(model, keys, values, src)
        logits = model.hf(input_ids=cont, attention_mask=full_mask, position_ids=pos,
                          **kv_cache_kwargs(model.hf, cache)).logits.float().log_softmax(-1)
        for i, (r, j) in enumerate(rows):
            toks = cand_ids[r][j]
            lp = sum(float(logits[i, t, toks[t + 1]]) for t in range(len(toks) - 1))
            scores[r][j] += lp
    if return_logits:
        return scores, last
    return scores


def score_all(model, items: list[Tokenised], cand_ids: list[list[list[int]]], batch_size: int,
              slash: Slash | None = None, progress=None) -> list[np.ndarray]:
    """score_batch over `items` in batches (prompts sorted by length to limit padding)."""
    order = sorted(range(len(items)), key=lambda i: len(items[i].ids))
    out: list[np.ndarray | None] = [None] * len(items)
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for chunk in progress(chunks) if progress else chunks:
        res = score_batch(model, [items[i] for i in chunk], [cand_ids[i] for i in chunk], slash)
        for i, s in zip(chunk, res):
            out[i] = s
    return out  # type: ignore[return-value]
