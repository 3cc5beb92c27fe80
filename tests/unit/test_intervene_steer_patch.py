"""The core's steering hook and batched patching: `interp.steer` adds exactly the vector on the masked positions
(hooked forward and plain HF model alike), and `interp.patch_batched` equals patching one cell at a time."""

from __future__ import annotations

import pytest
import torch

from interp import PatchCell, patch, patch_batched, run_with_cache, steer
from interp.sites import Site


@pytest.fixture
def enc(tiny_model):
    return tiny_model.tokenize(["short", "a longer prompt here"], padding_side="left")


def _vec(model, seed=0):
    return torch.randn(model.info.d_model, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("on,site", [("hf", Site("resid_post", 0)), ("hf", Site("resid_pre", 1)),
                                     ("hooked", Site("resid_post", 0)), ("hooked", Site("resid_pre", 1))])
def test_steer_adds_the_vector_on_masked_positions_only(tiny_model, enc, on, site):
    ids, am = enc["input_ids"], enc["attention_mask"]
    assert (am == 0).any(), "the fixture must have pad positions"
    vec = _vec(tiny_model)

    def fwd():
        if on == "hf":
            pos = (am.long().cumsum(-1) - 1).clamp(min=0)
            tiny_model.hf(input_ids=ids, attention_mask=am, position_ids=pos)
        else:
            tiny_model(ids, am)

    with torch.no_grad():
        with steer(tiny_model, site, torch.zeros_like(vec), am, on=on) as clean:
            fwd()
        with steer(tiny_model, site, vec, am, on=on) as steered:
            fwd()
    real = am.bool()
    assert torch.equal(steered.out, clean.out + vec * am[..., None]), "x + vec * mask, bit for bit"
    assert torch.equal(steered.out[~real], clean.out[~real]), "pad positions untouched"
    diff = steered.out[real] - clean.out[real]
    torch.testing.assert_close(diff, vec.expand_as(diff), atol=1e-5, rtol=0)
    with torch.no_grad():  # the hook is gone on exit
        with steer(tiny_model, site, torch.zeros_like(vec), am, on=on) as again:
            fwd()
    assert torch.equal(again.out, clean.out)


def test_steer_hf_and_hooked_agree_and_generated_positions_are_steered(tiny_model, enc):
    site = Site("resid_post", 0)
    ids, am = enc["input_ids"], enc["attention_mask"]
    vec = _vec(tiny_model, 1)
    pos = (am.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        with steer(tiny_model, site, vec, am, on="hf") as hf:
            tiny_model.hf(input_ids=ids, attention_mask=am, position_ids=pos)
        with steer(tiny_model, site, vec, am, on="hooked") as hooked:
            tiny_model(ids, am)
    real = am.bool()
    torch.testing.assert_close(hf.out[real], hooked.out[real], atol=1e-4, rtol=1e-4)
    # two more tokens decoded without a cache (longer than the mask): every new position is steered
    ids2 = torch.cat([ids, ids[:, -2:]], 1)
    am2 = torch.cat([am, torch.ones_like(am[:, -2:])], 1)
    with torch.no_grad():
        with steer(tiny_model, site, torch.zeros_like(vec), am, on="hooked") as clean:
            tiny_model(ids2, am2)
        with steer(tiny_model, site, vec, am, on="hooked") as steered:
            tiny_model(ids2, am2)
    assert torch.equal(steered.out, clean.out + vec * am2[..., None])


def test_steer_hf_refuses_other_sites(tiny_model):
    with pytest.raises(NotImplementedError, match="resid"), steer(tiny_model, Site("mlp_out", 0), _vec(tiny_model),
                                                                  on="hf"):
        pass


def _one_at_a_time(model, corrupt, source, cell, tok):
    """The metric of one cell with the plain `patch` hook on the pair's own corrupted run."""
    site, p = cell.site, cell.pair
    src = source[site][p:p + 1]
    positions = None if cell.pos < 0 else [cell.pos]
    index = None
    if cell.head >= 0:
        d_head = src.shape[-1]
        index = list(range(cell.head * d_head, (cell.head + 1) * d_head))
    with torch.no_grad(), patch(model, site, src, positions=positions, index=index):
        last = model(corrupt[p:p + 1], None)[:, -1]
    return float(last[0, tok[p]])


@pytest.mark.parametrize("grow", [True, False])
def test_patch_batched_equals_one_at_a_time(tiny_model, grow):
    g, n_pos = 2, 6
    gen = torch.Generator().manual_seed(0)
    clean_ids = torch.randint(1000, 2000, (g, n_pos), generator=gen)
    corrupt = clean_ids.clone()
    corrupt[:, 2] = torch.randint(2000, 3000, (g,), generator=gen)
    tok = torch.tensor([17, 42])
    n_layers, n_heads = tiny_model.info.n_layers, tiny_model.info.n_heads
    sites = [Site(k, layer) for layer in range(n_layers) for k in ("resid_pre", "mlp_out", "attn_z")]
    _, source = run_with_cache(tiny_model, clean_ids, None, sites)
    _, corrupt_cache = run_with_cache(tiny_model, corrupt, None, [Site("resid_pre", 0)])
    cells = []
    for p in range(g):
        for layer in range(n_layers):
            cells += [PatchCell(Site("resid_pre", layer), pair=p, pos=q) for q in (0, 2, 5)]
            cells += [PatchCell(Site("mlp_out", layer), pair=p), PatchCell(Site("resid_pre", layer), pair=p)]
            cells += [PatchCell(Site("attn_z", layer), pair=p, head=h, pos=q) for h in range(n_heads) for q in (-1, 2)]

    def reduce(last, pair):
        return last[torch.arange(len(pair)), tok[pair]]

    vals, n_fwd = patch_batched(tiny_model, corrupt, source, cells, reduce, batch_size=7, grow=grow,
                                start=corrupt_cache[Site("resid_pre", 0)])
    assert n_fwd == -(-len(cells) // 7)
    want = torch.tensor([_one_at_a_time(tiny_model, corrupt, source, c, tok) for c in cells])
    torch.testing.assert_close(vals, want, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        base = tiny_model(corrupt, None)[:, -1]
    unpatched = torch.stack([base[c.pair, tok[c.pair]] for c in cells])
    assert (want - unpatched).abs().max() > 1e-3, "the patches move the metric (the comparison is not vacuous)"


def test_patch_batched_needs_start_to_grow_a_group(tiny_model):
    ids = torch.randint(1000, 2000, (2, 4), generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="start"):
        patch_batched(tiny_model, ids, {}, [PatchCell(Site("resid_pre", 0))], lambda last, pair: last[:, 0], 4,
                      grow=True)
