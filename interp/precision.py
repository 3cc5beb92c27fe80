"""Mixed precision where the hardware runs it natively.

`fast_dtype` picks the matmul dtype for work whose precision needs are modest (training steps of tiny
adapters or slices, greedy decoding): bfloat16 on CUDA and on CPUs with native bf16 (AVX512-BF16 or AMX),
where it is about twice as fast as float32, and float32 elsewhere, where bf16 is emulated and slower.
`autocast` applies it to a block of frozen-model calls; losses, checks and parameters stay float32.
`inference_autocast` is the same for a no-grad block (greedy decoding), with each frozen weight cast once for the
block instead of at every call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import torch

Choice = Literal["auto", "float32", "bfloat16"]


def native_bf16(device: torch.device | str) -> bool:
    """True where bfloat16 matmuls run natively (CUDA, or a CPU with AVX512-BF16/AMX through oneDNN)."""
    device = torch.device(device)
    if device.type == "cuda":
        return True
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def fast_dtype(choice: Choice, device: torch.device | str) -> torch.dtype:
    """The dtype `choice` names; "auto" is bfloat16 where `native_bf16(device)`, else float32."""
    if choice == "auto":
        return torch.bfloat16 if native_bf16(device) else torch.float32
    return getattr(torch, choice)


def autocast_dtype(choice: Choice, model) -> torch.dtype:
    """The dtype to autocast `model`'s calls to: `fast_dtype(choice)` for a float32 model; a model loaded in
    half precision keeps its own dtype."""
    return fast_dtype(choice, model.device) if model.dtype == torch.float32 else model.dtype


def autocast(dtype: torch.dtype, device: torch.device | str) -> torch.autocast:
    """torch.autocast to `dtype` on `device`'s type; disabled for float32."""
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype, enabled=dtype != torch.float32)


@contextlib.contextmanager
def inference_autocast(dtype: torch.dtype, module: torch.nn.Module, device: torch.device | str) -> Iterator[None]:
    """`autocast(dtype, device)` inside `torch.no_grad()`, for a block of calls to `module`, whose frozen weights
    are cast to `dtype` once for the whole block.

    torch's autocast keeps its low-precision copy of a weight only for leaf tensors that require grad, so a frozen
    model is cast again at every call: about 15% of a batch-32 greedy decode step of SmolLM2 on a CPU with native
    bf16 (measured by alternating runs). Inside this block grad mode is off and the frozen floating-point parameters
    are marked as requiring grad, so that the cache holds them (no gradient can be recorded under no_grad); both
    are restored on exit, when the cache is freed. The cache costs `dtype`'s size of the weights in memory."""
    if dtype == torch.float32:
        with torch.no_grad():
            yield
        return
    frozen = [p for p in module.parameters() if not p.requires_grad and p.is_floating_point()]
    with torch.no_grad():
        for p in frozen:
            p.requires_grad_(True)
        try:
            with autocast(dtype, device):
                yield
        finally:
            for p in frozen:
                p.requires_grad_(False)


def dtype_name(dtype: torch.dtype) -> str:
    """"bfloat16" for torch.bfloat16 (as the manifest records dtypes)."""
    return str(dtype).removeprefix("torch.")
