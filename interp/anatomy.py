"""The model's anatomy: where each part of a decoder lives, on every family the TransformerLens bridge adapts.

The one module that knows Hugging Face module paths. Probes ask it for a layer's attention, MLP and norms, the
final norm, the unembedding (with its scaling and soft-capping), and above all for **neuron-indexed views of
the projection weights**: `anatomy.proj(layer, role)` says which parameter holds role `role` (q, k, v, o, gate,
up, down), along which axis a neuron indexes it, and which rows (or columns) neurons 0..n-1 are. Separate
projections (Llama), fused ones (GPT-2's Conv1D `c_attn`, GPT-NeoX's head-interleaved `query_key_value`, Phi-3's
`qkv_proj` and `gate_up_proj`) and Conv1D layouts all come out as the same view, so a weight edit of neuron i
means the same thing on every family:

    a = model.anatomy
    p = a.proj(3, "k")                  # Proj(weight="model.layers.3.self_attn.k_proj.weight", axis=0, ...)
    rows = p.rows([5, 9])               # the weight rows of K neurons 5 and 9 (their KV-width index)
    WeightEdit(p.weight, p.axis, rows)  # zero them (interp.edit_weights)

Neuron order follows the activation the bridge's hooks show: q/k/v neurons are (head, d_head) flattened,
o and down neurons the input features of their projection, up/gate neurons the MLP's hidden units.
"""
# host-module: index maps into weight matrices; a CUDA tensor takes host indices

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .errors import InterpError
from .families import INTERLEAVED_ROTARY, NO_ROTARY, PARALLEL

ROLES = ("q", "k", "v", "o", "gate", "up", "down")
"""Projection roles: q/k/v/gate/up neurons are a projection's outputs, o/down neurons its inputs."""
_INPUT_ROLES = ("o", "down")

#: Where each part lives, by HF module attribute names, first match wins (families differ only in names).
_BASE = ("model", "transformer", "gpt_neox", "decoder")
_LAYERS = ("layers", "h", "blocks")
_FINAL = ("norm", "final_layernorm", "ln_f", "final_layer_norm", "final_norm")
_ATTN = ("self_attn", "attn", "attention", "self_attention")
_MLP = ("mlp", "feed_forward", "ffn")
_NORMS = {
    # where -> candidate names. attn_in / mlp_in: the norm before the branch; attn_out / mlp_out: after it.
    "attn_in": ("input_layernorm", "ln_1", "attention_norm"),
    "mlp_in": ("pre_feedforward_layernorm", "ln_2", "ffn_norm"),
    "mlp_out": ("post_feedforward_layernorm",),
}
_PROJ = {
    "q": ("q_proj", "query", "wq"),
    "k": ("k_proj", "key", "wk"),
    "v": ("v_proj", "value", "wv"),
    "o": ("o_proj", "out_proj", "dense", "c_proj", "wo"),
    "gate": ("gate_proj", "w1"),
    "up": ("up_proj", "fc1", "fc_in", "c_fc", "dense_h_to_4h", "w3"),
    "down": ("down_proj", "fc2", "fc_out", "c_proj", "dense_4h_to_h", "w2"),
}
_FUSED_QKV = ("qkv_proj", "c_attn", "query_key_value", "Wqkv")
_FUSED_GATE_UP = ("gate_up_proj",)


class UnsupportedModel(InterpError):
    """The model's architecture lacks a part a probe needs (one line: the part and the architecture)."""


@dataclass(frozen=True)
class Proj:
    """A neuron-indexed view of one projection weight."""

    weight: str
    """Dotted HF parameter name of the weight matrix."""
    bias: str | None
    """Dotted name of its bias (None: no bias); a neuron's bias entry sits at `rows(i)` along axis 0."""
    axis: int
    """The weight axis a neuron indexes (0 or 1; Conv1D stores weights transposed)."""
    index: Tensor
    """(n,) long: the weight index (along `axis`) of neurons 0..n-1."""
    bias_on_neurons: bool
    """True when the bias is indexed by this role's neurons (output roles), False for o/down (the bias is
    on the output features, which are not this role's neurons)."""

    @property
    def n(self) -> int:
        return int(self.index.numel())

    @property
    def contiguous(self) -> tuple[int, int] | None:
        """(offset, n) when the neurons are one contiguous run of the axis, else None."""
        i = self.index
        if self.n and bool((i[1:] - i[:-1] == 1).all()):
            return int(i[0]), self.n
        return None

    def rows(self, neurons: Sequence[int] | Tensor) -> list[int]:
        """Weight indices along `axis` of the given neuron indices."""
        idx = torch.as_tensor(neurons, dtype=torch.long)
        return self.index[idx].tolist()

    def take(self, w: Tensor) -> Tensor:
        """The neuron slices of weight `w`, with neurons along the returned tensor's `axis`."""
        run = self.contiguous
        if run is not None:
            return w if run == (0, w.shape[self.axis]) else w.narrow(self.axis, *run)
        return w.index_select(self.axis, self.index.to(w.device))

    def norms(self, w: Tensor) -> Tensor:
        """L2 norm of every neuron's slice of `w`, (n,) float32."""
        return self.take(w.detach().float()).norm(dim=1 - self.axis)


class Anatomy:
    """The parts of one loaded HF causal LM (see the module docstring)."""

    def __init__(self, hf: Any):
        self.hf = hf
        c = hf.config
        self.config = getattr(c, "text_config", None) or c
        self.family = str(getattr(self.config, "model_type", type(hf).__name__))
        self.arch = type(hf).__name__
        self._names = {id(m): n for n, m in hf.named_modules()}
        self.layers = self._find_layers()
        self.final_norm = self._first(self._base(), _FINAL, "final norm")
        self.parallel = self._parallel()
        self.n_heads = int(self.config.num_attention_heads if hasattr(self.config, "num_attention_heads")
                           else self.config.n_head)
        self.n_kv_heads = int(getattr(self.config, "num_key_value_heads", None) or self.n_heads)
        d_model = int(getattr(self.config, "hidden_size", None) or self.config.n_embd)
        self.d_head = int(getattr(self.config, "head_dim", None) or d_model // self.n_heads)
        self.gated = self._has_gate()
        self.rotary = self._rotary()
        self.rotary_dims = self._rotary_dims()
        self.rotary_interleaved = self.rotary and self.family in INTERLEAVED_ROTARY
        self.qk_norm = any(hasattr(self.attn(0), n) for n in ("q_norm", "k_norm", "q_layernorm"))
        self.sliding_window = getattr(self.config, "sliding_window", None)
        self.attn_softcap = getattr(self.config, "attn_logit_softcapping", None)
        self.final_softcap = getattr(self.config, "final_logit_softcapping", None)
        self.logit_scale = getattr(self.config, "logit_scale", None)  # Cohere multiplies
        self.logits_scaling = getattr(self.config, "logits_scaling", None)  # Granite divides
        self._proj: dict[tuple[int, str], Proj] = {}

    # -- layout -----------------------------------------------------------------------
    def _base(self) -> Any:
        for name in _BASE:
            sub = getattr(self.hf, name, None)
            if isinstance(sub, torch.nn.Module) and any(hasattr(sub, n) for n in _LAYERS):
                return sub
        return self.hf

    def _find_layers(self) -> Any:
        base = self._base()
        for name in _LAYERS:
            obj = getattr(base, name, None)
            if isinstance(obj, torch.nn.ModuleList):
                return obj
        raise UnsupportedModel(f"{self.arch}: cannot find its decoder layers (looked for {', '.join(_LAYERS)})")

    def _first(self, module: Any, names: Sequence[str], what: str, required: bool = True) -> Any:
        for n in names:
            sub = getattr(module, n, None)
            if isinstance(sub, torch.nn.Module):
                return sub
        if required:
            raise UnsupportedModel(f"{self.arch}: cannot find the {what} (looked for {', '.join(names)})")
        return None

    def _parallel(self) -> bool:
        """Attention and MLP read the same block input (GPT-J, GPT-NeoX with use_parallel_residual, Cohere)."""
        flag = getattr(self.config, "use_parallel_residual", None)
        if flag is not None:
            return bool(flag)
        return self.family in PARALLEL

    def _has_gate(self) -> bool:
        mlp = self.mlp(0)
        return any(hasattr(mlp, n) for n in ("gate_proj", "w1", *_FUSED_GATE_UP))

    def _rotary(self) -> bool:
        return self.family not in NO_ROTARY

    def _rotary_dims(self) -> int:
        """Dimensions of each q/k head that RoPE rotates: all of them, or the first `rotary_dim` (GPT-J, CodeGen),
        or `partial_rotary_factor` x d_head (GPT-NeoX/Pythia, Phi, StableLM; older configs: `rotary_pct`)."""
        if not self.rotary:
            return 0
        c = self.config
        if getattr(c, "rotary_dim", None):
            return min(self.d_head, int(c.rotary_dim))
        rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
        frac = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
        frac = frac or getattr(c, "partial_rotary_factor", None) or getattr(c, "rotary_pct", None) or 1.0
        return int(self.d_head * float(frac))

    def rope_partner(self, dim: int) -> int | None:
        """The dimension of a q/k head that RoPE rotates together with `dim`; None where `dim` is not rotated."""
        r = self.rotary_dims
        if not 0 <= dim < r:
            return None
        if self.rotary_interleaved:
            return dim ^ 1
        return dim + r // 2 if dim < r // 2 else dim - r // 2

    def name_of(self, module: Any) -> str:
        return self._names[id(module)]

    # -- parts ------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def attn(self, layer: int) -> Any:
        return self._first(self.layers[layer], _ATTN, "attention")

    def mlp(self, layer: int) -> Any:
        return self._first(self.layers[layer], _MLP, "MLP")

    def norm(self, layer: int, where: str) -> Any | None:
        """The norm at `where` ("attn_in", "attn_out", "mlp_in", "mlp_out") of a layer, None where the family
        has none there (OLMo 2 has no input norms; Llama no output norms; GPT-J shares ln_1 for both inputs)."""
        block = self.layers[layer]
        post_attn = getattr(block, "post_attention_layernorm", None)
        sandwich = hasattr(block, "post_feedforward_layernorm")  # Gemma 2/3, OLMo 2: post_attention is an output norm
        if where == "attn_out":
            return post_attn if sandwich else None
        if where == "mlp_in":
            found = self._first(block, _NORMS["mlp_in"], "", required=False)
            if found is not None:
                return found
            if post_attn is not None and not sandwich:
                return post_attn
            if self.family == "gptj":
                return block.ln_1
            return None
        return self._first(block, _NORMS[where], "", required=False)

    def embed(self) -> Any:
        return self.hf.get_input_embeddings()

    def unembed(self, x: Tensor, last_only: bool = False) -> Tensor:
        """Final norm, the unembedding and the family's output scaling: (..., d_model) -> (..., d_vocab).
        `last_only`: x is (batch, pos, d_model) and only the last position is unembedded, (batch, 1, d_vocab) (the
        norm still runs over every position, so the numbers equal the full forward's sliced logits)."""
        h = self.final_norm(x)
        if last_only:
            h = h[:, -1:]
        return self.scale_logits(self.hf.get_output_embeddings()(h))

    def scale_logits(self, logits: Tensor) -> Tensor:
        """The family's output scaling and soft-capping applied to unembedded logits (identity for most)."""
        if self.logit_scale is not None:
            logits = logits * self.logit_scale
        if self.logits_scaling not in (None, 1, 1.0):
            logits = logits / self.logits_scaling
        if self.final_softcap:
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        return logits

    # -- projections --------------------------------------------------------------------
    def proj(self, layer: int, role: str) -> Proj:
        """The neuron-indexed view of projection `role` (see ROLES) of `layer`."""
        if role not in ROLES:
            raise ValueError(f"unknown projection role {role!r}; one of {', '.join(ROLES)}")
        key = (layer, role)
        if key not in self._proj:
            self._proj[key] = self._build_proj(layer, role)
        return self._proj[key]

    def _build_proj(self, layer: int, role: str) -> Proj:
        parent = self.attn(layer) if role in ("q", "k", "v", "o") else self.mlp(layer)
        if role == "gate" and not self.gated:
            raise UnsupportedModel(f"{self.arch}: its MLP has no gate projection (not a gated MLP)")
        mod = self._first(parent, _PROJ[role], f"{role} projection", required=False)
        if mod is not None:
            w_axis_out, n_out, n_in = self._layout(mod)
            axis = (1 - w_axis_out) if role in _INPUT_ROLES else w_axis_out
            n = n_in if role in _INPUT_ROLES else n_out
            return self._view(mod, axis, torch.arange(n), role)
        if role in ("q", "k", "v"):
            fused = self._first(parent, _FUSED_QKV, f"{role} projection (separate or fused q/k/v)")
            return self._view(fused, self._layout(fused)[0], self._qkv_index(role), role)
        if role in ("gate", "up"):
            fused = self._first(parent, _FUSED_GATE_UP, f"{role} projection (separate or fused gate/up)")
            w_axis_out, n_out, _ = self._layout(fused)
            half = n_out // 2  # Phi-3: gate, up = gate_up_proj(x).chunk(2, dim=-1)
            idx = torch.arange(half) + (0 if role == "gate" else half)
            return self._view(fused, w_axis_out, idx, role)
        raise UnsupportedModel(f"{self.arch}: cannot find the {role} projection of layer {layer}")

    @staticmethod
    def _layout(mod: Any) -> tuple[int, int, int]:
        """(weight axis of the outputs, n outputs, n inputs): nn.Linear stores (out, in), Conv1D (in, out)."""
        w = mod.weight
        if type(mod).__name__ == "Conv1D":
            return 1, w.shape[1], w.shape[0]
        return 0, w.shape[0], w.shape[1]

    def _qkv_index(self, role: str) -> Tensor:
        """Where q/k/v neuron (head, d) sits in a fused projection's outputs."""
        h, kv, dh = self.n_heads, self.n_kv_heads, self.d_head
        if self.family == "gpt_neox":  # per head [q | k | v], each d_head wide
            off = {"q": 0, "k": dh, "v": 2 * dh}[role]
            return (torch.arange(h)[:, None] * 3 * dh + off + torch.arange(dh)[None, :]).reshape(-1)
        sizes = {"q": h * dh, "k": kv * dh, "v": kv * dh}  # [q | k | v] contiguous (GPT-2 c_attn, Phi-3 qkv_proj)
        start = {"q": 0, "k": sizes["q"], "v": sizes["q"] + sizes["k"]}[role]
        return torch.arange(sizes[role]) + start

    def _view(self, mod: Any, axis: int, index: Tensor, role: str) -> Proj:
        name = self.name_of(mod)
        bias = name + ".bias" if getattr(mod, "bias", None) is not None else None
        return Proj(name + ".weight", bias, axis, index.long(), role not in _INPUT_ROLES)

    # -- summary ----------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What the manifest records about the architecture's layout."""
        return {
            "family": self.family, "gated_mlp": self.gated, "rotary": self.rotary,
            "rotary_dims": self.rotary_dims, "rotary_interleaved": self.rotary_interleaved,
            "parallel_block": self.parallel,
            "qk_norm": self.qk_norm, "sliding_window": self.sliding_window, "attn_softcap": self.attn_softcap,
            "final_softcap": self.final_softcap,
            "fused_qkv": self._first(self.attn(0), _FUSED_QKV, "", False) is not None,
            "fused_gate_up": self._first(self.mlp(0), _FUSED_GATE_UP, "", False) is not None,
        }

