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
from .generate import attention_implementation
from .models.model import HookFn, Model
from .sites import CAPABILITIES, Site, forward_rank


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
        with self._attention(any(site.is_pattern for site, _ in ordered)), \
                self.lm.trace(inputs, **self.trace_kwargs()):
            for site, fn in ordered:
                self._visit(site, fn)
            logits = self.lm.output.logits.save()
        return logits

    def _attention(self, pattern: bool) -> contextlib.AbstractContextManager[str]:
        """SDPA for this forward unless a site reads the pattern (HF's eager attention returns it as the module's
        second output), where `info.attention` allows it: the tl backend's numbers in every unhooked layer."""
        sdpa = not pattern and self.info.attention.startswith("sdpa")
        return attention_implementation(self.hf, "sdpa" if sdpa else "eager")

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
        """(nnsight envoy, "input" | "output", tuple index or None) for a site, from the model's anatomy."""
        part, side, index = _POINTS[site.kind]
        if site.kind == "resid_post" and self._gpt2:
            index = 0  # GPT-2's block returns (hidden, present, ...)
        a = self.anatomy
        if site.layer is None:
            module = {"embed": a.embed(), "final": a.final_norm, "logits": self.hf.get_output_embeddings()}[part]
        elif part in ("layer", "attn", "mlp"):
            module = a.layers[site.layer] if part == "layer" else getattr(a, part)(site.layer)
        elif part.startswith("norm:"):
            module = a.norm(site.layer, part[5:])
        else:  # "proj:<role>": the projection module itself (separate q/k/v/o, gate/up/down)
            module = self.hf.get_submodule(a.proj(site.layer, part[5:]).weight.rpartition(".")[0])
        envoy = self.lm
        for name in a.name_of(module).split("."):
            envoy = envoy[int(name)] if name.isdigit() else getattr(envoy, name)
        return envoy, side, index

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


#: site kind -> (part of the model, "input" | "output", tuple index): the module boundary nnsight reads it at.
_POINTS = {
    "embed": ("embed", "output", None), "final": ("final", "output", None), "logits": ("logits", "output", None),
    "resid_pre": ("layer", "input", None), "resid_post": ("layer", "output", None),
    "attn_in": ("norm:attn_in", "output", None), "resid_mid": ("norm:mlp_in", "input", None),
    "attn_q": ("proj:q", "output", None), "attn_k": ("proj:k", "output", None), "attn_v": ("proj:v", "output", None),
    "attn_pattern": ("attn", "output", 1), "attn_z": ("proj:o", "input", None), "attn_out": ("attn", "output", 0),
    "mlp_in": ("mlp", "input", None), "mlp_gate": ("proj:gate", "output", None), "mlp_up": ("proj:up", "output", None),
    "mlp_post": ("proj:down", "input", None), "mlp_out": ("mlp", "output", None),
}


def _rank(site: Site) -> tuple[int, float]:
    """The order nnsight must touch sites in: `interp.sites.forward_rank`, except that the pattern is read from
    the attention module's output, after its o_proj has consumed z inside it."""
    if site.kind == "attn_pattern":
        return (site.layer, forward_rank(Site("attn_z", site.layer))[1] + 0.5)
    return forward_rank(site)


def supported_kinds(gpt2: bool = False) -> set[str]:
    """Site kinds this backend serves (the rotary q/k and pre-softmax scores live inside the
    attention forward of HF models and have no module boundary to trace)."""
    if gpt2:
        return {"embed", "final", "logits", "resid_pre", "resid_post", "attn_out", "attn_pattern", "resid_mid",
                "mlp_in", "mlp_post", "mlp_out", "attn_in"}
    return {k for k in CAPABILITIES["nnsight"] if not k.startswith("edit:")}
