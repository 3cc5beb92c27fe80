"""graph_sawtooth stages on synthetic data (and the tiny random model where a model is needed)."""

from __future__ import annotations

import math
from collections import Counter

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

from interp.config import build_config
from interp_probes.graph_sawtooth import GraphSawtoothConfig
from interp_probes.graph_sawtooth import graphs as G
from interp_probes.graph_sawtooth import selection as SEL
from interp_probes.graph_sawtooth import structure as ST
from interp_probes.graph_sawtooth.evaluate import pick_gamma
from interp_probes.graph_sawtooth.slash import Slash, invariant_errors, redistribute, sink_columns

# ----------------------------------------------------------------------------- parsing and spans


def test_parse_edges_reads_the_four_formats_and_ignores_weights():
    text = "E: (0,1) (2, 3, 7) (4->5) (6 -> 7, 2.5) and (i, j)"
    assert [(u, v) for u, v, _, _ in G.parse_edges(text)] == [(0, 1), (2, 3), (4, 5), (6, 7)]


def test_standardise_sorts_by_source_only_and_keeps_the_rest():
    text = "Before: (3, 9) (0, 5) (3, 1) (0, 2) (1, 4)\nQ: after (x)"
    new, edges, segs = G.standardise(text)
    # stable by source: within-source order as written (9 before 1, 5 before 2), not by target
    assert new == "Before: (0, 5) (0, 2) (1, 4) (3, 9) (3, 1)\nQ: after (x)"
    assert [new[a:b] for a, b in edges] == ["(0, 5)", "(0, 2)", "(1, 4)", "(3, 9)", "(3, 1)"]
    assert [new[a:b] for a, b in segs] == ["(0, 5) (0, 2)", "(1, 4)", "(3, 9) (3, 1)"]
    assert G.standardise(new)[0] == new  # idempotent


def test_token_spans_from_offsets():
    #            " (" "0" "," " " "5" ")"  " (" "1" ...
    offsets = [(0, 0), (6, 8), (8, 9), (9, 10), (10, 11), (11, 12), (12, 13), (13, 15), (15, 16)]
    # special token at (0, 0) never matches; span starting at "(" (char 7) starts at " (" (6-8)
    assert G.token_spans(offsets, [(7, 13), (14, 16)]) == [(1, 6), (7, 8)]


def test_synthetic_samples_are_balanced_standardised_and_seeded():
    cfg = build_config(GraphSawtoothConfig, {"n_select": 8, "n_cal": 16, "n_test": 16})
    a = G.synthetic_samples(cfg, np.random.default_rng(3))
    b = G.synthetic_samples(cfg, np.random.default_rng(3))
    assert [s.prompt for s in a] == [s.prompt for s in b]
    test = [s for s in a if s.split == "test"]
    assert Counter(s.task for s in test) == {t: 4 for t in cfg.tasks}
    for task in ("edge", "connectivity", "cycle"):
        assert Counter(s.answer for s in test if s.task == task) == {" Yes": 2, " No": 2}
    for s in a:
        assert s.answer in s.candidates
        assert G.standardise(s.prompt)[0] == s.prompt
        srcs = [u for u, _, _, _ in G.parse_edges(s.prompt)]
        assert srcs == sorted(srcs) and all(u < v for u, v, _, _ in G.parse_edges(s.prompt))
        if s.task == "cycle":
            assert s.n_nodes - 3 <= s.n_edges <= s.n_nodes - 1
        else:
            assert cfg.n_edges[0] <= s.n_edges <= cfg.n_edges[1]


@pytest.mark.parametrize("task", ["edge", "degree", "connectivity", "cycle"])
def test_task_answers_are_true_of_the_graph(task):
    rng = np.random.default_rng(0)
    for positive in (True, False):
        g, q, ans, cands = G.make_task(task, positive, (8, 12), (12, 20), rng)
        nums = [int(x) for x in q.replace("?", "").split() if x.isdigit()]
        if task == "edge":
            assert (ans == " Yes") == g.has_edge(*nums)
        elif task == "degree":
            assert ans == f" {g.degree(nums[0])}" and len(cands) == g.number_of_nodes()
        elif task == "connectivity":
            assert (ans == " Yes") == nx.has_path(g, *nums)
            assert nx.number_connected_components(g) >= 2
        else:
            assert (ans == " Yes") == (not nx.is_forest(g))
        if task != "degree":
            assert ans == (" Yes" if positive else " No")


# ----------------------------------------------------------------------------- template and nulls


def test_template_is_a_row_of_causal_triangles():
    m = ST.template([(0, 2), (3, 4)], 6)
    expect = np.zeros((6, 6), bool)
    for i, j in [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (3, 3), (4, 3), (4, 4)]:
        expect[i, j] = True
    assert (m == expect).all()


def test_shuffled_spans_keep_lengths_gaps_and_extent():
    spans = [(0, 5), (6, 17), (19, 24), (25, 36)]  # gaps 0, 1, 0
    rng = np.random.default_rng(0)
    for _ in range(20):
        sh = ST.shuffled_spans(spans, rng)
        assert sorted(e - s + 1 for s, e in sh) == sorted(e - s + 1 for s, e in spans)
        assert [sh[k + 1][0] - sh[k][1] - 1 for k in range(3)] == [0, 1, 0]
        assert sh[0][0] == 0 and sh[-1][1] == 36
        assert ST.template(sh, 37).sum() == ST.template(spans, 37).sum()  # equal k for top-k


# ----------------------------------------------------------------------------- concentration


def _sawtooth_maps(spans, r, rng):
    m = ST.template(spans, r).astype(float)
    causal = np.tril(np.ones((r, r)))
    sawtooth = m * 0.9 + causal * 0.1 * rng.random((r, r))
    diagonal = np.eye(r) + np.eye(r, k=-1) * 0.5 + causal * 0.05 * rng.random((r, r))
    noise = causal * rng.random((r, r))
    return np.stack([sawtooth, diagonal, noise])


def test_concentration_ranks_sawtooth_above_diagonal_and_noise_and_its_null():
    rng = np.random.default_rng(0)
    spans = [(0, 11), (12, 17), (18, 35), (36, 47), (48, 53)]
    maps = _sawtooth_maps(spans, 54, rng)
    nulls = [ST.shuffled_spans(spans, rng) for _ in range(10)]
    sc = ST.score_sample(maps, spans, nulls)
    conc, conc_null = sc["concentration"], sc["concentration_null"]
    assert conc[0] > 0.9, conc
    assert conc[0] > conc[1] + 0.2 and conc[0] > conc[2] + 0.2, conc
    assert conc[0] > conc_null[:, 0].mean() + 0.1, (conc[0], conc_null[:, 0])
    assert sc["auc"][0] > 0.95 and sc["auc"][0] > sc["auc_null"][:, 0].mean() + 0.1
    assert sc["auc_distmatched"][0] > 0.95 and abs(sc["auc_distmatched"][2] - 0.5) < 0.15


def test_span_score_matches_a_direct_implementation():
    rng = np.random.default_rng(1)
    r = 40
    y = rng.random((2, r, r)) < 0.5
    scorer = ST.SpanScorer(y, 2)
    for s, e in [(0, 9), (10, 25), (30, 39), (5, 6)]:
        got = scorer.span_score(s, e)
        L = e - s + 1
        m = max(int(round(0.25 * L)), 4)
        want = np.full(2, -np.inf)
        for d in range(-2, 3):
            if s + d > r - 1 or e + d < 0:
                continue
            s2, e2 = min(max(s + d, 0), r - 1), min(max(e + d, 0), r - 1)
            out = y[:, s2 : e2 + 1, max(0, e2 - L - 1) : s2]
            out_err = out.mean((1, 2)) if out.size else np.zeros(2)
            cells = [(i, j) for i in range(s2, e2 + 1) for j in range(s2, e2 + 1) if j - s2 <= i - s2 - m]
            ins = 1 - np.array([np.mean([y[u, i, j] for i, j in cells]) for u in range(2)]) if cells else np.zeros(2)
            want = np.maximum(want, np.clip((1 - out_err) * (1 - ins), 0, 1))
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_binarize_topk_keeps_k_cells_and_closing_fills_holes():
    x = np.arange(16, dtype=float).reshape(1, 4, 4)
    assert ST.binarize(x, 5).sum() == 5 and ST.binarize(x, 5)[0, 3].all()
    y = np.ones((1, 5, 5), bool)
    y[0, 2, 2] = False
    closed = ST.closing(y)
    assert closed[0, 2, 2]  # the hole is filled; border cells erode (outside counts as 0)
    assert not closed[0, 0, 0]


def test_auc_from_ranks_equals_sklearn():
    from scipy.stats import rankdata

    rng = np.random.default_rng(2)
    v = rng.random((3, 200))
    v[0, :20] = v[0, 20:40]  # ties
    labels = rng.random((4, 200)) < 0.3
    got = ST.auc_from_ranks(rankdata(v, axis=1), labels)
    for u in range(3):
        for d in range(4):
            assert math.isclose(got[u, d], roc_auc_score(labels[d], v[u]), abs_tol=1e-12)


# ----------------------------------------------------------------------------- selection


def test_otsu_takes_the_high_cluster_and_falls_back_to_top_40_percent():
    scores = np.array([0.1, 0.12, 0.11, 0.6, 0.62, 0.13, 0.58, 0.1])
    res = SEL.otsu_set(scores)
    assert res["layers"] == [3, 4, 6] and not res["top40_fallback"]
    assert 0.13 < res["threshold"] < 0.58
    flat = SEL.otsu_set(np.full(10, 0.3) + np.arange(10) * 1e-5)
    assert flat["top40_fallback"] and len(flat["layers"]) == 4


def test_entropy_band_finds_the_middle_wide_peak():
    n = 30
    x = np.arange(n)
    series = 2.0 + np.exp(-0.5 * ((x - 15) / 3) ** 2) + 0.6 * np.exp(-0.5 * ((x - 2) / 1) ** 2)
    band = SEL.entropy_band(series)
    assert band["peak"] in range(13, 18), band["peak"]
    lo, hi = band["band"]
    assert lo <= 15 <= hi and hi - lo + 1 >= math.ceil(0.32 * n) - 1
    flat = SEL.entropy_band(np.linspace(1, 2, n))  # monotone: no interior peak
    assert flat["no_peak_fallback"] and len(flat["layers"]) == 12


def test_final_set_intersects_and_records_the_fallback():
    scores = np.linspace(0, 1, 10)
    assert SEL.final_set(scores, [7, 8, 9], {"layers": [6, 7, 8]}) == ([7, 8], False)
    assert SEL.final_set(scores, [1, 9], {"layers": [4, 5, 6, 7]}) == ([9], True)  # 9 is within 2 of 7
    assert SEL.final_set(scores, [0, 1], {"layers": [7, 8]}) == ([1], True)


def test_pick_gamma_breaks_ties_to_the_larger_gamma():
    t = pd.DataFrame({"gamma": [0.2, 0.6, 1.0], "task": ["all"] * 3, "acc_cal": [0.5, 0.7, 0.7]})
    assert pick_gamma(t) == 1.0
    t.loc[2, "acc_cal"] = 0.6
    assert pick_gamma(t) == 0.6


# ----------------------------------------------------------------------------- SLASH arithmetic


def _patterns(b=3, h=2, t=12, pads=(0, 3, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, h, t, t, generator=g) * 2
    scores[:, :, :, 0] += 4  # a sink-ish first column
    mask = torch.ones(b, t, dtype=torch.long)
    for r, p in enumerate(pads):
        mask[r, :p] = 0
        scores[r, :, :, p] += 4
    allowed = torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None] & mask.bool()[:, None, None, :]
    p = scores.masked_fill(~allowed, -torch.inf).softmax(-1).nan_to_num(0.0)
    return p, mask, allowed


@pytest.mark.parametrize("offsets", [(0,), (0, 1, 2)])
@pytest.mark.parametrize("gamma", [0.0, 0.4, 0.9])
def test_redistribute_keeps_rows_summing_to_one_and_ratios(gamma, offsets):
    p, mask, allowed = _patterns()
    sinks = sink_columns(mask, p.shape[-1], p.shape[0], offsets)
    first = mask.argmax(-1)
    out, rows = redistribute(p, gamma, sinks, first)
    errs = invariant_errors(p, out, rows, sinks, gamma)
    assert errs["rows_checked"] > 0
    assert errs["max_row_sum_err"] <= 1e-5 and errs["max_sink_ratio_err"] <= 1e-6
    assert errs["max_nonsink_ratio_err"] <= 1e-5
    assert (out[~allowed.expand_as(out)] == 0).all()  # masked entries stay 0
    # rows that only see sinks, and padding query rows, are unchanged
    for r in range(p.shape[0]):
        f = int(first[r])
        untouched = out[r, :, : f + len(offsets)]
        assert torch.equal(untouched, p[r, :, : f + len(offsets)].float())
    # the sink got exactly gamma of its mass on modified rows
    s = sinks[1, 0]
    q = int(first[1]) + len(offsets) + 2
    assert torch.allclose(out[1, :, q, s], gamma * p[1, :, q, s])


def test_redistribute_with_gamma_one_is_the_identity():
    p, mask, _ = _patterns()
    out, _ = redistribute(p, 1.0, sink_columns(mask, p.shape[-1], p.shape[0]), mask.argmax(-1))
    assert torch.equal(out, p.float())


def test_slash_hook_skips_decode_steps():
    sl = Slash([0], 0.5)
    hook = sl.hook(0)
    one = torch.softmax(torch.randn(2, 3, 1, 9), -1)
    assert hook(one) is None and sl.applied == 0


# ----------------------------------------------------------------------------- model paths (tiny model)


def test_hooked_slash_on_the_tiny_model(tiny_model):
    from interp_probes.graph_sawtooth.attention import forward_last

    ids = torch.randint(10, 1000, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    base = forward_last(tiny_model, ids, mask)
    one = Slash([0, 1], 1.0)
    with tiny_model.hooks(one.pairs()), one.batch(mask):
        same = forward_last(tiny_model, ids, mask)
    assert float((same - base).abs().max()) <= 1e-5
    sl = Slash([0, 1], 0.3)
    with tiny_model.hooks(sl.pairs()), sl.batch(mask):
        changed = forward_last(tiny_model, ids, mask)
    assert float((changed - base).abs().max()) > 1e-6
    assert sl.applied == 2 and max(e["max_row_sum_err"] for e in sl.errors.values()) <= 1e-5


def test_prefill_then_continuation_equals_prompt_only_slash(tiny_model):
    """Scoring = one hooked prefill + unhooked continuation on its cache; it must equal a full
    forward in which SLASH edits only the prompt's query rows."""
    from interp.sites import Site
    from interp_probes.graph_sawtooth.attention import Tokenised
    from interp_probes.graph_sawtooth.scoring import score_batch

    tok = tiny_model.tokenizer
    prompts = ["Edges: (0, 1) (0, 2) (1, 3)\nA:", "Graph (2, 3)\nA:"]
    items = []
    for i, text in enumerate(prompts):
        s = G.make_sample(i, "test", "edge", text, " Yes", [" Yes", " 12"])
        ids = tok(text, add_special_tokens=False)["input_ids"]
        items.append(Tokenised(s, text, ids, (0, 1), [(0, 1)]))
    cands = [[tok(c + "\n", add_special_tokens=False)["input_ids"] for c in it.sample.candidates] for it in items]
    for gamma in (1.0, 0.3):
        sl = None if gamma == 1.0 else Slash([0, 1], gamma)
        got = score_batch(tiny_model, items, cands, sl)
        for r, it in enumerate(items):
            for j, c in enumerate(cands[r]):
                full = torch.tensor([it.ids + c])
                n_prompt = len(it.ids)

                def prompt_rows_only(p, n_prompt=n_prompt, gamma=gamma):
                    zero = torch.zeros(1, dtype=torch.long)
                    out, _ = redistribute(p, gamma, zero[:, None], zero)
                    out[:, :, n_prompt:] = p[:, :, n_prompt:]
                    return out

                pairs = [] if sl is None else [(Site("attn_pattern", layer), prompt_rows_only) for layer in (0, 1)]
                with torch.no_grad(), tiny_model.hooks(pairs):
                    lp = tiny_model.forward(full, torch.ones_like(full))[0].float().log_softmax(-1)
                want = sum(float(lp[n_prompt - 1 + t, c[t]]) for t in range(len(c)))
                assert math.isclose(got[r][j], want, abs_tol=2e-3), (gamma, r, j, got[r][j], want)


def test_user_jsonl_rows_are_standardised_and_split(tmp_path):
    import json

    rows = [{"prompt": f"G: (2, {i + 3}) (0, 1) (2, 1) (0, 9)\nQ: edge?\nA:", "answer": " Yes",
             "candidates": [" Yes", " No"], "task": "edge"} for i in range(6)]
    path = tmp_path / "graphs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = build_config(GraphSawtoothConfig, {"data": str(path), "n_select": 2, "n_cal": 4, "n_test": 4,
                                             "tasks": ["edge"]})
    with pytest.raises(Exception, match="at least"):
        G.user_samples(G.read_rows(str(path)), cfg, np.random.default_rng(0))
    cfg = build_config(GraphSawtoothConfig, {"data": str(path), "n_select": 2, "n_cal": 2, "n_test": 2,
                                             "tasks": ["edge"]})
    samples = G.user_samples(G.read_rows(str(path)), cfg, np.random.default_rng(0))
    assert Counter(s.split for s in samples) == {"select": 2, "cal": 2, "test": 2}
    s = samples[0]
    assert s.prompt.startswith("G: (0, 1) (0, 9) (2, ") and s.n_edges == 4 and len(s.segment_chars) == 2
