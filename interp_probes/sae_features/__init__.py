"""SAE feature dashboard: per-feature statistics of any SAE over text, streamed.

For every latent of an SAE (any `interp.load_sae` spec, or one trained here): activation density, a histogram
of its non-zero activations, its top-activating contexts and samples from each activation interval (quantile
samples) with per-token values, and its logit effect (top promoted and suppressed tokens of W_dec @ W_U), as
in SAE dashboards (SAEDashboard, https://github.com/jbloomAus/SAEDashboard; Neuronpedia; Bloom & Lin's SAE-Vis).
Position 0 is excluded everywhere.
`interp export neuronpedia RUN OUT` writes the run as Neuronpedia's feature and activation JSONL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from interp.config import ModelLimits, PositiveFloat, PositiveInt, ProbeConfig, Range, SAESource
from interp.data import check_source
from interp.registry import probe


@probe("sae_features", run="interp_probes.sae_features.probe:run",
       page="interp_probes.sae_features.page", figures="interp_probes.sae_features.figures")
@dataclass(frozen=True)
class SaeFeaturesConfig(ProbeConfig):
    """A feature dashboard for any SAE: density, activation histograms, top contexts, quantile samples, logits.

    What does each feature of this SAE respond to: how often it fires, how strongly, on which tokens in which contexts,
    and which output tokens its decoder direction promotes or suppresses?
    """

    sae: SAESource = field(default_factory=lambda: SAESource(hook="resid_post@0.2", d_sae=2304, train_tokens=60_000,
                                                             steps=600))
    """The SAE: "train" is a JumpReLU SAE trained here on sae.hook (cached), from the first chunks of `data`."""
    target_l0: PositiveFloat = 16.0
    """Mean active latents per token of the trained SAE."""
    data: str = "builtin:all"
    """Text the features are measured on (any `interp.data` source)."""
    n_tokens: Annotated[int, Range(1, 1_000_000_000)] = 100_000
    """Tokens streamed through the model and the SAE (chunks of seq_len; position 0 of each is excluded)."""
    seq_len: Annotated[int, Range(2, 8192)] = 128
    """Tokens per chunk."""
    batch_size: PositiveInt = 16
    """Chunks per forward."""
    n_top: PositiveInt = 20
    """Top-activating contexts kept per feature."""
    n_intervals: PositiveInt = 5
    """Quantile samples: activation intervals of equal width between 0 and the feature's max."""
    n_interval_samples: PositiveInt = 4
    """Contexts sampled uniformly at random from each interval."""
    context_left: Annotated[int, Range(0, 256)] = 12
    """Tokens shown before the highlighted token."""
    context_right: Annotated[int, Range(0, 256)] = 4
    """Tokens shown after it."""
    hist_bins: PositiveInt = 40
    """Bins of each feature's histogram of non-zero activations (and of its logit effects)."""
    n_logits: PositiveInt = 10
    """Promoted and suppressed tokens kept per feature (rows of W_dec @ W_U)."""

    SIZE_PRESETS = {
        "micro": {"sae.d_sae": 576, "sae.steps": 20, "sae.train_tokens": 2048, "sae.cache": False,
                  "n_tokens": 2048, "seq_len": 64, "n_top": 8, "n_interval_samples": 2},
        "quick": {"sae.d_sae": 1152, "sae.steps": 300, "sae.train_tokens": 30_000, "n_tokens": 20_000, "n_top": 12,
                  "n_interval_samples": 3},
    }
    CONTEXT_FIELDS = ("seq_len",)
    SITE_FIELDS = ("sae.hook",)

    def validate_for_model(self, n_layers: int | None) -> None:
        if self.sae.source == "train":
            self.check_site("sae.hook", self.sae.hook, n_layers)

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        need = max(self.n_tokens, self.sae.train_tokens if self.sae.source == "train" else 0)
        check_source(self.data, field="data", seed=self.seed, min_tokens=need, count_tokens=limits.count_tokens,
                     needed_for="n_tokens and, with sae.source=train, sae.train_tokens")

    @property
    def n_seqs(self) -> int:
        """Chunks streamed: enough for n_tokens at positions >= 1."""
        return -(-self.n_tokens // (self.seq_len - 1))
