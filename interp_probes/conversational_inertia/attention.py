"""Teacher-forced attention: the current reply's rows, reduced inside the pattern hooks.

One hooked forward per batch of transcripts. At every layer the hook keeps, per transcript, only
(a) the blocks [head, reply row, earlier-reply column] for the diagonal score, (b) the attention
share of every segment from the reply rows (averaged over rows and heads) and (c) for a few viewer
transcripts the reply rows against all keys; the [batch, head, T, T] pattern is dropped at once.
The forward stops after the last layer's pattern (no MLP, no unembedding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import NumericError
from interp.sites import Site

from .render import SEGMENTS, SHARE_COLUMNS, Rendered

_SEG_INDEX = {s: i for i, s in enumerate(SEGMENTS)}


class _Done(Exception):
    """Raised by the last layer's hook: every statistic is taken, the rest of the forward is not needed."""


@dataclass
class Prepared:
    """What the hooks need from one rendered transcript."""

    ids: list[int]
    rows: np.ndarray
    """Positions of the current reply's content tokens (n)."""
    targets: list[np.ndarray]
    """Positions of the content tokens of each target earlier reply (m each)."""
    onehot: np.ndarray
    """(T, len(SHARE_COLUMNS)) membership of each key in the partition segments, recent_assistant, sink."""


def prepare(r: Rendered, target_turn: str = "most_recent") -> Prepared:
    """Rows, target columns and segment membership of a teacher-forced rendering."""
    prev = r.previous_replies
    if not prev:
        raise ValueError("a transcript needs at least one earlier reply")
    rows = np.arange(*r.response.content)
    chosen = prev[-1:] if target_turn == "most_recent" else prev
    targets = [np.arange(*t.content) for t in chosen]
    onehot = np.zeros((len(r), len(SHARE_COLUMNS)), np.float32)
    for pos, seg in enumerate(r.segment):
        if seg == "sink":
            onehot[pos, SHARE_COLUMNS.index("sink")] = 1
        else:
            onehot[pos, _SEG_INDEX[seg]] = 1
    onehot[slice(*prev[-1].tokens), SHARE_COLUMNS.index("recent_assistant")] = 1
    return Prepared(r.ids, rows, targets, onehot)


@dataclass
class Measured:
    """Per transcript: blocks per target [L, H, n, m], shares [L, len(SHARE_COLUMNS)], viewer rows."""

    blocks: list[list[np.ndarray]]
    shares: np.ndarray
    """(S, L, len(SHARE_COLUMNS)): share of non-sink attention (sink: raw attention at position 0)."""
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    """transcript index -> [L, H, n, T] reply rows against every key (viewer transcripts only)."""
    row_sum_err: float = 0.0
    """Largest |Σ_j A[i, j] - 1| over reply rows, heads and layers (all keys, sink included)."""
    share_sum_err: float = 0.0
    """Largest |Σ_S share_S - 1| over rows, heads and layers for the partition segments."""


def _reduce(pattern: Float[Tensor, "head q k"], prep: Prepared, onehot: Tensor, rows: Tensor
            ) -> tuple[list[np.ndarray], Tensor, Tensor, float, float]:
    t = len(prep.ids)
    a = pattern[:, rows, :t].float()  # (head, n, T)
    sums = a @ onehot  # (head, n, columns)
    n_part = len(SEGMENTS)
    denom = sums[..., :n_part].sum(-1, keepdim=True)  # non-sink mass of each row
    shares = sums / denom.clamp_min(1e-30)
    shares[..., -1] = sums[..., -1]  # the sink column: raw attention to position 0
    row_err = float((denom[..., 0] + sums[..., -1] - 1).abs().max())
    share_err = float((shares[..., :n_part].sum(-1) - 1).abs().max())
    blocks = [a[:, :, torch.as_tensor(c)].cpu().numpy() for c in prep.targets]
    return blocks, shares.mean((0, 1)), a, row_err, share_err


@torch.no_grad()
def measure(model, preps: Sequence[Prepared], batch_size: int, keep_rows: Sequence[int] = (), progress=None
            ) -> Measured:
    """Hooked teacher-forced forwards over `preps` (batched by length, right-padded)."""
    n_layers = model.info.n_layers
    s_count = len(preps)
    blocks: list[list[list[np.ndarray]]] = [[[] for _ in p.targets] for p in preps]
    shares = np.zeros((s_count, n_layers, len(SHARE_COLUMNS)), np.float32)
    viewer = {i: [] for i in keep_rows}
    errs = [0.0, 0.0]
    order = sorted(range(s_count), key=lambda i: len(preps[i].ids))
    batches = [order[i : i + batch_size] for i in range(0, s_count, batch_size)]
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    for batch in progress(batches) if progress else batches:
        width = max(len(preps[i].ids) for i in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for j, i in enumerate(batch):
            ids[j, : len(preps[i].ids)] = torch.tensor(preps[i].ids)
            mask[j, : len(preps[i].ids)] = 1
        dev = model.device
        onehots = [torch.as_tensor(preps[i].onehot, device=dev) for i in batch]
        rows = [torch.as_tensor(preps[i].rows, device=dev) for i in batch]

        def hook(layer: int, batch=batch, onehots=onehots, rows=rows):
            def fn(pattern: Float[Tensor, "batch head q k"]) -> None:
                for j, i in enumerate(batch):
                    bl, sh, a, e1, e2 = _reduce(pattern[j], preps[i], onehots[j], rows[j])
                    for t, b in enumerate(bl):
                        blocks[i][t].append(b)
                    shares[i, layer] = sh.cpu().numpy()
                    errs[0], errs[1] = max(errs[0], e1), max(errs[1], e2)
                    if i in viewer:
                        viewer[i].append(a.cpu().numpy())
                if layer == n_layers - 1:
                    raise _Done
                return None

            return fn

        with model.hooks([(Site("attn_pattern", layer), hook(layer)) for layer in range(n_layers)]):  # noqa: B023
            try:
                model.forward(ids, mask)
            except _Done:
                pass
    out_blocks = [[np.stack(per_layer) for per_layer in per_target] for per_target in blocks]  # [L, H, n, m]
    if not np.isfinite(shares).all():
        raise NumericError("non-finite attention shares in the teacher-forced pass")
    return Measured(out_blocks, shares, {i: np.stack(v) for i, v in viewer.items()}, errs[0], errs[1])


def layer_windows(model) -> list[int | None]:
    """Sliding-window size of each layer's attention (None: global)."""
    cfg = model.hf.config
    cfg = getattr(cfg, "text_config", None) or cfg
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    n = model.info.n_layers
    if window is None or not types:
        return [None] * n
    return [window if "sliding" in str(t) else None for t in types]


def key_fractions(onehot: np.ndarray, rows: np.ndarray, windows: Sequence[int | None]) -> np.ndarray:
    """(L, len(SEGMENTS)+1) mean over reply rows of each segment's share of the visible non-sink keys
    (the last column: recent_assistant); the denominator of the enrichment."""
    part = onehot[:, : len(SEGMENTS) + 1].astype(np.float64)
    part[0] = 0  # the sink is not a context token
    csum = np.vstack([np.zeros((1, part.shape[1])), np.cumsum(part, 0)])  # csum[j] = sum over keys < j
    out = []
    for w in windows:
        lo = np.ones_like(rows) if w is None else np.maximum(1, rows - w + 1)
        counts = csum[rows + 1] - csum[lo]  # keys lo..row
        visible = (rows + 1 - lo).clip(min=1)[:, None]
        out.append((counts / visible).mean(0))
    return np.stack(out)
