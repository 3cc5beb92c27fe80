"""lockin quick size on the embedded model: the ground truth passes, the projection is exact, and real
updates concentrate in the broad loss's stiff directions far beyond a random k-frame's share."""


def test_synthetic_ground_truth_passes(quick):
    m = quick.metrics
    syn = {k: v for k, v in m.items() if k.startswith("synthetic_")}
    assert m["synthetic_passed"], f"synthetic instrument checks failed: {syn}"


def test_projection_is_exact_while_the_plain_run_enters_stiff_directions(quick):
    m = quick.metrics
    rho = m["max_rho_by_run"]
    proj, plain = rho["proj_k4_lr1e-4"], rho["full_lr3e-4"]
    assert proj <= 1e-6 and plain > 0, f"max stiff share: projection {proj:.2e}, lr 3e-4 run {plain:.2e}"
    steps = quick.table("steps")
    mean_plain = float(steps[steps.run_id == "full_lr3e-4"]["rho"].mean())
    chance = 4 / 2_654_208  # a random k-frame's expected share k / P
    assert mean_plain >= 100 * chance, f"mean stiff share {mean_plain:.2e} vs random-frame {chance:.2e}"


def test_learning_rate_sets_the_pace_and_instruments_check_out(quick):
    m = quick.metrics
    u = m["final_u_by_run"]
    assert u["full_lr3e-4"] > u["full_lr3e-5"] + 0.2, f"final progress {u}"
    assert m["lm_weights_unchanged"], "a run wrote the shared model's weights"
    assert m["cache_exact"], f"cached path differs by {m['cache_max_abs_diff']:.2e}"
    assert m["lanczos_power_rel_diff"] <= 0.05, f"{m['lanczos_power_rel_diff']:.3f}"
    assert m["psd_check_passed"], f"GGN min Rayleigh quotient {m['psd_min_rayleigh']:.3g}"
    assert m["reconstruction"] == "paper not found; project reconstruction"
    for name in ("runs", "run_configs", "matrices", "rates", "paradox", "changepoints", "synthetic", "steps"):
        assert len(quick.table(name)) > 0 or name == "paradox", name
    spectra = quick.tensor_file("spectra")
    assert spectra["lambda"].shape == (4,) and spectra["V_k"].shape == (2_654_208, 4)
