"""Interventions: activation edits at sites (hooks) and weight edits that restore exactly.

Activation edits are context managers over a Model:

    with ablate(model, Site("mlp_post", 3), index=[5, 9]):          # zero units 5 and 9
        logits = model(ids, mask)
    with scale(model, site, 2.0), add(model, site2, vector):          # they compose
        ...

Each edit is a function `edit(x) -> x'` applied to the site's activation viewed as
``(batch, pos, *units)``; `intervene` wraps any such function.

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
