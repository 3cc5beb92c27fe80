"""The core's decoding pieces: the in-place KV cache and the weight-caching autocast give exactly what
transformers' own cache and a per-call autocast give."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from interp.generate import greedy, growing_cache
from interp.precision import inference_autocast


def _kv(gen: torch.Generator, b: int, t: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.randn(b, 2, t, 8, generator=gen).to(dtype), torch.randn(b, 2, t, 8, generator=gen).to(dtype))


def test_growing_cache_holds_what_dynamic_cache_holds_through_crop_and_batch_selection():
    gen = torch.Generator().manual_seed(0)
    start = [_kv(gen, 3, 5) for _ in range(2)]
    grow, ref = growing_cache(layers=start), DynamicCache(start)
    for step in range(80):  # past the first capacity (64) and one doubling
        for i in range(2):
            k, v = _kv(gen, grow.layers[i].keys.shape[0], 1 + step % 3)
            got, want = grow.update(k, v, i), ref.update(k, v, i)
            assert all(torch.equal(a, b) for a, b in zip(got, want))
        if step == 30:
            grow.crop(-4), ref.crop(-4)
        if step == 50:
            idx = torch.tensor([2, 0])
            grow.batch_select_indices(idx), ref.batch_select_indices(idx)
        assert grow.get_seq_length() == ref.get_seq_length()
    assert grow.layers[0].keys.shape == (2, 2, ref.get_seq_length(), 8)
    # the keys are a view of a buffer written in place, not a fresh concatenation per step
    assert grow.layers[0].keys.data_ptr() == grow.layers[0]._kbuf.data_ptr()


def test_growing_cache_promotes_like_concatenation():
    gen = torch.Generator().manual_seed(1)
    grow, ref = growing_cache(), DynamicCache()
    for dtype in (torch.bfloat16, torch.float32):
        k, v = _kv(gen, 2, 3, dtype)
        got, want = grow.update(k, v, 0), ref.update(k, v, 0)
        assert got[0].dtype == want[0].dtype and torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_greedy_with_the_growing_cache_equals_transformers_generate(family, tmp_path):
    """Full-attention (Llama) and alternating sliding-window (Gemma 2) layers: the same greedy tokens as HF's
    `generate`, which keeps its own cache."""
    from interp.models import load_model
    from interp.testing import tiny_family_dir

    model = load_model(str(tiny_family_dir(family, tmp_path / family, seed=3)), device="cpu")
    enc = model.tokenize(["the cat sat on the", "a b c d e f g h i j k l m n o p"], padding_side="left")
    ours = greedy(model, enc, 24, stop_ids=[])
    with torch.no_grad():
        ids = model.hf.generate(**enc, max_new_tokens=24, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert ours == ids[:, enc["input_ids"].shape[1]:].tolist()


def test_inference_autocast_equals_plain_autocast_and_restores_the_frozen_model(tiny_model):
    hf = tiny_model.hf
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    frozen = [p.requires_grad for p in hf.parameters()]
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        want = hf(input_ids=ids).logits
    with inference_autocast(torch.bfloat16, hf, "cpu"):
        assert not torch.is_grad_enabled()
        got = hf(input_ids=ids).logits
        again = hf(input_ids=ids).logits
    assert torch.equal(got, want) and torch.equal(again, want)  # a cached cast is the same cast
    assert [p.requires_grad for p in hf.parameters()] == frozen and torch.is_grad_enabled()
    assert got.grad_fn is None
