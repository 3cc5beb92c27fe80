"""Task-stratified bootstrap of the test items: the resampling shared by the test's intervals and the gamma curve."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def task_groups(tasks: np.ndarray) -> list[np.ndarray]:
    """The item indices of each task, tasks in order of first appearance."""
    return [np.flatnonzero(tasks == task) for task in dict.fromkeys(tasks.tolist())]


def stratified_draws(tasks: np.ndarray, n_boot: int, rng: np.random.Generator) -> list[list[np.ndarray]]:
    """`n_boot` resamples: per draw and task (as `task_groups`), as many of its items drawn with replacement."""
    groups = task_groups(tasks)
    return [[rng.choice(g, size=g.size, replace=True) for g in groups] for _ in range(n_boot)]


@dataclass(frozen=True)
class Intervals:
    """95 % task-stratified bootstrap intervals of the test accuracy (unweighted mean over tasks)."""

    ci: dict[str, tuple[float, float]]
    """condition (base | slash | random_s, the median over seeds) -> (lo, hi)."""
    diff_ci: tuple[float, float]
    """(lo, hi) of acc_slash - acc_random_layers."""


def bootstrap(tasks: np.ndarray, correct: dict[tuple[str, int], np.ndarray], n_boot: int,
              rng: np.random.Generator) -> Intervals:
    """Task-stratified bootstrap of the test items: 95 % intervals of each condition's accuracy
    (random: the median over seeds) and of acc_slash - acc_random_layers. `correct`: (condition, seed) -> (item,)."""
    base, slash = correct[("base", 0)], correct[("slash", 0)]
    rand = np.stack([v for (name, _), v in correct.items() if name == "random_s"])  # (seed, item)

    def acc(vec, idx_per_task):  # unweighted mean over tasks
        return np.mean([vec[..., ix].mean(-1) for ix in idx_per_task], 0)

    draws = {"base": [], "slash": [], "random_s": [], "diff": []}
    for idx in stratified_draws(tasks, n_boot, rng):
        a_b, a_s = acc(base, idx), acc(slash, idx)
        a_r = float(np.median(acc(rand, idx)))
        draws["base"].append(a_b)
        draws["slash"].append(a_s)
        draws["random_s"].append(a_r)
        draws["diff"].append(a_s - a_r)
    ci = {k: tuple(float(x) for x in np.percentile(v, [2.5, 97.5])) for k, v in draws.items()}
    return Intervals(ci={k: ci[k] for k in ("base", "slash", "random_s")}, diff_ci=ci["diff"])
