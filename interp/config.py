"""Probe configs: typed frozen dataclasses, sizes, dotted overrides, validation and hashing.

Nothing here imports torch: the CLI builds and validates a config before any heavy import.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, ClassVar, Literal

from .config_fields import (  # noqa: F401  (re-exported: interp.config is where callers import them from)
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Range,
    Subset,
    _build,
    _default_of,
    allowed,
    check_ranges,
    describe,
    field_docs,
)
from .errors import ConfigError, did_you_mean

SIZES = ("micro", "quick", "default")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:[0-9]+)?)$")


@dataclass(frozen=True)
class ModelLimits:
    """What the pre-load checks know of the model without its weights (None where unknown)."""

    n_layers: int | None = None
    n_ctx: int | None = None
    """Context length (max_position_embeddings)."""
    count_tokens: Callable[[str], int] | None = None
    """Tokens of a text without special tokens, by the model's own tokenizer (torch-free)."""


@dataclass(frozen=True)
class SAESource:
    """The SAE a probe reads, as its `sae` field (`--set sae.source=...`): which one, at which site, and the size of
    the one the toolkit trains. A probe's default sets each field it uses; a field it leaves None there it does not
    use (it fixes or derives that value, or names the site in a field of its own), and a value for it is refused."""

    source: str = "train"
    """"train" (the probe's own SAE, trained by the toolkit, reused from the SAE cache where it may) or an
    `interp.load_sae` spec: a SAELens directory, a run directory holding an SAE (atoms'), saelens:<release>/<sae_id>
    (online); a loaded SAE reads the hook its own config names."""
    hook: str | None = None
    """Site of the SAE to train: a residual-stream-like site of a layer as a TransformerLens hook name, a site name or a
    depth fraction (resid_post@0.3: 30 % of depth, layer 9 of SmolLM2's 30); null where the probe's own field names
    the site of everything it measures (atoms: `hook`; self_interp: resid_post of `layer`)."""
    cache: bool | None = True
    """Reuse a trained SAE from the content-addressed SAE cache when the model, hook, training config and data
    match (atoms: its TSAE too)."""
    d_sae: PositiveInt | None = None
    """Latents of the trained SAE."""
    train_tokens: Annotated[int, Range(16, 1_000_000_000)] | None = None
    """Tokens the trained SAE learns from (positions >= 1 only)."""
    steps: Annotated[int, Range(1, 1_000_000)] | None = None
    """Training steps of the trained SAE (batches of 1024 tokens)."""

    def check(self, name: str, default: "SAESource") -> None:
        """ConfigError unless the fields `default` (the probe's) sets are set and the others None, the source
        resolves (no download) and the hook is a residual-stream-like site of a layer."""
        for f in fields(self):
            value, used = getattr(self, f.name), getattr(default, f.name) is not None
            if (value is not None) != used:
                raise ConfigError(f"{name}.{f.name}", value, "a value" if used else "null: this probe does not use it")
        if self.source != "train":
            from .sae.source import resolve_sae_spec

            resolve_sae_spec(self.source, f"{name}.source")
        if self.hook is not None:
            from .sites import Site, site_kind

            try:
                kind = site_kind(self.hook)
            except ValueError:
                raise ConfigError(f"{name}.hook", self.hook, "a TransformerLens hook name (blocks.6.hook_resid_post), "
                                  "a site name (resid_post.6) or a depth (resid_post@0.2)") from None
            if kind in ("embed", "final", "logits") or Site(kind, 0).units != "d_model":
                raise ConfigError(f"{name}.hook", self.hook, "a residual-stream-like hook of a layer "
                                  "(hook_resid_pre/mid/post, hook_attn_out, hook_mlp_out)")


@dataclass(frozen=True)
class ProbeConfig:
    """Fields every probe shares. Subclasses add their own, each with a docstring."""

    IS_PROBE_CONFIG: ClassVar[bool] = True
    """Marks a probe config for `interp.registry.probe` (which imports no config module)."""

    @classmethod
    def build(cls, overrides: dict[str, Any] | None = None) -> ProbeConfig:
        """`build_config(cls, overrides)`: defaults, the size preset, then the overrides, validated."""
        return build_config(cls, overrides)

    model: str = "smollm2-135m"
    """Embedded model name, Hugging Face id, or local directory."""
    backend: Literal["tl", "nnsight"] = "tl"
    """Hook backend: TransformerLens TransformerBridge ("tl") or nnsight ("nnsight")."""
    device: str = "auto"
    """"auto" (CUDA when present), "cpu", "cuda" or "cuda:N"."""
    dtype: str | None = None
    """None (float32 on CPU, bfloat16 on GPU), "float32", "bfloat16" or "float16"."""
    seed: NonNegativeInt = 0
    """Seed of every random choice the probe makes."""
    size: Literal["micro", "quick", "default"] = "default"
    """micro (<= 20 s), quick (the tests and demo: 10 s to a few minutes each alone on 2 CPU cores, more with
    cold caches or shared cores; measured in the README's demo section), default (the method's acceptance
    size)."""
    remote: bool = False
    """nnsight backend only: run on a remote NDIF server (key from NDIF_API_KEY)."""

    #: Field overrides per size; a subclass fills it. Explicit user values win over these.
    SIZE_PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    #: Backend capabilities the probe needs: site kinds it reads ("attn_rot_q") and ones it
    #: modifies ("edit:attn_pattern"); see interp.sites.CAPABILITIES.
    REQUIRES: ClassVar[tuple[str, ...]] = ()
    #: Site kinds the method needs exactly as named, on the model's family (interp.families.unsupported): a
    #: family that can serve them only approximately (pre-rotation keys) or not at all is refused before loading.
    NEEDS_EXACT: ClassVar[tuple[str, ...]] = ()
    #: Fields naming a site (a string, or a tuple of strings) in any form `interp.sites.parse_site` takes,
    #: depth-relative ones included ("resid_post@0.2", "resid_post.-1"); `at_depth` makes them concrete.
    SITE_FIELDS: ClassVar[tuple[str, ...]] = ()
    #: Fields naming a layer (an int, or a tuple of ints): an index, a negative index from the last layer, or a
    #: depth fraction written "@0.3" (see interp.sites.depth_layer); `at_depth` makes fractions indices.
    LAYER_FIELDS: ClassVar[tuple[str, ...]] = ()
    #: Token-length fields (dotted for nested configs) that must fit in the model's context.
    CONTEXT_FIELDS: ClassVar[tuple[str, ...]] = ()

    def validate(self) -> None:
        """Every field's declared Range and Subset (`check_ranges`) and SAESource rules, then checks beyond types;
        subclasses add their cross-field rules after calling super().validate()."""
        check_ranges(self)
        for f in fields(self):
            if isinstance(getattr(self, f.name), SAESource):
                getattr(self, f.name).check(f.name, _default_of(f))
        for name in self.LAYER_FIELDS:
            value = self.field_value(name)
            for v in value if isinstance(value, tuple) else (value,):
                _layer_at(name, v, 10**9)  # the syntax of "@0.3" forms
        if not _DEVICE.match(self.device):
            raise ConfigError("device", self.device, 'one of "auto", "cpu", "cuda", "cuda:N" (N a GPU index)')
        if self.dtype not in (None, "float32", "bfloat16", "float16"):
            raise ConfigError("dtype", self.dtype, 'None, "float32", "bfloat16" or "float16"')
        if self.remote and self.backend != "nnsight":
            raise ConfigError("remote", self.remote, "remote execution needs backend=nnsight")

    def validate_for_model(self, n_layers: int | None) -> None:
        """Checks that need the model's size (layer indices); runs before the weights load."""

    def validate_data(self, limits: ModelLimits) -> None:
        """Checks of what the run will feed the model that need no weights; runs after `validate_for_model`.

        Here: every CONTEXT_FIELDS length against the model's context. Subclasses that read user data extend it
        (call super()) to read the files their fields name (`interp.data.check_source`, `interp.data.read_jsonl`)
        and count their prompts' tokens with `limits.count_tokens`, so bad data fails before the model loads.
        """
        if limits.n_ctx is None:
            return
        for name in self.CONTEXT_FIELDS:
            value = self.field_value(name)
            if value > limits.n_ctx:
                raise ConfigError(name, value, f"at most the context of {self.model} ({limits.n_ctx} tokens)")

    def at_depth(self, n_layers: int | None) -> "ProbeConfig":
        """This config with every SITE_FIELDS value at a concrete layer of an `n_layers` model (a TransformerLens
        hook name), so the run, its manifest and its config hash name the layer it used; unchanged if unknown."""
        from .sites import concrete_site

        if n_layers is None or not (self.SITE_FIELDS or self.LAYER_FIELDS):
            return self
        cfg = self
        for name in self.LAYER_FIELDS:
            value = cfg.field_value(name)
            new = (tuple(_layer_at(name, v, n_layers) for v in value) if isinstance(value, tuple)
                   else _layer_at(name, value, n_layers))
            cfg = _replace(cfg, name, new) if new != value else cfg
        for name in self.SITE_FIELDS:
            value = cfg.field_value(name)
            try:
                new = (tuple(concrete_site(v, n_layers) for v in value) if isinstance(value, tuple)
                       else value if value is None else concrete_site(value, n_layers))
            except ValueError as e:
                raise ConfigError(name, value, str(e)) from None
            cfg = _replace(cfg, name, new) if new != value else cfg
        return cfg

    def field_value(self, name: str) -> Any:
        """The value of field `name`, dotted for a nested config's ("sae.hook"), as SITE_FIELDS etc. name them."""
        value: Any = self
        for part in name.split("."):
            value = getattr(value, part)
        return value

    def check_site(self, name: str, value: str, n_layers: int | None) -> None:
        """ConfigError unless site text `value` names a layer of an `n_layers` model (skipped while the depth is
        unknown and the value is depth-relative)."""
        from .sites import parse_site

        try:
            site = parse_site(value, n_layers)
        except ValueError as e:
            if n_layers is None:
                return
            raise ConfigError(name, value, str(e)) from None
        self.check_layer(name, site.layer, n_layers)

    def check_layer(self, name: str, layer: int | None, n_layers: int | None) -> None:
        """ConfigError unless `layer` is None or a valid (possibly negative) layer index."""
        if layer is not None and n_layers is not None and not -n_layers <= layer < n_layers:
            raise ConfigError(name, layer, f"a layer index in [{-n_layers}, {n_layers - 1}] for {self.model}")


def _replace(cfg: Any, name: str, value: Any) -> Any:
    """`cfg` with field `name` (dotted for nested configs) set to `value`."""
    head, _, rest = name.partition(".")
    return dataclasses.replace(cfg, **{head: _replace(getattr(cfg, head), rest, value) if rest else value})


def _layer_at(name: str, value: Any, n_layers: int) -> Any:
    """A LAYER_FIELDS value with a depth fraction ("@0.3") made the layer index of an `n_layers` model."""
    if not isinstance(value, str):
        return value
    from .sites import depth_layer

    try:
        frac = float(value.removeprefix("@")) if value.startswith("@") else None
    except ValueError:
        frac = None
    if frac is None or not 0 <= frac <= 1:
        raise ConfigError(name, value, "a layer index or a depth fraction such as @0.3 (in [0, 1])")
    return depth_layer(frac, n_layers)



# ----------------------------------------------------------------------------- public


def parse_value(text: str) -> Any:
    """A --set value: JSON when it parses (numbers, booleans, lists, null), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{"sft.enable": True} -> {"sft": {"enable": True}}."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(key or "<empty>", value, "a field name such as top_p or sft.enable")
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(key, value, f"{p} is not a nested config")
        node[leaf] = value
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def build_config(cls: type[ProbeConfig], overrides: dict[str, Any] | None = None) -> ProbeConfig:
    """Config of class `cls`: defaults, then the size preset, then `overrides` (dotted keys ok).

    Raises ConfigError naming the field for any unknown key, wrong type or out-of-range value.
    """
    values = nest(dict(overrides or {}))
    size = values.get("size", "default")
    if size not in SIZES:
        raise ConfigError("size", size, did_you_mean(size, SIZES) + "one of " + ", ".join(SIZES))
    values = _merge(nest(cls.SIZE_PRESETS.get(size, {})), values)
    cfg = _build(cls, values)
    cfg.validate()
    return cfg


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain JSON-able dict of a config (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=list))


def config_hash(probe: str, cfg: Any) -> str:
    """sha256 of the probe name and the canonical config JSON (hex)."""
    blob = json.dumps({"probe": probe, "config": to_dict(cfg)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


__all__ = [
    "ModelLimits",
    "NonNegativeInt",
    "PositiveFloat",
    "PositiveInt",
    "ProbeConfig",
    "Range",
    "SAESource",
    "Subset",
    "build_config",
    "config_hash",
    "describe",
    "field",
    "parse_value",
    "to_dict",
    "SIZES",
]
