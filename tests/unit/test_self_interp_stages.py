"""self_interp stages on synthetic data and the tiny random model: template, injection, prefix cache,
adapters, training (LM frozen), retrieval, recall and the bias share."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from interp import Site, weights_digest
from interp.errors import ConfigError
from interp_probes.self_interp import SelfInterpConfig, sweep_layers
from interp_probes.self_interp.adapters import Adapter, n_params
from interp_probes.self_interp.evaluate import (
    Retriever,
    bias_share,
    hits_from_ranks,
    logit_lens_ranks,
    normalise,
    paired_gain,
    recall_rows,
    topk_hits,
)
from interp_probes.self_interp.inject import PrefixCache, build_template, generate, label_loss, make_batch
from interp_probes.self_interp.topics import Topic, builtin_topics, split_topics
from interp_probes.self_interp.train import (
    Pairs,
    effective_warmup,
    identity_sweep,
    param_groups,
    schedule,
    train_adapter,
)

# -- config and topics ------------------------------------------------------------------------


def test_config_validates_before_loading():
    from interp.config import build_config

    with pytest.raises(ConfigError, match="variants"):
        build_config(SelfInterpConfig, {"variants": ["nope"]})
    with pytest.raises(ConfigError, match="sae_labels_file"):
        build_config(SelfInterpConfig, {"sae_branch": "labels"})
    cfg = build_config(SelfInterpConfig, {})
    assert cfg.resolved_layer(30) == 24 and not cfg.sae_on
    assert sweep_layers(cfg.layer_sweep, 30) == [12, 18, 24, 27]
    with pytest.raises(ConfigError, match="layer"):
        build_config(SelfInterpConfig, {"layer": 40}).validate_for_model(30)
    with pytest.raises(ConfigError, match="layer_sweep"):
        build_config(SelfInterpConfig, {"layer_sweep": [12, 31]}).validate_for_model(30)


def test_builtin_split_is_stratified_and_capped():
    topics = builtin_topics()
    assert len(topics) == 500 and len({t.topic.lower() for t in topics}) == 500
    assert len({t.category for t in topics}) == 25
    names = [n for t in topics for n in {normalise(x) for x in (t.topic, *t.aliases)}]
    assert len(names) == len(set(names)), "a name or alias normalises to another topic's"
    cfg = SelfInterpConfig()
    kept, split = split_topics(topics, cfg.heldout_frac, cfg.topic_cap)
    assert len(kept) == 400 and split.count("heldout") == 100  # the spec's core: 100 held out of 400
    for cat in {t.category for t in kept}:
        rows = [s for t, s in zip(kept, split) if t.category == cat]
        assert len(rows) == 16 and rows.count("heldout") == 4
    assert split_topics(topics, cfg.heldout_frac, cfg.topic_cap)[0] == kept  # deterministic


# -- adapters ------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["identity", "scale_only", "bias_only", "scalar_affine", "low_rank",
                                     "low_rank_only", "full_rank"])
def test_adapter_parameter_counts_match_the_table(variant):
    ad = Adapter(variant, 576, 3.0, rank=8, generator=torch.Generator().manual_seed(0))
    assert ad.n_trainable() == n_params(variant, 576, 8)
    assert n_params("scalar_affine", 576) == 577 and n_params("low_rank", 576, 8) == 9793
    assert n_params("full_rank", 576) == 332_352
    v = torch.randn(4, 576)
    out = ad(v)
    assert out.shape == (4, 576) and out.dtype == torch.float32
    if variant in ("identity", "scale_only", "scalar_affine", "bias_only"):
        assert torch.allclose(out.norm(dim=-1), torch.full((4,), 3.0), atol=1e-4)  # s * v_hat at init (b = 0)
    if variant == "full_rank":  # Xavier-normal A times s: |A v_hat| ~ s, in a random direction
        assert torch.allclose(out.norm(dim=-1), torch.full((4,), 3.0), rtol=0.15)
        assert (torch.nn.functional.cosine_similarity(out, v, dim=-1).abs() < 0.2).all()
    back = Adapter.from_tensors({k: t.numpy() for k, t in ad.tensors().items()}, ad.metadata())
    assert torch.allclose(back(v), out)


def test_schedule_warms_up_then_decays():
    lrs = [schedule(k, 20, 5) for k in range(20)]
    assert lrs[0] == pytest.approx(1e-6) and lrs[4] == pytest.approx(0.8) and lrs[5] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[5:], lrs[6:])) and lrs[-1] < 0.05
    assert effective_warmup(10, 34) == 10 and effective_warmup(10, 9) == 3


def _reference_lrs(base: float, total: int, warmup: int) -> list[float]:
    """The reference trainer's learning rate at each optimiser step (selfie-adapters training/trainer.py:
    CosineAnnealingLR(T_max=total - warmup) built first, then LinearLR(1e-6 -> 1, warmup) wrapping it;
    the warmup scheduler steps while global_step < warmup, the cosine one after)."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=base)
    main = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=0)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1e-6, end_factor=1.0, total_iters=warmup) \
        if warmup > 0 else None
    out = []
    for step in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        (warm if warm is not None and step < warmup else main).step()
    return out


@pytest.mark.parametrize("seed", range(6))
def test_schedule_matches_the_reference_schedulers(seed):
    rng = np.random.default_rng(seed)
    total = int(rng.integers(12, 200))
    warmup = int(rng.integers(0, total - 1)) if seed else 10
    base = float(rng.uniform(1e-3, 1e-1))
    ref = _reference_lrs(base, total, warmup)
    ours = [base * schedule(k, total, effective_warmup(warmup, total)) for k in range(total)]
    assert np.allclose(ours, ref, rtol=1e-6, atol=1e-12), (total, warmup, np.abs(np.subtract(ours, ref)).max())


def _reference_init(variant: str, d: int, init_scale: float, rank: int, factor: float, seed: int) -> dict:
    """selfie-adapters `projection.py` initialize_weights, drawn from one seeded generator in its order."""
    g = torch.Generator().manual_seed(seed)
    if variant == "full_rank":
        std = init_scale * (2.0 / (d + d)) ** 0.5
        return {"A": torch.zeros(d, d).normal_(0, std, generator=g)}
    std = init_scale * factor / (rank ** 0.5)
    return {"U": torch.zeros(d, rank).normal_(0, std, generator=g),
            "V": torch.zeros(d, rank).normal_(0, std, generator=g)}


def _reference_forward(variant: str, p: dict, v: torch.Tensor) -> torch.Tensor:
    v = v / (torch.norm(v, p=2, dim=-1, keepdim=True) + 1e-8)
    if variant == "full_rank":
        return torch.matmul(v, p["A"].T) + p["bias"]
    low = torch.matmul(torch.matmul(v, p["U"]), p["V"].T)
    return (torch.exp(p["log_scale"]) * v if variant == "low_rank" else 0) + low + p["bias"]


@pytest.mark.parametrize("variant", ["low_rank", "low_rank_only", "full_rank"])
def test_init_and_forward_match_the_reference(variant):
    d, r, s0 = 96, 8, 7.5
    ad = Adapter(variant, d, s0, rank=r, lr_init=0.01, generator=torch.Generator().manual_seed(3))
    ref = _reference_init(variant, d, s0, r, 0.01, 3)
    for name, t in ref.items():
        assert torch.equal(getattr(ad, name).detach(), t), name
    std = ref["A"].std() if variant == "full_rank" else ref["U"].std()
    want = s0 * (1 / d) ** 0.5 if variant == "full_rank" else s0 * 0.01 / r ** 0.5
    assert float(std) == pytest.approx(want, rel=0.1)
    with torch.no_grad():  # random trained-looking parameters, then the same forward
        for p in ad.parameters():
            p.copy_(torch.randn_like(p))
    v = torch.randn(5, d) * 40
    params = {k: t.detach() for k, t in ad.state_dict().items()}
    assert torch.allclose(ad(v), _reference_forward(variant, params, v), atol=1e-5)


def test_weight_decay_spares_log_scale_as_the_reference():
    ad = Adapter("low_rank", 32, 2.0, rank=4, generator=torch.Generator().manual_seed(0))
    twin = copy.deepcopy(ad)
    ours = torch.optim.AdamW(param_groups(ad, 0.5), lr=0.1)
    named = dict(twin.named_parameters())  # the reference's grouping by name (trainer._setup_optimizer)
    ref = torch.optim.AdamW([{"params": [named["log_scale"]], "lr": 0.1, "weight_decay": 0.0},
                             {"params": [named["bias"]], "lr": 0.1, "weight_decay": 0.5},
                             {"params": [named["U"], named["V"]], "lr": 0.1, "weight_decay": 0.5}])
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        for a, b in zip(ad.parameters(), twin.parameters()):
            grad = torch.randn(a.shape, generator=g)
            a.grad, b.grad = grad.clone(), grad.clone()
        ad.log_scale.grad.zero_()
        twin.log_scale.grad.zero_()
        ours.step()
        ref.step()
    for (n, a), b in zip(ad.named_parameters(), twin.parameters()):
        assert torch.allclose(a, b, atol=1e-6), n
    assert float(ad.log_scale.detach()) == pytest.approx(math.log(2.0), abs=1e-7), "weight decay moved log_scale"


# -- template and injection (tiny model) -----------------------------------------------------------


def test_template_has_two_placeholders_and_separate_quotes(tiny_model):
    tmpl = build_template(tiny_model)
    ids = list(tmpl.ids)
    assert ids.count(tmpl.placeholder_id) == 2 and list(tmpl.positions) == [i for i, t in enumerate(ids)
                                                                           if t == tmpl.placeholder_id]
    assert tiny_model.tokenizer.decode([ids[-1]]).strip() == '"'
    assert tmpl.quote_id in tmpl.stop_ids and tmpl.eot_id in tmpl.stop_ids
    targets = tmpl.label_ids(tiny_model.tokenizer, "chess")
    assert targets[-2:] == [tmpl.quote_id, tmpl.eot_id]
    with pytest.raises(ConfigError, match="placeholder"):
        build_template(tiny_model, placeholder="two words")


def test_injection_replaces_only_the_placeholder_rows(tiny_model):
    from interp_probes.self_interp.inject import inject

    tmpl = build_template(tiny_model)
    ids = torch.tensor([tmpl.ids])
    soft = torch.randn(1, tiny_model.info.d_model)
    emb = inject(tiny_model, ids, soft, tmpl.positions)
    ref = tiny_model.hf.get_input_embeddings()(ids)
    changed = (emb != ref).any(-1)[0].nonzero().flatten().tolist()
    assert changed == list(tmpl.positions)
    assert torch.allclose(emb[0, tmpl.positions[0]], soft[0])


def test_prefix_cache_loss_matches_uncached(tiny_model):
    tmpl = build_template(tiny_model)
    tok = tiny_model.tokenizer
    batch = make_batch(tmpl, [tmpl.label_ids(tok, w) for w in ("chess", "the United States", "dog")], "cpu")
    soft = torch.randn(3, tiny_model.info.d_model) * 2
    pc = PrefixCache(tiny_model, tmpl)
    cached = label_loss(tiny_model, tmpl, batch, soft, pc)
    plain = label_loss(tiny_model, tmpl, batch, soft, None)
    assert abs(float(cached - plain)) <= 1e-4, f"cached {float(cached):.6f} vs uncached {float(plain):.6f}"
    # the stored prefix is not consumed by use
    again = label_loss(tiny_model, tmpl, batch, soft, pc)
    assert float(again) == pytest.approx(float(cached), abs=1e-6)


def test_loss_is_clamped_and_averaged_per_sequence(tiny_model):
    tmpl = build_template(tiny_model)
    tok = tiny_model.tokenizer
    batch = make_batch(tmpl, [tmpl.label_ids(tok, "a"), tmpl.label_ids(tok, "a much longer label here")], "cpu")
    soft = torch.randn(2, tiny_model.info.d_model) * 1e4  # huge: drives losses up
    per = label_loss(tiny_model, tmpl, batch, soft, None, clamp=0.5, per_sequence=True)
    assert per.shape == (2,) and (per <= 0.5 + 1e-6).all()
    assert float(label_loss(tiny_model, tmpl, batch, soft, None, clamp=0.5)) == pytest.approx(float(per.mean()))


def test_generation_is_greedy_deterministic_and_cache_invariant(tiny_model):
    tmpl = build_template(tiny_model)
    soft = torch.randn(3, tiny_model.info.d_model)
    pc = PrefixCache(tiny_model, tmpl)
    a = generate(tiny_model, tmpl, soft, 5, pc=pc)
    b = generate(tiny_model, tmpl, soft, 5, pc=None)
    assert a == b and len(a) == 3 and all('"' not in s for s in a)


def test_training_moves_only_the_adapter_and_lowers_the_loss(tiny_model):
    tmpl = build_template(tiny_model)
    tok = tiny_model.tokenizer
    g = torch.Generator().manual_seed(0)
    words = ["chess", "dog", "piano", "rain"] * 4
    vecs = torch.randn(4, tiny_model.info.d_model, generator=g).repeat(4, 1)
    pairs = Pairs(vecs, [tmpl.label_ids(tok, w) for w in words])
    digest = weights_digest(tiny_model)
    ad = Adapter("scalar_affine", tiny_model.info.d_model, 1.0)
    pc = PrefixCache(tiny_model, tmpl)
    with torch.no_grad():
        before = float(label_loss(tiny_model, tmpl, make_batch(tmpl, pairs.targets, "cpu"), ad(vecs), pc))
    s = SelfInterpConfig(lr=0.3, epochs=6, batch_size=8, warmup=1, eval_every=2)
    ad, rows = train_adapter(tiny_model, tmpl, ad, pairs, pairs.take(range(4)), s, g, pc)
    with torch.no_grad():
        after = float(label_loss(tiny_model, tmpl, make_batch(tmpl, pairs.targets, "cpu"), ad(vecs), pc))
    assert after < before - 0.01, f"loss {before:.3f} -> {after:.3f}"  # a random model moves little
    assert ad.scale != pytest.approx(1.0) and ad.bias_norm > 0
    assert weights_digest(tiny_model) == digest
    assert all(not p.requires_grad for p in tiny_model.hf.parameters())
    assert rows[0]["step"] == 0 and rows[-1]["step"] == 12
    losses = identity_sweep(tiny_model, tmpl, pairs.take(range(4)), [0.5, 2.0], 4, pc)
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)


# -- retrieval and recall --------------------------------------------------------------------------


TOPICS = [Topic("United States", "countries", ("USA", "America")), Topic("France", "countries"),
          Topic("dog", "animals", ("puppy",)), Topic("cat", "animals"), Topic("chess", "sports"),
          Topic("ice cream", "foods")]


def test_normalise_strips_articles_punctuation_and_plural():
    assert normalise("The Dogs!") == "dog"
    assert normalise("an Ice-Cream.") == "ice cream"
    assert normalise("chess") == "chess"  # "ss" is not a plural


@pytest.mark.parametrize("scorer", ["exact", "lexical", "embedding"])
def test_exact_matches_rank_first_under_every_scorer(scorer):
    r = Retriever(TOPICS, scorer)
    ranks, top5, hits = r.rank_of(["the USA", "Dogs", "Chess"], [0, 2, 4])
    assert ranks.tolist() == [1, 1, 1] and hits[1].all(), (scorer, ranks, top5)
    if scorer != "embedding":  # an empty label scores every topic alike: a miss, not torch's tie order
        ranks, _, hits = r.rank_of([""], [0])
        assert not hits[10].any() and ranks[0] == len(TOPICS)
    assert r.is_exact("the USA", 0) and not r.is_exact("USA", 1)


def test_lexical_and_embedding_rank_near_misses():
    lex = Retriever(TOPICS, "lexical")
    ranks, _, _ = lex.rank_of(["Français", "puppies and dogs"], [1, 2])
    assert ranks.tolist() == [1, 1]
    emb = Retriever(TOPICS, "embedding")
    ranks, _, _ = emb.rank_of(["a kitten", "a board game with kings and queens"], [3, 4])
    assert ranks.tolist() == [1, 1]
    ranks, _, _ = emb.rank_of([""], [0])
    assert 1 <= ranks[0] <= len(TOPICS)


@pytest.mark.parametrize("seed", range(4))
def test_recall_at_k_is_the_reference_topk(seed):
    """Hits against an independent copy of the reference's evaluate_labels on tie-heavy random scores."""
    g = torch.Generator().manual_seed(seed)
    n, n_topics = 300, int(torch.randint(20, 400, (1,), generator=g))
    sims = torch.randint(0, 6, (n, n_topics), generator=g).double()  # many ties
    gt = torch.randint(0, n_topics, (n,), generator=g)
    ranks, hits = topk_hits(sims.numpy(), gt.numpy())
    mask = torch.ones_like(sims, dtype=torch.bool)
    mask[torch.arange(n), gt] = False
    ref_ranks = ((sims > sims[torch.arange(n), gt][:, None]) & mask).sum(1) + 1
    assert np.array_equal(ranks, ref_ranks.numpy())
    for k in (1, 5, 10):
        ref_hit = (torch.topk(sims, k=k, dim=1).indices[:, :k] == gt[:, None]).any(1)
        assert np.array_equal(hits[k], ref_hit.numpy()), k
    assert (hits[10] != (ranks <= 10)).any(), "ties should make topk differ from rank <= k somewhere"


def test_paired_gain_interval():
    rng = np.random.default_rng(0)
    a = np.array([1, 0, 1, 1, 0, 1, 0, 1] * 10, dtype=bool)
    assert paired_gain(a, a, rng, 500) == (0.0, 0.0, 0.0)
    b = a.copy()
    b[:40] = False
    gain, lo, hi = paired_gain(a, b, rng, 1000)
    assert gain == pytest.approx(a.mean() - b.mean()) and 0 < lo <= gain <= hi
    noise = rng.random(80) < 0.3
    gain, lo, hi = paired_gain(noise, rng.permutation(noise), rng, 1000)
    assert lo <= 0 <= hi


def test_template_system_turn_follows_the_reference(tiny_model):
    none, default = build_template(tiny_model), build_template(tiny_model, system="default")
    assert none.system == "none" and "system" not in none.text and none.text.startswith("<|im_start|>user")
    assert "<|im_start|>system" in default.text and default.text.endswith(none.text[len("<|im_start|>"):])
    assert len(default.ids) > len(none.ids) and none.ids[-none.prefix_len:] == default.ids[-none.prefix_len:]


def test_recall_rows_and_bootstrap():
    rows = recall_rows(hits_from_ranks(np.array([1, 2, 11, 30])), 100, np.random.default_rng(0), 200)
    by_k = {r["k"]: r for r in rows}
    assert by_k[1]["recall"] == 0.25 and by_k[10]["recall"] == 0.5 and by_k[10]["chance"] == 0.1
    assert by_k[10]["ci_low"] <= 0.5 <= by_k[10]["ci_high"]


def test_logit_lens_guesses_are_distinct_topics_in_token_order():
    r = Retriever(TOPICS, "exact")
    ranks, first, guesses = logit_lens_ranks([["dog", "puppy", "cat"], ["zzz", "France"]], [3, 1], r, k=10)
    assert guesses[0][:2] == [2, 3] and ranks.tolist() == [2, 1] and first == ["dog", "zzz"]


def test_bias_share():
    assert bias_share(0.3, 0.1, 0.5) == pytest.approx(0.5)
    assert math.isnan(bias_share(0.3, 0.1, 0.11))


def test_prompt_vectors_read_resid_post_at_the_last_real_token(tiny_model):
    from interp import run_with_cache
    from interp.sites import Site
    from interp_probes.self_interp.vectors import prompt_vectors

    texts = ["Tell me about chess.", "Tell me about the United States of America."]
    fast = prompt_vectors(tiny_model, texts, [0], templated=False)[0]  # the HF path
    last = prompt_vectors(tiny_model, texts, [1], templated=False)[1]  # the hooked path (last layer)
    for j, t in enumerate(texts):
        enc = tiny_model.tokenize(t)
        _, cache = run_with_cache(tiny_model, enc["input_ids"], enc["attention_mask"],
                                  [Site("resid_post", 0), Site("resid_post", 1)])
        assert torch.allclose(fast[j], cache[Site("resid_post", 0)][0, -1], atol=1e-5)
        assert torch.allclose(last[j], cache[Site("resid_post", 1)][0, -1], atol=1e-5)


# -- SAE branch stages -------------------------------------------------------------------------------


def test_token_labels_need_a_dominant_token():
    from interp_probes.self_interp.sae_branch import token_labels

    tops = [[" the"] * 9 + [" a"], [" cat", " dog"] * 5, [], [" Paris"] * 8 + [" France"] * 2, [","] * 10,
            [" rare"] * 3]
    got = token_labels(tops)
    assert got == {0: ('the word "the"', 0.9), 3: ('the word "Paris"', 0.8)}  # " rare": too few positions


def test_sae_scores_and_scaling(tmp_path):
    from interp_probes.self_interp.sae_branch import best_hit_score, read_labels, scaled_soft

    hits = np.zeros((2, 3, 4), dtype=bool)
    hits[0, 1, :3] = True  # latent 0: best label hits 3 of 4
    hits[1, :, 0] = True  # latent 1: every label hits 1 of 4
    assert best_hit_score(hits) == pytest.approx((0.75 + 0.25) / 2)
    ad = Adapter("scalar_affine", 8, 2.0)
    with torch.no_grad():
        ad.bias.fill_(1.0)
    v = torch.randn(3, 8)
    soft = scaled_soft(ad, v, 3.0)
    assert torch.allclose((soft - 1.0).norm(dim=-1), torch.full((3,), 6.0), atol=1e-4)
    f = tmp_path / "labels.jsonl"
    f.write_text('{"latent": 5, "label": "dogs"}\n\n{"latent": 2, "label": ""}\n')
    assert read_labels(str(f)) == {5: "dogs"}
    with pytest.raises(ConfigError, match="sae_labels_file"):
        read_labels(str(tmp_path / "missing.jsonl"))


def test_sae_branch_windows_start_with_the_models_bos(tiny_model, tmp_path, monkeypatch):
    """The SAE branch cuts its corpus windows as the model reads a text: Gemma's <bos> first (skipped by the
    activation buffer), no BOS on SmolLM2; the cached SAE's data key tells the two apart."""
    import dataclasses
    from types import SimpleNamespace

    from interp_probes.self_interp.sae_branch import _sae_and_tops

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    cfg = SimpleNamespace(sae_tokens=1000, sae=SimpleNamespace(source="train", steps=5), seed=0, layer=1)
    site = Site("resid_post", 1)
    _, plain, _ = _sae_and_tops(tiny_model, site, cfg, None)
    bos = tiny_model.tokenizer.bos_token_id
    monkeypatch.setattr(tiny_model, "info", dataclasses.replace(tiny_model.info, bos_id=bos))
    _, with_bos, _ = _sae_and_tops(tiny_model, site, cfg, None)
    assert plain.shape == with_bos.shape == (15, 64)
    assert (with_bos[:, 0] == bos).all() and not (plain[:, 0] == bos).any()
    assert torch.equal(with_bos[0, 1:], plain[0, :-1])  # the same text, shifted by the BOS
    assert len(list((tmp_path / "saes").iterdir())) == 2  # two data keys: the no-BOS SAE is not reused
