"""The hooked model: `ModelInfo` (the architecture, as the manifest records it) and `Model` (named sites, whatever
backend serves the hooks; tokens; the unembedding and weights through `interp.anatomy`)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .. import families
from ..errors import ConfigError
from ..sites import Site

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from ..anatomy import Anatomy

@dataclass(frozen=True)
class ModelInfo:
    """What a probe needs to know about the architecture, and what the manifest records."""

    name: str
    source: str
    arch: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_mlp: int
    d_vocab: int
    n_ctx: int
    chat: bool
    """The tokenizer has a chat template (instruct model)."""
    weights_sha256: str
    family: str = ""
    """Hugging Face `model_type` (llama, gemma3_text, gpt2, ...)."""
    site_fallbacks: dict[str, str] | None = None
    """Site kinds this family serves through another site's hook, with why (attn_rot_k -> attn_k: ...)."""
    bos_id: int | None = None
    """The BOS id the tokenizer puts before a text (`interp.data.bos_id`; Gemma's <bos>), None when it adds none."""
    attention: str = "eager"
    """How hooked forwards compute attention: "sdpa where unhooked" (tl: a layer runs the bridge's eager
    reconstruction only while a hook reads inside its attention: `interp._bridge.attention_on_demand`), "sdpa
    unless a pattern is read" (nnsight: every layer eager for a forward that reads a pattern) or "eager" (every
    layer, always: families without an SDPA path, or attention="eager")."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


HookFn = Callable[["Tensor"], "Tensor | None"]


class _StopForward(Exception):
    """Raised from a hook by Model.forward_until once its site has fired."""

_HOOK_LEVELS = itertools.count(1_000_000)
"""Context levels of Model.hooks: unique per context, so exiting one removes only its own hooks."""


class Model:
    """A causal LM with named sites, whatever backend serves the hooks.

    ``hf`` is the plain Hugging Face model (no hooks fire in it; fast cached generation and
    weight edits go through it, its parameters shared with the hooked backend), ``tokenizer``
    its tokenizer, ``info`` the architecture. Hook functions take the site's activation
    (in its native layout) and return a replacement or None.
    """

    backend = "tl"

    def __init__(self, hf: Any, tokenizer: Any, info: ModelInfo, device: str, dtype: "torch.dtype", bridge: Any = None):
        self.hf, self.tokenizer, self.info = hf, tokenizer, info
        self.device, self.dtype = device, dtype
        self.bridge = bridge

    # -- hooks ------------------------------------------------------------------------
    @contextlib.contextmanager
    def hooks(self, pairs: Sequence[tuple[Site, HookFn]]) -> Iterator[None]:
        """Run the enclosed forwards with `fn(activation)` at each site.

        Hooks go straight onto the bridge's HookPoints (looked up once per model): the bridge's own
        `hooks()` rebuilds its alias table for every hook added (~50 ms each, 1.2 s for 180 hooks).
        """
        named = []
        for site, fn in pairs:
            self.check_site(site)
            named.append((self.served(site).tl_name, fn, site))
        with self._hooks_by_name(named):
            yield

    @contextlib.contextmanager
    def hooks_by_name(self, pairs: Sequence[tuple[str, HookFn]]) -> Iterator[None]:
        """`hooks` at TransformerLens hook names (from `interp.sites`: e.g. `linearizing_points`), for plumbing
        that no `Site` kind names."""
        with self._hooks_by_name([(name, fn, name) for name, fn in pairs]):
            yield

    @contextlib.contextmanager
    def _hooks_by_name(self, named: Sequence[tuple[str, HookFn, Any]]) -> Iterator[None]:
        points = self._hook_points()
        level = next(_HOOK_LEVELS)
        added = []
        try:
            for name, fn, what in named:
                self.bridge.check_hooks_to_add(name)  # gated-off points raise, as bridge.hooks() does
                if name not in points:
                    raise KeyError(f"{self.info.name} has no hook point {name!r} ({what})")
                points[name].add_hook((lambda f: lambda x, hook: f(x))(fn), dir="fwd", level=level)
                added.append(points[name])
            yield
        finally:
            for hp in added:
                hp.remove_hooks(dir="fwd", level=level)

    def hook_names(self) -> list[str]:
        """Every hook point name of the bridge (canonical names and aliases)."""
        return list(self._hook_points())

    def _hook_points(self) -> dict[str, Any]:
        if getattr(self, "_points", None) is None:
            self._points = self.bridge.hook_dict  # canonical names and their aliases -> HookPoint
        return self._points

    def check_site(self, site: Site) -> None:
        if site.layer is not None and not 0 <= site.layer < self.info.n_layers:
            raise ConfigError("layer", site.layer, f"0..{self.info.n_layers - 1} for {self.info.name}")
        if site.kind == "mlp_up" and self.info.family in families.NOT_GATED:
            why = families.unsupported("mlp_up", self.info.family)
            raise ConfigError("site", str(site), f"a site of {self.info.arch}: mlp_up {why}")

    def served(self, site: Site) -> Site:
        """The site whose hook serves `site` on this family (attn_rot_q/k -> attn_q/k where the family has no
        rotary hook: `info.site_fallbacks` says so, and the manifest records it)."""
        fb = families.site_fallback(site.kind, self.info.family)
        return site if fb is None else Site(fb[0], site.layer)

    # -- forward ----------------------------------------------------------------------
    def forward(self, input_ids: "Tensor", attention_mask: "Tensor | None" = None) -> "Tensor":
        """Logits (batch, pos, d_vocab) through the hooked model (position ids from the mask)."""
        input_ids = input_ids.to(self.device)
        if attention_mask is None:
            return self.bridge(input_ids)
        return self.bridge(input_ids, attention_mask=attention_mask.to(self.device))

    __call__ = forward

    def forward_until(self, input_ids: "Tensor", site: Site, attention_mask: "Tensor | None" = None) -> "Tensor":
        """A hooked forward that stops right after `site`'s hooks (those of enclosing `hooks()` contexts first)
        and returns its activation: nothing above the site is computed (no final norm, no unembedding)."""
        got: list[Tensor] = []

        def stop(x: "Tensor") -> None:
            got.append(x)
            raise _StopForward

        with self.hooks([(site, stop)]):
            try:
                self.forward(input_ids, attention_mask)
            except _StopForward:
                pass
        if not got:
            raise RuntimeError(f"site {site} never fired on {self.info.name}")
        return got[0]

    # -- tokens -----------------------------------------------------------------------
    def chat_text(
        self, user: str, system: str | None = None, assistant: str | None = None, generation_prompt: bool = True
    ) -> str:
        """The chat-templated string (instruct models) or the plain text (base models).

        system=None keeps the template's default system prompt; "" passes an empty one.
        """
        if not self.info.chat:
            parts = [system or "", user, assistant or ""]
            return "\n\n".join(p for p in parts if p)
        msgs = ([] if system is None else [{"role": "system", "content": system}]) + [{"role": "user", "content": user}]
        if assistant is not None:
            msgs.append({"role": "assistant", "content": assistant})
            generation_prompt = False
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=generation_prompt)

    def tokenize(
        self,
        texts: str | Sequence[str],
        *,
        padding_side: str = "right",
        max_length: int | None = None,
        templated: bool = False,
    ) -> dict[str, "Tensor"]:
        """input_ids and attention_mask (batch, pos). BOS follows the tokenizer's add_bos_token;
        `templated=True` texts (already chat-formatted, BOS included) get no special tokens."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        tok = self.tokenizer
        old = tok.padding_side
        tok.padding_side = padding_side
        try:
            enc = tok(
                texts,
                return_tensors="pt",
                padding=True,
                truncation=max_length is not None,
                max_length=max_length,
                add_special_tokens=not templated,
            )
        finally:
            tok.padding_side = old
        return {"input_ids": enc["input_ids"].to(self.device), "attention_mask": enc["attention_mask"].to(self.device)}

    def to_str_tokens(self, ids: "Tensor | Sequence[int]") -> list[str]:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return [self.tokenizer.decode([i]) for i in ids]

    # -- weights ----------------------------------------------------------------------
    @property
    def anatomy(self) -> "Anatomy":
        """Where each part of the model lives (`interp.anatomy`), built once from `hf`."""
        if getattr(self, "_anatomy", None) is None:
            from ..anatomy import Anatomy

            self._anatomy = Anatomy(self.hf)
        return self._anatomy

    def layer_module(self, layer: int) -> Any:
        """The HF decoder layer `layer` (weight edits address its submodules)."""
        return self.anatomy.layers[layer]

    @property
    def unembed_weight(self) -> "Tensor":
        return self.hf.get_output_embeddings().weight

    def final_norm(self, x: "Tensor") -> "Tensor":
        return self.anatomy.final_norm(x)

    def unembed(self, x: "Tensor", last_only: bool = False) -> "Tensor":
        """Final norm, unembedding and the family's logit scaling: (..., d_model) -> (..., d_vocab); `last_only`
        unembeds the last position of (batch, pos, d_model) only."""
        return self.anatomy.unembed(x, last_only)
