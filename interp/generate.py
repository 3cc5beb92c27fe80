"""Batched greedy decoding and perplexity, shared by the probes.

`greedy` decodes on the plain HF model with the KV cache (fast; no hooks fire), or through the
hooked backend without a cache (`hooked=True`: every site hook and intervention applies).
Prompts are left-padded with explicit attention masks; position ids come from the mask.

`growing_cache` is the KV cache every decoding loop here uses: transformers' `DynamicCache` grows each layer by
`torch.cat`, which copies the whole cache at every step and layer (about 70% of a batch-32 decode step at 600
context tokens on SmolLM2, measured with the profiler); its layers write each step in place into a buffer that
doubles when full, and hand attention a view of the filled part.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from functools import cache

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

LogitsFn = Callable[[Tensor, Tensor], Tensor]
"""(generated ids so far (batch, t), next-token logits (batch, vocab)) -> adjusted logits."""


def windowed_repetition_penalty(penalty: float, window: int) -> LogitsFn:
    """Penalise only tokens among the last `window` *generated* tokens (never the prompt):
    a negative logit is multiplied by `penalty`, a positive one divided by it."""

    def fn(generated: Tensor, logits: Tensor) -> Tensor:
        if penalty == 1.0 or generated.shape[1] == 0:
            return logits
        recent = generated[:, -window:]
        picked = logits.gather(1, recent)
        picked = torch.where(picked < 0, picked * penalty, picked / penalty)
        return logits.scatter(1, recent, picked)

    return fn


@torch.no_grad()
def greedy(
    model,
    prompts: Sequence[str] | dict[str, Tensor],
    max_new_tokens: int,
    stop_ids: Sequence[int] | None = None,
    logits_fn: LogitsFn | None = None,
    hooked: bool = False,
    templated: bool = False,
    batch_size: int = 16,
) -> list[list[int]]:
    """Greedy continuations (token ids, stop token excluded) for each prompt.

    `prompts` are texts (tokenized with the model's BOS rule; `templated=True` for chat-formatted
    text) or a pre-tokenized left-padded {input_ids, attention_mask}.
    """
    if isinstance(prompts, dict):
        encs = [prompts]
    else:
        texts = list(prompts)
        encs = [model.tokenize(texts[i : i + batch_size], padding_side="left", templated=templated)
                for i in range(0, len(texts), batch_size)]
    stop = set(stop_ids if stop_ids is not None else default_stop_ids(model))
    out: list[list[int]] = []
    for enc in encs:
        out += _greedy_batch(model, enc["input_ids"], enc["attention_mask"], max_new_tokens, stop, logits_fn, hooked)
    return out


@cache
def _cache_kwarg(forward) -> str:
    params = inspect.signature(forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@contextlib.contextmanager
def attention_implementation(hf, impl: str) -> Iterator[str]:
    """Run `hf` with attention `impl` ("sdpa", "eager") inside the block where its family supports it, restoring
    its implementation after; yields the one used (the one before where the family lacks `impl`: Gemma 2's
    soft-capped attention has no SDPA path). A model whose config names no implementation is left as it is."""
    before = getattr(hf.config, "_attn_implementation", None)
    if before is None or before == impl or not hasattr(hf, "set_attn_implementation"):
        yield before or "sdpa"
        return
    try:
        hf.set_attn_implementation(impl)
    except (ValueError, ImportError):  # the family has no such attention
        yield before
        return
    try:
        yield impl
    finally:
        hf.set_attn_implementation(before)


def decoding_attention(hf) -> contextlib.AbstractContextManager[str]:
    """Run `hf` with SDPA attention inside the block where its family supports it (eager otherwise), restoring its
    implementation after; yields the one used (`attention_implementation`).

    Models load eager because hooks read the attention pattern; decoding that reads no pattern is faster on SDPA."""
    return attention_implementation(hf, "sdpa")


class _GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of the first n positions of a buffer
    [batch, kv_head, capacity, d_head] that doubles when full: an update writes its positions in place.

    Whatever replaces `keys` / `values` from outside (crop, batch selection, reset) is taken as the new content
    at the next update."""

    _kbuf: Tensor | None = None
    _vbuf: Tensor | None = None

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        fresh = self._kbuf is None or self.keys.data_ptr() != self._kbuf.data_ptr()
        n = 0 if self.keys.numel() == 0 else self.keys.shape[-2]
        end = n + key_states.shape[-2]
        dtype = torch.promote_types(self.keys.dtype, key_states.dtype) if n else key_states.dtype
        if fresh or end > self._kbuf.shape[-2] or dtype != self._kbuf.dtype or \
                self._kbuf.shape[:-2] != key_states.shape[:-2]:
            cap = max(2 * end, 64)
            kbuf = key_states.new_empty((*key_states.shape[:-2], cap, key_states.shape[-1]), dtype=dtype)
            vbuf = value_states.new_empty((*value_states.shape[:-2], cap, value_states.shape[-1]), dtype=dtype)
            if n:
                kbuf[..., :n, :] = self.keys
                vbuf[..., :n, :] = self.values
            self._kbuf, self._vbuf = kbuf, vbuf
        self._kbuf[..., n:end, :] = key_states
        self._vbuf[..., n:end, :] = value_states
        self.keys, self.values = self._kbuf[..., :end, :], self._vbuf[..., :end, :]
        return self.keys, self.values


def growing_cache(config=None, layers: Sequence[tuple[Tensor, Tensor]] | None = None) -> DynamicCache:
    """A `DynamicCache` (built from `config`'s layer types, or lazily) whose full-attention layers grow in place
    (`_GrowingLayer`); sliding-window layers stay as transformers makes them. `layers`: per layer, the
    (keys, values) [batch, kv_head, pos, d_head] it starts with."""
    cache = DynamicCache(config=config)
    if cache.layer_class_to_replicate is DynamicLayer:
        cache.layer_class_to_replicate = _GrowingLayer
    cache.layers = [_GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    for i, (k, v) in enumerate(layers or ()):
        cache.update(k, v, i)
    return cache


def kv_cache_kwargs(hf, kv) -> dict:
    """{cache: kv, use_cache: True} for `hf`'s forward, under the name it takes: newer transformers releases
    call the KV cache argument `cache` (5.24 deprecates `past_key_values`, to be removed in 5.40), older ones
    `past_key_values`. `kv` is updated in place."""
    return {_cache_kwarg(type(hf).forward): kv, "use_cache": True}


def default_stop_ids(model) -> list[int]:
    tok = model.tokenizer
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    for t in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>"):
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i != tok.unk_token_id:
            ids.add(i)
    return sorted(ids)


def _greedy_batch(model, ids: Int[Tensor, "b p"], mask: Int[Tensor, "b p"], max_new: int, stop: set[int],
                  logits_fn: LogitsFn | None, hooked: bool) -> list[list[int]]:
    ids, mask = ids.to(model.device), mask.to(model.device)
    b = ids.shape[0]
    gen = torch.empty(b, 0, dtype=torch.long, device=ids.device)
    done = torch.zeros(b, dtype=torch.bool, device=ids.device)
    past = None if hooked else growing_cache(model.hf.config)
    cur_ids, cur_mask = ids, mask
    for _ in range(max_new):
        if hooked:
            logits = model.forward(torch.cat([ids, gen], 1), cur_mask)[:, -1]
        else:
            pos = (cur_mask.long().cumsum(-1) - 1).clamp(min=0)
            step_pos = pos if cur_ids is ids else pos[:, -1:]
            o = model.hf(input_ids=cur_ids, attention_mask=cur_mask, position_ids=step_pos,
                         logits_to_keep=1, **kv_cache_kwargs(model.hf, past))
            logits = o.logits[:, -1]
        logits = logits.float()
        if logits_fn is not None:
            logits = logits_fn(gen, logits)
        nxt = logits.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, next(iter(stop), 0)), nxt)
        gen = torch.cat([gen, nxt[:, None]], 1)
        done |= torch.isin(nxt, torch.tensor(sorted(stop), device=nxt.device)) if stop else done
        cur_mask = torch.cat([cur_mask, torch.ones(b, 1, dtype=cur_mask.dtype, device=cur_mask.device)], 1)
        cur_ids = nxt[:, None]
        if bool(done.all()):
            break
    result = []
    for row in gen.tolist():
        cut = next((i for i, t in enumerate(row) if t in stop), len(row))
        result.append(row[:cut])
    return result


@torch.no_grad()
def token_nll(model, input_ids: Int[Tensor, "b p"], attention_mask: Int[Tensor, "b p"] | None = None,
              hooked: bool = True) -> Float[Tensor, "b p-1"]:
    """Per-token negative log-likelihood of tokens 1.. given the prefix (0 where masked)."""
    input_ids = input_ids.to(model.device)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    attention_mask = attention_mask.to(model.device)
    if hooked:
        logits = model.forward(input_ids, attention_mask)
    else:
        logits = model.hf(input_ids=input_ids, attention_mask=attention_mask).logits
    logp = logits[:, :-1].float().log_softmax(-1)
    nll = -logp.gather(-1, input_ids[:, 1:, None])[..., 0]
    return nll * attention_mask[:, 1:]


def perplexity(model, chunks: Sequence[Sequence[int]] | Tensor, batch_size: int = 8, hooked: bool = True) -> float:
    """exp(mean NLL) over equal-length token chunks (no BOS added; position 0 is text)."""
    ids = chunks if isinstance(chunks, Tensor) else torch.tensor([list(c) for c in chunks], dtype=torch.long)
    total, n = 0.0, 0
    for i in range(0, ids.shape[0], batch_size):
        nll = token_nll(model, ids[i : i + batch_size], hooked=hooked)
        total += float(nll.double().sum())
        n += nll.numel()
    value = math.exp(total / n)
    if not math.isfinite(value):
        from .errors import NumericError

        raise NumericError("perplexity is not finite")
    return value
