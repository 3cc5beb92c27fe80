"""atoms quick size on the embedded model: the TSAE recovers known synthetic atoms and is stable (q*), against
the neuron basis of the same data; on SmolLM2 the whitening re-centres held-out angles at 90 degrees, the
neurons reconstruct exactly but are never unique, and the saved TSAE reloads through SAELens unchanged."""


def test_tsae_recovers_known_atoms_against_neurons(quick):
    m = quick.metrics
    rec, q, qn = m["synthetic_recovery"], m["synthetic_q_star"], m["synthetic_q_star_neurons"]
    detail = f"R2 {m['synthetic_r2_aip']:.3f}, L0 median {m['synthetic_l0_median']}"
    assert rec >= 0.9, f"TSAE atom recovery {rec:.3f} ({detail})"
    assert q >= 0.9 and qn <= 0.05, f"TSAE q* {q:.3f} vs neuron q* {qn:.3f}"
    assert m["synthetic_r2_aip_neurons"] >= 0.9999


def test_shift_neurons_and_roundtrip_on_smollm2(quick):
    m = quick.metrics
    e, a = m["angle_mean_euclid_deg"], m["angle_mean_aip_deg"]
    assert abs(e - 90) >= 10 and abs(a - 90) <= 2, f"Euclid {e:.1f} deg vs AIP {a:.1f} deg"
    assert m["r2_aip_neurons"] >= 0.9999 and m["q_star_neurons"] <= 0.05, (m["r2_aip_neurons"], m["q_star_neurons"])
    assert m["q_star_tsae"] >= m["q_star_neurons"] + 0.05, f"TSAE q* {m['q_star_tsae']:.3f} vs neurons"
    assert m["saelens_roundtrip_ok"] and m["saelens_max_rel_err"] <= 1e-4, m["saelens_max_rel_err"]
    assert abs(m["l0_train_tsae"] - 16) <= 0.05 * 16 and abs(m["l0_train_sae"] - 16) <= 0.05 * 16
    assert m["saelens_hook_name"] == "blocks.6.hook_resid_post"
    for name in ("whitening", ):
        assert name in quick.tensors
    for name in ("angles", "units", "support_stats", "q_curve", "tsae_top_contexts", "synthetic", "spectrum"):
        assert len(quick.table(name)) > 0, name
    assert quick.dir_path("tsae").is_dir() and quick.dir_path("sae").is_dir()
    assert "seconds_synthetic" in quick.timings and "seconds_synthetic" not in m
