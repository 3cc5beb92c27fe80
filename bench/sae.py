"""SAE training throughput: interp.sae's own JumpReLU loop vs SAELens's SAETrainer on the same buffer.

Both through `interp.sae.train_sae`: the toolkit's loop (trainer="toolkit"), or `train_saelens` below
(trainer="saelens", passed as `fit=`), which wraps SAELens's `SAETrainer` around an in-memory provider of the
same batches; on the same in-memory residual activations of the model (middle layer, built-in corpus,
position 0 left out), the same architecture, width, batch, steps and lr; L0 calibration off. The figure is
each trainer's own tokens/s (its training loop, as `TrainLog` records it), the median of runs taken in turns.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import time
from dataclasses import replace
from typing import Any

import torch

from interp.data import builtin_corpus, token_chunks
from interp.sae import SAETrainConfig, TrainLog, build_sae, collect_activations, train_sae
from interp.sae.train import batch_indices
from interp.sites import Site

from .common import Row, row

SEQ = 128


def activations(model, n_tokens: int, layer: int | None = None) -> torch.Tensor:
    """(n_tokens, d_model) float32 residual activations after the middle layer, from the built-in corpus."""
    site = Site("resid_post", model.info.n_layers // 2 if layer is None else layer)
    chunks = token_chunks(model.tokenizer, builtin_corpus("train"), n_tokens // (SEQ - 1) + 1, SEQ)
    ids = torch.tensor(chunks)
    batches = [{"input_ids": b, "attention_mask": torch.ones_like(b)} for b in ids.split(8)]
    return collect_activations(model, batches, {site: n_tokens}, skip_first=1).acts[site]


def train_saelens(x: torch.Tensor, cfg: SAETrainConfig, meta: dict[str, Any], progress: bool):
    """SAELens's SAETrainer on an in-memory provider of the toolkit's batches (fixed coefficient: no controller),
    as an `interp.sae.train.Fit`."""
    from sae_lens import (
        JumpReLUTrainingSAE,
        JumpReLUTrainingSAEConfig,
        SAETrainer,
        StandardTrainingSAE,
        StandardTrainingSAEConfig,
        TopKTrainingSAE,
        TopKTrainingSAEConfig,
    )
    from sae_lens.config import SAETrainerConfig

    torch.manual_seed(cfg.seed)  # SAELens initialises from the global generator
    gen = torch.Generator().manual_seed(cfg.seed)
    common = dict(d_in=x.shape[1], d_sae=cfg.d_sae, dtype="float32", device=str(x.device), apply_b_dec_to_input=True,
                  normalize_activations="none", decoder_init_norm=None)
    coeff = cfg.sparsity_coeff if cfg.sparsity_coeff is not None else 1.0
    if cfg.architecture == "standard":
        sae = StandardTrainingSAE(StandardTrainingSAEConfig(l1_coefficient=coeff, **common))
    elif cfg.architecture == "jumprelu":
        sae = JumpReLUTrainingSAE(JumpReLUTrainingSAEConfig(
            l0_coefficient=coeff, jumprelu_bandwidth=cfg.jumprelu_bandwidth,
            jumprelu_init_threshold=cfg.jumprelu_init_threshold, **common))
    else:
        sae = TopKTrainingSAE(TopKTrainingSAEConfig(k=cfg.k, **common))
    if cfg.init_b_dec == "mean":
        with torch.no_grad():
            sae.b_dec.copy_(x.mean(0))

    def provider():
        for idx in batch_indices(x.shape[0], cfg.batch, cfg.steps + 1, gen):
            yield x[idx]

    tcfg = SAETrainerConfig(
        total_training_samples=cfg.steps * cfg.batch,
        train_batch_size_samples=cfg.batch,
        lr=cfg.lr,
        lr_end=0.0 if cfg.lr_schedule == "cosine" else cfg.lr,
        lr_scheduler_name="cosineannealing" if cfg.lr_schedule == "cosine" else "constant",
        lr_warm_up_steps=cfg.warmup_steps,
        device=str(x.device),
    )
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()) if not progress else contextlib.nullcontext():
        trained = SAETrainer(tcfg, sae, provider()).fit()
    log = TrainLog(steps=cfg.steps, seconds=time.perf_counter() - t0, coeff_init=coeff, coeff_final=coeff)
    log.tokens_per_s = cfg.steps * cfg.batch / max(log.seconds, 1e-9)
    state = {k: v for k, v in trained.state_dict().items() if k in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold")}
    return build_sae(cfg.architecture, state, meta, apply_b_dec_to_input=True, k=cfg.k, device=x.device), log


def train(acts: torch.Tensor, cfg: SAETrainConfig):
    """`train_sae` with the trainer `cfg.trainer` names: the toolkit's loop, or SAELens's (`train_saelens`)."""
    return train_sae(acts, cfg, fit=train_saelens if cfg.trainer == "saelens" else None)


def train_throughput(acts: torch.Tensor, cfg: SAETrainConfig, repeats: int) -> dict[str, list[float]]:
    """tokens/s of each trainer on `acts`, `repeats` times in turns, after one short warm-up each."""
    trainers = ("toolkit", "saelens")
    for name in trainers:
        train(acts, replace(cfg, trainer=name, steps=2))
    out: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(repeats):
        for name in trainers:
            sae = train(acts, replace(cfg, trainer=name))
            out[name].append(sae.cfg.metadata.interp_training["tokens_per_s"])
    return out


def sae_training(model, smoke: bool = False) -> list[Row]:
    """Toolkit JumpReLU tokens/s / SAELens JumpReLU tokens/s on the same activations (>= 0.9)."""
    d = model.info.d_model
    acts = activations(model, 512 if smoke else 4096)
    cfg = SAETrainConfig(architecture="jumprelu", d_sae=4 * d, steps=3 if smoke else 20, batch=128 if smoke else 1024,
                         calibrate_l0=False)
    tps = train_throughput(acts, cfg, repeats=1 if smoke else 3)
    ours, theirs = statistics.median(tps["toolkit"]), statistics.median(tps["saelens"])
    return [row("sae_training", "toolkit JumpReLU / SAELens SAETrainer JumpReLU (tokens/s ratio)", ours / theirs,
                ">= 0.9", f"toolkit {ours:,.0f} tok/s, SAELens {theirs:,.0f} tok/s; d_in {d}, d_sae {cfg.d_sae}, "
                f"batch {cfg.batch}, {cfg.steps} steps, buffer {acts.shape[0]} tokens, float32")]
