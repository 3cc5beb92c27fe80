"""Site: a named place in the model. The only module that knows TransformerLens hook names.

Every site's activation is presented to capture and interventions as
``(batch, pos, *unit_dims)``; `token_first` / `token_restore` convert the attention pattern
(``batch head q k``) to and from that layout.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# kind -> (TransformerLens hook name template, unit layout after (batch, pos))
_SITES: dict[str, tuple[str, str]] = {
    "embed": ("hook_embed", "d_model"),
    "resid_pre": ("blocks.{l}.hook_resid_pre", "d_model"),
    "resid_mid": ("blocks.{l}.hook_resid_mid", "d_model"),
    "resid_post": ("blocks.{l}.hook_resid_post", "d_model"),
    "attn_in": ("blocks.{l}.ln1.hook_out", "d_model"),
    "attn_q": ("blocks.{l}.attn.hook_q", "head d_head"),
    "attn_k": ("blocks.{l}.attn.hook_k", "kv_head d_head"),
    "attn_v": ("blocks.{l}.attn.hook_v", "kv_head d_head"),
    "attn_rot_q": ("blocks.{l}.attn.hook_rot_q", "head d_head"),
    "attn_rot_k": ("blocks.{l}.attn.hook_rot_k", "kv_head d_head"),
    "attn_scores": ("blocks.{l}.attn.hook_attn_scores", "head key"),
    "attn_pattern": ("blocks.{l}.attn.hook_pattern", "head key"),
    "attn_z": ("blocks.{l}.attn.hook_z", "head d_head"),
    "attn_out": ("blocks.{l}.hook_attn_out", "d_model"),
    "mlp_in": ("blocks.{l}.mlp.hook_in", "d_model"),
    "mlp_gate": ("blocks.{l}.mlp.hook_pre", "d_mlp"),
    "mlp_up": ("blocks.{l}.mlp.hook_pre_linear", "d_mlp"),
    "mlp_post": ("blocks.{l}.mlp.hook_post", "d_mlp"),
    "mlp_out": ("blocks.{l}.hook_mlp_out", "d_model"),
    "final": ("ln_final.hook_out", "d_model"),
    "logits": ("unembed.hook_out", "d_vocab"),
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
        """ "resid_pre.3" / "resid_pre(3)" / "final" -> Site (see `parse_site` for every form configs take)."""
        t = text.strip().replace("(", ".").rstrip(")")
        kind, _, layer = t.partition(".")
        try:
            return cls(kind, int(layer) if layer else None)
        except ValueError as e:
            raise ValueError(f"site {text!r}: {e}") from None

    @classmethod
    def from_tl_name(cls, name: str) -> "Site":
        """The Site of a TransformerLens hook name ("blocks.6.hook_resid_post" -> resid_post.6)."""
        for kind, (template, _) in _SITES.items():
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
    def units(self) -> str:
        """Layout of the unit dims after (batch, pos)."""
        return _SITES[self.kind][1]

    @property
    def is_pattern(self) -> bool:
        return self.kind in _PATTERN_KINDS


#: Site kinds inside one decoder layer, in the order the TransformerLens bridge fires them.
_FORWARD = ("resid_pre", "attn_in", "attn_q", "attn_k", "attn_v", "attn_rot_q", "attn_rot_k", "attn_scores",
            "attn_pattern", "attn_z", "attn_out", "resid_mid", "mlp_in", "mlp_gate", "mlp_up", "mlp_post", "mlp_out",
            "resid_post")


_NORM_SCALE = re.compile(r"^(blocks\.\d+\.ln[^.]*|ln_final)\.hook_scale$")
_PATTERN = re.compile(r"^blocks\.\d+\.attn\.hook_pattern$")


def linearizing_points(hook_names: list[str]) -> list[str]:
    """The hook points whose values, held fixed, make the residual stream linear in what the MLPs and embeddings
    write (the local replacement model of attribution graphs): every block norm's and the final norm's
    denominator (`ln*.hook_scale`; a q/k norm only feeds the pattern) and every attention pattern."""
    return sorted(n for n in hook_names if _NORM_SCALE.match(n) or _PATTERN.match(n))


def forward_rank(site: Site) -> tuple[int, int]:
    """Where `site` fires along the forward (sortable): embed first, then layer by layer, then final and logits."""
    if site.layer is None:
        return {"embed": (-1, 0), "final": (10**6, 0), "logits": (10**6, 1)}[site.kind]
    return (site.layer, _FORWARD.index(site.kind))


def depth_layer(frac: float, n_layers: int) -> int:
    """The layer at depth fraction `frac` (0 = first, 1 = last) of an `n_layers` model: floor(frac * n_layers +
    0.5), clamped to the layers. 0.2 is layer 6 of SmolLM2's 30, 4 of Gemma 3 270M's 18, 1 of a 4-layer model."""
    return max(0, min(n_layers - 1, math.floor(frac * n_layers + 0.5)))


def parse_site(text: str, n_layers: int | None = None) -> Site:
    """A site from any of the forms a config or the CLI takes: a TransformerLens hook name
    ("blocks.6.hook_resid_post"), a site name ("resid_post.6", "resid_post(6)"), a negative index counted from the
    last layer ("resid_post.-1") or a depth fraction ("resid_post@0.2", see `depth_layer`). The last two need
    `n_layers`; ValueError names what is wrong."""
    t = text.strip()
    kind, at, frac = t.partition("@")
    if at:
        try:
            f = float(frac)
        except ValueError:
            raise ValueError(f"site {text!r}: the depth after @ must be a number in [0, 1]") from None
        if not 0 <= f <= 1:
            raise ValueError(f"site {text!r}: the depth after @ must be in [0, 1]")
        if n_layers is None:
            raise ValueError(f"site {text!r}: a depth fraction needs the model's number of layers")
        return Site(kind.strip(), depth_layer(f, n_layers))
    try:
        return Site.from_tl_name(t)
    except ValueError:
        pass
    site = Site.parse(t)
    if site.layer is not None and site.layer < 0:
        if n_layers is None:
            raise ValueError(f"site {text!r}: a negative layer needs the model's number of layers")
        if site.layer < -n_layers:
            raise ValueError(f"site {text!r}: layer {site.layer} is below -{n_layers}")
        site = Site(site.kind, n_layers + site.layer)
    return site


def site_kind(text: str) -> str:
    """The kind of a site text in any `parse_site` form, checking its syntax without the model's depth."""
    return parse_site(text, n_layers=10**9).kind


def concrete_site(text: str, n_layers: int | None) -> str:
    """`text` as a TransformerLens hook name of a concrete layer when it is depth-relative and `n_layers` is known
    (the form the run and its manifest record); `text` unchanged otherwise."""
    t = text.strip()
    relative = "@" in t or bool(re.search(r"[.(]-\d", t))
    if not relative or n_layers is None:
        return text
    return parse_site(t, n_layers).tl_name


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
