"""Interventions change what they should and weight edits restore bit-exactly."""

import pytest
import torch

from interp import WeightEdit, ablate, add, edit_weights, patch, scale, weights_digest
from interp.sites import Site


@pytest.fixture
def enc(tiny_model):
    return tiny_model.tokenize(["Interventions must restore the model exactly."])


def logits(m, enc):
    with torch.no_grad():
        return m.forward(enc["input_ids"], enc["attention_mask"])


def test_activation_edits(tiny_model, enc):
    base = logits(tiny_model, enc)
    site = Site("mlp_post", 0)
    with ablate(tiny_model, site):
        zeroed = logits(tiny_model, enc)
    assert not torch.allclose(base, zeroed)
    with scale(tiny_model, site, 1.0):
        torch.testing.assert_close(logits(tiny_model, enc), base)
    with scale(tiny_model, site, 0.0):
        torch.testing.assert_close(logits(tiny_model, enc), zeroed)
    with add(tiny_model, Site("resid_pre", 1), torch.zeros(tiny_model.info.d_model)):
        torch.testing.assert_close(logits(tiny_model, enc), base)
    torch.testing.assert_close(logits(tiny_model, enc), base)  # hooks removed on exit


def test_patch_restores_clean_run(tiny_model, enc):
    from interp import run_with_cache

    site = Site("resid_post", 0)
    base, cache = run_with_cache(tiny_model, enc["input_ids"], enc["attention_mask"], [site])
    with ablate(tiny_model, Site("mlp_post", 0)), patch(tiny_model, site, cache[site]):
        torch.testing.assert_close(logits(tiny_model, enc), base)


def test_weight_edits_restore_exactly_even_on_error(tiny_model, enc):
    before = weights_digest(tiny_model)
    base = logits(tiny_model, enc)
    edits = [WeightEdit("model.layers.0.mlp.up_proj.weight", 0, [1, 5, 9]),
             WeightEdit("model.layers.1.mlp.down_proj.weight", 1, [3], factor=2.5)]
    with edit_weights(tiny_model, edits):
        assert weights_digest(tiny_model) != before
        assert not torch.allclose(logits(tiny_model, enc), base)
    assert weights_digest(tiny_model) == before
    with pytest.raises(RuntimeError), edit_weights(tiny_model, edits):
        raise RuntimeError("inside")
    assert weights_digest(tiny_model) == before
    assert torch.equal(logits(tiny_model, enc), base)


def test_weight_edit_matches_activation_ablation(tiny_model, enc):
    """Zeroing down_proj column i == zeroing mlp_post unit i."""
    with edit_weights(tiny_model, [WeightEdit("model.layers.1.mlp.down_proj.weight", 1, [4, 8])]):
        a = logits(tiny_model, enc)
    with ablate(tiny_model, Site("mlp_post", 1), index=[4, 8]):
        b = logits(tiny_model, enc)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_bad_layer_is_rejected(tiny_model, enc):
    from interp.errors import ConfigError

    with pytest.raises(ConfigError), ablate(tiny_model, Site("mlp_post", 7)):
        logits(tiny_model, enc)
