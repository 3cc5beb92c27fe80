"""jlens: the Jacobian lens, the workspace band it reads, and interventions along its directions.

Method: Gurnee, Sofroniew, Lindsey et al. 2026, "Verbalizable Representations Form a Global Workspace in Language
Models", https://transformer-circuits.pub/2026/workspace (the project's words: shared/methods/jlens.md). The lens
itself (fitting, file format, cache) lives in `interp.lens`; this probe fits or loads one, compares it with the logit
and tuned lenses on held-out text and on two-hop prompts whose bridge entity is known, finds the workspace band from
the paper's four per-layer statistics, and intervenes in the real model along J-lens directions against controls of
the same norm and count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from interp.config import ModelLimits, PositiveInt, ProbeConfig, Range
from interp.errors import ConfigError
from interp.registry import probe


@probe("jlens", run="interp_probes.jlens.probe:run",
       page="interp_probes.jlens.page", figures="interp_probes.jlens.figures")
@dataclass(frozen=True)
class JLensConfig(ProbeConfig):
    """Jacobian lens against the logit and tuned lenses: quality, the workspace band, and interventions.

    Read through the model's average Jacobian to its last layer, do the middle layers verbalize the intermediate
    answer of a two-hop question (the bridge entity) better than the logit and tuned lenses, is there a band of
    layers where readouts are verbalizable, and do its directions steer, swap and ablate what the model says?
    """

    lens: str = "fit"
    """"fit": fit the Jacobian lens here on the built-in wiki-like text (cached by model, data and settings); a lens
    file or directory in the reference format (lens.pt); or jlens:<hub repo>/<file> (downloads: INTERP_ONLINE=1)."""
    n_fit_prompts: Annotated[int, Range(1, 100_000)] = 16
    """Fitting prompts (wiki-like paragraphs of the built-in corpus, chosen by the seed). The fit costs about
    d_model x tokens x 2 x parameters FLOPs (a backward pass per output dimension): 16 x 64 tokens on smollm2-135m
    is ~160 TFLOP, 22 CPU minutes on the 2-core machine here and, by that count, seconds on a GPU (not measured
    yet); published lenses used 100-1000 prompts of 128 tokens."""
    fit_seq_len: Annotated[int, Range(4, 8192)] = 64
    """Tokens per fitting prompt at most (the reference's max_seq_len), BOS first where the tokenizer adds one."""
    skip_first: Annotated[int, Range(0, 8192)] = 16
    """First valid source/target position of the fit (earlier ones are attention sinks)."""
    target_layer: int | None = None
    """The layer the lens transports into (None: the last block's output, before the final norm)."""
    tuned_tokens: Annotated[int, Range(16, 10_000_000)] = 16_384
    """Tokens the tuned lens (the baseline) trains on (from the same corpus as the fit, positions >= 1)."""
    tuned_steps: Annotated[int, Range(1, 1_000_000)] = 100
    """Optimiser steps of the tuned lens."""
    tuned_tokens_per_step: Annotated[int, Range(1, 1_000_000)] = 64
    """Tokens per tuned-lens step (each step unembeds every layer at each of them: the CPU's cost)."""
    n_eval_texts: PositiveInt = 24
    """Held-out wiki-like texts for next-token KL, top-k accuracy and the workspace statistics."""
    eval_seq_len: Annotated[int, Range(8, 8192)] = 64
    """Tokens per held-out text."""
    top_k: Annotated[int, Range(1, 100)] = 10
    """k of top-k accuracy and of bridge-entity pass@k."""
    relations: tuple[Literal["capital", "language"], ...] = ("capital", "language")
    """Second hops of the two-hop prompts (the landmark's country's capital and/or language)."""
    max_facts: PositiveInt = 200
    """Landmarks taken from the built-in facts (facts.json) at most, in file order."""
    keep_rank: Annotated[int, Range(1, 100)] = 1
    """A one-hop fact counts as known when its answer's first token ranks within this many of the model's output
    (1: the greedy answer)."""
    max_intervene: PositiveInt = 32
    """Kept two-hop prompts the interventions run on at most."""
    layer: int | str | None = None
    """Layer of the interventions: None = the middle of the workspace band (the middle layer when no band); an index
    or a depth such as "@0.5"."""
    steer_scale: Annotated[float, Range(0.0, 100.0)] = 1.0
    """Steering vector norm as a multiple of the mean residual norm at the layer."""
    n_steer_tokens: PositiveInt = 8
    """Target tokens steered towards (the kept prompts' capitals and languages, chosen by the seed)."""
    n_ablate: PositiveInt = 8
    """Directions ablated per prompt (the lens's top tokens at the last position), and per control."""
    n_boot: Annotated[int, Range(100, 100_000)] = 1000
    """Bootstrap resamples of the intervals (95 %) over prompts."""
    cache: bool = True
    """Reuse a fitted Jacobian lens and tuned lens from the lens cache."""

    SIZE_PRESETS = {
        "micro": {"n_fit_prompts": 1, "fit_seq_len": 20, "tuned_tokens": 256, "tuned_steps": 4,
                  "tuned_tokens_per_step": 16, "n_eval_texts": 2,
                  "eval_seq_len": 20, "max_facts": 6, "relations": ("capital",), "n_steer_tokens": 2, "n_ablate": 4,
                  "max_intervene": 4, "n_boot": 200},
        "quick": {"n_fit_prompts": 2, "fit_seq_len": 32, "tuned_tokens": 2048, "tuned_steps": 30,
                  "tuned_tokens_per_step": 32,
                  "n_eval_texts": 4, "eval_seq_len": 40, "max_facts": 24, "n_steer_tokens": 4, "max_intervene": 12,
                  "n_boot": 500},
    }
    CONTEXT_FIELDS = ("fit_seq_len", "eval_seq_len")
    LAYER_FIELDS = ("layer",)
    REQUIRES = ("resid_post", "edit:resid_post", "final")

    def validate(self) -> None:
        super().validate()
        if self.skip_first + 2 > self.fit_seq_len:
            raise ConfigError("skip_first", self.skip_first, f"at most fit_seq_len - 2 = {self.fit_seq_len - 2}, "
                              "so a fitting prompt has a valid position")
        if not self.relations:
            raise ConfigError("relations", self.relations, 'a non-empty tuple of "capital", "language"')
        if self.lens != "fit":
            from interp.lens import resolve_lens_spec

            resolve_lens_spec(self.lens, "lens")  # one line for a missing file or an offline download

    def validate_for_model(self, n_layers: int | None) -> None:
        super().validate_for_model(n_layers)
        if self.target_layer is not None:
            if n_layers is not None and not 1 <= self.target_layer < n_layers:
                raise ConfigError("target_layer", self.target_layer, f"a layer in 1..{n_layers - 1} of {self.model}")
            if self.target_layer < 1:
                raise ConfigError("target_layer", self.target_layer, "a layer >= 1 (a later layer than a source)")
        if isinstance(self.layer, int):
            self.check_layer("layer", self.layer, n_layers)

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
