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

from torch import Tensor

from interp.sites import Site

from . import NEURON_TYPES as TYPES


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
    """Where type `t` is recorded: after RoPE for q and k where the family has rotary keys (before it otherwise:
    GPT-2's q and k carry no rotation); a plain (ungated) MLP has no up_proj output of its own."""
    kind = SPECS[t].site_kind
    if t == "fwd_up" and not is_gated(model):
        kind = "mlp_gate"  # the bridge's hook_pre is the fc_in output of a plain MLP
    if kind in ("attn_rot_q", "attn_rot_k") and not model.anatomy.rotary:
        kind = SPECS[t].hook_kind
    return Site(kind, layer)


def hook_site(model, t: str, layer: int) -> Site:
    """Where an activation hook zeroes type `t` (pre-RoPE for q and k; a plain MLP's up output is mlp_gate)."""
    if t == "fwd_up" and not is_gated(model):
        return Site("mlp_gate", layer)
    return Site(SPECS[t].hook_kind, layer)


def is_gated(model) -> bool:
    return model.anatomy.gated


class SliceMap:
    """Each (type, layer)'s weight (and, with `bias`, bias) slice on one model, through `model.anatomy`: the
    parameter, the axis a neuron indexes and the neuron's index along it, for separate, fused and Conv1D layouts.

    The released code edits `.weight` only (a zeroed row of a biased projection then outputs its bias) and its
    SFT masks touch weights only, so every bias trains; `bias=False` (the default) does the same here."""

    def __init__(self, model, bias: bool = False):
        self.model = model
        self.bias = bias
        a = model.anatomy
        self._proj = {(t, layer): a.proj(layer, SPECS[t].role) for layer in range(model.info.n_layers) for t in SPECS}
        params = dict(model.hf.named_parameters())
        self._params = {p.weight: params[p.weight] for p in self._proj.values()}

    def weight_name(self, t: str, layer: int) -> str:
        return self._proj[(t, layer)].weight

    def dim(self, t: str, layer: int) -> int:
        """The weight axis a neuron of (t, layer) indexes (0: rows, 1: columns; Conv1D swaps them)."""
        return self._proj[(t, layer)].axis

    def rows(self, t: str, layer: int, neurons) -> list[int]:
        """Weight indices (along `dim`) of neurons `neurons` of (t, layer)."""
        return self._proj[(t, layer)].rows(neurons)

    def bias_name(self, t: str, layer: int) -> str | None:
        """The bias zeroed with a neuron (output types only, with `bias`), if the module has one."""
        p = self._proj[(t, layer)]
        return p.bias if self.bias and p.bias_on_neurons else None

    def weight(self, t: str, layer: int) -> Tensor:
        return self._params[self.weight_name(t, layer)]

    def neuron_slice(self, t: str, layer: int, i: int) -> Tensor:
        """Neuron i's weight slice (for fwd_down and attn_o: the d_model direction it writes), detached."""
        rows = self.rows(t, layer, [i])
        return self.weight(t, layer).detach().select(self.dim(t, layer), rows[0])

    def slice_norms(self, t: str, layer: int) -> Tensor:
        """L2 norm of every neuron's weight slice, (n,) float32."""
        return self._proj[(t, layer)].norms(self.weight(t, layer))


def kv_ranking(info, types=TYPES, kv_width: str = "query") -> dict[str, tuple[int, int]]:
    """type -> (d_head, n_rep) of the K/V types to rank at query width; empty for "native" or no GQA."""
    n_rep = info.n_heads // info.n_kv_heads
    if kv_width == "native" or n_rep == 1:
        return {}
    return {t: (info.d_head, n_rep) for t in ("attn_k", "attn_v") if t in types}


def kv_row(i: int, d_head: int, n_rep: int) -> int:
    """The released code's map of a query-width K/V index to its KV-width row."""
    return ((i // d_head) // n_rep) * d_head + i % d_head


def neuron_coords(t: str, i: int, info) -> dict[str, int | None]:
    """head, dim and kv_head of attention neuron i (None for MLP neurons; head None for k/v)."""
    if t in ("fwd_up", "fwd_down"):
        return {"head": None, "dim": None, "kv_head": None}
    n_rep = info.n_heads // info.n_kv_heads
    h, d = divmod(i, info.d_head)
    if t in ("attn_k", "attn_v"):
        return {"head": None, "dim": d, "kv_head": h}
    return {"head": h, "dim": d, "kv_head": h // n_rep}
