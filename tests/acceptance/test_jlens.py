"""jlens acceptance (issue 43, the probe's part) on smollm2-135m.

Gated: micro in <= 20 s and quick in <= 90 s with the lenses cached (times INTERP_BUDGET_SLACK), each run a stage of
its own for the fit with its time reported; the default run keeps prompts whose one-hop facts the model knows, holds
the swap's orthogonal part unchanged, leaves the weights unchanged, stores the fitting prompts' token ids and the
lens; bad input is refused in one line before the model loads. Reported, not gated: the paper's claims at this scale
(in the middle third the J-lens recalls the bridge entity best and has the worst next-token KL), the band and its
statistics, and steering, swap and ablation against their controls with intervals. Writes
artifacts/acceptance/jlens.json.
"""

from __future__ import annotations

import time

import pytest
import torch
from acceptance import SLACK, Checks, full_run, report

import interp_probes.jlens  # noqa: F401  (registers the probe where the installed entry points predate it)
from interp.errors import ConfigError
from interp.runner import prepare

MICRO_BUDGET_S, QUICK_BUDGET_S = 20, 90
EFFECTS = (("steer", "dlogp"), ("steer", "rank"), ("swap", "dlogodds"), ("swap", "flipped"), ("ablate", "kl"))


def timed_cached(model, size: str) -> tuple[float, object]:
    """A run of `size` made twice (the first fills the lens caches); the second's wall-clock seconds."""
    full_run("jlens", model, {"size": size})
    t0 = time.perf_counter()
    run = full_run("jlens", model, {"size": size})
    return time.perf_counter() - t0, run


def bad_inputs(tmp_path) -> dict[str, tuple[bool, str]]:
    """Each bad input refused with a one-line ConfigError before any model loads."""
    not_a_lens = tmp_path / "not_a_lens.pt"
    not_a_lens.write_bytes(b"this is not a torch file")
    cases = {"a lens file that is not the format": {"lens": str(not_a_lens)},
             "a target_layer out of range": {"target_layer": 99},
             "a prompt too short for a valid position": {"fit_seq_len": 8, "skip_first": 16},
             "a download requested offline": {"lens": "jlens:owner/repo/model/lens.pt"}}
    out = {}
    for name, over in cases.items():
        try:
            spec, cfg = prepare("jlens", {"size": "micro", **over})
            from interp.lens import load_lens, resolve_lens_spec

            if "lens" in over:  # the file is read when the run starts: the same one-line refusal
                load_lens(resolve_lens_spec(over["lens"]))
            out[name] = (False, "accepted")
        except ConfigError as e:
            out[name] = ("\n" not in str(e), str(e))
    return out


def test_jlens_acceptance(model, tmp_path):
    if model.info.name != "smollm2-135m":
        pytest.skip("acceptance is on smollm2-135m")
    micro_s, micro = timed_cached(model, "micro")
    quick_s, quick = timed_cached(model, "quick")
    run = full_run("jlens", model)
    m, t = run.metrics, run.timings
    c = Checks(run)
    c.check(f"micro <= {MICRO_BUDGET_S * SLACK:g} s with the lenses cached", micro_s <= MICRO_BUDGET_S * SLACK,
            f"{micro_s:.1f} s (lens cached: {micro.timings.get('lens_cached')}, tuned cached: "
            f"{micro.timings.get('tuned_cached')})")
    c.check(f"quick <= {QUICK_BUDGET_S * SLACK:g} s with the lenses cached", quick_s <= QUICK_BUDGET_S * SLACK,
            f"{quick_s:.1f} s (lens cached: {quick.timings.get('lens_cached')})")
    c.check("the fit is a stage with its time reported", "seconds_fit" in t and t.get("seconds_lens_fit") is not None,
            f"stage {t.get('seconds_fit')} s, the fit's own {t.get('seconds_lens_fit')} s")
    c.check("two-hop prompts kept and counted", 0 < m["n_two_hop_kept"] <= m["n_two_hop_total"],
            f"{m['n_two_hop_kept']} of {m['n_two_hop_total']}")
    orth = max(m[f"swap_orth_change_max_{k}"] for k in ("jacobian", "logit", "tuned", "random"))
    c.check("swap leaves the orthogonal part unchanged (< 1e-5 of |h|)", orth < 1e-5, f"{orth:.2e}")
    c.check("lm_weights_unchanged", m.get("lm_weights_unchanged") is True, str(m.get("lm_weights_unchanged")))
    ids = run.tensor_file("fit_tokens")["input_ids"]
    c.check("the fitting prompts' token ids are stored", ids.shape[0] == run.config["n_fit_prompts"],
            f"{tuple(ids.shape)}")
    raw = torch.load(run.path / "lens.pt", weights_only=True)
    c.check("the run holds lens.pt (reference keys, float32)",
            set(raw) >= {"J", "n_prompts", "source_layers", "d_model"}
            and all(j.dtype == torch.float32 for j in raw["J"].values()),
            f"{len(raw['J'])} matrices, n_prompts {raw['n_prompts']}, keys {sorted(raw)}")
    for name, (ok, why) in bad_inputs(tmp_path).items():
        c.check(f"refused in one line: {name}", ok, why[:160])

    reported = {
        "J-lens recalls the bridge entity best (pass@k, middle third)": (
            m["jacobian_bridge_best_mid"], f"J {m['bridge_pass_mid_jacobian']:.3f}, logit "
            f"{m['bridge_pass_mid_logit']:.3f}, tuned {m['bridge_pass_mid_tuned']:.3f} (n={m['n_two_hop_kept']})"),
        "J-lens has the worst next-token KL (middle third)": (
            m["jacobian_kl_worst_mid"], f"J {m['kl_mid_jacobian']:.3f}, logit {m['kl_mid_logit']:.3f}, tuned "
            f"{m['kl_mid_tuned']:.3f} nats"),
        "a workspace band": (m["has_band"], f"{m['band_first']}-{m['band_last']}" if m["has_band"] else "none"),
        "J-lens ablation KL >= 2x random": (
            m.get("ablate_kl_ratio_jacobian_random", 0) >= 2, f"ratio {m.get('ablate_kl_ratio_jacobian_random')}"),
    }
    graded = {}
    for exp, measure in EFFECTS:
        for method in ("jacobian", "logit", "tuned", "random"):
            k = f"{exp}_{measure}_{method}"
            if k in m:
                graded[k] = f"{m[k]:.4f} [{m[k + '_lo']:.4f}, {m[k + '_hi']:.4f}] n={m.get('n_' + exp)}"
    graded["intervention_layer"] = f"{m['intervention_layer']} ({m['intervention_layer_from']})"
    report("jlens", run, c, graded=graded, reported=reported, micro_seconds=micro_s, quick_seconds=quick_s)
