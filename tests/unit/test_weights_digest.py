"""`weights_digest` sees every bit of every parameter: one flipped bit anywhere changes it, restoring the bit
restores it, on both of its paths (xxh3 over host bytes, and the on-device checksum that CUDA takes, run here
on the CPU), in float32 and bfloat16, on the tiny random model and on the embedded smollm2-135m."""

from __future__ import annotations

import pytest
import torch

from interp import weights_digest
from interp._intervene import _device_checksum

PATHS = [pytest.param(False, id="host-xxh3"), pytest.param(True, id="device-checksum")]


@pytest.fixture(scope="module")
def tiny_bf16(tiny_model_dir):
    from interp.models import load_model

    return load_model(str(tiny_model_dir), device="cpu", dtype="bfloat16")


def _flip(p: torch.nn.Parameter, index: int, bit: int) -> None:
    """XOR one bit of element `index` (flat) of `p`, in place, through its raw integer view."""
    bits = {2: torch.int16, 4: torch.int32}[p.element_size()]
    with torch.no_grad():
        raw = p.data.view(-1).view(bits)
        raw[index] ^= torch.tensor(1 << bit, dtype=torch.int64).to(bits)  # 1 << 31 wraps to int32's sign bit


def _flips_are_seen(p: torch.nn.Parameter, digest) -> None:
    """Flip the lowest, a middle and the sign bit of the first, middle and last element of `p`: each flip changes
    `digest()`, and flipping it back restores it."""
    before = digest()
    assert digest() == before  # deterministic
    nbits = 8 * p.element_size()
    for index in (0, p.numel() // 2, p.numel() - 1):
        for bit in (0, nbits // 2, nbits - 1):
            _flip(p, index, bit)
            try:
                assert digest() != before, (index, bit)
            finally:
                _flip(p, index, bit)
            assert digest() == before, (index, bit)


def _check(model, names: list[str], on_device: bool, whole: bool = True) -> None:
    """The host path over the whole model's digest; the device path per parameter (the digest hashes the
    per-parameter checksums in name order), then (`whole`) once through the whole digest."""
    params = dict(model.hf.named_parameters())
    for name in names:
        p = params[name]
        if on_device:
            _flips_are_seen(p, lambda p=p: tuple(_device_checksum(p).tolist()))
        else:
            _flips_are_seen(p, lambda: weights_digest(model))
    if on_device and whole:
        p = params[names[-1]]
        before = weights_digest(model, on_device=True)
        _flip(p, p.numel() - 1, 0)
        try:
            assert weights_digest(model, on_device=True) != before
        finally:
            _flip(p, p.numel() - 1, 0)
        assert weights_digest(model, on_device=True) == before


def _spread(model) -> list[str]:
    """The first parameter in name order, a middle weight matrix and the last parameter."""
    params = sorted(model.hf.named_parameters(), key=lambda kv: kv[0])
    matrices = [n for n, p in params if p.dim() == 2]
    return [params[0][0], matrices[len(matrices) // 2], params[-1][0]]


@pytest.mark.parametrize("on_device", PATHS)
def test_one_bit_flip_changes_the_digest_float32(tiny_model, on_device):
    _check(tiny_model, _spread(tiny_model), on_device)


@pytest.mark.parametrize("on_device", PATHS)
def test_one_bit_flip_changes_the_digest_bfloat16(tiny_bf16, on_device):
    assert next(tiny_bf16.hf.parameters()).dtype == torch.bfloat16
    _check(tiny_bf16, _spread(tiny_bf16), on_device)


@pytest.mark.parametrize("on_device", PATHS)
def test_one_bit_flip_changes_the_digest_smollm2(model, on_device):
    names = _spread(model)  # the embedding, a middle layer's weight, the final norm
    # the device path: the checksum per parameter, not of the 28M-entry embedding nor through the whole digest
    # (1-2 s each on the CPU), which the tiny model's tests cover
    _check(model, names[1:] if on_device else names, on_device, whole=False)


def test_the_checksum_sees_order_and_spans_chunks(monkeypatch):
    import interp._intervene as iv

    x = torch.arange(10, dtype=torch.float32)
    swapped = x.clone()
    swapped[[2, 7]] = swapped[[7, 2]]
    a, b = _device_checksum(x), _device_checksum(swapped)
    assert a[0] == b[0] and a[1] != b[1]  # same multiset of bits, another order
    monkeypatch.setattr(iv, "_CHUNK", 3)  # several chunks give the sums of one
    assert torch.equal(_device_checksum(x), a)
    assert torch.equal(_device_checksum(x.to(torch.bfloat16)), _device_checksum(x.to(torch.bfloat16).clone()))
