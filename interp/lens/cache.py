"""Fitted Jacobian lenses cached like the SAEs and transcoders (`interp.sae.cache`): one fit per (model weights,
prompt token ids, settings), stored under `cache_root()/lenses/<key>/lens.safetensors`; and the `lens=` spec
(`resolve_lens_spec`) that names a lens file, a directory holding one, or a hub file (`jlens:`, online only).

A miss fits with a checkpoint beside the entry, so a killed fit resumes at its next prompt; the entry is written
to a temporary sibling and renamed (`interp._files.atomic_dir`). `info` reports the seconds either way.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError

CACHE_VERSION = 1
"""Bumped when the fit changes what a cached lens would be."""

PREFIX = "jlens:"
WHAT = ('a Jacobian lens: a .pt file in the reference format, a directory holding lens.pt (a run directory), or '
        'jlens:<owner>/<repository>/<path of the .pt in it> (downloads: only with INTERP_ONLINE=1)')


def lens_cache_key(model_info: Any, prompts: Sequence[Any], settings: dict[str, Any], dtype: Any = None) -> str:
    """sha256 over model name + weights sha, the model's dtype, the prompts' token ids (as cut) and the settings
    that decide the matrices (layers, skip_first, max_seq_len; not the batch or the checkpoint)."""
    from .jacobian import prompts_sha256

    cut = settings.get("max_seq_len")
    blob = {
        "version": CACHE_VERSION,
        "model": getattr(model_info, "name", None),
        "weights": getattr(model_info, "weights_sha256", None),
        "dtype": str(dtype),
        "prompts": prompts_sha256([p[:int(cut)] for p in prompts] if cut else list(prompts)),
        "settings": {k: settings[k] for k in sorted(settings) if k not in ("batch", "checkpoint", "progress")},
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def cache_dir(key: str) -> Path:
    from ..embedded import cache_root

    return cache_root() / "lenses" / key[:24]


def obtain_jacobian_lens(model: Any, prompts: Sequence[Any], *, progress: bool = True, cache: bool = True,
                         **settings: Any):
    """(lens, info): the Jacobian lens of `model` on `prompts` (token ids) with `settings` (those of
    `fit_jacobian_lens`: source_layers, target_layer, skip_first, max_seq_len, batch) from the cache, fitted on a
    miss (`cache=False`: fitted, the cache neither read nor written). info: {"cached": bool, "seconds": this
    call's, "fit_seconds": the fit's own, "key", "path"}."""
    import torch

    from .._files import atomic_dir
    from .io import load_lens, save_lens
    from .jacobian import MAX_SEQ_LEN, SKIP_FIRST, FitModel, check_layers, fit_jacobian_lens

    t0 = time.perf_counter()
    unknown = set(settings) - {"source_layers", "target_layer", "skip_first", "max_seq_len", "batch"}
    if unknown:
        raise ConfigError("settings", sorted(unknown), "source_layers, target_layer, skip_first, max_seq_len, batch")
    net = FitModel(model)
    sources, target = check_layers(settings.get("source_layers"), settings.get("target_layer"), net.n_layers)
    norm = {"source_layers": sources, "target_layer": target,
            "skip_first": int(settings.get("skip_first", SKIP_FIRST)),
            "max_seq_len": int(settings.get("max_seq_len", MAX_SEQ_LEN))}
    ids = [torch.as_tensor(p).reshape(-1) for p in prompts]
    key = lens_cache_key(getattr(model, "info", None), ids, norm, net.dtype)
    path = cache_dir(key)
    file = path / "lens.safetensors"

    def info(lens, cached: bool, where: Path | None) -> dict[str, Any]:
        return {"cached": cached, "seconds": time.perf_counter() - t0,
                "fit_seconds": float(lens.metadata.get("fit_seconds", 0.0)), "key": key,
                "path": None if where is None else str(where)}

    if not cache:
        lens = fit_jacobian_lens(model, ids, **norm, batch=settings.get("batch"), progress=progress)
        return lens, info(lens, False, None)
    if file.is_file():
        lens = load_lens(file, model)
        return lens, info(lens, True, file)
    ckpt = path.parent / f"{path.name}.checkpoint.safetensors"
    lens = fit_jacobian_lens(model, ids, **norm, batch=settings.get("batch"), checkpoint=ckpt, progress=progress)
    lens.metadata["interp_cache_key"] = key
    atomic_dir(path, lambda tmp: save_lens(lens, tmp / "lens.safetensors"))
    ckpt.unlink(missing_ok=True)
    return lens, info(lens, False, file)


def obtain_tuned_lens(model: Any, batches: Sequence[Any], *, progress: bool = True, cache: bool = True,
                      **settings: Any):
    """(lens, info): the tuned lens of `model` trained on `batches` (token id tensors or model.tokenize dicts)
    with `settings` (those of `fit_tuned_lens`: steps, lr, tokens_per_step, skip_first, seed) from the cache
    (`cache_root()/lenses/tuned-<key>/tuned.safetensors`), trained on a miss; info as `obtain_jacobian_lens`'s."""
    import torch

    from .._files import atomic_dir
    from .tuned import TunedLens, fit_tuned_lens

    t0 = time.perf_counter()
    allowed = {"steps", "lr", "tokens_per_step", "skip_first", "seed"}
    if set(settings) - allowed:
        raise ConfigError("settings", sorted(set(settings) - allowed), ", ".join(sorted(allowed)))
    batches = list(batches)
    ids, masks = [], []
    for b in batches:
        if isinstance(b, dict):
            ids.append(torch.as_tensor(b["input_ids"]).reshape(-1))
            m = b.get("attention_mask")
            masks.append(torch.ones_like(ids[-1]) if m is None else torch.as_tensor(m).reshape(-1))
        else:
            ids.append(torch.as_tensor(b).reshape(-1))
            masks.append(torch.ones_like(ids[-1]))
    dtype = next(model.hf.parameters()).dtype
    key = "tuned-" + lens_cache_key(model.info, ids + masks, {"kind": "tuned", "n_batches": len(ids), **settings},
                                    dtype)
    file = cache_dir(key) / "tuned.safetensors"
    if cache and file.is_file():
        lens = TunedLens.load(file, model)
        return lens, {"cached": True, "seconds": time.perf_counter() - t0,
                      "fit_seconds": float(lens.metadata.get("fit_seconds", 0.0)), "key": key, "path": str(file)}
    lens = fit_tuned_lens(model, batches, progress=progress, **settings)
    lens.metadata["fit_seconds"] = time.perf_counter() - t0
    if cache:
        atomic_dir(file.parent, lambda tmp: lens.save(tmp / "tuned.safetensors"))
    return lens, {"cached": False, "seconds": time.perf_counter() - t0, "fit_seconds": lens.metadata["fit_seconds"],
                  "key": key, "path": str(file) if cache else None}


def resolve_lens_spec(spec: str, field: str = "lens") -> Path:
    """The lens file `spec` names, or ConfigError (naming `field`) in one line; imports no torch.

    - a file: itself;
    - a directory: its lens.pt (a run directory keeps its lens there), else its only *.pt;
    - `jlens:<owner>/<repository>/<path>`: that file of a hub repository (Neuronpedia's collection keeps
      `<model id>/jlens/<dataset>/<Model>_jacobian_lens.pt`), downloaded only with INTERP_ONLINE=1."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(field, spec, WHAT)
    if spec.startswith(PREFIX):
        parts = spec[len(PREFIX):].split("/")
        if len(parts) < 3 or not all(parts) or not parts[-1].endswith(".pt"):
            raise ConfigError(field, spec, "jlens:<owner>/<repository>/<path of a .pt file in it>")
        repo, file = "/".join(parts[:2]), "/".join(parts[2:])
        if os.environ.get("INTERP_ONLINE") != "1":
            raise ConfigError(field, spec, f"a local lens file: hub repository {repo!r} downloads it, which needs the "
                              "network (set INTERP_ONLINE=1)")
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo, file))
    p = Path(spec).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        if (p / "lens.pt").is_file():
            return p / "lens.pt"
        found = sorted(p.glob("*.pt"))
        if len(found) == 1:
            return found[0]
        raise ConfigError(field, spec, WHAT + (f" ({p} holds {len(found)} .pt files: name one)" if found else
                                               f" ({p} holds no lens.pt)"))
    raise ConfigError(field, spec, WHAT + " (no such path)")


__all__ = ["CACHE_VERSION", "cache_dir", "lens_cache_key", "obtain_jacobian_lens", "obtain_tuned_lens",
           "resolve_lens_spec"]
