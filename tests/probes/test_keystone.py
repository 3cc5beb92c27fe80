"""keystone quick size on the embedded model: zeroing the cross-prompt set collapses the model far beyond a
matched random set, recording by one teacher-forced pass equals the per-step loop, and every weight is restored."""


def test_keystone_ablation_collapses_the_model_against_random(quick):
    m = quick.metrics
    k, r, b = m["ppl_keystone_ablated"], m["ppl_random_ablated"], m["ppl_base"]
    assert k >= 3 * r, f"keystone {k:.1f} vs matched random {r:.2f} (base {b:.2f}, {m['keystone_count']} neurons)"
    assert r <= 1.25 * b, f"matched random {r:.2f} vs base {b:.2f}"
    ab = quick.table("ablation")
    assert (ab[ab.condition == "random"].seed.nunique()) == 5
    assert m["keystone_prompt_set_ratio"] <= 1 and m["keystone_count"] >= 1


def test_recording_is_exact_and_weights_are_restored(quick):
    m = quick.metrics
    assert m["lm_weights_unchanged"], "the weights hash differs after the ablation conditions"
    assert m["teacher_forced_max_rel_err"] <= 1e-4, f"{m['teacher_forced_max_rel_err']:.2e}"
    assert m["tf_keystone_sets_identical"]
    assert quick.manifest["tf_check"]["reference"] == "per_step_padded"  # the regeneration at the one pass's shape
    assert "teacher_forced_speedup" in quick.timings and "teacher_forced_speedup" not in m
    for name in ("pos0_norm_base", "pos0_norm_ablated", "sink_mass_base", "sink_mass_ablated",
                 "massive_writer_units", "ppl_keystone_minus_massive", "ppl_massive_only"):
        assert name in m, name
    keys = quick.tensor_file("mean_abs_act")
    assert keys["g1/mmlu/attn_k"].shape == (30, 3 * 64) and keys["g2/g2_code/fwd_down"].shape == (30, 1536)
    for name in ("generations", "keystone", "cells", "stability", "ablation", "p_sweep", "sink", "massive_writers",
                 "tf_check"):
        assert len(quick.table(name)) > 0, name
