"""Per-layer lens quality: next-token KL to the model's output, top-k accuracy, the readout statistics of the
workspace, and bridge-entity recall on two-hop prompts (pass@k with Wilson intervals).

A lens here is a transport: (layer, residual after that block) -> a residual in the target layer's basis, which the
model's own final norm and unembedding (with its soft-capping) read (`model.unembed`). The logit lens is the
identity, the Jacobian lens J_l h, the tuned lens A_l h + b_l.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import run_with_cache
from interp.sites import Site

from .readout import Transport, read_layers
from .workspace import excess_kurtosis


def residuals(model, ids: Int[Tensor, "batch pos"], mask: Tensor | None,
              layers: Sequence[int]) -> tuple[Float[Tensor, "batch pos vocab"], Float[Tensor, "layer batch pos d"]]:
    """The model's logits and the residual after each of `layers` (one hooked forward)."""
    sites = [Site("resid_post", layer) for layer in layers]
    logits, cache = run_with_cache(model, ids, mask, sites)
    return logits, torch.stack([cache[s] for s in sites])


def kl_to(logp_model: Float[Tensor, "... vocab"], logp_lens: Float[Tensor, "... vocab"],
          p_model: Float[Tensor, "... vocab"] | None = None) -> Float[Tensor, "..."]:
    """KL(model || lens) per position, in nats (`p_model`: logp_model.exp(), when the caller has it)."""
    p = logp_model.exp() if p_model is None else p_model
    return (logp_model - logp_lens).mul_(p).sum(-1)  # p * (a - b), the product in place


@torch.no_grad()
def next_token_stats(model, lenses: Mapping[str, Transport], windows: Sequence[Sequence[int]], n_layers: int,
                     top_k: int, batch: int = 4) -> dict[str, dict[str, Tensor]]:
    """Per lens, over held-out windows (positions 1 .. n-2: not the attention sink, and with a next token):
    {"kl": (layer,), "topk_acc": (layer,), "top1_acc": (layer,), "kurtosis": (layer,), "top1": (layer, text, pos)},
    plus "model": {"topk_acc", "top1_acc"} (the model's own output). Each forward's readouts go through
    `read_layers` (many layers per product over the vocabulary; the identity readout once per layer)."""
    layers = list(range(n_layers))
    keys = ("kl", "hit", "hit1", "kurt", "top1")
    acc: dict[str, dict[str, list]] = {name: {k: [] for k in keys} for name in lenses}
    model_hits, model_hits1 = [], []
    for i in range(0, len(windows), batch):
        ids = torch.tensor([list(w) for w in windows[i:i + batch]], device=model.device)
        logits, resid = residuals(model, ids, None, layers)
        nxt = ids[:, 2:]  # next token of positions 1 .. n-2
        logp_model = logits[:, 1:-1].float().log_softmax(-1)
        p_model = logp_model.exp()
        del logits
        model_hits.append(_hits(logp_model, nxt, top_k))
        model_hits1.append(_hits(logp_model, nxt, 1))
        stats = functools.partial(_token_stats, logp_model=logp_model, p_model=p_model, nxt=nxt, top_k=top_k)
        hs = {layer: resid[layer][:, 1:-1] for layer in layers}
        shared: dict[int, dict[str, Tensor]] = {}
        for name, transport in lenses.items():
            got = read_layers(model, transport, hs, stats, shared)
            for k in keys:
                acc[name][k].append(torch.stack([got[layer][k] for layer in layers]))  # (layer, batch, pos)
    out: dict[str, dict[str, Tensor]] = {}
    for name, a in acc.items():
        cat = {k: torch.cat(v, 1).cpu() for k, v in a.items()}
        out[name] = {"kl": cat["kl"].flatten(1).mean(1), "topk_acc": cat["hit"].float().flatten(1).mean(1),
                     "top1_acc": cat["hit1"].float().flatten(1).mean(1), "kurtosis": cat["kurt"].flatten(1).mean(1),
                     "top1": cat["top1"]}
    out["model"] = {"topk_acc": torch.cat(model_hits).float().mean().cpu(),
                    "top1_acc": torch.cat(model_hits1).float().mean().cpu()}
    return out


def _token_stats(lens_logits: Float[Tensor, "layer b p vocab"], logp_model: Float[Tensor, "b p vocab"],
                 p_model: Float[Tensor, "b p vocab"], nxt: Int[Tensor, "b p"], top_k: int) -> dict[str, Tensor]:
    """One chunk of readouts' next-token statistics, each (layer, b, p)."""
    logp = lens_logits.log_softmax(-1)
    top = logp.topk(top_k, dim=-1).indices  # sorted: the first is the top-1
    return {"kl": kl_to(logp_model, logp, p_model), "hit": (top == nxt[..., None]).any(-1), "hit1": top[..., 0] == nxt,
            "kurt": excess_kurtosis(lens_logits), "top1": lens_logits.argmax(-1)}


def _ranks(lens_logits: Float[Tensor, "layer b vocab"], ids: Int[Tensor, " b"]) -> dict[str, Tensor]:
    """One chunk of readouts' ranks of ids[i] at row i, (layer, b)."""
    return {"rank": rank_of(lens_logits, ids.expand(lens_logits.shape[:-1]))}


def _hits(logp: Float[Tensor, "b p vocab"], target: Int[Tensor, "b p"], k: int) -> Tensor:
    """Whether the target token is among the top k (b, p)."""
    return (logp.topk(k, dim=-1).indices == target[..., None]).any(-1)


def rank_of(logits: Float[Tensor, "... vocab"], ids: Int[Tensor, "..."]) -> Int[Tensor, "..."]:
    """Rank (0 = top) of token ids[...] in each row of logits."""
    target = logits.gather(-1, ids[..., None])
    return (logits > target).sum(-1)


@torch.no_grad()
def last_position_ranks(model, lenses: Mapping[str, Transport], enc: Mapping[str, Tensor], n_layers: int,
                        token_ids: Int[Tensor, " prompt"], batch: int = 8) -> dict[str, Tensor]:
    """Rank of token_ids[i] in each lens's readout at prompt i's last position, per layer: lens -> (layer, prompt);
    "model" -> (prompt,) at the model's output. Prompts are left-padded (the last position is the last token)."""
    layers = list(range(n_layers))
    out: dict[str, list[Tensor]] = {name: [] for name in [*lenses, "model"]}
    n = enc["input_ids"].shape[0]
    for i in range(0, n, batch):
        ids, mask = enc["input_ids"][i:i + batch], enc["attention_mask"][i:i + batch]
        logits, resid = residuals(model, ids, mask, layers)
        tok = token_ids[i:i + batch].to(logits.device)
        out["model"].append(rank_of(logits[:, -1].float(), tok).cpu())
        del logits
        ranks = functools.partial(_ranks, ids=tok)
        hs = {layer: resid[layer][:, -1] for layer in layers}
        shared: dict[int, dict[str, Tensor]] = {}
        for name, transport in lenses.items():
            got = read_layers(model, transport, hs, ranks, shared)
            out[name].append(torch.stack([got[layer]["rank"] for layer in layers]).cpu())
    return {k: torch.cat(v, -1) for k, v in out.items()}


def wilson_bounds(k: np.ndarray, n: int, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """Wilson 95 % interval of rates k / n (elementwise); NaN when n is 0."""
    k = np.asarray(k, dtype=float)
    if n == 0:
        return np.full_like(k, np.nan), np.full_like(k, np.nan)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return np.clip(centre - half, 0.0, p), np.clip(centre + half, p, 1.0)  # 0 and 1 exactly at the ends


def pass_at_k(ranks: Int[Tensor, "layer prompt"], k: int) -> dict[str, np.ndarray]:
    """Per layer: the share of prompts whose token ranks in the top k, with its Wilson interval."""
    hits = (ranks < k).sum(1).cpu().numpy()
    n = ranks.shape[1]
    lo, hi = wilson_bounds(hits, n)
    return {"rate": hits / max(n, 1), "lo": lo, "hi": hi, "n": np.full(len(hits), n)}
