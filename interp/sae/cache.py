"""The SAE cache: an SAE trained once per (model, site, training config, data, input transform) and stored
under `cache_root()/saes/<key>` as a SAELens directory."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._files import atomic_dir
from ..sites import Site
from .calibrate import firing_density, set_density
from .config import SAETrainConfig
from .io import load_sae, sae_metadata, save_density, save_sae
from .kernel import InputTransform
from .train import train_sae

CACHE_VERSION = 1
"""Bumped when training code changes what a cached SAE would be."""


def sae_cache_key(model_info: Any, site: Site, cfg: SAETrainConfig, data_key: str,
                  transform: InputTransform | None = None) -> str:
    """sha256 over model name + weights sha, site, training config, data key and transform."""
    blob = {
        "version": CACHE_VERSION,
        "model": getattr(model_info, "name", None),
        "weights": getattr(model_info, "weights_sha256", None),
        "site": site.tl_name,
        "cfg": cfg.key(),
        "data": data_key,
        "transform": transform.key() if transform is not None else None,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def cache_dir(key: str) -> Path:
    from ..embedded import cache_root

    return cache_root() / "saes" / key[:24]


def cached_sae(
    model: Any,
    site: Site,
    cfg: SAETrainConfig,
    data_fn: Callable[[], Tensor],
    data_key: str,
    transform: InputTransform | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: bool = False,
    device: str | torch.device = "cpu",
):
    """(sae, hit): the SAE for (model, site, cfg, data, transform) from the cache, trained on a miss.

    `data_key` names the training data (corpus hash, token counts, filters): it enters the key;
    `data_fn()` returns the buffer and is called only on a miss. Stored under
    `cache_root()/saes/<key>` as a SAELens directory, written to a temporary sibling and renamed. The SAE is on
    `device` either way: a miss trains there, a hit loads there.
    """
    key = sae_cache_key(model.info, site, cfg, data_key, transform)
    path = cache_dir(key)
    if (path / "cfg.json").is_file() and (path / "sae_weights.safetensors").is_file():
        sae = load_sae(path, device=str(device))
        if getattr(sae, "interp_density", None) is None:  # cached before SAEs carried their sparsity file
            _add_sparsity(path, sae, data_fn())
        return sae, True
    meta = dict(sae_metadata(model, site) if metadata is None else metadata)
    meta["interp_cache_key"] = key
    sae = train_sae(data_fn(), cfg, metadata=meta, transform=transform, progress=progress,
                    device=device)
    atomic_dir(path, lambda tmp: save_sae(sae, tmp))
    return sae, False


def _add_sparsity(path: Path, sae, acts: Tensor) -> None:
    """Write the firing densities on the training buffer `acts` (first calib_tokens tokens) into a cached SAE."""
    cfg_n = int((sae.cfg.metadata.get("interp_training") or {}).get("config", {}).get("calib_tokens", 16384))
    set_density(sae, firing_density(sae, acts[:cfg_n].float()))
    save_density(path, sae.interp_density)


__all__ = ["CACHE_VERSION", "cache_dir", "cached_sae", "sae_cache_key"]
