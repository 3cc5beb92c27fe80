"""The neuron inventory: six types, where each is recorded, and which weight slice silences it.

| type     | recorded at (Site)            | width            | weight slice zeroed             |
|----------|-------------------------------|------------------|---------------------------------|
| fwd_up   | mlp_up (up_proj output)       | d_mlp            | up_proj row i (+ bias)          |
| fwd_down | mlp_post (down_proj input)    | d_mlp            | down_proj column i              |
| attn_q   | attn_rot_q (after RoPE)       | n_heads * d_head | q_proj row i (+ bias)           |
| attn_k   | attn_rot_k (after RoPE)       | n_kv * d_head    | k_proj row i (+ bias)           |
| attn_v   | attn_v                        | n_kv * d_head    | v_proj row i (+ bias)           |
| attn_o   | attn_z (o_proj input)         | n_heads * d_head | o_proj column i                 |

K and V are recorded in their native KV width, so index i is already the KV row: the released
code's map from query-head width, ((i // d_head) // n_rep) * d_head + i % d_head, is `kv_row`.
The released code ranks K and V at query width (after repeat_kv); `kv_ranking` gives selection
what it needs to do the same (`kv_width="query"`, the default).
Counts always come from the model's config.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from interp.sites import Site

TYPES = ("fwd_up", "fwd_down", "attn_q", "attn_k", "attn_v", "attn_o")


@dataclass(frozen=True)
class NeuronType:
    name: str
    site_kind: str
    """Recording site kind (post-RoPE for q and k)."""
    hook_kind: str
    """Site kind of the equivalent activation-zeroing hook (pre-RoPE for q and k)."""
    role: str
    """Module role inside the layer: up, down, q, k, v, o."""
    dim: int
    """0: the slice is a row of the weight (and the bias entry); 1: a column."""


SPECS = {
    "fwd_up": NeuronType("fwd_up", "mlp_up", "mlp_up", "up", 0),
    "fwd_down": NeuronType("fwd_down", "mlp_post", "mlp_post", "down", 1),
    "attn_q": NeuronType("attn_q", "attn_rot_q", "attn_q", "q", 0),
    "attn_k": NeuronType("attn_k", "attn_rot_k", "attn_k", "k", 0),
    "attn_v": NeuronType("attn_v", "attn_v", "attn_v", "v", 0),
    "attn_o": NeuronType("attn_o", "attn_z", "attn_z", "o", 1),
}

_ATTN = ("self_attn", "attn", "attention", "self_attention")
_MLP = ("mlp", "feed_forward", "ffn")
_ROLE_NAMES = {
    "q": ("q_proj", "query"),
    "k": ("k_proj", "key"),
    "v": ("v_proj", "value"),
    "o": ("o_proj", "out_proj", "dense", "wo"),
    "up": ("up_proj", "fc1", "fc_in", "dense_h_to_4h", "w1"),
    "down": ("down_proj", "fc2", "fc_out", "dense_4h_to_h", "w2"),
}


def widths(info, types=TYPES) -> dict[str, int]:
    """Neurons per layer of each type, from the model's config."""
    w = {
        "fwd_up": info.d_mlp,
        "fwd_down": info.d_mlp,
        "attn_q": info.n_heads * info.d_head,
        "attn_k": info.n_kv_heads * info.d_head,
        "attn_v": info.n_kv_heads * info.d_head,
        "attn_o": info.n_heads * info.d_head,
    }
    return {t: w[t] for t in types}


def recording_site(model, t: str, layer: int) -> Site:
    """Where type `t` is recorded; a plain (ungated) MLP has no up_proj output of its own."""
    kind = SPECS[t].site_kind
    if t == "fwd_up" and not is_gated(model):
        kind = "mlp_gate"  # the bridge's hook_pre is the fc_in output of a plain MLP
    return Site(kind, layer)


def is_gated(model) -> bool:
    mlp = _child(model.layer_module(0), _MLP)
    return hasattr(mlp, "gate_proj") or hasattr(mlp, "w3")


def _child(module, names):
    for n in names:
        if hasattr(module, n):
            return getattr(module, n)
    raise AttributeError(f"{type(module).__name__} has none of {', '.join(names)}")


class SliceMap:
    """HF parameter names of each (type, layer)'s weight (and, with `bias`, bias) slice on one model.

    The released code edits `.weight` only (a zeroed row of a biased projection then outputs its bias) and its
    SFT masks touch weights only, so every bias trains; `bias=False` (the default) does the same here."""

    def __init__(self, model, bias: bool = False):
        self.model = model
        self.bias = bias
        names = {id(m): n for n, m in model.hf.named_modules()}
        self._mod: dict[tuple[str, int], tuple[str, object]] = {}
        for layer in range(model.info.n_layers):
            block = model.layer_module(layer)
            for t, spec in SPECS.items():
                parent = _child(block, _ATTN if spec.role in ("q", "k", "v", "o") else _MLP)
                mod = _child(parent, _ROLE_NAMES[spec.role])
                if not isinstance(mod, torch.nn.Linear):
                    raise TypeError(f"{t} of layer {layer} is a {type(mod).__name__}, not nn.Linear; unsupported")
                self._mod[(t, layer)] = (names[id(mod)], mod)

    def weight_name(self, t: str, layer: int) -> str:
        return self._mod[(t, layer)][0] + ".weight"

    def bias_name(self, t: str, layer: int) -> str | None:
        """The bias zeroed with a row (row types only, with `bias`), if the module has one."""
        name, mod = self._mod[(t, layer)]
        has = self.bias and SPECS[t].dim == 0 and getattr(mod, "bias", None) is not None
        return name + ".bias" if has else None

    def weight(self, t: str, layer: int) -> Tensor:
        return self._mod[(t, layer)][1].weight

    def slice_norms(self, t: str, layer: int) -> Tensor:
        """L2 norm of every neuron's weight slice, (n,) float32."""
        w = self.weight(t, layer).detach().float()
        return w.norm(dim=1 - SPECS[t].dim)


def kv_ranking(info, types=TYPES, kv_width: str = "query") -> dict[str, tuple[int, int]]:
    """type -> (d_head, n_rep) of the K/V types to rank at query width; empty for "native" or no GQA."""
    n_rep = info.n_heads // info.n_kv_heads
    if kv_width == "native" or n_rep == 1:
        return {}
    return {t: (info.d_head, n_rep) for t in ("attn_k", "attn_v") if t in types}


def kv_row(i: int, d_head: int, n_rep: int) -> int:
    """The released code's map of a query-width K/V index to its KV-width row."""
    return ((i // d_head) // n_rep) * d_head + i % d_head


def rope_partner(d: int, d_head: int) -> int:
    """The dimension rotated together with `d` by RoPE (the rotate-half convention)."""
    half = d_head // 2
    return d + half if d < half else d - half


def neuron_coords(t: str, i: int, info) -> dict[str, int | None]:
    """head, dim and kv_head of attention neuron i (None for MLP neurons; head None for k/v)."""
    if t in ("fwd_up", "fwd_down"):
        return {"head": None, "dim": None, "kv_head": None}
    n_rep = info.n_heads // info.n_kv_heads
    h, d = divmod(i, info.d_head)
    if t in ("attn_k", "attn_v"):
        return {"head": None, "dim": d, "kv_head": h}
    return {"head": h, "dim": d, "kv_head": h // n_rep}
