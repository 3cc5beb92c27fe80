"""Jacobian lens files in the reference `jlens` package's format, both directions.

The reference saves `torch.save({"J": {layer: [d_model, d_model]}, "n_prompts", "source_layers", "d_model"})`
(float16 by default) and loads it with `torch.load(weights_only=True)`, upcasting to float32; TransformerLens adds
an optional `metadata` dict. `save_lens` writes that dict (float32 unless asked, with `metadata` holding
`target_layer`, `n_layers`, the fit's settings and the model), so the reference and TransformerLens load it;
`load_lens` reads any such file, and this project's cache files (`.safetensors`: `J.<layer>` tensors and the rest
as JSON in the header). The `.pt` file is the one pickle this project reads, because it is the reference's
format: only through `weights_only=True` (no code runs; tensors, dicts, lists, numbers and strings only).

A file that is not the format, or one made for another model (d_model, layer count), is refused in one line that
names what is wrong (ConfigError, field "lens"), before any forward.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError
from .jacobian import JacobianLens

KEYS = ("J", "n_prompts", "source_layers", "d_model")
"""The reference file's keys (`metadata` is optional)."""


def _plain(value: Any) -> Any:
    """`value` with only what `torch.load(weights_only=True)` and JSON both read (dict, list, str, number, bool)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def lens_metadata(lens: JacobianLens) -> dict[str, Any]:
    return _plain({**lens.metadata, "target_layer": lens.target_layer, "n_layers": lens.n_layers})


def save_lens(lens: JacobianLens, path: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """Write `lens` to `path` atomically: the reference's `.pt` dict (J in `dtype`: float32 by default, float16
    as the reference exports), or, for a `.safetensors` path, the cache layout."""
    from .._files import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = lens_metadata(lens)
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        tensors = {f"J.{ly}": J.to(dtype).contiguous() for ly, J in lens.J.items()}
        header = {"interp_jlens": json.dumps({"n_prompts": lens.n_prompts, "source_layers": lens.source_layers,
                                               "d_model": lens.d_model, "metadata": meta})}
        atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=header))
        return path
    obj = {"J": {int(ly): J.to(dtype) for ly, J in lens.J.items()}, "n_prompts": int(lens.n_prompts),
           "source_layers": [int(ly) for ly in lens.source_layers], "d_model": int(lens.d_model), "metadata": meta}
    atomic_write(path, lambda tmp: torch.save(obj, str(tmp)))
    return path


def _bad(path: Path, why: str) -> ConfigError:
    return ConfigError("lens", str(path), f"a Jacobian lens file in the reference format (torch.save of a dict with "
                       f"{', '.join(KEYS)}): {why}")


def _read(path: Path) -> dict[str, Any]:
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                head = json.loads((f.metadata() or {})["interp_jlens"])
                head["J"] = {int(k.split(".", 1)[1]): f.get_tensor(k) for k in f.keys()}
        except Exception as e:  # noqa: BLE001 - any unreadable file: one line naming it
            raise _bad(path, f"an unreadable lens cache file ({type(e).__name__})") from None
        return head
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)  # a Path: torch.load takes it as it is
    except Exception as e:  # noqa: BLE001 - a pickle that is not plain tensors and containers, or not a pickle
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise _bad(path, f"torch.load(weights_only=True) refused it ({first[:160]})") from None
    if not isinstance(obj, dict):
        raise _bad(path, f"it holds a {type(obj).__name__}")
    if "jacobian_sum" in obj:
        raise _bad(path, "it is a fit checkpoint of the reference (jacobian_sum), not a lens")
    missing = [k for k in KEYS if k not in obj]
    if missing:
        raise _bad(path, f"keys {missing} missing (found {sorted(map(str, obj))[:8]})")
    return obj


def check_lens_for(lens: JacobianLens, n_layers: int, d_model: int, name: str = "this model",
                   where: str = "lens") -> None:
    """ConfigError when `lens` was made for another model than one of `n_layers` blocks of width `d_model`."""
    if lens.d_model != d_model:
        raise ConfigError("lens", where, f"a lens for {name}: it was fitted with d_model={lens.d_model}, "
                          f"{name} has d_model={d_model}")
    if lens.n_layers != n_layers or lens.target_layer >= n_layers:
        raise ConfigError("lens", where, f"a lens for {name}: it was fitted on a {lens.n_layers}-layer model "
                          f"(target layer {lens.target_layer}), {name} has {n_layers} layers")


def load_lens(path: str | Path, model: Any = None) -> JacobianLens:
    """The lens in `path` (the reference's `.pt`, or a cache `.safetensors`), J in float32. With `model` (an interp
    Model, its ModelInfo, or anything with n_layers and d_model) a lens made for another model is refused.

    The reference file has no target layer: `metadata["target_layer"]` when present, else the model's last layer
    (the reference's default), else the layer above the highest source layer."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("lens", str(path), "an existing lens file (.pt in the reference format)")
    obj = _read(path)
    J, meta = obj["J"], obj.get("metadata") or {}
    if not isinstance(J, Mapping) or not J or not all(torch.is_tensor(v) and v.dim() == 2 for v in J.values()):
        raise _bad(path, "J is not a non-empty dict of layer -> [d_model, d_model] tensors")
    if not isinstance(meta, Mapping):
        raise _bad(path, f"metadata is a {type(meta).__name__}, not a dict")
    try:
        d_model, n_prompts = int(obj["d_model"]), int(obj["n_prompts"])
        layers = sorted(int(k) for k in J)
        src = sorted(int(s) for s in obj["source_layers"])
    except (TypeError, ValueError) as e:
        raise _bad(path, f"d_model, n_prompts or the layers are not integers ({e})") from None
    if src != layers:
        raise _bad(path, f"source_layers {src} are not J's layers {layers}")
    bad = [int(k) for k, v in J.items() if tuple(v.shape) != (d_model, d_model)]
    if bad:
        raise _bad(path, f"J at layers {bad[:5]} is not [{d_model}, {d_model}]")
    info = getattr(model, "info", model)
    n_model = getattr(info, "n_layers", None)
    d_have = getattr(info, "d_model", None)
    name = getattr(info, "name", None) or "this model"
    if d_have is not None and d_model != int(d_have):
        raise ConfigError("lens", str(path), f"a lens for {name}: it was fitted with d_model={d_model}, {name} has "
                          f"d_model={d_have}")
    n_layers = meta.get("n_layers")
    target = meta.get("target_layer")
    if n_model is not None:
        n_model = int(n_model)
        if (n_layers is not None and int(n_layers) != n_model) or layers[-1] >= n_model - 1 or \
                (target is not None and int(target) >= n_model):
            was = f"a {n_layers}-layer model" if n_layers is not None else f"source layers up to {layers[-1]}"
            raise ConfigError("lens", str(path), f"a lens for {name}: it was fitted on {was}, {name} has {n_model} "
                              "layers")
        n_layers = n_model if n_layers is None else n_layers
        target = n_model - 1 if target is None else target
    try:
        return JacobianLens({int(k): v for k, v in J.items()}, n_prompts=n_prompts, d_model=d_model,
                            target_layer=None if target is None else int(target),
                            n_layers=None if n_layers is None else int(n_layers), metadata=dict(meta))
    except ConfigError as e:
        raise _bad(path, str(e)) from None


__all__ = ["KEYS", "check_lens_for", "lens_metadata", "load_lens", "save_lens"]
