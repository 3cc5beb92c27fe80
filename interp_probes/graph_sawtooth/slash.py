"""SLASH (section 8): the closed-form sink redistribution as an attention-pattern hook.

For every modified row q with sink mass p_s (summed over the sink columns):

    p'_s = gamma * p_s          p'_j = p_j * (1 + (1 - gamma) * p_s / (1 - p_s))   for j not a sink

so rows still sum to 1, masked keys stay 0 and non-sink keys keep their ratios. Rows of padding
queries, rows that see only sinks (p_s >= 1 - 1e-6) and rows that cannot see a sink (p_s = 0,
e.g. past a sliding window) are left unchanged. The edit runs only when the query length is > 1
(the prompt pass); the arithmetic is float32 whatever the model dtype, with 1 - p_s taken as the
row's non-sink mass (the same in exact arithmetic, and stable when p_s is close to 1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from interp.sites import Site

SINK_FULL = 1 - 1e-6
"""Rows whose sink mass reaches this are left unchanged (only the sink is visible)."""


def sink_columns(attention_mask: Int[Tensor, "b k"] | None, n_keys: int, batch: int,
                 offsets: Sequence[int] = (0,), device=None) -> Int[Tensor, "b n_sink"]:
    """Sink key columns per row: the first real (non-pad) position plus each offset."""
    if attention_mask is None:
        first = torch.zeros(batch, dtype=torch.long, device=device)
    else:
        first = attention_mask.long().argmax(-1)  # first 1 of each row (left padding)
    cols = first[:, None] + torch.as_tensor(list(offsets), dtype=torch.long, device=first.device)[None]
    return cols.clamp(max=n_keys - 1)


def redistribute(
    p: Float[Tensor, "b h q k"], gamma: float, sinks: Int[Tensor, "b n_sink"], first_real: Int[Tensor, " b"]
) -> tuple[Float[Tensor, "b h q k"], Bool[Tensor, "b h q"]]:
    """SLASH on a post-softmax pattern (float32 result) and the mask of rows it modified."""
    p32 = p.float()
    b, _, q, k = p32.shape
    sink_key = torch.zeros(b, k, dtype=torch.bool, device=p.device)
    sink_key.scatter_(1, sinks.to(p.device), True)
    sk = sink_key[:, None, None, :]  # (b, 1, 1, k)
    ps = (p32 * sk).sum(-1)  # (b, h, q) sink mass
    qpos = torch.arange(k - q, k, device=p.device)  # absolute query positions (prefill: 0..k-1)
    real_q = qpos[None, :] >= first_real.to(p.device)[:, None]  # (b, q)
    rows = real_q[:, None, :] & (ps < SINK_FULL) & (ps > 0)
    # 1 - p_s taken as the row's non-sink mass: equal in exact arithmetic, and it keeps float32
    # rows summing to what they summed to when p_s is close to 1 (a 1e-4 remainder scaled 1e4x)
    rest = (p32 * ~sk).sum(-1)
    factor = 1 + (1 - gamma) * ps / rest.clamp(min=1e-30)
    edited = torch.where(sk, p32 * gamma, p32 * factor[..., None])
    out = torch.where(rows[..., None], edited, p32)
    return out, rows


def invariant_errors(p: Tensor, out: Tensor, rows: Tensor, sinks: Tensor, gamma: float) -> dict[str, float]:
    """Exact-invariant errors over the modified rows: row sums, sink ratio, non-sink ratio spread.

    The non-sink spread is relative (max_j r_j / min_j r_j - 1, over keys with p_j > 1e-6, with
    r_j = p'_j / p_j), i.e. how far the non-sink keys are from keeping their ratios; the absolute
    spread max_j r_j - min_j r_j is reported beside it.
    """
    p64, o64 = p.double(), out.double()
    b, _, _, k = p.shape
    sink_key = torch.zeros(b, k, dtype=torch.bool, device=p.device)
    sink_key.scatter_(1, sinks.to(p.device), True)
    sk = sink_key[:, None, None, :]
    n = int(rows.sum())
    if n == 0:
        return {"rows_checked": 0, "max_row_sum_err": 0.0, "max_sink_ratio_err": 0.0,
                "max_nonsink_ratio_err": 0.0, "max_nonsink_ratio_abs_err": 0.0}
    row_sum_err = (o64.sum(-1) - 1).abs()[rows].max()
    sink_err = ((o64 - gamma * p64).abs() * sk).amax(-1)[rows].max()
    valid = (~sk) & (p64 > 1e-6)
    ratio = o64 / p64.clamp(min=1e-300)
    hi = torch.where(valid, ratio, torch.full_like(ratio, -torch.inf)).amax(-1)
    lo = torch.where(valid, ratio, torch.full_like(ratio, torch.inf)).amin(-1)
    ok = rows & valid.any(-1)
    rel = (hi / lo - 1)[ok].max() if bool(ok.any()) else torch.tensor(0.0)
    ab = (hi - lo)[ok].max() if bool(ok.any()) else torch.tensor(0.0)
    return {"rows_checked": n, "max_row_sum_err": float(row_sum_err), "max_sink_ratio_err": float(sink_err),
            "max_nonsink_ratio_err": float(rel), "max_nonsink_ratio_abs_err": float(ab)}


class Slash:
    """SLASH hooks on `layers` at `gamma`. Set the batch's attention mask before each forward
    (`with slash.batch(mask):`); invariant errors of every modified row are accumulated per layer."""

    def __init__(self, layers: Sequence[int], gamma: float, offsets: Sequence[int] = (0,), check: bool = True):
        self.layers, self.gamma, self.offsets, self.check = list(layers), float(gamma), list(offsets), check
        self.mask: Tensor | None = None
        self.errors: dict[int, dict[str, float]] = {}
        self.applied = 0

    @contextlib.contextmanager
    def batch(self, attention_mask: Tensor | None) -> Iterator[None]:
        self.mask = attention_mask
        try:
            yield
        finally:
            self.mask = None

    def hook(self, layer: int):
        def fn(p: Tensor) -> Tensor | None:
            b, _, q, k = p.shape
            if q <= 1:
                return None  # decode steps are untouched
            mask = self.mask
            if mask is not None and mask.shape != (b, k):
                raise ValueError(f"SLASH hook: attention mask {tuple(mask.shape)} does not match the pattern {b}x{k}")
            sinks = sink_columns(mask, k, b, self.offsets, p.device)
            first = mask.long().argmax(-1) if mask is not None else torch.zeros(b, dtype=torch.long, device=p.device)
            out, rows = redistribute(p, self.gamma, sinks, first)
            if self.check:
                self._record(layer, invariant_errors(p, out, rows, sinks, self.gamma))
            self.applied += 1
            return out.to(p.dtype)

        return fn

    def _record(self, layer: int, errs: dict[str, float]) -> None:
        acc = self.errors.setdefault(layer, {key: 0.0 for key in errs})
        for key, v in errs.items():
            acc[key] = acc[key] + v if key == "rows_checked" else max(acc[key], v)

    def pairs(self) -> list[tuple[Site, object]]:
        return [(Site("attn_pattern", layer), self.hook(layer)) for layer in self.layers]
