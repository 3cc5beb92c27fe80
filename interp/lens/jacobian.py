"""The Jacobian lens (Gurnee, Sofroniew, Lindsey et al. 2026, "Verbalizable Representations Form a Global
Workspace in Language Models"): a residual h read after block l is carried into the target layer's basis by
J_l, the model's average Jacobian from block l's output to the target block's output, then decoded as the model
decodes its last residual. Method: ../shared/methods/jlens.md; reference code: the `jlens` package
(`jlens.fitting.jacobian_for_prompt`, `jlens.lens.JacobianLens`), which this module follows.

The estimator, exactly the reference's: for a prompt of n tokens (cut at `max_seq_len`, BOS as the tokenizer adds
it) the valid positions are V = skip_first .. n-2; row i of the prompt's J_l is

    mean over p in V of  sum over p' in V, p' >= p of  d h_target[p', i] / d h_l[p, :]

(one backward pass with a one-hot cotangent at dimension i at every valid target position gives row i for every
source layer at once; causality makes the p' >= p restriction automatic). Gradients go to float32 before the
position mean; the prompts' J accumulate as a float32 sum in prompt order and are divided by the count at the
end; every prompt weighs the same; a prompt with no valid position is skipped. `transport(l, h) = h @ J_l.T`
(the reference's `J_l @ h` on a row vector); the target layer reads with the identity.

Where this differs from the reference, and why (the same matrices either way; tests/unit/test_lens_jacobian.py
holds them equal to a one-backward-per-dimension loop written from the definition):
- Prompts are token ids, not text: the caller tokenizes (BOS as the tokenizer adds it), so a run can store the
  ids it was fitted on and the reference can be refitted on exactly them.
- The first `skip_first` positions run once, without a graph, into a KV cache (an interp Model or a Hugging Face
  model); only the valid positions run with the graph. Their gradients are never needed (a position only
  reaches later ones), and their keys and values do not depend on the valid positions, so the rows are the same;
  the backward passes, which are nearly all the cost, cover |V| positions instead of n (n = 36, |V| = 19 on the
  bench prompts). The last position is dropped for the same reason (nothing in V depends on it).
- The forward stops at the target block (no final norm, no unembedding, nothing above a `target_layer` below the
  last); the graph starts at the lowest source layer (its output is made the graph's leaf), and no parameter
  takes a gradient (parameters are frozen for the fit and restored after).
- The batch (output dimensions per backward pass: the forward runs that many replicas of the prompt's valid
  positions, as the reference runs `dim_batch` replicas of the whole prompt) comes from the free memory on a GPU;
  on a CPU it is 8, the reference's `dim_batch` (wider batches did not pay on the 2-core CPU here).
- The checkpoint is a safetensors file (the float32 running sums) with its state as JSON in the header, written
  atomically after every `checkpoint_every` prompts; resuming checks the settings and the prompts' hash and gives
  the uninterrupted fit's matrices bit for bit.

An interp `Model` is fitted through its Hugging Face model (`model.hf`, the parameter-sharing twin of the bridge),
with forward hooks on the decoder blocks: the bridge's `hook_resid_post` is the same block output, but its KV cache
is not usable (interp.models.load.twin). Any other model works through the reference's protocol: `n_layers`,
`d_model`, `layers` (the blocks, whose output or output[0] is the residual) and `forward(input_ids)`; it runs the
whole prompt (no prefix cache) like the reference.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import math
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import ConfigError, DataWarning
from .base import Lens

SKIP_FIRST = 16
"""Leading positions left out of the average: attention sinks with atypical statistics (the reference's
SKIP_FIRST_N_POSITIONS)."""
MAX_SEQ_LEN = 128
"""Prompts are cut to this many tokens (the reference's default)."""
CPU_BATCH = 8
"""Output dimensions per backward pass on a CPU (the reference's dim_batch)."""


class JacobianLens(Lens):
    """A fitted Jacobian lens: J_l per source layer (float32, CPU) and the identity at `target_layer`."""

    name = "jacobian"

    def __init__(
        self,
        J: Mapping[int, Float[Tensor, "d_model d_model"]],
        *,
        n_prompts: int,
        d_model: int | None = None,
        target_layer: int | None = None,
        n_layers: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ):
        if not J:
            raise ConfigError("J", "{}", "at least one source layer's matrix")
        self.J: dict[int, Tensor] = {int(k): v.detach().to("cpu", torch.float32) for k, v in sorted(J.items())}
        self.source_layers: list[int] = sorted(self.J)
        self.d_model = int(d_model if d_model is not None else next(iter(self.J.values())).shape[0])
        for k, v in self.J.items():
            if tuple(v.shape) != (self.d_model, self.d_model):
                raise ConfigError("J", f"layer {k}: {list(v.shape)}", f"[{self.d_model}, {self.d_model}] matrices")
        self.n_prompts = int(n_prompts)
        self.target_layer = int(target_layer if target_layer is not None else self.source_layers[-1] + 1)
        self.n_layers = int(n_layers if n_layers is not None else self.target_layer + 1)
        if self.source_layers[-1] >= self.target_layer or self.target_layer >= self.n_layers:
            raise ConfigError("target_layer", self.target_layer, f"above every source layer "
                              f"(<= {self.source_layers[-1]}) and below n_layers={self.n_layers}")
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._placed: dict[tuple[int, torch.device], Tensor] = {}

    def layers(self) -> list[int]:
        return [*self.source_layers, self.target_layer]

    def transport(self, layer: int, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        """`resid @ J_l.T`, computed in float32 (as the reference reads out) and returned in `resid`'s dtype;
        the identity at the target layer."""
        if layer == self.target_layer:
            return resid
        self.check_layer(layer)
        key = (layer, resid.device)
        if key not in self._placed:
            self._placed[key] = self.J[layer].to(resid.device)
        return (resid.float() @ self._placed[key].T).to(resid.dtype)

    def __repr__(self) -> str:
        return (f"JacobianLens(d_model={self.d_model}, n_prompts={self.n_prompts}, source_layers="
                f"[{self.source_layers[0]}..{self.source_layers[-1]}], target_layer={self.target_layer})")


def merge_lenses(lenses: Sequence[JacobianLens]) -> JacobianLens:
    """Lenses fitted on disjoint prompt sets as one: the n_prompts-weighted mean (the reference's `merge`)."""
    if not lenses:
        raise ConfigError("lenses", "[]", "at least one lens to merge")
    first = lenses[0]
    for other in lenses[1:]:
        if (other.source_layers, other.d_model, other.target_layer) != \
                (first.source_layers, first.d_model, first.target_layer):
            raise ConfigError("lenses", "mixed", "lenses with the same source_layers, d_model and target_layer")
    n_total = sum(x.n_prompts for x in lenses)
    merged = {ly: sum(x.J[ly] * x.n_prompts for x in lenses) / n_total for ly in first.source_layers}
    meta = dict(first.metadata)
    meta.pop("prompts_sha256", None)
    meta["merged_from"] = [x.n_prompts for x in lenses]
    return JacobianLens(merged, n_prompts=n_total, d_model=first.d_model, target_layer=first.target_layer,
                        n_layers=first.n_layers, metadata=meta)


# -- the fit ------------------------------------------------------------------------------------------------------


class _Stop(Exception):
    """Raised by the target block's hook: nothing above it is computed."""


def _block_output(out: Any) -> Tensor:
    return out if torch.is_tensor(out) else out[0]


def _with_output(out: Any, x: Tensor) -> Any:
    if torch.is_tensor(out):
        return x
    return (x, *out[1:]) if isinstance(out, tuple) else type(out)([x, *out[1:]])


class FitModel:
    """The model as the fit sees it: its blocks, a forward that fires them, and whether a prefix can be cached."""

    def __init__(self, model: Any):
        hf = getattr(model, "hf", None)
        if hf is None and hasattr(model, "config") and hasattr(model, "get_output_embeddings"):
            hf = model  # a plain Hugging Face causal LM
        if hf is not None:
            from ..anatomy import Anatomy

            an = getattr(model, "anatomy", None) or Anatomy(hf)
            self.layers, self.base, self.config = an.layers, an._base(), an.config
            self.n_layers = len(self.layers)
            self.d_model = int(getattr(self.config, "hidden_size", None) or self.config.n_embd)
            self.params = list(hf.parameters())
            self.cached = True
            self.run_forward = None
            params = inspect.signature(self.base.forward).parameters
            self.cache_kw = "cache" if "cache" in params else "past_key_values"  # transformers >= 5.2x: cache
        else:
            missing = [a for a in ("n_layers", "d_model", "layers", "forward") if not hasattr(model, a)]
            if missing:
                raise ConfigError("model", type(model).__name__, "an interp Model, a Hugging Face causal LM, or an "
                                  "object with n_layers, d_model, layers and forward(input_ids) (missing: "
                                  + ", ".join(missing) + ")")
            self.layers, self.n_layers, self.d_model = model.layers, int(model.n_layers), int(model.d_model)
            self.params = list(model.parameters()) if hasattr(model, "parameters") else []
            self.cached = False
            self.run_forward = model.forward
        first = next((p for p in self.params), None)
        self.device = first.device if first is not None else torch.device("cpu")
        self.dtype = first.dtype if first is not None else torch.float32

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """No parameter takes a gradient during the fit (restored after)."""
        thawed = [p for p in self.params if p.requires_grad]
        for p in thawed:
            p.requires_grad_(False)
        try:
            yield
        finally:
            for p in thawed:
                p.requires_grad_(True)

    @contextlib.contextmanager
    def hooks(self, record: Sequence[int], root: int | None, stop: int) -> Iterator[dict[int, Tensor]]:
        """Block outputs at `record` (the output of `root` becomes a leaf that requires a gradient, so the graph
        starts there); the forward stops after block `stop`."""
        acts: dict[int, Tensor] = {}

        def make(layer: int):
            def hook(module, args, out):
                x = _block_output(out)
                if layer == root:
                    x = x.detach().requires_grad_(True)
                    out = _with_output(out, x)
                if layer in record:
                    acts[layer] = x
                if layer == stop:
                    raise _Stop
                return out if layer == root else None

            return hook

        handles = [self.layers[ly].register_forward_hook(make(ly)) for ly in sorted({*record, stop})]
        try:
            yield acts
        finally:
            for h in handles:
                h.remove()

    def forward(self, ids: Int[Tensor, "batch pos"], cache: Any = None) -> None:
        try:
            if self.run_forward is not None:
                self.run_forward(ids)
            elif cache is None:
                self.base(input_ids=ids, use_cache=False)
            else:
                self.base(input_ids=ids, **{self.cache_kw: cache}, use_cache=True)
        except _Stop:
            pass

    def graph(self, ids: Int[Tensor, " pos"], sources: Sequence[int], target: int, skip_first: int, k: int
              ) -> tuple[dict[int, Tensor], int]:
        """Block outputs (k replicas, the target's and the sources', in one graph rooted at min(sources)) over the
        positions the forward ran with a graph, and the offset of the first valid position among them."""
        ids = ids.to(self.device)[None]
        n = ids.shape[1]
        cache = None
        if self.cached and skip_first > 0:
            from transformers import DynamicCache

            cache = DynamicCache(config=self.config)
            with torch.no_grad(), self.hooks([], None, target):
                self.forward(ids[:, :skip_first], cache)
            if k > 1:
                cache.batch_repeat_interleave(k)
            run, offset = ids[:, skip_first:n - 1], 0
        else:
            run, offset = ids[:, :n - 1], skip_first
        with torch.enable_grad(), self.hooks([*sources, target], min(sources), target) as acts:
            self.forward(run.expand(k, -1), cache)
        return acts, offset


def check_layers(source_layers: Sequence[int] | None, target_layer: int | None, n_layers: int
                 ) -> tuple[list[int], int]:
    """(sources, target) with negative indices resolved; ConfigError naming the field when out of range or when a
    source is not below the target (the reference's `_check_layer_indices`)."""
    target = n_layers - 1 if target_layer is None else int(target_layer)
    if target < 0:
        target += n_layers
    if not 1 <= target < n_layers:
        raise ConfigError("target_layer", target_layer, f"a layer in 1..{n_layers - 1} (or -{n_layers - 1}..-1) of "
                          f"this {n_layers}-layer model")
    if source_layers is None:
        return list(range(target)), target
    sources = sorted({int(ly) + n_layers if int(ly) < 0 else int(ly) for ly in source_layers})
    if not sources or sources[0] < 0 or sources[-1] >= target:
        raise ConfigError("source_layers", list(source_layers), f"layers in 0..{target - 1} (below the target "
                          f"layer {target})")
    return sources, target


def prompts_sha256(prompts: Sequence[Tensor]) -> str:
    """sha256 over the prompts' token ids (each as int64), in order: keys a cache entry and a checkpoint."""
    h = hashlib.sha256()
    for p in prompts:
        a = torch.as_tensor(p).reshape(-1).to("cpu", torch.int64).contiguous().numpy()
        h.update(len(a).to_bytes(8, "little"))
        h.update(a.tobytes())
    return h.hexdigest()


def jacobian_for_prompt(
    net: FitModel, ids: Int[Tensor, " pos"], sources: Sequence[int], target: int, skip_first: int, k: int
) -> dict[int, Float[Tensor, "d_model d_model"]]:
    """One prompt's J_l for every source layer (float32, CPU): one forward of k replicas, ceil(d_model / k)
    backward passes of k one-hot cotangents each (replica b carries dimension start + b at every valid target
    position)."""
    d = net.d_model
    acts, off = net.graph(ids, sources, target, skip_first, k)
    tgt = acts[target]  # (k, pos run, d_model)
    srcs = [acts[ly] for ly in sources]
    out = {ly: torch.zeros(d, d, dtype=torch.float32) for ly in sources}
    cot = torch.zeros_like(tgt)
    rep = torch.arange(k, device=tgt.device)
    starts = range(0, d, k)
    for i, start in enumerate(starts):
        nd = min(k, d - start)
        cot.zero_()
        cot[rep[:nd], off:, start + rep[:nd]] = 1.0
        grads = torch.autograd.grad(tgt, srcs, cot, retain_graph=i < len(starts) - 1)
        for layer, g in zip(sources, grads):
            out[layer][start:start + nd] = g[:nd, off:].float().mean(1).cpu()
        del grads
    return out


def _auto_batch(net: FitModel, longest: int, sources: Sequence[int], target: int) -> int:
    """Replicas per backward pass: CPU_BATCH on a CPU; on a GPU as many as half the free memory holds, by a
    generous estimate of what one replica's graph keeps (block outputs, attention and MLP intermediates)."""
    if net.device.type != "cuda":
        return CPU_BATCH
    free, _ = torch.cuda.mem_get_info(net.device)
    c = net.config if net.cached else None
    d = net.d_model
    d_mlp = int(getattr(c, "intermediate_size", 4 * d) or 4 * d) if c is not None else 4 * d
    heads = int(getattr(c, "num_attention_heads", 16) or 16) if c is not None else 16
    per_token_layer = 16 * d + 6 * d_mlp + 4 * heads * longest
    per_replica = per_token_layer * longest * (target - min(sources) + 1) * 4 * 2
    return max(1, min(net.d_model, int(0.5 * free // max(per_replica, 1))))


def _read_checkpoint(path: Path, state_want: dict[str, Any]) -> tuple[dict[int, Tensor], dict[str, Any]] | None:
    if not path.is_file():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            state = json.loads((f.metadata() or {})["interp_jlens_checkpoint"])
            sums = {int(k.split(".")[1]): f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001 - any unreadable file: one line naming it
        raise ConfigError("checkpoint", str(path), f"a checkpoint written by fit_jacobian_lens ({e})") from None
    for key, want in state_want.items():
        if state.get(key) != want:
            raise ConfigError("checkpoint", str(path), f"a checkpoint of this fit (it was made with {key}="
                              f"{state.get(key)!r}, this fit has {want!r}); delete it to start over")
    return sums, state


def _write_checkpoint(path: Path, sums: dict[int, Tensor], state: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    from .._files import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {f"sum.{ly}": t.contiguous() for ly, t in sums.items()}
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp),
                                             metadata={"interp_jlens_checkpoint": json.dumps(state)}))


def fit_jacobian_lens(
    model: Any,
    prompts: Sequence[Int[Tensor, " pos"]],
    *,
    source_layers: Sequence[int] | None = None,
    target_layer: int | None = None,
    skip_first: int = SKIP_FIRST,
    max_seq_len: int = MAX_SEQ_LEN,
    batch: int | None = None,
    checkpoint: Path | str | None = None,
    checkpoint_every: int = 1,
    progress: bool = True,
) -> JacobianLens:
    """Fit J_l over `prompts` (token ids, BOS as the tokenizer adds it) with the reference estimator (module
    docstring). `source_layers` default to every layer below `target_layer` (default: the last; negative indices
    count from the end). `batch`: output dimensions per backward pass (None: `_auto_batch`). `checkpoint`: a
    safetensors file written every `checkpoint_every` prompts and resumed from when it exists (same settings and
    prompts, else ConfigError); a resumed fit equals the uninterrupted one bit for bit. Prompts with no valid
    position are skipped (a DataWarning says how many); a fit where none has one is a ConfigError."""
    net = FitModel(model)
    sources, target = check_layers(source_layers, target_layer, net.n_layers)
    if skip_first < 0:
        raise ConfigError("skip_first", skip_first, "a count >= 0")
    if max_seq_len < 2:
        raise ConfigError("max_seq_len", max_seq_len, "at least 2 tokens")
    if batch is not None and not 1 <= batch:
        raise ConfigError("batch", batch, "a positive count (output dimensions per backward pass)")
    ids = [torch.as_tensor(p).reshape(-1)[:max_seq_len].to(torch.long) for p in prompts]
    usable = [len(p) - 1 > skip_first for p in ids]
    if not any(usable):
        longest = max((len(p) for p in ids), default=0)
        raise ConfigError("prompts", f"<{len(ids)} prompts, the longest {longest} tokens>", f"at least one prompt of "
                          f"more than skip_first + 1 = {skip_first + 1} tokens (valid positions run from skip_first "
                          f"to the second-to-last)")
    longest = max(len(p) for p in ids)
    k = min(batch or _auto_batch(net, longest, sources, target), net.d_model)
    d = net.d_model
    want = {"source_layers": sources, "target_layer": target, "skip_first": skip_first, "max_seq_len": max_seq_len,
            "d_model": d, "n_prompts_given": len(ids), "prompts_sha256": prompts_sha256(ids)}
    path = Path(checkpoint) if checkpoint is not None else None
    got = _read_checkpoint(path, want) if path is not None else None
    if got is not None:
        sums, state = got
        k = int(state["batch"])  # the same batch as before: the same rows, bit for bit
        n_done, next_idx, n_skipped, seconds = state["n_done"], state["next_idx"], state["n_skipped"], state["seconds"]
    else:
        sums = {ly: torch.zeros(d, d, dtype=torch.float32) for ly in sources}
        n_done = next_idx = n_skipped = 0
        seconds = 0.0

    def save() -> None:
        if path is not None:
            _write_checkpoint(path, sums, {**want, "batch": k, "n_done": n_done, "next_idx": next_idx,
                                           "n_skipped": n_skipped, "seconds": seconds})

    from tqdm.auto import tqdm

    bar = tqdm(total=len(ids), initial=next_idx, desc="jacobian lens", unit="prompt", disable=not progress)
    with net.frozen():
        for idx in range(next_idx, len(ids)):
            t0 = time.perf_counter()
            if usable[idx]:
                per = jacobian_for_prompt(net, ids[idx], sources, target, skip_first, k)
                for ly in sources:
                    sums[ly] += per[ly]
                n_done += 1
            else:
                n_skipped += 1
            next_idx = idx + 1
            seconds += time.perf_counter() - t0
            bar.update(1)
            if next_idx % checkpoint_every == 0 or next_idx == len(ids):
                save()
    bar.close()
    if n_skipped:
        warnings.warn(f"jacobian lens: {n_skipped} of {len(ids)} prompts had no valid position (at most "
                      f"skip_first + 1 = {skip_first + 1} tokens) and were skipped", DataWarning, stacklevel=2)
    J = {ly: sums[ly] / n_done for ly in sources}
    meta = {"n_layers": net.n_layers, "target_layer": target, "skip_first": skip_first, "max_seq_len": max_seq_len,
            "batch": k, "n_skipped": n_skipped, "prompts_sha256": want["prompts_sha256"], "fit_seconds": seconds,
            "estimator": "reference (sum over later target positions, mean over source positions)"}
    info = getattr(model, "info", None)
    if info is not None:
        meta.update(model=getattr(info, "name", None), weights_sha256=getattr(info, "weights_sha256", None))
    return JacobianLens(J, n_prompts=n_done, d_model=d, target_layer=target, n_layers=net.n_layers, metadata=meta)


def n_backward_passes(d_model: int, batch: int) -> int:
    """Backward passes per prompt: ceil(d_model / batch)."""
    return math.ceil(d_model / batch)


__all__ = ["CPU_BATCH", "MAX_SEQ_LEN", "SKIP_FIRST", "FitModel", "JacobianLens", "check_layers",
           "fit_jacobian_lens", "jacobian_for_prompt", "merge_lenses", "prompts_sha256"]
