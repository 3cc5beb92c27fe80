"""The logit lens (nostalgebraist 2020): the residual decoded as it is, as if it were the last layer's.

Its readout is the `logit_lens` probe's decode before the softmax, bit for bit (tests/unit/test_lens_logit.py).
"""

from __future__ import annotations

from jaxtyping import Float
from torch import Tensor

from .base import Lens


class LogitLens(Lens):
    """Transport by the identity: `readout(model, l, h) = model.unembed(h)`."""

    name = "logit"

    def __init__(self, n_layers: int):
        self.n_layers = int(n_layers)

    def transport(self, layer: int, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        self.check_layer(layer)
        return resid


__all__ = ["LogitLens"]
