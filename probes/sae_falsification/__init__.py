"""Falsifying SAE "reasoning" features: contrastive detection, token injection against a frequency-matched
random-token control, LLM-guided counterexamples, and a steering mini-study.

Method: ../shared/methods/sae_falsification.md (paper arXiv 2601.05679, code GeorgeMLP/reasoning-probing).
This module is torch-free: the CLI validates a config before any heavy import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from interp.config import ModelLimits, ProbeConfig, check_range
from interp.data import check_source
from interp.errors import ConfigError
from interp.registry import probe

#: Every injection strategy of the method (Step 4); `injection_strategies` selects any subset.
STRATEGIES = ("prepend", "intersperse", "replace", "inject_bigram", "inject_trigram", "bigram_before", "trigram",
              "comma_list")
GENERATORS = ("local", "openai", "template")


@probe("sae_falsification", run="probes.sae_falsification.probe:run", page="app.views.sae_falsification")
@dataclass(frozen=True)
class SaeFalsificationConfig(ProbeConfig):
    """SAE "reasoning" features: contrastive detection, token injection vs control, counterexamples, steering."""

    sae: str = "train"
    """"train" (a TopK SAE trained by the toolkit on the embedded model, cached) or any `interp.load_sae` spec: a
    SAELens directory, a run directory holding an SAE (atoms'), saelens:<release>/<sae_id> (online)."""
    sae_hook: str = "resid_post@0.3"
    """Site of the SAE to train (TransformerLens hook name, site name or depth fraction: the default is resid_post
    at 30 % of depth, layer 9 of SmolLM2's 30); a loaded SAE always uses its own config's hook."""
    sae_d_sae: int = 4608
    """Latents of the trained TopK SAE."""
    sae_k: int = 32
    """Active latents per token of the trained TopK SAE."""
    sae_train_tokens: int = 300_000
    """Training tokens (positions >= 1 only): 30 % from a disjoint split of both corpora, 70 % general corpus."""
    sae_epochs: int = 2
    """Passes over the training tokens (steps = tokens x epochs / batch)."""
    sae_lr: float = 2e-4
    """Adam learning rate of the SAE (constant)."""
    sae_batch: int = 1024
    """Tokens per SAE training step."""
    sae_aux_k: int = 256
    """AuxK: the top this-many dead latents reconstruct the residual error (weight `sae_aux_coeff`; 0: off)."""
    sae_aux_coeff: float = 1 / 32
    """Weight of the auxiliary dead-latent loss."""
    sae_aux_dead_tokens: int = 100_000
    """Training tokens without firing after which a latent counts as dead (AuxK)."""
    sae_cache: bool = True
    """Reuse a trained SAE from the content-addressed cache (model, hook, training config and data)."""
    quality_tokens: int = 8192
    """Held-out tokens (positions >= 1) for the SAE quality gates (explained variance, CE recovered, dead)."""
    corpus: str = "builtin:all"
    """General text (any interp.data source) for the SAE training mix and part of the non-reasoning corpus."""
    reasoning_source: Literal["template", "model"] = "template"
    """Reasoning traces: the seeded templates, or the model's own step-by-step solutions of the problems."""
    n_reasoning: int = 500
    """Reasoning samples of the detection corpus."""
    n_nonreasoning: int = 500
    """Non-reasoning samples of the detection corpus."""
    seq_len: int = 64
    """Tokens per sample (texts are truncated; injected texts stay within it)."""
    batch_size: int = 32
    """Sequences per forward pass."""
    min_auc: float = 0.6
    """Detection filter: ROC-AUC of reasoning vs non-reasoning sample maxima."""
    max_p_bonf: float = 0.01
    """Detection filter: Bonferroni-corrected two-sided Mann-Whitney p (over d_sae)."""
    min_d: float = 0.3
    """Detection filter: Cohen's d (pooled SD)."""
    top_k_features: int = 100
    """Candidates kept after ranking (token analysis, top contexts)."""
    ranking: Literal["spec", "composite"] = "spec"
    """Order of candidates: (min(d,3), AUC, d, id) as the spec, or the documentation's weighted composite."""
    n_top_tokens: int = 10
    """Top tokens T_f per feature (by mean activation)."""
    min_token_count: int = 5
    """Occurrences a token needs to enter T_f."""
    conc_threshold: float = 0.5
    """Token concentration above which a feature counts as token-dependent."""
    injection_strategies: tuple[str, ...] = ("prepend", "intersperse", "bigram_before", "trigram")
    """Injection strategies run (any subset of the eight); results are stored per strategy."""
    injection_payload: Literal["reference", "top"] = "reference"
    """What the token strategies inject: reference (the released code: a fresh seeded 3 of the top-10 tokens per
    text, and 2 of the top bigrams at word starts for inject_bigram) or top (always the top 3; one bigram at
    positions 1-2). The other rule also runs as the `alt` arm, so frac_token_driven is reported both ways."""
    injection_stats: Literal["reference", "welch"] = "reference"
    """Injection d and p: reference (Cohen's d with ddof 0, Student's t, as the released code) or welch (ddof 1,
    Welch's t, the project's first choice)."""
    n_injection_texts: int = 40
    """Held-out non-reasoning base texts per feature and strategy."""
    n_injection_features: int = 16
    """Analysed features: the first candidates in the ranking."""
    control_pool_min: int = 20
    """Smallest control pool; the +-0.1 log10-frequency window widens in 0.1 steps until it is reached."""
    control_max_reasoning_share: float = 0.7
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
    loop_max_features: int = 3
    """Features the counterexample loop analyses (context-dependent ones first, in rank order)."""
    loop_max_iters: int = 3
    """Iterations per feature at most."""
    n_fp: int = 3
    """False-positive candidates asked for per iteration."""
    n_fn: int = 3
    """False-negative candidates asked for per iteration."""
    loop_stop_valid: int = 3
    """A feature stops once it has this many valid FP and this many valid FN."""
    fp_ratio: float = 0.5
    """A valid FP activates above fp_ratio x the reference max."""
    fn_ratio: float = 0.05
    """A valid FN stays below fn_ratio x the reference max."""
    temperature_gen: float = 0.8
    """Sampling temperature of candidate generation."""
    temperature_judge: float = 0.3
    """Temperature of hypothesis, judge and verdict requests."""
    template_fallback: bool = True
    """Add template candidates for a kind when the generator produced no valid one in an iteration."""
    gen_max_tokens: int = 96
    """New tokens per generated candidate (local generator; endpoints get 4x)."""
    steer_features: int = 3
    """Candidates (top by d) steered."""
    steer_gammas: tuple[float, ...] = (0.0, 2.0)
    """Steering scales gamma (x' = x + gamma f_max W_dec[i]); gamma 0 runs once for all features."""
    n_steer_problems: int = 60
    """Arithmetic problems decoded per condition."""
    steer_max_new_tokens: int = 32
    """New tokens per steered answer."""
    n_top_contexts: int = 8
    """Top-activating contexts stored per candidate and corpus (feature pages)."""

    SIZE_PRESETS = {
        "micro": {
            "sae_d_sae": 1152, "sae_k": 16, "sae_train_tokens": 2048, "sae_cache": False, "quality_tokens": 512,
            "n_reasoning": 16, "n_nonreasoning": 16, "seq_len": 32, "top_k_features": 10,
            "n_injection_features": 2, "n_injection_texts": 4, "injection_strategies": ["prepend"],
            "generator": "template", "loop_max_features": 1, "loop_max_iters": 1,
            "steer_features": 1, "n_steer_problems": 4, "steer_max_new_tokens": 16, "n_top_contexts": 4,
        },
        "quick": {
            "sae_d_sae": 2304, "sae_k": 32, "sae_train_tokens": 20_000, "quality_tokens": 1024,
            "n_reasoning": 80, "n_nonreasoning": 80, "n_injection_features": 6, "n_injection_texts": 12,
            "injection_strategies": ["prepend", "bigram_before"], "generator": "template",
            "loop_max_features": 1, "loop_max_iters": 1, "steer_features": 1, "n_steer_problems": 8,
        },
    }

    def validate(self) -> None:
        super().validate()
        from interp.sites import Site, site_kind

        if self.sae != "train":
            from interp.sae_source import resolve_sae_spec

            resolve_sae_spec(self.sae, "sae")
        try:
            kind = site_kind(self.sae_hook)
        except ValueError:
            raise ConfigError("sae_hook", self.sae_hook, "a TransformerLens hook name such as "
                              "blocks.9.hook_resid_post, resid_post.9 or resid_post@0.3") from None
        if kind in ("embed", "final", "logits") or Site(kind, 0).units != "d_model":
            raise ConfigError("sae_hook", self.sae_hook, "a residual-stream-like hook of a layer "
                              "(hook_resid_pre/mid/post, hook_attn_out, hook_mlp_out)")
        for name in ("sae_d_sae", "sae_k", "sae_train_tokens", "sae_epochs", "sae_batch", "quality_tokens",
                     "n_reasoning", "n_nonreasoning", "batch_size", "top_k_features", "n_top_tokens",
                     "min_token_count", "n_injection_texts", "n_injection_features", "control_pool_min",
                     "loop_max_iters", "n_fp", "n_fn", "loop_stop_valid", "gen_max_tokens", "n_steer_problems",
                     "steer_max_new_tokens", "n_top_contexts"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "a positive integer")
        for name in ("loop_max_features", "steer_features"):
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "a non-negative integer")
        if self.sae_aux_k < 0 or self.sae_aux_coeff < 0 or self.sae_aux_dead_tokens < 1:
            raise ConfigError("sae_aux_k", (self.sae_aux_k, self.sae_aux_coeff, self.sae_aux_dead_tokens),
                              "sae_aux_k >= 0, sae_aux_coeff >= 0, sae_aux_dead_tokens >= 1")
        if self.sae_k > self.sae_d_sae:
            raise ConfigError("sae_k", self.sae_k, f"at most sae_d_sae={self.sae_d_sae}")
        if self.n_reasoning < 2 or self.n_nonreasoning < 2:
            raise ConfigError("n_reasoning", (self.n_reasoning, self.n_nonreasoning), "at least 2 samples per side")
        check_range("seq_len", self.seq_len, 16, 512)
        check_range("sae_lr", self.sae_lr, 0, 1, lo_open=True)
        check_range("min_auc", self.min_auc, 0, 1)
        check_range("max_p_bonf", self.max_p_bonf, 0, 1)
        check_range("min_d", self.min_d, None, None)
        check_range("conc_threshold", self.conc_threshold, 0, 1)
        check_range("control_max_reasoning_share", self.control_max_reasoning_share, 0, 1, lo_open=True)
        check_range("fp_ratio", self.fp_ratio, 0, None, lo_open=True)
        check_range("fn_ratio", self.fn_ratio, 0, 1, lo_open=True)
        check_range("temperature_gen", self.temperature_gen, 0, 2)
        check_range("temperature_judge", self.temperature_judge, 0, 2)
        if self.n_top_tokens > 50:
            raise ConfigError("n_top_tokens", self.n_top_tokens, "at most 50 (the control excludes the top 50)")
        if not self.injection_strategies:
            raise ConfigError("injection_strategies", [], "a non-empty subset of " + ", ".join(STRATEGIES))
        for s in self.injection_strategies:
            if s not in STRATEGIES:
                raise ConfigError("injection_strategies", s, "one of " + ", ".join(STRATEGIES))
        if len(set(self.injection_strategies)) != len(self.injection_strategies):
            raise ConfigError("injection_strategies", list(self.injection_strategies), "distinct strategies")
        if self.generator == "openai" and not (self.generator_url or "").strip():
            raise ConfigError("generator_url", self.generator_url, "the base URL of an OpenAI-compatible API "
                              "(e.g. http://127.0.0.1:8000/v1) when generator=openai")
        if self.generator_url and not self.generator_url.startswith(("http://", "https://")):
            raise ConfigError("generator_url", self.generator_url, "an http:// or https:// URL")
        if not self.steer_gammas or any(abs(g) > 100 for g in self.steer_gammas):
            raise ConfigError("steer_gammas", list(self.steer_gammas), "a non-empty list of scales in [-100, 100]")

    SITE_FIELDS = ("sae_hook",)
    CONTEXT_FIELDS = ("seq_len",)

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        need = math.ceil(0.7 * max(self.quality_tokens, self.sae_train_tokens if self.sae == "train" else 0))
        check_source(self.corpus, field="corpus", seed=self.seed, min_tokens=need, count_tokens=limits.count_tokens,
                     needed_for="70 % of quality_tokens and, with sae=train, of sae_train_tokens")

    def validate_for_model(self, n_layers: int | None) -> None:
        if self.sae == "train":
            self.check_site("sae_hook", self.sae_hook, n_layers)
