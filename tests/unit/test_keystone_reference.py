"""Keystone against independent re-implementations of the released code (JxtGTG/keystone).

Selection: `batch_top_n_overlap_unified.py` ranks (index, |value|) pairs with a stable descending sort, keeps
max(1, int(n * p)) per layer / per type and max(1, ceil(n * p)) globally, on K/V means recorded after
`repeat_kv` (query width), whose indices the deactivation maps to KV rows. SFT: the HF Trainer defaults the
released `train.py` runs (linear warmup and decay, clip 1.0, no decay on biases and norms).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from interp_probes.keystone.neurons import kv_row
from interp_probes.keystone.selection import select_prompt

D_HEAD, N_HEADS, N_KV = 8, 6, 2
N_REP = N_HEADS // N_KV
TYPES = ("fwd_up", "attn_q", "attn_k", "attn_v")


def _ref_repeat_kv(m: np.ndarray) -> np.ndarray:
    """HF repeat_kv on a (layers, n_kv * d_head) vector: (b, n_kv, s, d) -> expand -> (b, n_kv * n_rep, s, d)."""
    t = torch.from_numpy(m).reshape(m.shape[0], N_KV, 1, D_HEAD)  # (L, n_kv, 1, d) as (b, kv, s=1, d)
    t = t[:, :, None].expand(m.shape[0], N_KV, N_REP, 1, D_HEAD).reshape(m.shape[0], N_HEADS, 1, D_HEAD)
    return t.reshape(m.shape[0], N_HEADS * D_HEAD).numpy()


def _ref_select(means: dict[str, np.ndarray], p: float, method: str) -> dict[str, set[tuple[int, int]]]:
    """The released code's three extractors on query-width data, then K/V indices mapped to KV rows."""
    data = {t: (_ref_repeat_kv(m) if t in ("attn_k", "attn_v") else m) for t, m in means.items()}
    out: dict[str, set[tuple[int, int]]] = {t: set() for t in data}
    if method == "per_layer":
        for t, m in data.items():
            for layer, values in enumerate(m.tolist()):
                indexed = sorted(((i, abs(v)) for i, v in enumerate(values)), key=lambda x: x[1], reverse=True)
                for i, _ in indexed[: max(1, int(len(indexed) * p))]:
                    out[t].add((layer, i))
    elif method == "global_per_type":
        for t, m in data.items():
            pool = [(layer, i, abs(v)) for layer, row in enumerate(m.tolist()) for i, v in enumerate(row)]
            pool.sort(key=lambda x: x[2], reverse=True)
            for layer, i, _ in pool[: max(1, int(len(pool) * p))]:
                out[t].add((layer, i))
    else:
        pool = [(t, layer, i, abs(v)) for t, m in data.items() for layer, row in enumerate(m.tolist())
                for i, v in enumerate(row)]
        pool.sort(key=lambda x: x[3], reverse=True)
        for t, layer, i, _ in pool[: max(1, math.ceil(len(pool) * p))]:
            out[t].add((layer, i))
    for t in ("attn_k", "attn_v"):
        out[t] = {(layer, kv_row(i, D_HEAD, N_REP)) for layer, i in out[t]}
    return out


@pytest.mark.parametrize("method", ["per_layer", "global_per_type", "global"])
@pytest.mark.parametrize("p", [0.005, 0.01, 0.02, 0.05, 0.1])
def test_selection_equals_the_released_code(method, p):
    kv = {"attn_k": (D_HEAD, N_REP), "attn_v": (D_HEAD, N_REP)}
    for seed in range(20):
        rng = np.random.default_rng(seed)
        widths = {"fwd_up": 160, "attn_q": N_HEADS * D_HEAD, "attn_k": N_KV * D_HEAD, "attn_v": N_KV * D_HEAD}
        means = {t: rng.random((3, w)).astype(np.float32) for t, w in widths.items()}
        if seed % 2:  # coarse values: ties everywhere, broken by index in both
            means = {t: np.round(m * 4) / 4 for t, m in means.items()}
        ours = select_prompt(means, p, method, kv)
        ref = _ref_select(means, p, method)
        for t in TYPES:
            got = {(int(a), int(b)) for a, b in zip(*np.nonzero(ours[t]))}
            assert got == ref[t], (method, p, seed, t, sorted(got ^ ref[t])[:5])


def test_query_width_keeps_more_kv_rows_than_native_width():
    """At p = 0.01 on SmolLM2's shape (9 heads, 3 KV heads, d_head 64) the code keeps 5 query-width copies -> 2
    KV rows per layer; ranking at the native 192 keeps 1 (the issue's 58 vs 29 over 30 layers)."""
    rng = np.random.default_rng(0)
    m = {"attn_k": rng.random((30, 192))}
    query = select_prompt(m, 0.01, "per_layer", {"attn_k": (64, 3)})
    native = select_prompt(m, 0.01, "per_layer")
    assert query["attn_k"].sum(1).tolist() == [2] * 30 and native["attn_k"].sum(1).tolist() == [1] * 30
    assert (native["attn_k"] <= query["attn_k"]).all()
    half = select_prompt(m, 0.005, "per_layer", {"attn_k": (64, 3)})  # 2 copies -> 1 row: equal at p <= 0.005
    assert np.array_equal(half["attn_k"], select_prompt(m, 0.005, "per_layer")["attn_k"])


# ----------------------------------------------------------------------------- trainer settings


def _ref_linear(step: int, warmup: int, total: int) -> float:
    """transformers' linear schedule factor, written out."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def test_linear_schedule_and_clipping_as_the_hf_trainer(tiny_model):
    from interp_probes.keystone import SFTConfig
    from interp_probes.keystone.data import sft_data
    from interp_probes.keystone.neurons import SliceMap
    from interp_probes.keystone.sft import encode, plan, restore, train

    params = dict(tiny_model.hf.named_parameters())
    originals = {n: p.detach().clone() for n, p in params.items()}
    examples = encode(tiny_model, sft_data(16, 1)[0], 256)
    cfg = SFTConfig(enable=True, lr=1e-3, epochs=2, batch=2, micro_batch=2, warmup_frac=0.2, max_grad_norm=0.5)
    pl = plan(tiny_model, SliceMap(tiny_model), "full", "strict", {}, {})
    try:
        curve, steps = train(tiny_model, pl, "strict", examples, cfg, originals, torch.Generator().manual_seed(0))
    finally:
        restore(tiny_model, originals)
    total, warmup = steps, math.ceil(0.2 * steps)
    assert steps == 16
    assert [c["lr"] for c in curve] == pytest.approx([1e-3 * _ref_linear(s, warmup, total) for s in range(total)])
    assert all(np.isfinite(c["grad_norm"]) and c["grad_norm"] > 0 for c in curve)  # the pre-clip norm is logged


def test_weight_decay_skips_biases_and_norms(tiny_model):
    import torch.nn as nn

    from interp_probes.keystone import SFTConfig
    from interp_probes.keystone.sft import decay_names, param_groups

    names = decay_names(tiny_model)
    mods = dict(tiny_model.hf.named_modules())
    every = [n for n, _ in tiny_model.hf.named_parameters()]
    # independent rule: a parameter decays unless it is a bias or belongs to a norm module
    def owner(n: str) -> nn.Module:
        return mods[n.rsplit(".", 1)[0]]

    expected = {n for n in every if not n.endswith("bias") and "norm" not in type(owner(n)).__name__.lower()
                and not isinstance(owner(n), nn.LayerNorm)}
    assert names & set(every) == expected and any("norm" in n for n in every) and expected  # (tied lm_head aside)
    groups = param_groups(tiny_model, every, SFTConfig(weight_decay=0.1))
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert sum(len(g["params"]) for g in groups) == len(every)
    assert len(param_groups(tiny_model, every, SFTConfig(weight_decay=0.1, decay_all=True))) == 1


def test_lr_sweep_trains_the_sparse_masks_at_every_lr_and_scores_the_same_steps(tiny_model):
    from interp import weights_digest
    from interp_probes.keystone import SFTConfig
    from interp_probes.keystone.data import sft_data
    from interp_probes.keystone.neurons import SliceMap, widths
    from interp_probes.keystone.sft import lr_jobs, run_sft

    w = widths(tiny_model.info)
    key = {t: np.zeros((tiny_model.info.n_layers, w[t]), bool) for t in w}
    key["fwd_up"][0, [1, 4]] = True
    rand = {t: np.zeros_like(m) for t, m in key.items()}
    rand["fwd_up"][1, [2, 3]] = True
    cfg = SFTConfig(enable=True, lr=1e-3, lr_sweep=(1e-2, 1e-3), epochs=2, batch=4, micro_batch=4, n_train=8,
                    n_eval=2, eval_every=2, max_new_tokens=4, variants=("keystone", "random", "full"))
    assert lr_jobs(cfg) == [("keystone", 1e-3), ("keystone", 1e-2), ("random", 1e-3), ("random", 1e-2),
                            ("full", 1e-3)]
    train_items, eval_items = sft_data(8, 2)
    digest = weights_digest(tiny_model)
    chunks = torch.randint(10, 1000, (2, 8))
    table, curves, evals = run_sft(tiny_model, SliceMap(tiny_model), key, rand, cfg, train_items, eval_items,
                                   chunks, 2, 0)
    assert weights_digest(tiny_model) == digest
    assert list(zip(table.variant, table.lr)) == lr_jobs(cfg) and table.main_lr.sum() == 3
    assert set(evals.step) == {0, 2, 4} and len(evals) == 5 * 3  # before, every 2 steps, and the last step once
    last = evals[evals.step == 4].set_index(["variant", "lr"])
    for r in table.itertuples():
        assert last.loc[(r.variant, r.lr), "ppl"] == pytest.approx(r.ppl_after)
    # a larger lr moves the sparse slices further: the losses of the two keystone runs part after step 0
    k = curves[curves.variant == "keystone"]
    lo, hi = k[k.run_lr == 1e-3].loss.to_numpy(), k[k.run_lr == 1e-2].loss.to_numpy()
    assert lo[0] == pytest.approx(hi[0]) and not np.allclose(lo[1:], hi[1:])
