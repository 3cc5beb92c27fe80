"""Self-interpretation adapters: a tiny adapter lets a frozen model describe its own vectors.

Method: ../shared/methods/self_interp.md (arXiv 2602.10352, Pepper et al.). Torch-free: the
config is validated before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from interp.config import ModelLimits, ProbeConfig, Range, SAESource, Subset
from interp.data import read_jsonl
from interp.errors import ConfigError
from interp.registry import probe

VARIANTS = ("identity", "scale_only", "bias_only", "scalar_affine", "low_rank", "full_rank", "low_rank_only")
CONTROLS = ("shuffled", "embed")
SCORERS = ("auto", "exact", "embedding", "lexical")


@probe("self_interp", run="interp_probes.self_interp.probe:run",
       page="interp_probes.self_interp.page", figures="interp_probes.self_interp.figures")
@dataclass(frozen=True)
class SelfInterpConfig(ProbeConfig):
    """Train adapters that let a frozen model describe its own vectors in words (self-interpretation).

    Can a frozen model say in words what one of its internal vectors means, once a tiny adapter (as small as d + 1
    numbers) maps the vector into its input-embedding space, and how much of that readout is description rather than the
    vector simply echoing its topic's token?
    """

    layer: int | str | None = None
    """Residual after block `layer` (resid_post) at the last token: an index (negative from the last layer), a depth
    fraction ("@0.8"), or None = round(0.8 * n_layers) (24 on SmolLM2)."""
    layer_sweep: tuple[Annotated[float, Range(0)], ...] = (0.4, 0.6, 0.8, 0.9)
    """Layers for recall by layer (identity, scalar_affine, logit lens): a value < 1 is a fraction of n_layers,
    else a layer index; () skips the sweep. (0.4, 0.6, 0.8, 0.9) is [12, 18, 24, 27] on SmolLM2."""
    topics_file: str | None = None
    """JSONL of {topic, category, aliases} rows replacing the built-in 500-topic list (a topic repeated, in any case,
    is used once, with a warning)."""
    heldout_frac: Annotated[float, Range(0.0, 0.5, lo_open=True)] = 0.25
    """Within each category, the first ceil(frac * n_c) kept topics (in shuffled order) are held out (100 of the
    default 400)."""
    topic_cap: Annotated[int, Range(20)] | None = 400
    """Keep floor(cap * n_c / N) topics per category from the same shuffle (CPU budget: 400 of the built-in 500,
    16 per category); None keeps all."""
    val_frac: Annotated[float, Range(0.0, 0.5, lo_open=True)] = 0.1
    """Share of the training topics used for validation (identity scale and early model choice)."""
    placeholder: str | None = None
    """Placeholder token; None = the first single token of a preference list absent from the template."""
    template_system: Literal["none", "default"] = "none"
    """System turn of the injection template: none (the reference's hand-written template has none) or default
    (the chat template's default system prompt, which SmolLM2 inserts). The topic prompt keeps the default, as the
    reference's extraction renders it with the chat template."""
    variants: Annotated[tuple[str, ...], Subset(VARIANTS, repeats=True)] = ("identity", "scale_only", "bias_only",
                                                                           "scalar_affine", "low_rank", "full_rank")
    """Adapters to train and evaluate (identity, scale_only, bias_only, scalar_affine, low_rank, full_rank,
    low_rank_only)."""
    controls: Annotated[tuple[str, ...], Subset(CONTROLS, empty=True, repeats=True)] = CONTROLS
    """shuffled (scalar_affine on permuted pairs) and embed (scalar_affine on token-embedding vectors)."""
    low_rank_rank: Annotated[int, Range(1, 4096)] = 8
    """Rank r of the low-rank term U (V^T v)."""
    low_rank_init: Annotated[float, Range(0.0)] = 0.01
    """U and V are drawn with std init_scale * low_rank_init / sqrt(r) (the reference's, with init_scale the initial
    exp(s) in absolute units)."""
    identity_scales: tuple[Annotated[float, Range(0, lo_open=True)], ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
    """Identity-injection scales, in multiples of the median token-embedding norm; the best by validation loss is s*."""
    init_scale: Annotated[float, Range(0.0, lo_open=True)] | None = 2.0
    """Initial exp(s) of trained adapters, in multiples of the median token-embedding norm; None = s*."""
    lr: Annotated[float, Range(0.0, 10.0, lo_open=True)] = 1e-2
    """AdamW learning rate."""
    weight_decay: Annotated[float, Range(0.0, 1.0)] = 0.01
    """AdamW weight decay of bias, U, V and A (none on log_scale, as in the reference)."""
    epochs: Annotated[int, Range(1, 100)] = 2
    """Passes over the training pairs."""
    batch_size: Annotated[int, Range(1, 4096)] = 16
    """Pairs per optimiser step (80 on GPU in the paper)."""
    clip: Annotated[float, Range(0.0, lo_open=True)] = 0.5
    """Gradient-norm clip."""
    warmup: Annotated[int, Range(0, 10_000)] = 10
    """Linear warmup steps (from 1e-6 x lr, as the reference's LinearLR) before the cosine decay; a run of at most
    `warmup` steps warms up over its first third instead."""
    loss_clamp: Annotated[float, Range(0.0, lo_open=True)] = 100.0
    """Each target token's cross-entropy is clamped at this value."""
    eval_every: Annotated[int, Range(1, 100_000)] = 5
    """Validation loss every this many steps (and at the end); the best state is kept."""
    max_label_tokens: Annotated[int, Range(1, 256)] = 16
    """Greedy decoding budget for a generated label (stops at a quote or end-of-turn)."""
    retrieval_scorer: Literal["auto", "exact", "embedding", "lexical"] = "auto"
    """Ranking of topics against a label: exact matches first, then the packaged sentence embedder
    (auto = embedding when installed, else lexical character n-grams)."""
    train_recall_sample: Annotated[int, Range(0, 100_000)] = 60
    """Training topics (not validation) whose labels are generated to measure train recall; 0 = none."""
    scale_recall: bool = True
    """Also generate held-out labels at every identity scale (recall against the scale, for the sweep plot)."""
    embed_control_epochs: Annotated[int, Range(1, 100)] = 1
    """Epochs of the embedding-vector positive control."""
    logit_lens_top: Annotated[int, Range(10, 10_000)] = 50
    """Top tokens of the logit-lens readout scanned for its ten distinct topic guesses."""
    bootstrap: Annotated[int, Range(10, 100_000)] = 1000
    """Bootstrap resamples for the recall confidence intervals."""
    prefix_cache: bool = True
    """Reuse the KV of the constant template prefix in training and decoding."""
    compute_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Autocast dtype of the frozen model's matmuls while adapters train, validate and decode labels (vector
    extraction, the adapters, losses and the prefix-cache check stay float32). auto: bfloat16 where it runs
    natively (CUDA, CPUs with AVX512-BF16/AMX; about 2x faster here), else float32."""
    extract_batch: Annotated[int, Range(1, 4096)] = 32
    """Prompts per forward when extracting topic vectors."""
    sae_branch: Literal["off", "labels", "token_labels"] = "off"
    """SAE-feature labels: off; labels (from sae_labels_file); token_labels (offline stand-in labels)."""
    sae_labels_file: str | None = None
    """JSONL of {latent, label} rows; switches the SAE branch on (sae_branch=labels)."""
    sae_max_latents: Annotated[int, Range(1, 10_000)] = 20
    """Latents scored by generation in the SAE branch."""
    sae_variants: tuple[str, ...] = ("identity", "scalar_affine")
    """Adapters scored in the SAE branch (each must be trained)."""
    sae_scales: tuple[Annotated[float, Range(0, lo_open=True)], ...] = (0.5, 0.8, 1.3, 2.1, 3.4, 5.5)
    """Relative scales of the normalised decoder row (times the adapter's own scale)."""
    sae_trials: Annotated[int, Range(1, 100)] = 3
    """Conversations written per generated label (10 on GPU)."""
    sae_temperature: Annotated[float, Range(0.0, 5.0, lo_open=True)] = 0.7
    """Sampling temperature of SAE-branch labels and conversations."""
    sae: SAESource = field(default_factory=lambda: SAESource(cache=None, steps=600))
    """The SAE on resid_post of the adapter's layer (so sae.hook is null): "train" is the toolkit's cached SAE (trained
    once if missing: jumprelu, 4 x d_model latents, L0 16, on sae_tokens; always cached, so sae.cache is null)."""
    sae_tokens: Annotated[int, Range(1000, 10_000_000)] = 20000
    """Built-in corpus tokens encoded to find top-activating tokens (and to train the SAE when none is cached)."""

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
        if not self.identity_scales:
            raise ConfigError("identity_scales", self.identity_scales, "one or more positive multiples")
        if not self.sae_scales:
            raise ConfigError("sae_scales", self.sae_scales, "one or more positive relative scales")
        if self.sae_on:
            missing = [v for v in self.sae_variants if v not in self.variants]
            if missing:
                raise ConfigError("sae_variants", self.sae_variants, f"variants that are trained ({missing} are not)")
            if self.sae_branch == "labels" and self.sae_labels_file is None:
                raise ConfigError("sae_labels_file", None, "a JSONL of {latent, label} rows when sae_branch=labels")

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

