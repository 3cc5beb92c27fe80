"""SAE activations of texts: the forward stops at the SAE's hook, and only valid positions >= 1 are encoded.

The forward raises a private exception from the hook at the SAE's own site once it has read the activation,
so the layers above never run (detection, injection and the loop fit their budgets only because of that).
Position 0 (the sink, with its massive activation) and pads are never SAE inputs: the valid mask is the
tokenizer's attention mask without each sequence's first real position, and codes there are 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from interp import token_mask
from interp.sae import encode
from interp.sites import Site


@torch.no_grad()
def site_activations(model, site: Site, ids: Tensor, mask: Tensor) -> Float[Tensor, "batch pos d"]:
    """The activation at `site` for (ids, mask), with the forward stopped right there."""
    return model.forward_until(ids, site, mask).detach()


def valid_positions(mask: Tensor) -> Bool[Tensor, "batch pos"]:
    """Real tokens without each sequence's first real position (position 0)."""
    return token_mask(mask, skip_first=1)


@torch.no_grad()
def encode_valid(sae, x: Float[Tensor, "batch pos d"],
                 valid: Bool[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_sae"]:
    """SAE codes at valid positions only (the others are never encoded and hold 0)."""
    out = torch.zeros(*valid.shape, sae.cfg.d_sae, dtype=torch.float32, device=x.device)
    if valid.any():
        out[valid] = encode(sae, x[valid]).float().to(x.device)
    return out


def masked_max(codes: Float[Tensor, "batch pos f"], valid: Bool[Tensor, "batch pos"]) -> Float[Tensor, "batch f"]:
    """Max over valid positions per sequence (0 for a sequence without any valid position)."""
    filled = codes.masked_fill(~valid[..., None], float("-inf"))
    m = filled.amax(1)
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


@dataclass
class SparseCodes:
    """Non-zero codes at valid positions: parallel arrays (sample, pos, feature, value)."""

    sample: np.ndarray
    pos: np.ndarray
    feature: np.ndarray
    value: np.ndarray

    def select(self, features: Sequence[int]) -> SparseCodes:
        keep = np.isin(self.feature, np.asarray(features))
        return SparseCodes(self.sample[keep], self.pos[keep], self.feature[keep], self.value[keep])


@dataclass
class Scan:
    """A corpus through the SAE: per-sample maxima and the sparse per-token codes."""

    sample_max: Float[Tensor, "n d_sae"]
    codes: SparseCodes
    ids: Tensor
    """(n, pos) token ids (right-padded)."""
    valid: Tensor
    """(n, pos) valid positions (attention mask without position 0)."""


@torch.no_grad()
def scan_texts(model, sae, site: Site, enc: dict[str, Tensor], batch_size: int, progress=None) -> Scan:
    """Per-sample max codes and sparse codes of the tokenized (right-padded) `enc`."""
    ids_all, am_all = enc["input_ids"], enc["attention_mask"]
    maxes, parts = [], []
    starts = range(0, ids_all.shape[0], batch_size)
    for i in (progress(starts, desc="SAE codes") if progress else starts):
        ids, am = ids_all[i : i + batch_size], am_all[i : i + batch_size]
        valid = valid_positions(am)
        codes = encode_valid(sae, site_activations(model, site, ids, am), valid)  # (b, pos, d_sae)
        maxes.append(masked_max(codes, valid).cpu())
        nz = (codes > 0).nonzero()  # (k, 3): row, pos, feature
        parts.append((nz[:, 0].cpu() + i, nz[:, 1].cpu(), nz[:, 2].cpu(), codes[nz[:, 0], nz[:, 1], nz[:, 2]].cpu()))
    cat = [torch.cat([p[j] for p in parts]).cpu().numpy() for j in range(4)]
    codes = SparseCodes(cat[0].astype(np.int32), cat[1].astype(np.int16), cat[2].astype(np.int32),
                        cat[3].astype(np.float32))
    return Scan(torch.cat(maxes), codes, ids_all.cpu(), valid_positions(am_all).cpu())


def pad_ids(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-padded (ids, attention mask) of token-id lists."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[r, : len(s)] = 1
    return ids, mask


@torch.no_grad()
def feature_max(model, sae, site: Site, seqs: Sequence[Sequence[int]], features: Sequence[int], batch_size: int,
                pad_id: int, per_token: bool = False):
    """Max activation of features[i] over the valid positions of seqs[i] (token-id lists), batched by length.

    per_token=True also returns each sequence's activations of its feature at every position (0 at invalid ones).
    """
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i]), i))
    out = np.zeros(len(seqs), dtype=np.float64)
    tokens: list[np.ndarray | None] = [None] * len(seqs)
    feats = torch.as_tensor(list(features), dtype=torch.long)
    for b in range(0, len(order), batch_size):
        rows = order[b : b + batch_size]
        ids, am = pad_ids([seqs[i] for i in rows], pad_id)
        ids, am = ids.to(model.device), am.to(model.device)
        valid = valid_positions(am)
        codes = encode_valid(sae, site_activations(model, site, ids, am), valid)
        f = feats[rows].to(codes.device)
        col = codes.gather(2, f[:, None, None].expand(-1, codes.shape[1], 1))[..., 0]  # (b, pos)
        m = masked_max(col[..., None], valid)[:, 0]
        for j, i in enumerate(rows):
            out[i] = float(m[j])
            if per_token:
                tokens[i] = col[j, : len(seqs[i])].cpu().numpy()
    return (out, tokens) if per_token else out
