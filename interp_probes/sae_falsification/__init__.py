"""Falsifying SAE "reasoning" features: contrastive detection, token injection against a frequency-matched
random-token control, LLM-guided counterexamples, and a steering mini-study.

Method: ../shared/methods/sae_falsification.md (paper arXiv 2601.05679, code GeorgeMLP/reasoning-probing).
This module is torch-free: the CLI validates a config before any heavy import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

from interp.config import ModelLimits, NonNegativeInt, PositiveInt, ProbeConfig, Range, SAESource, Subset
from interp.data import check_source
from interp.errors import ConfigError
from interp.registry import probe

#: Every injection strategy of the method (Step 4); `injection_strategies` selects any subset.
STRATEGIES = ("prepend", "intersperse", "replace", "inject_bigram", "inject_trigram", "bigram_before", "trigram",
              "comma_list")
GENERATORS = ("local", "openai", "template")


@probe("sae_falsification", run="interp_probes.sae_falsification.probe:run",
       page="interp_probes.sae_falsification.page", figures="interp_probes.sae_falsification.figures")
@dataclass(frozen=True)
class SaeFalsificationConfig(ProbeConfig):
    """SAE "reasoning" features: contrastive detection, token injection vs control, counterexamples, steering.

    When an SAE feature fires more on reasoning text than on other text, does it encode reasoning, or only surface cues
    that co-occur with reasoning (tokens, n-grams, style)?
    """

    sae: SAESource = field(default_factory=lambda: SAESource(hook="resid_post@0.3", d_sae=4608,
                                                             train_tokens=300_000))
    """The SAE: "train" is a TopK SAE trained by the toolkit (cached) on sae.train_tokens tokens, 30 % from a disjoint
    split of both corpora, 70 % general corpus; its steps are sae.train_tokens x sae_epochs / sae_batch."""
    sae_k: PositiveInt = 32
    """Active latents per token of the trained TopK SAE."""
    sae_epochs: PositiveInt = 2
    """Passes over the training tokens (steps = tokens x epochs / batch)."""
    sae_lr: Annotated[float, Range(0, 1, lo_open=True)] = 2e-4
    """Adam learning rate of the SAE (constant)."""
    sae_batch: PositiveInt = 1024
    """Tokens per SAE training step."""
    sae_aux_k: NonNegativeInt = 256
    """AuxK: the top this-many dead latents reconstruct the residual error (weight `sae_aux_coeff`; 0: off)."""
    sae_aux_coeff: Annotated[float, Range(0)] = 1 / 32
    """Weight of the auxiliary dead-latent loss."""
    sae_aux_dead_tokens: PositiveInt = 100_000
    """Training tokens without firing after which a latent counts as dead (AuxK)."""
    quality_tokens: PositiveInt = 8192
    """Held-out tokens (positions >= 1) for the SAE quality gates (explained variance, CE recovered, dead)."""
    corpus: str = "builtin:all"
    """General text (any interp.data source) for the SAE training mix and part of the non-reasoning corpus."""
    reasoning_source: Literal["template", "model"] = "template"
    """Reasoning traces: the seeded templates, or the model's own step-by-step solutions of the problems."""
    n_reasoning: Annotated[int, Range(2)] = 500
    """Reasoning samples of the detection corpus."""
    n_nonreasoning: Annotated[int, Range(2)] = 500
    """Non-reasoning samples of the detection corpus."""
    seq_len: Annotated[int, Range(16, 512)] = 64
    """Tokens per sample (texts are truncated; injected texts stay within it)."""
    batch_size: PositiveInt = 32
    """Sequences per forward pass."""
    min_auc: Annotated[float, Range(0, 1)] = 0.6
    """Detection filter: ROC-AUC of reasoning vs non-reasoning sample maxima."""
    max_p_bonf: Annotated[float, Range(0, 1)] = 0.01
    """Detection filter: Bonferroni-corrected two-sided Mann-Whitney p (over d_sae)."""
    min_d: float = 0.3
    """Detection filter: Cohen's d (pooled SD)."""
    top_k_features: PositiveInt = 100
    """Candidates kept after ranking (token analysis, top contexts)."""
    ranking: Literal["spec", "composite"] = "spec"
    """Order of candidates: (min(d,3), AUC, d, id) as the spec, or the documentation's weighted composite."""
    n_top_tokens: Annotated[int, Range(1, 50)] = 10
    """Top tokens T_f per feature (by mean activation); at most 50, as the control excludes the top 50."""
    min_token_count: PositiveInt = 5
    """Occurrences a token needs to enter T_f."""
    conc_threshold: Annotated[float, Range(0, 1)] = 0.5
    """Token concentration above which a feature counts as token-dependent."""
    injection_strategies: Annotated[tuple[str, ...], Subset(STRATEGIES)] = ("prepend", "intersperse", "bigram_before",
                                                                          "trigram")
    """Injection strategies run (any subset of the eight); results are stored per strategy."""
    injection_payload: Literal["reference", "top"] = "reference"
    """What the token strategies inject: reference (the released code: a fresh seeded 3 of the top-10 tokens per
    text, and 2 of the top bigrams at word starts for inject_bigram) or top (always the top 3; one bigram at
    positions 1-2). The other rule also runs as the `alt` arm, so frac_token_driven is reported both ways."""
    injection_stats: Literal["reference", "welch"] = "reference"
    """Injection d and p: reference (Cohen's d with ddof 0, Student's t, as the released code) or welch (ddof 1,
    Welch's t, the project's first choice)."""
    n_injection_texts: PositiveInt = 40
    """Held-out non-reasoning base texts per feature and strategy."""
    n_injection_features: PositiveInt = 16
    """Analysed features: the first candidates in the ranking."""
    control_pool_min: PositiveInt = 20
    """Smallest control pool; the +-0.1 log10-frequency window widens in 0.1 steps until it is reached."""
    control_max_reasoning_share: Annotated[float, Range(0, 1, lo_open=True)] = 0.7
    """Control pool excludes tokens that occur in reasoning text at least this share of the time."""
    generator: Literal["local", "openai", "template"] = "local"
    """Counterexample generator: the embedded instruct model, an OpenAI-compatible endpoint, or templates."""
    generator_url: str | None = None
    """Base URL of an OpenAI-compatible API (POST {url}/chat/completions); generator=openai only."""
    generator_model: str | None = None
    """Model name sent to the endpoint."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the endpoint's API key (may be unset for keyless local servers)."""
    use_judge: bool = True
    """With generator=openai, also ask the endpoint the validity and verdict questions (a judge)."""
    loop_max_features: NonNegativeInt = 3
    """Features the counterexample loop analyses (context-dependent ones first, in rank order)."""
    loop_max_iters: PositiveInt = 3
    """Iterations per feature at most."""
    n_fp: PositiveInt = 3
    """False-positive candidates asked for per iteration."""
    n_fn: PositiveInt = 3
    """False-negative candidates asked for per iteration."""
    loop_stop_valid: PositiveInt = 3
    """A feature stops once it has this many valid FP and this many valid FN."""
    fp_ratio: Annotated[float, Range(0, lo_open=True)] = 0.5
    """A valid FP activates above fp_ratio x the reference max."""
    fn_ratio: Annotated[float, Range(0, 1, lo_open=True)] = 0.05
    """A valid FN stays below fn_ratio x the reference max."""
    temperature_gen: Annotated[float, Range(0, 2)] = 0.8
    """Sampling temperature of candidate generation."""
    temperature_judge: Annotated[float, Range(0, 2)] = 0.3
    """Temperature of hypothesis, judge and verdict requests."""
    template_fallback: bool = True
    """Add template candidates for a kind when the generator produced no valid one in an iteration."""
    gen_max_tokens: PositiveInt = 96
    """New tokens per generated candidate (local generator; endpoints get 4x)."""
    steer_features: NonNegativeInt = 3
    """Candidates (top by d) steered."""
    steer_gammas: tuple[Annotated[float, Range(-100, 100)], ...] = (0.0, 2.0)
    """Steering scales gamma (x' = x + gamma f_max W_dec[i]); gamma 0 runs once for all features."""
    n_steer_problems: PositiveInt = 60
    """Arithmetic problems decoded per condition."""
    steer_max_new_tokens: PositiveInt = 32
    """New tokens per steered answer."""
    n_top_contexts: PositiveInt = 8
    """Top-activating contexts stored per candidate and corpus (feature pages)."""

    SIZE_PRESETS = {
        "micro": {
            "sae.d_sae": 1152, "sae_k": 16, "sae.train_tokens": 2048, "sae.cache": False, "quality_tokens": 512,
            "n_reasoning": 16, "n_nonreasoning": 16, "seq_len": 32, "top_k_features": 10,
            "n_injection_features": 2, "n_injection_texts": 4, "injection_strategies": ["prepend"],
            "generator": "template", "loop_max_features": 1, "loop_max_iters": 1,
            "steer_features": 1, "n_steer_problems": 4, "steer_max_new_tokens": 16, "n_top_contexts": 4,
        },
        "quick": {
            "sae.d_sae": 2304, "sae_k": 32, "sae.train_tokens": 20_000, "quality_tokens": 1024,
            "n_reasoning": 80, "n_nonreasoning": 80, "n_injection_features": 6, "n_injection_texts": 12,
            "injection_strategies": ["prepend", "bigram_before"], "generator": "template",
            "loop_max_features": 1, "loop_max_iters": 1, "steer_features": 1, "n_steer_problems": 8,
        },
    }

    def validate(self) -> None:
        super().validate()
        if self.sae_k > self.sae.d_sae:
            raise ConfigError("sae_k", self.sae_k, f"at most sae.d_sae={self.sae.d_sae}")
        if self.generator == "openai" and not (self.generator_url or "").strip():
            raise ConfigError("generator_url", self.generator_url, "the base URL of an OpenAI-compatible API "
                              "(e.g. http://127.0.0.1:8000/v1) when generator=openai")
        if self.generator_url and not self.generator_url.startswith(("http://", "https://")):
            raise ConfigError("generator_url", self.generator_url, "an http:// or https:// URL")
        if not self.steer_gammas:
            raise ConfigError("steer_gammas", list(self.steer_gammas), "a non-empty list of scales in [-100, 100]")

    SITE_FIELDS = ("sae.hook",)
    CONTEXT_FIELDS = ("seq_len",)

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        need = math.ceil(0.7 * max(self.quality_tokens, self.sae.train_tokens if self.sae.source == "train" else 0))
        check_source(self.corpus, field="corpus", seed=self.seed, min_tokens=need, count_tokens=limits.count_tokens,
                     needed_for="70 % of quality_tokens and, with sae.source=train, of sae.train_tokens")

    def validate_for_model(self, n_layers: int | None) -> None:
        if self.sae.source == "train":
            self.check_site("sae.hook", self.sae.hook, n_layers)
