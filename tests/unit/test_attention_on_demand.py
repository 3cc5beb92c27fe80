"""Attention runs as SDPA in every layer no hook reads inside (`interp._bridge.attention_on_demand`): unhooked, a
forward is Hugging Face's SDPA forward bit for bit; a layer whose pattern is hooked is the bridge's eager
reconstruction bit for bit, and only that layer pays for it."""

from __future__ import annotations

import pytest
import torch

from interp.sites import Site
from interp.testing import FAMILIES

ON_DEMAND = ("llama", "mistral", "qwen2", "gemma3_text", "olmo2")


def _batch(model, n_pos: int = 40):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.info.d_vocab - 5, (2, n_pos), generator=g)
    mask = torch.ones_like(ids)
    mask[1, n_pos - 9:] = 0  # a right-padded row: the mask reaches the layers in SDPA's form
    return ids, mask


def _hf_logits(model, ids, mask, impl: str):
    model.hf.set_attn_implementation(impl)
    try:
        with torch.no_grad():
            return model.hf(input_ids=ids, attention_mask=mask).logits
    finally:
        model.hf.set_attn_implementation("eager")


@pytest.mark.parametrize("family", ON_DEMAND)
def test_unhooked_is_hf_sdpa_and_hooked_is_eager_bit_for_bit(family, family_dirs):
    from interp.models import load_model

    model = load_model(str(family_dirs(family)), device="cpu")
    assert model.info.attention == "sdpa where unhooked", model.info.attention
    _identities(model)


def _identities(model) -> None:
    ids, mask = _batch(model)
    keep = mask.bool()
    with torch.no_grad():
        fast = model.forward(ids, mask)
    sdpa, eager = _hf_logits(model, ids, mask, "sdpa"), _hf_logits(model, ids, mask, "eager")
    assert (sdpa - eager)[keep].abs().max() > 0, "control: SDPA and eager differ in the last bits here"
    assert torch.equal(fast[keep], sdpa[keep]), f"unhooked vs HF sdpa {(fast - sdpa)[keep].abs().max():.2e}"
    seen = []
    every = [(Site("attn_pattern", layer), lambda x: seen.append(x.shape)) for layer in range(model.info.n_layers)]
    with torch.no_grad(), model.hooks(every):
        hooked = model.forward(ids, mask)
    assert len(seen) == model.info.n_layers
    assert torch.equal(hooked[keep], eager[keep]), f"hooked vs HF eager {(hooked - eager)[keep].abs().max():.2e}"


def test_only_the_hooked_layer_goes_eager(family_dirs):
    """A pattern hook on layer 1 fires with the eager pattern; layers 0, 2, 3 stay SDPA (their pattern point never
    fires), and an edit of layer 1's pattern changes the output."""
    from interp.models import load_model

    model = load_model(str(family_dirs("llama")), device="cpu")
    ids, mask = _batch(model)
    fired = []
    spies = [(Site("attn_pattern", layer), (lambda i: lambda x: fired.append(i))(layer))
             for layer in range(model.info.n_layers) if layer != 1]
    with torch.no_grad(), model.hooks(spies):
        pass  # registering and leaving restores the fast path
    with torch.no_grad(), model.hooks([(Site("attn_pattern", 1), lambda x: fired.append(("L1", tuple(x.shape))))]):
        base = model.forward(ids, mask)
    assert fired == [("L1", (2, model.info.n_heads, ids.shape[1], ids.shape[1]))], fired
    with torch.no_grad(), model.hooks([(Site("attn_pattern", 1), lambda x: torch.ones_like(x) / x.shape[-1])]):
        edited = model.forward(ids, mask)
    assert (edited - base).abs().max() > 1e-3, "a replaced pattern must change the logits"


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - set(ON_DEMAND) - {"gemma", "qwen3", "granite", "stablelm"}))
def test_families_without_the_path_stay_eager(family, family_dirs):
    from interp.models import load_model

    model = load_model(str(family_dirs(family)), device="cpu")
    if model.info.attention == "eager":
        ids, mask = _batch(model)
        with torch.no_grad():
            out = model.forward(ids, mask)
        eager = _hf_logits(model, ids, mask, "eager")
        assert (out - eager)[mask.bool()].abs().max() <= 1e-4
    else:  # a family the bridge reconstructs with the rotary class: the identities above hold for it too
        _identities(model)


class _HF:
    """An HF model's attention switch, without the model: `set_attn_implementation` and the config it sets."""

    def __init__(self, impl: str | None, lacks: tuple[str, ...] = ()):
        self.config = type("Config", (), {"_attn_implementation": impl})()
        self.lacks, self.calls = lacks, []

    def set_attn_implementation(self, impl: str) -> None:
        if impl in self.lacks:
            raise ValueError(f"{impl} is not supported")
        self.calls.append(impl)
        self.config._attn_implementation = impl


@pytest.mark.parametrize("before, want, lacks, used, calls", [
    ("eager", "sdpa", (), "sdpa", ["sdpa", "eager"]),      # decoding: SDPA inside, eager restored
    ("sdpa", "eager", (), "eager", ["eager", "sdpa"]),      # nnsight, a pattern read: eager inside
    ("eager", "eager", (), "eager", []),                    # already there: no switch
    ("eager", "sdpa", ("sdpa",), "eager", []),              # a family without SDPA (Gemma 2) stays eager
    (None, "eager", (), "sdpa", []),                        # a config that names none is left as it is
])
def test_attention_implementation_switches_inside_and_restores(before, want, lacks, used, calls):
    """The one switch that decoding (`decoding_attention`) and the nnsight backend's forward share."""
    from interp.generate import attention_implementation

    hf = _HF(before, lacks)
    with attention_implementation(hf, want) as got:
        assert got == used and hf.config._attn_implementation == (want if calls else before)
    assert hf.config._attn_implementation == before and hf.calls == calls, (hf.config._attn_implementation, hf.calls)


def test_nnsight_forward_reads_patterns_under_eager_and_else_runs_sdpa(family_dirs):
    from interp.models import load_model

    model = load_model(str(family_dirs("llama")), backend="nnsight")
    assert model.info.attention.startswith("sdpa")
    with model._attention(pattern=False) as unhooked:
        assert unhooked == model.hf.config._attn_implementation == "sdpa"
    with model._attention(pattern=True) as hooked:
        assert hooked == model.hf.config._attn_implementation == "eager"
    assert model.hf.config._attn_implementation == "eager"
