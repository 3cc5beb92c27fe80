"""Atoms: the atomic inner product (AIP), faithfulness R² and stability q* of neurons, SAE features
and threshold SAEs (TSAEs), with a synthetic ground truth and a capacity x data grid.

Method: ../shared/methods/atoms.md (paper arXiv 2509.20784, "Towards Atoms of Large Language
Models"; the code was not available, so the centring, the R² geometry, local coherence, the q*
quantile and all training details are reconstructions, each a config option).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from interp.config import ModelLimits, ProbeConfig, check_range
from interp.data import check_source
from interp.errors import ConfigError
from interp.registry import probe
from interp.sites import Site, parse_site, site_kind


def parse_hook(value: str) -> Site:
    """A residual-like site from a TransformerLens hook name or a site name ("resid_post.6"), once the runner has
    made depth-relative forms ("resid_post@0.2") concrete (`ProbeConfig.at_depth`)."""
    return parse_site(value)


_D_MODEL_SITES = ("embed", "resid_pre", "resid_mid", "resid_post", "attn_in", "attn_out", "mlp_in", "mlp_out", "final")


@probe("atoms", run="probes.atoms.probe:run", page="app.views.atoms")
@dataclass(frozen=True)
class AtomsConfig(ProbeConfig):
    """Atoms: AIP geometry, R² and q* of neurons, SAE features and threshold SAEs; capacity x data grid."""

    hook: str = "resid_post@0.2"
    """The gated site: a residual or MLP-out site, as a TransformerLens hook name, a site name or a depth fraction
    (the default, resid_post at 20 % of depth: layer 6 of SmolLM2's 30)."""
    angle_hooks: tuple[str, ...] = ("resid_post@0.47",)
    """Further sites where only the representation shift (Euclidean vs AIP angles) is measured."""
    angle_tokens: int = 20480
    """Tokens collected at each `angle_hooks` site (in the same forward passes as `hook`)."""
    corpus: str = "builtin:all"
    """Text source (any `interp.data` source: builtin, builtin:all, a .txt or .jsonl[:field] file)."""
    n_tokens: int = 120_000
    """Tokens collected at `hook` (after dropping positions and outliers), split by sequence."""
    heldout_frac: float = 0.1
    """Fraction of sequences held out (every metric but training is on held-out tokens)."""
    ctx_len: int = 128
    """Tokens per window of the corpus."""
    batch_seqs: int = 16
    """Windows per forward pass."""
    drop_positions: tuple[int, ...] = (0,)
    """Leading positions never collected ([0]: the attention-sink / massive-norm position)."""
    norm_outlier_factor: float = 20.0
    """Drop tokens whose norm exceeds this factor times the median norm (count reported)."""
    metric: Literal["uncentered", "centered"] = "uncentered"
    """AIP metric of the TSAE and of R²/q*: inverse second moment, or inverse covariance of centred vectors."""
    ridge: float = 1e-4
    """Ridge lambda = ridge * tr(M2) / H added before inverting the second moment."""
    n_pairs: int = 20_000
    """Random held-out token pairs (from different sequences) for the angle distributions."""
    d_sae_mult: float = 4.0
    """Dictionary size of the TSAE and the SAE as a multiple of d_model (4 -> 4H)."""
    target_l0: float = 16.0
    """Mean active units per token for the TSAE and the SAE (calibrated to +-5 % on training tokens)."""
    l0_calib_tokens: int = 16384
    """Training-split tokens used to calibrate L0."""
    steps: int = 800
    """Training steps of the TSAE and the SAE."""
    batch: int = 1024
    """Tokens per training step."""
    lr: float = 2e-3
    """Adam learning rate (cosine decay). The spec's 5e-4 leaves both dictionaries far from converged in 800 steps
    on smollm2-135m (held-out R²_AIP 0.22 for the TSAE, R²_Euclid 0.01 for the SAE); 2e-3 with data-started
    gates reaches 0.45 and 0.73."""
    init_sparsity: Literal["fixed", "data"] = "data"
    """How the gates start (interp.sae's init_sparsity): data puts each latent's JumpReLU threshold, or the SAE's
    encoder bias, where it fires on target_l0 / d_sae of the first batch; fixed is the spec's threshold 0.5 and
    bias 0, under which a third of the tokens end with no active latent."""
    jumprelu_bandwidth: float = 0.05
    """Width of JumpReLU's straight-through window, in whitened units."""
    threshold_lr_scale: float = 1.0
    """Learning-rate multiplier of the TSAE's log-thresholds."""
    sae_source: str = "train"
    """"train" (a standard ReLU+L1 SAE on raw activations) or an `interp.load_sae` spec for the same hook (a SAELens
    directory, a run directory holding an SAE, saelens:<release>/<sae_id> online)."""
    cache_saes: bool = True
    """Reuse the core TSAE and SAE from the SAE cache when the model, data and config match."""
    grid_d_mults: tuple[float, ...] = (0.5, 2.0, 8.0)
    """Grid dictionary sizes as multiples of d_model ("small": H/2, 2H, 8H; empty: no grid)."""
    grid_n_fracs: tuple[float, ...] = (1 / 64, 1 / 4, 1.0)
    """Grid training-set sizes as fractions of the training split ("small": N/64, N/4, N)."""
    grid_steps: int = 400
    """Training steps of every grid cell."""
    grid_batch: int = 512
    """Tokens per step of every grid cell."""
    q_levels: int = 1000
    """Quantile levels q in (0, 1] for q*."""
    coherence_max_k: int = 256
    """Cap on the support size when computing local coherence (top-|a| entries kept)."""
    eval_tokens: int = 10_000
    """Held-out tokens for support statistics and coherence (a subsample when there are more)."""
    top_latents: int = 24
    """TSAE latents with stored top-activating contexts (the most frequently active on held-out)."""
    top_contexts: int = 8
    """Contexts stored per latent."""
    synthetic: bool = True
    """Run the synthetic ground-truth check (known atoms)."""
    synth_dim: int = 256
    """Synthetic H_s."""
    synth_atoms: int = 512
    """Synthetic N* (random unit atoms)."""
    synth_k: int = 3
    """Active atoms per synthetic sample (also its target L0)."""
    synth_samples: int = 60_000
    """Synthetic training samples (plus a held-out tenth)."""
    synth_steps: int = 2000
    """Training steps of each synthetic TSAE."""
    synth_lr: float = 3e-3
    """Adam learning rate of the synthetic TSAEs (with data-initialised decoders, data-started thresholds when
    init_sparsity="data", else 3 whitened units, and dead-latent resampling every `synth_resample_every` steps
    over the first half)."""
    synth_resample_every: int = 50
    """Steps between dead-latent resampling in the synthetic TSAEs (0: off). With d_sae = N*, every dead latent
    is a missed atom."""
    synth_d_fracs: tuple[float, ...] = (0.25, 1.0)
    """Synthetic dictionary sizes as fractions of N* (the knee compares N*/4 with N*)."""
    synth_n_fracs: tuple[float, ...] = (1.0,)
    """Synthetic training-set sizes as fractions of `synth_samples`."""

    SIZE_PRESETS = {
        "micro": {
            "n_tokens": 2048,
            "ctx_len": 64,
            "angle_hooks": [],
            "n_pairs": 1000,
            "d_sae_mult": 2.0,
            "steps": 20,
            "batch": 256,
            "l0_calib_tokens": 1024,
            "grid_d_mults": [2.0],
            "grid_n_fracs": [1.0],
            "grid_steps": 20,
            "eval_tokens": 1024,
            "synth_dim": 64,
            "synth_atoms": 128,
            "synth_samples": 4000,
            "synth_steps": 20,
            "synth_d_fracs": [1.0],
            "top_latents": 8,
            "cache_saes": False,
        },
        "quick": {
            "n_tokens": 16384,
            "angle_hooks": [],
            "n_pairs": 5000,
            "d_sae_mult": 2.0,
            "steps": 200,
            "batch": 512,
            "l0_calib_tokens": 4096,
            "grid_d_mults": [],
            "grid_n_fracs": [],
            "eval_tokens": 4096,
            "synth_d_fracs": [1.0],
            "cache_saes": False,
        },
    }

    def validate(self) -> None:
        super().validate()
        for name in ("hook", *(f"angle_hooks[{i}]" for i in range(len(self.angle_hooks)))):
            value = self.hook if name == "hook" else self.angle_hooks[int(name[12:-1])]
            try:
                kind = site_kind(value)
            except ValueError:
                raise ConfigError(name, value, "a hook name such as blocks.6.hook_resid_post, resid_post.6 or "
                                  "resid_post@0.2") from None
            if kind not in _D_MODEL_SITES:
                raise ConfigError(name, value, "a residual-stream-like site (resid_pre/mid/post, attn_out, mlp_out)")
        for name in ("n_tokens", "ctx_len", "batch_seqs", "n_pairs", "l0_calib_tokens", "steps", "batch",
                     "grid_steps", "grid_batch", "q_levels", "coherence_max_k", "eval_tokens", "synth_dim",
                     "synth_atoms", "synth_k", "synth_samples", "synth_steps", "top_contexts"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "a positive integer")
        if self.angle_hooks and self.angle_tokens < 2:
            raise ConfigError("angle_tokens", self.angle_tokens, "at least 2 when angle_hooks is set")
        if self.top_latents < 0:
            raise ConfigError("top_latents", self.top_latents, "a non-negative integer")
        check_range("heldout_frac", self.heldout_frac, 0, 0.5, lo_open=True)
        check_range("norm_outlier_factor", self.norm_outlier_factor, 1, None, lo_open=True)
        check_range("ridge", self.ridge, 0, 1)
        check_range("d_sae_mult", self.d_sae_mult, 0, 64, lo_open=True)
        check_range("target_l0", self.target_l0, 0, None, lo_open=True)
        check_range("lr", self.lr, 0, 1, lo_open=True)
        check_range("synth_lr", self.synth_lr, 0, 1, lo_open=True)
        if self.synth_resample_every < 0:
            raise ConfigError("synth_resample_every", self.synth_resample_every, "0 (off) or a positive step count")
        check_range("jumprelu_bandwidth", self.jumprelu_bandwidth, 0, None, lo_open=True)
        check_range("threshold_lr_scale", self.threshold_lr_scale, 0, None, lo_open=True)
        if tuple(self.drop_positions) != tuple(range(len(self.drop_positions))):
            raise ConfigError("drop_positions", list(self.drop_positions), "leading positions [0, 1, ..., k-1] or []")
        if len(self.grid_d_mults) != len(set(self.grid_d_mults)) or any(m <= 0 for m in self.grid_d_mults):
            raise ConfigError("grid_d_mults", list(self.grid_d_mults), "distinct positive multiples of d_model")
        for name in ("grid_n_fracs", "synth_n_fracs"):
            if any(not 0 < f <= 1 for f in getattr(self, name)):
                raise ConfigError(name, list(getattr(self, name)), "fractions in (0, 1]")
        if bool(self.grid_d_mults) != bool(self.grid_n_fracs):
            raise ConfigError("grid_d_mults", list(self.grid_d_mults),
                              "empty together with grid_n_fracs (no grid) or both set; "
                              f"grid_n_fracs={list(self.grid_n_fracs)}")
        if any(not 0 < f <= 4 for f in self.synth_d_fracs) or not self.synth_d_fracs:
            raise ConfigError("synth_d_fracs", list(self.synth_d_fracs), "fractions of N* in (0, 4]")
        if not 1 <= self.synth_k < self.synth_dim:
            raise ConfigError("synth_k", self.synth_k, f"an integer in [1, synth_dim={self.synth_dim})")
        if self.sae_source != "train":
            from interp.sae_source import resolve_sae_spec

            resolve_sae_spec(self.sae_source, "sae_source")

    CONTEXT_FIELDS = ("ctx_len",)
    SITE_FIELDS = ("hook", "angle_hooks")

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        check_source(self.corpus, field="corpus", seed=self.seed, min_tokens=self.n_tokens,
                     count_tokens=limits.count_tokens, needed_for=f"n_tokens={self.n_tokens}")

    def validate_for_model(self, n_layers: int | None) -> None:
        for name, value in (("hook", self.hook), *(("angle_hooks", h) for h in self.angle_hooks)):
            self.check_site(name, value, n_layers)

    @property
    def site(self) -> Site:
        return parse_hook(self.hook)

    @property
    def angle_sites(self) -> list[Site]:
        return [parse_hook(h) for h in self.angle_hooks]
