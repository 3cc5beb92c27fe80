"""Gradient capture: one forward and one backward give d metric / d activation at any site, on both backends."""

import pytest
import torch

from interp import add
from interp.errors import InterpError
from interp.gradients import capture_grads
from interp.sites import Site

SITES = [Site("resid_pre", 1), Site("attn_z", 0), Site("mlp_out", 0), Site("attn_pattern", 1), Site("resid_post", 1)]


@pytest.fixture
def enc(tiny_model):
    return tiny_model.tokenize(["When Mary and John went to the store, John gave"])


def metric(logits):
    return logits[:, -1, 11].sum() - logits[:, -1, 12].sum()


def forward_metric(m, enc) -> float:
    with torch.no_grad():
        return float(metric(m.forward(enc["input_ids"], enc["attention_mask"])))


@pytest.mark.parametrize("site", SITES, ids=str)
def test_gradient_matches_finite_differences(tiny_model, enc, site):
    out = capture_grads(tiny_model, enc["input_ids"], enc["attention_mask"], [Site("resid_pre", 0), site], metric)
    assert float(out.value) == pytest.approx(forward_metric(tiny_model, enc), abs=1e-5)
    g = out.grads[site][0]  # (pos, *units)
    assert g.abs().max() > 0, f"{site}: zero gradient"
    gen = torch.Generator().manual_seed(0)
    pos = g.shape[0] - 1  # the metric's position: every site reaches it there, also in the last layer
    eps = 1e-3
    for trial in range(2):  # the gradient's own direction and a random one (the control of a lucky match)
        v = g[pos] if trial == 0 else torch.randn(g[pos].shape, generator=gen)
        v = v / v.norm()
        with add(tiny_model, site, v, positions=[pos], coeff=eps):
            up = forward_metric(tiny_model, enc)
        with add(tiny_model, site, v, positions=[pos], coeff=-eps):
            down = forward_metric(tiny_model, enc)
        fd = (up - down) / (2 * eps)
        want = float((g[pos] * v).sum())
        assert fd == pytest.approx(want, rel=2e-2, abs=2e-3), f"{site} direction {trial}: fd {fd:.5f}, grad {want:.5f}"


def test_embedding_gradient_equals_autograd_through_plain_hf(tiny_model, enc):
    site = Site("resid_pre", 0)
    out = capture_grads(tiny_model, enc["input_ids"], enc["attention_mask"], [site], metric)
    emb = tiny_model.hf.get_input_embeddings()(enc["input_ids"]).detach().requires_grad_()
    logits = tiny_model.hf(inputs_embeds=emb, attention_mask=enc["attention_mask"]).logits
    (want,) = torch.autograd.grad(metric(logits), [emb])
    torch.testing.assert_close(out.grads[site], want, atol=1e-5, rtol=1e-4)
    assert all(p.grad is None for p in tiny_model.hf.parameters()), "a parameter got a gradient"


def test_nnsight_backend_gives_the_same_gradients(tiny_model, enc):
    from interp.nnsight_backend import NNsightModel

    nn = NNsightModel(tiny_model.hf, tiny_model.tokenizer, tiny_model.info, tiny_model.device, tiny_model.dtype)
    a = capture_grads(tiny_model, enc["input_ids"], enc["attention_mask"], SITES, metric)
    b = capture_grads(nn, enc["input_ids"], enc["attention_mask"], SITES, metric)
    for s in SITES:
        torch.testing.assert_close(a.acts[s], b.acts[s], atol=1e-5, rtol=1e-4, msg=str(s))
        torch.testing.assert_close(a.grads[s], b.grads[s], atol=1e-5, rtol=1e-4, msg=str(s))
    nn.remote = True
    with pytest.raises(InterpError, match="remote"):
        capture_grads(nn, enc["input_ids"], enc["attention_mask"], SITES, metric)


def test_rows_get_their_own_gradients(tiny_model):
    enc = tiny_model.tokenize(["When Mary and John went", "After Anna and Peter left"])
    site = Site("resid_pre", 1)
    both = capture_grads(tiny_model, enc["input_ids"], enc["attention_mask"], [site], metric)
    one = capture_grads(tiny_model, enc["input_ids"][1:], enc["attention_mask"][1:], [site], metric)
    torch.testing.assert_close(both.grads[site][1:], one.grads[site], atol=1e-5, rtol=1e-4)


def test_a_non_scalar_metric_is_refused(tiny_model, enc):
    with pytest.raises(InterpError, match="scalar"):
        capture_grads(tiny_model, enc["input_ids"], enc["attention_mask"], [Site("resid_pre", 1)],
                      lambda logits: logits[:, -1, :3])
