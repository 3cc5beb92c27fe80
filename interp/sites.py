"""Site: a named place in the model. The only module that knows TransformerLens hook names.

Every site's activation is presented to capture and interventions as
``(batch, pos, *unit_dims)``; `token_first` / `token_restore` convert the attention pattern
(``batch head q k``) to and from that layout.
"""

from __future__ import annotations

from dataclasses import dataclass

# kind -> (TransformerLens hook name template, HF module path template + "out"/"in", unit layout)
_SITES: dict[str, tuple[str, str, str]] = {
    "embed": ("hook_embed", "embed:out", "d_model"),
    "resid_pre": ("blocks.{l}.hook_resid_pre", "layer:in", "d_model"),
    "resid_mid": ("blocks.{l}.hook_resid_mid", "post_attention_layernorm:in", "d_model"),
    "resid_post": ("blocks.{l}.hook_resid_post", "layer:out", "d_model"),
    "attn_in": ("blocks.{l}.ln1.hook_out", "input_layernorm:out", "d_model"),
    "attn_q": ("blocks.{l}.attn.hook_q", "q_proj:out", "head d_head"),
    "attn_k": ("blocks.{l}.attn.hook_k", "k_proj:out", "kv_head d_head"),
    "attn_v": ("blocks.{l}.attn.hook_v", "v_proj:out", "kv_head d_head"),
    "attn_rot_q": ("blocks.{l}.attn.hook_rot_q", "", "head d_head"),
    "attn_rot_k": ("blocks.{l}.attn.hook_rot_k", "", "kv_head d_head"),
    "attn_scores": ("blocks.{l}.attn.hook_attn_scores", "", "head key"),
    "attn_pattern": ("blocks.{l}.attn.hook_pattern", "", "head key"),
    "attn_z": ("blocks.{l}.attn.hook_z", "o_proj:in", "head d_head"),
    "attn_out": ("blocks.{l}.hook_attn_out", "self_attn:out", "d_model"),
    "mlp_in": ("blocks.{l}.mlp.hook_in", "mlp:in", "d_model"),
    "mlp_gate": ("blocks.{l}.mlp.hook_pre", "gate_proj:out", "d_mlp"),
    "mlp_up": ("blocks.{l}.mlp.hook_pre_linear", "up_proj:out", "d_mlp"),
    "mlp_post": ("blocks.{l}.mlp.hook_post", "down_proj:in", "d_mlp"),
    "mlp_out": ("blocks.{l}.hook_mlp_out", "mlp:out", "d_model"),
    "final": ("ln_final.hook_out", "norm:out", "d_model"),
    "logits": ("unembed.hook_out", "lm_head:out", "d_vocab"),
}
_PATTERN_KINDS = ("attn_scores", "attn_pattern")
_GLOBAL_KINDS = ("embed", "final", "logits")
KINDS = tuple(_SITES)

#: What each backend can do: site kinds it hooks, and "edit:<kind>" for sites it can also modify.
#: Probes list what they need in their config's REQUIRES; runs check it before any model loads.
CAPABILITIES: dict[str, frozenset[str]] = {
    "tl": frozenset(KINDS) | {f"edit:{k}" for k in KINDS},
    "nnsight": frozenset(k for k in KINDS if k not in ("attn_rot_q", "attn_rot_k", "attn_scores"))
    | {f"edit:{k}" for k in KINDS if k not in ("attn_rot_q", "attn_rot_k", "attn_scores", "attn_pattern")},
}


@dataclass(frozen=True, order=True)
class Site:
    """A place in the model: `kind` (see KINDS) at `layer` (None for embed/final/logits)."""

    kind: str
    layer: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in _SITES:
            raise ValueError(f"unknown site kind {self.kind!r}; known: {', '.join(KINDS)}")
        if (self.kind in _GLOBAL_KINDS) != (self.layer is None):
            need = "no layer" if self.kind in _GLOBAL_KINDS else "a layer"
            raise ValueError(f"site {self.kind!r} takes {need}")

    @classmethod
    def parse(cls, text: str) -> "Site":
        """ "resid_pre.3" / "resid_pre(3)" / "final" -> Site."""
        t = text.strip().replace("(", ".").rstrip(")")
        kind, _, layer = t.partition(".")
        return cls(kind, int(layer) if layer else None)

    @classmethod
    def from_tl_name(cls, name: str) -> "Site":
        """The Site of a TransformerLens hook name ("blocks.6.hook_resid_post" -> resid_post.6)."""
        import re

        for kind, (template, _, _) in _SITES.items():
            pattern = "^" + re.escape(template).replace(re.escape("{l}"), r"(\d+)") + "$"
            m = re.match(pattern, name)
            if m:
                return cls(kind, int(m.group(1)) if m.groups() else None)
        raise ValueError(f"hook name {name!r} is not a known site; known kinds: {', '.join(KINDS)}")

    def __str__(self) -> str:
        return self.kind if self.layer is None else f"{self.kind}.{self.layer}"

    @property
    def tl_name(self) -> str:
        """The TransformerLens (TransformerBridge) hook name."""
        return _SITES[self.kind][0].format(l=self.layer)

    @property
    def hf_point(self) -> tuple[str, str]:
        """(module role, "in" | "out") for backends that hook HF modules; role "" if unsupported."""
        role, _, side = _SITES[self.kind][1].partition(":")
        return role, side

    @property
    def units(self) -> str:
        """Layout of the unit dims after (batch, pos)."""
        return _SITES[self.kind][2]

    @property
    def is_pattern(self) -> bool:
        return self.kind in _PATTERN_KINDS


def token_first(site: Site, x):
    """View of activation `x` as (batch, pos, *units)."""
    return x.transpose(1, 2) if site.is_pattern else x


def token_restore(site: Site, x):
    """Inverse of token_first."""
    return x.transpose(1, 2) if site.is_pattern else x


def resid_pre(layer: int) -> Site:
    return Site("resid_pre", layer)


def resid_post(layer: int) -> Site:
    return Site("resid_post", layer)


def mlp_post(layer: int) -> Site:
    return Site("mlp_post", layer)


def attn_pattern(layer: int) -> Site:
    return Site("attn_pattern", layer)
