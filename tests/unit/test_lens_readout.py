"""The logit and tuned lenses (interp.lens): the logit lens's readout is the logit_lens probe's decode bit for bit
(soft-capped family included); the tuned lens, trained, reads the model's output closer than the logit lens."""

from __future__ import annotations

import pytest
import torch

from interp.errors import ConfigError
from interp.lens import LogitLens, TunedLens, obtain_tuned_lens
from interp_probes.logit_lens.probe import decode, read_residuals


@pytest.fixture(scope="module")
def gemma2(family_dirs):
    from interp.models import load_model

    return load_model(str(family_dirs("gemma2")), device="cpu")


@pytest.mark.parametrize("which", ["tiny_model", "gemma2"])
def test_logit_lens_readout_is_the_logit_lens_probe_decode(which, request):
    model = request.getfixturevalue(which)
    enc = model.tokenize("The quick brown fox jumps over the lazy dog because it can.")
    resid = read_residuals(model, enc)  # (layer, pos, d_model)
    lens = LogitLens(model.info.n_layers)
    mine = torch.stack([lens.readout(model, ly, resid[ly]) for ly in range(model.info.n_layers)])
    assert torch.equal(mine.float().softmax(-1), decode(model, resid)), "logit lens readout differs from the probe"
    if which == "gemma2":  # the soft-cap is applied: no logit above it
        cap = model.anatomy.final_softcap
        assert cap and mine.abs().max() <= cap, f"soft-cap {cap}, max |logit| {mine.abs().max():.2f}"
    with pytest.raises(ConfigError, match="layer"):
        lens.transport(model.info.n_layers, resid[0])


def _kl(model, lens, resid):
    final = model.unembed(resid[-1]).float().log_softmax(-1)
    out = []
    for ly in range(resid.shape[0] - 1):
        q = lens.readout(model, ly, resid[ly]).float().log_softmax(-1)
        out.append(float((final.exp() * (final - q)).sum(-1).mean()))
    return out


def test_tuned_lens_beats_the_logit_lens_on_held_out_text(family_dirs, tmp_path, monkeypatch):
    from interp.models import load_model

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    model = load_model(str(family_dirs("llama")), device="cpu")
    g = torch.Generator().manual_seed(0)
    train = [torch.randint(5, 2000, (4, 32), generator=g) for _ in range(2)]
    held = torch.randint(5, 2000, (1, 40), generator=g)
    settings = dict(steps=40, lr=3e-3, tokens_per_step=32)
    lens, info = obtain_tuned_lens(model, train, progress=False, **settings)
    again, info2 = obtain_tuned_lens(model, train, progress=False, **settings)
    assert not info["cached"] and info2["cached"] and torch.equal(again.A, lens.A)
    with torch.no_grad():
        resid = read_residuals(model, {"input_ids": held, "attention_mask": torch.ones_like(held)})[:, 1:]
        tuned, logit = _kl(model, lens, resid), _kl(model, LogitLens(model.info.n_layers), resid)
    assert all(t < 0.9 * lg for t, lg in zip(tuned, logit)), f"tuned KL {tuned} vs logit-lens KL {logit}"
    assert torch.equal(lens.transport(3, resid[3]), resid[3])  # the last layer reads as it is
    path = lens.save(tmp_path / "tuned.safetensors")
    back = TunedLens.load(path, model)
    assert torch.equal(back.A, lens.A) and torch.equal(back.b, lens.b) and back.metadata["steps"] == 40
    with pytest.raises(ConfigError, match="4 layers of d_model=128"):
        TunedLens.load(path, type("Info", (), {"name": "other", "n_layers": 4, "d_model": 64})())
