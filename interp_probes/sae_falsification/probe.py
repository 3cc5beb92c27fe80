"""Falsifying SAE "reasoning" features (arXiv 2601.05679): when a feature fires more on reasoning text than on
other text, does it encode reasoning, or only surface cues that co-occur with it?

Method: ../shared/methods/sae_falsification.md. Stages: `sae_setup` (any SAELens SAE, or a toolkit-trained TopK
SAE; quality gates), `acts` (forwards stop at the SAE's hook; position 0 and pads never reach the SAE),
`detection` (contrastive statistics, filter, ranking, digit and marker oracles), `tokens` (T_f, concentration,
n-grams), `injection` (eight strategies, frequency-matched random-token control), `loop` (LLM-guided
counterexamples with validity checks and a template fallback), `steering`. The hook always comes from the SAE's
own config.
"""

from __future__ import annotations

import contextlib
import math
import random
import time

import numpy as np
import pandas as pd
import torch

from interp.context import RunContext
from interp.data import load_texts, token_windows
from interp.sae import roundtrip_check, save_sae

from . import SaeFalsificationConfig
from .acts import feature_max, scan_texts
from .checks import ALL_FLAGS, Context, words
from .corpora import NAMES, Sample, build_corpora, reasoning_problem, steering_problems
from .detection import detect, family_auc, oracle_auc
from .generator import make_generator
from .injection import REF_POOL, control_pool, draw_control, injection_jobs, match_ngram, score_rows, summarize_feature
from .loop import LoopFeature, run_loop
from .sae_setup import data_key, obtain_sae, pad_token_id, quality_gates, texts_sha
from .steering import steer
from .summary import features_frame, make_generator_name, summarize
from .tokens import analyse_tokens, ngram_frame, token_counts, top_contexts


def run(cfg: SaeFalsificationConfig, ctx: RunContext) -> None:
    model = ctx.model
    samples, general = make_corpora(cfg, model, ctx)  # offline data
    ctx.save_table("corpora", corpora_frame(samples, model))

    with timed(ctx, "sae"):  # 0. the SAE and its quality gates
        sae, site = sae_and_quality(cfg, ctx, model, samples, general)

    with timed(ctx, "detection"):  # 1-3. activations, detection, token analysis
        det_samples = [s for s in samples if s.split == "detection"]
        scan = scan_texts(model, sae, site, model.tokenize([s.text for s in det_samples], padding_side="right",
                                                           max_length=cfg.seq_len), cfg.batch_size, ctx.tqdm)
        labels = np.array([s.label == "reasoning" for s in det_samples], dtype=int)
        maxes = scan.sample_max.cpu().numpy()
        ctx.check_finite("per-sample SAE maxima", maxes)
        ctx.save_tensors("sample_max", {"reasoning": torch.from_numpy(maxes[labels == 1]).half(),
                                        "nonreasoning": torch.from_numpy(maxes[labels == 0]).half()},
                         metadata={"hook": site.tl_name, "d_sae": str(sae.cfg.d_sae)})
        det = detect(maxes[labels == 1], maxes[labels == 0], cfg.min_auc, cfg.max_p_bonf, cfg.min_d, cfg.ranking)
        candidates, unfiltered = pick_candidates(det, cfg.top_k_features)
        ids, valid = scan.ids.cpu().numpy(), scan.valid.cpu().numpy()
        tokens, tok_frame = analyse_tokens(scan.codes, ids, valid, candidates, model.info.d_vocab, cfg.n_top_tokens,
                                           cfg.min_token_count)
        decode = decoder(model)
        tok_frame["token_str"] = [decode(t) for t in tok_frame.token_id]

        ctx.save_table("token_analysis", tok_frame)
        ctx.save_table("ngrams", ngram_frame(tokens, decode))
        ctx.save_table("top_contexts", top_contexts(scan.codes, maxes, ids, valid, labels, candidates,
                                                    cfg.n_top_contexts, decode, [s_id(s) for s in det_samples]))
        ctx.save_table("family_acts", family_frame(maxes, det_samples, candidates))
        families = [s.family for s in det_samples]
        det["auc_arith_vs_narrative"] = np.nan
        for f in candidates:  # the confound check: within arithmetic vs narrative text only
            det.loc[f, "auc_arith_vs_narrative"] = family_auc(maxes[:, f], families)
        ctx.save_table("detection", det.drop(columns=["rank_all"]))
        oracles = {"digit_oracle_auc": oracle_auc(labels, [s.has_digit for s in det_samples]),
                   "marker_oracle_auc": oracle_auc(labels, [s.has_marker for s in det_samples])}

    analysed = candidates[: cfg.n_injection_features]
    with timed(ctx, "injection"):  # 4-5. injection and the frequency-matched control
        inj, ctrl, per_feature, violations = injection_study(cfg, ctx, model, sae, site, samples, scan, labels, det,
                                                             tokens, candidates, analysed)
    ctx.save_table("injection", inj)
    ctx.save_table("control_tokens", ctrl)

    with timed(ctx, "loop"):  # 6. counterexamples for the context-dependent features
        loop_feats, loop = counterexamples(cfg, ctx, model, sae, site, samples, det_samples, maxes, labels, scan,
                                           tokens, per_feature, analysed, det)
    ctx.save_table("candidates", loop.candidates if len(loop.candidates) else empty_candidates())
    ctx.save_table("hypotheses", loop.hypotheses)

    with timed(ctx, "steering"):  # 7. steering mini-study
        steer_feats = list(det.set_index("feature").loc[candidates].sort_values("d", ascending=False, kind="stable")
                           .index[: cfg.steer_features]) if candidates else []
        f_max = {int(f): float(maxes[:, f].max()) for f in steer_feats}
        problems = steering_problems(cfg.seed, cfg.n_steer_problems, {s.text for s in samples})
        steering, steer_checks = steer(model, sae, site, problems, [int(f) for f in steer_feats], f_max,
                                       cfg.steer_gammas, cfg.steer_max_new_tokens, batch_size=cfg.batch_size)
    ctx.save_table("steering", steering)
    ctx.save_table("steering_checks", steer_checks)

    features = features_frame(det, candidates, tokens, per_feature, loop_feats, analysed, cfg)
    ctx.save_table("features", features)
    ctx.log_metrics(**summarize(cfg, det, candidates, unfiltered, features, loop, oracles, violations, site, sae,
                                steering, steer_checks, make_generator_name(cfg)))


# ============================================================================= data


def make_corpora(cfg: SaeFalsificationConfig, model, ctx: RunContext) -> tuple[list[Sample], list[str]]:
    """The samples of every split, and the general-corpus texts left for the SAE training mix."""
    texts = load_texts(cfg.corpus, seed=cfg.seed)
    for_non = [t for i, t in enumerate(texts) if i % 10 == 9]  # paragraphs of the non-reasoning corpus
    general = [t for i, t in enumerate(texts) if i % 10 != 9]  # the rest: SAE training and quality mix
    per_seq = 0.8 * (cfg.seq_len - 1)
    n_train = math.ceil(0.3 * cfg.sae.train_tokens / per_seq / 2) if cfg.sae.source == "train" else 0
    n_quality = math.ceil(0.3 * cfg.quality_tokens / per_seq / 2) + 1
    counts = {"detection": (cfg.n_reasoning, cfg.n_nonreasoning), "injection": (0, cfg.n_injection_texts),
              "quality": (n_quality, n_quality), "sae_train": (n_train, n_train)}
    samples = build_corpora(cfg.seed, counts, for_non)
    if cfg.reasoning_source == "model":
        model_traces(model, [s for s in samples if s.label == "reasoning"], cfg)
    return samples, general


def model_traces(model, samples: list[Sample], cfg: SaeFalsificationConfig) -> None:
    """reasoning_source=model: replace each trace by the problem plus the model's own step-by-step solution."""
    from interp.generate import greedy

    chat = model.info.chat
    probs = [reasoning_problem(s) for s in samples]
    prompts = [model.chat_text(f"Solve step by step: {p}", system="") if chat else f"{p} Let us solve it step by step."
               for p in probs]
    outs = greedy(model, prompts, cfg.seq_len, templated=chat, batch_size=cfg.batch_size)
    for s, p, ids in zip(samples, probs, outs):
        s.text = f"{p} {model.tokenizer.decode(ids, skip_special_tokens=True).strip()}"
        s.meta["source"] = "model"


def s_id(s: Sample) -> str:
    return f"{s.split}:{s.label}:{s.meta.get('i', 0)}"


def corpora_frame(samples: list[Sample], model) -> pd.DataFrame:
    counters: dict[tuple, int] = {}
    rows = []
    lens = [len(x) for x in model.tokenizer([s.text for s in samples], add_special_tokens=True)["input_ids"]]
    for s, n in zip(samples, lens):
        key = (s.split, s.label)
        s.meta["i"] = counters.get(key, 0)
        counters[key] = s.meta["i"] + 1
        rows.append({"sample_id": s_id(s), "split": s.split, "label": s.label, "family": s.family, "text": s.text,
                     "n_tokens": n, "has_digit": s.has_digit, "has_marker": s.has_marker, "answer": s.answer})
    return pd.DataFrame(rows)


def encode_ids(model, texts: list[str], max_len: int) -> list[list[int]]:
    """Token ids with the tokenizer's BOS rule, truncated to `max_len` (no padding)."""
    return [list(x) for x in model.tokenizer(texts, add_special_tokens=True, truncation=True,
                                             max_length=max_len)["input_ids"]]


def decoder(model):
    cache: dict[int, str] = {}

    def decode(t: int) -> str:
        t = int(t)
        if t not in cache:
            cache[t] = model.tokenizer.decode([t])
        return cache[t]

    return decode


# ============================================================================= 0. SAE


def sae_and_quality(cfg, ctx: RunContext, model, samples: list[Sample], general: list[str]):
    rng = random.Random(cfg.seed * 31 + 5)

    def mix(split: str, n_tokens: int, offset: int, slack: float = 1.0) -> list[list[int]]:
        corpus = encode_ids(model, [s.text for s in samples if s.split == split], cfg.seq_len)
        n_general = math.ceil(0.7 * n_tokens * slack / (cfg.seq_len - 1)) + 2
        seqs = corpus + token_windows(model.tokenizer, general[offset:] + general[:offset], n_general, cfg.seq_len,
                                      model.info.bos_id)
        rng.shuffle(seqs)
        return seqs

    quality_seqs = mix("quality", cfg.quality_tokens, len(general) // 2, slack=1.5)  # used until quality_tokens
    train_seqs = mix("sae_train", cfg.sae.train_tokens, 0) if cfg.sae.source == "train" else []
    sae, site, info = obtain_sae(model, cfg, train_seqs, data_key(model, cfg, texts_sha(train_seqs)), ctx.progress)
    q = quality_gates(model, sae, site, quality_seqs, cfg.quality_tokens, cfg.batch_size, ctx.tqdm)
    metrics = {"sae_explained_variance": q.explained_variance, "sae_ce_recovered": q.ce_recovered,
               "sae_dead_frac": q.dead_frac, "sae_ce_clean": q.ce_clean, "sae_ce_sae": q.ce_sae,
               "sae_ce_zero": q.ce_zero, "sae_quality_tokens": q.n_tokens, "sae_hook_name": site.tl_name,
               "sae_config_hook_name": sae.cfg.metadata.hook_name,
               "sae_hook_matches_config": site.tl_name == sae.cfg.metadata.hook_name,
               "sae_d_sae": int(sae.cfg.d_sae), "sae_from_cache": info["sae_from_cache"],
               "sae_source": info["sae_source"]}
    if cfg.sae.source == "train":
        ctx.save_dir("sae", lambda d: save_sae(sae, d))
        rt = roundtrip_check(sae, q.heldout[:4096], ctx.path / "sae")
        metrics.update(sae_roundtrip_err=rt["enc_rel_err"], sae_roundtrip_ok=rt["enc_rel_err"] <= 1e-5)
    ctx.log_metrics(**metrics)
    return sae, site


# ============================================================================= 2. detection


def pick_candidates(det: pd.DataFrame, k: int) -> tuple[list[int], bool]:
    """The first k passing features in rank order; with none passing, the first k of the whole ranking whose
    reasoning mean is higher (flagged `unfiltered`, so a tiny run still exercises every stage)."""
    passing = det[det["rank"] >= 0].sort_values("rank")
    if len(passing):
        return [int(f) for f in passing.feature[:k]], False
    rest = det[det.mean_r > det.mean_n].sort_values("rank_all")
    return [int(f) for f in rest.feature[:k]], True


def family_frame(maxes: np.ndarray, det_samples: list[Sample], features: list[int]) -> pd.DataFrame:
    fam = np.array([s.family for s in det_samples])
    rows = []
    for f in features:
        for name in dict.fromkeys(fam):
            v = maxes[fam == name, f]
            rows.append({"feature": int(f), "family": name, "label": det_samples[list(fam).index(name)].label,
                         "mean_max": float(v.mean()), "freq": float((v > 0).mean()), "n": len(v)})
    return pd.DataFrame(rows)


# ============================================================================= 4-5. injection


def injection_study(cfg, ctx: RunContext, model, sae, site, samples, scan, labels, det, tokens, candidates, analysed):
    """Every strategy on every analysed feature, real and control arms, against the same base texts."""
    tok = model.tokenizer
    ids, valid = scan.ids.cpu().numpy(), scan.valid.cpu().numpy()
    decode = decoder(model)
    counts = token_counts(ids, valid, model.info.d_vocab)
    counts_r = token_counts(ids[labels == 1], valid[labels == 1], model.info.d_vocab)
    cand_top = sorted({t for f in candidates for t in tokens[f].top})
    pool = control_pool(counts, counts_r, decode, tok.all_special_ids, cand_top, cfg.control_max_reasoning_share)
    ctrl_rows, control = [], {}
    for f in analysed:
        ft = tokens[f]
        swap = {}
        for t in ft.top:
            rng = np.random.default_rng((cfg.seed, f, t))
            t2, window = draw_control(pool, t, ft.top50, rng, cfg.control_pool_min)
            swap[t] = t2
            ctrl_rows.append({"feature": f, "kind": "token", "token_id": t, "control_token_id": t2,
                              "token_str": decode(t), "control_str": decode(t2), "log_freq": float(pool.log_freq[t]),
                              "control_log_freq": float(pool.log_freq[t2]), "window": window})
        grams = {}
        for kind in ("frequent_bigram", "frequent_trigram", "bigram_before", "trigram"):
            for g, c in ft.ngrams.get(kind, [])[: REF_POOL if kind == "frequent_bigram" else 2]:
                t = next((x for x in (g[1:2] if len(g) == 3 else g) if x in swap), g[0])
                rng = np.random.default_rng((cfg.seed, f, t, 1))
                grams[tuple(g)] = match_ngram(tuple(g), swap, c, ids, valid, rng)
                ctrl_rows.append({"feature": f, "kind": kind, "token_id": -1, "control_token_id": -1,
                                  "token_str": "".join(decode(x) for x in g),
                                  "control_str": "".join(decode(x) for x in grams[tuple(g)]),
                                  "log_freq": math.log10(max(c, 1)), "control_log_freq": float("nan"), "window": 0.0})
        control[f] = {"swap": swap, "ngrams": grams}
    bases = encode_ids(model, [s.text for s in samples if s.split == "injection"], cfg.seq_len)
    base_ids, base_mask = pad(bases, pad_token_id(tok))
    base_max = scan_texts(model, sae, site, {"input_ids": base_ids, "attention_mask": base_mask},
                          cfg.batch_size).sample_max.cpu().numpy()
    word_start = word_start_fn(tok)
    comma = tok.encode(",", add_special_tokens=False)[-1]
    alt = "top" if cfg.injection_payload == "reference" else "reference"
    rules = {"real": cfg.injection_payload, "control": cfg.injection_payload, "alt": alt}
    jobs, seqs, violations = injection_jobs(analysed, tokens, {"real": {}, "control": control, "alt": {}}, bases,
                                            cfg.injection_strategies, cfg.seq_len, cfg.seed, word_start, comma, rules)
    scores = feature_max(model, sae, site, seqs, [j["feature"] for j in jobs], cfg.batch_size,
                         pad_token_id(tok)) if seqs else np.zeros(0)
    frame = pd.DataFrame(jobs).assign(score=scores) if jobs else pd.DataFrame(
        columns=["feature", "arm", "strategy", "text", "score"])
    rows = []
    for (f, arm, strategy), g in frame.groupby(["feature", "arm", "strategy"], sort=False):
        base = base_max[g.text.to_numpy(), f]
        rows.append(score_rows(int(f), arm, strategy, base, g.score.to_numpy(), cfg.injection_stats))
    inj = pd.DataFrame(rows, columns=["feature", "arm", "strategy", "mean_base", "mean_inj", "d", "p", "n"])
    order = {s: i for i, s in enumerate(cfg.injection_strategies)}
    inj = inj.sort_values(["feature", "arm", "strategy"], key=lambda c: c.map(order) if c.name == "strategy" else c,
                          kind="stable").reset_index(drop=True)
    gaps = det.set_index("feature")
    inj["transfer"] = [(r.mean_inj - r.mean_base) / max(gaps.mean_r[r.feature] - gaps.mean_n[r.feature], 1e-12)
                       for r in inj.itertuples()]
    per_feature = {}
    for f in analysed:
        sub = inj[inj.feature == f]
        per_feature[f] = summarize_feature(sub, float(gaps.mean_r[f] - gaps.mean_n[f]))
    return inj, pd.DataFrame(ctrl_rows), per_feature, violations


def pad(seqs, pad_id):
    from .acts import pad_ids

    return pad_ids(seqs, pad_id)


def word_start_fn(tok):
    cache: dict[int, bool] = {}

    def is_start(t: int) -> bool:
        if t not in cache:
            piece = tok.convert_ids_to_tokens(int(t)) or ""
            cache[t] = piece.startswith(("Ġ", "▁", " "))
        return cache[t]

    return is_start


# ============================================================================= 6. counterexamples


def counterexamples(cfg, ctx: RunContext, model, sae, site, samples, det_samples, maxes, labels, scan, tokens,
                    per_feature, analysed, det):
    """The loop on up to `loop_max_features` analysed features: the context-dependent ones first (rank order),
    then, while fewer than that remain, the other analysed features with the lowest best injection d (flagged
    forced). The spec's acceptance runs 3 features x 3 iterations; with one context-dependent feature the loop
    would otherwise analyse one."""
    decode = decoder(model)
    ctx_dep = [f for f in analysed if per_feature[f]["class"] == "context_dependent"]
    rest = sorted((f for f in analysed if f not in ctx_dep), key=lambda f: (per_feature[f]["best_d"], f))
    chosen = (ctx_dep + rest)[: cfg.loop_max_features]
    r_idx = np.flatnonzero(labels == 1)
    ranks = det.set_index("feature")["rank"]
    feats = []
    for f in chosen:
        order = r_idx[np.lexsort((r_idx, -maxes[r_idx, f]))][:10]
        examples = []
        for s in order:
            n = int(scan.valid[s].sum()) + 1
            toks = [decode(t) for t in scan.ids[s, :n].tolist()]
            hit = scan.codes.sample == s
            sel = hit & (scan.codes.feature == f)
            if sel.any():
                p = int(scan.codes.pos[sel][np.argmax(scan.codes.value[sel])])
                toks[p] = f"[{toks[p]}]"
            examples.append("".join(toks))
        ft = tokens[f]
        ngram_texts = ["".join(decode(t) for t in g) for kind in ("trigram", "bigram_before", "frequent_bigram")
                       for g, _ in ft.ngrams.get(kind, [])[:3]]
        feats.append(LoopFeature(
            feature=f, rank=int(ranks[f]), forced=f not in ctx_dep,
            tau_ref=float(maxes[order, f].max()) if len(order) else 0.0,
            top_ids=list(ft.top), top_strs=[decode(t) for t in ft.top], ngram_texts=ngram_texts, examples=examples,
            sources=[det_samples[s].text for s in order if maxes[s, f] > 0] or [det_samples[order[0]].text],
            best_d=per_feature[f]["best_d"], cls=per_feature[f]["class"]))
    gen = make_generator(cfg, model)
    corpus_words = [set(words(s.text)) for s in samples if s.split in ("detection", "injection")]
    similarity = sentence_similarity()

    def make_context(f: LoopFeature) -> Context:
        return Context(corpus_words, set(f.top_ids), lambda t: model.tokenizer.encode(t, add_special_tokens=False),
                       {s.strip().lower() for s in f.top_strs}, similarity)

    def score(texts, fs):
        return feature_max(model, sae, site, encode_ids(model, texts, 4 * cfg.seq_len), fs, cfg.batch_size,
                           pad_token_id(model.tokenizer))

    result = run_loop(feats, gen, cfg, score, make_context, NAMES,
                      lambda f, it: np.random.default_rng((cfg.seed, 0x100, f, it)),
                      judge=gen.capable and cfg.use_judge)
    if gen.name == "openai":
        ctx.save_jsonl("generator_log", gen.log)
    return feats, result


def sentence_similarity():
    """Cosine of the packaged sentence embedder when installed (local files only), else None."""
    from interp.embedder import embedder_available

    if not embedder_available():
        return None
    from interp.embedder import embed_texts

    def sim(a: str, b: str) -> float:
        e = embed_texts([a, b])
        return float(e[0] @ e[1])

    return sim


def empty_candidates() -> pd.DataFrame:
    return pd.DataFrame(columns=["feature", "iteration", "kind", "source", "text", "source_text", *ALL_FLAGS,
                                 "act_max", "ratio", "ok_activation", "valid"])


@contextlib.contextmanager
def timed(ctx: RunContext, stage: str):
    t0 = time.perf_counter()
    try:
        yield
    finally:
        ctx.log_timings(**{f"seconds_{stage}": round(time.perf_counter() - t0, 3)})

