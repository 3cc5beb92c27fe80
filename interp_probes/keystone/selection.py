"""Steps 3-4: top-p selection per prompt, intersection across prompts, stability across groups.

A neuron set is a dict type -> bool array (n_layers, n_type). All functions here are pure numpy.

Counts follow the released code (JxtGTG/keystone, batch_top_n_overlap_unified.py): per_layer and
global_per_type keep c = max(1, int(n * p)) (`n_keep`), global keeps max(1, ceil(n * p)) (`n_keep_global`);
ties go to the lower index (a stable sort, as Python's). The code records K and V after `repeat_kv`, i.e.
at query width: with `kv` given, K/V means are repeated to query width (`to_query_width`), ranked there
with the query-width count, and the selected copies collapse to their distinct KV rows (`to_kv_width`).
At p = 0.01 on SmolLM2 that keeps 2 K rows per layer where ranking at the native width keeps 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations

import numpy as np
import pandas as pd

Means = Mapping[str, np.ndarray]
"""type -> (n_layers, n) mean |activation| of one prompt."""
Mask = dict[str, np.ndarray]
"""type -> (n_layers, n) bool."""


def n_keep(n: int, p: float) -> int:
    """c = max(1, int(n * p)): the released code's per-layer and per-type count."""
    return max(1, int(n * p))


def n_keep_global(n: int, p: float) -> int:
    """K = max(1, ceil(n * p)): the released code's count of the global (all types) ranking."""
    return max(1, math.ceil(n * p))


KV = Mapping[str, tuple[int, int]]
"""type -> (d_head, n_rep) for the types recorded at KV width (attn_k, attn_v) that rank at query width."""


def to_query_width(m: np.ndarray, d_head: int, n_rep: int) -> np.ndarray:
    """(n_layers, n_kv * d_head) -> (n_layers, n_kv * n_rep * d_head), each KV head repeated n_rep times in
    place, as `repeat_kv` orders query heads (query head h reads KV head h // n_rep)."""
    n_layers, width = m.shape
    heads = m.reshape(n_layers, width // d_head, 1, d_head)  # (L, n_kv, 1, d_head)
    return np.repeat(heads, n_rep, axis=2).reshape(n_layers, -1)  # (L, n_kv * n_rep * d_head)


def to_kv_width(mask: np.ndarray, d_head: int, n_rep: int) -> np.ndarray:
    """Query-width bool mask -> KV-width mask of the distinct KV rows any selected copy maps to."""
    n_layers, width = mask.shape
    return mask.reshape(n_layers, width // (n_rep * d_head), n_rep, d_head).any(axis=2).reshape(n_layers, -1)


def top_c(values: np.ndarray, c: int) -> np.ndarray:
    """Bool mask of the c largest entries along the last axis; ties go to the lower index."""
    order = np.argsort(-values, axis=-1, kind="stable")[..., :c]
    mask = np.zeros(values.shape, dtype=bool)
    np.put_along_axis(mask, order, True, axis=-1)
    return mask


def select_prompt(means: Means, p: float, mode: str = "per_layer", kv: KV | None = None) -> Mask:
    """S_pi: the prompt's top-p neurons (per layer and type, per type over layers, or globally); the types
    in `kv` are ranked at query width and returned as their distinct KV rows."""
    if kv:
        wide = {t: to_query_width(m, *kv[t]) if t in kv else m for t, m in means.items()}
        sel = select_prompt(wide, p, mode)
        return {t: to_kv_width(m, *kv[t]) if t in kv else m for t, m in sel.items()}
    if mode == "per_layer":
        return {t: top_c(m.astype(np.float32), n_keep(m.shape[1], p)) for t, m in means.items()}
    if mode == "global_per_type":
        return {t: top_c(m.reshape(-1).astype(np.float32), n_keep(m.size, p)).reshape(m.shape)
                for t, m in means.items()}
    if mode == "global":
        types = list(means)
        flat = np.concatenate([means[t].reshape(-1) for t in types]).astype(np.float32)
        keep = top_c(flat, n_keep_global(flat.size, p))
        out, start = {}, 0
        for t in types:
            size = means[t].size
            out[t] = keep[start : start + size].reshape(means[t].shape)
            start += size
        return out
    raise ValueError(f"selection_mode {mode!r}: per_layer, global_per_type or global")


def intersect(sets: Sequence[Mask]) -> Mask:
    return {t: np.logical_and.reduce([s[t] for s in sets]) for t in sets[0]}


def union(sets: Sequence[Mask]) -> Mask:
    return {t: np.logical_or.reduce([s[t] for s in sets]) for t in sets[0]}


def count(mask: Mask) -> int:
    return int(sum(m.sum() for m in mask.values()))


def keystone(prompt_means: Sequence[Means], p: float, mode: str = "per_layer", kv: KV | None = None
             ) -> tuple[Mask, list[Mask]]:
    """K = the intersection over prompts of their top-p sets; also returns the per-prompt sets."""
    per_prompt = [select_prompt(m, p, mode, kv) for m in prompt_means]
    return intersect(per_prompt), per_prompt


def sets_frame(sets: dict[float, Mask]) -> pd.DataFrame:
    """p, type, layer, index of every neuron of each p's keystone set (what the page draws for a chosen p)."""
    rows = [(p, t, layer, int(i)) for p, mask in sets.items() for t, m in mask.items()
            for layer in range(m.shape[0]) for i in np.flatnonzero(m[layer])]
    return pd.DataFrame(rows, columns=["p", "type", "layer", "index"])


def cells_frame(p: float, per_prompt: Sequence[Mask]) -> pd.DataFrame:
    """p, type, layer, n, c, n_intersection, n_union, overlap (= |cap| / |cup|) per cell."""
    inter, uni = intersect(per_prompt), union(per_prompt)
    rows = []
    for t, m in inter.items():
        for layer in range(m.shape[0]):
            nu = int(uni[t][layer].sum())
            ni = int(m[layer].sum())
            rows.append({"p": p, "type": t, "layer": layer, "n": int(m.shape[1]),
                         "c": int(per_prompt[0][t][layer].sum()), "n_intersection": ni, "n_union": nu,
                         "overlap": ni / nu if nu else float("nan")})
    return pd.DataFrame(rows)


def iou(a: Mask, b: Mask) -> float:
    inter = sum(int((a[t] & b[t]).sum()) for t in a)
    uni = sum(int((a[t] | b[t]).sum()) for t in a)
    return inter / uni if uni else float("nan")


def iou_chance(a: Mask, b: Mask) -> float:
    """Expected IoU of random sets with the same per-cell sizes: sum E|cap| / (sum(a+b) - sum E|cap|)."""
    e_inter, total = 0.0, 0
    for t in a:
        n = a[t].shape[1]
        ca, cb = a[t].sum(1), b[t].sum(1)
        e_inter += float((ca * cb).sum()) / n
        total += int(ca.sum() + cb.sum())
    denom = total - e_inter
    return e_inter / denom if denom > 0 else float("nan")


def stability(group_sets: Mapping[int, Mask]) -> pd.DataFrame:
    """group_a, group_b, iou, iou_chance for every pair of groups."""
    rows = [{"group_a": g, "group_b": h, "iou": iou(group_sets[g], group_sets[h]),
             "iou_chance": iou_chance(group_sets[g], group_sets[h])}
            for g, h in combinations(sorted(group_sets), 2)]
    return pd.DataFrame(rows, columns=["group_a", "group_b", "iou", "iou_chance"])


def units(mask: Mask) -> list[tuple[str, int, int]]:
    """(type, layer, index) triples of a set, in type, layer, index order."""
    out = []
    for t, m in mask.items():
        for layer, idx in zip(*np.nonzero(m)):
            out.append((t, int(layer), int(idx)))
    return out


def from_units(triples: Sequence[tuple[str, int, int]], like: Mask) -> Mask:
    out = {t: np.zeros_like(m) for t, m in like.items()}
    for t, layer, i in triples:
        out[t][layer, i] = True
    return out


def mlp_effective(mask: Mask) -> int:
    """Distinct MLP units: the union of fwd_up and fwd_down indices per layer, summed."""
    up, down = mask.get("fwd_up"), mask.get("fwd_down")
    if up is None and down is None:
        return 0
    if up is None or down is None:
        return int((up if down is None else down).sum())
    return int((up | down).sum())
