"""The graded studies' figures (issue 18) from small frames of the artifacts' shape: they draw every condition,
with the intervals where the artifact has them."""

from __future__ import annotations

import pandas as pd
import pytest

from interp_probes.graph_sawtooth import figures as G
from interp_probes.keystone import figures as K
from interp_probes.lockin import figures as L


def test_gamma_response_draws_each_condition_with_its_interval():
    rows = []
    for gamma in (0.4, 0.7, 1.0):
        for cond, seed in (("base", 0), ("slash", 0), ("random_s", 0), ("random_s", 1)):
            acc = 0.5 + (0.1 if cond == "slash" and gamma < 1 else 0.0)
            rows.append({"gamma": gamma, "condition": cond, "seed": seed, "layers": "3,4", "acc": acc,
                         "acc_ci_lo": acc - 0.1, "acc_ci_hi": acc + 0.1, "margin": 0.2, "margin_change": 1 - gamma,
                         "margin_change_ci_lo": 0.9 * (1 - gamma), "margin_change_ci_hi": 1.1 * (1 - gamma),
                         "frac_flipped": 0.0, "n": 80})
    fig = G.gamma_response(pd.DataFrame(rows))
    assert len(fig.data) == 2 * 4  # accuracy and margin per (condition, seed)
    slash = [t for t in fig.data if t.name == "SLASH on S"]
    assert list(slash[0].y) == pytest.approx([0.6, 0.6, 0.5])
    assert list(slash[0].error_y.array) == pytest.approx([0.1] * 3)


def test_sft_sweep_and_progress_figures():
    sft = pd.DataFrame({"variant": ["keystone", "keystone", "random", "random", "full"],
                        "lr": [2e-4, 3e-3, 2e-4, 3e-3, 2e-4], "gain": [0.0, 0.05, 0.0, 0.02, 0.15],
                        "ppl_ratio": [1.0, 1.02, 1.0, 1.01, 1.2]})
    fig = K.sft_lr_sweep(sft)
    assert {t.name for t in fig.data} == {"keystone", "random", "full"} and fig.layout.xaxis.type == "log"
    evals = pd.DataFrame([{"variant": v, "lr": lr, "step": s, "gain": 0.01 * s, "ppl_ratio": 1 + 0.001 * s}
                          for v, lr in zip(sft.variant, sft.lr) for s in (0, 5, 10)])
    prog = K.sft_progress(evals)
    assert len(prog.data) == 2 * 5 and "keystone lr 0.003" in {t.name for t in prog.data}
    evals["task_acc"] = 0.0 + 14 / 60 * (evals["step"] == 10)
    bars = K.sft_progress(evals, n_eval=60).data[0].error_y  # 14 of 60 right: Wilson 0.144 .. 0.354
    assert bars.array[2] == pytest.approx(0.354 - 14 / 60, abs=1e-3)
    assert bars.arrayminus[2] == pytest.approx(14 / 60 - 0.144, abs=1e-3)
    assert len(K.gain_vs_forgetting(sft.assign(steps=10)).data) == 5


def test_harm_curve_figure_has_the_signal_its_control_and_observed_b():
    curve = pd.DataFrame({"step": [10, 20, 30], "harm_rho": [0.2, 0.5, 0.6], "harm_random_rho": [0.1, 0.0, -0.1],
                          "observed_b_rho": [0.3, 0.6, 0.9], "n_runs": [7, 7, 7]})
    fig = L.harm_curve(curve, harm_step=30)
    band, *lines = fig.data
    assert [list(t.y) for t in lines] == [[0.2, 0.5, 0.6], [0.1, 0.0, -0.1], [0.3, 0.6, 0.9]]
    lo, hi = L.spearman_interval(pd.Series([-0.857]), pd.Series([7]))  # Fisher z, se sqrt(1.06 / 4)
    assert float(lo[0]) == pytest.approx(-0.98, abs=5e-3) and float(hi[0]) == pytest.approx(-0.27, abs=5e-3)
    assert band.fill == "toself" and len(band.y) == 6


def test_page_draws_the_sets_the_probe_saved_at_query_width():
    import numpy as np

    from interp_probes.keystone.neurons import kv_ranking
    from interp_probes.keystone.selection import keystone, sets_frame

    rng = np.random.default_rng(0)
    means = [{"attn_k": rng.random((4, 3 * 8)), "fwd_up": rng.random((4, 50))} for _ in range(3)]
    info = type("Info", (), {"n_heads": 6, "n_kv_heads": 3, "d_head": 8, "d_mlp": 50})
    kv = kv_ranking(info, ("attn_k", "fwd_up"))
    sets = {p: keystone(means, p, "per_layer", kv)[0] for p in (0.02, 0.1, 0.2)}
    table = sets_frame(sets)
    for p, mask in sets.items():
        page = K.cell_indices(table[table.p == p])
        want = {(t, layer): list(np.flatnonzero(m[layer])) for t, m in mask.items() for layer in range(4)
                if m[layer].any()}
        assert page == want and sum(map(len, page.values())) == sum(int(m.sum()) for m in mask.values()), p
