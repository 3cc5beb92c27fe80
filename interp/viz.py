"""Attention views with CircuitsVis (the optional `viz` extra: `pip install interp[viz]`).

    view = interp.viz.attention(model, "The cat sat on the mat", layers=[3, 4], heads=[0, 1])
    view            # in a notebook: CircuitsVis's attention-heads widget, heads named L3H0 ...
    view.html       # the self-contained HTML (about 1.3 MB, no external scripts): works with no network

`attention_view(patterns, tokens, names)` draws stored patterns (the dashboard pages show it with `st.iframe`).
CircuitsVis's own display probes the network to choose between its CDN and inline builds; these views always use
the inline build, so nothing is fetched. The view is CircuitsVis's bundled script (`dist/cdn/iife.js`) called as its
own inline render does, without importing its Python package: that imports torch (5-15 s on 2 busy cores), which a
dashboard page that only shows stored patterns never needs; weights go in with 5 decimals (the colours cannot show
more; the HTML of a (8, 320, 320) view is 3x smaller).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError, InterpError


@functools.cache
def _circuitsvis() -> str:
    """CircuitsVis's bundled script, found without importing the package (which imports torch)."""
    spec = importlib.util.find_spec("circuitsvis")
    script = Path(next(iter(spec.submodule_search_locations)), "dist", "cdn", "iife.js") if spec else None
    if script is None or not script.is_file():
        raise InterpError("attention views need CircuitsVis: pip install 'interp[viz]' (circuitsvis)")
    return script.read_text(encoding="utf-8").replace("</script>", "")  # as CircuitsVis inlines it


def _render(element: str, props: dict[str, Any]) -> str:
    """A CircuitsVis React element drawn by its inline script into a div of its own (no network)."""
    div = f"circuits-vis-{uuid.uuid4().hex[:13]}"
    props = {k: v for k, v in props.items() if v is not None}
    return (f'<div id="{div}" style="margin: 15px 0;"/>\n<script crossorigin type="module">\n{_circuitsvis()}\n'
            f'CircuitsVis.render("{div}", CircuitsVis.{element}, {json.dumps(props)})\n</script>')


@dataclass
class AttentionView:
    """A CircuitsVis attention-heads view: `html` is self-contained; renders itself in notebooks."""

    html: str
    """The view's HTML with CircuitsVis's JavaScript inlined (no external scripts)."""
    tokens: list[str]
    """The tokens on both axes (query = destination, key = source)."""
    names: list[str]
    """One name per head, L{layer}H{head}."""
    patterns: np.ndarray = field(repr=False)
    """(heads, query, key) attention weights drawn."""

    def _repr_html_(self) -> str:
        return self.html

    def __html__(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.html


def attention_view(patterns: Any, tokens: Sequence[str], names: Sequence[str] | None = None,
                   mask_upper_tri: bool = True, max_value: float | None = None) -> AttentionView:
    """A view of stored patterns: (heads, query, key) weights over `tokens` (query = key = len(tokens)); colours
    run from 0 to `max_value` (None: CircuitsVis's 1, a full weight)."""
    pats = np.asarray(patterns, dtype=np.float32)  # (heads, q, k)
    if pats.ndim == 2:
        pats = pats[None]
    if pats.ndim != 3 or pats.shape[1] != pats.shape[2] or pats.shape[1] != len(tokens):
        raise ValueError(f"attention_view: patterns of shape {pats.shape} for {len(tokens)} tokens; need "
                         "(heads, n, n) with n = len(tokens)")
    names = list(names) if names is not None else [f"H{h}" for h in range(pats.shape[0])]
    if len(names) != pats.shape[0]:
        raise ValueError(f"attention_view: {len(names)} names for {pats.shape[0]} heads")
    html = _render("AttentionHeads", {"attention": np.round(pats.astype(np.float64), 5).tolist(),
                                      "attentionHeadNames": names, "maxValue": max_value, "tokens": list(tokens),
                                      "maskUpperTri": mask_upper_tri})
    return AttentionView(html, list(tokens), names, pats)


def attention(model: Any, text: str, layers: Sequence[int] | int | None = None,
              heads: Sequence[int] | int | None = None, max_tokens: int = 256) -> AttentionView:
    """The attention patterns of `model` on `text` at `layers` x `heads` (default: all) as a CircuitsVis view.

    The text is tokenized as `model.tokenize` does (BOS as the tokenizer adds it); patterns come from the
    `attn_pattern` site of each layer in one forward pass.
    """
    import torch

    from .sites import Site

    _circuitsvis()
    if not isinstance(text, str) or not text:
        raise ConfigError("text", text, "a non-empty string")
    info = model.info
    n_layers = info.n_layers
    layers = list(range(n_layers)) if layers is None else [layers] if isinstance(layers, int) else list(layers)
    for layer in layers:
        if not isinstance(layer, int) or not 0 <= layer < n_layers:
            raise ConfigError("layers", layer, f"layer indices in 0..{n_layers - 1} for {info.name}")
    enc = model.tokenize([text])
    n = int(enc["input_ids"].shape[1])
    if n > max_tokens:
        raise ConfigError("text", f"<{n} tokens>", f"at most max_tokens={max_tokens} tokens (the view is n x n per "
                          "head)")
    got: dict[int, Any] = {}

    def hook_for(layer: int):
        def hook(p):
            got[layer] = p.detach()[0].float().cpu()  # (heads, q, k)

        return hook

    with torch.no_grad(), model.hooks([(Site("attn_pattern", layer), hook_for(layer)) for layer in layers]):
        model.forward(enc["input_ids"], enc["attention_mask"])
    n_heads = got[layers[0]].shape[0]
    heads = list(range(n_heads)) if heads is None else [heads] if isinstance(heads, int) else list(heads)
    for h in heads:
        if not isinstance(h, int) or not 0 <= h < n_heads:
            raise ConfigError("heads", h, f"head indices in 0..{n_heads - 1} for {info.name}")
    pats = torch.stack([got[layer][h] for layer in layers for h in heads]).cpu().numpy()  # (layers*heads, q, k)
    names = [f"L{layer}H{h}" for layer in layers for h in heads]
    tokens = model.to_str_tokens(enc["input_ids"][0])
    return attention_view(pats, tokens, names)


__all__ = ["AttentionView", "attention", "attention_view"]
