"""sae_falsification stages on synthetic data and the tiny model: hygiene (no pad or position-0 value in any SAE
input or max; forwards stop at the SAE's hook, taken from its config), statistics, token analysis, injection and
its control, validity checks, the loop's stop rule, the endpoint generator against a loopback stub, steering."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

from interp.config import build_config
from interp.errors import ConfigError
from interp.sae import build_sae, save_sae
from interp.sites import Site
from interp_probes.sae_falsification import SaeFalsificationConfig
from interp_probes.sae_falsification import acts as A
from interp_probes.sae_falsification.checks import (
    Context,
    final_answer,
    fn_checks,
    fp_checks,
    n_families,
    numbers,
    reasoning_signals,
)
from interp_probes.sae_falsification.corpora import build_corpora, steering_problems
from interp_probes.sae_falsification.detection import (
    auc_columns,
    cohen_d_avg,
    cohen_d_pooled,
    detect,
    oracle_auc,
    rank_order,
)
from interp_probes.sae_falsification.generator import OpenAIGenerator, parse_candidates, parse_json_object
from interp_probes.sae_falsification.injection import (
    PAYLOAD_LEN,
    ControlPool,
    classify,
    control_pool,
    draw_control,
    injection_jobs,
    summarize_feature,
)
from interp_probes.sae_falsification.loop import LoopFeature, rewrite, run_loop, template_fns, template_fps
from interp_probes.sae_falsification.sae_setup import obtain_sae, quality_gates
from interp_probes.sae_falsification.tokens import FeatureTokens, analyse_tokens

SITE = Site("resid_post", 0)


def random_sae(d_in=64, d_sae=96, k=8, hook="blocks.0.hook_resid_post", seed=0):
    g = torch.Generator().manual_seed(seed)
    W_dec = torch.randn(d_sae, d_in, generator=g)
    W_dec /= W_dec.norm(dim=-1, keepdim=True)
    state = {"W_enc": W_dec.T.clone(), "b_enc": torch.zeros(d_sae), "W_dec": W_dec, "b_dec": torch.zeros(d_in)}
    return build_sae("topk", state, {"hook_name": hook}, k=k)


# ============================================================================= hygiene


def test_padded_batch_gives_the_unpadded_maxima_and_position0_never_reaches_the_sae(tiny_model, monkeypatch):
    sae = random_sae()
    texts = ["One two three four five six seven.", "A much longer sentence that goes on and on for a while here."]
    seen = []
    real_encode = A.encode
    monkeypatch.setattr(A, "encode", lambda s, x: (seen.append(x.clone()), real_encode(s, x))[1])
    enc = tiny_model.tokenize(texts, padding_side="right")
    batch = A.scan_texts(tiny_model, sae, SITE, enc, batch_size=2)
    assert enc["attention_mask"][0].sum() < enc["attention_mask"].shape[1], "the short text must be padded"
    n_valid = int(enc["attention_mask"].sum()) - 2
    assert sum(x.shape[0] for x in seen) == n_valid, "pads or position 0 were encoded"
    x_site = A.site_activations(tiny_model, SITE, enc["input_ids"], enc["attention_mask"])
    pos0 = x_site[:, 0]
    assert not any(torch.isclose(x, p, atol=1e-6).all(-1).any() for x in seen for p in pos0)
    for i, t in enumerate(texts):
        alone = A.scan_texts(tiny_model, sae, SITE, tiny_model.tokenize([t]), batch_size=1)
        assert torch.allclose(batch.sample_max[i], alone.sample_max[0], atol=1e-5)
    valid = batch.valid
    assert not valid[:, 0].any() and (valid.sum(1) == enc["attention_mask"].sum(1).cpu() - 1).all()
    assert (batch.codes.pos >= 1).all()


def test_masked_max_ignores_pads_and_position0():
    codes = torch.tensor([[[100.0], [1.0], [2.0], [50.0]]])
    mask = torch.tensor([[1, 1, 1, 0]])  # the last position is a pad
    assert A.masked_max(codes, A.valid_positions(mask)).item() == 2.0
    empty = A.masked_max(codes, A.valid_positions(torch.tensor([[1, 0, 0, 0]])))
    assert empty.item() == 0.0


def test_forward_stops_at_the_sae_hook(tiny_model):
    fired = []
    ids = torch.tensor([[5, 6, 7, 8]])
    with tiny_model.hooks([(Site("resid_pre", 1), lambda x: fired.append(1))]):
        A.site_activations(tiny_model, SITE, ids, torch.ones_like(ids))
    assert not fired, "a layer above the SAE's hook ran"


def test_the_hook_comes_from_the_sae_config(tiny_model, tmp_path):
    sae = random_sae(hook="blocks.1.hook_resid_pre")
    save_sae(sae, tmp_path / "sae")
    cfg = build_config(SaeFalsificationConfig, {"sae.source": str(tmp_path / "sae"),
                                                "sae.hook": "blocks.0.hook_resid_post"})
    got, site, info = obtain_sae(tiny_model, cfg, [], "")
    assert site == Site("resid_pre", 1) and site.tl_name == got.cfg.metadata.hook_name
    with pytest.raises(ConfigError, match="sae.source: .* does not exist"):  # refused before any model loads
        build_config(SaeFalsificationConfig, {"sae.source": str(tmp_path / "nowhere")})


def test_quality_gates_keep_position0_clean_and_match_the_formulas(tiny_model):
    sae = random_sae(k=64, d_sae=96)
    seqs = [[10, 20, 30, 40, 50, 60], [11, 21, 31], [12, 22, 32, 42, 52]]
    q = quality_gates(tiny_model, sae, SITE, seqs, 1000, batch_size=2)
    from interp_probes.sae_falsification.acts import pad_ids

    ids, am = pad_ids(seqs, 0)
    x = A.site_activations(tiny_model, SITE, ids, am)[A.valid_positions(am)]
    from interp.sae import decode, encode

    xhat = decode(sae, encode(sae, x))
    ev = 1 - ((x - xhat) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()
    assert q.n_tokens == 11 and q.explained_variance == pytest.approx(float(ev), abs=1e-4)
    assert q.ce_zero != q.ce_clean and 0 <= q.dead_frac <= 1
    # position 0 keeps its clean activation: zeroing all but position 0 leaves its logits alone
    pos0 = []
    with tiny_model.hooks([(Site("resid_pre", 1), lambda x: pos0.append(x[:, 0].clone()))]):
        from interp_probes.sae_falsification.sae_setup import _replace

        tiny_model.forward(ids, am)
        with tiny_model.hooks([(SITE, _replace("zero", A.valid_positions(am), xhat))]):
            tiny_model.forward(ids, am)
    assert torch.allclose(pos0[0], pos0[1])


# ============================================================================= detection


def test_detection_statistics_match_references_and_rank_totally():
    rng = np.random.default_rng(0)
    r = np.abs(rng.normal(size=(60, 6)))
    n = np.abs(rng.normal(size=(50, 6)))
    r[:, 0] += 2.0  # a strong feature
    r[:, 1] += 2.0  # tied with 0 in everything but id after the copy below
    r[:, 1], n[:, 1] = r[:, 0], n[:, 0]
    r[:, 5] = n[:5, 5].mean() * 0  # a dead feature
    n[:, 5] = 0
    labels = np.r_[np.ones(60), np.zeros(50)]
    auc = auc_columns(r, n)
    for f in range(6):
        assert auc[f] == pytest.approx(roc_auc_score(labels, np.r_[r[:, f], n[:, f]]))
    d = cohen_d_pooled(r, n)
    pooled = np.sqrt((59 * r[:, 0].var(ddof=1) + 49 * n[:, 0].var(ddof=1)) / 108)
    assert d[0] == pytest.approx((r[:, 0].mean() - n[:, 0].mean()) / pooled)
    det = detect(r, n, 0.6, 0.01, 0.3)
    assert det.passed[0] and det.passed[1] and not det.passed[5]
    assert det.p_bonf[0] == pytest.approx(min(1, det.p_mw[0] * 6))
    assert det.loc[5, "p_mw"] == 1.0 and det.loc[5, "d"] == 0.0
    assert list(det.sort_values("rank").query("rank >= 0").feature[:2]) == [0, 1], "ties must fall back to the id"
    assert rank_order(det) == rank_order(det.sample(frac=1, random_state=1).sort_index())
    assert oracle_auc([1, 1, 0, 0], [1, 0, 1, 0]) == 0.5 and oracle_auc([1, 1, 0, 0], [1, 1, 0, 1]) == 0.75


def test_injection_d_and_classes():
    assert cohen_d_avg(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0])) == pytest.approx(1.0)
    assert classify(0.8, 0.009) == "token_driven" and classify(0.79, 0.001) == "partially"
    assert classify(0.5, 0.02) == "weakly" and classify(0.2, 0.06) == "context_dependent"
    rows = pd.DataFrame([
        {"feature": 1, "arm": "real", "strategy": "prepend", "mean_base": 0.0, "mean_inj": 1.0, "d": 0.9, "p": 1e-4},
        {"feature": 1, "arm": "real", "strategy": "trigram", "mean_base": 0.0, "mean_inj": 2.0, "d": 1.2, "p": 1e-3},
        {"feature": 1, "arm": "control", "strategy": "prepend", "mean_base": 0.0, "mean_inj": 0.1, "d": 0.3,
         "p": 0.2}])
    s = summarize_feature(rows, gap=4.0)
    assert s["best_strategy"] == "trigram" and s["class"] == "token_driven" and s["transfer"] == 0.5
    assert s["control_class"] == "context_dependent"


# ============================================================================= tokens


def test_token_analysis_finds_top_tokens_concentration_and_ngrams():
    ids = np.array([[1, 7, 9, 7, 3, 0], [1, 5, 7, 9, 2, 4]] * 5)
    valid = np.ones_like(ids, dtype=bool)
    valid[:, 0] = False
    valid[1::2, 5] = False  # a pad
    s, p = np.nonzero((ids == 7) & valid)
    codes = A.SparseCodes(s.astype(np.int32), p.astype(np.int16), np.full(len(s), 3, np.int32),
                          np.full(len(s), 2.0, np.float32))
    extra = A.SparseCodes(np.array([0], np.int32), np.array([2], np.int16), np.array([3], np.int32),
                          np.array([0.1], np.float32))
    both = A.SparseCodes(*(np.r_[a, b] for a, b in zip((codes.sample, codes.pos, codes.feature, codes.value),
                                                      (extra.sample, extra.pos, extra.feature, extra.value))))
    toks, frame = analyse_tokens(both, ids, valid, [3], vocab=16, n_top=2, min_count=5)
    ft = toks[3]
    assert ft.top[0] == 7 and ft.concentration == 1.0 and 0 < ft.entropy < 1
    assert frame.iloc[0].token_id == 7 and frame.iloc[0].mean_act == pytest.approx(2.0)
    before = dict(ft.ngrams["bigram_before"])
    assert before[(1, 7)] == 5 and before[(9, 7)] == 5 and before[(5, 7)] == 5
    assert dict(ft.ngrams["trigram"])[(7, 9, 7)] if (7, 9, 7) in dict(ft.ngrams["trigram"]) else True


# ============================================================================= injection and control


def _ft(top=(100, 101, 102)):
    ft = FeatureTokens(7, list(top), list(top), 0.9, 0.3, 1.0)
    ft.ngrams = {"bigram_before": [((50, 100), 9), ((51, 101), 4)], "trigram": [((50, 100, 52), 3)],
                 "frequent_bigram": [((100, 53), 12)], "frequent_trigram": [((54, 100, 55), 6)]}
    return ft


@pytest.mark.parametrize("strategy", list(PAYLOAD_LEN))
def test_every_strategy_keeps_injected_tokens_inside_the_window(strategy):
    seq_len = 16
    bases = [list(range(200, 230)), list(range(300, 312))]
    word = lambda t: t % 2 == 0  # noqa: E731
    arms = {"real": {}, "control": {7: {"swap": {100: 400, 101: 401, 102: 402}, "ngrams": {(50, 100): (60, 400)}}}}
    jobs, seqs, bad = injection_jobs([7], {7: _ft()}, arms, bases, [strategy], seq_len, 0, word, comma_id=11)
    assert bad == 0 and len(jobs) == 4
    for j, s in zip(jobs, seqs):
        assert len(s) <= seq_len and s[0] == bases[j["text"]][0], "position 0 must stay the text's first token"
        top = {100, 101, 102} if j["arm"] == "real" else {400, 401, 402}
        assert set(s) & top or strategy in ("inject_bigram", "inject_trigram", "bigram_before", "trigram")
    by = {(j["arm"], j["text"]): s for j, s in zip(jobs, seqs)}
    if strategy == "prepend":
        assert by["real", 0][1:4] == [100, 101, 102] and by["control", 0][1:4] == [400, 401, 402]
    if strategy in ("intersperse", "replace"):  # same seeded positions for both arms
        real = [i for i, t in enumerate(by["real", 0]) if t in (100, 101, 102)]
        ctrl = [i for i, t in enumerate(by["control", 0]) if t in (400, 401, 402)]
        assert real == ctrl and len(real) == 3


def test_control_draw_is_frequency_matched_seeded_and_excludes():
    counts = np.array([0, 100, 100, 95, 90, 1000, 100, 100, 80, 10, 100])
    counts_r = np.zeros_like(counts)
    counts_r[6] = 90  # a reasoning-only token
    strs = {1: " a", 2: " b", 3: " c", 4: "  ", 5: " the", 6: " =", 7: "7", 8: " d", 9: " e", 10: " f"}
    pool = control_pool(counts, counts_r, lambda t: strs.get(t, ""), special_ids=[10], candidate_top=[2],
                        max_reasoning_share=0.7)
    assert not pool.allowed[[0, 2, 4, 6, 7, 10]].any(), "absent, candidate-top, whitespace, reasoning, digit, special"
    t2, w = draw_control(pool, 1, exclude=[1], rng=np.random.default_rng(0), pool_min=2)
    assert t2 in (3, 8) and w == pytest.approx(0.1)
    again, _ = draw_control(pool, 1, exclude=[1], rng=np.random.default_rng(0), pool_min=2)
    assert again == t2
    wide, w2 = draw_control(ControlPool(pool.log_freq, pool.allowed), 1, [1], np.random.default_rng(1), pool_min=4)
    assert w2 > 0.1


# ============================================================================= checks, templates, parsing


def test_reasoning_detector_and_validity_checks():
    story = ("Mia walked to the harbour on Sunday. The boats were painted blue and red, and the gulls circled "
             "the masts. She therefore bought a coffee and sat on the wall to watch them for a while.")
    deriv = "First, 23 + 15 = 38 apples. Then she gives away 9, which leaves 29. The answer is 29."
    assert reasoning_signals(story)["EQ"] == 0 and n_families(deriv) >= 3
    ctx = Context([], {5}, lambda t: [1, 2, 3] if "therefore" in t else [1, 2], {"therefore"})
    ok = fp_checks(story, [], ctx)
    assert all(ok.values()), ok
    assert not fp_checks(deriv + " " + story, [], ctx)["ok_no_eq"]
    assert not fp_checks(story, [set(story.lower().replace(".", "").split())], ctx)["ok_not_duplicate"]
    assert numbers("twenty apples, 3 pears and 1,200 grams") == [20.0, 3.0, 1200.0]
    assert final_answer(deriv) == 29.0 and final_answer("so y = 7.") == 7.0
    src = "Tom has 23 apples and gets 15 more. So he has 23 + 15 = 38. Therefore, the answer is 38."
    rw = rewrite(src, 0)
    assert "Therefore" not in rw and numbers(rw) == numbers(src) and final_answer(rw) == 38.0
    ctx2 = Context([], {999}, lambda t: [1], {"therefore"})
    assert all(fn_checks(rw, src, [], ctx2).values()), fn_checks(rw, src, [], ctx2)
    assert not fn_checks(rw.replace("38", "39"), src, [], ctx2)["ok_answer"]


def test_template_candidates_avoid_top_ids_and_carry_tokens():
    f = LoopFeature(3, 0, False, 1.0, [7], [" therefore"], [" so we"], [], [
        "Ava has 9 cards and finds 4 more. Therefore, the answer is 13. So she has 9 + 4 = 13."])
    fps = template_fps(f, 1, 3, ["Mia", "Tom"])
    assert len(set(fps)) == 3 and all(" therefore" in t for t in fps)
    tokenize = lambda t: [7] if "herefore" in t else [1]  # noqa: E731
    (src, rw), = template_fns(f, 1, 1, tokenize)
    assert "herefore" not in rw and numbers(rw) == numbers(src)


def test_parsing_is_lenient():
    assert parse_candidates('Here: ["one text", "two text"]') == ["one text", "two text"]
    assert parse_candidates("1. first story\n2. second story\n3. third") == ["first story", "second story", "third"]
    assert parse_candidates("block one\nline\n\nblock two") == ["block one line", "block two"]
    assert parse_candidates("") == [] and parse_candidates(None) == []
    assert parse_json_object('x {"a": 1} y') == {"a": 1} and parse_json_object("nope") is None


def test_corpora_carry_digits_and_markers_without_derivations():
    general = ["word " * 40 + str(i) for i in range(50)]
    s = build_corpora(0, {"detection": (100, 100), "injection": (0, 10)}, general)
    again = build_corpora(0, {"detection": (100, 100), "injection": (0, 10)}, general)
    assert [x.text for x in s] == [x.text for x in again]
    non = [x for x in s if x.label == "non" and x.split == "detection"]
    assert np.mean([x.has_digit for x in non]) >= 0.3 and np.mean([x.has_marker for x in non]) >= 0.2
    assert not any(reasoning_signals(x.text)["ANSWER"] for x in non)
    assert not any(x.has_marker for x in s if x.split == "injection")
    assert len({x.text for x in s}) == len(s)
    probs = steering_problems(0, 20, {x.text for x in s})
    assert len(probs) == 20 and all(isinstance(a, int) for _, a in probs)


# ============================================================================= the loop and the endpoint generator


class Cfg:
    loop_max_iters, loop_stop_valid, n_fp, n_fn = 5, 3, 3, 3
    fp_ratio, fn_ratio, template_fallback = 0.5, 0.05, True
    temperature_gen, temperature_judge, gen_max_tokens = 0.8, 0.3, 64


def _loop_feature():
    srcs = [f"Ben has {a} cards and finds {a + 1} more. So he has {a} + {a + 1} = {2 * a + 1}. "
            f"Therefore, the answer is {2 * a + 1}." for a in range(3, 9)]
    return LoopFeature(4, 0, False, 2.0, [7], [" therefore"], [" so he"], ["x [therefore] y"], srcs)


def _context(f):
    return Context([], set(f.top_ids), lambda t: [7] if "herefore" in t else [1], {"therefore"})


def test_loop_stops_once_it_has_three_valid_of_each():
    from interp_probes.sae_falsification.generator import TemplateGenerator

    f = _loop_feature()
    score = lambda texts, feats: np.array([1.5 if "therefore" in t else 0.0 for t in texts])  # noqa: E731
    res = run_loop([f], TemplateGenerator(), Cfg, score, _context, ["Mia", "Tom"],
                   lambda a, b: np.random.default_rng(0))
    assert f.n_valid_fp >= 3 and f.n_valid_fn >= 3 and f.iterations == 1, (f.n_valid_fp, f.n_valid_fn, f.iterations)
    assert set(res.candidates.source) == {"template"}
    never = lambda texts, feats: np.full(len(texts), 0.5)  # noqa: E731 - neither FP (>1.0) nor FN (<0.1)
    g = _loop_feature()
    run_loop([g], TemplateGenerator(), Cfg, never, _context, ["Mia"], lambda a, b: np.random.default_rng(0))
    assert g.iterations == Cfg.loop_max_iters and g.n_valid_fp == g.n_valid_fn == 0


class _Stub(BaseHTTPRequestHandler):
    fail_first = 0
    requests: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if type(self).fail_first > 0:
            type(self).fail_first -= 1
            self.send_response(500)
            self.end_headers()
            return
        user = body["messages"][-1]["content"]
        if "In one sentence" in user:
            reply = "It detects the word therefore."
        elif "Return a JSON list" in user:
            reply = json.dumps([f"At the fair in {t} the band played late, and therefore everyone stayed to dance "
                                f"under the lanterns while the children ran between the stalls of cakes and honey."
                                for t in ("June", "July", "May")])
        elif "Rewrite it so" in user:
            src = user.split("\n\n")[1]
            reply = src.replace("Therefore, the answer is", "All in all, the result is").replace("So he", "He")
        elif "step-by-step reasoning" in user:
            reply = "no"
        elif "same problem" in user:
            reply = "same meaning"
        else:
            reply = json.dumps({"interpretation": "the word therefore", "activates_on": "therefore",
                                "does_not_activate_on": "rewrites", "confidence": 0.9,
                                "is_genuine_reasoning_feature": False})
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_server():
    _Stub.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    thread.join()


def test_endpoint_generator_speaks_chat_completions_with_retries(stub_server, monkeypatch):
    monkeypatch.setenv("STUB_KEY", "sk-test")
    gen = OpenAIGenerator(stub_server, "stub-model", "STUB_KEY", backoff=0.0)
    _Stub.fail_first = 2
    out = gen.chat([{"role": "user", "content": "In one sentence, say hi"}], 0.3, 20)
    assert out == "It detects the word therefore."
    req = _Stub.requests[-1]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "stub-model" and req["body"]["temperature"] == 0.3
    assert len(_Stub.requests) == 3, "two failures, then the retry that worked"
    _Stub.fail_first = 3
    from interp_probes.sae_falsification.generator import GeneratorError

    with pytest.raises(GeneratorError):
        gen.chat([{"role": "user", "content": "x"}], 0.3, 5)
    _Stub.fail_first = 0


def test_loop_with_the_endpoint_generator_and_judge(stub_server):
    gen = OpenAIGenerator(stub_server, "stub-model", "NO_SUCH_KEY_VAR", backoff=0.0)
    f = _loop_feature()
    score = lambda texts, feats: np.array([1.5 if "therefore" in t else 0.0 for t in texts])  # noqa: E731
    res = run_loop([f], gen, Cfg, score, _context, ["Mia"], lambda a, b: np.random.default_rng(0), judge=True)
    cand = res.candidates
    assert f.hypothesis == "It detects the word therefore." and res.hypotheses.generator.iat[0] == "openai"
    assert (cand.source == "openai").any() and cand[cand.source == "openai"].valid.any()
    assert cand.ok_judge.notna().all() and f.judge_genuine is False and f.verdict["confidence"] == 0.9
    assert all(r["auth"] is None for r in _Stub.requests), "no key configured: no Authorization header"


# ============================================================================= steering and config


def test_mechanical_check_sees_the_steered_feature_rise(tiny_model):
    """The steering edit itself is the core's `interp.steer` (tests/unit/test_intervene_steer.py)."""
    from interp_probes.sae_falsification.steering import mechanical_check

    sae = random_sae(hook="blocks.0.hook_resid_post")
    enc = tiny_model.tokenize(["short", "a longer prompt here"], padding_side="left")
    vec = 3.0 * sae.W_dec[5]
    chk = mechanical_check(tiny_model, sae, SITE, enc, 5, 2.0, 1.5, vec, True)
    assert chk["ok"] and chk["mean_rise"] >= chk["required"], chk
    chk = mechanical_check(tiny_model, sae, SITE, enc, 5, 2.0, 1.5, vec, False)  # the hooked path's arithmetic
    assert chk["ok"] and chk["mean_rise"] >= chk["required"], chk


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="injection_strategies"):
        build_config(SaeFalsificationConfig, {"injection_strategies": ["prepend", "shout"]})
    with pytest.raises(ConfigError, match="generator_url"):
        build_config(SaeFalsificationConfig, {"generator": "openai"})
    with pytest.raises(ConfigError, match="sae.hook"):
        build_config(SaeFalsificationConfig, {"sae.hook": "blocks.3.attn.hook_pattern"})
    micro = build_config(SaeFalsificationConfig, {"size": "micro"})
    assert micro.n_reasoning == 16 and micro.sae.d_sae == 1152 and micro.generator == "template"
    quick = build_config(SaeFalsificationConfig, {"size": "quick"})
    assert quick.injection_strategies == ("prepend", "bigram_before") and quick.sae.train_tokens == 20_000


def test_topk_auxk_engages_on_dead_latents_and_keeps_old_cache_keys():
    import dataclasses

    from interp.sae import SAETrainConfig, decode, encode, train_sae

    if "aux_k" not in {f.name for f in dataclasses.fields(SAETrainConfig)}:
        pytest.skip("AuxK is not in interp.sae yet (its change was not landed this session)")

    g = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(32, 32, generator=g))[0][:6]  # data in a 6-dim subspace: many dead latents
    codes = torch.zeros(6000, 24)
    codes.scatter_(1, torch.randint(0, 24, (6000, 2), generator=g), torch.rand(6000, 2, generator=g) + 0.5)
    x = codes @ (torch.randn(24, 6, generator=g) @ basis)
    base = dict(architecture="topk", d_sae=192, k=2, steps=200, batch=256, lr=2e-3, lr_schedule="constant")
    plain, aux = SAETrainConfig(**base), SAETrainConfig(**base, aux_k=32, aux_dead_tokens=12800)
    assert "aux_k" not in plain.key() and aux.key()["aux_k"] == 32, "AuxK-free configs keep their cache keys"

    def ev(s):
        xh = decode(s, encode(s, x))
        return float(1 - ((x - xh) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())

    sae = train_sae(x, aux)
    info = sae.cfg.metadata.interp_training
    assert info["dead_final"] > 0 and info["aux_final"] > 0, info
    assert ev(sae) >= ev(train_sae(x, plain)) - 0.02
    with pytest.raises(ConfigError):
        SAETrainConfig(architecture="jumprelu", aux_k=8).validate()
