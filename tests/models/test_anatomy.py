"""interp.anatomy on every family: the bridge's logits equal Hugging Face's, each projection's neuron view
reproduces the hooked activation exactly, and the family tables (interp.families) say what the hooks do."""

from __future__ import annotations

import pytest
import torch

from interp import families
from interp.sites import Site
from interp.testing import FAMILIES

pytestmark = pytest.mark.slow
TEXT = ["The cat sat on the mat and looked around the quiet room."]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_bridge_logits_equal_hf_and_views_reproduce_hooks(family, family_models):
    m = family_models(family)
    a = m.anatomy
    ids = m.tokenize(TEXT)["input_ids"]
    with torch.no_grad():
        err = float((m(ids) - m.hf(ids).logits).abs().max())
    assert err <= 1e-4, f"{family}: bridge vs HF logits differ by {err:.2e} (eager)"

    # every q/k/v/up(/gate) neuron of layer 1 is x . W[rows(i)] + b of the projection's input x
    roles = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "up": "mlp_up" if a.gated else "mlp_gate"}
    if a.gated:
        roles["gate"] = "mlp_gate"
    inputs = {"attn": Site("attn_in", 1), "mlp": Site("mlp_in", 1)}
    acts: dict[str, torch.Tensor] = {}
    sites = list(inputs.values()) + [Site(k, 1) for k in roles.values()]

    def keep(kind: str):
        return lambda x: acts.__setitem__(kind, x.clone())

    with torch.no_grad(), m.hooks([(s, keep(s.kind)) for s in sites]):
        m(ids)
    params = dict(m.hf.named_parameters())
    for role, kind in roles.items():
        p = a.proj(1, role)
        w = p.take(params[p.weight])
        w = w if p.axis == 0 else w.T  # (n, d_in)
        x = acts["attn_in" if role in "qkv" else "mlp_in"]
        if a.qk_norm and role in "qk" or a.family == "olmo2" and role in "qkv":
            continue  # q/k norms act on the projection's output (OLMo 2's attn_in is not its input): see below
        y = x @ w.T + (params[p.bias][p.index] if p.bias else 0)
        got = acts[kind].reshape(*y.shape[:2], -1)
        assert float((y - got).abs().max()) <= 1e-4, f"{family} {role}: the neuron view does not reproduce {kind}"
    # o and down: their neurons are the projection's inputs, n of them
    assert a.proj(1, "o").n == m.info.n_heads * m.info.d_head
    assert a.proj(1, "down").n == m.info.d_mlp == a.proj(1, "up").n


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_tables_match_the_hooks_that_fire(family, family_models):
    m = family_models(family)
    fired: set[str] = set()
    pairs = []
    for kind in ("attn_rot_q", "attn_rot_k", "mlp_up"):
        name = Site(kind, 0).tl_name
        if name in m.bridge.hook_dict:
            pairs.append((name, kind))
    ids = m.tokenize(TEXT)["input_ids"]
    points = m.bridge.hook_dict
    for name, kind in pairs:
        points[name].add_hook((lambda k: lambda x, hook: fired.add(k))(kind), dir="fwd", level=7)
    try:
        with torch.no_grad():
            m(ids)
    finally:
        for name, _ in pairs:
            points[name].remove_hooks(dir="fwd", level=7)
    rotary_fires = {"attn_rot_q", "attn_rot_k"} <= fired
    assert rotary_fires == (family not in families.NO_ROTARY | families.BRIDGE_HIDES_ROTARY), (family, fired)
    assert ("mlp_up" in fired) == (family not in families.NOT_GATED) == m.anatomy.gated, (family, fired)
    assert m.anatomy.rotary == (family not in families.NO_ROTARY)
    # a rotary site asked of a family without one is served by the fallback, and the manifest says so
    if family in families.NO_ROTARY | families.BRIDGE_HIDES_ROTARY:
        assert set(m.info.site_fallbacks) == {"attn_rot_q", "attn_rot_k"}
        got = []
        with torch.no_grad(), m.hooks([(Site("attn_rot_k", 0), got.append)]):
            m(ids)
        assert got and got[0].shape[-2:] == (m.info.n_kv_heads, m.info.d_head)
    else:
        assert m.info.site_fallbacks is None


ROTATED = [f for f in FAMILIES if f not in families.NO_ROTARY | families.BRIDGE_HIDES_ROTARY]


@pytest.mark.parametrize("family", ROTATED)
def test_rotated_keys_are_the_ones_hf_caches_and_an_edit_reaches_the_scores(family, family_models):
    """attn_rot_k is what the attention keys with: at every layer it equals the keys Hugging Face's own forward
    stores in its KV cache (GPT-NeoX and Phi-3 included, whose bridge fires the point only through
    interp._bridge); and replacing it by zeros at layer 1 makes that layer's pattern uniform over the causal past."""
    m = family_models(family)
    ids = m.tokenize(TEXT)["input_ids"]
    got: dict[int, list[torch.Tensor]] = {lay: [] for lay in range(m.info.n_layers)}
    keep = [(Site("attn_rot_k", lay), got[lay].append) for lay in got]
    with torch.no_grad():
        with m.hooks(keep):
            m(ids)
        cache = m.hf(ids, use_cache=True).past_key_values
    for lay in range(m.info.n_layers):
        hf_keys = cache.layers[lay].keys.transpose(1, 2)  # (batch, pos, kv_head, d_head)
        assert got[lay][0].shape == hf_keys.shape, (family, lay)
        err = float((got[lay][0] - hf_keys).abs().max())
        assert err <= 1e-5 * max(1.0, float(hf_keys.abs().max())), f"{family} layer {lay}: {err:.2e}"
    pats = []
    with torch.no_grad(), m.hooks([(Site("attn_rot_k", 1), torch.zeros_like), (Site("attn_pattern", 1), pats.append)]):
        m(ids)
    n = ids.shape[1]
    uniform = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]
    assert torch.allclose(pats[0][0].float(), uniform.expand_as(pats[0][0]), atol=1e-5), family


def test_keystone_slices_of_a_fused_qkv_stay_apart(family_models):
    """Phi-3's q, k and v share one qkv_proj weight: zeroing or swapping a q neuron touches its row only, and a
    swap of q and k neurons in one edit list writes each its own source rows (not the last type's)."""
    import numpy as np

    from interp import edit_weights, weights_digest
    from interp_probes.keystone.ablate import swap_edits, zero_edits
    from interp_probes.keystone.neurons import SliceMap

    m = family_models("phi3")
    smap = SliceMap(m)
    w = smap.weight("attn_q", 1)
    assert smap.weight_name("attn_q", 1) == smap.weight_name("attn_k", 1) == smap.weight_name("attn_v", 1)
    before, digest = w.detach().clone(), weights_digest(m)
    d_q = m.info.n_heads * m.info.d_head
    d_kv = m.info.n_kv_heads * m.info.d_head
    mask = {t: np.zeros((m.info.n_layers, n), bool) for t, n in (("attn_q", d_q), ("attn_k", d_kv))}
    mask["attn_k"][1, 3] = True
    with edit_weights(m, zero_edits(smap, mask, m.anatomy)):
        zero = (w.abs().sum(1) == 0).nonzero().flatten().tolist()
        assert zero == [d_q + 3], zero  # the K neuron 3 is row d_q + 3 of the fused weight
    pairs = {("attn_q", 1): (np.array([0, 1]), np.array([5, 6])), ("attn_k", 1): (np.array([2]), np.array([7]))}
    with edit_weights(m, swap_edits(smap, pairs)):
        assert torch.equal(w[0], before[5]) and torch.equal(w[1], before[6])
        assert torch.equal(w[d_q + 2], before[d_q + 7])
    assert weights_digest(m) == digest


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in families.NO_ROTARY])
def test_rope_partners_are_the_dimensions_the_model_rotates_together(family, family_models):
    """`anatomy.rope_partner` against the model itself: with head 0's query one-hot in dimension a and its key
    one-hot in b != a (set on the projections' outputs, before any rotation), the score of key j from the last
    query is s^2 sin(theta (i - j)) when a and b are rotated together, and 0 otherwise: the layer-0 attention of
    head 0 varies over the keys exactly for the partner (a == b would give cos, flat to second order at the lowest
    frequencies). Covers rotate-half, GPT-J's adjacent pairs and partial rotaries."""
    m = family_models(family)
    a, hf = m.anatomy, m.hf
    ids = m.tokenize(TEXT)["input_ids"][:, :8]
    uniform = torch.full((ids.shape[1],), 1.0 / ids.shape[1])

    def one_hot(role: str, dim: int):
        proj = a.proj(0, role)
        mod = hf.get_submodule(proj.weight.removesuffix(".weight"))
        head0 = proj.index.view(-1, a.d_head)[0]

        def hook(_module, _inputs, out):
            out = out.clone()
            out[..., proj.index] = 0
            out[..., head0[dim]] = 30.0
            return out

        return mod.register_forward_hook(hook)

    def varies(qd: int, kd: int) -> bool:
        handles = [one_hot("q", qd), one_hot("k", kd)]
        try:
            with torch.no_grad():
                att = hf(input_ids=ids, output_attentions=True).attentions[0][0, 0, -1].float()
        finally:
            for h in handles:
                h.remove()
        return float((att - uniform).abs().max()) > 1e-4

    r = a.rotary_dims
    assert 0 < r <= a.d_head and r % 2 == 0
    probes_ = sorted({0, 1, r // 2 - 1, r // 2, r - 1, *([r, a.d_head - 1] if r < a.d_head else [])})
    for qd in probes_:
        together = {kd for kd in range(a.d_head) if kd != qd and varies(qd, kd)}
        partner = a.rope_partner(qd)
        want = set() if partner is None else {partner}
        assert together == want, f"{family}: dimension {qd} rotates with {sorted(together)}, anatomy says {partner}"
