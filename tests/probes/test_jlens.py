"""jlens quick size on the embedded model: ablating the Jacobian lens's directions moves the output more than
ablating as many random directions, the swap leaves the orthogonal part unchanged, and the run holds every table
the page draws and the files a refit with the reference code needs."""

from __future__ import annotations

import pytest
import torch

import interp_probes.jlens  # noqa: F401  (registers the probe where the installed entry points predate it)


@pytest.fixture(scope="module")
def quick(quick_runs):
    return quick_runs("jlens")


def test_jlens_ablation_beats_random_directions_of_the_same_count(quick):
    m = quick.metrics
    j, r = m["ablate_kl_jacobian"], m["ablate_kl_random"]
    assert j >= 2 * r and m["ablate_kl_jacobian_lo"] > m["ablate_kl_random_hi"], (
        f"KL after ablating {quick.config['n_ablate']} J-lens directions {j:.4f} "
        f"[{m['ablate_kl_jacobian_lo']:.4f}, {m['ablate_kl_jacobian_hi']:.4f}] vs random {r:.4f} "
        f"[{m['ablate_kl_random_lo']:.4f}, {m['ablate_kl_random_hi']:.4f}] (n={m['n_ablate']}, "
        f"layer {m['intervention_layer']}, logit-lens {m['ablate_kl_logit']:.4f}, tuned {m['ablate_kl_tuned']:.4f})")


def test_swap_leaves_the_orthogonal_part_unchanged(quick):
    m = quick.metrics
    for method in ("jacobian", "logit", "tuned", "random"):
        assert m[f"swap_orth_change_max_{method}"] < 1e-5, (method, m[f"swap_orth_change_max_{method}"])
    assert m["lm_weights_unchanged"] is True


def test_prompts_kept_and_tables_complete(quick):
    m = quick.metrics
    assert 0 < m["n_two_hop_kept"] <= m["n_two_hop_total"], (m["n_two_hop_kept"], m["n_two_hop_total"])
    prompts = quick.table("prompts")
    assert len(prompts) == m["n_two_hop_total"] and int(prompts["kept"].sum()) == m["n_two_hop_kept"]
    q = quick.table("quality")
    n = m["target_layer"] + 1
    assert set(q["lens"]) == {"logit", "tuned", "jacobian"} and len(q) == 3 * n
    assert (q["bridge_lo"] <= q["bridge_pass"]).all() and (q["bridge_pass"] <= q["bridge_hi"]).all()
    # the logit and Jacobian lenses agree at the target layer (J = I there): the same readout
    last = q[q["layer"] == m["target_layer"]].set_index("lens")
    assert abs(last.loc["jacobian", "kl"] - last.loc["logit", "kl"]) < 1e-6, last[["kl"]]
    assert last.loc["logit", "kl"] < 1e-5, "the logit lens at the last layer is the model's own output"
    effects = quick.table("effects")
    assert set(effects["method"]) == {"logit", "tuned", "jacobian", "random"}
    assert {"steer", "swap", "ablate"} <= set(effects["experiment"])
    cka = quick.tensor_file("cka")["jacobian"]
    assert cka.shape == (n, n) and abs(cka.diagonal() - 1).max() < 1e-6


def test_the_fit_prompts_are_stored_for_a_refit(quick):
    ids = quick.tensor_file("fit_tokens")["input_ids"]
    assert ids.shape == (quick.config["n_fit_prompts"], quick.config["fit_seq_len"])
    assert quick.timings.get("seconds_fit") is not None
    lens = quick.lens("lens")  # lens.pt, read with weights_only as the reference reads it
    n = quick.metrics["target_layer"]
    assert lens.source_layers == list(range(n)) and lens.n_prompts == quick.config["n_fit_prompts"]
    raw = torch.load(quick.path / "lens.pt", weights_only=True)  # the file itself: the reference's keys, float32
    assert set(raw) >= {"J", "n_prompts", "source_layers", "d_model"}, sorted(raw)
    assert all(j.shape == (576, 576) and j.dtype == torch.float32 for j in raw["J"].values())
