"""Training a transcoder set on the model's own (MLP input, MLP output) pairs, its quality, and its cache.

`train_transcoders(X, Y, cfg)` trains every layer in each step from one in-memory buffer (X, Y: (tok, layer, d)),
with Adam, a linear warm-up and cosine decay. The loss is the MSE of each layer's MLP output normalised by that
layer's variance (so layers with large outputs do not dominate), summed over the output layers for a CLT, plus for
JumpReLU an L0 penalty through the straight-through estimator of Rajamanoharan et al. (2024), the same pseudo-
derivatives as the toolkit's SAEs (`interp.sae.kernel`), with a controller steering its coefficient to
`target_l0`. Thresholds start at the quantile of each feature's pre-activations where it fires on target_l0 / F
of the tokens (the SAEs' init_sparsity="data"); b_dec at the mean output; W_skip at zero (as SAELens).

`transcoder_quality` reports what SAELens reports for a transcoder: the fraction of variance of the MLP output
explained, L0, the dead fraction, and the model's loss with the transcoder spliced in against the clean loss and
the zero-ablation loss (`recovered` = (zero - spliced) / (zero - clean)). Splicing and zero-ablation edit positions
>= 1, the positions the set trains on (the BOS position keeps its real MLP output, as saeco's no-BOS
reconstruction loss): splicing a set at a position it never saw broke the attention sink, so one layer with 0.80
FVE scored below zero-ablation.

`cached_transcoders` trains once per (model, training config, data) and keeps the set under
`cache_root()/transcoders/<key>`, written to a temporary sibling and renamed.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from .._files import atomic_dir
from ..errors import NumericError
from ..replacement import mlp_swap
from ..sites import Site
from .config import TranscoderTrainConfig
from .train import batch_indices
from .transcoder import Transcoders, TranscoderSpec, load_transcoders, save_transcoders

CACHE_VERSION = 3
"""Bumped when training code changes what a cached transcoder set would be (2: scaled activations, bf16 products;
3: bfloat16 training buffers)."""


class _JumpReLU(torch.autograd.Function):
    """a = pre * 1[pre > theta]; da/dpre = 1[pre > theta], da/dtheta = -(theta / eps) R((pre - theta) / eps)."""

    @staticmethod
    def forward(ctx, pre, theta, eps: float):
        ctx.save_for_backward(pre, theta)
        ctx.eps = eps
        return pre * (pre > theta)

    @staticmethod
    def backward(ctx, g):
        pre, theta = ctx.saved_tensors
        window = ((pre - theta).abs() < ctx.eps / 2).to(g.dtype)
        g_theta = -(theta / ctx.eps) * window * g
        return g * (pre > theta), g_theta.reshape(-1, *theta.shape).sum(0), None


class _Step(torch.autograd.Function):
    """L0 = 1[pre > theta]; dL0/dtheta = -(1 / eps) R((pre - theta) / eps), nothing to pre (SAELens's Step)."""

    @staticmethod
    def forward(ctx, pre, theta, eps: float):
        ctx.save_for_backward(pre, theta)
        ctx.eps = eps
        return (pre > theta).to(pre.dtype)

    @staticmethod
    def backward(ctx, g):
        pre, theta = ctx.saved_tensors
        window = ((pre - theta).abs() < ctx.eps / 2).to(g.dtype)
        return None, (-(1.0 / ctx.eps) * window * g).reshape(-1, *theta.shape).sum(0), None


def _lr(cfg: TranscoderTrainConfig, step: int) -> float:
    warm = max(1, cfg.steps // 20)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, cfg.steps - warm)))


def train_transcoders(
    X: Float[Tensor, "tok layer d_in"],
    Y: Float[Tensor, "tok layer d_out"],
    cfg: TranscoderTrainConfig,
    meta: Mapping[str, Any] | None = None,
    progress: bool = False,
    device: str | torch.device | None = None,
) -> Transcoders:
    """A transcoder set trained on the pairs (X[:, l], Y[:, l]) of every layer l; see the module docstring."""
    from tqdm.auto import tqdm

    cfg.validate()
    if X.dim() != 3 or X.shape[:2] != Y.shape[:2] or X.shape[0] < 2:
        raise ValueError(f"train_transcoders: need X (tok, layer, d_in) and Y (tok, layer, d_out) with the same "
                         f"tokens and layers, got {tuple(X.shape)} and {tuple(Y.shape)}")
    device = X.device if device is None else torch.device(device)
    X, Y = X.to(device), Y.to(device)  # kept in their dtype (a bfloat16 buffer stays half size); batches go float32
    n, L, d_in = X.shape
    if not all(torch.isfinite(B[:, layer]).all() for B in (X, Y) for layer in range(L)):
        raise NumericError("train_transcoders: the buffer holds NaN or inf")
    d_out, F = Y.shape[-1], cfg.d_transcoder
    spec = TranscoderSpec(kind=cfg.kind, activation=cfg.activation, n_layers=L, d_in=d_in, d_out=d_out,
                          d_transcoder=F, k=cfg.k)
    gen = torch.Generator().manual_seed(cfg.seed)
    # train on inputs and outputs scaled to a mean squared norm of d (entries ~1, as SAELens's
    # normalize_activations="expected_average_only_in"), so one learning rate suits every layer; folded back below
    # (per layer, so no statistic copies the whole buffer)
    ms_x = torch.stack([X[:, layer].float().pow(2).sum(-1).mean() for layer in range(L)])  # (L,) mean sq. norms
    ms_y = torch.stack([Y[:, layer].float().pow(2).sum(-1).mean() for layer in range(L)])
    sx = math.sqrt(d_in) / ms_x.sqrt().clamp_min(1e-12)  # (L,)
    sy = math.sqrt(d_out) / ms_y.sqrt().clamp_min(1e-12)
    y_mean = torch.stack([Y[:, layer].float().mean(0) for layer in range(L)]) * sy[:, None]  # (L, d_out), scaled
    y_var = (ms_y * sy.pow(2) - y_mean.pow(2).sum(-1)).clamp_min(1e-12)  # (L,) of the scaled outputs

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    W_enc = (randn(L, F, d_in) / math.sqrt(d_in)).requires_grad_()
    b_enc = torch.zeros(L, F, device=device, requires_grad=True)
    # a small decoder at init (sparsify starts a transcoder's at zero): 1 / sqrt(L k) of the output's scale. With
    # 1 / sqrt(k) (the output's scale at init), 59-89 % of the features of SmolLM2's layers 2, 5, 15, 18 died and
    # their mean held-out FVE fell from 0.57 to 0.31 (30k tokens, 2026-12-05)
    dec_scale = (y_var / L).sqrt()[:, None, None] / math.sqrt(max(cfg.target_l0, 1.0))
    W_dec = [(randn(F, spec.n_out(layer), d_out) / math.sqrt(d_out) * dec_scale[layer]).requires_grad_()
             for layer in range(L)]
    b_dec = y_mean.clone().requires_grad_()
    W_skip = torch.zeros(L, d_out, d_in, device=device, requires_grad=True) if cfg.kind == "skip" else None
    with torch.no_grad():  # thresholds where each feature fires on target_l0 / F of a sample
        sample = X[torch.randperm(n, generator=gen)[: min(n, 2048)].to(device)].float() * sx[:, None]
        pre = torch.einsum("bld,lfd->blf", sample, W_enc)  # (s, L, F)
        rank = max(1, min(pre.shape[0], math.ceil((1.0 - min(1.0, cfg.target_l0 / F)) * pre.shape[0])))
        log_theta = pre.kthvalue(rank, dim=0).values.clamp_min(cfg.bandwidth).log().requires_grad_()  # (L, F)
    params = [W_enc, b_enc, b_dec, *W_dec] + ([log_theta] if cfg.activation == "jumprelu" else []) \
        + ([W_skip] if W_skip is not None else [])
    opt = torch.optim.Adam(params, lr=cfg.lr)
    mm = torch.bfloat16 if cfg.matmul_dtype == "bfloat16" else torch.float32
    coeff, l0_ema = None, None
    t0 = time.perf_counter()
    history: list[dict[str, float]] = []
    bar = tqdm(total=cfg.steps, desc=f"train {cfg.kind} transcoders", disable=not progress, leave=False)
    for step, idx in enumerate(batch_indices(n, cfg.batch, cfg.steps, gen)):
        idx = idx.to(device)
        xb, yb = X[idx].float() * sx[:, None], Y[idx].float() * sy[:, None]  # (B, L, d), scaled
        pre = torch.einsum("bld,lfd->blf", xb.to(mm), W_enc.to(mm)).float() + b_enc  # (B, L, F)
        if cfg.activation == "jumprelu":
            theta = log_theta.exp()
            a = _JumpReLU.apply(pre, theta, cfg.bandwidth)
            l0 = _Step.apply(pre, theta, cfg.bandwidth).sum(-1).mean(0)  # (L,)
        else:
            top = pre.topk(cfg.k, dim=-1)
            a = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
            l0 = (a > 0).sum(-1).float().mean(0)
        y_hat = b_dec.expand_as(yb).clone()
        am = a.to(mm)
        if cfg.kind == "clt":
            for src in range(L):
                y_hat[:, src:] = y_hat[:, src:] + torch.einsum("bf,fod->bod", am[:, src], W_dec[src].to(mm)).float()
        else:
            y_hat = y_hat + torch.einsum("blf,lfd->bld", am, torch.stack([w[:, 0] for w in W_dec]).to(mm)).float()
        if W_skip is not None:
            y_hat = y_hat + torch.einsum("bli,loi->blo", xb.to(mm), W_skip.to(mm)).float()
        rec = ((y_hat - yb).pow(2).sum(-1).mean(0) / y_var).mean()
        loss = rec
        if cfg.activation == "jumprelu":
            if coeff is None:
                coeff = 0.1 * float(rec.detach()) / cfg.target_l0
            loss = rec + coeff * l0.mean()
        if not torch.isfinite(loss):
            raise NumericError(f"transcoder training: non-finite loss at step {step}")
        for g in opt.param_groups:
            g["lr"] = _lr(cfg, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        batch_l0 = float(l0.detach().mean())
        l0_ema = batch_l0 if l0_ema is None else 0.9 * l0_ema + 0.1 * batch_l0
        if (step + 1) % 25 == 0:
            if coeff is not None:
                coeff *= math.exp(cfg.controller_rate * max(-1.0, min(1.0, (l0_ema - cfg.target_l0) / cfg.target_l0)))
            history.append({"step": step + 1, "rec": float(rec.detach()), "l0": l0_ema})
        bar.update(1)
    bar.close()
    tc = Transcoders(spec, device=device)
    with torch.no_grad():  # fold the scales in: the set reads and writes the model's own activations
        tc.W_enc.copy_(W_enc * sx[:, None, None])
        tc.b_enc.copy_(b_enc)
        tc.b_dec.copy_(b_dec / sy[:, None])
        tc.threshold.copy_(log_theta.exp())
        for layer in range(L):
            out = torch.arange(layer, layer + spec.n_out(layer), device=device)
            tc.W_dec[layer].copy_(W_dec[layer] / sy[out][None, :, None])
        if W_skip is not None:
            tc.W_skip.copy_(W_skip * sx[:, None, None] / sy[:, None, None])
    seconds = time.perf_counter() - t0
    tc.meta = {**dict(meta or {}), "training": {"config": cfg.key(), "steps": cfg.steps, "seconds": seconds,
                                                 "tokens": n, "rec_final": history[-1]["rec"] if history else None,
                                                 "l0_final": l0_ema, "history": history}}
    return tc.eval().requires_grad_(False)


# ============================================================================= quality


@torch.no_grad()
def fit_stats(tc: Transcoders, X: Tensor, Y: Tensor, chunk: int = 4096) -> dict[str, list[float]]:
    """Per layer on held-out pairs: fraction of variance explained of the MLP output (all features of the set
    writing to it), mean L0 and the fraction of features that never fire."""
    L = tc.n_layers
    X, Y = X.to(tc.W_enc.device), Y.to(tc.W_enc.device)
    err = torch.zeros(L, dtype=torch.float64)
    l0 = torch.zeros(L, dtype=torch.float64)
    fired = torch.zeros(L, tc.spec.d_transcoder, dtype=torch.bool, device=X.device)
    for i in range(0, X.shape[0], chunk):
        xb, yb = X[i : i + chunk], Y[i : i + chunk]
        acts = {layer: tc.encode(layer, xb[:, layer]) for layer in range(L)}
        for layer in range(L):
            y_hat = tc.reconstruct(layer, acts, xb[:, layer])
            err[layer] += float((y_hat - yb[:, layer]).pow(2).sum())
            l0[layer] += float((acts[layer] > 0).sum())
            fired[layer] |= (acts[layer] > 0).any(0)
    var = (Y - Y.mean(0)).pow(2).sum((0, 2)).double().cpu()
    return {"fve": (1 - err / var.clamp_min(1e-12)).tolist(), "l0": (l0 / X.shape[0]).tolist(),
            "dead_fraction": (1 - fired.float().mean(1)).cpu().tolist()}


def splice_hooks(tc: Transcoders, rows: Mapping[int, slice], mode: str, first: int = 1) -> list:
    """Hooks that replace the MLP output of each layer in `rows`, in its batch rows `rows[layer]` and at positions
    >= `first`, with the transcoders' estimate ("splice": features read at the spliced run's own MLP inputs) or with
    zero ("zero"). The transcoders train on positions >= 1, so the BOS position, whose outlier activations they
    never see, keeps its real MLP output in both (as in circuits' graph, where it is held in the targets' bias, or
    with bos_error in its error nodes)."""
    acts: dict[int, Tensor] = {}

    def write(layer, x, y):
        if mode == "splice" and any(t in rows for t in tc.out_layers(layer)):  # its features write to a spliced layer
            acts[layer] = tc.encode(layer, x)
        if layer not in rows:
            return y
        y, r = y.clone(), rows[layer]
        if mode == "zero":
            y[r, first:] = 0
        else:
            est = tc.reconstruct(layer, {k: v[r] for k, v in acts.items() if k <= layer}, x[r])
            y[r, first:] = est[:, first:].to(y.dtype)
        return y

    return mlp_swap(tc.n_layers, write)[0]


@torch.no_grad()
def token_losses(model: Any, ids: Tensor, hooks: list | None = None) -> Tensor:
    """(n,) mean next-token cross-entropy of each row of `ids` (n, len) over positions >= 1, with `hooks`; a forward
    that grows the batch of one row (see `edit_losses`) gives a loss per row it grew to."""
    b = ids.to(model.device)
    with model.hooks(hooks or []):
        logits = model(b).float()
    b = b.expand(logits.shape[0], -1)
    ce = [torch.nn.functional.cross_entropy(logits[i : i + 8, :-1].transpose(1, 2), b[i : i + 8, 1:],
                                            reduction="none") for i in range(0, len(b), 8)]  # 8 rows' log-softmax
    return torch.cat(ce).mean(1).cpu()


EDITS = ("clean", "zero_all", "splice_all")
"""The first rows of `edit_losses`' branching forward: the clean row, every MLP zeroed, every MLP spliced."""


def edit_losses(model: Any, tc: Transcoders, ids: Tensor, per_layer: bool = True, first: int = 1
                ) -> dict[str, Tensor]:
    """Per-row mean losses of `ids` (n, len) clean ("clean", (n,)), with every layer's MLP output zeroed or spliced
    ("zero_all", "splice_all", (n,)) and, with `per_layer`, each layer's alone ("zero", "splice", (L, n)), at
    positions >= `first` (what `splice_hooks` edits).

    One branching forward per row instead of one forward per edit: the row enters alone; at layer 0's input the
    two whole-model copies join it, and at each layer l's input two copies of the clean row, to have l's MLP zeroed
    and spliced. The layers below l run once, on the clean row, instead of once per edited layer: L^2 + 4L
    row-layers instead of 2L^2 + 3L, about half the compute at 30 layers (the unembedding is the same). A forward
    never mixes rows, so each row equals its own forward (bit for bit on the CPU: tests/unit/test_circuits_graph.py
    holds them equal to `splice_hooks` one layer at a time; a GPU's kernels, chosen by batch shape, may round
    differently). A pass holds one row at its start because a mask the model builds for its batch (eager
    attention, a sliding window shorter than the row) broadcasts over the grown batch only from one row."""
    L, n_all = tc.n_layers, len(EDITS)
    spliced_all: dict[int, Tensor] = {}  # layer -> the splice_all row's features there, (1, pos, F)

    def grow(layer: int):
        def hook(x: Float[Tensor, "B pos d"]) -> Tensor:
            clean = x[:1]
            return torch.cat([x] + [clean] * ((n_all - 1 if layer == 0 else 0) + (2 if per_layer else 0)))
        return hook

    def write(layer: int, x: Float[Tensor, "B pos d"], y: Float[Tensor, "B pos d"]) -> Tensor:
        y = y.clone()
        y[1, first:] = 0
        spliced_all[layer] = tc.encode(layer, x[2:3])
        y[2, first:] = tc.reconstruct(layer, spliced_all, x[2:3])[0, first:].to(y.dtype)
        if per_layer:
            y[-2, first:] = 0
            one = x[-1:]
            y[-1, first:] = tc.reconstruct(layer, {layer: tc.encode(layer, one)}, one)[0, first:].to(y.dtype)
        return y

    joins = range(L) if per_layer else [0]
    hooks = mlp_swap(L, write)[0] + [(Site("resid_pre", layer), grow(layer)) for layer in joins]
    rows = []
    for i in range(ids.shape[0]):
        spliced_all.clear()
        rows.append(token_losses(model, ids[i : i + 1], hooks))
    ce = torch.stack(rows, 1)  # (3 [+ 2L], n)
    out = {name: ce[j] for j, name in enumerate(EDITS)}
    if per_layer:
        out["zero"], out["splice"] = ce[n_all::2], ce[n_all + 1::2]
    return out


def transcoder_quality(model: Any, tc: Transcoders, X: Tensor, Y: Tensor, ids: Tensor) -> dict[str, Any]:
    """FVE, L0 and dead fraction per layer on held-out pairs (X, Y), and the loss on `ids` clean, with each
    layer's MLP zero-ablated and with its transcoder spliced in (one layer at a time, as SAELens evaluates one
    SAE; a CLT only all at once), and with every layer spliced at once (`edit_losses`)."""
    out: dict[str, Any] = fit_stats(tc, X, Y)
    per_layer = tc.spec.kind != "clt"
    ce = {k: v.mean(-1) for k, v in edit_losses(model, tc, ids, per_layer).items()}
    clean = float(ce["clean"])
    out["loss_clean"] = clean
    zero, spliced = (ce["zero"].tolist(), ce["splice"].tolist()) if per_layer else ([], [])
    out["loss_zero"], out["loss_spliced"] = zero, spliced
    out["recovered"] = [(z - s) / (z - clean) if abs(z - clean) > 1e-9 else float("nan")
                        for z, s in zip(zero, spliced, strict=True)]
    out["loss_zero_all"], out["loss_spliced_all"] = float(ce["zero_all"]), float(ce["splice_all"])
    out["recovered_all"] = (out["loss_zero_all"] - out["loss_spliced_all"]) / max(out["loss_zero_all"] - clean, 1e-9)
    return out


# ============================================================================= cache


def transcoder_cache_key(model_info: Any, cfg: TranscoderTrainConfig, data_key: str) -> str:
    blob = {"version": CACHE_VERSION, "model": getattr(model_info, "name", None),
            "weights": getattr(model_info, "weights_sha256", None), "cfg": cfg.key(), "data": data_key}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def cached_transcoders(model: Any, cfg: TranscoderTrainConfig, data_fn: Callable[[], tuple[Tensor, Tensor]],
                       data_key: str, meta: Mapping[str, Any] | None = None, progress: bool = False,
                       device: str | torch.device = "cpu") -> tuple[Transcoders, bool]:
    """(transcoders, hit): the set for (model, cfg, data) from the cache, trained on `data_fn()` = (X, Y) on a miss.
    The set is on `device` either way."""
    from ..embedded import cache_root

    key = transcoder_cache_key(model.info, cfg, data_key)
    path = cache_root() / "transcoders" / key[:24]
    if (path / "interp_transcoders.json").is_file():
        return load_transcoders(path, device=device), True
    X, Y = data_fn()
    tc = train_transcoders(X, Y, cfg, meta={**dict(meta or {}), "cache_key": key}, progress=progress,
                           device=device)
    with warnings.catch_warnings():  # the cache is read here, not by circuit-tracer: no TopK warning to give
        warnings.filterwarnings("ignore", message=".*cannot express TopK")
        atomic_dir(path, lambda tmp: save_transcoders(tc, tmp, listed_as=path))
    return tc, False


__all__ = ["EDITS", "cached_transcoders", "edit_losses", "fit_stats", "splice_hooks", "token_losses",
           "train_transcoders", "transcoder_cache_key", "transcoder_quality"]
