"""Keystone probe stages: selection, controls, weight edits, recording equality and masked SFT.

Pure stages run on numpy; model stages on the tiny random Llama (2 layers, GQA 4 heads / 2 KV heads).
"""

from __future__ import annotations

import numpy as np
import pytest

from interp.config import build_config
from interp.errors import ConfigError
from interp_probes.keystone import KeystoneConfig
from interp_probes.keystone.data import (
    CAPABILITIES,
    builtin_prompts,
    builtin_tasks,
    final_integer,
    score_answer,
    sft_data,
)
from interp_probes.keystone.neurons import kv_row, neuron_coords
from interp_probes.keystone.selection import (
    cells_frame,
    count,
    iou,
    iou_chance,
    keystone,
    mlp_effective,
    n_keep,
    n_keep_global,
    select_prompt,
    stability,
    top_c,
    units,
)

# ----------------------------------------------------------------------------- config


def test_sizes_follow_the_spec():
    micro = build_config(KeystoneConfig, {"size": "micro"})
    quick = build_config(KeystoneConfig, {"size": "quick"})
    default = build_config(KeystoneConfig, {})
    assert (micro.n_groups, micro.max_new_tokens, micro.tf_check_tokens, micro.task_items) == (2, 16, 8, 6)
    assert (micro.ppl_seqs, micro.ppl_len, micro.massive_test_seqs, micro.massive_test_len) == (2, 32, 1, 4)
    assert (quick.n_groups, quick.max_new_tokens, quick.ppl_seqs, quick.ppl_len, quick.task_items) == (2, 48, 8, 64, 30)
    assert (quick.massive_test_seqs, quick.massive_test_len) == (4, 8)
    for c in (micro, quick):
        assert c.sweep_ps == (c.top_p,) and c.n_random_seeds == 5 and not c.sft.enable
        assert (c.n_highnorm_seeds, c.n_swap_seeds) == (1, 1)
    assert default.sweep_ps == (0.001, 0.002, 0.005, 0.01, 0.02)
    assert build_config(KeystoneConfig, {"sft.enable": True}).sft.enable


@pytest.mark.parametrize("over, field", [
    ({"n_random_seeds": 4}, "n_random_seeds"),
    ({"top_p": 0}, "top_p"),
    ({"neuron_types": ["fwd_up", "mlp"]}, "neuron_types"),
    ({"selection_mode": "nope"}, "selection_mode"),
    ({"recording": "cached"}, "recording"),
    ({"sft.mode": "loose"}, "sft.mode"),
    ({"sft.variants": ["keystone", "all"]}, "sft.variants"),
    ({"massive_test_seqs": 99}, "massive_test_seqs"),
    ({"ablation": False}, "ablation"),
])
def test_bad_values_name_the_field(over, field):
    with pytest.raises(ConfigError) as e:
        build_config(KeystoneConfig, over)
    assert e.value.field == field


# ----------------------------------------------------------------------------- data


def test_prompt_groups_are_disjoint_with_one_prompt_per_capability():
    prompts = builtin_prompts(10)
    assert len({p.text for p in prompts}) == len(prompts) == 40
    for g in range(1, 11):
        assert sorted(p.capability for p in prompts if p.group == g) == sorted(CAPABILITIES)
    assert builtin_prompts(3) == prompts[:12]  # group g depends only on g


def test_task_suite_is_split_evenly_and_scored_exactly():
    items = builtin_tasks(150)
    assert [sum(it.task == t for it in items) for t in ("arith", "capitals", "sequences")] == [50, 50, 50]
    arith = [it for it in items if it.task == "arith"]
    assert all(0 <= int(it.answer) <= 100 for it in arith)
    assert score_answer(" 17\n3", "17") and not score_answer(" 17.", "17")
    assert score_answer(" Mexico City\n", "Mexico City")


def test_sft_problems_are_two_step_and_disjoint():
    train, held = sft_data(80, 60)
    assert len(train) == 80 and len(held) == 60
    assert not {it.question for it in train} & {it.question for it in held}
    for it in train + held:
        assert it.solution.endswith(f"The answer is {it.answer}.")
        assert final_integer(it.solution) == it.answer and 0 <= it.answer <= 99
        assert all(int(x) <= 99 for x in __import__("re").findall(r"\d+", it.solution))
    assert final_integer("so 3 + 4 = 7. The answer is 7.") == 7 and final_integer("none") is None


# ----------------------------------------------------------------------------- selection


def test_top_c_breaks_ties_by_lower_index_and_n_keep_floors():
    v = np.array([[1.0, 3.0, 3.0, 3.0, 0.5]])
    assert top_c(v, 2).tolist() == [[False, True, True, False, False]]
    assert n_keep(1536, 0.005) == 7 and n_keep(192, 0.005) == 1 and n_keep(200, 0.005) == 1 and n_keep(400, 0.005) == 2


def _means(rng, L=3, n=(200, 40)):
    return {"fwd_up": rng.random((L, n[0])), "attn_k": rng.random((L, n[1]))}


def test_keystone_is_the_intersection_and_cells_count_it():
    rng = np.random.default_rng(0)
    shared = _means(rng)
    prompts = []
    for _ in range(4):
        m = {t: v * 0.5 + 0.5 * rng.random(v.shape) for t, v in shared.items()}
        m["fwd_up"][1, 17] = 50.0  # one neuron is top for every prompt
        prompts.append(m)
    key, per = keystone(prompts, 0.02)
    assert key["fwd_up"][1, 17]
    for s in per:
        assert all((key[t] <= s[t]).all() for t in key)
        assert count(s) == 3 * (n_keep(200, 0.02) + n_keep(40, 0.02))
    cells = cells_frame(0.02, per)
    assert int(cells.n_intersection.sum()) == count(key)
    assert ((cells.n_intersection <= cells.c) & (cells.c <= cells.n_union)).all()
    assert units(key)[0][0] == "fwd_up" and mlp_effective({"fwd_up": key["fwd_up"]}) == int(key["fwd_up"].sum())


def test_global_modes_keep_the_global_count():
    m = _means(np.random.default_rng(1))
    g = select_prompt(m, 0.01, "global_per_type")
    assert int(g["fwd_up"].sum()) == n_keep(600, 0.01) and int(g["attn_k"].sum()) == n_keep(120, 0.01)
    assert count(select_prompt(m, 0.01, "global")) == n_keep_global(720, 0.01) == 8  # ceil, as the released code


def test_iou_and_its_chance_level():
    a = {"x": np.zeros((1, 100), bool)}
    b = {"x": np.zeros((1, 100), bool)}
    a["x"][0, :10] = True
    b["x"][0, 5:15] = True
    assert iou(a, b) == pytest.approx(5 / 15)
    e = 10 * 10 / 100
    assert iou_chance(a, b) == pytest.approx(e / (20 - e))
    frame = stability({1: a, 2: b, 3: a})
    assert len(frame) == 3 and frame.iou.max() == 1.0


# ----------------------------------------------------------------------------- neurons and controls


def test_gqa_index_maps():
    # released code: query-width index -> KV row; 9 heads over 3 KV heads of 64 dims
    assert kv_row(0, 64, 3) == 0 and kv_row(3 * 64 + 5, 64, 3) == 64 + 5 and kv_row(8 * 64 + 63, 64, 3) == 2 * 64 + 63

    class Info:
        n_heads, n_kv_heads, d_head = 9, 3, 64

    assert neuron_coords("attn_q", 5 * 64 + 7, Info) == {"head": 5, "dim": 7, "kv_head": 1}
    assert neuron_coords("attn_v", 2 * 64 + 1, Info) == {"head": None, "dim": 1, "kv_head": 2}


def test_controls_are_module_matched_and_disjoint_from_the_set():
    from interp_probes.keystone.ablate import highnorm, matched_random, swap_pairs

    rng = np.random.default_rng(0)
    key = {"fwd_up": rng.random((4, 300)) < 0.02, "attn_v": rng.random((4, 64)) < 0.05}
    norms = {t: rng.random(m.shape) for t, m in key.items()}
    for ctrl in (matched_random(key, rng), highnorm(key, norms, 0.05, rng), highnorm(key, norms, 0.05, None)):
        for t in key:
            assert (ctrl[t].sum(1) == key[t].sum(1)).all()
            assert not (ctrl[t] & key[t]).any()
    top = highnorm(key, norms, 0.05, None)
    for layer in range(4):  # the deterministic row is the top-norm non-keystone neurons
        free = np.flatnonzero(~key["fwd_up"][layer])
        best = free[np.argsort(-norms["fwd_up"][layer][free])][: key["fwd_up"][layer].sum()]
        assert set(np.flatnonzero(top["fwd_up"][layer])) == set(best)
    for (t, layer), (i, j) in swap_pairs(key, rng).items():
        assert len(set(j)) == len(j) and not key[t][layer, j].any() and key[t][layer, i].all()


# ----------------------------------------------------------------------------- on the tiny model


TYPES = ("fwd_up", "fwd_down", "attn_q", "attn_k", "attn_v", "attn_o")


def _gen(model, n_new=6):
    from interp_probes.keystone.data import Prompt
    from interp_probes.keystone.record import generate

    return generate(model, [Prompt(1, "p", "knowledge", "Name three colours.")], n_new, 1.1, 64)[0]


def test_teacher_forced_recording_equals_the_per_step_loop(tiny_model):
    from interp_probes.keystone.record import record_per_step, record_teacher_forced, tf_check

    gen = _gen(tiny_model)
    assert gen.n_steps == 6 and len(gen.fed) == gen.n_prompt + 5
    chk = tf_check(tiny_model, gen, 6, TYPES)
    assert chk.max_rel_err <= 1e-5, chk.frame.sort_values("max_rel_err").tail()
    assert set(chk.frame.type) == set(TYPES) and len(chk.frame) == 6 * tiny_model.info.n_layers
    tf = record_teacher_forced(tiny_model, gen, TYPES, keep_rows=True)
    step = record_per_step(tiny_model, gen, TYPES, keep_rows=True)
    info = tiny_model.info
    assert tf.rows["attn_k"].shape == (info.n_layers, 6, info.n_kv_heads * info.d_head)  # native KV width
    assert tf.rows["attn_q"].shape[-1] == info.n_heads * info.d_head
    # the check is sensitive: rows shifted by one position differ by far more than the tolerance
    a, b = tf.rows["fwd_up"][0], step.rows["fwd_up"][0]
    assert float((a[1:] - b[:-1]).abs().max()) > 1e-2 * float(b.abs().max())
    assert np.allclose(tf.means()["fwd_up"], step.means()["fwd_up"], rtol=1e-5, atol=1e-7)


def test_ablation_edits_zero_exactly_the_slices_and_restore(tiny_model):
    import torch

    from interp import edit_weights, weights_digest
    from interp_probes.keystone.ablate import swap_edits, zero_edits
    from interp_probes.keystone.neurons import SliceMap, widths

    smap = SliceMap(tiny_model)
    w = widths(tiny_model.info)
    mask = {t: np.zeros((tiny_model.info.n_layers, w[t]), bool) for t in TYPES}
    mask["fwd_up"][0, 3] = mask["fwd_down"][1, 5] = mask["attn_k"][1, 2] = mask["attn_o"][0, 7] = True
    digest = weights_digest(tiny_model)
    params = dict(tiny_model.hf.named_parameters())
    up, down = smap.weight_name("fwd_up", 0), smap.weight_name("fwd_down", 1)
    before = {n: p.detach().clone() for n, p in params.items()}
    with edit_weights(tiny_model, zero_edits(smap, mask, tiny_model.anatomy)):
        assert float(params[up][3].abs().sum()) == 0 and float(params[down][:, 5].abs().sum()) == 0
        assert float(params[smap.weight_name("attn_o", 0)][:, 7].abs().sum()) == 0
        changed = [n for n, p in params.items() if not torch.equal(p, before[n])]
        assert sorted(changed) == sorted(smap.weight_name(t, layer) for t, layer, _ in units(mask))
        gate = up.replace("up_proj", "gate_proj")
        assert torch.equal(params[gate], before[gate])
    assert weights_digest(tiny_model) == digest
    q = {t: np.zeros_like(m) for t, m in mask.items()}
    q["attn_q"][0, 1] = True
    with edit_weights(tiny_model, zero_edits(smap, q, tiny_model.anatomy, rope_pair=True)):
        zero_rows = (params[smap.weight_name("attn_q", 0)].abs().sum(1) == 0).nonzero().flatten().tolist()
        assert zero_rows == [1, 1 + tiny_model.info.d_head // 2]
    pairs = {("fwd_up", 0): (np.array([3]), np.array([9]))}
    with edit_weights(tiny_model, swap_edits(smap, pairs)):
        assert torch.equal(params[up][3], before[up][9]) and torch.equal(params[up][9], before[up][9])
        assert torch.equal(params[up.replace("up_proj", "gate_proj")][3], before[up.replace("up_proj", "gate_proj")][3])
    assert weights_digest(tiny_model) == digest


def test_weight_zeroing_equals_the_activation_hook_path(tiny_model):
    """Zeroing a weight slice == zeroing the activation index (pre-RoPE for q and k)."""
    import torch

    from interp import ablate, edit_weights
    from interp.sites import Site
    from interp_probes.keystone.ablate import zero_edits
    from interp_probes.keystone.neurons import SPECS, SliceMap, widths

    smap = SliceMap(tiny_model)
    w = widths(tiny_model.info)
    ids = torch.randint(10, 1000, (2, 12))
    for t in TYPES:
        mask = {tt: np.zeros((tiny_model.info.n_layers, w[tt]), bool) for tt in TYPES}
        mask[t][1, [2, 5]] = True
        with torch.no_grad(), edit_weights(tiny_model, zero_edits(smap, mask, tiny_model.anatomy)):
            a = tiny_model.forward(ids)
        with torch.no_grad(), ablate(tiny_model, Site(SPECS[t].hook_kind, 1), index=[2, 5]):
            b = tiny_model.forward(ids)
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5), t


@pytest.mark.parametrize("mode", ["strict", "paper"])
def test_masked_sft_trains_only_the_slices_in_strict_mode(tiny_model, mode):
    import torch

    from interp import weights_digest
    from interp_probes.keystone import SFTConfig
    from interp_probes.keystone.neurons import SliceMap, widths
    from interp_probes.keystone.sft import encode, plan, restore, train

    smap = SliceMap(tiny_model)
    w = widths(tiny_model.info)
    key = {t: np.zeros((tiny_model.info.n_layers, w[t]), bool) for t in TYPES}
    key["fwd_up"][0, [1, 4]] = key["attn_o"][1, 3] = True
    cfg = SFTConfig(enable=True, mode=mode, lr=1e-2, epochs=1, batch=4, micro_batch=2, n_train=8)
    train_items, _ = sft_data(8, 1)
    examples = encode(tiny_model, train_items, 256)
    assert all(n < len(ids) for ids, n in examples)
    params = dict(tiny_model.hf.named_parameters())
    originals = {n: p.detach().clone() for n, p in params.items()}
    digest = weights_digest(tiny_model)
    pl = plan(tiny_model, smap, "keystone", mode, key, key)
    curve, steps = train(tiny_model, pl, mode, examples, cfg, originals, torch.Generator().manual_seed(0))
    assert steps == 2 and len(curve) == 2 and all(np.isfinite(c["loss"]) for c in curve)
    up = smap.weight_name("fwd_up", 0)
    assert not torch.equal(params[up][1], originals[up][1])  # a keystone slice trained
    changed = {n for n, p in params.items() if not torch.equal(p, originals[n])}
    if mode == "strict":
        assert changed == {up, smap.weight_name("attn_o", 1)}
        assert torch.equal(params[up][[0, 2, 3]], originals[up][[0, 2, 3]])
        assert pl.entries(params) == 2 * params[up].shape[1] + params[smap.weight_name("attn_o", 1)].shape[0]
    else:  # the released code's masking: gate, norms and embeddings train too, decay touches frozen entries
        assert any("gate_proj" in n for n in changed) and any("norm" in n for n in changed)
    assert not any(p.requires_grad for p in params.values())
    restore(tiny_model, originals)
    assert weights_digest(tiny_model) == digest


def test_batched_single_unit_test_equals_weight_edits_one_by_one(tiny_model):
    """The massive-writer test zeroes each unit on its own copy of the batch; same norms as weight edits."""
    import torch

    from interp import edit_weights
    from interp_probes.keystone.ablate import forward_stats, massive_writers, zero_edits
    from interp_probes.keystone.neurons import SliceMap, widths

    smap = SliceMap(tiny_model)
    w = widths(tiny_model.info)
    key = {t: np.zeros((tiny_model.info.n_layers, w[t]), bool) for t in TYPES}
    for t in TYPES:
        key[t][0, 1] = key[t][1, 3] = True
    chunks = torch.randint(10, 1000, (2, 6))
    frame, base = massive_writers(tiny_model, key, chunks, rope_pair=True, batch_tokens=3 * 12)  # 3 units a pass
    ref = forward_stats(tiny_model, chunks, 2, nll=False, sink=False)
    assert base == pytest.approx(ref.pos0_norm, rel=1e-5)
    assert len(frame) == count(key) == 12
    assert frame.cut_frac.abs().max() > 1e-3, "no unit moved the norm: the comparison would be vacuous"
    for r in frame.itertuples():
        single = {t: np.zeros_like(m) for t, m in key.items()}
        single[r.type][r.layer, r.index] = True
        with edit_weights(tiny_model, zero_edits(smap, single, tiny_model.anatomy, rope_pair=True)):
            norm = forward_stats(tiny_model, chunks, 2, nll=False, sink=False).pos0_norm
        assert r.pos0_norm_single == pytest.approx(norm, rel=1e-4), (r.type, r.layer, r.index)
        assert r.cut_frac == pytest.approx(1 - norm / base, abs=1e-4)
