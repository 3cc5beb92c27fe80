"""atoms figures on hand-made artifact frames: every figure builds, and the grid marks knees and centres the gap."""

from __future__ import annotations

import numpy as np
import pandas as pd

from interp_probes.atoms import figures as F


def frames():
    rng = np.random.default_rng(0)
    angles = pd.DataFrame({"hook": ["blocks.6.hook_resid_post"] * 50, "pair_id": range(50),
                           "euclid_deg": rng.normal(60, 5, 50), "aip_deg": rng.normal(90, 2, 50),
                           "aip_centered_deg": rng.normal(90, 2, 50)})
    spectrum = pd.DataFrame({"hook": "blocks.6.hook_resid_post", "metric": ["uncentered"] * 8, "rank": range(8),
                             "eigval": np.logspace(3, -2, 8), "top_dim": [507, 247, -1, -1, -1, -1, -1, -1]})
    units = pd.DataFrame([
        {"unit": u, "r2_aip_heldout": r, "r2_aip_train": r, "r2_euclid_heldout": e, "q_star": q, "unique_frac": q,
         "l0_mean": l0, "l0_median": l0, "l0_train_calibrated": l0, "frac_k0": 0.0, "dead_frac": 0.1}
        for u, r, e, q, l0 in (("neurons", 1.0, 1.0, 0.0, 576), ("sae", 0.3, 0.8, 0.4, 16),
                               ("tsae", 0.6, 0.5, 0.6, 16))])
    support = pd.DataFrame({"unit": np.repeat(["neurons", "sae", "tsae"], 20), "sample_id": np.tile(range(20), 3),
                            "K": np.r_[np.full(20, 256), rng.integers(1, 30, 40)], "mu": rng.uniform(0, 1, 60)})
    q = np.arange(1, 11) / 10
    curve = pd.concat([pd.DataFrame({"unit": u, "q": q, "K_q": np.linspace(1, 20, 10), "mu_q": q / 2,
                                     "bound": 1 / (2 * np.linspace(1, 20, 10) - 1)}) for u in ("sae", "tsae")])
    grid = pd.DataFrame([{"d_sae": d, "n_train": n, "r2_aip_heldout": 0.1 * i + 0.2 * j, "r2_aip_train": 0.5 + 0.1 * i,
                          "l0_mean": 16.0, "knee": j == 1} for i, d in enumerate((288, 1152)) for j, n in
                         enumerate((100, 1000))])
    grid["memorization_gap"] = grid["r2_aip_train"] - grid["r2_aip_heldout"]
    return angles, spectrum, units, support, curve, grid


def test_every_figure_builds():
    angles, spectrum, units, support, curve, grid = frames()
    assert len(F.angle_histogram(angles, "blocks.6.hook_resid_post").data) == 3
    fig = F.spectrum_figure(spectrum, "blocks.6.hook_resid_post")
    assert fig.layout.yaxis.type == "log" and len(fig.layout.annotations) == 2
    assert len(F.units_bars(units).data) == 3
    assert list(F.units_table(units).index) == [F.UNIT_NAMES[u] for u in F.UNIT_ORDER]
    assert len(F.support_scatter(support).data) == 4
    assert len(F.coherence_histogram(support).data) == 3
    assert len(F.q_curves(curve, units).data) == 6
    for view in F.GRID_VIEWS:
        fig = F.grid_heatmap(grid, view)
        assert np.asarray(fig.data[0].z).shape == (2, 2)
    gap = F.grid_heatmap(grid, "memorization_gap").data[0]
    assert gap.zmid == 0
    assert any("★" in t for row in F.grid_heatmap(grid).data[0].text for t in row)


def test_context_highlights_the_max_token():
    row = pd.Series({"context": [" the", " cat", "<b>"], "center": 1, "act": 2.5})
    out = F.context_html(row)
    assert "<b style" in out and "&lt;b&gt;" in out and "2.50" in out
