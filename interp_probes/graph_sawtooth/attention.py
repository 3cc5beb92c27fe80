"""Tokenised samples and the attention capture of the selection pass (sections 1.4-1.6, 3, 6, 7b).

One hooked forward per batch captures `attn_pattern` at the requested layers and reduces it at
once: per sample the ROI crop of every head (for the structure scores), the head-mean attention
of the ROI rows to the sink, and the head-mean pattern over the real tokens (for the entropy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from interp.sites import Site

from .graphs import Sample, token_spans
from .slash import Slash, sink_columns


@dataclass
class Tokenised:
    """A sample as the model reads it: its token ids and the ROI / segment token spans."""

    sample: Sample
    text: str
    ids: list[int]
    roi: tuple[int, int]
    """Inclusive token span [first edge token, last edge token] (unpadded positions)."""
    spans: list[tuple[int, int]]
    """Segment token spans relative to the ROI start (inclusive)."""

    @property
    def roi_size(self) -> int:
        return self.roi[1] - self.roi[0] + 1


def model_text(model, prompt: str, prompt_format: str) -> tuple[str, int]:
    """(text the model reads, offset of the prompt inside it)."""
    if prompt_format == "chat":
        text = model.chat_text(prompt, system="")
        return text, text.index(prompt)
    return prompt, 0


def tokenise(model, sample: Sample, prompt_format: str = "raw") -> Tokenised:
    """Token ids (BOS per the tokenizer's rule, none on top of a chat template) and spans from
    the offset mapping."""
    text, shift = model_text(model, sample.prompt, prompt_format)
    templated = prompt_format == "chat" and model.info.chat
    enc = model.tokenizer(text, add_special_tokens=not templated, return_offsets_mapping=True)
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    edges = token_spans(offsets, [(a + shift, b + shift) for a, b in sample.edge_chars])
    segs = token_spans(offsets, [(a + shift, b + shift) for a, b in sample.segment_chars])
    roi = (edges[0][0], edges[-1][1])
    local = [(s - roi[0], e - roi[0]) for s, e in segs]
    return Tokenised(sample, text, list(enc["input_ids"]), roi, local)


def pad_left(model, items: list[Tokenised]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Left-padded input_ids and attention_mask (batch, pos) and each row's pad count."""
    pad_id = model.tokenizer.pad_token_id
    if pad_id is None:
        pad_id = model.tokenizer.eos_token_id or 0
    n = max(len(t.ids) for t in items)
    ids = torch.full((len(items), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), n), dtype=torch.long)
    pads = []
    for r, t in enumerate(items):
        p = n - len(t.ids)
        ids[r, p:] = torch.tensor(t.ids)
        mask[r, p:] = 1
        pads.append(p)
    return ids.to(model.device), mask.to(model.device), pads


@dataclass
class Captured:
    """What the selection pass keeps of one sample, all layers stacked."""

    roi_heads: np.ndarray
    """(layer, head, R, R) float32 ROI crops of every head."""
    sink_mass: np.ndarray
    """(layer,) mean over ROI query rows of the head-mean attention to the sink columns."""
    entropy: np.ndarray | None
    """(layer,) spectral entropy of the head-mean pattern over the real tokens."""


@torch.no_grad()
def capture_batch(model, items: list[Tokenised], layers: list[int], offsets=(0,), slash: Slash | None = None,
                  entropy: bool = True) -> list[Captured]:
    """One hooked forward over `items`: per sample the ROI crops of every head at `layers`, the
    sink mass and (optionally) the spectral entropy. `slash` adds the SLASH hooks (downstream check)."""
    ids, mask, pads = pad_left(model, items)
    b, t = ids.shape
    sinks = sink_columns(mask, t, b, offsets, ids.device)  # (b, n_sink) padded positions
    rois: dict[int, list[np.ndarray]] = {}
    sink: dict[int, list[float]] = {}
    ent: dict[int, list[float]] = {}

    def make_hook(layer: int):
        def hook(p: torch.Tensor) -> None:
            p = p.detach().float()  # (b, head, q, k)
            mean = p.mean(1)  # (b, q, k)
            rois[layer], sink[layer], ent[layer] = [], [], []
            for r, it in enumerate(items):
                s, e = pads[r] + it.roi[0], pads[r] + it.roi[1]
                rois[layer].append(p[r, :, s : e + 1, s : e + 1].cpu().numpy())
                sink[layer].append(float(mean[r, s : e + 1][:, sinks[r]].sum(-1).mean()))
                if entropy:
                    a = mean[r, pads[r] :, pads[r] :]
                    sv = torch.linalg.svdvals(a.double())
                    w = sv**2 / (sv**2).sum().clamp(min=1e-300)
                    w = w[w > 0]
                    ent[layer].append(float(-(w * w.log()).sum()))
            return None

        return hook

    pairs = [(Site("attn_pattern", layer), make_hook(layer)) for layer in layers]
    if slash is not None:
        pairs = slash.pairs() + pairs  # edit first, capture later layers
    with model.hooks(pairs):
        ctx = slash.batch(mask) if slash is not None else _null()
        with ctx:
            forward_last(model, ids, mask)
    out = []
    for r in range(len(items)):
        out.append(Captured(
            roi_heads=np.stack([rois[layer][r] for layer in layers]),
            sink_mass=np.array([sink[layer][r] for layer in layers]),
            entropy=np.array([ent[layer][r] for layer in layers]) if entropy else None,
        ))
    return out


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


@torch.no_grad()
def forward_last(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits of the last position only (batch, d_vocab), through the hooked model.

    The unembedding is applied to the last position alone (HF's `logits_to_keep`), which saves
    most of the cost on large-vocabulary models; hooks see the full sequence as usual.
    """
    bridge = getattr(model, "bridge", None)
    if bridge is None:  # another backend: full logits
        return model.forward(ids, mask)[:, -1]
    return bridge(ids, attention_mask=mask, logits_to_keep=1)[:, -1]


def batches(n: int, size: int) -> list[list[int]]:
    """The indices 0..n-1 in consecutive batches of at most `size`."""
    return [list(range(i, min(i + size, n))) for i in range(0, n, size)]
