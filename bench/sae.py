"""SAE training throughput: interp.sae's own JumpReLU loop vs SAELens's SAETrainer on the same buffer.

Both through `interp.sae.train_sae` (trainer="toolkit" vs trainer="saelens", which wraps SAELens's
`SAETrainer` around an in-memory provider), on the same in-memory residual activations of the model
(middle layer, built-in corpus, position 0 left out), the same architecture, width, batch, steps and lr;
L0 calibration off. The figure is each trainer's own tokens/s (its training loop, as `TrainLog` records
it), the median of runs taken in turns.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import torch

from interp.data import builtin_corpus, token_chunks
from interp.sae import SAETrainConfig, collect_activations, train_sae
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


def train_throughput(acts: torch.Tensor, cfg: SAETrainConfig, repeats: int) -> dict[str, list[float]]:
    """tokens/s of each trainer on `acts`, `repeats` times in turns, after one short warm-up each."""
    trainers = ("toolkit", "saelens")
    for name in trainers:
        train_sae(acts, replace(cfg, trainer=name, steps=2))
    out: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(repeats):
        for name in trainers:
            sae = train_sae(acts, replace(cfg, trainer=name))
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
