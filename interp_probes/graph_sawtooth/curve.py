"""Stage 6b (`gamma_curve`): the graded study of test accuracy and answer margin at every gamma of the grid."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from interp.context import RunContext

from . import GraphSawtoothConfig
from .evaluate import Evaluation, accuracy, answer_margin
from .prompts import Prompts
from .scoring import score_all
from .slash import Slash
from .stats import stratified_draws


@dataclass(frozen=True)
class Curve:
    """Test accuracy and answer-margin change at every gamma, on S and on random layers."""

    table: pd.DataFrame
    """Rows: gamma, condition (base | slash | random_s), seed, layers, acc, acc_ci_lo/hi, margin, margin_change,
    margin_change_ci_lo/hi, frac_flipped (items whose correctness changed), n."""

    def metrics(self) -> dict[str, Any]:
        """The best SLASH accuracy gain over base and its gamma, and the largest mean margin change on S and on
        random layers."""
        curve = self.table
        sl, rnd = curve[curve.condition == "slash"], curve[curve.condition == "random_s"]
        base = float(curve[curve.condition == "base"].acc.iloc[0])
        best = sl.sort_values("gamma", ascending=False, kind="stable").loc[lambda d: d.acc.idxmax()]  # ties: larger
        return {"curve_best_gamma": float(best.gamma), "curve_best_acc_gain": float(best.acc - base),
                "curve_best_acc_ci_lo": float(best.acc_ci_lo), "curve_best_acc_ci_hi": float(best.acc_ci_hi),
                "curve_max_abs_margin_change_slash": float(sl.margin_change.abs().max()),
                "curve_max_abs_margin_change_random": float(rnd.margin_change.abs().max()) if len(rnd) else None}


def gamma_curve(model, prompts: Prompts, S: list[int], evals: Evaluation, cfg: GraphSawtoothConfig,
                ctx: RunContext) -> Curve:
    """Test accuracy and the answer margin's change against the base model at every gamma of the grid, with SLASH on
    S and on the first `gamma_curve_random_seeds` random layer sets of the test, each with a task-stratified
    bootstrap 95 % interval (the same resampled items for every row). The margin moves even where the argmax holds.
    Saves `gamma_curve`."""
    items = prompts.test
    c = prompts.candidates(items)
    base = evals.base_scores
    m_base = answer_margin(items, base)
    ok_base = accuracy(items, base)[0] > 0
    tasks = np.array([t.sample.task for t in items])
    draws = [np.concatenate(d) for d in stratified_draws(tasks, cfg.n_boot, ctx.rng)]
    task_of = [tasks[d] for d in draws]

    def acc(ok, idx=None, tk=None):  # unweighted mean over tasks, as the test accuracy
        ok, tk = (ok, tasks) if idx is None else (ok[idx], tk)
        return float(np.mean([ok[tk == task].mean() for task in dict.fromkeys(tasks.tolist())]))

    def row(gamma, name, seed, layers, scores):
        margin, ok = answer_margin(items, scores), accuracy(items, scores)[0] > 0  # argmax ties as the test
        a = [acc(ok, d, tk) for d, tk in zip(draws, task_of)]
        dm = margin - m_base
        b = [float(dm[d].mean()) for d in draws]
        return {"gamma": gamma, "condition": name, "seed": seed, "layers": ",".join(map(str, layers)),
                "acc": acc(ok), "acc_ci_lo": float(np.percentile(a, 2.5)), "acc_ci_hi": float(np.percentile(a, 97.5)),
                "margin": float(margin.mean()), "margin_change": float(dm.mean()),
                "margin_change_ci_lo": float(np.percentile(b, 2.5)),
                "margin_change_ci_hi": float(np.percentile(b, 97.5)),
                "frac_flipped": float((ok != ok_base).mean()), "n": len(items)}

    conds = [("slash", 0, S)] + [("random_s", i, r) for i, r in
                                  enumerate(evals.random_sets[: cfg.gamma_curve_random_seeds])]
    rows = []
    for gamma in cfg.gamma_grid:
        rows.append(row(gamma, "base", 0, [], base))
        for name, seed, layers in conds:
            if gamma == 1.0:  # gamma = 1 is exactly the base model (verify_slash checks it)
                rows.append(row(gamma, name, seed, layers, base))
                continue
            sl = Slash(layers, gamma, cfg.sink_offsets)
            scores = score_all(model, items, c, cfg.batch_size, sl,
                               progress=lambda it, g=gamma, n=name: ctx.tqdm(it, desc=f"curve {n} gamma={g}"))
            rows.append(row(gamma, name, seed, layers, scores))
    out = Curve(pd.DataFrame(rows))
    ctx.save_table("gamma_curve", out.table)
    return out
