"""Describe any vector with a trained adapter: the public Python call of the self_interp probe.

    import interp
    from interp_probes.self_interp.describe import describe, load_adapter, topic_vector

    run = interp.load_run("artifacts/self_interp/<run_id>")
    model = interp.load_model(run.config["model"])
    adapter = load_adapter(run, "scalar_affine")
    describe(model, topic_vector(model, run, "chess"), adapter)        # 'Chess'
    describe(model, some_vectors, adapter)                              # a list of labels for (n, d)

A vector is read in the space the adapter was trained on: a centred residual at the run's layer
(`topic_vector` / `prompt_vector` subtract the run's topic mean), a token-embedding row, or an SAE
decoder row. Only the direction matters for every variant but full_rank (v is normalised first).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .adapters import Adapter
from .inject import PrefixCache, Template, build_template, generate, render, topic_prompt
from .vectors import prompt_vectors

_TEMPLATES: dict[tuple[int, str | None, str], tuple[Template, PrefixCache]] = {}


def load_adapter(run: Any, variant: str = "scalar_affine") -> Adapter:
    """The adapter `variant` saved in a self_interp run (an `interp.store.Run` or a run directory)."""
    from safetensors import safe_open

    from interp.store import Run, load_run

    run = run if isinstance(run, Run) else load_run(run)
    name = f"adapter_{variant}"
    tensors = run.tensor_file(name)
    with safe_open(str(run.path / f"{name}.safetensors"), "np") as f:
        meta = f.metadata() or {}
    ad = Adapter.from_tensors(tensors, meta)
    ad.meta = meta
    return ad


def adapters_in(run: Any) -> list[str]:
    """Names of the adapters a run saved (e.g. identity, scalar_affine, shuffled, scalar_affine_L12)."""
    return [n[len("adapter_"):] for n in run.names(".safetensors") if n.startswith("adapter_")]


def _template(model, placeholder: str | None, system: str = "none") -> tuple[Template, PrefixCache]:
    key = (id(model), placeholder, system)
    if key not in _TEMPLATES:
        tmpl = build_template(model, placeholder, system)
        _TEMPLATES[key] = (tmpl, PrefixCache(model, tmpl))
    return _TEMPLATES[key]


@torch.no_grad()
def describe(model, vector, adapter: Adapter, max_new_tokens: int = 16, temperature: float = 0.0,
             seed: int = 0) -> str | list[str]:
    """The model's own label for `vector` (d,) (a string) or for each row of (n, d) (a list),
    injected through `adapter` at both placeholders of the template; greedy unless `temperature` > 0."""
    v = torch.as_tensor(np.asarray(vector) if not isinstance(vector, torch.Tensor) else vector).float()
    single = v.dim() == 1
    v = v[None] if single else v
    if v.shape[-1] != model.info.d_model:
        raise ValueError(f"vector width {v.shape[-1]} != d_model {model.info.d_model} of {model.info.name}")
    meta = getattr(adapter, "meta", None) or {}
    # adapters saved before template_system existed were trained with the default system turn
    tmpl, pc = _template(model, meta.get("placeholder"), meta.get("template_system", "default" if meta else "none"))
    adapter = adapter.to(model.device)
    labels = generate(model, tmpl, adapter(v.to(model.device)), max_new_tokens, temperature=temperature, seed=seed,
                      pc=pc)
    return labels[0] if single else labels


def _layer_and_mean(run: Any, layer: int | None) -> tuple[int, torch.Tensor]:
    vec = run.tensor_file("vectors")
    main = int(run.metrics.get("layer", run.config.get("layer") or 0))
    if layer is not None and layer != main:
        raise ValueError(f"the run stores the topic mean of layer {main} only (asked for {layer})")
    return main, torch.as_tensor(vec["topic_mean"]).float()


def prompt_vector(model, run: Any, text: str, layer: int | None = None, as_topic: bool = False) -> torch.Tensor:
    """The centred vector of a prompt (or of the topic request "Tell me about {text}." when
    `as_topic`) at the run's layer: the residual after that block at the last token minus the topic mean."""
    lay, mean = _layer_and_mean(run, layer)
    prompt = topic_prompt(model, text) if as_topic else render(model, text)[0]
    raw = prompt_vectors(model, [prompt], [lay], templated=model.info.chat)[lay][0]
    return raw - mean


def topic_vector(model, run: Any, topic: str, layer: int | None = None) -> torch.Tensor:
    """prompt_vector of the topic request for `topic`."""
    return prompt_vector(model, run, topic, layer, as_topic=True)
