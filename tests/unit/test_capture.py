"""Streaming reducers equal a full-tensor reference on a tiny random model."""

import torch

from interp import AbsMean, Max, Mean, TopK, Welford, batched, capture, run_with_cache, token_mask
from interp.sites import Site

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Hello", "A much longer sentence about nothing at all, "
         "with commas, and more words than the others.", "Short one here", "Numbers 1 2 3 4 5 6"]


def reference(model, enc, site, skip_first):
    _, cache = run_with_cache(model, enc["input_ids"], enc["attention_mask"], [site])
    act = cache[site]
    act = act.transpose(1, 2) if site.is_pattern else act
    mask = token_mask(enc["attention_mask"], skip_first)
    return act[mask].double()  # (tok, *units)


def test_reducers_match_reference(tiny_model):
    enc = tiny_model.tokenize(TEXTS, padding_side="left")
    for site in (Site("mlp_post", 1), Site("attn_z", 0), Site("resid_pre", 1), Site("attn_pattern", 1)):
        ref = reference(tiny_model, enc, site, skip_first=1)
        stats = capture(tiny_model, batched(enc, 2), {site: [Mean(), AbsMean(), Max(), Welford(), TopK(3)]},
                        skip_first=1)[site]
        torch.testing.assert_close(stats["mean"], ref.mean(0).float(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(stats["abs_mean"], ref.abs().mean(0).float(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(stats["max"], ref.amax(0).float())
        torch.testing.assert_close(stats["min"], ref.amin(0).float())
        torch.testing.assert_close(stats["var"], ref.var(0, unbiased=False).float(), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(stats["topk_values"], ref.topk(3, dim=0).values.float())
        assert int(stats["n_tokens"]) == ref.shape[0]


def test_unpadded_batches_reduce_every_token_exactly(tiny_model):
    """Without padding or skipped positions capture reads the activation in place (no masked copy): the float64
    sums equal the reference's bit for bit, and TopK's (seq, pos) still point at their values."""
    ids = torch.randint(5, 200, (4, 9), generator=torch.Generator().manual_seed(0))
    enc = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    for site in (Site("mlp_post", 1), Site("attn_pattern", 0)):
        ref = reference(tiny_model, enc, site, skip_first=0)
        stats = capture(tiny_model, [enc], {site: [Mean(), AbsMean(), TopK(1)]})[site]
        assert torch.equal(stats["mean"], (ref.sum(0) / len(ref)).float())
        assert torch.equal(stats["abs_mean"], (ref.abs().sum(0) / len(ref)).float())
        seq, pos = stats["topk_where"][0].reshape(-1, 2)[0].tolist()
        assert ref[seq * 9 + pos].reshape(-1)[0] == stats["topk_values"][0].reshape(-1)[0]


def test_padding_and_position_zero_are_excluded(tiny_model):
    left = tiny_model.tokenize(TEXTS, padding_side="left")
    right = tiny_model.tokenize(TEXTS, padding_side="right")
    site = Site("mlp_post", 0)
    a = capture(tiny_model, [left], {site: [Mean()]}, skip_first=1)[site]["mean"]
    b = capture(tiny_model, [right], {site: [Mean()]}, skip_first=1)[site]["mean"]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    n_real = int(left["attention_mask"].sum()) - len(TEXTS)
    assert int(capture(tiny_model, [left], {site: [Mean()]}, skip_first=1)[site]["n_tokens"]) == n_real


def test_topk_locations_point_at_the_values(tiny_model):
    enc = tiny_model.tokenize(TEXTS, padding_side="right")
    site = Site("mlp_post", 1)
    stats = capture(tiny_model, batched(enc, 2), {site: [TopK(2)]})[site]
    _, cache = run_with_cache(tiny_model, enc["input_ids"], enc["attention_mask"], [site])
    unit = 7
    seq, pos = stats["topk_where"][0, unit].tolist()
    assert torch.isclose(cache[site][seq, pos, unit], stats["topk_values"][0, unit])


def test_package_functions_survive_their_modules_being_imported():
    """`interp.capture(...)` after anything imported the implementation module (a public submodule of the same
    name used to replace the function as the package attribute: "'module' object is not callable")."""
    import importlib

    import interp

    importlib.import_module("interp._capture")
    importlib.import_module("interp._intervene")
    assert callable(interp.capture) and callable(interp.intervene) and callable(interp.ablate)
    assert interp.capture.__module__ == "interp._capture"
