"""SAE feature dashboard: per-feature statistics of any SAE over text, streamed.

For every latent of an SAE (any `interp.load_sae` spec, or one trained here): activation density, a histogram
of its non-zero activations, its top-activating contexts and samples from each activation interval (quantile
samples) with per-token values, and its logit effect (top promoted and suppressed tokens of W_dec @ W_U), as
in SAE dashboards (SAEDashboard, Neuronpedia; Bloom & Lin's SAE-Vis). Position 0 is excluded everywhere.
`interp export neuronpedia RUN OUT` writes the run as Neuronpedia's feature and activation JSONL.
"""

from __future__ import annotations

from dataclasses import dataclass

from interp.config import ModelLimits, ProbeConfig, check_range
from interp.data import check_source
from interp.errors import ConfigError
from interp.registry import probe


@probe("sae_features", run="probes.sae_features.probe:run", page="app.views.sae_features")
@dataclass(frozen=True)
class SaeFeaturesConfig(ProbeConfig):
    """A feature dashboard for any SAE: density, activation histograms, top contexts, quantile samples, logits."""

    sae: str = "train"
    """"train" (a JumpReLU SAE trained here on `hook`, cached) or an `interp.load_sae` spec: a SAELens directory,
    a run directory holding an SAE (atoms'), saelens:<release>/<sae_id> (online)."""
    hook: str = "resid_post@0.2"
    """Site of the SAE trained with sae=train (TransformerLens hook name, site name or depth fraction: the default
    is resid_post at 20 % of depth, layer 6 of SmolLM2's 30); a given SAE reads its own config's hook."""
    d_sae: int = 2304
    """Latents of the trained SAE."""
    target_l0: float = 16.0
    """Mean active latents per token of the trained SAE."""
    sae_steps: int = 600
    """Training steps of the trained SAE (batches of 1024 tokens)."""
    sae_train_tokens: int = 60_000
    """Tokens the trained SAE learns from (positions >= 1 of the first chunks of `data`)."""
    sae_cache: bool = True
    """Reuse the trained SAE from the SAE cache when the model, hook, config and data match."""
    data: str = "builtin:all"
    """Text the features are measured on (any `interp.data` source)."""
    n_tokens: int = 100_000
    """Tokens streamed through the model and the SAE (chunks of seq_len; position 0 of each is excluded)."""
    seq_len: int = 128
    """Tokens per chunk."""
    batch_size: int = 16
    """Chunks per forward."""
    n_top: int = 20
    """Top-activating contexts kept per feature."""
    n_intervals: int = 5
    """Quantile samples: activation intervals of equal width between 0 and the feature's max."""
    n_interval_samples: int = 4
    """Contexts sampled uniformly at random from each interval."""
    context_left: int = 12
    """Tokens shown before the highlighted token."""
    context_right: int = 4
    """Tokens shown after it."""
    hist_bins: int = 40
    """Bins of each feature's histogram of non-zero activations (and of its logit effects)."""
    n_logits: int = 10
    """Promoted and suppressed tokens kept per feature (rows of W_dec @ W_U)."""

    SIZE_PRESETS = {
        "micro": {"d_sae": 576, "sae_steps": 20, "sae_train_tokens": 2048, "sae_cache": False, "n_tokens": 2048,
                  "seq_len": 64, "n_top": 8, "n_interval_samples": 2},
        "quick": {"d_sae": 1152, "sae_steps": 300, "sae_train_tokens": 30_000, "n_tokens": 20_000, "n_top": 12,
                  "n_interval_samples": 3},
    }
    CONTEXT_FIELDS = ("seq_len",)
    SITE_FIELDS = ("hook",)

    def validate(self) -> None:
        super().validate()
        from interp.sites import Site, site_kind

        if self.sae != "train":
            from interp.sae_source import resolve_sae_spec

            resolve_sae_spec(self.sae, "sae")
        try:
            kind = site_kind(self.hook)
        except ValueError:
            raise ConfigError("hook", self.hook, "a TransformerLens hook name (blocks.6.hook_resid_post), a site name "
                              "(resid_post.6) or a depth (resid_post@0.2)") from None
        if kind in ("embed", "final", "logits") or Site(kind, 0).units != "d_model":
            raise ConfigError("hook", self.hook, "a residual-stream-like hook of a layer (hook_resid_pre/mid/post, "
                              "hook_attn_out, hook_mlp_out)")
        for name in ("d_sae", "sae_steps", "n_top", "n_intervals", "n_interval_samples", "hist_bins", "n_logits",
                     "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "a positive integer")
        check_range("seq_len", self.seq_len, 2, 8192)
        check_range("n_tokens", self.n_tokens, 1, 1_000_000_000)
        check_range("sae_train_tokens", self.sae_train_tokens, 16, 1_000_000_000)
        check_range("target_l0", self.target_l0, 0, None, lo_open=True)
        check_range("context_left", self.context_left, 0, 256)
        check_range("context_right", self.context_right, 0, 256)

    def validate_for_model(self, n_layers: int | None) -> None:
        if self.sae == "train":
            self.check_site("hook", self.hook, n_layers)

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        need = max(self.n_tokens, self.sae_train_tokens if self.sae == "train" else 0)
        check_source(self.data, field="data", seed=self.seed, min_tokens=need, count_tokens=limits.count_tokens,
                     needed_for="n_tokens and, with sae=train, sae_train_tokens")

    @property
    def n_seqs(self) -> int:
        """Chunks streamed: enough for n_tokens at positions >= 1."""
        return -(-self.n_tokens // (self.seq_len - 1))
