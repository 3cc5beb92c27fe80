"""Lock-in: the geometry of narrow fine-tuning (a project reconstruction; the paper was not found).

Method: ../shared/methods/lockin.md. Everything here is the project's reconstruction from the
phrases "trajectory lock-in", "drift paradox" and "spectral bifurcation" and from related work
(arXiv 2602.15799, 2405.09673, Gur-Ari et al. 2018, PyHessian); no paper was found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from interp.config import ProbeConfig, Range
from interp.errors import ConfigError
from interp.registry import probe

RECONSTRUCTION = "paper not found; project reconstruction"


@probe("lockin", run="interp_probes.lockin.probe:run",
       page="interp_probes.lockin.page", figures="interp_probes.lockin.figures")
@dataclass(frozen=True)
class LockinConfig(ProbeConfig):
    """Narrow fine-tuning geometry: shared degradation curve, stiff directions, harm signal (reconstruction).

    When a model is fine-tuned on a narrow task, what decides how much broad capability it loses: is the damage a fixed
    function of task progress whatever the regularisation, which geometric quantities of the update trajectory predict
    it online, and does steering updates off the stiff directions of the broad loss change the trade-off?
    """

    narrow_task: Literal["style"] = "style"
    """Narrow task: "style" (weather reports from ~30 templates, LM loss at every position but 0)."""
    trainable: Literal["last_mlp", "last_attn_o"] = "last_mlp"
    """Trainable slice: last_mlp (the MLP, gate/up/down, of the last block) or last_attn_o (the attention output
    projection W_O of the last block, its frozen MLP above it); everything else is frozen."""
    cache_inputs: bool = True
    """Cache the slice's input once (resid_mid of the last block; resid_pre and z for last_attn_o); false recomputes
    it."""
    train_unembed: Literal["auto", "float32", "bfloat16"] = "auto"
    """Dtype of the unembedding matmul in training steps (float32 accumulation and loss either way; evaluation,
    curvature and every check stay float32). auto: bfloat16 on CUDA or a CPU with native bf16, else float32."""
    grid: Literal["smoke", "full", "quick", "micro"] = "smoke"
    """Run grid: smoke (7 runs, CPU), full (GPU, 2 seeds), quick (3 runs), micro (2 runs)."""
    steps: Annotated[int, Range(1, 1_000_000)] = 150
    """Optimizer steps per run."""
    log_every: int = 10
    """Log (losses, drift, subspace, harm) every this many steps; step 0 and the last step are logged too."""
    batch_seqs: Annotated[int, Range(1, 4096)] = 8
    """Training sequences per step."""
    batch_positions: int = 32
    """Positions sampled per training sequence and step (from 1 .. seq_len - 2; each predicts the next token)."""
    seq_len: Annotated[int, Range(8, 4096)] = 64
    """Tokens per training / evaluation sequence."""
    train_seqs: Annotated[int, Range(1, 1_000_000)] = 300
    """Cached narrow training sequences (the data order cycles through them)."""
    warmup_frac: Annotated[float, Range(0.0, 1.0, hi_open=True)] = 0.0
    """Linear learning-rate warmup as a fraction of the steps (0 = constant lr, which isolates rates)."""
    broad_eval_positions: int = 1024
    """Fixed broad-evaluation positions (16 per sequence of the general corpus, all >= 1)."""
    narrow_eval_positions: int = 1024
    """Fixed held-out narrow positions (16 per held-out sequence, all >= 1)."""
    curvature: Literal["ggn", "hessian", "empirical_fisher"] = "ggn"
    """Broad curvature operator: ggn (= true Fisher, PSD, no labels), hessian, or empirical_fisher."""
    k_stiff: Annotated[int, Range(1, 1024)] = 8
    """Top eigenpairs of the broad curvature at theta_0 (the stiff subspace V_k)."""
    lanczos_iters: int = 30
    """Lanczos steps (full reorthogonalisation, restart on breakdown); also the power-iteration cap."""
    refresh_every: Annotated[int, Range(0, 1_000_000)] = 0
    """Recompute the stiff subspace along each run every this many steps (0 = theta_0 only)."""
    window_W: Annotated[int, Range(2, 1000)] = 10
    """Updates stacked for the effective update subspace U_t."""
    energy_frac: Annotated[float, Range(0.0, 1.0, lo_open=True)] = 0.9
    """Fraction of the squared singular values of U_t that the basis V_t covers."""
    tau: Annotated[int, Range(1, 1_000_000)] = 10
    """Lag (steps) for overlap and principal angles of V_t against V_{t-tau}."""
    fisher_m: Annotated[int, Range(1, 4096)] = 16
    """Per-example broad gradients for the empirical-Fisher projected curvature C_t."""
    fisher_every: Annotated[int, Range(0, 1_000_000)] = 30
    """Steps between empirical-Fisher C_t (0 = off)."""
    early_frac: Annotated[float, Range(0.0, 1.0, lo_open=True)] = 0.2
    """The harm signal is the predicted degradation at step ceil(early_frac * steps)."""
    lora_rank: Annotated[int, Range(1, 4096)] = 4
    """Rank of the LoRA run (on gate/up/down of the slice)."""
    lora_lr: Annotated[float, Range(0.0, 1.0, lo_open=True)] = 1e-3
    """Learning rate of the LoRA run."""
    exact_curvature_drift: bool = False
    """Also log D^T G D (one curvature product per log) and use it in the paradox test (GPU)."""
    overhead: bool = True
    """Measure the probes' per-step overhead (50 steps off, then 50 on) on the base configuration."""
    overhead_steps: Annotated[int, Range(2, 100_000)] = 50
    """Steps of each half of the overhead measurement."""
    synthetic: bool = True
    """Run the quadratic ground truth (Acceptance A) before the model runs."""
    heatmap_mb: Annotated[int, Range(0, 1_000_000)] = 1024
    """Memory cap (MB, float16) for the stored update bases behind the checkpoint-overlap heatmap."""

    CONTEXT_FIELDS = ("seq_len",)

    SIZE_PRESETS = {
        "micro": {
            "grid": "micro",
            "steps": 10,
            "log_every": 5,
            "broad_eval_positions": 128,
            "narrow_eval_positions": 128,
            "k_stiff": 2,
            "lanczos_iters": 6,
            "fisher_every": 0,
            "overhead": False,
            "synthetic": False,
            "train_seqs": 8,
        },
        "quick": {
            "grid": "quick",
            "steps": 40,
            "log_every": 5,
            "broad_eval_positions": 256,
            "narrow_eval_positions": 256,
            "k_stiff": 4,
            "lanczos_iters": 12,
            "fisher_every": 0,
            "overhead": False,
            "train_seqs": 48,
        },
    }

    def validate(self) -> None:
        super().validate()
        Range(1, self.steps).check("log_every", self.log_every)
        Range(1, self.seq_len - 2).check("batch_positions", self.batch_positions)
        Range(self.k_stiff + 1, 10_000).check("lanczos_iters", self.lanczos_iters)
        for name in ("broad_eval_positions", "narrow_eval_positions"):
            value = getattr(self, name)
            if value < 16 or value % 16:
                raise ConfigError(name, value, "a positive multiple of 16 (16 positions per sequence)")
        if self.grid == "full" and self.k_stiff < 32:
            raise ConfigError("k_stiff", self.k_stiff, "at least 32 with grid=full (it projects off k = 8 and 32)")
        if self.curvature == "empirical_fisher" and self.fisher_m < 2:
            raise ConfigError("fisher_m", self.fisher_m, "at least 2 with curvature=empirical_fisher")
