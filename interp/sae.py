"""SAEs for the probes: collect an activation buffer, train, calibrate L0, save, load, cache.

One place for every probe that needs a sparse autoencoder (atoms, sae_falsification,
self_interp). The SAEs are SAELens objects (`sae_lens.StandardSAE`, `JumpReLUSAE`,
`TopKSAE`), built from SAELens's own config classes and saved with its own `save_model`,
so `sae_lens.SAE.load_from_disk` loads what this module writes and this module loads any
SAELens directory. The hook an SAE reads is in its config (`sae.cfg.metadata.hook_name`,
a TransformerLens hook name); consumers take the site from there (`sae_site(sae)`).

    buf = collect_activations(model, batches, {Site("resid_post", 6): 100_000})
    cfg = SAETrainConfig(architecture="jumprelu", d_sae=2304, target_l0=16)
    sae = train_sae(buf.acts[site], cfg, metadata=sae_metadata(model, site))
    save_sae(sae, out_dir); sae2 = load_sae(out_dir)
    sae = cached_sae(model, site, cfg, data_fn=lambda: acts, data_key="corpus sha + sizes")

Training is a small loop of the toolkit's own on an in-memory buffer (Adam, cosine decay,
unit-norm decoder rows renormalised after each step), with an L0 controller that steers
the sparsity coefficient towards `target_l0` and a calibration that then sets the mean L0
on training tokens to the target within a tolerance (one shared scalar, bisected on stored
pre-activations): a common factor on every JumpReLU threshold, or a common offset on a
standard SAE's encoder bias. An optional affine input transform z = (x - shift) @ W (e.g.
whitening) is applied to the buffer before training and folded into the saved weights, so
the saved SAE reads raw activations. `trainer="saelens"` trains with SAELens's SAETrainer
on an in-memory data provider instead (fixed coefficient, no controller; for comparison).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from jaxtyping import Float
from torch import Tensor

from ._capture import token_mask
from .errors import ConfigError, NumericError
from .sites import Site, forward_rank

ARCHITECTURES = ("standard", "jumprelu", "topk")
CACHE_VERSION = 1
"""Bumped when training code changes what a cached SAE would be."""


# ============================================================================= config


@dataclass(frozen=True)
class SAETrainConfig:
    """How to train one SAE. Every field enters the cache key."""

    architecture: Literal["standard", "jumprelu", "topk"] = "jumprelu"
    """standard: ReLU + L1; jumprelu: threshold (JumpReLU) + L0; topk: the k largest ReLU pre-activations."""
    d_sae: int = 2304
    """Number of latents."""
    steps: int = 800
    """Optimiser steps (batches drawn from shuffled epochs of the buffer)."""
    batch: int = 1024
    """Tokens per step."""
    lr: float = 5e-4
    """Adam learning rate (peak)."""
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    """Cosine decay to 0 over `steps`, or constant."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up steps."""
    target_l0: float | None = 16.0
    """Mean active latents per token the controller and calibration aim at (standard, jumprelu)."""
    k: int = 32
    """Active latents per token (topk only)."""
    aux_k: int = 0
    """topk only: the auxiliary dead-latent loss (AuxK) reconstructs the residual error with the top aux_k dead
    latents (0: off)."""
    aux_coeff: float = 1 / 32
    """Weight of the AuxK loss (normalised MSE of the residual error)."""
    aux_dead_tokens: int = 100_000
    """A latent counts as dead after this many training tokens without firing (AuxK)."""
    sparsity_coeff: float | None = None
    """Initial L1 (standard) or L0 (jumprelu) coefficient; None: lambda0 * target_l0 = 0.1 x initial loss."""
    controller: bool = True
    """Steer the sparsity coefficient towards `target_l0` during training."""
    controller_every: int = 25
    """Steps between controller updates."""
    controller_rate: float = 0.2
    """coeff *= exp(rate * clip((L0_ema - target) / target, -1, 1)) at each update."""
    l0_ema_decay: float = 0.9
    """Decay per step of the exponential moving average of the batch L0."""
    jumprelu_bandwidth: float = 0.05
    """Width of the rectangle window of JumpReLU's straight-through gradients (input units)."""
    jumprelu_init_threshold: float = 0.5
    """Initial threshold (the threshold is parametrised as log theta, so it stays positive)."""
    threshold_lr_scale: float = 1.0
    """Learning-rate multiplier of log theta (Adam moves it by about lr per step)."""
    init_sparsity: Literal["fixed", "data"] = "fixed"
    """fixed: JumpReLU thresholds start at `jumprelu_init_threshold`, encoder biases at 0. data: each latent's
    threshold (jumprelu) or negated encoder bias (standard) starts at the quantile of its pre-activations on the
    first batch where it fires on target_l0 / d_sae of the tokens, so training starts at the target L0 instead
    of having to move log theta by ~lr per step towards it."""
    resample_every: int = 0
    """Every this many steps, re-initialise latents that did not fire since the last time (0: never)."""
    resample_until: float = 0.5
    """Fraction of the steps after which no more resampling happens."""
    resample_below: float = 1e-6
    """A latent is resampled when it fired on fewer than this fraction of the tokens since the last resampling."""
    calibrate_l0: bool = True
    """After training, bisect one shared scalar so the mean L0 on training tokens hits target_l0."""
    calib_tokens: int = 16384
    """Training tokens encoded once for the calibration."""
    calib_tol: float = 0.05
    """Relative tolerance of the calibrated mean L0."""
    init_b_dec: Literal["mean", "zero"] = "mean"
    """Decoder bias at initialisation: the buffer mean, or zero."""
    init_decoder: Literal["random", "data"] = "random"
    """Decoder rows at initialisation: random unit vectors, or random centred buffer rows (unit length)."""
    trainer: Literal["toolkit", "saelens"] = "toolkit"
    """The toolkit's loop, or SAELens's SAETrainer on an in-memory provider (fixed coefficient)."""
    seed: int = 0
    """Seed of the initialisation, the batch order and the calibration sample."""

    def validate(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ConfigError("architecture", self.architecture, "one of " + ", ".join(ARCHITECTURES))
        for name in ("d_sae", "steps", "batch", "calib_tokens", "controller_every"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "a positive integer")
        if self.lr <= 0:
            raise ConfigError("lr", self.lr, "a positive number")
        if self.architecture == "topk" and not 1 <= self.k <= self.d_sae:
            raise ConfigError("k", self.k, f"an integer in [1, d_sae={self.d_sae}]")
        if self.aux_k and (self.architecture != "topk" or self.aux_k < 0 or self.aux_coeff < 0
                           or self.aux_dead_tokens < 1):
            raise ConfigError("aux_k", self.aux_k, "0, or a positive count with architecture=topk, aux_coeff >= 0 "
                              "and aux_dead_tokens >= 1")
        if self.architecture != "topk" and (self.target_l0 is None or self.target_l0 <= 0):
            if self.controller or self.calibrate_l0 or self.sparsity_coeff is None:
                raise ConfigError("target_l0", self.target_l0, "a positive number (or controller, calibration off)")
        if self.jumprelu_bandwidth <= 0 or self.jumprelu_init_threshold <= 0:
            raise ConfigError("jumprelu_bandwidth", self.jumprelu_bandwidth, "positive bandwidth and threshold")
        if not 0 < self.calib_tol < 1:
            raise ConfigError("calib_tol", self.calib_tol, "a value in (0, 1)")
        if self.init_sparsity == "data" and self.trainer != "toolkit":
            raise ConfigError("init_sparsity", self.init_sparsity, '"fixed" with trainer="saelens"')
        if self.resample_every < 0:
            raise ConfigError("resample_every", self.resample_every, "0 (off) or a positive step count")
        if not 0 <= self.resample_until <= 1 or not 0 <= self.resample_below <= 1:
            raise ConfigError("resample_until", (self.resample_until, self.resample_below),
                              "resample_until and resample_below in [0, 1]")

    def key(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.aux_k:  # configs without AuxK keep the cache keys they had before it existed
            for name in ("aux_k", "aux_coeff", "aux_dead_tokens"):
                d.pop(name)
        if self.init_sparsity == "fixed":  # likewise for the data-based threshold initialisation
            d.pop("init_sparsity")
        if not self.resample_every:  # likewise for resampling
            for name in ("resample_every", "resample_until", "resample_below"):
                d.pop(name)
        return d


# ============================================================================= activations


@dataclass
class ActivationBuffer:
    """Activations of some sites at kept tokens, with where each token came from."""

    acts: dict[Site, Float[Tensor, "tok d"]]
    seq: dict[Site, Tensor]
    """(tok,) index of the sequence (batch row across all batches) of each kept token."""
    pos: dict[Site, Tensor]
    """(tok,) position of each kept token in its sequence."""
    n_seen: dict[Site, int] = field(default_factory=dict)
    """Tokens that passed the mask (before the norm-outlier filter)."""
    n_outliers: dict[Site, int] = field(default_factory=dict)
    """Tokens dropped as norm outliers."""


def collect_activations(
    model: Any,
    batches: Iterable[Mapping[str, Tensor]],
    budgets: Mapping[Site, int],
    skip_first: int = 1,
    norm_outlier_factor: float | None = None,
    progress: bool = False,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> ActivationBuffer:
    """Activations at each site until it holds `budgets[site]` tokens, in one set of passes.

    Only tokens of the attention mask count, without the first `skip_first` positions of
    each sequence (position 0 carries a massive activation). The forward stops after the
    deepest site that still needs tokens (`Model.forward_until`), so later layers never run.
    `norm_outlier_factor`: drop tokens whose norm exceeds that factor times the median norm
    of the first batch's kept tokens (a relative threshold; Gemma's norms are large).
    Sites must hold a (batch, pos, d) activation (residual-stream-like sites).
    """
    from tqdm.auto import tqdm

    if not budgets:
        raise ValueError("collect_activations: no sites")
    for site in budgets:
        model.check_site(site)
    order = {site: forward_rank(site) for site in budgets}
    chunks: dict[Site, list[Tensor]] = {s: [] for s in budgets}
    seqs: dict[Site, list[Tensor]] = {s: [] for s in budgets}
    poss: dict[Site, list[Tensor]] = {s: [] for s in budgets}
    have = {s: 0 for s in budgets}
    seen = {s: 0 for s in budgets}
    dropped = {s: 0 for s in budgets}
    limit: dict[Site, float] = {}
    state: dict[str, Any] = {}

    def make_hook(site: Site):
        def hook(act: Tensor) -> None:
            need = budgets[site] - have[site]
            if need > 0:
                x = act[state["mask"]].detach()  # (tok, d)
                if x.dim() != 2:
                    raise ValueError(f"collect_activations: {site} is not a (batch, pos, d) site")
                where = state["where"]
                seen[site] += x.shape[0]
                if norm_outlier_factor is not None:
                    norms = x.float().norm(dim=-1)
                    if site not in limit:
                        limit[site] = float(norms.median()) * norm_outlier_factor
                    keep = norms <= limit[site]
                    dropped[site] += int((~keep).sum())
                    x, where = x[keep], where[keep]
                x, where = x[:need], where[:need]
                chunks[site].append(x.to(device=device, dtype=dtype))
                seqs[site].append(where[:, 0].cpu())
                poss[site].append(where[:, 1].cpu())
                have[site] += x.shape[0]
            return None

        return hook

    pairs = [(site, make_hook(site)) for site in budgets]
    seq_offset = 0
    total = sum(budgets.values())
    bar = tqdm(total=total, desc="activations", disable=not progress, leave=False)
    with torch.no_grad(), model.hooks(pairs):
        for batch in batches:
            pending = [s for s in budgets if have[s] < budgets[s]]
            if not pending:
                break
            ids = batch["input_ids"].to(model.device)
            am = batch.get("attention_mask")
            am = torch.ones_like(ids) if am is None else am.to(model.device)
            mask = token_mask(am, skip_first)
            where = mask.nonzero()
            where[:, 0] += seq_offset
            state.update(mask=mask, where=where)
            before = sum(have.values())
            model.forward_until(ids, max(pending, key=order.get), am)  # the deepest site still collecting
            seq_offset += ids.shape[0]
            bar.update(sum(have.values()) - before)
    bar.close()
    for site in budgets:
        if have[site] == 0:
            raise ValueError(f"collect_activations: no tokens collected at {site} (data exhausted or all masked)")
    return ActivationBuffer(
        acts={s: torch.cat(chunks[s]) for s in budgets},
        seq={s: torch.cat(seqs[s]) for s in budgets},
        pos={s: torch.cat(poss[s]) for s in budgets},
        n_seen=seen,
        n_outliers=dropped,
    )


# ============================================================================= input transform


@dataclass(frozen=True)
class InputTransform:
    """z = (x - shift) @ W, row-vector convention; W_inv its inverse. Folded into saved SAEs."""

    W: Float[Tensor, "d_in d_in"]
    W_inv: Float[Tensor, "d_in d_in"]
    shift: Float[Tensor, " d_in"] | None = None

    def apply(self, x: Float[Tensor, "tok d_in"], chunk: int = 65536) -> Float[Tensor, "tok d_in"]:
        W = self.W.to(x.device, x.dtype)
        shift = None if self.shift is None else self.shift.to(x.device, x.dtype)
        out = torch.empty_like(x)
        for i in range(0, x.shape[0], chunk):
            xi = x[i : i + chunk]
            out[i : i + chunk] = (xi if shift is None else xi - shift) @ W
        return out

    def key(self) -> str:
        h = hashlib.sha256()
        for t in (self.W, self.W_inv, self.shift):
            if t is not None:
                h.update(t.detach().double().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()


# ============================================================================= training


class _SAEForward(torch.autograd.Function):
    """x_hat, l0 and the sparsity penalty of one SAE forward, with a backward that uses sparsity.

    pre = (x - b_dec) W_enc + b_enc; a = gate(pre) * pre; x_hat = a W_dec + b_dec.
    Gates: jumprelu 1[pre > theta] (theta = exp(log_theta)), standard 1[pre > 0] with
    penalty sum(a), topk the k largest (ReLU). JumpReLU's pseudo-derivatives, with the window
    R = 1[|pre - theta| < eps/2]: da/dpre = 1[pre > theta], da/dtheta = -(theta/eps) R,
    dl0/dtheta = -(1/eps) R. Only the encoder's forward matmul is dense; when few latents are
    active (density <= `sparse_below`), the decoder's forward and the weight gradients run on
    the active entries only (sparse matmuls): two dense matmuls a step instead of five.
    """

    @staticmethod
    def forward(ctx, x, W_enc, b_enc, W_dec, b_dec, log_theta, arch: str, k: int, eps: float, sparse_below: float):
        xc = x - b_dec
        pre = torch.addmm(b_enc, xc, W_enc)  # (B, d)
        theta = log_theta.exp() if arch == "jumprelu" else None
        if arch == "jumprelu":
            active = pre > theta
        elif arch == "standard":
            active = pre > 0
        else:
            idx = pre.topk(k, dim=-1).indices
            active = torch.zeros_like(pre, dtype=torch.bool).scatter_(-1, idx, True) & (pre > 0)
        B, d = pre.shape
        l0 = active.sum(-1, dtype=pre.dtype)
        nnz = int(l0.sum())
        sparse = nnz <= sparse_below * B * d
        a = pre * active
        if sparse:
            rows, cols = active.nonzero(as_tuple=True)
            vals = a[rows, cols]
            a_sp = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (B, d), is_coalesced=True,
                                           check_invariants=False)
            x_hat = torch.sparse.mm(a_sp, W_dec) + b_dec
        else:
            rows = cols = vals = pre.new_empty(0)
            x_hat = torch.addmm(b_dec, a, W_dec)
        penalty = l0.clone() if arch == "jumprelu" else a.sum(-1) if arch == "standard" else torch.zeros_like(l0)
        ctx.save_for_backward(xc, pre, active, a, W_enc, W_dec, theta if theta is not None else pre.new_empty(0),
                              rows, cols, vals)
        ctx.arch, ctx.eps, ctx.sparse = arch, eps, sparse
        fired = active.sum(0)
        ctx.mark_non_differentiable(l0, fired)
        return x_hat, l0, penalty, fired

    @staticmethod
    def backward(ctx, g_xhat, g_l0, g_pen, g_fired):
        xc, pre, active, a, W_enc, W_dec, theta, rows, cols, vals = ctx.saved_tensors
        arch, eps = ctx.arch, ctx.eps
        B, d = pre.shape
        mask = active.to(pre.dtype)
        ga = g_xhat @ W_dec.T  # dL/da (B, d): one dense matmul
        g_pre = ga * mask
        if arch == "standard":
            g_pre = g_pre + g_pen.unsqueeze(-1) * mask
        g_log_theta = None
        if arch == "jumprelu":
            window = ((pre - theta).abs() < eps / 2).to(pre.dtype)
            g_theta = -(window * (ga * theta + g_pen.unsqueeze(-1))).sum(0) / eps
            g_log_theta = g_theta * theta
        if ctx.sparse:  # a and g_pre share the support of `active`
            aT = torch.sparse_coo_tensor(torch.stack([cols, rows]), vals, (d, B), check_invariants=False)
            g_W_dec = torch.sparse.mm(aT, g_xhat)
            gT = torch.sparse_coo_tensor(torch.stack([cols, rows]), g_pre[rows, cols], (d, B), check_invariants=False)
            g_W_enc = torch.sparse.mm(gT, xc).T
        else:
            g_W_dec = a.T @ g_xhat
            g_W_enc = xc.T @ g_pre
        g_b_enc = g_pre.sum(0)
        g_b_dec = g_xhat.sum(0) - W_enc @ g_b_enc
        return None, g_W_enc, g_b_enc, g_W_dec, g_b_dec, g_log_theta, None, None, None, None


class _ToolkitSAE(torch.nn.Module):
    """Training-time parameters: pre = (x - b_dec) W_enc + b_enc; x_hat = a W_dec + b_dec."""

    def __init__(self, d_in: int, cfg: SAETrainConfig, b_dec: Tensor, gen: torch.Generator, device, dtype,
                 x: Tensor | None = None):
        super().__init__()
        W_dec = torch.randn(cfg.d_sae, d_in, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
        if cfg.init_decoder == "data" and x is not None:
            rows = torch.randint(0, x.shape[0], (cfg.d_sae,), generator=gen)
            W_dec = (x[rows.to(x.device)] - b_dec.to(x)).to(dtype) + 1e-3 * W_dec / math.sqrt(d_in)
        W_dec /= W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        self.cfg = cfg
        self.W_dec = torch.nn.Parameter(W_dec)
        self.W_enc = torch.nn.Parameter(W_dec.T.clone().contiguous())
        self.b_enc = torch.nn.Parameter(torch.zeros(cfg.d_sae, device=device, dtype=dtype))
        self.b_dec = torch.nn.Parameter(b_dec.to(device=device, dtype=dtype).clone())
        init = math.log(cfg.jumprelu_init_threshold)
        # log theta exists for every architecture (unused unless jumprelu) to keep one signature
        self.log_threshold = torch.nn.Parameter(torch.full((cfg.d_sae,), init, device=device, dtype=dtype),
                                                requires_grad=cfg.architecture == "jumprelu")

    def forward(self, x: Tensor, sparse_below: float = 0.02) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(x_hat, l0 per row, sparsity penalty per row, tokens each latent fired on in the batch)."""
        c = self.cfg
        return _SAEForward.apply(x, self.W_enc, self.b_enc, self.W_dec, self.b_dec, self.log_threshold,
                                 c.architecture, c.k, c.jumprelu_bandwidth, sparse_below)

    @torch.no_grad()
    def init_sparsity_from(self, x: Float[Tensor, "tok d_in"], idx: Tensor | None = None) -> None:
        """Per-latent start of the gate from data (init_sparsity="data"): the (1 - target_l0 / d_sae) quantile
        of each latent's pre-activation on `x` becomes its threshold (jumprelu) or -b_enc (standard)."""
        c = self.cfg
        if c.init_sparsity != "data" or c.architecture == "topk" or not c.target_l0:
            return
        idx = torch.arange(c.d_sae, device=x.device) if idx is None else idx
        pre = (x - self.b_dec) @ self.W_enc[:, idx]  # (tok, len(idx)), b_enc excluded
        rank = max(1, min(pre.shape[0], math.ceil((1.0 - min(1.0, c.target_l0 / c.d_sae)) * pre.shape[0])))
        level = pre.kthvalue(rank, dim=0).values
        if c.architecture == "jumprelu":
            self.log_threshold[idx] = level.clamp_min(c.jumprelu_bandwidth).log()
        else:
            self.b_enc[idx] = -level

    @torch.no_grad()
    def renorm(self) -> None:
        self.W_dec /= self.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    @torch.no_grad()
    def resample(self, dead: Tensor, residual: Tensor, opt: torch.optim.Optimizer, gen: torch.Generator) -> int:
        """Re-initialise dead latents towards badly reconstructed inputs (Bricken et al. 2023).

        Each dead latent gets the direction of a batch residual drawn with probability proportional
        to its squared norm: decoder row = that direction, encoder column = the same, encoder bias 0,
        threshold back to its initial value; their Adam moments are zeroed. With init_sparsity="data" the
        gate starts at the target-L0 quantile of the latent's pre-activations on the *residuals* (passed as
        residual + b_dec, which `init_sparsity_from` centres back), so on the inputs it first fires more
        often than the target (42 % of the inputs against 12.5 % in a 64-latent check). Starting it from
        the inputs instead was measured on atoms' synthetic dictionaries and did worse: held-out R2_AIP
        0.978 vs 0.983, recovery 0.994 vs 0.998.
        """
        idx = dead.nonzero().squeeze(-1)
        if idx.numel() == 0:
            return 0
        w = residual.pow(2).sum(-1).double().cpu()
        if float(w.sum()) <= 0:
            return 0
        pick = torch.multinomial(w, idx.numel(), replacement=True, generator=gen).to(residual.device)
        dirs = residual[pick]
        dirs = dirs / dirs.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        self.W_dec[idx] = dirs
        self.W_enc[:, idx] = dirs.T
        self.b_enc[idx] = 0
        self.log_threshold[idx] = math.log(self.cfg.jumprelu_init_threshold)
        self.init_sparsity_from(residual + self.b_dec, idx)
        for p, rows in ((self.W_dec, (idx,)), (self.W_enc, (slice(None), idx)), (self.b_enc, (idx,)),
                        (self.log_threshold, (idx,))):
            state = opt.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key][rows] = 0
        return int(idx.numel())


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
    pre = (xb - sae.b_dec.detach()) @ sae.W_enc[:, dead] + sae.b_enc[dead]  # (B, n_dead)
    vals, idx = pre.topk(min(cfg.aux_k, len(dead)), dim=-1)
    acts = torch.zeros_like(pre).scatter(-1, idx, vals.relu())
    e_hat = acts @ sae.W_dec[dead]
    aux = cfg.aux_coeff * (e_hat - e).pow(2).sum(-1).mean() / e.pow(2).sum(-1).mean().clamp_min(1e-12)
    aux.backward()
    return float(aux.detach()), len(dead) / cfg.d_sae


def _lr_at(cfg: SAETrainConfig, step: int) -> float:
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return cfg.lr
    t = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


def _batches(n: int, batch: int, steps: int, gen: torch.Generator) -> Iterable[Tensor]:
    """Indices of `steps` batches drawn from shuffled epochs (the last partial batch of an epoch wraps)."""
    perm = torch.randperm(n, generator=gen)
    at = 0
    for _ in range(steps):
        if at + batch > n:
            rest = perm[at:]
            perm = torch.randperm(n, generator=gen)
            take = batch - rest.shape[0]
            yield torch.cat([rest, perm[:take]]) if n >= batch else perm[torch.arange(batch) % n]
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
    groups: list[dict[str, Any]] = [{"params": [sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec], "lr_scale": 1.0}]
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
    for step, idx in enumerate(_batches(n, cfg.batch, cfg.steps, gen)):
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


# ============================================================================= SAELens objects


def _state_of(sae: _ToolkitSAE) -> dict[str, Tensor]:
    sd = {
        "W_enc": sae.W_enc.detach().clone(),
        "b_enc": sae.b_enc.detach().clone(),
        "W_dec": sae.W_dec.detach().clone(),
        "b_dec": sae.b_dec.detach().clone(),
    }
    if sae.cfg.architecture == "jumprelu":
        sd["threshold"] = sae.log_threshold.detach().exp()
    return sd


def build_sae(
    architecture: str,
    state: Mapping[str, Tensor],
    metadata: Mapping[str, Any] | None = None,
    apply_b_dec_to_input: bool = False,
    k: int | None = None,
    device: str | torch.device = "cpu",
):
    """A SAELens inference SAE of `architecture` from its own config class, holding `state`.

    state: W_enc (d_in, d_sae), b_enc (d_sae), W_dec (d_sae, d_in), b_dec (d_in), and
    threshold (d_sae) for jumprelu. normalize_activations is "none"; dtype float32.
    """
    from sae_lens import JumpReLUSAE, JumpReLUSAEConfig, StandardSAE, StandardSAEConfig, TopKSAE, TopKSAEConfig
    from sae_lens.saes.sae import SAEMetadata

    d_in, d_sae = state["W_enc"].shape
    common = dict(
        d_in=int(d_in),
        d_sae=int(d_sae),
        dtype="float32",
        device=str(device),
        apply_b_dec_to_input=apply_b_dec_to_input,
        normalize_activations="none",
        metadata=SAEMetadata(**dict(metadata or {})),
    )
    if architecture == "standard":
        sae = StandardSAE(StandardSAEConfig(**common))
    elif architecture == "jumprelu":
        sae = JumpReLUSAE(JumpReLUSAEConfig(**common))
    elif architecture == "topk":
        if k is None:
            raise ValueError("build_sae: topk needs k")
        sae = TopKSAE(TopKSAEConfig(k=int(k), rescale_acts_by_decoder_norm=False, **common))
    else:
        raise ConfigError("architecture", architecture, "one of " + ", ".join(ARCHITECTURES))
    sd = {name: t.detach().to(device=device, dtype=torch.float32).clone() for name, t in state.items()}
    missing = set(sae.state_dict()) - set(sd)
    if missing:
        raise ValueError(f"build_sae: state lacks {sorted(missing)} for {architecture}")
    sae.load_state_dict(sd, strict=True)
    sae.eval()
    for p in sae.parameters():
        p.requires_grad_(False)
    return sae


def sae_state(sae) -> dict[str, Tensor]:
    """The weights of a SAELens SAE as plain tensors (W_enc, b_enc, W_dec, b_dec[, threshold])."""
    return {k: v.detach().clone() for k, v in sae.state_dict().items()}


def sae_architecture(sae) -> str:
    return sae.cfg.architecture()


def fold_input_transform(sae, transform: InputTransform):
    """The SAE reading raw x that equals `sae` reading z = (x - shift) @ W (same codes, raw recon).

    pre = (z - b_dec*apply) W_enc + b_enc = x (W W_enc) + b_enc - (b_dec*apply + shift W) W_enc;
    x_hat = (a W_dec + b_dec) W_inv + shift.
    """
    sd = sae_state(sae)
    W = transform.W.to(sd["W_enc"])
    W_inv = transform.W_inv.to(sd["W_enc"])
    shift = torch.zeros(W.shape[0]).to(W) if transform.shift is None else transform.shift.to(W)
    in_offset = sd["b_dec"] * float(sae.cfg.apply_b_dec_to_input) + shift @ W
    out = dict(sd)
    out["W_enc"] = W @ sd["W_enc"]
    out["b_enc"] = sd["b_enc"] - in_offset @ sd["W_enc"]
    out["W_dec"] = sd["W_dec"] @ W_inv
    out["b_dec"] = sd["b_dec"] @ W_inv + shift
    k = getattr(sae.cfg, "k", None)
    return build_sae(sae_architecture(sae), out, sae.cfg.metadata.to_dict(), apply_b_dec_to_input=False, k=k,
                     device=sd["W_enc"].device)


# ============================================================================= encode / decode


@torch.no_grad()
def pre_acts(sae, x: Float[Tensor, "tok d_in"], chunk: int = 8192) -> Float[Tensor, "tok d_sae"]:
    """Pre-activations (x - b_dec*apply) W_enc + b_enc, chunked."""
    W, b = sae.W_enc, sae.b_enc
    off = sae.b_dec * float(sae.cfg.apply_b_dec_to_input)
    out = []
    for i in range(0, x.shape[0], chunk):
        xi = x[i : i + chunk].to(W.device, W.dtype)
        out.append(torch.addmm(b, xi - off, W))
    return torch.cat(out)


@torch.no_grad()
def encode(sae, x: Float[Tensor, "... d_in"], chunk: int = 8192) -> Float[Tensor, "... d_sae"]:
    """Codes of `x` (any leading dims) through SAELens's own encode, chunked, without grad."""
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    W = sae.W_enc
    out = [sae.encode(flat[i : i + chunk].to(W.device, W.dtype)) for i in range(0, flat.shape[0], chunk)]
    return torch.cat(out).reshape(*lead, -1) if out else flat.new_zeros(*lead, sae.cfg.d_sae)


@torch.no_grad()
def decode(sae, a: Float[Tensor, "... d_sae"], chunk: int = 8192) -> Float[Tensor, "... d_in"]:
    """Reconstruction from codes through SAELens's own decode, chunked, without grad."""
    lead = a.shape[:-1]
    flat = a.reshape(-1, a.shape[-1])
    W = sae.W_dec
    out = [sae.decode(flat[i : i + chunk].to(W.device, W.dtype)) for i in range(0, flat.shape[0], chunk)]
    return torch.cat(out).reshape(*lead, -1) if out else flat.new_zeros(*lead, sae.cfg.d_in)


def active_from_pre(sae, pre: Tensor) -> Tensor:
    """Boolean active mask of latents given pre-activations (the architecture's gate)."""
    arch = sae_architecture(sae)
    if arch == "jumprelu":
        return (pre > sae.threshold) & (pre > 0)
    if arch == "standard":
        return pre > 0
    idx = pre.topk(sae.cfg.k, dim=-1).indices
    return torch.zeros_like(pre, dtype=torch.bool).scatter_(-1, idx, True) & (pre > 0)


# ============================================================================= L0 calibration


@torch.no_grad()
def calibrate_l0(sae, x: Float[Tensor, "tok d_in"], target: float, tol: float = 0.05, iters: int = 60):
    """Set the mean L0 of `sae` on `x` to target (within tol, relative) by one shared scalar.

    jumprelu: every threshold times s > 0; standard: delta added to every encoder bias.
    The pre-activations are computed once; each bisection step only recounts. The result is
    folded into the weights in place. Returns (value, mean L0 after). topk: nothing to do.
    """
    arch = sae_architecture(sae)
    pre = pre_acts(sae, x)
    if arch == "topk":
        return None, float(active_from_pre(sae, pre).sum(-1).float().mean())
    lo_ok, hi_ok = target * (1 - tol), target * (1 + tol)
    if arch == "jumprelu":
        theta = sae.threshold.detach().clamp_min(1e-12)
        pos = pre.clamp_min(0)

        def l0(log_s: float) -> float:
            return float((pos > theta * math.exp(log_s)).sum(-1).float().mean())

        lo, hi = -20.0, 20.0  # log s; L0 decreases with s
        best = 0.0
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            v = l0(mid)
            best = mid
            if lo_ok <= v <= hi_ok:
                break
            if v > target:
                lo = mid
            else:
                hi = mid
        s = math.exp(best)
        sae.threshold.mul_(s)
        return s, float((pos > sae.threshold).sum(-1).float().mean())
    # standard: L0 increases with delta
    span = float(pre.abs().max()) + 1.0
    lo, hi = -span, span
    best = 0.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        v = float((pre > -mid).sum(-1).float().mean())
        best = mid
        if lo_ok <= v <= hi_ok:
            break
        if v > target:
            hi = mid
        else:
            lo = mid
    sae.b_enc.add_(best)
    return best, float((pre + best > 0).sum(-1).float().mean())


# ============================================================================= train (public)


def train_sae(
    acts: Float[Tensor, "tok d_in"],
    cfg: SAETrainConfig,
    metadata: Mapping[str, Any] | None = None,
    transform: InputTransform | None = None,
    progress: bool = False,
):
    """Train an SAE on the buffer `acts` and return it as a SAELens inference SAE (eval mode).

    With `transform`, training runs on z = (acts - shift) @ W and the returned SAE has the
    transform folded in (it reads raw activations). Calibration (when on) uses the first
    `calib_tokens` of a seeded permutation of the buffer. The training summary is in
    `sae.cfg.metadata.interp_training`.
    """
    cfg.validate()
    if acts.dim() != 2 or acts.shape[0] < 2:
        raise ValueError(f"train_sae: need a (tokens, d_in) buffer with >= 2 tokens, got {tuple(acts.shape)}")
    acts = acts.float()
    if not torch.isfinite(acts).all():
        raise NumericError("train_sae: the activation buffer holds NaN or inf")
    x = transform.apply(acts) if transform is not None else acts
    meta = dict(metadata or {})
    if cfg.trainer == "saelens":
        sae, log = _train_saelens(x, cfg, meta, progress)
    else:
        tsae, log = _train_toolkit(x, cfg, progress)
        sae = build_sae(cfg.architecture, _state_of(tsae), meta, apply_b_dec_to_input=True, k=cfg.k,
                        device=x.device)
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


def _train_saelens(x: Tensor, cfg: SAETrainConfig, meta: dict[str, Any], progress: bool):
    """SAELens's SAETrainer on an in-memory provider (fixed coefficient: no controller)."""
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
        for idx in _batches(x.shape[0], cfg.batch, cfg.steps + 1, gen):
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
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()) if not progress else contextlib.nullcontext():
        trained = SAETrainer(tcfg, sae, provider()).fit()
    log = TrainLog(steps=cfg.steps, seconds=time.perf_counter() - t0, coeff_init=coeff, coeff_final=coeff)
    log.tokens_per_s = cfg.steps * cfg.batch / max(log.seconds, 1e-9)
    state = {k: v for k, v in trained.state_dict().items() if k in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold")}
    return build_sae(cfg.architecture, state, meta, apply_b_dec_to_input=True, k=cfg.k, device=x.device), log


# ============================================================================= metadata, save, load


def sae_metadata(model: Any, site: Site, context_size: int | None = None, dataset: str | None = None,
                 **extra: Any) -> dict[str, Any]:
    """SAELens metadata for an SAE on `model` at `site`: hook name (TransformerLens), model, context."""
    info = model.info
    meta: dict[str, Any] = {
        "hook_name": site.tl_name,
        "model_name": info.name,
        "interp_site": str(site),
        "interp_model_weights_sha256": info.weights_sha256,
        "prepend_bos": adds_bos(getattr(model, "tokenizer", None)),
    }
    canonical = _canonical_hook(model, site)
    if canonical and canonical != site.tl_name:
        meta["hook_name_canonical"] = canonical
    if context_size is not None:
        meta["context_size"] = int(context_size)
    if dataset is not None:
        meta["dataset_path"] = dataset
    meta.update(extra)
    return meta


def adds_bos(tok: Any) -> bool:
    try:
        return len(tok("a").input_ids) > len(tok.encode("a", add_special_tokens=False))
    except Exception:  # noqa: BLE001 - a tokenizer without the HF call API: assume none
        return False


def _canonical_hook(model: Any, site: Site) -> str | None:
    """The bridge's own name of the hook behind `site.tl_name`, when it aliases it."""
    bridge = getattr(model, "bridge", None)
    if bridge is None:
        return None
    try:
        hook = bridge.hook_dict.get(site.tl_name) if hasattr(bridge, "hook_dict") else None
    except Exception:  # noqa: BLE001 - a backend without a hook table has no canonical name
        return None
    return getattr(hook, "name", None) if hook is not None else None


def sae_site(sae) -> Site:
    """The Site an SAE reads, from its own config's hook name."""
    name = sae.cfg.metadata.hook_name
    if not name:
        raise ValueError("this SAE's config has no metadata.hook_name")
    return Site.from_tl_name(name)


SPARSITY_FILE = "sparsity.safetensors"
"""SAELens's name (sae_lens.constants.SPARSITY_FILENAME) for the per-latent log10 firing densities."""


def firing_density(sae, x: Float[Tensor, "tok d_in"]) -> Float[Tensor, " d_sae"]:
    """Fraction of the tokens `x` on which each latent fires (> 0)."""
    fired = torch.zeros(sae.cfg.d_sae, dtype=torch.float64)
    for i in range(0, x.shape[0], 8192):
        fired += (encode(sae, x[i : i + 8192]) > 0).sum(0).double().cpu()  # (d_sae,)
    return (fired / max(1, x.shape[0])).float()


def set_density(sae, density: Tensor | None) -> None:
    """Attach per-latent firing densities (d_sae,) to an SAE object; save_sae writes them as SAELens does."""
    sae.interp_density = None if density is None else density.detach().float().cpu()


def save_sae(sae, path: str | Path, density: Tensor | None = None) -> Path:
    """Save with SAELens's own save_model (cfg.json + sae_weights.safetensors) into `path`, plus
    sparsity.safetensors when the firing densities are known (given, or attached by train_sae / load_sae):
    {"sparsity": log10(density + 1e-10)} of shape (d_sae,), the tensor SAELens's trainer writes and its
    loaders read."""
    from safetensors.torch import save_file

    path = Path(path)
    sae.save_model(path)
    density = density if density is not None else getattr(sae, "interp_density", None)
    if density is not None:
        if density.shape != (sae.cfg.d_sae,):
            raise ValueError(f"save_sae: density of shape {tuple(density.shape)}, not ({sae.cfg.d_sae},)")
        log10 = torch.log10(density.detach().float().cpu() + 1e-10).contiguous()  # (d_sae,)
        save_file({"sparsity": log10}, str(path / SPARSITY_FILE))
    return path


def load_density(path: str | Path) -> Tensor | None:
    """The firing densities (d_sae,) of the SAELens directory `path` from its sparsity.safetensors, if any."""
    from safetensors import safe_open

    p = Path(path) / SPARSITY_FILE
    if not p.is_file():
        return None
    with safe_open(str(p), framework="pt", device="cpu") as f:
        return (10.0 ** f.get_tensor("sparsity").float()).clamp_max(1.0)  # (d_sae,)


def load_sae(path: str | Path, device: str = "cpu"):
    """Any SAELens directory, through `sae_lens.SAE.load_from_disk`, in eval mode without grads (with its
    firing densities attached when it has a sparsity.safetensors). `interp.load_sae(spec)` also takes run
    directories and SAELens release ids."""
    from sae_lens import SAE

    sae = SAE.load_from_disk(str(path), device=device)
    sae.eval()
    for p in sae.parameters():
        p.requires_grad_(False)
    set_density(sae, load_density(path))
    return sae


def roundtrip_check(sae, x: Float[Tensor, "tok d_in"], path: str | Path) -> dict[str, Any]:
    """Reload the SAE saved at `path` and compare encodings and decodes on `x` with `sae`.

    max_rel_err = max(|a_loaded - a| / max|a|, |x_hat_loaded - x_hat| / max|x_hat|); supports
    must agree except where the pre-activation is within 1e-5 (relative) of the gate.
    """
    other = load_sae(path, device=str(sae.W_enc.device))
    a, b = encode(sae, x), encode(other, x)
    xa, xb = decode(sae, a), decode(other, b)
    err_a = float((a - b).abs().max() / a.abs().max().clamp_min(1e-12))
    err_x = float((xa - xb).abs().max() / xa.abs().max().clamp_min(1e-12))
    support_diff = (a != 0) != (b != 0)
    n_diff = int(support_diff.sum())
    if n_diff:
        pre = pre_acts(sae, x)
        gate = sae.threshold if sae_architecture(sae) == "jumprelu" else torch.zeros_like(pre[0])
        near = (pre - gate).abs() <= 1e-5 * pre.abs().max()
        n_diff = int((support_diff & ~near).sum())
    return {"max_rel_err": max(err_a, err_x), "enc_rel_err": err_a, "dec_rel_err": err_x, "support_mismatch": n_diff,
            "arch": sae_architecture(other), "hook_name": other.cfg.metadata.hook_name}


# ============================================================================= cache


def sae_cache_key(model_info: Any, site: Site, cfg: SAETrainConfig, data_key: str,
                  transform: InputTransform | None = None) -> str:
    """sha256 over model name + weights sha, site, training config, data key and transform."""
    blob = {
        "version": CACHE_VERSION,
        "model": getattr(model_info, "name", None),
        "weights": getattr(model_info, "weights_sha256", None),
        "site": site.tl_name,
        "cfg": cfg.key(),
        "data": data_key,
        "transform": transform.key() if transform is not None else None,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def cache_dir(key: str) -> Path:
    from .embedded import cache_root

    return cache_root() / "saes" / key[:24]


def cached_sae(
    model: Any,
    site: Site,
    cfg: SAETrainConfig,
    data_fn: Callable[[], Tensor],
    data_key: str,
    transform: InputTransform | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: bool = False,
    device: str = "cpu",
):
    """(sae, hit): the SAE for (model, site, cfg, data, transform) from the cache, trained on a miss.

    `data_key` names the training data (corpus hash, token counts, filters): it enters the key;
    `data_fn()` returns the buffer and is called only on a miss. Stored under
    `cache_root()/saes/<key>` as a SAELens directory, written to a temporary sibling and renamed.
    """
    key = sae_cache_key(model.info, site, cfg, data_key, transform)
    path = cache_dir(key)
    if (path / "cfg.json").is_file() and (path / "sae_weights.safetensors").is_file():
        sae = load_sae(path, device=device)
        if getattr(sae, "interp_density", None) is None:  # cached before SAEs carried their sparsity file
            _add_sparsity(path, sae, data_fn())
        return sae, True
    meta = dict(sae_metadata(model, site) if metadata is None else metadata)
    meta["interp_cache_key"] = key
    sae = train_sae(data_fn(), cfg, metadata=meta, transform=transform, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        save_sae(sae, tmp)
        try:
            os.replace(tmp, path)
        except OSError:  # another process filled it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sae, False


def _add_sparsity(path: Path, sae, acts: Tensor) -> None:
    """Write the firing densities on the training buffer `acts` (first calib_tokens tokens) into a cached SAE."""
    from safetensors.torch import save_file

    cfg_n = int((sae.cfg.metadata.get("interp_training") or {}).get("config", {}).get("calib_tokens", 16384))
    set_density(sae, firing_density(sae, acts[:cfg_n].float()))
    log10 = torch.log10(sae.interp_density + 1e-10).contiguous()
    fd, tmp = tempfile.mkstemp(prefix=".sparsity.", suffix=".tmp", dir=path)
    os.close(fd)
    try:
        save_file({"sparsity": log10}, tmp)
        os.replace(tmp, path / SPARSITY_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = [
    "ARCHITECTURES",
    "ActivationBuffer",
    "InputTransform",
    "SAETrainConfig",
    "TrainLog",
    "active_from_pre",
    "build_sae",
    "cached_sae",
    "calibrate_l0",
    "collect_activations",
    "decode",
    "encode",
    "firing_density",
    "fold_input_transform",
    "load_density",
    "load_sae",
    "pre_acts",
    "roundtrip_check",
    "sae_cache_key",
    "sae_metadata",
    "sae_site",
    "sae_state",
    "save_sae",
    "set_density",
    "train_sae",
]
