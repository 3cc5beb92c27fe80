"""circuits acceptance (issue 37, method spec "Checks that make it trustworthy") on smollm2-135m, and the same
pipeline on gemma3-270m (exactness gated, the rest reported).

The full run on smollm2-135m (transcoders at the acceptance size, trained once and cached) holds: exactness
(replacement + errors = the real logits, completeness at every node, <= 1e-4), faithfulness over >= 20 prompts
(Spearman >= 0.7 between predicted and observed change of the top logit when the graph's top-k features are
ablated, and the graph's choice beating random and top-activation choices), transcoder quality (spliced-in loss
recovering >= 80 % of the gap between zero-ablation and clean), and the CLI times with the transcoders cached
(micro <= 20 s, quick <= 90 s). Every measured value goes to artifacts/acceptance/circuits.json.
"""

from __future__ import annotations

import subprocess
import sys
import time

from acceptance import ROOT, SLACK, Checks, full_run, report


def _cli_seconds(size: str, model: str = "smollm2-135m") -> float:
    """Wall time of `interp run circuits --size SIZE` (after one run that fills the transcoder cache)."""
    cmd = [sys.executable, "-m", "interp.cli", "run", "circuits", "--size", size, "--model", model, "--quiet",
           "--out", str(ROOT / "artifacts")]
    subprocess.run(cmd, check=True, capture_output=True)  # fills the cache if empty
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def test_circuits_acceptance(model):
    run = full_run("circuits", model, progress=True)
    out = Checks(run)
    check, g = out.check, out.value
    check("exactness: replacement_rel_err <= 1e-4", g("replacement_rel_err") <= 1e-4,
          f"{g('replacement_rel_err'):.2e} (without error nodes {g('no_error_rel_err'):.3f})")
    check("exactness: completeness_rel_err <= 1e-4", g("completeness_rel_err") <= 1e-4,
          f"{g('completeness_rel_err'):.2e}")
    n = g("n_faithfulness_prompts")
    check("faithfulness: >= 20 prompts", n >= 20, f"{n}")
    check("faithfulness: Spearman(predicted, observed) >= 0.7 (graph's top-k, real attention)",
          g("spearman_graph") >= 0.7,
          f"{g('spearman_graph'):.3f} (frozen attention {g('spearman_graph_frozen'):.3f}; all selections "
          f"{g('spearman_all'):.3f})")
    for ctrl in ("random", "activation"):
        check(f"faithfulness: graph's choice moves the logit more than {ctrl}",
              g("mean_abs_observed_graph") > g(f"mean_abs_observed_{ctrl}"),
              f"mean |change| {g('mean_abs_observed_graph'):.3f} vs {g(f'mean_abs_observed_{ctrl}'):.3f}; "
              f"wins in {g(f'graph_beats_{ctrl}'):.2f} of (prompt, k)")
    check("quality: spliced-in loss recovers >= 80 % of the zero-ablation gap (mean over layers)",
          g("recovered_mean") >= 0.8,
          f"{g('recovered_mean'):.3f} (min {g('recovered_min'):.3f}; all layers at once {g('recovered_all'):.3f}; "
          f"FVE {g('fve_mean'):.3f}, L0 {g('l0_mean'):.1f}, dead {g('dead_fraction_mean'):.3f})")
    micro, quick = _cli_seconds("micro"), _cli_seconds("quick")
    check(f"time: micro <= {20 * SLACK:.0f} s (transcoders cached)", micro <= 20 * SLACK, f"{micro:.1f} s")
    check(f"time: quick <= {90 * SLACK:.0f} s (transcoders cached)", quick <= 90 * SLACK, f"{quick:.1f} s")
    gemma = full_run("circuits", None, {"model": "gemma3-270m", "size": "quick"}, progress=True)
    gm = gemma.metrics
    check("gemma3-270m exactness: replacement_rel_err <= 1e-4", gm.get("replacement_rel_err", 1) <= 1e-4,
          f"{gm.get('replacement_rel_err'):.2e}")
    check("gemma3-270m exactness: completeness_rel_err <= 1e-4", gm.get("completeness_rel_err", 1) <= 1e-4,
          f"{gm.get('completeness_rel_err'):.2e}")
    reported = {k: gm.get(k) for k in ("fve_mean", "recovered_mean", "spearman_graph", "spearman_graph_frozen",
                                       "graph_beats_random", "graph_beats_activation", "top_token", "top_prob")}
    report("circuits", run, out, graded={"gemma3-270m (quick, reported)": reported},
           transcoder_train_s=run.timings.get("transcoder_train_s"))
