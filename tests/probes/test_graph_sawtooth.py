"""graph_sawtooth quick size on the embedded model: the sawtooth structure beats its segment-shuffled null
(paper concentration score, and the plain AUC's excess beats the selection-matched threshold), and SLASH's
exact invariants hold (rows sum to 1, the sink keeps gamma of its mass, gamma = 1 is a no-op, the edited
pattern is the one multiplied with V)."""

import json

import pytest


def test_sawtooth_beats_the_segment_shuffled_null(quick):
    m = quick.metrics
    c, cn = m["best_layer_concentration"], m["null_concentration"]
    assert c > cn, f"best-layer concentration {c:.3f} vs null {cn:.3f} (sd {m['null_concentration_sd']:.3f})"
    excess, q95 = m["best_layer_auc"] - m["null_auc"], m["auc_excess_q95"]
    assert excess > q95, (f"AUC excess at l*=L{m['best_layer']} {excess:+.3f} (AUC {m['best_layer_auc']:.3f} vs null "
                          f"{m['null_auc']:.3f}) vs selection-matched q95 {q95:.3f}; locality {m['locality_auc']:.3f}")


def test_slash_invariants_are_exact(quick):
    m = quick.metrics
    assert m["slash_rows_checked"] > 0
    assert m["slash_rows_sum_max_err"] <= 1e-5, f"{m['slash_rows_sum_max_err']:.2e}"
    assert m["slash_sink_ratio_max_err"] <= 1e-6, f"{m['slash_sink_ratio_max_err']:.2e}"
    assert m["slash_nonsink_ratio_max_err"] <= 1e-5, f"{m['slash_nonsink_ratio_max_err']:.2e}"
    assert m["slash_gamma1_max_dlogit"] <= 1e-5, f"{m['slash_gamma1_max_dlogit']:.2e}"
    assert m["pattern_edit_reaches_z"], (m["pattern_edit_z_change"], m["pattern_edit_z_match_err"])


def test_selection_and_artifacts_are_well_formed(quick):
    m = quick.metrics
    S = [int(x) for x in m["selected_layers"].split(",")]
    assert S and m["n_selected"] == len(S) and isinstance(m["selection_fallback"], bool)
    sel = quick.json("selection")
    assert sel["S"] == S and set(S) <= set(range(30))
    layers = quick.table("layer_scores")
    assert len(layers) == 30 and layers["selected"].sum() == len(S)
    assert len(quick.table("null_draws")) == 10 * 30
    ev = quick.table("eval")
    assert set(ev.condition) == {"base", "slash", "random_s"}
    assert (ev[ev.task == "all"].n == 16).all()
    sweep = quick.table("gamma_sweep")
    assert sorted(sweep.gamma.unique()) == [0.4, 0.6, 1.0]
    samples = quick.table("samples")
    assert (samples.split == "test").sum() == 16 and all(json.loads(s) for s in samples.spans)
    assert 0 < m["ppl_ratio_nongraph"] < 2 and m["sink_mass_mean"] > 0


def test_gamma_curve_moves_the_answer_margin_only_below_gamma_one(quick):
    """The graded study's table: at gamma = 1 every condition is the base model (margin change exactly 0); below it
    SLASH on S moves the answer margins (the edit reaches the scores even where no argmax flips)."""
    curve = quick.table("gamma_curve")
    assert sorted(curve.gamma.unique()) == [0.4, 0.6, 1.0] and set(curve.condition) == {"base", "slash", "random_s"}
    one = curve[curve.gamma == 1.0]
    assert (one.margin_change == 0).all() and (one.frac_flipped == 0).all() and one.acc.nunique() == 1
    below = curve[(curve.gamma < 1) & (curve.condition == "slash")]
    assert (below.margin_change.abs() > 1e-4).all(), below[["gamma", "margin_change"]].to_dict("records")
    assert ((curve.acc_ci_lo <= curve.acc) & (curve.acc <= curve.acc_ci_hi)).all()
    assert ((curve.margin_change_ci_lo <= curve.margin_change + 1e-12)
            & (curve.margin_change <= curve.margin_change_ci_hi + 1e-12)).all()
    assert quick.metrics["curve_max_abs_margin_change_slash"] == pytest.approx(below.margin_change.abs().max())
