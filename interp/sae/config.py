"""How to train one SAE: `SAETrainConfig`, its validation and its cache key. Imports no torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..errors import ConfigError

ARCHITECTURES = ("standard", "jumprelu", "topk")

_KEYED_WHEN_ON: tuple[tuple[str, Any, tuple[str, ...]], ...] = (
    # (switch, its "off" value, the fields that enter the cache key only while the switch is on)
    ("aux_k", 0, ("aux_k", "aux_coeff", "aux_dead_tokens")),
    ("init_sparsity", "fixed", ("init_sparsity",)),
    ("resample_every", 0, ("resample_every", "resample_until", "resample_below")),
    ("tied", False, ("tied",)),
)
"""Optional training features, each added after the cache key's format was fixed. While a feature is off its
fields change nothing in the trained SAE, so they stay out of the key: configs that do not use it keep the keys
they had before it existed. A change to what a cached SAE would be bumps `interp.sae.cache.CACHE_VERSION`
instead of adding a row here."""


@dataclass(frozen=True)
class SAETrainConfig:
    """How to train one SAE. Every field enters the cache key, except those of an optional feature that is off
    (`key()`)."""

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
    tied: bool = False
    """The encoder is the decoder's transpose throughout training (W_enc = W_dec^T, one shared matrix), not only at
    initialisation. In whitened coordinates this is the threshold SAE of the atoms paper's recovery theorem
    (W_enc = D^T S~ in raw coordinates). An untied encoder column is fit only on the tokens its latent fires on,
    which can overfit when each latent fires on few tokens."""
    trainer: Literal["toolkit", "saelens"] = "toolkit"
    """The toolkit's loop, or SAELens's SAETrainer on an in-memory provider (fixed coefficient): a benchmark
    baseline that lives in bench/ and is passed to `train_sae` as `fit=bench.sae.train_saelens`."""
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
        if self.tied and self.trainer != "toolkit":
            raise ConfigError("tied", self.tied, 'false with trainer="saelens"')
        if self.init_sparsity == "data" and self.trainer != "toolkit":
            raise ConfigError("init_sparsity", self.init_sparsity, '"fixed" with trainer="saelens"')
        if self.resample_every < 0:
            raise ConfigError("resample_every", self.resample_every, "0 (off) or a positive step count")
        if not 0 <= self.resample_until <= 1 or not 0 <= self.resample_below <= 1:
            raise ConfigError("resample_until", (self.resample_until, self.resample_below),
                              "resample_until and resample_below in [0, 1]")

    def key(self) -> dict[str, Any]:
        """The fields as a dict, without those of the optional features that are off (`_KEYED_WHEN_ON`)."""
        d = asdict(self)
        for switch, off, names in _KEYED_WHEN_ON:
            if getattr(self, switch) == off:
                for name in names:
                    d.pop(name)
        return d


TRANSCODER_KINDS = ("plt", "skip", "clt")


@dataclass(frozen=True)
class TranscoderTrainConfig:
    """How to train a transcoder set (`interp.sae.train_transcoders`). Every field enters the cache key."""

    kind: Literal["plt", "skip", "clt"] = "plt"
    """plt: one transcoder per layer; skip: plus a linear skip path W_skip x; clt: cross-layer (layer l's features
    write to every layer l' >= l)."""
    activation: Literal["jumprelu", "topk"] = "jumprelu"
    """jumprelu: threshold + L0 penalty (straight-through, as the SAEs); topk: the k largest, no penalty."""
    d_transcoder: int = 2048
    """Features per layer."""
    steps: int = 1000
    """Optimiser steps (every layer trains in each step)."""
    batch: int = 512
    """Tokens per step."""
    lr: float = 1e-3
    """Adam learning rate (peak; linear warm-up over 5 % of the steps, cosine decay)."""
    target_l0: float = 16.0
    """Mean active features per token and layer the L0 controller aims at (jumprelu)."""
    k: int = 16
    """Active features per token and layer (topk)."""
    bandwidth: float = 0.05
    """Width of JumpReLU's straight-through window, in units of the pre-activation."""
    controller_rate: float = 0.2
    """L0 coefficient update every 25 steps: coeff *= exp(rate * clip((L0 - target) / target, -1, 1))."""
    matmul_dtype: Literal["float32", "bfloat16"] = "bfloat16"
    """Precision of the encoder and decoder products during training (weights, Adam and the loss stay float32):
    bfloat16 is ~3x faster on CPUs with AMX and on GPUs; the trained set is float32 either way."""
    seed: int = 0
    """Seed of the initialisation and the batch order."""

    def validate(self) -> None:
        if self.kind not in TRANSCODER_KINDS:
            raise ConfigError("kind", self.kind, "one of " + ", ".join(TRANSCODER_KINDS))
        if self.activation not in ("jumprelu", "topk"):
            raise ConfigError("activation", self.activation, '"jumprelu" or "topk"')
        for name in ("d_transcoder", "steps", "batch", "k"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "a positive integer")
        if self.lr <= 0 or self.target_l0 <= 0 or self.bandwidth <= 0:
            raise ConfigError("lr", (self.lr, self.target_l0, self.bandwidth),
                              "positive lr, target_l0 and bandwidth")
        if self.matmul_dtype not in ("float32", "bfloat16"):
            raise ConfigError("matmul_dtype", self.matmul_dtype, '"float32" or "bfloat16"')
        if self.k > self.d_transcoder:
            raise ConfigError("k", self.k, f"at most d_transcoder={self.d_transcoder}")

    def key(self) -> dict[str, Any]:
        return asdict(self)


__all__ = ["ARCHITECTURES", "TRANSCODER_KINDS", "SAETrainConfig", "TranscoderTrainConfig"]
