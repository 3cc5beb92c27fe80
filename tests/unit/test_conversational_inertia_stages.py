"""conversational_inertia stages on synthetic data and the tiny random model: environments, policies,
rendering spans (chat template, system-less template, plain-text format), the diagonal score and its
null, the hooked reduction, behaviour summaries and CPL pairs."""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from transformers import AutoTokenizer

from interp.config import build_config
from interp.errors import ConfigError
from interp_probes.conversational_inertia import ConversationalInertiaConfig, behavior, cpl, envs
from interp_probes.conversational_inertia import stats as S
from interp_probes.conversational_inertia.attention import key_fractions, measure, prepare
from interp_probes.conversational_inertia.render import SEGMENTS, SHARE_COLUMNS, render


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    """SmolLM2's tokenizer (ChatML template, no BOS)."""
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def rng(seed=0):
    return np.random.default_rng(seed)


# ============================================================================= config


def test_config_validates_before_loading():
    cfg = build_config(ConversationalInertiaConfig, {})
    assert cfg.rounds_grid == (1, 2, 4, 8, 12) and cfg.n_perm == 200 and cfg.policies == envs.POLICIES
    quick = build_config(ConversationalInertiaConfig, {"size": "quick"})
    assert quick.bait_rounds_grid == (8,) and quick.n_bait_episodes == 20
    assert quick.n_transcripts_per_n * len(quick.rounds_grid) == 16
    for bad, field in [({"policies": ["short"]}, "policies"), ({"envs": ["maze"]}, "envs"),
                       ({"bands": [1]}, "bands"), ({"rounds_grid": [1, 1]}, "rounds_grid"),
                       ({"n_doorworld_episodes": 4, "envs": ["doorexplore"]}, "n_doorworld_episodes"),
                       ({"rounds_grid": [1], "n_control_transcripts": 2}, "rounds_grid")]:
        with pytest.raises(ConfigError, match=field):
            build_config(ConversationalInertiaConfig, bad)


def test_train_dpo_says_what_to_install():
    import importlib.util

    with pytest.raises(ConfigError, match="train_dpo") as e:
        build_config(ConversationalInertiaConfig, {"train_dpo": True})
    if importlib.util.find_spec("peft") is None or importlib.util.find_spec("trl") is None:
        assert "pip install peft trl" in str(e.value)


# ============================================================================= environments


def test_templates_are_20_to_40_tokens_and_colours_single_tokens(tok):
    for c in envs.COLORS:
        assert len(tok.encode(" " + c, add_special_tokens=False)) == 1, c
    for env, templates in envs.TEMPLATES.items():
        assert len(templates) == 8
        for t in templates:
            for c in envs.COLORS:
                n = len(tok.encode(t.format(c=c), add_special_tokens=False))
                assert 20 <= n <= 40, (env, t, n)
                assert envs.parse_action(t.format(c=c)) == (c, True)


def test_templates_share_token_structure_across_colours(tok):
    """Index alignment: only the colour tokens change between two replies of one template."""
    for templates in envs.TEMPLATES.values():
        for t in templates:
            a = tok.encode(t.format(c="red"), add_special_tokens=False)
            b = tok.encode(t.format(c="yellow"), add_special_tokens=False)
            assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == t.count("{c}")


def test_control_wording_is_not_index_aligned(tok):
    """The chosen control wording's tokens (the same colour as the reply) barely touch the scored band."""
    encode = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    assert envs.aligned_tokens([1, 2, 3, 4], [9, 1, 2, 3]) == 3 and envs.aligned_tokens([1, 2], [7, 8, 9, 1]) == 0
    for env in envs.ENVS:
        for k, t in enumerate(envs.TEMPLATES[env]):
            wording = envs.control_wording(env, k, encode)
            n = envs.aligned_tokens(encode(t.format(c="green")), encode(wording.format(c="green")))
            assert n <= 2, (t, wording, n)
            ep = envs.attention_transcript(env, 3, k, rng(), control=wording)
            assert ep.kind == "control" and ep.answer in [t.format(c=c) for c in envs.COLORS]
            assert all(reply in [wording.format(c=c) for c in envs.COLORS] for _, reply in ep.rounds)


def test_bait_histories_are_nested_and_scored():
    eps = envs.bait_episodes("doorexplore", "bait", 5, 8, 8, 4, rng())
    ep = eps[0]
    assert ep.n == 8 and all(ep.c_prev in reply for _, reply in ep.rounds)
    short = ep.truncated(4)
    assert short.rounds == ep.rounds[:4] and short.query == envs.explore_observation(5, ep.c_prev)
    assert envs.score(ep, ep.c_prev) == {"repeated": True, "success": False, "retry_known_locked": True}
    other = ep.correct[0]
    assert envs.score(ep, other)["success"] and not envs.score(ep, None)["repeated"]
    cyc = envs.bait_episodes("doorexplore", "cycle", 3, 8, 8, 4, rng())[0]
    assert len(cyc.known_locked) == 3 and cyc.correct[0] not in cyc.known_locked
    assert cyc.c_prev == cyc.rounds[-1][1].split("open ")[-1].split(" door")[0]
    world = envs.bait_episodes("doorworld", "bait", 3, 8, 8, 4, rng())[0]
    assert world.meta["c_new"] != world.c_prev and f"The {world.meta['c_new']} door is open" in world.query
    assert [e.clip_phase for e in eps] == [0, 1, 2, 3, 0]


def test_policies_keep_the_right_rounds():
    assert envs.kept_rounds("long", 8, 2, 4) == 8
    assert envs.kept_rounds("window", 8, 2, 4) == 2 and envs.kept_rounds("window", 1, 2, 4) == 1
    assert envs.kept_rounds("last1", 8, 2, 4) == 1 and envs.kept_rounds("short", 8, 2, 4) == 0
    assert [envs.kept_rounds("clip", 8, 2, 4, p) for p in range(4)] == [0, 1, 2, 3]  # N mod W, by phase
    assert envs.kept_rounds("clip", 2, 2, 4, 0) == 2  # not cleared yet
    ep = envs.bait_episodes("doorexplore", "bait", 1, 8, 8, 4, rng())[0]
    msgs = envs.context(ep, "window", 2, 4)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[1]["content"] == ep.rounds[-2][0] and msgs[-1]["content"] == ep.query
    assert envs.context(ep, "short", 2, 4) == [{"role": "system", "content": ep.system},
                                              {"role": "user", "content": ep.query}]


def test_parse_action_strict_loose_and_none():
    assert envs.parse_action("Thought: x. Action: open blue door.") == ("blue", True)
    assert envs.parse_action("I think the red one, no, the green door") == ("green", False)
    assert envs.parse_action("Action: open purple door") == (None, False)
    assert envs.parse_action("") == (None, False)
    assert envs.reply_text(" Thought: a.\nUser: Round 9.", chat=False) == "Thought: a."


# ============================================================================= rendering


def check_spans(tok, r, msgs, chat=True):
    enc = tok(r.text, add_special_tokens=not chat)["input_ids"]
    assert r.ids == enc
    covered = []
    for t in r.turns:
        covered += list(range(*t.tokens))
        if t.role in ("user", "assistant"):
            content = tok.decode(r.ids[slice(*t.content)]).strip()
            assert content == msgs[t.index]["content"].strip() or content.endswith(msgs[t.index]["content"]), t
    assert covered == list(range(len(r.ids))), "turn spans must tile the tokens"
    assert r.segment[0] == "sink" and set(r.segment[1:]) <= set(SEGMENTS)


def test_chat_rendering_spans(tok):
    ep = envs.attention_transcript("doorexplore", 3, 2, rng())
    msgs = envs.messages(ep, teacher_forced=True)
    r = render(tok, msgs, chat=True)
    assert r.text == tok.apply_chat_template(msgs, tokenize=False)
    check_spans(tok, r, msgs)
    assert len(r.previous_replies) == 3 and r.teacher_forced
    # content tokens equal the content tokenized alone: rows and columns are index-aligned
    for t in r.assistant_turns:
        assert r.ids[slice(*t.content)] == tok.encode(msgs[t.index]["content"], add_special_tokens=False)
    # the header belongs to the turn it opens
    resp = r.response
    assert tok.decode(r.ids[resp.tokens[0] : resp.content[0]]) == "<|im_start|>assistant\n"
    assert {r.segment[i] for i in range(*resp.tokens)} == {"self"}
    assert {r.segment[i] for i in range(*r.previous_replies[0].tokens)} == {"prev_assistant"}
    assert r.segment[1] == "system" and "user" in r.segment


def test_generation_prompt_rendering_matches_the_template(tok):
    ep = envs.bait_episodes("doorexplore", "bait", 1, 2, 8, 4, rng())[0]
    msgs = envs.messages(ep)
    r = render(tok, msgs, chat=True, generation_prompt=True)
    assert r.text == tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert not r.teacher_forced and r.turns[-1].role == "generation" and r.segment[-1] == "self"
    assert len(r.previous_replies) == 2


def test_plain_text_rendering_spans(tok):
    ep = envs.attention_transcript("doorworld", 2, 0, rng())
    msgs = envs.messages(ep, teacher_forced=True)
    r = render(tok, msgs, chat=False)
    assert r.text.startswith(ep.system + "\n\nUser: Round 1.") and "\nAssistant: Thought:" in r.text
    check_spans(tok, r, msgs, chat=False)
    g = render(tok, envs.messages(ep), chat=False, generation_prompt=True)
    assert g.text.endswith("\nAssistant:") and g.segment[-1] == "self"


def test_template_without_system_role_puts_instructions_in_the_first_user_turn(tok):
    t = copy.deepcopy(tok)
    t.chat_template = (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "<|im_start|>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>model\n{% endif %}"
    )
    ep = envs.attention_transcript("doorexplore", 2, 1, rng())
    msgs = envs.messages(ep, teacher_forced=True)
    r = render(t, msgs, chat=True)
    system, user = r.turns[0], r.turns[1]
    assert system.role == "system" and user.role == "user" and user.index == 1
    assert t.decode(r.ids[slice(*system.content)]).strip() == ep.system
    assert t.decode(r.ids[slice(*user.content)]).strip() == msgs[1]["content"]
    assert r.segment[system.tokens[1] - 1] == "system" and r.segment[user.tokens[0]] == "user"
    assert len(r.previous_replies) == 2


# ============================================================================= diagonal score


def test_diag_mass_by_hand():
    b = np.arange(12, dtype=float).reshape(3, 4)  # n=3 rows, m=4 columns, K=3
    assert S.diag_mass(b, 0, 0) == pytest.approx((0 + 5 + 10) / 3)
    assert S.diag_mass(b, 1, 0) == pytest.approx((1 + 6 + 11) / 3)
    assert S.diag_mass(b, 0, 1) == pytest.approx(((0 + 1) + (4 + 5 + 6) + (9 + 10 + 11)) / 3)  # in-range only
    assert S.diag_mass(b.T, 1, 0) == pytest.approx((4 + 9 + 0) / 3 - 0)  # row 2 has no column 3 of 3
    uniform = np.full((20, 25), 1 / 25)
    assert S.diag_ratio(uniform, 0, 0) == pytest.approx(1.0)
    stacked = np.stack([b, 2 * b])
    assert S.diag_mass(stacked, 0, 0).tolist() == pytest.approx([5.0, 10.0])


def test_null_detects_a_diagonal_and_not_structureless_blocks():
    g = rng(1)
    diag = [0.5 * np.eye(25, 30) + 0.5 * g.dirichlet(np.ones(30), size=25) for _ in range(4)]
    t = S.null_test(diag, 0, 0, 200, g)
    assert t.z > 10 and t.ratio > 5
    shifted = S.null_test(diag, 1, 0, 200, g)
    assert shifted.z < 3, f"the +1 offset of a 0-diagonal is not aligned: z={shifted.z:.1f}"
    zs = S.null_calibration(100, 25, 25, 200, g)
    assert (np.abs(zs) <= 3).sum() >= 95, zs
    zs_c = S.null_calibration(50, 25, 25, 200, g, mode="circular")
    assert (np.abs(zs_c) <= 3).sum() >= 45
    assert S.null_test([np.full((25, 25), 0.04)], 0, 0, 200, g).z == 0.0  # constant block: z = 0, not inf


def test_null_test_handles_leading_unit_dims():
    g = rng(2)
    blocks = [np.stack([np.eye(10, 12), g.dirichlet(np.ones(12), size=10)]) for _ in range(3)]  # 2 units
    t = S.null_test(blocks, 0, 0, 100, g)
    assert t.z.shape == (2,) and t.z[0] > 10 and abs(t.z[1]) < 4


def test_paired_bootstrap_and_spearman():
    a = np.array([1] * 30 + [0] * 10)
    b = np.array([0] * 35 + [1] * 5)
    d, lo, hi = S.paired_bootstrap(a, b, 2000, rng())
    assert d == pytest.approx(0.625) and lo < d < hi and lo > 0.3
    assert S.paired_bootstrap(a, b, 2000, rng()) == (d, lo, hi)
    assert np.isnan(S.spearman([1, 2, 3], [1, 1, 1])[0])
    assert S.spearman([1, 2, 3, 4], [1, 3, 2, 5])[0] == pytest.approx(0.8)


# ============================================================================= the hooked reduction


def test_measure_reduces_patterns_exactly(tiny_model, tok):
    import torch

    from interp import run_with_cache
    from interp.sites import Site

    eps = [envs.attention_transcript("doorexplore", n, n, rng(n)) for n in (1, 2, 3)]
    rs = [render(tok, envs.messages(ep, teacher_forced=True), chat=True) for ep in eps]
    preps = [prepare(r) for r in rs]
    m = measure(tiny_model, preps, batch_size=2, keep_rows=[1])
    L, H = tiny_model.info.n_layers, tiny_model.info.n_heads
    assert m.shares.shape == (3, L, len(SHARE_COLUMNS)) and m.row_sum_err < 1e-4 and m.share_sum_err < 1e-4
    # the same numbers from a plain cached pass of transcript 1 alone
    ids = torch.tensor([preps[1].ids])
    _, cache = run_with_cache(tiny_model, ids, torch.ones_like(ids), [Site("attn_pattern", 1)])
    full = cache[Site("attn_pattern", 1)][0]  # (head, q, k)
    rows, cols = preps[1].rows, preps[1].targets[0]
    assert np.allclose(m.blocks[1][0][1], full[:, rows][:, :, cols].numpy(), atol=1e-5)
    assert m.rows[1].shape == (L, H, len(rows), len(preps[1].ids))
    part = m.shares[:, :, : len(SEGMENTS)].sum(-1)
    assert np.allclose(part, 1, atol=1e-4)
    # hooks are gone afterwards: a plain forward still runs to the logits
    assert tiny_model.forward(ids).shape[-1] == tiny_model.info.d_vocab


def test_key_fractions_count_visible_keys():
    onehot = np.zeros((10, len(SHARE_COLUMNS)), np.float32)
    onehot[0, -1] = 1  # sink
    onehot[1:4, 0] = 1  # system
    onehot[4:10, 3] = 1  # self
    rows = np.array([8, 9])
    kf = key_fractions(onehot, rows, [None, 3])
    assert kf[0, 0] == pytest.approx(np.mean([3 / 8, 3 / 9])) and kf[0, 3] == pytest.approx(np.mean([5 / 8, 6 / 9]))
    assert kf[1, 0] == 0 and kf[1, 3] == pytest.approx(1.0)  # a window of 3 sees only the reply


# ============================================================================= behaviour and CPL


def fake_rows():
    rows = []
    for e in range(20):
        for policy, rep in (("long", e < 16), ("window", e < 2), ("short", e < 6)):
            rows.append({"episode_id": f"e{e}", "env": "doorexplore", "kind": "bait", "policy": policy, "N": 8,
                         "kept_rounds": 0, "context_tokens": 100 if policy == "short" else 500, "repeated": rep,
                         "success": not rep, "retry_known_locked": rep, "unparsed": False, "format_ok": True})
        rows.append({"episode_id": f"e{e}", "env": "doorexplore", "kind": "bait", "policy": "long", "N": 2,
                     "kept_rounds": 2, "context_tokens": 200, "repeated": e < 4, "success": e >= 4,
                     "retry_known_locked": e < 4, "unparsed": False, "format_ok": True})
    return pd.DataFrame(rows)


def test_behaviour_summary_and_headline():
    rows = fake_rows()
    summary = behavior.summarize(rows, 1000, rng())
    top = summary[summary.N == 8].set_index("policy")
    assert list(top.index) == ["long", "window", "short"]
    assert top.loc["long", "repeat_rate"] == 0.8 and top.loc["window", "repeat_rate"] == 0.1
    assert top.loc["window", "diff"] == pytest.approx(0.7) and top.loc["window", "ci_low"] > 0.4
    m = behavior.headline(summary, rows)
    assert m["repeat_rate_long"] == 0.8 and m["repeat_rate_short"] == 0.3
    assert m["repeat_rate_long_by_n"] == {"2": 0.2, "8": 0.8} and m["repeat_rate_long_n_rho"] > 0
    assert m["mean_context_tokens_short"] == 100 and m["repeat_diff_long_window_ci_low"] > 0.4


def test_cpl_pairs_prefer_the_short_reply_under_the_long_prompt():
    ep = envs.bait_episodes("doorexplore", "bait", 1, 4, 8, 4, rng())[0]
    tpl = envs.TEMPLATES["doorexplore"][ep.template]
    y_long, y_short = tpl.format(c=ep.c_prev), tpl.format(c=ep.correct[0])
    long_msgs = envs.context(ep, "long", 2, 4)
    out = cpl.pairs([ep], {ep.id: "L"}, {ep.id: "S"}, {ep.id: long_msgs}, {"L": y_long, "S": y_short}, "differs")
    assert len(out) == 1 and out[0]["prompt"] == envs.messages(ep)
    assert out[0]["chosen"] == [{"role": "assistant", "content": y_short}] and out[0]["action_rejected"] == ep.c_prev
    same = cpl.pairs([ep], {ep.id: "L"}, {ep.id: "S"}, {ep.id: long_msgs}, {"L": y_long, "S": y_long}, "differs")
    assert same == []
    assert not cpl.keep_pair(y_long, tpl.format(c=ep.c_prev) + " ", ep, "differs")
    assert cpl.keep_pair("blah", "bleh", ep, "differs") and not cpl.keep_pair("blah", "bleh", ep, "short_correct")
    assert list(cpl.table(out).columns)[:4] == ["state_id", "env", "kind", "N"]


# ============================================================================= shared-prefix decoding


def test_prefix_plan_attaches_prompts_to_roots():
    from interp_probes.conversational_inertia.decode import lcp, plan

    long = list(range(100))
    roots, jobs = plan([long[:40], long, long[:20] + [7] * 30, [5] * 10, long[:5] + [9] * 40], min_frac=0.25)
    assert lcp(long, long[:40]) == 40 and lcp([1, 2], [3]) == 0
    assert roots == [tuple(long), tuple(long[:5] + [9] * 40), tuple([5] * 10)]  # 5 of 45 shared: a root
    by_prompt = {j.prompt: j for j in jobs}
    assert by_prompt[tuple(long[:40])].shared == 39  # its own last token is decoded as the suffix
    assert by_prompt[tuple(long[:20] + [7] * 30)].shared == 20 and by_prompt[tuple(long)].shared == 99
    assert by_prompt[tuple([5] * 10)].root == 2 and by_prompt[tuple([5] * 10)].shared == 9


def test_shared_prefix_decoding_equals_plain_greedy(tiny_model, tok):
    from interp.generate import greedy
    from interp_probes.conversational_inertia.decode import shared_prefix_greedy

    eps = envs.bait_episodes("doorexplore", "bait", 2, 4, 8, 4, rng())
    reqs = [behavior.request(tiny_model, e if n == 4 else e.truncated(n), p, 2, 4)
            for e in eps for n, p in ((1, "long"), (4, "long"), (4, "window"), (4, "short"))]
    stops = behavior.stop_ids(tiny_model)
    shared = shared_prefix_greedy(tiny_model, [r.ids for r in reqs], 12, stops, batch_size=3, root_batch=2)
    plain = greedy(tiny_model, [r.text for r in reqs], 12, stop_ids=stops, templated=True, batch_size=8)
    assert [shared[tuple(r.ids)] for r in reqs] == plain


# ============================================================================= probe stages


def test_diagonal_scores_find_the_aligned_heads_and_not_the_controls():
    from interp_probes.conversational_inertia.probe import diagonal_scores, head_counts, head_table

    cfg = build_config(ConversationalInertiaConfig, {"size": "micro", "n_perm": 100})
    g = rng(3)
    L, H = 2, 3

    def block(aligned: bool):
        b = g.dirichlet(np.ones(22), size=(L, H, 20))  # [L, H, n, m]
        if aligned:  # head (1, 2) attends i -> i, head (0, 0) attends i -> i + 1
            b[1, 2] = 0.3 * b[1, 2] + 0.7 * np.eye(20, 22)
            b[0, 0] = 0.3 * b[0, 0] + 0.7 * np.eye(20, 22, k=1)
        return [b]

    eps = [envs.attention_transcript("doorexplore", 4, 0, g) for _ in range(4)]
    eps += [envs.attention_transcript("doorexplore", 4, 0, g, control="x {c}") for _ in range(2)]
    blocks = [block(True) for _ in range(4)] + [block(False) for _ in range(2)]
    scores = diagonal_scores(blocks, eps, cfg, g)
    t, m = scores["tensors"], scores["metrics"]
    assert t["z"].shape == (L, H, 2, 2) and t["z_headavg"].shape == (L, 2, 2) and t["z_control"].shape == (L, H, 2, 2)
    assert t["z"][1, 2, 0, 0] > 10 and t["z"][0, 0, 1, 0] > 10 and abs(t["z"][0, 1, 0, 0]) < 4
    assert m["max_diag_z"] > 10 and m["max_diag_z_control"] < 4.5 and m["diag_n_blocks"] == 4
    heads = head_table(scores, cfg, n_heads=H, n_kv_heads=1)
    flagged = heads[heads.is_inertia_head]
    assert set(zip(flagged.layer, flagged["head"])) == {(1, 2), (0, 0)}
    assert heads.set_index(["layer", "head"]).loc[(0, 0), "best_delta"] == 1
    assert head_counts(heads, 4.0)["n_inertia_heads"] == 2


def test_share_trends_read_the_table():
    from interp_probes.conversational_inertia.probe import share_trends

    rows = []
    for n in (1, 2, 4, 8):
        for k in range(3):
            for seg, share, frac in (("prev_assistant", 0.1 * n ** 0.5, 0.05 * n), ("system", 0.4 / n, 0.5 / n),
                                     ("user", 0.3, 0.3), ("recent_assistant", 0.1, 0.1), ("self", 0.2, 0.1)):
                rows.append({"transcript_id": f"t{n}{k}", "kind": "normal", "N": n, "layer": 0, "segment": seg,
                             "share": share + 0.001 * k, "key_frac": frac})
    m = share_trends(pd.DataFrame(rows))
    assert m["prev_assistant_share_rho"] > 0.9 and m["system_share_rho"] < -0.9
    assert m["prev_assistant_enrichment_rho"] < 0 and m["prev_assistant_enrichment_last"] < 1
    assert m["share_by_n"]["user"]["8"] == pytest.approx(0.301)


def test_transcripts_and_behaviour_plan(tiny_model):
    from interp_probes.conversational_inertia.probe import attention_transcripts, behaviour_plan, viewer_transcripts

    cfg = build_config(ConversationalInertiaConfig, {"rounds_grid": [1, 2, 4], "n_transcripts_per_n": 4,
                                                     "n_control_transcripts": 4, "n_bait_episodes": 4,
                                                     "bait_rounds_grid": [1, 4], "n_control_episodes": 2,
                                                     "n_doorworld_episodes": 2, "n_cpl_states": 6})
    eps = attention_transcripts(cfg, rng(), tiny_model.tokenizer)
    normal = [e for e in eps if e.kind == "normal"]
    control = [e for e in eps if e.kind == "control"]
    assert [e.n for e in normal] == [1] * 4 + [2] * 4 + [4] * 4 and {e.env for e in normal} == set(envs.ENVS)
    assert len(control) == 4 and all(e.n >= 2 for e in control) and {e.env for e in control} == set(envs.ENVS)
    views = viewer_transcripts(eps, 4)
    assert [eps[i].n for i in views] == [2, 2, 2, 2]
    plan = behaviour_plan(tiny_model, cfg, rng())
    scored = plan["scored"]
    count = Counter((r.episode.kind, r.episode.env, r.n, r.policy) for r in scored)
    assert count[("bait", "doorexplore", 1, "long")] == 4 and ("bait", "doorexplore", 1, "window") not in count
    assert all(count[("bait", "doorexplore", 4, p)] == 4 for p in envs.POLICIES)
    assert count[("cycle", "doorexplore", 4, "window")] == 2 and count[("bait", "doorworld", 4, "short")] == 2
    clip = [r for r in scored if r.policy == "clip"]
    assert sorted(r.kept for r in clip) == [0, 1, 2, 3]
    assert len(plan["cpl_states"]) == 6
    for ep in plan["cpl_states"]:  # the prompt of a pair is the Long context of its state
        assert plan["cpl_messages"][ep.id] == envs.messages(ep)
    texts = {r.text for r in scored}
    reused = sum(plan["cpl_long"][ep.id] in texts for ep in plan["cpl_states"])
    assert reused == 6, "every CPL state's Long prompt is one of the behaviour prompts (decoded once)"
