"""Step 2: adapters f(v) from a model vector to one input embedding (float32 throughout).

With v_hat = v / |v| and d = d_model:

    identity        s* v_hat                          0 parameters (s* from the scale sweep)
    scale_only      exp(s) v_hat                      1
    bias_only       s* v_hat + b                      d
    scalar_affine   exp(s) v_hat + b                  d + 1        (577 on SmolLM2)
    low_rank        exp(s) v_hat + b + V (U^T v_hat)  d + 1 + 2dr
    low_rank_only   V (U^T v_hat) + b                 d + 2dr
    full_rank       A v_hat + b                       d^2 + d

Initialised as the reference (agencyenterprise/selfie-adapters, `selfie_adapters/projection.py`) does,
with s0 the initial scale: log_scale = log s0, b = 0; U and V ~ N(0, (s0 * low_rank_init / sqrt(r))^2),
drawn U first (the reference's `init_scale * low_rank_init_factor / rank ** 0.5`); A ~ N(0, (s0 *
sqrt(2 / (d + d)))^2), the reference's Xavier-normal std scaled by s0 (the method spec says
"Xavier-uniform"; the reference code draws a normal, which is followed here). v_hat = v / (|v| + 1e-8)
as in the reference.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor, nn

TRAINABLE = {
    "identity": (),
    "scale_only": ("log_scale",),
    "bias_only": ("bias",),
    "scalar_affine": ("log_scale", "bias"),
    "low_rank": ("log_scale", "bias", "U", "V"),
    "low_rank_only": ("bias", "U", "V"),
    "full_rank": ("A", "bias"),
}


def n_params(variant: str, d: int, rank: int = 8) -> int:
    """Trainable parameters of `variant` at width d (the spec's table)."""
    return {
        "identity": 0,
        "scale_only": 1,
        "bias_only": d,
        "scalar_affine": d + 1,
        "low_rank": d + 1 + 2 * d * rank,
        "low_rank_only": d + 2 * d * rank,
        "full_rank": d * d + d,
    }[variant]


class Adapter(nn.Module):
    """f(v) for one variant; parameters the variant does not train are fixed buffers."""

    def __init__(self, variant: str, d: int, scale: float, rank: int = 8, lr_init: float = 0.01,
                 generator: torch.Generator | None = None):
        super().__init__()
        if variant not in TRAINABLE:
            raise ValueError(f"unknown adapter variant {variant!r}; known: {', '.join(TRAINABLE)}")
        self.variant, self.d, self.rank = variant, d, rank
        trains = TRAINABLE[variant]
        init = {
            "log_scale": torch.tensor(math.log(scale), dtype=torch.float32),
            "bias": torch.zeros(d),
        }
        if variant in ("low_rank", "low_rank_only"):
            std = scale * lr_init / math.sqrt(rank)  # the reference: init_scale * factor / sqrt(rank)
            init["U"] = torch.empty(d, rank).normal_(0.0, std, generator=generator)
            init["V"] = torch.empty(d, rank).normal_(0.0, std, generator=generator)
        if variant == "full_rank":
            std = scale * math.sqrt(2.0 / (d + d))  # Xavier-normal std times the initial scale
            init["A"] = torch.empty(d, d).normal_(0.0, std, generator=generator)
        for name, value in init.items():
            if name in trains:
                self.register_parameter(name, nn.Parameter(value))
            else:
                self.register_buffer(name, value)

    def forward(self, v: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        v = v.float()
        v_hat = v / (v.norm(dim=-1, keepdim=True) + 1e-8)  # (n, d)
        if self.variant == "full_rank":
            return v_hat @ self.A.T + self.bias
        out = self.bias.expand_as(v_hat)
        if self.variant != "low_rank_only":
            out = out + self.log_scale.exp() * v_hat
        if self.variant in ("low_rank", "low_rank_only"):
            out = out + (v_hat @ self.U) @ self.V.T  # (n, r) -> (n, d)
        return out

    @property
    def scale(self) -> float:
        return float(self.log_scale.detach().exp())

    @property
    def bias_norm(self) -> float:
        return float(self.bias.detach().norm())

    def n_trainable(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def tensors(self) -> dict[str, Tensor]:
        """Every parameter and buffer (float32), for safetensors."""
        return {k: v.detach().float().cpu().contiguous() for k, v in self.state_dict().items()}

    def metadata(self, **extra) -> dict[str, str]:
        meta = {"variant": self.variant, "d": str(self.d), "rank": str(self.rank)}
        return {**meta, **{k: str(v) for k, v in extra.items()}}

    @classmethod
    def from_tensors(cls, tensors: dict, metadata: dict[str, str]) -> "Adapter":
        """Rebuild an adapter saved with `tensors()` + `metadata()` (numpy or torch tensors)."""
        variant, d, rank = metadata["variant"], int(metadata["d"]), int(metadata.get("rank", 8))
        ad = cls(variant, d, 1.0, rank=rank)
        state = {k: torch.as_tensor(v).float() for k, v in tensors.items()}
        ad.load_state_dict(state)
        return ad
