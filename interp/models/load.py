"""`load_model`: resolve, check, pick the device, load the HF weights and wrap them for hooks (the
TransformerBridge, or the nnsight backend); `twin`, the plain HF model sharing the weights."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import data, embedded, families
from .._bridge import attention_on_demand, fire_rotary_hooks
from ..errors import ConfigError, ModelNotFound
from .device import check_fits, pick_device, pick_dtype, set_cpu_threads
from .model import Model, ModelInfo
from .resolve import Resolved, check_architecture, check_model_files, resolve_model


def _info(name: str, source: str, hf: Any, tokenizer: Any, weights_sha256: str) -> ModelInfo:
    from ..anatomy import Anatomy

    a = Anatomy(hf)
    c = a.config
    return ModelInfo(
        name=name,
        source=source,
        arch=type(hf).__name__,
        n_layers=a.n_layers,
        d_model=hf.get_input_embeddings().weight.shape[1],
        n_heads=a.n_heads,
        n_kv_heads=a.n_kv_heads,
        d_head=a.d_head,
        d_mlp=a.proj(0, "up").n,  # GPT-2 and GPT-J name it n_inner (None: 4 d_model), most intermediate_size
        d_vocab=hf.get_output_embeddings().weight.shape[0],
        n_ctx=getattr(c, "max_position_embeddings", None) or getattr(c, "n_positions", None) or 2048,
        chat=bool(getattr(tokenizer, "chat_template", None)),
        weights_sha256=weights_sha256,
        family=a.family,
        site_fallbacks={k: f"{fb[0]} ({fb[1]})" for k in families.ROTARY_KINDS
                        if (fb := families.site_fallback(k, a.family))} or None,
        bos_id=data.bos_id(tokenizer),
    )


def load_model(
    name_or_path: str = "smollm2-135m",
    device: str = "auto",
    dtype: str | None = None,
    backend: str = "tl",
    remote: bool = False,
    attention: str | None = None,
) -> Model:
    """Load a model by embedded name, local directory or HF id, wrapped for hooks.

    Embedded models are dequantized from their GGUF once and cached (``INTERP_CACHE``).
    backend "tl" wraps it in TransformerLens's TransformerBridge; "nnsight" in nnsight.
    attention "auto" (default, or ``INTERP_ATTENTION``) runs each layer's attention as SDPA while no hook reads
    inside it and as the bridge's eager reconstruction while one does (`interp._bridge.attention_on_demand`);
    "eager" reconstructs every layer always (the toolkit's numbers before 2026-12-04).
    """
    if backend not in ("tl", "nnsight"):
        raise ConfigError("backend", backend, 'one of "tl", "nnsight"')
    attention = attention or os.environ.get("INTERP_ATTENTION") or "auto"
    if attention not in ("auto", "eager"):
        raise ConfigError("attention", attention, '"auto" (SDPA where no hook reads the attention) or "eager"')
    res = resolve_model(name_or_path)
    check_architecture(res)
    shapes = check_model_files(res)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = pick_device(device)
    dt = pick_dtype(dev, dtype)
    if dev == "cpu":
        set_cpu_threads()
    path = res.path
    if res.source == "embedded":
        path = str(embedded.ensure_cached(res.name))
    local = res.source != "hub"
    if shapes:
        _check_shapes(res, path, shapes)
    check_fits(res, path, shapes, dev, dt)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
    try:
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=dt, attn_implementation="eager",
                                                  local_files_only=local, ignore_mismatched_sizes=False)
    except (RuntimeError, ValueError, OSError) as e:  # shapes that do not fit the config, unreadable tensors
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise ModelNotFound(f"model {res.name!r}: its weights do not load: {first[:300]}") from None
    hf.to(dev).eval()
    for p in hf.parameters():
        p.requires_grad_(False)
    sha = _weights_sha256(Path(path)) if local else "unknown"
    info = _info(res.name, res.source, hf, tokenizer, sha)
    if backend == "nnsight":
        from ..nnsight_backend import NNsightModel

        if attention == "auto" and info.family not in families.NO_SDPA and getattr(hf, "_supports_sdpa", False):
            info = replace(info, attention="sdpa unless a pattern is read")
        return NNsightModel(hf, tokenizer, info, dev, dt, remote=remote)
    from transformer_lens.model_bridge import TransformerBridge

    plain = twin(hf)
    bridge = TransformerBridge.boot_transformers(path, hf_model=hf, tokenizer=tokenizer, device=dev, dtype=dt)
    bridge.eval()
    fire_rotary_hooks(bridge)
    if attention == "auto" and attention_on_demand(bridge, info.family):
        info = replace(info, attention="sdpa where unhooked")
    return Model(plain, tokenizer, info, dev, dt, bridge=bridge)


def _check_shapes(res: Resolved, path: str, shapes: dict[str, tuple[int, ...]]) -> None:
    """ModelNotFound naming the tensor when a weight in the files has a shape the config does not give (compared
    on the meta device, before anything loads: transformers would re-initialise it or fail with a long report)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in AutoModelForCausalLM.from_config(cfg).state_dict().items()}
    for key, shape in shapes.items():
        name = key if key in want else next((n for n in want if n.endswith("." + key)), None)
        if name is not None and want[name] != shape:
            raise ModelNotFound(f"model {res.name!r}: the weights hold {key} with shape {list(shape)}, but its "
                                f"config gives {list(want[name])}")


def twin(hf: Any) -> Any:
    """A structural copy of `hf` that shares every parameter and buffer (no extra memory).

    The bridge wraps the modules of the model it boots on; its KV-cache generation is broken
    here (repeats a token after a few steps), so fast cached generation runs on this twin.
    Weight edits to shared parameters show in both.
    """
    import copy

    memo = {id(t): t for t in list(hf.parameters()) + list(hf.buffers())}
    return copy.deepcopy(hf, memo)


def _weights_sha256(directory: Path) -> str:
    """sha256 over the directory's safetensors files, cached beside them by (size, mtime)."""
    files = sorted(directory.glob("*.safetensors"))
    key = [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    sidecar = embedded.cache_root() / "hashes" / (hashlib.sha256(str(directory).encode()).hexdigest()[:16] + ".json")
    try:
        cached = json.loads(sidecar.read_text())
        if cached["key"] == key:
            return cached["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 24), b""):
                h.update(chunk)
    digest = h.hexdigest()
    try:
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        from ..store import atomic_write_text

        atomic_write_text(sidecar, json.dumps({"key": key, "sha256": digest}))
    except OSError:
        pass
    return digest
