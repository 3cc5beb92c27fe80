"""sae_falsification's injection against the released code (GeorgeMLP/reasoning-probing,
run_token_injection_experiment.py): its statistics re-implemented by hand on random inputs, and its payloads
(a fresh random 3 of the top-10 tokens per text, 2 sampled bigrams at word positions)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from interp_probes.sae_falsification.injection import injection_jobs, payload_len, score_rows
from interp_probes.sae_falsification.tokens import FeatureTokens


def _ref_d(inj: np.ndarray, base: np.ndarray) -> float:
    """The code's d: (mean_inj - mean_base) / sqrt((np.var(inj) + np.var(base)) / 2), 0 when that is 0."""
    pooled = math.sqrt((sum((x - inj.mean()) ** 2 for x in inj) / len(inj)
                        + sum((x - base.mean()) ** 2 for x in base) / len(base)) / 2)
    return (inj.mean() - base.mean()) / pooled if pooled > 0 else 0.0


def _ref_student_p(a: np.ndarray, b: np.ndarray) -> float:
    """scipy.stats.ttest_ind(a, b) written out: pooled variance, n_a + n_b - 2 degrees of freedom, two-sided."""
    na, nb = len(a), len(b)
    sp2 = ((na - 1) * a.var(ddof=1) + (nb - 1) * b.var(ddof=1)) / (na + nb - 2)
    t = (a.mean() - b.mean()) / math.sqrt(sp2 * (1 / na + 1 / nb))
    return 2 * stats.t.sf(abs(t), na + nb - 2)


def test_reference_statistics_equal_the_released_formulas():
    rng = np.random.default_rng(0)
    for i in range(200):
        n_a, n_b = int(rng.integers(3, 60)), int(rng.integers(3, 60))
        inj = rng.gamma(2.0, 1.0, n_a) + rng.uniform(0, 1)
        base = rng.gamma(2.0, 1.0, n_b) * (rng.random(n_b) > 0.3)
        row = score_rows(1, "real", "prepend", base, inj, "reference")
        assert row["d"] == pytest.approx(_ref_d(inj, base), rel=1e-10), i
        assert row["p"] == pytest.approx(_ref_student_p(inj, base), rel=1e-8, abs=1e-300), i
        welch = score_rows(1, "real", "prepend", base, inj, "welch")
        v1 = (np.var(inj, ddof=1) + np.var(base, ddof=1)) / 2
        assert welch["d"] == pytest.approx((inj.mean() - base.mean()) / math.sqrt(v1), rel=1e-10)
        assert welch["p"] == pytest.approx(stats.ttest_ind(inj, base, equal_var=False).pvalue, rel=1e-10)
        if n_a == n_b:  # equal sizes: Student and Welch share t, the ddof-1 d is smaller by sqrt((n-1)/n)
            assert welch["d"] == pytest.approx(row["d"] * math.sqrt((n_a - 1) / n_a), rel=1e-10)
    const = score_rows(1, "real", "prepend", np.zeros(5), np.ones(5), "reference")
    assert const["d"] == 0.0  # the code's `if pooled_std > 0 else 0`


def _ft(n_top=10):
    top = list(range(100, 100 + n_top))
    ft = FeatureTokens(7, top, top, 0.9, 0.3, 1.0)
    ft.ngrams = {"frequent_bigram": [((100 + i, 60 + i), 20 - i) for i in range(6)],
                 "bigram_before": [((50, 100), 9)], "trigram": [((50, 100, 52), 3)],
                 "frequent_trigram": [((54, 100, 55), 6)]}
    return ft


def _jobs(strategy, rules, seed=0, n_texts=12, arms=None):
    bases = [list(range(200 + 40 * i, 240 + 40 * i)) for i in range(n_texts)]
    arms = arms or {"real": {}, "alt": {}}
    return injection_jobs([7], {7: _ft()}, arms, bases, [strategy], 32, seed, lambda t: t % 2 == 0, 11, rules)


def test_reference_payload_is_a_fresh_seeded_three_of_the_top_ten_per_text():
    jobs, seqs, bad = _jobs("prepend", {"real": "reference", "alt": "top"})
    assert bad == 0
    real = [s[1:4] for j, s in zip(jobs, seqs) if j["arm"] == "real"]
    top = [s[1:4] for j, s in zip(jobs, seqs) if j["arm"] == "alt"]
    assert all(t == [100, 101, 102] for t in top)
    assert all(len(set(r)) == 3 and set(r) <= set(range(100, 110)) for r in real)
    assert len({tuple(sorted(r)) for r in real}) > 6, "the sample must change from text to text"
    assert {t for r in real for t in r} - {100, 101, 102}, "tokens beyond the top 3 must be drawn"
    again = [s for j, s in zip(*_jobs("prepend", {"real": "reference", "alt": "top"})[:2]) if j["arm"] == "real"]
    assert again == [s for j, s in zip(jobs, seqs) if j["arm"] == "real"], "seeded"
    seed1 = _jobs("prepend", {"real": "reference", "alt": "top"}, seed=1)
    other = [s for j, s in zip(*seed1[:2]) if j["arm"] == "real"]
    assert other != again


def test_reference_payload_control_swaps_the_same_sample():
    swap = {t: t + 300 for t in range(100, 110)}
    arms = {"real": {}, "control": {7: {"swap": swap, "ngrams": {}}}}
    jobs, seqs, bad = _jobs("intersperse", {"real": "reference", "control": "reference"}, arms=arms)
    by = {(j["arm"], j["text"]): s for j, s in zip(jobs, seqs)}
    for ti in range(12):
        r, c = by["real", ti], by["control", ti]
        assert [swap.get(t, t) for t in r] == c and bad == 0


def test_reference_bigram_payload_is_two_sampled_bigrams_at_word_starts():
    assert payload_len("inject_bigram", "reference") == 4 and payload_len("inject_bigram", "top") == 2
    jobs, seqs, bad = _jobs("inject_bigram", {"real": "reference", "alt": "top"})
    assert bad == 0
    grams = {(100 + i, 60 + i) for i in range(6)}
    seen = set()
    for j, s in zip(jobs, seqs):
        pairs = [(i, (s[i], s[i + 1])) for i in range(len(s) - 1) if (s[i], s[i + 1]) in grams]
        if j["arm"] == "alt":
            assert [p for _, p in pairs] == [(100, 60)] and pairs[0][0] == 1
        else:
            assert len(pairs) == 2 and pairs[0][1] != pairs[1][1]
            # each bigram sits before a base word start (even ids here), or before the other bigram
            assert all(s[i + 2] % 2 == 0 or (s[i + 2], s[i + 3]) in grams for i, _ in pairs if i + 3 < len(s))
            seen |= {p for _, p in pairs}
    assert len(seen) > 2, "bigrams are sampled per text"
