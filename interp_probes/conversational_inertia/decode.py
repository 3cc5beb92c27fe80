"""Batched greedy decoding with a shared-prefix KV cache.

The behaviour prompts overlap heavily: the Long prompt of a bait history at N = 1, 2, 4 is a token
prefix of its Long prompt at N = 8, and every policy of one episode starts with the same system
turn. Each prompt is attached to a *root* (the prompt it shares the most leading tokens with, when
that is at least `min_frac` of it); a root is prefilled once, and each of its prompts decodes from
the root's keys and values cut to the shared prefix, plus its own suffix (at least its last token).
Prompts are batched by suffix length, since the suffixes are what a batch pads. Rows are laid out
as [left pad | prefix | pad | suffix | generated] with the attention mask zero on the pads and
position ids from the mask, so every token keeps the position it has in its own prompt.

Models with sliding-window layers (their caches keep only the window) decode through
`interp.generate.greedy` instead; results are the same greedy continuations either way.

The toolkit loads models with eager attention (hooks read the pattern); nothing here reads it, so
decoding switches the plain model to SDPA for its duration, which avoids repeating the grouped KV
heads every step: about 2x faster per decode step on SmolLM2 at 600 context tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from interp.generate import decoding_attention, greedy, growing_cache, kv_cache_kwargs


@dataclass
class _Job:
    prompt: tuple[int, ...]
    root: int
    shared: int
    """Tokens of the root's prefix reused (the rest of the prompt is the suffix, at least one token)."""


def lcp(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.nonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0]
    return int(diff[0]) if len(diff) else n


def plan(prompts: Sequence[Sequence[int]], min_frac: float = 0.25) -> tuple[list[tuple[int, ...]], list[_Job]]:
    """Roots (longest first) and one job per distinct prompt; a prompt sharing less than `min_frac` of
    its tokens with every root becomes a root."""
    unique = sorted({tuple(p) for p in prompts}, key=lambda p: (-len(p), p))
    roots: list[tuple[int, ...]] = []
    jobs: list[_Job] = []
    for p in unique:
        best, shared = -1, 0
        for r, root in enumerate(roots):
            k = lcp(p, root)
            if k > shared:
                best, shared = r, k
        if shared < max(1.0, min_frac * len(p)):
            roots.append(p)
            best, shared = len(roots) - 1, len(p)
        jobs.append(_Job(p, best, min(shared, len(p) - 1)))
    return roots, jobs


def has_sliding_layers(model) -> bool:
    cfg = model.hf.config
    cfg = getattr(cfg, "text_config", None) or cfg
    return bool(getattr(cfg, "sliding_window", None)) and any("sliding" in str(t) for t in
                                                            (getattr(cfg, "layer_types", None) or []))


@torch.no_grad()
def shared_prefix_greedy(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: Sequence[int],
                         batch_size: int = 32, root_batch: int = 16, min_frac: float = 0.25,
                         progress: Callable | None = None, in_place: bool = True) -> dict[tuple[int, ...], list[int]]:
    """prompt ids -> greedy continuation ids (stop token excluded), each distinct prompt decoded once.

    `in_place=False` decodes on transformers' own `DynamicCache` (the same tokens, slower: `bench inertia`'s
    baseline) instead of `interp.generate.growing_cache`."""
    with decoding_attention(model.hf):
        return _shared_prefix_greedy(model, prompts, max_new_tokens, stop_ids, batch_size, root_batch, min_frac,
                                     progress, in_place)


def _shared_prefix_greedy(model, prompts, max_new_tokens, stop_ids, batch_size, root_batch, min_frac, progress,
                          in_place=True):
    if has_sliding_layers(model):
        return _plain(model, prompts, max_new_tokens, stop_ids, batch_size)
    roots, jobs = plan(prompts, min_frac)
    by_root: dict[int, list[_Job]] = {}
    for j in jobs:
        by_root.setdefault(j.root, []).append(j)
    order = sorted(range(len(roots)), key=lambda r: len(roots[r]))
    groups = [order[i : i + root_batch] for i in range(0, len(order), root_batch)]
    out: dict[tuple[int, ...], list[int]] = {}
    for group in progress(groups) if progress else groups:
        kv = _prefill_roots(model, [roots[r] for r in group], [max(j.shared for j in by_root[r]) for r in group])
        group_jobs = sorted((j for r in group for j in by_root[r]), key=lambda j: (len(j.prompt) - j.shared, j.shared))
        local = {r: k for k, r in enumerate(group)}
        for i in range(0, len(group_jobs), batch_size):
            chunk = group_jobs[i : i + batch_size]
            gen = _decode_jobs(model, chunk, [kv[local[j.root]] for j in chunk], max_new_tokens, stop_ids, in_place)
            out.update({j.prompt: g for j, g in zip(chunk, gen)})
    return out


def _plain(model, prompts, max_new_tokens, stop_ids, batch_size) -> dict[tuple[int, ...], list[int]]:
    unique = sorted({tuple(p) for p in prompts}, key=len)
    out = {}
    pad = _pad_id(model)
    for i in range(0, len(unique), batch_size):
        chunk = unique[i : i + batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for j, p in enumerate(chunk):
            ids[j, width - len(p) :] = torch.tensor(p)
            mask[j, width - len(p) :] = 1
        gen = greedy(model, {"input_ids": ids, "attention_mask": mask}, max_new_tokens, stop_ids=stop_ids)
        out.update(zip(chunk, gen))
    return out


def _pad_id(model) -> int:
    return model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0


def _prefill_roots(model, roots: list[tuple[int, ...]], keep: list[int]) -> list[list[tuple[torch.Tensor, ...]]]:
    """Per root, per layer: (keys, values) [kv_head, keep, d_head] of its first `keep` tokens."""
    width = max(keep)
    ids = torch.full((len(roots), width), _pad_id(model), dtype=torch.long)
    mask = torch.zeros((len(roots), width), dtype=torch.long)
    for j, (r, k) in enumerate(zip(roots, keep)):  # right-padded: positions 0..k-1 as in each prompt
        ids[j, :k] = torch.tensor(r[:k])
        mask[j, :k] = 1
    ids, mask = ids.to(model.device), mask.to(model.device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    model.hf(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1, **kv_cache_kwargs(model.hf, cache))
    return [[(layer.keys[j, :, :k], layer.values[j, :, :k]) for layer in cache.layers] for j, k in enumerate(keep)]


def _decode_jobs(model, jobs: list[_Job], kvs: list, max_new: int, stop_ids: Sequence[int], in_place: bool = True
                 ) -> list[list[int]]:
    dev = model.device
    b = len(jobs)
    p_len = max(j.shared for j in jobs)
    s_len = max(len(j.prompt) - j.shared for j in jobs)
    n_layers = len(kvs[0])
    layers = []
    for layer in range(n_layers):
        k0 = kvs[0][layer][0]
        keys = torch.zeros((b, k0.shape[0], p_len, k0.shape[-1]), dtype=k0.dtype, device=k0.device)
        values = torch.zeros_like(keys)
        for j, job in enumerate(jobs):
            if job.shared:
                keys[j, :, p_len - job.shared :] = kvs[j][layer][0][:, : job.shared]
                values[j, :, p_len - job.shared :] = kvs[j][layer][1][:, : job.shared]
        layers.append((keys, values))
    cache = growing_cache(layers=layers) if in_place else DynamicCache(layers)
    mask = torch.zeros((b, p_len + s_len), dtype=torch.long)
    ids = torch.full((b, s_len), _pad_id(model), dtype=torch.long)
    for j, job in enumerate(jobs):
        suffix = job.prompt[job.shared :]
        mask[j, p_len - job.shared : p_len] = 1
        mask[j, p_len + s_len - len(suffix) :] = 1
        ids[j, s_len - len(suffix) :] = torch.tensor(suffix)
    mask, ids = mask.to(dev), ids.to(dev)
    stop = torch.tensor(sorted(stop_ids), device=dev)
    gen = torch.empty(b, 0, dtype=torch.long, device=dev)
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    cur = ids
    for _ in range(max_new):
        pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, -cur.shape[1] :]
        o = model.hf(input_ids=cur, attention_mask=mask, position_ids=pos, logits_to_keep=1,
                     **kv_cache_kwargs(model.hf, cache))
        nxt = o.logits[:, -1].float().argmax(-1)
        nxt = torch.where(done, stop[0], nxt)
        gen = torch.cat([gen, nxt[:, None]], 1)
        done |= torch.isin(nxt, stop)
        mask = torch.cat([mask, torch.ones((b, 1), dtype=mask.dtype, device=dev)], 1)
        cur = nxt[:, None]
        if bool(done.all()):
            break
    stops = set(stop_ids)
    return [row[: next((i for i, t in enumerate(row) if t in stops), len(row))] for row in gen.tolist()]
