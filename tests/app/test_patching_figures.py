"""Patching figures on a real patching run of the tiny random model (no Streamlit runtime)."""

from __future__ import annotations

import numpy as np
import pytest

from interp.store import load_run
from interp_probes.patching import figures as F


@pytest.fixture(scope="module")
def run(tiny_model, tmp_path_factory):
    from interp.runner import execute, prepare

    spec, cfg = prepare("patching", {"model": str(tiny_model.info.name), "size": "quick", "n_pairs": 2,
                                     "z_by_position": True})
    return load_run(execute(spec, cfg, out=tmp_path_factory.mktemp("patching"), model=tiny_model, progress=False))


def test_heatmaps_are_diverging_centred_and_labelled_with_tokens(run):
    g = run.tensor_file("grids")
    tokens = run.table("tokens")
    layers = g["layers"].tolist()
    act = F.select(g["act_resid_pre"], None)
    labels = F.column_labels(tokens, act.shape[1], None)
    assert any("→" in x for x in labels), "the changed token is not marked"
    fig = F.grid_heatmap(act, layers, labels, "activation patching")
    hm = fig.data[0]
    assert hm.zmid == 0 and hm.zmin == -hm.zmax and hm.colorscale[0][1] != hm.colorscale[-1][1]
    assert list(fig.layout.xaxis.ticktext) == labels
    heads = F.grid_heatmap(F.select(g["act_z"], 1), layers, F.head_labels(g["act_z"].shape[-1]), "z", heads=True)
    assert heads.data[0].customdata[0][0][0] == f"L{layers[0]}H0"
    with pytest.raises(ValueError):
        F.grid_heatmap(act, layers[:-1], labels, "wrong")


def test_mean_over_pairs_and_agreement(run):
    g = run.tensor_file("grids")
    a, b = g["act_resid_pre"], g["attr_resid_pre"]
    np.testing.assert_allclose(F.select(a, None), np.nanmean(a, 0), equal_nan=True)
    np.testing.assert_array_equal(F.select(a, 1), a[1])
    rho = F.spearman(F.select(a, None), F.select(b, None))
    assert rho is not None and -1 <= rho <= 1
    fig = F.agreement_scatter(F.select(a, None), F.select(b, None), g["layers"].tolist(),
                              [str(i) for i in range(a.shape[-1])], rho)
    assert "Spearman" in fig.layout.title.text and len(fig.data[1].x) == np.isfinite(a[0]).sum()
    assert F.spearman(np.zeros(5), np.arange(5)) is None
