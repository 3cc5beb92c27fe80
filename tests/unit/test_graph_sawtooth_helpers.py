"""graph_sawtooth's shared helpers: batch slicing, the answer margin and the task-stratified resampling."""

from __future__ import annotations

import numpy as np
import pandas as pd

from interp_probes.graph_sawtooth.attention import batches
from interp_probes.graph_sawtooth.evaluate import accuracy, answer_margin
from interp_probes.graph_sawtooth.graphs import Sample
from interp_probes.graph_sawtooth.stats import bootstrap, stratified_draws, task_groups
from interp_probes.graph_sawtooth.verify import Invariants


class _Item:  # the part of Tokenised the scoring helpers read
    def __init__(self, task: str, answer: str, candidates: list[str]):
        self.sample = Sample(0, "test", task, "", answer, candidates)


def test_batches_cover_every_index_once_in_order():
    assert batches(7, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert batches(3, 5) == [[0, 1, 2]]
    assert batches(0, 2) == []


def test_answer_margin_is_the_answer_minus_the_best_other_and_agrees_with_accuracy():
    items = [_Item("edge", " Yes", [" Yes", " No"]), _Item("degree", " 2", [" 0", " 1", " 2"])]
    scores = [np.array([-1.0, -3.0]), np.array([-0.5, -4.0, -2.0])]
    m = answer_margin(items, scores)
    assert np.allclose(m, [2.0, -1.5]), m
    correct, acc = accuracy(items, scores)
    assert list(correct > 0) == list(m > 0)
    assert acc == {"edge": 1.0, "degree": 0.0, "all": 0.5}


def test_stratified_draws_resample_within_each_task_and_keep_its_size():
    tasks = np.array(["a", "b", "a", "c", "b", "a"])
    groups = task_groups(tasks)
    assert [g.tolist() for g in groups] == [[0, 2, 5], [1, 4], [3]]
    draws = stratified_draws(tasks, 50, np.random.default_rng(0))
    assert len(draws) == 50
    for d in draws:
        assert [x.size for x in d] == [3, 2, 1]
        assert all(set(x.tolist()) <= set(g.tolist()) for x, g in zip(d, groups))
    # the same stream as drawing each task in turn, draw after draw (the order the records were made in)
    rng = np.random.default_rng(0)
    again = [[rng.choice(g, size=g.size, replace=True) for g in groups] for _ in range(50)]
    assert all(np.array_equal(x, y) for d, e in zip(draws, again) for x, y in zip(d, e))


def test_bootstrap_interval_of_identical_conditions_is_zero_difference():
    tasks = np.array(["a"] * 5 + ["b"] * 5)
    ok = np.array([1, 0, 1, 1, 0, 1, 1, 0, 0, 1], dtype=float)
    iv = bootstrap(tasks, {("base", 0): ok, ("slash", 0): ok, ("random_s", 0): ok}, 200, np.random.default_rng(1))
    assert iv.diff_ci == (0.0, 0.0), iv.diff_ci
    lo, hi = iv.ci["base"]
    assert lo <= 0.6 <= hi, (lo, hi)


def test_invariant_metrics_of_an_empty_table_are_zero():
    m = Invariants(pd.DataFrame()).metrics()
    assert m["slash_rows_checked"] == 0 and m["slash_rows_sum_max_err"] == 0.0, m
