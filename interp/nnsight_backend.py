"""The nnsight backend: the same Sites, capture and interventions, traced with nnsight.

Sites map to HF module inputs/outputs (Llama, Gemma, Qwen and Mistral share the layout
``model.layers[l].{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, input_layernorm,
post_attention_layernorm}``; GPT-2's ``transformer.h[l].{attn.c_attn, attn.c_proj, mlp.c_fc,
mlp.c_proj}`` covers the residual, attention-output and MLP sites). nnsight runs the body of a
trace interleaved with the model, so a hook function receives a real tensor; sites are visited
in execution order. What a backend cannot do is listed in `CAPABILITIES` and checked before
any model loads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from .errors import InterpError
from .models import HookFn, Model
from .sites import CAPABILITIES, Site

# order of the sites inside one decoder layer (execution order)
_ORDER = ["resid_pre", "attn_in", "attn_q", "attn_k", "attn_v", "attn_z", "attn_pattern", "attn_out",
          "resid_mid", "mlp_in", "mlp_gate", "mlp_up", "mlp_post", "mlp_out", "resid_post"]


class NNsightModel(Model):
    """Model whose hooks are served by an nnsight LanguageModel over the same HF model."""

    backend = "nnsight"

    def __init__(self, hf: Any, tokenizer: Any, info, device: str, dtype: torch.dtype, remote: bool = False):
        from nnsight import LanguageModel

        super().__init__(hf, tokenizer, info, device, dtype, bridge=None)
        self.lm = LanguageModel(hf, tokenizer=tokenizer)
        self.remote = remote
        self._active: list[tuple[Site, HookFn]] = []
        self._gpt2 = hasattr(hf, "transformer") and hasattr(hf.transformer, "h")
        if remote:
            key = os.environ.get("NDIF_API_KEY")
            if not key:
                raise InterpError("remote=true needs an NDIF API key in the environment variable NDIF_API_KEY")
            from nnsight import CONFIG

            CONFIG.set_default_api_key(key)

    # -- hooks ------------------------------------------------------------------------
    @contextlib.contextmanager
    def hooks(self, pairs: Sequence[tuple[Site, HookFn]]) -> Iterator[None]:
        for site, _ in pairs:
            self.check_site(site)
        n = len(self._active)
        self._active.extend(pairs)
        try:
            yield
        finally:
            del self._active[n:]

    def check_site(self, site: Site) -> None:
        super().check_site(site)
        if site.kind not in supported_kinds(self._gpt2):
            raise InterpError(f"the nnsight backend has no site {site.kind!r} for {self.info.arch}; "
                              f"use backend=tl")

    def trace_kwargs(self) -> dict[str, Any]:
        """Arguments passed to nnsight's trace (remote execution on NDIF when asked)."""
        return {"remote": True} if self.remote else {}

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        input_ids = input_ids.to(self.device)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attention_mask = attention_mask.to(self.device)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        ordered = sorted(self._active, key=lambda p: _rank(p[0]))
        with self.lm.trace(inputs, **self.trace_kwargs()):
            for site, fn in ordered:
                self._visit(site, fn)
            logits = self.lm.output.logits.save()
        return logits

    __call__ = forward

    # -- site plumbing ----------------------------------------------------------------
    def _visit(self, site: Site, fn: HookFn) -> None:
        env, attr, index = self._point(site)
        value = getattr(env, attr)
        whole = value
        if index is not None:
            value = value[index]
        act = self._to_tl(site, value)
        new = fn(act)
        if new is None:
            return
        if site.is_pattern:
            raise InterpError("the nnsight backend cannot edit attention patterns (they are an output of the "
                              "attention here, not an input of its weighted sum); use backend=tl")
        new = self._from_tl(site, new, value)
        if index is None:
            setattr(env, attr, new)
        elif attr == "output" and isinstance(whole, tuple):
            setattr(env, attr, (new, *whole[1:]))
        else:
            value[...] = new

    def _point(self, site: Site) -> tuple[Any, str, Any]:
        """(nnsight envoy, "input" | "output", tuple index or None) for a site."""
        m = self.lm
        if self._gpt2:
            base = m.transformer
            if site.kind == "embed":
                return base.wte, "output", None
            if site.kind == "final":
                return base.ln_f, "output", None
            if site.kind == "logits":
                return m.lm_head, "output", None
            blk = base.h[site.layer]
            table = {"resid_pre": (blk, "input", None), "resid_post": (blk, "output", 0),
                     "attn_out": (blk.attn, "output", 0), "attn_pattern": (blk.attn, "output", 1),
                     "resid_mid": (blk.ln_2, "input", None), "mlp_in": (blk.mlp, "input", None),
                     "mlp_post": (blk.mlp.c_proj, "input", None), "mlp_out": (blk.mlp, "output", None),
                     "attn_in": (blk.ln_1, "output", None)}
            return table[site.kind]
        base = m.model
        if site.kind == "embed":
            return base.embed_tokens, "output", None
        if site.kind == "final":
            return base.norm, "output", None
        if site.kind == "logits":
            return m.lm_head, "output", None
        blk = base.layers[site.layer]
        attn, mlp = blk.self_attn, blk.mlp
        table = {
            "resid_pre": (blk, "input", None), "resid_post": (blk, "output", None),
            "attn_in": (blk.input_layernorm, "output", None),
            "attn_q": (attn.q_proj, "output", None), "attn_k": (attn.k_proj, "output", None),
            "attn_v": (attn.v_proj, "output", None), "attn_pattern": (attn, "output", 1),
            "attn_z": (attn.o_proj, "input", None), "attn_out": (attn, "output", 0),
            "resid_mid": (blk.post_attention_layernorm, "input", None),
            "mlp_in": (mlp, "input", None), "mlp_gate": (mlp.gate_proj, "output", None),
            "mlp_up": (mlp.up_proj, "output", None), "mlp_post": (mlp.down_proj, "input", None),
            "mlp_out": (mlp, "output", None),
        }
        return table[site.kind]

    def _heads(self, site: Site) -> int | None:
        if site.kind in ("attn_q", "attn_z"):
            return self.info.n_heads
        if site.kind in ("attn_k", "attn_v"):
            return self.info.n_kv_heads
        return None

    def _to_tl(self, site: Site, x: Tensor) -> Tensor:
        """HF layout -> the TransformerLens layout the hooks of the default backend see."""
        heads = self._heads(site)
        if heads is not None:
            return x.view(*x.shape[:2], heads, self.info.d_head)
        if site.kind == "resid_post" and self._gpt2 is False and isinstance(x, tuple):
            return x[0]
        return x

    def _from_tl(self, site: Site, new: Tensor, old: Tensor) -> Tensor:
        return new.reshape(old.shape).to(old.dtype)


def _rank(site: Site) -> tuple[int, int]:
    if site.kind == "embed":
        return (-1, 0)
    if site.kind in ("final", "logits"):
        return (10**6, 0 if site.kind == "final" else 1)
    return (site.layer, _ORDER.index(site.kind))


def supported_kinds(gpt2: bool = False) -> set[str]:
    """Site kinds this backend serves (the rotary q/k and pre-softmax scores live inside the
    attention forward of HF models and have no module boundary to trace)."""
    if gpt2:
        return {"embed", "final", "logits", "resid_pre", "resid_post", "attn_out", "attn_pattern", "resid_mid",
                "mlp_in", "mlp_post", "mlp_out", "attn_in"}
    return {k for k in CAPABILITIES["nnsight"] if not k.startswith("edit:")}
