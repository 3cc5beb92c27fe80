"""Training: the toolkit's loop on an in-memory buffer (`_train_toolkit`: Adam, cosine decay, unit-norm decoder
rows renormalised after each step, an L0 controller on the sparsity coefficient, optional AuxK, dead-latent
resampling and a tied encoder), and `train_sae`, which wraps a trainer with what every SAE gets after it: L0
calibration, the input transform folded in, the training summary and the firing densities."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import ConfigError, NumericError
from .calibrate import calibrate_l0, firing_density, set_density
from .config import SAETrainConfig
from .io import build_sae, fold_input_transform
from .kernel import InputTransform, _ToolkitSAE, active_from_pre, pre_acts


@dataclass
class TrainLog:
    """What the training loop did (kept in the SAE's metadata as `interp_training`)."""

    steps: int = 0
    seconds: float = 0.0
    tokens_per_s: float = 0.0
    coeff_init: float | None = None
    coeff_final: float | None = None
    l0_ema_final: float | None = None
    rec_final: float | None = None
    calib_value: float | None = None
    """Threshold factor s (jumprelu) or encoder-bias offset delta (standard); None if not calibrated."""
    aux_final: float | None = None
    """AuxK loss at the last step (topk with aux_k)."""
    dead_final: float | None = None
    """Share of latents dead (no firing within aux_dead_tokens) at the last step (topk with aux_k)."""
    resampled: int = 0
    """Dead latents re-initialised during training."""
    l0_train_calibrated: float | None = None
    """Mean L0 on the calibration tokens after calibration (or after training without it)."""
    history: list[dict[str, float]] = field(default_factory=list)
    """step, lr, coeff, l0_ema, rec (normalised reconstruction loss) every controller period."""


Fit = Callable[[Tensor, SAETrainConfig, dict[str, Any], bool], tuple[Any, TrainLog]]
"""One trainer: (x, cfg, metadata, progress) -> (a SAELens inference SAE that reads x, its TrainLog)."""


def _aux_step(sae: _ToolkitSAE, xb: Tensor, x_hat: Tensor, fired: Tensor, since_fired: Tensor, cfg: SAETrainConfig
              ) -> tuple[float, float]:
    """AuxK (Gao et al. 2024): the top `aux_k` dead latents reconstruct the residual error e = x - x_hat;
    loss aux_coeff * ||e_hat - e||^2 / ||e||^2, its gradients added to those of the main loss.

    Called after the main backward with `fired`, the batch's per-latent firing counts from the forward.
    Returns (aux loss, dead fraction).
    """
    since_fired.add_(xb.shape[0]).masked_fill_(fired > 0, 0)
    dead = (since_fired >= cfg.aux_dead_tokens).nonzero()[:, 0]
    if len(dead) == 0:
        return 0.0, 0.0
    e = xb - x_hat
    pre = (xb - sae.b_dec.detach()) @ sae.encoder[:, dead] + sae.b_enc[dead]  # (B, n_dead)
    vals, idx = pre.topk(min(cfg.aux_k, len(dead)), dim=-1)
    acts = torch.zeros_like(pre).scatter(-1, idx, vals.relu())
    e_hat = acts @ sae.W_dec[dead]
    aux = cfg.aux_coeff * (e_hat - e).pow(2).sum(-1).mean() / e.pow(2).sum(-1).mean().clamp_min(1e-12)
    aux.backward()
    return float(aux.detach()), len(dead) / cfg.d_sae


def _lr_at(cfg: SAETrainConfig, step: int) -> float:
    """Learning rate of optimiser step `step` (0-based): a linear warm-up reaching `lr` at step warmup_steps - 1,
    then cosine decay (or constant). Not transformers' get_cosine_schedule_with_warmup, which would change trained
    SAEs: its warm-up starts at 0 (lr * (step / warmup_steps), one step behind this one and rounded differently),
    and its LambdaLR multiplies each group's scaled base rate instead of scaling this value (a different rounding
    with threshold_lr_scale != 1). Without warm-up and scaling its cosine values are this one's to the bit
    (tests/unit/test_sae_train.py)."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return cfg.lr
    t = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


def batch_indices(n: int, batch: int, steps: int, gen: torch.Generator) -> Iterable[Tensor]:
    """Indices of `steps` batches drawn from shuffled epochs (the last partial batch of an epoch wraps)."""
    perm = torch.randperm(n, generator=gen)
    at = 0
    for _ in range(steps):
        if at + batch > n:
            rest = perm[at:]
            perm = torch.randperm(n, generator=gen)
            take = batch - rest.shape[0]
            yield torch.cat([rest, perm[:take]]) if n >= batch else perm[torch.arange(batch) % n]  # host: indices
            at = take if n >= batch else 0
            continue
        yield perm[at : at + batch]
        at += batch


def _train_toolkit(
    x: Float[Tensor, "tok d_in"], cfg: SAETrainConfig, progress: bool, sparse_below: float = 0.02
) -> tuple[_ToolkitSAE, TrainLog]:
    from tqdm.auto import tqdm

    gen = torch.Generator().manual_seed(cfg.seed)
    n, d_in = x.shape
    mean = x.mean(0)
    b_dec = mean if cfg.init_b_dec == "mean" else torch.zeros_like(mean)
    sae = _ToolkitSAE(d_in, cfg, b_dec, gen, x.device, x.dtype, x=x)
    if cfg.init_sparsity == "data":  # (no draw otherwise: fixed-init runs keep their random stream)
        sae.init_sparsity_from(x[torch.randperm(n, generator=gen)[: min(n, max(cfg.batch, 4096))].to(x.device)])
    norm = float((x.double() ** 2).sum(-1).mean())  # E||x||^2, the reconstruction normaliser
    main = [p for p in (sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec) if p is not None]  # W_enc is None when tied
    groups: list[dict[str, Any]] = [{"params": main, "lr_scale": 1.0}]
    if cfg.architecture == "jumprelu":
        groups.append({"params": [sae.log_threshold], "lr_scale": cfg.threshold_lr_scale})
    opt = torch.optim.Adam(groups, lr=cfg.lr, fused=x.dtype in (torch.float32, torch.float64))
    log = TrainLog()
    coeff = cfg.sparsity_coeff
    target = cfg.target_l0
    use_ctrl = cfg.controller and cfg.architecture != "topk"
    l0_ema = None
    since_fired = torch.zeros(cfg.d_sae, dtype=torch.long, device=x.device)  # tokens since each latent fired (AuxK)
    fires = torch.zeros(cfg.d_sae, dtype=torch.long, device=x.device)  # firings since the last resampling
    seen = 0  # tokens since the last resampling
    t0 = time.perf_counter()
    bar = tqdm(total=cfg.steps, desc=f"train {cfg.architecture} SAE", disable=not progress, leave=False)
    for step, idx in enumerate(batch_indices(n, cfg.batch, cfg.steps, gen)):
        xb = x[idx]
        x_hat, l0, penalty, fired = sae(xb, sparse_below)
        fires += fired
        seen += xb.shape[0]
        rec = (x_hat - xb).pow(2).sum(-1).mean() / norm
        if coeff is None:  # lambda0 * (penalty at the target L0) = 0.1 * initial reconstruction loss
            if cfg.architecture == "topk":
                coeff = 0.0
            else:
                # standard: the L1 penalty at the target L0 is target x the mean active code
                unit = float(penalty.detach().sum() / l0.sum().clamp_min(1)) if cfg.architecture == "standard" else 1.0
                coeff = 0.1 * float(rec.detach()) / (target * unit)
            log.coeff_init = coeff
        elif log.coeff_init is None:
            log.coeff_init = coeff
        loss = rec + coeff * penalty.mean() if cfg.architecture != "topk" else rec
        if not torch.isfinite(loss):
            raise NumericError(f"SAE training: non-finite loss at step {step} ({cfg.architecture})")
        lr = _lr_at(cfg, step)
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_scale"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.aux_k:
            log.aux_final, log.dead_final = _aux_step(sae, xb, x_hat.detach(), fired, since_fired, cfg)
        opt.step()
        sae.renorm()
        if cfg.resample_every and (step + 1) % cfg.resample_every == 0 and step < cfg.resample_until * cfg.steps:
            log.resampled += sae.resample(fires < cfg.resample_below * seen, (xb - x_hat).detach(), opt, gen)
            fires.zero_()
            seen = 0
        batch_l0 = float(l0.mean())
        l0_ema = batch_l0 if l0_ema is None else cfg.l0_ema_decay * l0_ema + (1 - cfg.l0_ema_decay) * batch_l0
        if (step + 1) % cfg.controller_every == 0:
            if use_ctrl:
                err = max(-1.0, min(1.0, (l0_ema - target) / target))
                coeff *= math.exp(cfg.controller_rate * err)
            log.history.append({"step": step + 1, "lr": lr, "coeff": coeff, "l0_ema": l0_ema,
                                "rec": float(rec.detach())})
        bar.update(1)
    bar.close()
    log.steps = cfg.steps
    log.seconds = time.perf_counter() - t0
    log.tokens_per_s = cfg.steps * cfg.batch / max(log.seconds, 1e-9)
    log.coeff_final, log.l0_ema_final, log.rec_final = coeff, l0_ema, float(rec.detach())
    return sae, log


def _state_of(sae: _ToolkitSAE) -> dict[str, Tensor]:
    sd = {
        "W_enc": sae.encoder.detach().clone().contiguous(),
        "b_enc": sae.b_enc.detach().clone(),
        "W_dec": sae.W_dec.detach().clone(),
        "b_dec": sae.b_dec.detach().clone(),
    }
    if sae.cfg.architecture == "jumprelu":
        sd["threshold"] = sae.log_threshold.detach().exp()
    return sd


def _fit_toolkit(x: Tensor, cfg: SAETrainConfig, meta: dict[str, Any], progress: bool):
    """The toolkit's loop as a `Fit`: its weights in a SAELens SAE."""
    tsae, log = _train_toolkit(x, cfg, progress)
    sae = build_sae(cfg.architecture, _state_of(tsae), meta, apply_b_dec_to_input=True, k=cfg.k, device=x.device)
    return sae, log


def train_sae(
    acts: Float[Tensor, "tok d_in"],
    cfg: SAETrainConfig,
    metadata: Mapping[str, Any] | None = None,
    transform: InputTransform | None = None,
    progress: bool = False,
    *,
    fit: Fit | None = None,
    device: str | torch.device | None = None,
):
    """Train an SAE on the buffer `acts` and return it as a SAELens inference SAE (eval mode).

    With `transform`, training runs on z = (acts - shift) @ W and the returned SAE has the
    transform folded in (it reads raw activations). Calibration (when on) uses the first
    `calib_tokens` of a seeded permutation of the buffer. The training summary is in
    `sae.cfg.metadata.interp_training`. `fit` replaces the toolkit's loop with another trainer
    (`cfg.trainer` names it; bench.sae.train_saelens is SAELens's, the benchmark's baseline). `device`: where
    the SAE trains and lives (default: the buffer's). Buffers live on the host, so an SAE that will read a
    model's activations asks for the model's device here.
    """
    cfg.validate()
    if fit is None and cfg.trainer != "toolkit":
        raise ConfigError("trainer", cfg.trainer, '"toolkit" (SAELens\'s trainer is a benchmark baseline: pass '
                          "fit=bench.sae.train_saelens)")
    if acts.dim() != 2 or acts.shape[0] < 2:
        raise ValueError(f"train_sae: need a (tokens, d_in) buffer with >= 2 tokens, got {tuple(acts.shape)}")
    acts = acts.to(device=device, dtype=torch.float32)  # (tok, d_in), where the SAE trains
    if not torch.isfinite(acts).all():
        raise NumericError("train_sae: the activation buffer holds NaN or inf")
    x = transform.apply(acts) if transform is not None else acts
    meta = dict(metadata or {})
    sae, log = (fit or _fit_toolkit)(x, cfg, meta, progress)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    calib_idx = torch.randperm(x.shape[0], generator=gen)[: cfg.calib_tokens]
    calib = x[calib_idx]
    if cfg.calibrate_l0 and cfg.architecture != "topk":
        log.calib_value, log.l0_train_calibrated = calibrate_l0(sae, calib, cfg.target_l0, cfg.calib_tol)
    else:
        log.l0_train_calibrated = float(active_from_pre(sae, pre_acts(sae, calib)).sum(-1).float().mean())
    if transform is not None:
        sae = fold_input_transform(sae, transform)
    info = asdict(log)
    info["config"] = cfg.key()
    sae.cfg.metadata.interp_training = json.loads(json.dumps(info, default=float))
    set_density(sae, firing_density(sae, acts[calib_idx]))  # written as sparsity.safetensors by save_sae
    return sae


__all__ = ["Fit", "TrainLog", "batch_indices", "train_sae"]
