"""patching on the tiny random model: the exact identities, the batched sweep against one patch at a time
through `interp.patch`, the skip of equal cells, and the pairs' pre-load checks."""

from __future__ import annotations

import json

import pytest
import torch

from interp import patch
from interp.errors import ConfigError
from interp.sites import Site
from interp_probes.patching import PatchingConfig
from interp_probes.patching.pairs import TASKS, load_pairs
from interp_probes.patching.probe import (
    activation_patching,
    baselines_and_attribution,
    encode,
    identity_checks,
    token_counter,
)
from interp_probes.patching.sweep import Cell, metric_values, run_cells


@pytest.fixture(scope="module")
def setup(tiny_model):
    cfg = PatchingConfig(model="tiny", n_pairs=2, sites=("resid_pre", "attn_out", "mlp_out", "z"), z_by_position=True)
    pairs = load_pairs("ioi", None, 2, 0, token_counter(tiny_model))
    enc = encode(tiny_model, pairs)
    layers = [0, 1]
    base = baselines_and_attribution(tiny_model, enc, cfg, layers)
    return cfg, enc, layers, base


def forward_metric(model, ids, ans, wrong, hooks=()) -> float:
    import contextlib

    with torch.no_grad(), contextlib.ExitStack() as stack:
        for h in hooks:
            stack.enter_context(h)
        logits = model.forward(ids, None)
    return float(metric_values(logits[:, -1], torch.tensor([ans]), torch.tensor([wrong]), "logit_diff")[0])


def test_exact_identities(tiny_model, setup):
    cfg, enc, layers, base = setup
    last = tiny_model.info.n_layers - 1
    for pair in range(2):
        ids = enc.corrupt[pair][None]
        ans, wrong = int(enc.answer[pair]), int(enc.wrong[pair])
        agree = (enc.clean[pair] == enc.corrupt[pair]).nonzero()[:, 0].tolist()
        assert 0 < len(agree) < len(enc.clean[pair])
        cells = [Cell("resid_pre", 0), Cell("resid_post", last, pos=enc.lengths[pair] - 1)]
        cells += [Cell("resid_pre", 0, pos=p) for p in agree]
        vals, n = run_cells(tiny_model, ids, base.clean_of(pair), cells, ans, wrong, "logit_diff", 64)
        clean, corrupt = float(base.clean_metric[pair]), float(base.corrupt_metric[pair])
        assert n == 1 and abs(clean - corrupt) > 1e-4, (n, clean, corrupt)
        assert vals[0] == pytest.approx(clean, abs=1e-5), "resid_pre.0 patched everywhere is not the clean run"
        assert vals[1] == pytest.approx(clean, abs=1e-5), "the last resid_post at the last position is not clean"
        assert torch.allclose(vals[2:], torch.tensor(corrupt), atol=1e-5), "equal tokens' patch changed the run"
    checks = identity_checks(tiny_model, enc, base, cfg)
    gap = (base.clean_metric - base.corrupt_metric).abs()
    for name, want in (("layer0_all_positions", 1.0), ("final_resid_post", 1.0)):
        assert ((checks[name] - want).abs() * gap).max() < 1e-5, (name, checks[name])


def test_batched_sweep_equals_one_patch_at_a_time(tiny_model, setup):
    cfg, enc, layers, base = setup
    pair = 1
    ids = enc.corrupt[pair][None]
    ans, wrong = int(enc.answer[pair]), int(enc.wrong[pair])
    clean = base.clean_of(pair)
    d_head = tiny_model.info.d_head
    cells = [Cell("resid_pre", 1, pos=3), Cell("attn_out", 0, pos=enc.lengths[pair] - 1), Cell("mlp_out", 1, pos=9),
             Cell("z", 0, head=2), Cell("z", 1, head=1, pos=9), Cell("resid_pre", 0, pos=9)]
    vals, n = run_cells(tiny_model, ids, clean, cells, ans, wrong, "logit_diff", batch_size=4)
    assert n == 2
    for c, v in zip(cells, vals.tolist()):
        site = c.site
        index = None if c.head < 0 else list(range(c.head * d_head, (c.head + 1) * d_head))
        positions = None if c.pos < 0 else [c.pos]
        want = forward_metric(tiny_model, ids, ans, wrong, [patch(tiny_model, site, clean[site], positions, index)])
        assert v == pytest.approx(want, abs=1e-5), f"{c}: batched {v:.6f} vs interp.patch {want:.6f}"
    # a cell that changes nothing would pass the comparison trivially: at least one must move the metric
    assert (vals - float(base.corrupt_metric[pair])).abs().max() > 1e-3


def test_skipped_cells_are_exactly_the_unchanged_ones(tiny_model, setup):
    cfg, enc, layers, base = setup
    grids, _, n_run = activation_patching(tiny_model, enc, base, cfg, layers)
    pair = 0
    P = enc.lengths[pair]
    cells = [Cell("resid_pre", layer, pos=p) for layer in layers for p in range(P)]
    vals, _ = run_cells(tiny_model, enc.corrupt[pair][None], base.clean_of(pair), cells, int(enc.answer[pair]),
                        int(enc.wrong[pair]), "logit_diff", 64)
    c, k = float(base.corrupt_metric[pair]), float(base.clean_metric[pair])
    every = ((vals - c) / (k - c)).view(len(layers), P)
    got = grids["resid_pre"][pair]
    assert ((got - every).abs() * abs(k - c)).max() < 1e-5
    differs = base.differs["resid_pre"][pair]
    assert not differs[0, 0] and differs.sum() < differs.numel(), "nothing to skip: the test would be empty"
    assert n_run < 2 * sum(g.numel() for g in grids.values())


def test_attribution_is_the_gradient_times_the_difference(tiny_model, setup):
    from interp.gradients import capture_grads

    cfg, enc, layers, base = setup
    pair, site = 0, Site("mlp_out", 1)
    ans, wrong = enc.answer[pair:pair + 1], enc.wrong[pair:pair + 1]
    g = capture_grads(tiny_model, enc.corrupt[pair][None], None, [site],
                      lambda lg: metric_values(lg[:, -1], ans, wrong, "logit_diff").sum())
    d = base.clean_of(pair)[site] - g.acts[site]
    gap = float(base.clean_metric[pair] - base.corrupt_metric[pair])
    want = (d * g.grads[site]).sum(-1)[0] / gap
    torch.testing.assert_close(base.attr["mlp_out"][pair, 1], want, atol=1e-5, rtol=1e-4)
    assert want.abs().max() > 0


@pytest.mark.parametrize("task", TASKS)
def test_builtin_pairs_are_token_aligned_and_deterministic(tiny_model_dir, task):
    from interp.models import Resolved, token_counter

    count = token_counter(Resolved(str(tiny_model_dir), "local", str(tiny_model_dir)))
    pairs = load_pairs(task, None, 4, 0, count)
    assert len(pairs) == 4 and pairs == load_pairs(task, None, 4, 0, count)
    assert pairs != load_pairs(task, None, 4, 1, count), "the seed changes nothing"
    for p in pairs:
        assert count(p.clean) == count(p.corrupt) and p.clean != p.corrupt and p.answer != p.wrong, p


def test_mismatched_pair_is_refused_before_the_model_loads(tiny_model_dir, tmp_path, monkeypatch):
    from interp.models import load
    from interp.runner import prepare

    rows = [{"clean": "The capital of France is", "corrupt": "The capital of Italy is", "answer": " Paris",
             "wrong": " Rome"},
            {"clean": "The capital of France is", "corrupt": "The capital of the United Kingdom is",
             "answer": " Paris", "wrong": " London"}]
    f = tmp_path / "pairs.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows))
    monkeypatch.setattr(load, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ConfigError, match=r"pairs.jsonl line 2.*same token length"):
        prepare("patching", {"model": str(tiny_model_dir), "data": str(f)})
    f.write_text(json.dumps(rows[0]))
    with pytest.raises(ConfigError, match="n_pairs"):
        prepare("patching", {"model": str(tiny_model_dir), "data": str(f), "n_pairs": 2})
    prepare("patching", {"model": str(tiny_model_dir), "data": str(f), "n_pairs": 1})


@pytest.mark.parametrize("over, field", [
    ({"sites": ["resid_mid"]}, "sites"), ({"sites": []}, "sites"),
    ({"z_by_position": True, "sites": ["resid_pre"]}, "z_by_position"), ({"layers": [1, 1]}, "layers"),
    ({"layers": [0, -2]}, "layers"), ({"layers": [5]}, "layers"), ({"n_pairs": 0}, "n_pairs"),
    ({"metric": "kl"}, "metric"),
])
def test_bad_configs_name_their_field(tiny_model_dir, over, field):
    from interp.runner import prepare

    with pytest.raises(ConfigError) as e:
        prepare("patching", {"model": str(tiny_model_dir), **over})
    assert e.value.field == field, str(e.value)


def test_nnsight_backend_gives_the_same_cells(tiny_model, setup):
    from interp.nnsight_backend import NNsightModel

    cfg, enc, layers, base = setup
    nn = NNsightModel(tiny_model.hf, tiny_model.tokenizer, tiny_model.info, tiny_model.device, tiny_model.dtype)
    cells = [Cell("resid_pre", 1, pos=9), Cell("z", 0, head=1), Cell("mlp_out", 1, pos=13), Cell("resid_pre", 0)]
    args = (enc.corrupt[0][None], base.clean_of(0), cells, int(enc.answer[0]), int(enc.wrong[0]), "logit_diff", 8)
    grown, _ = run_cells(tiny_model, *args)
    flat, _ = run_cells(tiny_model, *args, grow=False)
    on_nn, _ = run_cells(nn, *args)
    torch.testing.assert_close(flat, grown, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(on_nn, grown, atol=1e-5, rtol=1e-5)


def test_several_pairs_share_one_forward(tiny_model):
    """A group of pairs of one length runs in one forward (rows join after the embedding) and gives each pair's
    cells exactly what that pair alone gives, grown or from the input, on both backends."""
    from interp.nnsight_backend import NNsightModel
    from interp_probes.patching.probe import group_inputs

    cfg = PatchingConfig(model="tiny", n_pairs=6, sites=("resid_pre", "z"))
    enc = encode(tiny_model, load_pairs("ioi", None, 6, 0, token_counter(tiny_model)))
    base = baselines_and_attribution(tiny_model, enc, cfg, [0, 1])
    length, idx = max(enc.groups().items(), key=lambda kv: len(kv[1]))
    assert len(idx) >= 2, f"no two pairs of one length: {enc.lengths}"
    per = [Cell("resid_pre", 1, pos=length - 2), Cell("z", 0, head=1), Cell("resid_pre", 0, pos=1),
           Cell("z", 1, head=0, pos=length - 1)]
    cells = [Cell(c.kind, c.layer, c.head, c.pos, pair=gi) for gi in range(len(idx)) for c in per]
    group = group_inputs(tiny_model, enc, base, length, idx)
    together, n = run_cells(tiny_model, cells=cells, metric="logit_diff", batch_size=64, **group)
    assert n == 1
    alone = torch.cat([run_cells(tiny_model, enc.corrupt[p][None], base.clean_of(p), per, int(enc.answer[p]),
                                 int(enc.wrong[p]), "logit_diff", 64)[0] for p in idx])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
    flat, _ = run_cells(tiny_model, cells=cells, metric="logit_diff", batch_size=64, grow=False, **group)
    torch.testing.assert_close(flat, alone, atol=1e-5, rtol=1e-5)
    nn = NNsightModel(tiny_model.hf, tiny_model.tokenizer, tiny_model.info, tiny_model.device, tiny_model.dtype)
    on_nn, _ = run_cells(nn, cells=cells, metric="logit_diff", batch_size=64, **group)
    torch.testing.assert_close(on_nn, alone, atol=1e-5, rtol=1e-5)
    # the pairs differ, so a group that mixed them up would not pass
    assert (alone.view(len(idx), -1)[0] - alone.view(len(idx), -1)[1]).abs().max() > 1e-4
    with pytest.raises(ValueError, match="pass start"):
        run_cells(tiny_model, cells=cells, metric="logit_diff", batch_size=64, **{**group, "start": None})
