"""Self-interpretation adapters: a tiny adapter lets a frozen model describe its own vectors.

Method: ../shared/methods/self_interp.md (arXiv 2602.10352, Pepper et al.). Torch-free: the
config is validated before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from interp.config import ModelLimits, ProbeConfig, check_range
from interp.data import read_jsonl
from interp.errors import ConfigError
from interp.registry import probe

VARIANTS = ("identity", "scale_only", "bias_only", "scalar_affine", "low_rank", "full_rank", "low_rank_only")
CONTROLS = ("shuffled", "embed")
SCORERS = ("auto", "exact", "embedding", "lexical")


@probe("self_interp", run="probes.self_interp.probe:run", page="app.views.self_interp")
@dataclass(frozen=True)
class SelfInterpConfig(ProbeConfig):
    """Train adapters that let a frozen model describe its own vectors in words (self-interpretation)."""

    layer: int | str | None = None
    """Residual after block `layer` (resid_post) at the last token: an index (negative from the last layer), a depth
    fraction ("@0.8"), or None = round(0.8 * n_layers) (24 on SmolLM2)."""
    layer_sweep: tuple[float, ...] = (0.4, 0.6, 0.8, 0.9)
    """Layers for recall by layer (identity, scalar_affine, logit lens): a value < 1 is a fraction of n_layers,
    else a layer index; () skips the sweep. (0.4, 0.6, 0.8, 0.9) is [12, 18, 24, 27] on SmolLM2."""
    topics_file: str | None = None
    """JSONL of {topic, category, aliases} rows replacing the built-in 500-topic list (a topic repeated, in any case,
    is used once, with a warning)."""
    heldout_frac: float = 0.25
    """Within each category, the first ceil(frac * n_c) kept topics (in shuffled order) are held out (100 of the
    default 400)."""
    topic_cap: int | None = 400
    """Keep floor(cap * n_c / N) topics per category from the same shuffle (CPU budget: 400 of the built-in 500,
    16 per category); None keeps all."""
    val_frac: float = 0.1
    """Share of the training topics used for validation (identity scale and early model choice)."""
    placeholder: str | None = None
    """Placeholder token; None = the first single token of a preference list absent from the template."""
    template_system: Literal["none", "default"] = "none"
    """System turn of the injection template: none (the reference's hand-written template has none) or default
    (the chat template's default system prompt, which SmolLM2 inserts). The topic prompt keeps the default, as the
    reference's extraction renders it with the chat template."""
    variants: tuple[str, ...] = ("identity", "scale_only", "bias_only", "scalar_affine", "low_rank", "full_rank")
    """Adapters to train and evaluate (identity, scale_only, bias_only, scalar_affine, low_rank, full_rank,
    low_rank_only)."""
    controls: tuple[str, ...] = CONTROLS
    """shuffled (scalar_affine on permuted pairs) and embed (scalar_affine on token-embedding vectors)."""
    low_rank_rank: int = 8
    """Rank r of the low-rank term U (V^T v)."""
    low_rank_init: float = 0.01
    """U and V are drawn with std init_scale * low_rank_init / sqrt(r) (the reference's, with init_scale the initial
    exp(s) in absolute units)."""
    identity_scales: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
    """Identity-injection scales, in multiples of the median token-embedding norm; the best by validation loss is s*."""
    init_scale: float | None = 2.0
    """Initial exp(s) of trained adapters, in multiples of the median token-embedding norm; None = s*."""
    lr: float = 1e-2
    """AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay of bias, U, V and A (none on log_scale, as in the reference)."""
    epochs: int = 2
    """Passes over the training pairs."""
    batch_size: int = 16
    """Pairs per optimiser step (80 on GPU in the paper)."""
    clip: float = 0.5
    """Gradient-norm clip."""
    warmup: int = 10
    """Linear warmup steps (from 1e-6 x lr, as the reference's LinearLR) before the cosine decay; a run of at most
    `warmup` steps warms up over its first third instead."""
    loss_clamp: float = 100.0
    """Each target token's cross-entropy is clamped at this value."""
    eval_every: int = 5
    """Validation loss every this many steps (and at the end); the best state is kept."""
    max_label_tokens: int = 16
    """Greedy decoding budget for a generated label (stops at a quote or end-of-turn)."""
    retrieval_scorer: Literal["auto", "exact", "embedding", "lexical"] = "auto"
    """Ranking of topics against a label: exact matches first, then the packaged sentence embedder
    (auto = embedding when installed, else lexical character n-grams)."""
    train_recall_sample: int = 60
    """Training topics (not validation) whose labels are generated to measure train recall; 0 = none."""
    scale_recall: bool = True
    """Also generate held-out labels at every identity scale (recall against the scale, for the sweep plot)."""
    embed_control_epochs: int = 1
    """Epochs of the embedding-vector positive control."""
    logit_lens_top: int = 50
    """Top tokens of the logit-lens readout scanned for its ten distinct topic guesses."""
    bootstrap: int = 1000
    """Bootstrap resamples for the recall confidence intervals."""
    prefix_cache: bool = True
    """Reuse the KV of the constant template prefix in training and decoding."""
    compute_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Autocast dtype of the frozen model's matmuls while adapters train, validate and decode labels (vector
    extraction, the adapters, losses and the prefix-cache check stay float32). auto: bfloat16 where it runs
    natively (CUDA, CPUs with AVX512-BF16/AMX; about 2x faster here), else float32."""
    extract_batch: int = 32
    """Prompts per forward when extracting topic vectors."""
    sae_branch: Literal["off", "labels", "token_labels"] = "off"
    """SAE-feature labels: off; labels (from sae_labels_file); token_labels (offline stand-in labels)."""
    sae_labels_file: str | None = None
    """JSONL of {latent, label} rows; switches the SAE branch on (sae_branch=labels)."""
    sae_max_latents: int = 20
    """Latents scored by generation in the SAE branch."""
    sae_variants: tuple[str, ...] = ("identity", "scalar_affine")
    """Adapters scored in the SAE branch (each must be trained)."""
    sae_scales: tuple[float, ...] = (0.5, 0.8, 1.3, 2.1, 3.4, 5.5)
    """Relative scales of the normalised decoder row (times the adapter's own scale)."""
    sae_trials: int = 3
    """Conversations written per generated label (10 on GPU)."""
    sae_temperature: float = 0.7
    """Sampling temperature of SAE-branch labels and conversations."""
    sae: str | None = None
    """An `interp.load_sae` spec of an SAE on resid_post of the adapter's layer (a SAELens directory, a run directory
    holding an SAE such as atoms', saelens:<release>/<sae_id> online); None = the toolkit's cached SAE (trained once
    if missing)."""
    sae_tokens: int = 20000
    """Built-in corpus tokens encoded to find top-activating tokens (and to train the SAE when none is cached)."""
    sae_steps: int = 600
    """Training steps of the toolkit SAE (jumprelu, 4 x d_model latents, L0 16) when none is cached."""

    SIZE_PRESETS = {
        "micro": {
            "topic_cap": 50,
            "variants": ("identity", "scalar_affine"),
            "controls": (),
            "layer_sweep": (),
            "identity_scales": (2.0,),
            "epochs": 1,
            "eval_every": 10,
            "max_label_tokens": 4,
            "train_recall_sample": 0,
            "scale_recall": False,
            "logit_lens_top": 10,
            "bootstrap": 100,
        },
        "quick": {
            "topic_cap": 200,
            "variants": ("identity", "scalar_affine"),
            "controls": (),
            "layer_sweep": (),
            "identity_scales": (1.0, 2.0, 4.0, 8.0),
            "epochs": 1,
            "eval_every": 3,
            "max_label_tokens": 8,
            "train_recall_sample": 0,
            "scale_recall": False,
            "bootstrap": 200,
        },
    }

    @property
    def sae_on(self) -> bool:
        return self.sae_branch != "off" or self.sae_labels_file is not None

    def validate(self) -> None:
        super().validate()
        check_range("heldout_frac", self.heldout_frac, 0.0, 0.5, lo_open=True)
        check_range("val_frac", self.val_frac, 0.0, 0.5, lo_open=True)
        if self.topic_cap is not None:
            check_range("topic_cap", self.topic_cap, 20, None)
        for v in self.variants:
            if v not in VARIANTS:
                raise ConfigError("variants", v, "each one of " + ", ".join(VARIANTS))
        if not self.variants:
            raise ConfigError("variants", self.variants, "at least one variant")
        for c in self.controls:
            if c not in CONTROLS:
                raise ConfigError("controls", c, "each one of " + ", ".join(CONTROLS))
        if not self.identity_scales or any(s <= 0 for s in self.identity_scales):
            raise ConfigError("identity_scales", self.identity_scales, "one or more positive multiples")
        if self.init_scale is not None:
            check_range("init_scale", self.init_scale, 0.0, None, lo_open=True)
        check_range("low_rank_rank", self.low_rank_rank, 1, 4096)
        check_range("low_rank_init", self.low_rank_init, 0.0, None)
        check_range("lr", self.lr, 0.0, 10.0, lo_open=True)
        check_range("weight_decay", self.weight_decay, 0.0, 1.0)
        check_range("epochs", self.epochs, 1, 100)
        check_range("batch_size", self.batch_size, 1, 4096)
        check_range("clip", self.clip, 0.0, None, lo_open=True)
        check_range("warmup", self.warmup, 0, 10_000)
        check_range("loss_clamp", self.loss_clamp, 0.0, None, lo_open=True)
        check_range("eval_every", self.eval_every, 1, 100_000)
        check_range("max_label_tokens", self.max_label_tokens, 1, 256)
        check_range("train_recall_sample", self.train_recall_sample, 0, 100_000)
        check_range("embed_control_epochs", self.embed_control_epochs, 1, 100)
        check_range("logit_lens_top", self.logit_lens_top, 10, 10_000)
        check_range("bootstrap", self.bootstrap, 10, 100_000)
        check_range("extract_batch", self.extract_batch, 1, 4096)
        check_range("sae_max_latents", self.sae_max_latents, 1, 10_000)
        check_range("sae_trials", self.sae_trials, 1, 100)
        check_range("sae_temperature", self.sae_temperature, 0.0, 5.0, lo_open=True)
        check_range("sae_tokens", self.sae_tokens, 1000, 10_000_000)
        check_range("sae_steps", self.sae_steps, 1, 1_000_000)
        if not self.sae_scales or any(s <= 0 for s in self.sae_scales):
            raise ConfigError("sae_scales", self.sae_scales, "one or more positive relative scales")
        if self.sae is not None:
            from interp.sae_source import resolve_sae_spec

            resolve_sae_spec(self.sae, "sae")
        if self.sae_on:
            missing = [v for v in self.sae_variants if v not in self.variants]
            if missing:
                raise ConfigError("sae_variants", self.sae_variants, f"variants that are trained ({missing} are not)")
            if self.sae_branch == "labels" and self.sae_labels_file is None:
                raise ConfigError("sae_labels_file", None, "a JSONL of {latent, label} rows when sae_branch=labels")
        for x in self.layer_sweep:
            if x < 0:
                raise ConfigError("layer_sweep", x, "fractions in (0, 1) or layer indices >= 1")

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        if self.topics_file is not None:
            rows = read_jsonl(self.topics_file, field="topics_file", required=("topic",), unique="topic",
                              duplicates="first", fold_case=True)
            distinct = {str(r["topic"]).strip().lower() for r in rows} - {""}
            if len(distinct) < 20:
                raise ConfigError("topics_file", self.topics_file,
                                  f"at least 20 distinct topics (found {len(distinct)})")
        if self.sae_labels_file is not None:
            read_jsonl(self.sae_labels_file, field="sae_labels_file", required=("latent", "label"), unique="latent",
                       duplicates="last")

    LAYER_FIELDS = ("layer",)

    def validate_for_model(self, n_layers: int | None) -> None:
        if not isinstance(self.layer, str):  # "@0.8" is resolved by at_depth once the depth is known
            self.check_layer("layer", self.layer, n_layers)
        if n_layers is not None:
            for layer in sweep_layers(self.layer_sweep, n_layers):
                self.check_layer("layer_sweep", layer, n_layers)

    def resolved_layer(self, n_layers: int) -> int:
        if self.layer is None:
            return min(n_layers - 1, round(0.8 * n_layers))
        return self.layer % n_layers


def sweep_layers(values: tuple[float, ...], n_layers: int) -> list[int]:
    """Layer indices of `layer_sweep` (a value < 1 is a fraction of n_layers), sorted and unique."""
    out = set()
    for x in values:
        out.add(min(n_layers - 1, round(x * n_layers)) if x < 1 else int(x))
    return sorted(out)

