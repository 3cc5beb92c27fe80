"""Per-layer lens quality: next-token KL to the model's output, top-k accuracy, the readout statistics of the
workspace, and bridge-entity recall on two-hop prompts (pass@k with Wilson intervals).

A lens here is a transport: (layer, residual after that block) -> a residual in the target layer's basis, which the
model's own final norm and unembedding (with its soft-capping) read (`model.unembed`). The logit lens is the
identity, the Jacobian lens J_l h, the tuned lens A_l h + b_l.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import run_with_cache
from interp.sites import Site

from .workspace import excess_kurtosis

Transport = Callable[[int, Tensor], Tensor]
"""(layer, residual (..., d_model)) -> residual in the target layer's basis (..., d_model)."""


def residuals(model, ids: Int[Tensor, "batch pos"], mask: Tensor | None,
              layers: Sequence[int]) -> tuple[Float[Tensor, "batch pos vocab"], Float[Tensor, "layer batch pos d"]]:
    """The model's logits and the residual after each of `layers` (one hooked forward)."""
    sites = [Site("resid_post", layer) for layer in layers]
    logits, cache = run_with_cache(model, ids, mask, sites)
    return logits, torch.stack([cache[s] for s in sites])


def kl_to(logp_model: Float[Tensor, "... vocab"], logp_lens: Float[Tensor, "... vocab"]) -> Float[Tensor, "..."]:
    """KL(model || lens) per position, in nats."""
    return (logp_model.exp() * (logp_model - logp_lens)).sum(-1)


@torch.no_grad()
def next_token_stats(model, lenses: Mapping[str, Transport], windows: Sequence[Sequence[int]], n_layers: int,
                     top_k: int, batch: int = 4) -> dict[str, dict[str, Tensor]]:
    """Per lens, over held-out windows (positions 1 .. n-2: not the attention sink, and with a next token):
    {"kl": (layer,), "topk_acc": (layer,), "top1_acc": (layer,), "kurtosis": (layer,), "top1": (layer, text, pos)},
    plus "model": {"topk_acc", "top1_acc"} (the model's own output)."""
    layers = list(range(n_layers))
    acc: dict[str, dict[str, list]] = {name: {k: [] for k in ("kl", "hit", "hit1", "kurt", "top1")} for name in lenses}
    model_hits, model_hits1 = [], []
    for i in range(0, len(windows), batch):
        ids = torch.tensor([list(w) for w in windows[i:i + batch]], device=model.device)
        logits, resid = residuals(model, ids, None, layers)
        nxt = ids[:, 2:]  # next token of positions 1 .. n-2
        logp_model = logits[:, 1:-1].float().log_softmax(-1)
        model_hits.append(_hits(logp_model, nxt, top_k))
        model_hits1.append(_hits(logp_model, nxt, 1))
        for name, transport in lenses.items():
            per = {k: [] for k in acc[name]}
            for layer in layers:
                lens_logits = model.unembed(transport(layer, resid[layer][:, 1:-1])).float()
                logp = lens_logits.log_softmax(-1)
                per["kl"].append(kl_to(logp_model, logp))
                per["hit"].append(_hits(logp, nxt, top_k))
                per["hit1"].append(_hits(logp, nxt, 1))
                per["kurt"].append(excess_kurtosis(lens_logits))
                per["top1"].append(lens_logits.argmax(-1))
            for k, v in per.items():
                acc[name][k].append(torch.stack(v))  # (layer, batch, pos)
    out: dict[str, dict[str, Tensor]] = {}
    for name, a in acc.items():
        cat = {k: torch.cat(v, 1).cpu() for k, v in a.items()}
        out[name] = {"kl": cat["kl"].flatten(1).mean(1), "topk_acc": cat["hit"].float().flatten(1).mean(1),
                     "top1_acc": cat["hit1"].float().flatten(1).mean(1), "kurtosis": cat["kurt"].flatten(1).mean(1),
                     "top1": cat["top1"]}
    out["model"] = {"topk_acc": torch.cat(model_hits).float().mean().cpu(),
                    "top1_acc": torch.cat(model_hits1).float().mean().cpu()}
    return out


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
        for name, transport in lenses.items():
            r = [rank_of(model.unembed(transport(layer, resid[layer][:, -1])).float(), tok) for layer in layers]
            out[name].append(torch.stack(r).cpu())
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
