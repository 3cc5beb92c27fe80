"""lockin's attention slice (W_O of the last block, z cached) on the tiny model, and the harm curve."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from interp_probes.lockin import analysis


def test_attention_slice_reproduces_the_full_forward_and_trains_only_w_o(tiny_model):
    from interp_probes.lockin.slice import Slice, cache_exactness, slice_inputs

    sl = Slice(tiny_model, part="last_attn_o")
    o = tiny_model.layer_module(tiny_model.info.n_layers - 1).self_attn.o_proj
    assert sl.P == o.weight.numel() and torch.equal(sl.theta0.view_as(o.weight), o.weight.detach().float())
    ids = torch.randint(10, 1000, (2, 12))
    pos = torch.tensor([[1, 5, 9], [2, 6, 10]])
    err = cache_exactness(tiny_model, sl, ids, pos)
    assert err <= 1e-4, f"cached [resid_pre | z] path differs from the full forward by {err:.2e}"
    x = slice_inputs(tiny_model, sl, ids)
    assert x.shape == (2, 12, tiny_model.info.d_model + tiny_model.info.n_heads * tiny_model.info.d_head)
    # a changed W_O changes the logits (the slice is live), and zeroing it removes the attention's contribution
    rows = x[0, 1:4]
    base = sl.logits(sl.theta0, rows)
    assert not torch.allclose(base, sl.logits(sl.theta0 * 0, rows))
    mlp = Slice(tiny_model)
    with pytest.raises(ValueError, match="slice"):
        Slice(tiny_model, part="nope")
    assert mlp.P != sl.P and [n for n, _ in sl.split(sl.theta0)] == [f"L{sl.layer}.attn.o_proj"]


def test_attention_slice_grid_runs_end_to_end(tiny_model, tiny_model_dir, tmp_path):
    from interp.runner import execute, prepare
    from interp.store import load_run

    spec, cfg = prepare("lockin", {
        "model": str(tiny_model_dir), "trainable": "last_attn_o", "grid": "quick", "steps": 12, "log_every": 3,
        "seq_len": 24, "train_seqs": 6, "batch_seqs": 2, "batch_positions": 8, "broad_eval_positions": 32,
        "narrow_eval_positions": 32, "k_stiff": 3, "lanczos_iters": 8, "window_W": 4, "tau": 4, "fisher_every": 0,
        "overhead": False, "synthetic": False})
    run = load_run(execute(spec, cfg, out=tmp_path, model=tiny_model, progress=False))
    m = run.metrics
    assert m["n_runs"] == 3 and m["lm_weights_unchanged"] and m["cache_exact"]
    assert {n.rsplit(".", 1)[-1] for n in run.table("matrices").matrix} == {"o_proj"}
    curve = run.table("harm_curve")
    assert list(curve.step) == [3, 6, 9, 12] and (curve.n_runs == 3).all()


def test_harm_curve_reads_the_signal_at_every_logged_step():
    rows = []
    final_b = {"a": 0.1, "b": 0.3, "c": 0.2, "d": 0.4}
    for rid, fb in final_b.items():
        for step in (0, 5, 10):
            pred = {0: 0.0, 5: fb, 10: -fb}[step]  # right order at 5, reversed at 10
            rows.append({"run_id": rid, "step": step, "pred_deg": pred, "pred_deg_random": 1.0,
                         "b": fb * step / 10})
    curve = analysis.harm_curve(pd.DataFrame(rows), list(final_b))
    assert list(curve.step) == [5, 10]
    assert curve.harm_rho.tolist() == pytest.approx([1.0, -1.0])
    assert math.isnan(curve.harm_random_rho.iloc[0])  # a constant control has no rank correlation
    assert curve.observed_b_rho.tolist() == pytest.approx([1.0, 1.0]) and np.all(curve.n_runs == 4)
