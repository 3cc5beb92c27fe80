"""jlens's batched hot paths equal the one-at-a-time computations they replace, on a tiny random model:
`read_layers` (many layers per unembedding product, the identity readout shared between lenses) against one
readout per layer, and `edited_logps` (edits as copies of the batch in one forward) against one edited forward each,
with the unedited run as the control."""

from __future__ import annotations

import torch

from interp import intervene
from interp.sites import Site
from interp_probes.jlens import interventions as I
from interp_probes.jlens.readout import read_layers

TEXTS = ["The capital of France is", "A short one", "The official language of the country where it is"]


def test_read_layers_equals_one_readout_per_layer_and_shares_the_identity(tiny_model):
    m = tiny_model
    g = torch.Generator().manual_seed(0)
    d, n = m.info.d_model, m.info.n_layers
    hs = {layer: torch.randn(3, 5, d, generator=g) for layer in range(n)}
    mats = {layer: torch.eye(d) + 0.1 * torch.randn(d, d, generator=g) for layer in range(n)}
    last = n - 1

    def tilted(layer, h):  # a linear lens that reads the last layer as it is, as the J-lens reads its target
        return h if layer == last else h @ mats[layer].T

    def logit(layer, h):
        return h

    calls = []

    def fn(logits):
        calls.append(logits.shape[0])
        return {"logits": logits.clone(), "top": logits.argmax(-1)}

    shared: dict = {}
    got_logit = read_layers(m, logit, hs, fn, shared)
    n_calls = len(calls)
    got = read_layers(m, tilted, hs, fn, shared)
    for layer in range(n):
        want = m.unembed(tilted(layer, hs[layer])).float()
        torch.testing.assert_close(got[layer]["logits"], want, rtol=1e-6, atol=1e-6)
        assert torch.equal(got[layer]["top"], want.argmax(-1))
    assert got[last] is got_logit[last], "the identity readout of a layer is computed once and shared"
    assert sum(calls[n_calls:]) == n - 1, "the second lens unembeds only the layers it moves"
    assert not torch.equal(got[0]["logits"], got_logit[0]["logits"]), "control: a moved layer reads otherwise"


@torch.no_grad()
def test_edited_logps_equal_one_edited_forward_each(tiny_model):
    m = tiny_model
    enc = m.tokenize(TEXTS, padding_side="left")
    site = Site("resid_post", 0)
    g = torch.Generator().manual_seed(1)
    vecs = [3.0 * torch.randn(m.info.d_model, generator=g) for _ in range(3)]
    edits = [I.add_last(v) for v in vecs] + [lambda x: x]
    batched = I.edited_logps(m, enc, site, edits)
    assert len(batched) == len(edits)
    base = I.last_logp(m, enc)
    full = m(enc["input_ids"], enc["attention_mask"])[:, -1].float().log_softmax(-1)
    torch.testing.assert_close(base, full, rtol=1e-5, atol=1e-5)  # last position only = the full forward's
    for edit, got in zip(edits, batched):
        with intervene(m, site, edit):
            want = I.last_logp(m, enc)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(batched[-1], base, rtol=1e-5, atol=1e-5)  # the no-op edit is the unedited run
    assert (batched[0] - base).abs().max() > 1e-2, "control: a steering vector moves the output"
