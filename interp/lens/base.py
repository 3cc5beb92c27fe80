"""The readout interface every lens shares: a residual at a layer in, next-token logits out.

A lens is a map `transport(layer, h)` that carries a residual read after block `layer` (the `resid_post` site)
into the basis of the model's last layer; `readout` then decodes it as the model decodes its own last residual:
final norm, unembedding and the family's logit scaling (`Model.unembed`: Gemma's soft-capping, Cohere's and
Granite's scales). The logit lens transports by the identity, the tuned lens by a learned affine map per layer
(`interp.lens.tuned`), the Jacobian lens by the model's average Jacobian J_l (`interp.lens.jacobian`).
"""

from __future__ import annotations

import abc
from typing import Any

from jaxtyping import Float
from torch import Tensor

from ..errors import ConfigError


class Lens(abc.ABC):
    """A per-layer readout of residuals as next-token logits."""

    name: str = ""
    """"logit", "tuned" or "jacobian"."""
    n_layers: int = 0
    """The layer count of the model the lens was made for."""

    @abc.abstractmethod
    def transport(self, layer: int, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        """`resid` (read after block `layer`) carried into the last layer's basis, in `resid`'s dtype and device."""

    def layers(self) -> list[int]:
        """The layers this lens reads (where `transport` is defined)."""
        return list(range(self.n_layers))

    def readout(self, model: Any, layer: int, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_vocab"]:
        """Logits of `resid` at `layer`: `model.unembed(self.transport(layer, resid))` (final norm, unembedding,
        logit soft-capping or scaling where the family has it)."""
        return model.unembed(self.transport(layer, resid))

    def check_layer(self, layer: int) -> None:
        """ConfigError naming `layer` when this lens does not read it."""
        if layer not in self.layers():
            have = self.layers()
            span = f"{have[0]}..{have[-1]}" if have else "none"
            raise ConfigError("layer", layer, f"a layer the {self.name} lens reads ({span})")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_layers={self.n_layers})"


__all__ = ["Lens"]
