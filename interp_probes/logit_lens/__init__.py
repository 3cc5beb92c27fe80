"""Logit lens: decode every layer's residual stream through the final norm and unembedding.

Method: nostalgebraist 2020, https://www.lesswrong.com/posts/AcKRB8wDpdaN6v6ru/interpreting-gpt-the-logit-lens
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from interp.config import ModelLimits, ProbeConfig, Range
from interp.errors import ConfigError
from interp.registry import probe


@probe("logit_lens", run="interp_probes.logit_lens.probe:run",
       page="interp_probes.logit_lens.page", figures="interp_probes.logit_lens.figures")
@dataclass(frozen=True)
class LogitLensConfig(ProbeConfig):
    """What each layer's residual stream would predict if decoded as the output (logit lens).

    If each layer's residual stream were decoded as the output (final norm, then unembedding), from which layer on would
    the model already predict the token it finally predicts?
    """

    prompt: str = "The capital of France is"
    """Raw text to read (no chat template unless `chat` is true)."""
    chat: bool = False
    """Wrap the prompt in the model's chat template (user turn, generation prompt)."""
    top_k: Annotated[int, Range(1, 100)] = 5
    """Tokens kept per layer and position."""
    max_tokens: Annotated[int, Range(1, 8192)] = 256
    """Longest prompt accepted, in tokens (longer prompts are an error, not truncated); at most the model's context."""

    CONTEXT_FIELDS = ("max_tokens",)

    def validate(self) -> None:
        super().validate()
        if not self.prompt.strip():
            raise ConfigError("prompt", self.prompt, "a non-empty text")

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        if limits.count_tokens is not None:  # a lower bound: a BOS or the chat template only add tokens
            n = limits.count_tokens(self.prompt)
            if n > self.max_tokens:
                raise ConfigError("prompt", f"<{n} tokens>", f"at most max_tokens={self.max_tokens} tokens "
                                  "(longer prompts are an error, not truncated)")
