"""Interventions: activation edits at sites (hooks) and weight edits that restore exactly.

Activation edits are context managers over a Model:

    with ablate(model, Site("mlp_post", 3), index=[5, 9]):          # zero units 5 and 9
        logits = model(ids, mask)
    with scale(model, site, 2.0), add(model, site2, vector):          # they compose
        ...

Each edit is a function `edit(x) -> x'` applied to the site's activation viewed as
``(batch, pos, *units)``; `intervene` wraps any such function.

Steering adds a vector on a prompt's real tokens, on the hooked forward or on the plain HF model that cached
generation runs (`steer(model, site, vec, mask, on="hf")`); `patch_batched` runs many activation patches
(a pair's source activation at one site, position and head each) in a few forward passes.

Weight edits change named slices of HF parameters and put the original bytes back on exit,
also when the body raises:

    with edit_weights(model, [WeightEdit("model.layers.3.mlp.up_proj.weight", 0, [5, 9])]):
        ...
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .sites import Site, token_first, token_restore

Index = int | Sequence[int] | Tensor | None


def _idx(index: Index, device) -> Tensor | slice:
    if index is None:
        return slice(None)
    return torch.as_tensor(index if not isinstance(index, int) else [index], dtype=torch.long, device=device)


@contextlib.contextmanager
def intervene(model, site: Site, edit: Callable[[Tensor], Tensor]) -> Iterator[None]:
    """Apply `edit` to the activation at `site` (as (batch, pos, *units)) in enclosed forwards."""

    def hook(act: Tensor) -> Tensor:
        return token_restore(site, edit(token_first(site, act)))

    with model.hooks([(site, hook)]):
        yield


def _units_flat(x: Tensor) -> Tensor:
    """(batch, pos, *units) -> (batch, pos, n_units) view."""
    return x.reshape(*x.shape[:2], -1)


def ablate(
    model, site: Site, index: Index = None, mode: str = "zero", mean: Tensor | None = None, positions: Index = None
):
    """Zero (mode="zero") or mean-replace (mode="mean", `mean` shaped like the units) units.

    `index` selects flattened unit indices (None = all), `positions` token positions (None = all).
    """
    if mode not in ("zero", "mean"):
        raise ValueError(f"ablate mode {mode!r}: 'zero' or 'mean'")
    if mode == "mean" and mean is None:
        raise ValueError("ablate mode 'mean' needs the mean activation")

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        flat = _units_flat(x)
        u, p = _idx(index, x.device), _idx(positions, x.device)
        if mode == "zero":
            flat[:, p, u] = 0.0
        else:
            flat[:, p, u] = mean.reshape(-1).to(x)[u]
        return x

    return intervene(model, site, edit)


def scale(model, site: Site, factor: float, index: Index = None, positions: Index = None):
    """Multiply the selected units by `factor`."""

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        flat = _units_flat(x)
        u, p = _idx(index, x.device), _idx(positions, x.device)
        flat[:, p, u] = flat[:, p, u] * factor
        return x

    return intervene(model, site, edit)


def add(model, site: Site, vector: Tensor, positions: Index = None, coeff: float = 1.0):
    """Add `coeff * vector` (shaped like the units) at the selected positions."""

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        p = _idx(positions, x.device)
        x[:, p] = x[:, p] + coeff * vector.to(x)
        return x

    return intervene(model, site, edit)


def patch(model, site: Site, source: Tensor, positions: Index = None, index: Index = None):
    """Replace the activation by `source` (batch, pos, *units) from another run (same shape)."""

    def edit(x: Tensor) -> Tensor:
        src = source.to(x)
        if positions is None and index is None:
            return src.clone()
        x = x.clone()
        flat, sflat = _units_flat(x), _units_flat(src)
        u, p = _idx(index, x.device), _idx(positions, x.device)
        flat[:, p, u] = sflat[:, p, u]
        return x

    return intervene(model, site, edit)


# ============================================================================= steering


class Steering:
    """What `steer` yields: `out`, the edited activation of the last forward that passed the site."""

    out: Tensor | None = None


def _steer_edit(vector: Tensor, mask: Tensor | None, record: Steering) -> Callable[[Tensor], Tensor]:
    """x + vector on the masked positions of the prompt and on every position after it."""

    def edit(x: Tensor) -> Tensor:  # x: (batch, pos, d_model)
        add = vector.to(x)
        if mask is None or x.shape[1] < mask.shape[1]:  # no mask, or a cached decoding step (new tokens only)
            x = x + add
        else:  # the prompt (as long as the mask), or prompt + generated tokens decoded without a cache
            extra = x.shape[1] - mask.shape[1]
            m = mask.to(x.device)
            if extra:
                m = torch.cat([m, torch.ones(m.shape[0], extra, dtype=m.dtype, device=x.device)], 1)
            x = x + add * m[..., None].to(x)
        record.out = x.detach()
        return x

    return edit


@contextlib.contextmanager
def steer(
    model, site: Site, vector: Float[Tensor, " d_model"], mask: Int[Tensor, "batch pos"] | None = None,
    on: str = "hooked",
) -> Iterator[Steering]:
    """Add `vector` to the residual stream at `site` in the enclosed forwards: x' = x + vector * mask.

    `mask` (the prompt's attention mask, 1 on real tokens) limits the edit to those positions of the prompt;
    positions past it (tokens generated without a cache) and cached decoding steps (shorter than the mask) are
    all steered; None steers every position. `on="hooked"` edits the hooked forward (`model(...)`,
    `greedy(..., hooked=True)`); `on="hf"` hangs the edit on the plain HF model (`model.hf`, cached
    `greedy`), where the hooked backend's hooks never fire: on the decoder layer behind the site
    (`model.anatomy`; resid_post: its output, resid_pre: its input), so only those two kinds. The yielded
    `Steering.out` holds the edited activation of the last forward (batch, pos, d_model).
    """
    if on not in ("hooked", "hf"):
        raise ValueError(f"steer on={on!r}: 'hooked' or 'hf'")
    record = Steering()
    edit = _steer_edit(vector, mask, record)
    if on == "hooked":
        with intervene(model, site, edit):
            yield record
        return
    if site.kind not in ("resid_post", "resid_pre"):
        raise NotImplementedError(f"steer on='hf' edits resid_pre or resid_post (a decoder layer's input or "
                                  f"output), not {site.kind}: use on='hooked'")
    layer = model.anatomy.layers[site.layer]
    if site.kind == "resid_post":
        def hook(mod, args, output):
            if isinstance(output, tuple):
                return (edit(output[0]), *output[1:])
            return edit(output)

        handle = layer.register_forward_hook(hook)
    else:
        def pre(mod, args, kwargs):
            if args:
                return (edit(args[0]), *args[1:]), kwargs
            kwargs = dict(kwargs)
            kwargs["hidden_states"] = edit(kwargs["hidden_states"])
            return args, kwargs

        handle = layer.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        yield record
    finally:
        handle.remove()


# ============================================================================= batched patching


@dataclass(frozen=True)
class PatchCell:
    """One patch for `patch_batched`: the source run `pair`'s activation at `site`, written into the patched run's
    row, at position `pos` (-1: every position) and, at an ``attn_z`` site, head `head` (-1 elsewhere: the whole
    vector)."""

    site: Site
    pair: int = 0
    """Row of the source / patched pair in the group (an index into `patch_batched`'s `base_ids`)."""
    pos: int = -1
    head: int = -1


def _writer(cells: Sequence[PatchCell], rows: Tensor, source: dict[Site, Tensor]) -> Callable[[Tensor], Tensor]:
    """Hook that writes each cell's source activation into its row (x: (batch, pos, *units))."""
    site = cells[0].site
    src = source[site][torch.tensor([c.pair for c in cells])]  # (cells, pos, *units): each cell's own pair
    head = torch.tensor([c.head for c in cells])
    pos = torch.tensor([c.pos for c in cells])
    whole, one = pos < 0, pos >= 0

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        s = src.to(x)
        r, h, q = rows.to(x.device), head.to(x.device), pos.to(x.device)
        w, o = whole.to(x.device), one.to(x.device)
        c = torch.arange(len(r), device=x.device)
        if site.kind == "attn_z":  # x: (batch, pos, head, d_head); s: (cells, pos, head, d_head)
            if w.any():
                x[r[w], :, h[w]] = s[c[w], :, h[w]]  # (cells, pos, d_head)
            if o.any():
                x[r[o], q[o], h[o]] = s[c[o], q[o], h[o]]  # (cells, d_head)
        else:  # x: (batch, pos, d_model); s: (cells, pos, d_model)
            if w.any():
                x[r[w]] = s[c[w]]
            if o.any():
                x[r[o], q[o]] = s[c[o], q[o]]
        return x

    return edit


def _grower(pairs: list[int]) -> Callable[[Tensor], Tensor]:
    """Hook at resid_pre: append a copy of its pair's unpatched row (rows 0..g-1) for each cell starting here."""
    idx = torch.tensor(pairs)

    def grow(x: Tensor) -> Tensor:
        return torch.cat([x, x[idx.to(x.device)]], 0)

    return grow


def _starter(start: Tensor) -> Callable[[Tensor], Tensor]:
    """Hook at resid_pre of layer 0: the one-row start becomes every pair's residual stream."""

    def begin(x: Tensor) -> Tensor:  # x: (1, pos, d_model) -> (g, pos, d_model)
        return start.to(x)

    return begin


def _chain(steps: list[Callable[[Tensor], Tensor]]) -> Callable[[Tensor], Tensor]:
    """One hook applying `steps` in order."""

    def hook(x: Tensor) -> Tensor:
        for step in steps:
            x = step(x)
        return x

    return hook


def patch_batched(
    model,
    base_ids: Int[Tensor, "g pos"],
    source: dict[Site, Tensor],
    cells: Sequence[PatchCell],
    reduce: Callable[[Tensor, Tensor], Tensor],
    batch_size: int,
    progress: Callable | None = None,
    grow: bool | None = None,
    start: Float[Tensor, "g pos d_model"] | None = None,
) -> tuple[Float[Tensor, " cell"], int]:
    """Many patched runs in a few forward passes: `reduce` of each cell's last-position logits (in `cells` order)
    and the number of forward passes.

    `base_ids` holds the runs to patch (a group of g pairs of one token length; activation patching's corrupted
    prompts), `source[site]` the activations patched in (g, pos, *units), one per pair, at every site a cell
    names. `reduce(last_logits (rows, d_vocab), pair (rows,)) -> (rows,)` turns a chunk's logits into values (a
    metric), so no (cells, d_vocab) tensor is held. `batch_size` cells share one forward.

    Rows join the batch where they start to differ from the base runs. The forward starts with one row; at
    ``resid_pre`` of layer 0 that row is replaced by `start`, the base residual streams of every pair of the
    group, and at ``resid_pre`` of layer l the hook appends a copy of a pair's row for every cell of that pair at
    layer l; the hook at the cell's own site then writes the pair's source activation into the cell's row. Layers
    before l therefore run once per pair instead of once per cell, and only the last position is unembedded.
    The causal mask and the rotary tables are built for the one-row start and broadcast to the grown batch (the
    bridge builds its mask per input row, so the pairs join after the embedding rather than at the input; every
    pair of a group has the same positions). The nnsight backend keeps every module's batch as it entered (it
    writes edits back in the traced shape), so there every row runs from the input (``grow=False``, the default
    off the TransformerLens backend): the same cells and numbers, at the cost of the layers before each cell's.
    """
    grow = getattr(model, "backend", "tl") == "tl" if grow is None else grow
    g = base_ids.shape[0]
    if grow and g > 1 and start is None:
        raise ValueError(f"patch_batched grows a group of {g} pairs from their resid_pre of layer 0: pass start")
    order = sorted(range(len(cells)), key=lambda i: (cells[i].site.layer, i))
    out = torch.empty(len(cells))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    for chunk in (progress(chunks) if progress else chunks):
        hooks = []
        row_of: dict[int, int] = {}
        next_row = g  # rows 0..g-1: the pairs' unpatched runs
        layers = sorted({cells[i].site.layer for i in chunk} | ({0} if grow and g > 1 else set()))
        for layer in layers:
            here = [i for i in chunk if cells[i].site.layer == layer]
            for i in here:
                row_of[i] = next_row
                next_row += 1
            steps = []
            if grow and g > 1 and layer == 0:
                steps.append(_starter(start))
            if grow and here:
                steps.append(_grower([cells[i].pair for i in here]))
            by_site: dict[Site, list[int]] = {}
            for i in here:
                by_site.setdefault(cells[i].site, []).append(i)
            at_start = by_site.pop(Site("resid_pre", layer), None)
            if at_start:
                steps.append(_writer([cells[i] for i in at_start], torch.tensor([row_of[i] for i in at_start]), source))
            if steps:
                hooks.append((Site("resid_pre", layer), _chain(steps)))
            for site, idx in by_site.items():
                hooks.append((site, _writer([cells[i] for i in idx], torch.tensor([row_of[i] for i in idx]), source)))
        pair_of_row = torch.tensor(list(range(g)) + [cells[i].pair for i in sorted(row_of, key=row_of.get)])
        with torch.no_grad(), model.hooks(hooks):
            if grow:  # one row in; the pairs join after the embedding; only the last position is unembedded
                last = model.forward_until(base_ids[:1], Site("resid_post", model.info.n_layers - 1), None)
                logits = model.unembed(last, last_only=True)  # (g + rows, 1, d_vocab)
            else:
                ids = base_ids[pair_of_row.to(base_ids.device)]  # every row from the input
                logits = model.forward(ids, None)[:, -1:]  # (g + rows, 1, d_vocab)
        rows = torch.tensor([row_of[i] for i in chunk])
        vals = reduce(logits[rows.to(logits.device), 0], pair_of_row[rows])
        out[torch.tensor(chunk)] = vals.cpu()
    return out, len(chunks)


# ============================================================================= weights


@dataclass(frozen=True)
class WeightEdit:
    """Scale (0 = zero) the rows (dim=0) or columns (dim=1) `index` of parameter `param`."""

    param: str
    """Dotted HF parameter name, e.g. model.layers.3.mlp.up_proj.weight."""
    dim: int
    index: Sequence[int]
    factor: float = 0.0
    value: Tensor | None = field(default=None, compare=False)
    """Replacement slices (the shape of the slice) written instead of scaling, e.g. other units' weights in a swap
    control; per edit, so several edits of one fused parameter (Phi-3's qkv_proj) each carry their own."""


def get_param(model, name: str) -> torch.nn.Parameter:
    params = dict(model.hf.named_parameters())
    if name not in params:
        raise KeyError(f"{model.info.name} has no parameter {name!r}")
    return params[name]


@contextlib.contextmanager
def edit_weights(model, edits: Sequence[WeightEdit], values: dict[str, Tensor] | None = None) -> Iterator[None]:
    """Apply weight edits in place; restore the exact original bytes on exit (even on error).

    `values` optionally maps a parameter name to replacement slices (same shape as the slice),
    used instead of scaling (e.g. copying other units' weights in a swap control).
    """
    saved: list[tuple[torch.nn.Parameter, int, Tensor, Tensor]] = []
    try:
        with torch.no_grad():
            for e in edits:
                p = get_param(model, e.param)
                idx = torch.as_tensor(list(e.index), dtype=torch.long, device=p.device)
                saved.append((p, e.dim, idx, p.index_select(e.dim, idx).clone()))
                if e.value is not None:
                    p.index_copy_(e.dim, idx, e.value.to(p))
                elif values is not None and e.param in values:
                    p.index_copy_(e.dim, idx, values[e.param].to(p))
                else:
                    p.index_copy_(e.dim, idx, p.index_select(e.dim, idx) * e.factor)
        yield
    finally:
        with torch.no_grad():
            for p, dim, idx, orig in reversed(saved):
                p.index_copy_(dim, idx, orig)


#: The integer dtype of each element size: a parameter's raw bits, viewed without a copy.
_RAW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
#: Elements per step of the on-device checksum (bounds its int64 temporaries to 128 MiB each).
_CHUNK = 1 << 24
#: An odd 64-bit multiplier (from the golden ratio): element i is weighted by (2i + 1) * _GOLD mod 2^64, odd.
_GOLD = 0x1E3779B97F4A7C15


def _int64(v: int) -> int:
    """v mod 2^64 as a signed int64 (what a wrapping int64 product gives)."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def _raw(p: Tensor) -> Tensor:
    """The tensor's raw bits as a flat integer tensor of the same element size (no copy when contiguous)."""
    x = p.detach()
    if not x.is_contiguous():
        x = x.contiguous()
    return x.reshape(-1).view(_RAW[x.element_size()])


def _device_checksum(p: Tensor) -> Tensor:
    """int64 [Σ x_i, Σ x_i (2i+1) G] over the raw integer bits x of `p`, sums that wrap, on p's own device.

    A flipped bit changes one x_i by ±2^b (b < 64; the sign bit of a sign-extended int16/int32 by ±2^15/±2^31),
    so it changes the first sum by a nonzero amount mod 2^64; the odd position weights of the second make it see
    order too (two swapped elements)."""
    x = _raw(p)
    w = (torch.arange(min(x.numel(), _CHUNK), dtype=torch.int64, device=x.device) * 2 + 1) * _GOLD
    s = torch.zeros(2, dtype=torch.int64, device=x.device)
    for k in range(0, x.numel(), _CHUNK):
        c = x[k : k + _CHUNK]
        cs = c.sum(dtype=torch.int64)
        s[0] += cs
        s[1] += (c * w[: c.numel()]).sum() + cs * _int64(2 * k * _GOLD)  # this chunk's weights (2(k+i)+1) G
    return s


def weights_digest(model, on_device: bool | None = None) -> str:
    """A digest of every parameter's raw bits (name order), to prove that edits were restored exactly.

    It is compared before and after within one process, on the same devices (`RunContext.weights_unchanged`):
    not an identifier that is stable across machines or versions. A parameter in host memory is hashed with
    xxh3-128 over a zero-copy view of its bytes; one on an accelerator gets `_device_checksum` (two wrapping
    int64 sums that any single flipped bit changes), computed where it lives, so 16 bytes per parameter reach
    the host and no weight does. `on_device=True` takes the checksum path for host tensors too (tests of it).
    """
    try:
        import xxhash
    except ImportError:  # pragma: no cover - a declared dependency; the checksum needs only torch
        xxhash = None
    h = hashlib.sha256()
    sums: dict[torch.device, list[Tensor]] = {}
    for name, p in sorted(model.hf.named_parameters(), key=lambda kv: kv[0]):
        h.update(f"{name}:{p.dtype}:{tuple(p.shape)}:{p.device};".encode())
        if p.device.type == "cpu" and not on_device and xxhash is not None:
            h.update(xxhash.xxh3_128(_raw(p).cpu().numpy()).digest())
        else:
            sums.setdefault(p.device, []).append(_device_checksum(p))
    for dev in sorted(sums, key=str):  # one small copy per device, after every checksum was queued
        h.update(str(dev).encode() + torch.stack(sums[dev]).cpu().numpy().tobytes())
    return h.hexdigest()
