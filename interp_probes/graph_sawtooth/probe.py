"""Graph sawtooth attention and SLASH (arXiv 2605.10503): does attention over a serialised edge list
rebuild its adjacency (a "sawtooth" of per-node causal triangles), can those layers be found
automatically, and does moving part of the attention-sink mass onto the real keys there (SLASH)
help graph reasoning more than the same edit on random layers, without hurting ordinary text?

Method: ../shared/methods/graph_sawtooth.md. Each stage returns a frozen record and saves its own tables:
prompts.py (1. data), measure.py (2-3. sawtooth against its nulls, selected layers), verify.py (4. exact
invariants), evaluate.py (5-6. calibration and test), curve.py (6b. the gamma curve), controls.py
(7. non-graph perplexity, later layers). Beneath them: graphs.py (graphs, spans), attention.py (capture),
structure.py (scores and nulls), selection.py (Otsu, entropy peak), slash.py (the edit and its invariants),
scoring.py (prefill with SLASH, continuation without), stats.py (task-stratified bootstrap).
"""

from __future__ import annotations

from interp.context import RunContext

from . import GraphSawtoothConfig
from .controls import run_controls
from .curve import gamma_curve
from .evaluate import evaluate, gamma_sweep
from .measure import structure_study
from .prompts import prepare_prompts
from .verify import collect_invariants, verify_slash

PAPER_GAMMA = 0.6
"""The paper's default gamma: used by the controls when calibration picks gamma = 1 (a no-op)."""
N_VERIFY = 4
"""Selection prompts in the verification pass."""


def run(cfg: GraphSawtoothConfig, ctx: RunContext) -> None:
    model = ctx.model
    prompts = prepare_prompts(model, cfg, ctx)  # 1. data: graphs, prompts, spans, candidates
    with ctx.timed("structure"):  # 2. sawtooth against its nulls, sink, entropy; 3. S = S_score ∩ S_ent
        structure = structure_study(model, prompts.select, cfg, ctx)
    S = structure.selection.S
    with ctx.timed("verify"):  # 4. exact invariants, gamma = 1, pattern reaches z
        check = verify_slash(model, prompts.select[:N_VERIFY], S, cfg)
    with ctx.timed("calibration"):  # 5. gamma sweep on the calibration split
        cal = gamma_sweep(model, prompts, S, cfg, ctx)
    with ctx.timed("test"):  # 6. test: base, SLASH on S, SLASH on random layers
        test = evaluate(model, prompts, S, cal.gamma_best, cfg, ctx)
    curve = {}
    if cfg.gamma_curve:  # 6b. the graded study: test accuracy and answer margin at every gamma of the grid
        with ctx.timed("gamma_curve"):
            curve = gamma_curve(model, prompts, S, test, cfg, ctx).metrics()
    gamma_ctl = cal.gamma_best if cal.gamma_best < 1 else PAPER_GAMMA
    with ctx.timed("controls"):  # 7. non-graph perplexity, downstream structure
        controls = run_controls(model, prompts.select, structure, gamma_ctl, cfg, ctx)

    # (the gamma curve's edits are the same Slash class on other gammas and layers; its invariants are not re-listed)
    invariants = collect_invariants(ctx, [check.slash, *cal.slashes, *test.slashes, *controls.slashes])
    ctx.log_metrics(**structure.metrics(), **cal.metrics(), **test.metrics(), **invariants.metrics(),
                    **check.metrics(), **controls.metrics(), **curve,
                    n_select=cfg.n_select, n_cal=cfg.n_cal, n_test=cfg.n_test)
