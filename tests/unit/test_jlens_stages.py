"""jlens's pure stages on synthetic tensors: the workspace statistics, the band rule, the intervals, and the swap
and ablation edits (exact identities), and the built-in data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from interp_probes.jlens import data as D
from interp_probes.jlens import interventions as I
from interp_probes.jlens import workspace as W
from interp_probes.jlens.quality import kl_to, pass_at_k, rank_of, wilson_bounds


def test_excess_kurtosis_is_zero_for_gaussian_and_three_for_laplace():
    g = torch.Generator().manual_seed(0)
    gauss = torch.randn(4, 200_000, generator=g)
    lap = torch.distributions.Laplace(0.0, 1.0).sample((4, 200_000))
    kg, kl = W.excess_kurtosis(gauss), W.excess_kurtosis(lap)
    assert kg.abs().max() < 0.1, f"gaussian excess kurtosis {kg.tolist()}"
    assert (kl - 3).abs().max() < 0.3, f"laplace excess kurtosis {kl.tolist()} (3 expected)"


def test_autocorrelation_beats_its_shuffled_null_only_with_runs():
    g = torch.Generator().manual_seed(0)
    runs = torch.arange(64).repeat_interleave(4).reshape(4, 64)  # runs of 4 equal tokens
    iid = torch.randint(0, 5, (4, 64), generator=g)
    a = W.autocorrelation(runs, 50, g)
    b = W.autocorrelation(iid, 50, g)
    assert a["obs"] > 0.7 and a["obs"] > a["null_q95"], a
    assert abs(b["excess"]) < 0.1 and b["obs"] <= b["null_q95"] + 0.05, b


def test_participation_ratio_counts_equal_singular_values():
    d = 16
    gram = W.gram_of(torch.eye(d))
    assert W.participation_ratio(gram, torch.eye(d)) == pytest.approx(d, rel=1e-6)
    rank1 = torch.zeros(d, d)
    rank1[0, 0] = 3.0
    assert W.participation_ratio(gram, rank1) == pytest.approx(1.0, rel=1e-6)
    half = torch.diag(torch.tensor([1.0] * 4 + [0.0] * (d - 4)))
    assert W.participation_ratio(gram, half) == pytest.approx(4.0, rel=1e-6)


def test_cka_matrix_equals_pairwise_linear_cka_and_ignores_rotation_and_scale():
    g = torch.Generator().manual_seed(1)
    mats = [torch.randn(32, 32, generator=g) for _ in range(3)]
    q, _ = torch.linalg.qr(torch.randn(32, 32, generator=g))
    mats.append(3.0 * mats[0] @ q)
    c = W.cka_matrix(mats)
    for i in range(4):
        for j in range(4):
            assert c[i, j] == pytest.approx(W.linear_cka(mats[i], mats[j]), abs=1e-6)
    assert c[0, 3] == pytest.approx(1.0, abs=1e-6), "CKA is invariant to an orthogonal map and a scale"
    assert c[0, 1] < 0.9


def test_band_rule_finds_a_block_and_nothing_without_one():
    n = 10
    cka = np.full((n, n), 0.2)
    cka[3:7, 3:7] = 0.9
    np.fill_diagonal(cka, 1.0)
    acc = np.array([0.0, 0.0, 0.1, 0.5, 0.6, 0.6, 0.5, 0.1, 0.0, 0.0])
    obs, q95 = np.full(n, 0.3), np.full(n, 0.2)
    assert W.pick_band(acc, model_acc=0.8, autocorr_obs=obs, autocorr_q95=q95, cka=cka) == (3, 6)
    assert W.pick_band(acc, model_acc=0.8, autocorr_obs=np.full(n, 0.1), autocorr_q95=q95, cka=cka) is None
    flat = np.full((n, n), 0.9)  # no block: within == between
    np.fill_diagonal(flat, 1.0)
    assert W.pick_band(acc, 0.8, obs, q95, flat) is None


def test_wilson_and_pass_at_k():
    lo, hi = wilson_bounds(np.array([5]), 10)
    assert lo[0] == pytest.approx(0.2366, abs=1e-3) and hi[0] == pytest.approx(0.7634, abs=1e-3)
    ranks = torch.tensor([[0, 3, 20, 1], [50, 60, 70, 80]])
    p = pass_at_k(ranks, 5)
    assert p["rate"].tolist() == [0.75, 0.0] and p["n"].tolist() == [4, 4]
    assert (p["lo"] <= p["rate"]).all() and (p["rate"] <= p["hi"]).all()
    assert p["lo"][1] == 0.0 and wilson_bounds(np.array([4]), 4)[1][0] == 1.0, "exact at 0 and 1"


def test_rank_and_kl_identities():
    logits = torch.tensor([[3.0, 1.0, 2.0]])
    assert rank_of(logits, torch.tensor([2])).tolist() == [1]
    lp = logits.log_softmax(-1)
    assert float(kl_to(lp, lp)) == pytest.approx(0.0, abs=1e-7)
    assert float(kl_to(lp, torch.zeros(1, 3).log_softmax(-1))) > 0


def test_swap_exchanges_the_two_coordinates_and_leaves_the_orthogonal_part():
    g = torch.Generator().manual_seed(2)
    b, p, d = 3, 5, 12
    v = torch.randn(b, d, 2, generator=g, dtype=torch.float64)
    a, c = torch.randn(b, p, generator=g, dtype=torch.float64), torch.randn(b, p, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(v)
    perp = torch.randn(b, p, d, generator=g, dtype=torch.float64)
    perp = perp - (perp @ q) @ q.transpose(1, 2)
    x = a[..., None] * v[:, None, :, 0] + c[..., None] * v[:, None, :, 1] + perp
    mask = torch.ones(b, p)
    mask[:, 0] = 0
    rec: list[float] = []
    y = I.swap_edit(v, mask, rec)(x)
    want = c[..., None] * v[:, None, :, 0] + a[..., None] * v[:, None, :, 1] + perp
    assert torch.allclose(y[:, 1:], want[:, 1:], atol=1e-10), "coordinates exchanged on the masked positions"
    assert torch.equal(y[:, 0], x[:, 0]), "an unmasked position is untouched"
    assert rec and rec[0] < 1e-12, f"orthogonal change {rec}"


def test_project_out_removes_exactly_the_span_at_the_last_position():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 10, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(2, 10, 3, generator=g, dtype=torch.float64))
    removed: list[torch.Tensor] = []
    y = I.project_out_edit(q, removed)(x)
    assert torch.equal(y[:, :-1], x[:, :-1])
    assert (y[:, -1:] @ q).abs().max() < 1e-12
    assert torch.allclose(y[:, -1] + ((x[:, -1:] @ q) @ q.transpose(1, 2))[:, 0], x[:, -1])
    assert removed[0].shape == (2,)


def test_directions_and_linear_part():
    g = torch.Generator().manual_seed(4)
    w_u = torch.randn(50, 8, generator=g)
    m = torch.randn(8, 8, generator=g)
    bias = torch.randn(8, generator=g)
    assert torch.allclose(I.linear_part(lambda layer, h: h @ m.T + bias, 0, 8, "cpu"), m, atol=1e-5)
    dirs = I.directions_of(w_u, torch.eye(8), m)(torch.tensor([3, 7]))
    want = w_u[[3, 7]] @ m
    assert torch.allclose(dirs, want / want.norm(dim=-1, keepdim=True), atol=1e-6)
    # the direction raises the linearised readout logit of its token most: it is the gradient's direction
    h = torch.randn(8, generator=g, requires_grad=True)
    (w_u[3] @ (m @ h)).backward()
    assert torch.allclose(dirs[0], h.grad / h.grad.norm(), atol=1e-6)


def test_boot_ci_and_summary():
    rng = np.random.default_rng(0)
    lo, hi = I.boot_ci(np.array([1.0, 2.0, 3.0, 4.0]), 500, rng)
    assert 1.0 <= lo < 2.5 < hi <= 4.0
    frame = pd.DataFrame({"method": ["a", "a", "b", "b"], "x": [1.0, 3.0, 0.0, 0.0]})
    s = I.summarize_effects(frame, "x", 200, rng).set_index("method")
    assert s.loc["a", "mean"] == 2.0 and s.loc["b", "lo"] == s.loc["b", "hi"] == 0.0 and s.loc["a", "n"] == 2


def test_builtin_facts_and_text():
    facts = D.facts()
    assert 40 <= len(facts) <= 80 and all(set(f) == {"landmark", "country", "capital", "language"} for f in facts)
    prompts = D.two_hop_prompts(("capital", "language"), 1000)
    assert len(prompts) == 2 * len(facts)
    eiffel = next(p for p in prompts if p.landmark == "the Eiffel Tower" and p.relation == "capital")
    assert (eiffel.bridge, eiffel.answer) == ("France", "Paris")
    assert eiffel.prompt == "The capital of the country where the Eiffel Tower is located is"
    assert eiffel.hop1 == "The Eiffel Tower is located in the country of" and eiffel.hop2 == "The capital of France is"
    train, held = D.wiki_texts(0)
    assert not set(train) & set(held) and D.wiki_texts(0) == (train, held)
    assert D.wiki_texts(1)[0][:5] != train[:5], "the seed orders the paragraphs"
