"""self_interp's saved artifacts: topic vectors, adapters and the topics table (split from probe.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp.context import RunContext

from .inject import Template
from .topics import Topic
from .vectors import first_tokens

if TYPE_CHECKING:
    from .state import Experiment, LayerResult


def save_vectors(ctx: RunContext, vectors: Tensor, mean: Tensor, controls: LayerResult, layer: int,
                 tmpl: Template) -> None:
    tensors = {"topic_vectors": vectors, "topic_mean": mean}
    if controls.embed is not None:
        keep, emb = controls.embed
        tensors["embed_vectors"] = emb
        tensors["embed_topic_ids"] = torch.as_tensor(keep, dtype=torch.int64)
    ctx.save_tensors("vectors", tensors, metadata={"layer": str(layer), "hook": f"blocks.{layer}.hook_resid_post",
                                                   "template": tmpl.text, "template_kind": tmpl.kind,
                                                   "template_system": tmpl.system,
                                                   "placeholder": tmpl.placeholder})


def save_adapters(ctx: RunContext, main: LayerResult, controls: LayerResult, sweep: list[LayerResult], layer: int,
                  tmpl: Template) -> None:
    """adapter_<variant>.safetensors (float32) with metadata: variant, d, rank, s*, layer, template."""
    extra = {"template_kind": tmpl.kind, "placeholder": tmpl.placeholder, "template_system": tmpl.system}
    for name, ad in [*main.adapters.items(), *controls.adapters.items()]:
        ctx.save_tensors(f"adapter_{name}", ad.tensors(), ad.metadata(s_star=main.s_star, layer=layer, name=name,
                                                                       **extra))
    for res in sweep:
        if res.layer != layer and "scalar_affine" in res.adapters:
            ad = res.adapters["scalar_affine"]
            ctx.save_tensors(f"adapter_scalar_affine_L{res.layer}", ad.tensors(),
                             ad.metadata(s_star=res.s_star, layer=res.layer, name="scalar_affine", **extra))


def topics_frame(topics: list[Topic], split: np.ndarray, exp: Experiment) -> pd.DataFrame:
    _, single = first_tokens(exp.model, [t.topic for t in topics])
    return pd.DataFrame({
        "topic_id": range(len(topics)),
        "topic": [t.topic for t in topics],
        "category": [t.category for t in topics],
        "aliases": [list(t.aliases) for t in topics],
        "split": list(split),
        "single_token": single,
    })


