"""Stages 5-6: calibrate gamma on the calibration split, then test base, SLASH on S and SLASH on random layers.

Every candidate answer is scored by its summed log-probability (scoring.py); the prediction is the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from interp.context import RunContext

from . import GraphSawtoothConfig
from .attention import Tokenised
from .prompts import Prompts
from .scoring import score_all
from .slash import Slash
from .stats import Intervals, bootstrap


def accuracy(items: list[Tokenised], scores: list[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
    """Per-item correctness and per-task accuracy (plus "all": the unweighted mean over tasks)."""
    correct = np.array([int(np.argmax(s)) == t.sample.answer_index for t, s in zip(items, scores)], dtype=float)
    tasks = [t.sample.task for t in items]
    acc = {task: float(correct[[x == task for x in tasks]].mean()) for task in dict.fromkeys(tasks)}
    acc["all"] = float(np.mean([v for v in acc.values()]))
    return correct, acc


def answer_margin(items: list[Tokenised], scores: list[np.ndarray]) -> np.ndarray:
    """Per item: the answer's summed log-probability minus the best other candidate's (> 0: answered right)."""
    return np.array([s[t.sample.answer_index] - np.delete(s, t.sample.answer_index).max()
                     for t, s in zip(items, scores)])


# ============================================================================= 5. calibration


@dataclass(frozen=True)
class Calibration:
    """The gamma sweep on the calibration split and the gamma it picks."""

    table: pd.DataFrame
    """Rows: gamma, task (and "all"), acc_cal, margin (mean answer margin), mean_abs_dlogprob (against gamma = 1)."""
    gamma_best: float
    """argmax of the calibration accuracy over gamma; ties go to the larger gamma."""
    slashes: list[Slash]
    """The edits of the sweep (gamma < 1), for the invariant table."""

    def metrics(self) -> dict[str, Any]:
        m: dict[str, Any] = {"gamma_best": self.gamma_best}
        sw = self.table
        for g in sorted(sw.gamma.unique()):
            row = sw[(sw.gamma == g) & (sw.task == "all")].iloc[0]
            m[f"acc_cal_gamma_{g:g}"] = float(row.acc_cal)
            if g < 1:
                m[f"cal_dlogprob_gamma_{g:g}"] = float(row.mean_abs_dlogprob)
        return m


def gamma_sweep(model, prompts: Prompts, S: list[int], cfg: GraphSawtoothConfig, ctx: RunContext) -> Calibration:
    """Calibration accuracy for every gamma on S (gamma = 1, the unmodified model, runs first), with the
    mean answer margin (its log-probability minus the best other candidate's) and the mean |change| of
    the answer's log-probability against gamma = 1: how far the edit moves the scores, flipped or not.
    Saves `gamma_sweep`."""
    items = prompts.cal
    rows, slashes, base = [], [], None
    tasks = np.array([t.sample.task for t in items])
    for gamma in sorted(cfg.gamma_grid, key=lambda g: g != 1.0):
        sl = None if gamma == 1.0 else Slash(S, gamma, cfg.sink_offsets)
        scores = score_all(model, items, prompts.candidates(items), cfg.batch_size, sl,
                           progress=lambda it, g=gamma: ctx.tqdm(it, desc=f"calibrate gamma={g}"))
        if sl is None:
            base = scores
        else:
            slashes.append(sl)
        _, acc = accuracy(items, scores)
        margin = answer_margin(items, scores)
        ans = np.array([s[t.sample.answer_index] for t, s in zip(items, scores)])
        shift = np.abs(ans - np.array([b[t.sample.answer_index] for t, b in zip(items, base)]))
        for task, a in acc.items():
            sel = np.ones(len(items), bool) if task == "all" else tasks == task
            rows.append({"gamma": gamma, "task": task, "acc_cal": a, "margin": float(margin[sel].mean()),
                         "mean_abs_dlogprob": float(shift[sel].mean())})
    table = pd.DataFrame(rows).sort_values(["gamma"], kind="stable").reset_index(drop=True)
    ctx.save_table("gamma_sweep", table)
    return Calibration(table=table, gamma_best=pick_gamma(table), slashes=slashes)


def pick_gamma(t: pd.DataFrame) -> float:
    """argmax of the calibration accuracy (mean over tasks); ties go to the larger gamma."""
    allrows = t[t.task == "all"].sort_values("gamma")
    best = allrows.acc_cal.max()
    return float(allrows[allrows.acc_cal >= best - 1e-12].gamma.max())


# ============================================================================= 6. test


@dataclass(frozen=True)
class Evaluation:
    """Test accuracy of the base model, SLASH on S and SLASH on random layer sets."""

    table: pd.DataFrame
    """Rows: condition (base | slash | random_s), seed, task (and "all"), acc, n, layers; ci_lo/hi on "all"."""
    predictions: pd.DataFrame
    """One row per condition and item: pred, answer_index, correct, logprob_answer, logprob_best."""
    intervals: Intervals
    """The task-stratified bootstrap intervals."""
    random_sets: list[list[int]]
    """Per seed, the |S| random layers outside S."""
    base_scores: list[np.ndarray]
    """Per item, the base model's candidate log-probabilities."""
    slashes: list[Slash]
    """The edits of the test (gamma < 1), for the invariant table."""

    def metrics(self) -> dict[str, Any]:
        allrows = self.table[self.table.task == "all"]
        acc_base = float(allrows[allrows.condition == "base"].acc.iloc[0])
        acc_slash = float(allrows[allrows.condition == "slash"].acc.iloc[0])
        acc_random = float(np.median(allrows[allrows.condition == "random_s"].acc))
        return {"acc_base": acc_base, "acc_slash": acc_slash, "acc_random_layers": acc_random,
                "acc_slash_minus_random": acc_slash - acc_random,
                "acc_slash_minus_random_ci_lo": self.intervals.diff_ci[0],
                "acc_slash_minus_random_ci_hi": self.intervals.diff_ci[1],
                "random_layer_sets": ";".join(",".join(map(str, s)) for s in self.random_sets)}


def evaluate(model, prompts: Prompts, S: list[int], gamma: float, cfg: GraphSawtoothConfig,
             ctx: RunContext) -> Evaluation:
    """Test accuracy: base, SLASH on S at gamma, SLASH on |S| random layers outside S (per seed), with the
    bootstrap intervals. Saves `eval` and `predictions`."""
    items = prompts.test
    c = prompts.candidates(items)
    n_layers = model.info.n_layers
    prog = lambda name: (lambda it: ctx.tqdm(it, desc=f"test {name}"))  # noqa: E731
    base = score_all(model, items, c, cfg.batch_size, None, prog("base"))
    conds = [("base", 0, None, base)]
    slashes = []
    if gamma < 1.0:
        sl = Slash(S, gamma, cfg.sink_offsets)
        conds.append(("slash", 0, S, score_all(model, items, c, cfg.batch_size, sl, prog("slash"))))
        slashes.append(sl)
    else:  # gamma = 1 is exactly the base model (checked by verify_slash)
        conds.append(("slash", 0, S, base))
    outside = [layer for layer in range(n_layers) if layer not in S]
    random_sets = []
    for seed in range(cfg.n_random_layer_seeds):
        layers = sorted(int(x) for x in ctx.rng.choice(outside, size=min(len(S), len(outside)), replace=False))
        random_sets.append(layers)
        if gamma < 1.0:
            sl = Slash(layers, gamma, cfg.sink_offsets)
            scores = score_all(model, items, c, cfg.batch_size, sl, prog(f"random {seed}"))
            slashes.append(sl)
        else:
            scores = base
        conds.append(("random_s", seed, layers, scores))
    rows, preds, correct = [], [], {}
    tasks = [t.sample.task for t in items]
    for name, seed, layers, scores in conds:
        corr, acc = accuracy(items, scores)
        correct[(name, seed)] = corr
        for task, a in acc.items():
            n = len(items) if task == "all" else tasks.count(task)
            rows.append({"condition": name, "seed": seed, "task": task, "acc": a, "n": n,
                         "layers": ",".join(map(str, layers or []))})
        for t, s, ok in zip(items, scores, corr):
            preds.append({"sample_id": t.sample.sample_id, "task": t.sample.task, "condition": name, "seed": seed,
                          "pred": int(np.argmax(s)), "answer_index": t.sample.answer_index, "correct": bool(ok),
                          "logprob_answer": float(s[t.sample.answer_index]), "logprob_best": float(np.max(s))})
    boot = bootstrap(np.array(tasks), correct, cfg.n_boot, ctx.rng)
    table = pd.DataFrame(rows)
    for name, (lo, hi) in boot.ci.items():
        sel = (table.condition == name) & (table.task == "all")
        table.loc[sel, "ci_lo"], table.loc[sel, "ci_hi"] = lo, hi
    out = Evaluation(table=table, predictions=pd.DataFrame(preds), intervals=boot, random_sets=random_sets,
                     base_scores=base, slashes=slashes)
    ctx.save_table("eval", out.table)
    ctx.save_table("predictions", out.predictions)
    return out
