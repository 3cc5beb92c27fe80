"""Steps 5-6: ablation by weight edits, the matched controls, and the position-0 mechanism.

Every condition edits the HF parameters in place inside `interp.edit_weights`, which puts
the original bytes back on exit; the probe checks `weights_digest` before and after. One hooked
forward per batch gives the next-token NLL, the position-0 residual norm of every layer and the
attention mass on position 0 (the sink), so every perplexity condition carries its mechanism.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import WeightEdit, edit_weights
from interp.generate import greedy
from interp.sites import Site

from .data import TASKS, TaskItem, score_answer
from .neurons import SliceMap, hook_site
from .record import forward_to_last_layer
from .selection import Mask, units

# ----------------------------------------------------------------------------- neuron sets


def cell_indices(mask: Mask):
    """(type, layer, indices) for every non-empty cell."""
    for t, m in mask.items():
        for layer in range(m.shape[0]):
            idx = np.flatnonzero(m[layer])
            if len(idx):
                yield t, layer, idx


def with_rope_partners(t: str, idx: np.ndarray, anatomy) -> np.ndarray:
    """q/k indices plus each one's RoPE partner dimension in the same head, in the model's own layout
    (`anatomy.rope_partner`: rotate-half or GPT-J's adjacent pairs, only the rotated dimensions of a partial
    rotary); a dimension RoPE leaves alone has no partner."""
    if t not in ("attn_q", "attn_k"):
        return idx
    h, d = np.divmod(idx, anatomy.d_head)
    partners = [hh * anatomy.d_head + p for hh, x in zip(h, d) if (p := anatomy.rope_partner(int(x))) is not None]
    return np.union1d(idx, np.asarray(partners, dtype=idx.dtype))


def zero_edits(smap: SliceMap, mask: Mask, anatomy, rope_pair: bool = False) -> list[WeightEdit]:
    """Weight edits that zero every neuron of `mask`: its weight slice and, for rows, its bias entry."""
    edits = []
    for t, layer, idx in cell_indices(mask):
        if rope_pair:
            idx = with_rope_partners(t, idx, anatomy)
        ids = smap.rows(t, layer, idx)
        edits.append(WeightEdit(smap.weight_name(t, layer), smap.dim(t, layer), ids))
        bias = smap.bias_name(t, layer)
        if bias:
            edits.append(WeightEdit(bias, 0, ids))
    return edits


def swap_edits(smap: SliceMap, pairs: Mapping[tuple[str, int], tuple[np.ndarray, np.ndarray]]) -> list[WeightEdit]:
    """Copy neuron j's slice into keystone slot i (exactly the slice ablation zeroes, plus the bias entry); each
    edit carries its own values, so the types sharing a fused parameter (q, k, v in one qkv_proj) stay apart."""
    edits = []
    for (t, layer), (i_idx, j_idx) in pairs.items():
        dim = smap.dim(t, layer)
        w = smap.weight(t, layer)
        i_rows = smap.rows(t, layer, i_idx)
        j = torch.as_tensor(smap.rows(t, layer, j_idx), dtype=torch.long, device=w.device)
        edits.append(WeightEdit(smap.weight_name(t, layer), dim, i_rows, value=w.detach().index_select(dim, j).clone()))
        bias = smap.bias_name(t, layer)
        if bias:
            b = dict(smap.model.hf.named_parameters())[bias]
            edits.append(WeightEdit(bias, 0, i_rows, value=b.detach().index_select(0, j).clone()))
    return edits


def matched_random(key: Mask, rng: np.random.Generator) -> Mask:
    """In every cell, the keystone count drawn uniformly without replacement from the non-keystone neurons."""
    out = {t: np.zeros_like(m) for t, m in key.items()}
    for t, layer, idx in cell_indices(key):
        free = np.flatnonzero(~key[t][layer])
        out[t][layer, rng.choice(free, size=len(idx), replace=False)] = True
    return out


def highnorm(key: Mask, norms: Mapping[str, np.ndarray], pool_frac: float, rng: np.random.Generator | None) -> Mask:
    """Matched count per cell from the pool of the top max(5*count, ceil(frac*n)) non-keystone neurons
    by weight-slice norm; `rng=None` takes the deterministic top-count set (highnorm_top)."""
    out = {t: np.zeros_like(m) for t, m in key.items()}
    for t, layer, idx in cell_indices(key):
        k, n = len(idx), key[t].shape[1]
        free = np.flatnonzero(~key[t][layer])
        order = free[np.argsort(-norms[t][layer][free], kind="stable")]
        if rng is None:
            chosen = order[:k]
        else:
            pool = order[: max(5 * k, math.ceil(pool_frac * n), k)]
            chosen = rng.choice(pool, size=k, replace=False)
        out[t][layer, chosen] = True
    return out


def swap_pairs(key: Mask, rng: np.random.Generator) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """For every keystone neuron i a distinct random non-keystone j of the same cell."""
    pairs = {}
    for t, layer, idx in cell_indices(key):
        free = np.flatnonzero(~key[t][layer])
        pairs[(t, layer)] = (idx, rng.choice(free, size=len(idx), replace=False))
    return pairs


# ----------------------------------------------------------------------------- measurements


@dataclass
class Stats:
    nll: Float[Tensor, "seq pos_1"] | None
    """Next-token NLL of tokens 1.. (the prediction made at position 0 counts)."""
    pos0: Float[Tensor, "seq layer"]
    """||resid_post|| at position 0 per layer."""
    sink: Float[Tensor, "seq layer"] | None
    """Attention on position 0, mean over heads and query positions >= 1, per layer."""

    @property
    def ppl(self) -> float:
        return math.exp(float(self.nll.double().mean()))

    @property
    def pos0_norm(self) -> float:
        """Max over layers, mean over sequences."""
        return float(self.pos0.max(1).values.mean())

    @property
    def sink_mass(self) -> float:
        return float(self.sink.mean())


@torch.no_grad()
def forward_stats(model, chunks: Int[Tensor, "seq pos"], batch_size: int, nll: bool = True,
                  sink: bool = True) -> Stats:
    """One hooked forward per batch: NLL, position-0 norms and sink mass (no padding: equal-length chunks)."""
    L = model.info.n_layers
    S = chunks.shape[0]
    pos0 = torch.zeros(S, L)
    sinks = torch.zeros(S, L) if sink else None
    nlls = []
    cur = {"rows": slice(0, 0)}

    def norm_hook(layer):
        def hook(act: Tensor) -> None:  # (batch, pos, d_model)
            pos0[cur["rows"], layer] = act[:, 0].float().norm(dim=-1).cpu()

        return hook

    def sink_hook(layer):
        def hook(act: Tensor) -> None:  # (batch, head, query, key): keep the key-0 column, queries >= 1
            sinks[cur["rows"], layer] = act[:, :, 1:, 0].float().mean((1, 2)).cpu()

        return hook

    pairs = [(Site("resid_post", layer), norm_hook(layer)) for layer in range(L)]
    if sink:
        pairs += [(Site("attn_pattern", layer), sink_hook(layer)) for layer in range(L)]
    with model.hooks(pairs):
        for start in range(0, S, batch_size):
            ids = chunks[start : start + batch_size].to(model.device)
            cur["rows"] = slice(start, start + ids.shape[0])
            logits = model.forward(ids)
            if nll:
                lp = logits[:, :-1].float().log_softmax(-1)
                nlls.append(-lp.gather(-1, ids[:, 1:, None])[..., 0].cpu())
                del lp
            del logits
    return Stats(torch.cat(nlls) if nll else None, pos0, sinks)


def task_accuracy(model, items: Sequence[TaskItem], batch_size: int = 32) -> dict[str, float]:
    """Greedy <= 4 new tokens, cut at the first newline, exact match; overall and per task."""
    outs = greedy(model, [it.prompt for it in items], 4, hooked=False, templated=False, batch_size=batch_size)
    hits = [score_answer(model.tokenizer.decode(ids), it.answer) for it, ids in zip(items, outs)]
    res = {"task_acc": float(np.mean(hits))}
    for task in TASKS:
        sel = [h for h, it in zip(hits, items) if it.task == task]
        res[f"task_acc_{task}"] = float(np.mean(sel)) if sel else None
    return res


def ppl_batch_size(model, seq_len: int, budget_bytes: int = 1 << 28) -> int:
    """Sequences per forward so that the float32 logits stay under ~256 MB (their log-softmax doubles it)."""
    return max(1, budget_bytes // (4 * seq_len * model.info.d_vocab))


@dataclass
class Condition:
    name: str
    seed: int | None
    p: float
    mask: Mask | None = None
    """Zeroed neurons (None for base)."""
    swap: dict | None = None
    """Swap pairs instead of zeroing."""
    tasks: bool = False

    @property
    def n_ablated(self) -> int:
        if self.swap is not None:
            return int(sum(len(i) for i, _ in self.swap.values()))
        return 0 if self.mask is None else int(sum(m.sum() for m in self.mask.values()))


def evaluate(model, smap: SliceMap, cond: Condition, chunks: Tensor, batch_size: int,
             tasks: Sequence[TaskItem] | None, rope_pair: bool) -> tuple[dict, Stats]:
    """One condition: its ablation row (ppl, pos0_norm, sink_mass, task accuracy) and the raw stats."""
    if cond.swap is not None:
        edits = swap_edits(smap, cond.swap)
    else:
        edits = [] if cond.mask is None else zero_edits(smap, cond.mask, model.anatomy, rope_pair)
    with edit_weights(model, edits):
        stats = forward_stats(model, chunks, batch_size)
        acc = task_accuracy(model, tasks) if (cond.tasks and tasks) else {}
    row = {"condition": cond.name, "seed": cond.seed, "p": cond.p, "n_ablated": cond.n_ablated, "ppl": stats.ppl,
           "pos0_norm": stats.pos0_norm, "sink_mass": stats.sink_mass, "task_acc": acc.get("task_acc")}
    for task in TASKS:
        row[f"task_acc_{task}"] = acc.get(f"task_acc_{task}")
    return row, stats


def sink_rows(cond: Condition, stats: Stats) -> list[dict]:
    pos0, sink = stats.pos0.mean(0), stats.sink.mean(0)
    return [{"condition": cond.name, "seed": cond.seed, "layer": layer, "pos0_norm": float(pos0[layer]),
             "sink_mass": float(sink[layer])} for layer in range(len(pos0))]


def pos0_norms(model, ids: Tensor, zero: Sequence[tuple[Site, slice, Sequence[int]]] = ()) -> Tensor:
    """||resid_post|| at position 0 per (row, layer), (batch, layer); the forward stops after the last layer.

    `zero` lists (site, rows, unit indices): activations zeroed at `site` for those batch rows only, the
    activation path equivalent to zeroing the neurons' weight slices (pre-RoPE sites for q and k).
    """
    L = model.info.n_layers
    out = torch.zeros(ids.shape[0], L)

    def norm_hook(layer):
        def hook(act: Tensor) -> None:
            out[:, layer] = act[:, 0].float().norm(dim=-1).cpu()

        return hook

    by_site: dict[Site, list[tuple[slice, list[int]]]] = {}
    for site, rows, idx in zero:
        by_site.setdefault(site, []).append((rows, list(idx)))

    def zero_hook(entries):
        def hook(act: Tensor) -> Tensor:  # (batch, pos, *units), units flattened h * d_head + d
            x = act.clone(memory_format=torch.contiguous_format)
            flat = x.view(*x.shape[:2], -1)
            for rows, idx in entries:
                flat[rows, :, idx] = 0.0
            return x

        return hook

    pairs = [(site, zero_hook(e)) for site, e in by_site.items()]
    pairs += [(Site("resid_post", layer), norm_hook(layer)) for layer in range(L)]
    with torch.no_grad(), model.hooks(pairs):
        forward_to_last_layer(model, ids)
    return out


def massive_writers(model, key: Mask, chunks: Tensor, rope_pair: bool, progress=None,
                    batch_tokens: int = 2048) -> tuple[pd.DataFrame, float]:
    """Ablate each keystone unit alone; a unit that cuts the position-0 norm by > 50 % is a massive writer.

    Units are tested several at a time: the chunks are repeated once per unit and each copy has only its
    own unit zeroed (on the activation path, which equals zeroing the unit's weight slice).
    """
    S, T = chunks.shape
    base = float(pos0_norms(model, chunks).max(1).values.mean())
    triples = units(key)
    per = max(1, batch_tokens // (S * T))
    norms: list[float] = []
    starts = range(0, len(triples), per)
    for start in (progress(starts, desc="massive writers") if progress else starts):
        group = triples[start : start + per]
        zero = []
        for u, (t, layer, i) in enumerate(group):
            idx = np.array([i])
            if rope_pair:
                idx = with_rope_partners(t, idx, model.anatomy)
            zero.append((hook_site(model, t, layer), slice(u * S, (u + 1) * S), idx.tolist()))
        pn = pos0_norms(model, chunks.repeat(len(group), 1), zero)  # (units * S, layer)
        norms += pn.max(1).values.view(len(group), S).mean(1).tolist()
    rows = []
    for (t, layer, i), norm in zip(triples, norms):
        cut = 1.0 - norm / base
        rows.append({"type": t, "layer": layer, "index": i, "pos0_norm_single": norm, "cut_frac": cut,
                     "is_writer": bool(cut > 0.5)})
    frame = pd.DataFrame(rows, columns=["type", "layer", "index", "pos0_norm_single", "cut_frac", "is_writer"])
    return frame, base
