"""Graph sawtooth attention and SLASH (arXiv 2605.10503): does attention over a serialised edge list
rebuild its adjacency (a "sawtooth" of per-node causal triangles), can those layers be found
automatically, and does moving part of the attention-sink mass onto the real keys there (SLASH)
help graph reasoning more than the same edit on random layers, without hurting ordinary text?

Method: ../shared/methods/graph_sawtooth.md. Stages: graphs.py (data, spans), attention.py
(capture), structure.py (scores and nulls), selection.py (Otsu, entropy peak), slash.py (the
edit and its invariants), scoring.py (prefill with SLASH, continuation without).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import torch

from interp.context import RunContext
from interp.data import load_texts, token_windows
from interp.errors import NumericError
from interp.generate import perplexity
from interp.sites import Site

from . import GraphSawtoothConfig
from .attention import Tokenised, capture_batch, forward_last, pad_left, tokenise
from .graphs import Sample, read_rows, spans_json, synthetic_samples, user_samples
from .scoring import candidate_tokens, score_all
from .selection import entropy_band, final_set, otsu_set
from .slash import Slash
from .structure import score_sample, shuffled_spans

PAPER_GAMMA = 0.6
"""The paper's default gamma: used by the controls when calibration picks gamma = 1 (a no-op)."""
N_VERIFY = 4


def run(cfg: GraphSawtoothConfig, ctx: RunContext) -> None:
    model = ctx.model
    samples = build_samples(cfg, ctx.rng)  # 1. data: graphs, prompts, spans
    items = [tokenise(model, s, cfg.prompt_format) for s in samples]
    split = {name: [t for t in items if t.sample.split == name] for name in ("select", "cal", "test")}
    cands = {t.sample.sample_id: candidate_tokens(model, t.sample.candidates) for t in items}

    with ctx.timed("structure"):  # 2. sawtooth against its nulls, sink, entropy
        struct = measure_structure(model, split["select"], cfg, ctx)
    layers = summarize_layers(struct)
    sel = select_layers(layers["scores"], layers["entropy"], cfg.entropy_rule)  # 3. S = S_score ∩ S_ent
    S = sel["S"]

    with ctx.timed("verify"):  # 4. exact invariants, gamma = 1, pattern reaches z
        checks = verify_slash(model, split["select"][:N_VERIFY], S, cfg)
    with ctx.timed("calibration"):  # 5. gamma sweep on the calibration split
        sweep = gamma_sweep(model, split["cal"], cands, S, cfg, ctx)
    gamma_best = pick_gamma(sweep["table"])
    with ctx.timed("test"):  # 6. test: base, SLASH on S, SLASH on random layers
        evals = evaluate(model, split["test"], cands, S, gamma_best, cfg, ctx)
    curve = None
    if cfg.gamma_curve:  # 6b. the graded study: test accuracy and answer margin at every gamma of the grid
        with ctx.timed("gamma_curve"):
            curve = gamma_curve(model, split["test"], cands, S, evals, cfg, ctx)
        ctx.save_table("gamma_curve", curve)
    gamma_ctl = gamma_best if gamma_best < 1 else PAPER_GAMMA
    with ctx.timed("controls"):  # 7. non-graph perplexity, downstream structure
        controls = run_controls(model, split["select"], layers, S, gamma_ctl, cfg, ctx)

    invariants = invariant_table([checks["slash"], *sweep["slashes"], *evals["slashes"], *controls["slashes"]])
    # (the gamma curve's edits are the same Slash class on other gammas and layers; its invariants are not re-listed)
    save(ctx, cfg, samples, items, struct, layers, sel, sweep, evals, controls, invariants)
    ctx.log_metrics(**metrics(cfg, layers, sel, checks, invariants, sweep, gamma_best, evals, controls, gamma_ctl),
                    **(curve_metrics(curve) if curve is not None else {}))


# ============================================================================= 1. data


def build_samples(cfg: GraphSawtoothConfig, rng: np.random.Generator) -> list[Sample]:
    """Synthetic graph tasks (or the user's JSONL rows), split select / cal / test."""
    if cfg.data is not None:
        return user_samples(read_rows(cfg.data), cfg, rng)
    return synthetic_samples(cfg, rng)


# ============================================================================= 2. structure


def _units(roi_heads: np.ndarray, heads: bool) -> np.ndarray:
    """(layer, head, R, R) -> units (layer [+ layer*head], R, R): the head means first, then every head."""
    n_layers, n_heads, r, _ = roi_heads.shape
    if not heads:
        return roi_heads.mean(1)
    return np.concatenate([roi_heads.mean(1), roi_heads.reshape(n_layers * n_heads, r, r)])


def measure_structure(model, items: list[Tokenised], cfg: GraphSawtoothConfig, ctx: RunContext) -> dict:
    """Capture every layer's attention on the selection prompts and score it per sample at once:
    concentration and plain AUC of every layer (head mean) and head against the real template and
    `n_null` segment-shuffled ones, distance-matched AUC, locality AUC, sink mass and entropy."""
    n_layers, n_heads = model.info.n_layers, model.info.n_heads
    all_layers = list(range(n_layers))
    n, k = len(items), cfg.n_null
    out = {
        "concentration": np.zeros((n, n_layers)), "concentration_null": np.zeros((k, n, n_layers)),
        "auc": np.zeros((n, n_layers)), "auc_null": np.zeros((k, n, n_layers)),
        "auc_distmatched": np.zeros((n, n_layers)), "locality_auc": np.zeros(n),
        "sink_mass": np.zeros((n, n_layers)), "entropy": np.zeros((n, n_layers)),
        "head_concentration": np.zeros((n, n_layers, n_heads)), "head_auc": np.zeros((n, n_layers, n_heads)),
        "head_auc_null": np.zeros((n, n_layers, n_heads)), "maps": {},
    }
    # the null layouts are drawn up front so they do not depend on the batching
    nulls = [[shuffled_spans(t.spans, ctx.rng) for _ in range(k)] for t in items]
    batches = [list(range(i, min(i + cfg.batch_size, n))) for i in range(0, n, cfg.batch_size)]
    for idx in ctx.tqdm(batches, desc="structure"):
        caps = capture_batch(model, [items[i] for i in idx], all_layers, cfg.sink_offsets)
        for i, cap in zip(idx, caps):
            sc = score_sample(_units(cap.roi_heads, cfg.head_scores), items[i].spans, nulls[i], cfg.max_shift,
                              cfg.binarize)
            L = n_layers
            out["concentration"][i] = sc["concentration"][:L]
            out["concentration_null"][:, i] = sc["concentration_null"][:, :L]
            out["auc"][i] = sc["auc"][:L]
            out["auc_null"][:, i] = sc["auc_null"][:, :L]
            out["auc_distmatched"][i] = sc["auc_distmatched"][:L]
            out["locality_auc"][i] = sc["locality_auc"]
            out["sink_mass"][i] = cap.sink_mass
            out["entropy"][i] = cap.entropy
            if cfg.head_scores:
                out["head_concentration"][i] = sc["concentration"][L:].reshape(L, n_heads)
                out["head_auc"][i] = sc["auc"][L:].reshape(L, n_heads)
                out["head_auc_null"][i] = np.nanmean(sc["auc_null"][:, L:], 0).reshape(L, n_heads)
            if i < cfg.n_roi_maps:
                out["maps"][i] = {
                    "raw": cap.roi_heads.mean(1).astype(np.float32),
                    "binary": sc["processed"][:L].astype(np.uint8),
                    "template": sc["template"].astype(np.uint8),
                }
                if i == 0:
                    out["maps"][i]["heads"] = cap.roi_heads.astype(np.float16)
    for key in ("concentration", "auc", "sink_mass", "entropy"):
        ctx.check_finite(f"per-layer {key} of the selection prompts", out[key])
    return out


def summarize_layers(st: dict) -> dict:
    """Per-layer means, the nulls by draw, the headline layer l* and the selection-matched threshold."""
    conc = np.nanmean(st["concentration"], 0)  # (layer,)
    conc_null_draw = np.nanmean(st["concentration_null"], 1)  # (draw, layer)
    auc = np.nanmean(st["auc"], 0)
    auc_null_draw = np.nanmean(st["auc_null"], 1)  # (draw, layer)
    auc_null = auc_null_draw.mean(0)
    excess = auc - auc_null
    l_star = int(np.nanargmax(excess))
    k = auc_null_draw.shape[0]
    others = (auc_null_draw.sum(0, keepdims=True) - auc_null_draw) / (k - 1)  # mean of the other draws
    e = (auc_null_draw - others).max(1)  # (draw,)
    null_max = conc_null_draw.max(1)  # (draw,): the same max over layers as the real score
    return {
        "scores": conc,
        "concentration_null_mean": conc_null_draw.mean(0),
        "concentration_null_draws": conc_null_draw,
        "auc": auc, "auc_null": auc_null, "auc_null_sd": auc_null_draw.std(0, ddof=1),
        "auc_null_draws": auc_null_draw, "auc_distmatched": np.nanmean(st["auc_distmatched"], 0),
        "excess": excess, "l_star": l_star, "excess_draws": e,
        "auc_excess_q95": float(np.percentile(e, 95)),
        "null_concentration": float(null_max.mean()), "null_concentration_sd": float(null_max.std(ddof=1)),
        "locality_auc": float(np.nanmean(st["locality_auc"])),
        "sink_mass": st["sink_mass"].mean(0), "entropy": st["entropy"].mean(0),
    }


# ============================================================================= 3. selection


def select_layers(scores: np.ndarray, entropy: np.ndarray, rule: str = "reference") -> dict:
    """S_score (Otsu), S_ent (middle wide entropy peak, under `rule`) and S = their intersection (with fallback)."""
    s_score = otsu_set(scores)
    s_ent = entropy_band(entropy, rule)
    S, fallback = final_set(scores, s_score["layers"], s_ent)
    return {"S_score": s_score, "S_ent": s_ent, "S": S, "fallback": fallback}


# ============================================================================= 4. invariants


@torch.no_grad()
def verify_slash(model, items: list[Tokenised], S: list[int], cfg: GraphSawtoothConfig, gamma: float = 0.5) -> dict:
    """The verification pass (three forwards): gamma = 1 reproduces the base logits; the edited
    pattern is the one multiplied with V (z changes, and equals p' V); SLASH's row invariants."""
    ids, mask, _ = pad_left(model, items)
    layer = S[0]
    grab: dict[str, torch.Tensor] = {}

    def keep(name):
        def fn(x):
            grab[name] = x.detach().clone()

        return fn

    zsite = Site("attn_z", layer)
    with model.hooks([(zsite, keep("z0"))]):
        base = forward_last(model, ids, mask)
    one = Slash(S, 1.0, cfg.sink_offsets)
    with model.hooks(one.pairs()), one.batch(mask):
        same = forward_last(model, ids, mask)
    dlogit = float((same.float() - base.float()).abs().max())

    # SLASH at `gamma` on S; hooks after the edit see the edited pattern, z and v of S[0]
    check = Slash(S, gamma, cfg.sink_offsets)
    after = [(Site("attn_pattern", layer), keep("p")), (zsite, keep("z1")), (Site("attn_v", layer), keep("v"))]
    with model.hooks(check.pairs() + after), check.batch(mask):
        forward_last(model, ids, mask)
    if check.applied != len(S):
        raise NumericError(f"SLASH hooks ran {check.applied} times on {len(S)} selected layers")
    v = grab["v"]  # (b, pos, kv_head, d_head)
    v = v.repeat_interleave(model.info.n_heads // v.shape[2], dim=2)  # (b, pos, head, d_head)
    z_expected = torch.einsum("bhqk,bkhd->bqhd", grab["p"].float(), v.float())
    z_change = float((grab["z1"] - grab["z0"]).abs().max())
    z_err = float((grab["z1"].float() - z_expected).abs().max())
    reaches = z_change > 1e-6 and z_err <= 1e-4 * max(1.0, float(z_expected.abs().max()))
    return {"slash": check, "gamma1_max_dlogit": dlogit, "pattern_edit_reaches_z": bool(reaches),
            "z_change": z_change, "z_match_err": z_err}


# ============================================================================= 5-6. calibration and test


def _accuracy(items: list[Tokenised], scores: list[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
    """Per-item correctness and per-task accuracy (plus "all": the unweighted mean over tasks)."""
    correct = np.array([int(np.argmax(s)) == t.sample.answer_index for t, s in zip(items, scores)], dtype=float)
    tasks = [t.sample.task for t in items]
    acc = {task: float(correct[[x == task for x in tasks]].mean()) for task in dict.fromkeys(tasks)}
    acc["all"] = float(np.mean([v for v in acc.values()]))
    return correct, acc


def _cands(items, cands) -> list[list[list[int]]]:
    return [cands[t.sample.sample_id] for t in items]


def gamma_sweep(model, items, cands, S, cfg: GraphSawtoothConfig, ctx: RunContext) -> dict:
    """Calibration accuracy for every gamma on S (gamma = 1, the unmodified model, runs first), with the
    mean answer margin (its log-probability minus the best other candidate's) and the mean |change| of
    the answer's log-probability against gamma = 1: how far the edit moves the scores, flipped or not."""
    rows, slashes, base = [], [], None
    for gamma in sorted(cfg.gamma_grid, key=lambda g: g != 1.0):
        sl = None if gamma == 1.0 else Slash(S, gamma, cfg.sink_offsets)
        scores = score_all(model, items, _cands(items, cands), cfg.batch_size, sl,
                           progress=lambda it, g=gamma: ctx.tqdm(it, desc=f"calibrate gamma={g}"))
        if sl is None:
            base = scores
        else:
            slashes.append(sl)
        _, acc = _accuracy(items, scores)
        ans = np.array([s[t.sample.answer_index] for t, s in zip(items, scores)])
        other = np.array([np.delete(s, t.sample.answer_index).max() for t, s in zip(items, scores)])
        shift = np.abs(ans - np.array([b[t.sample.answer_index] for t, b in zip(items, base)]))
        tasks = np.array([t.sample.task for t in items])
        for task, a in acc.items():
            sel = np.ones(len(items), bool) if task == "all" else tasks == task
            rows.append({"gamma": gamma, "task": task, "acc_cal": a, "margin": float((ans - other)[sel].mean()),
                         "mean_abs_dlogprob": float(shift[sel].mean())})
    table = pd.DataFrame(rows).sort_values(["gamma"], kind="stable").reset_index(drop=True)
    return {"table": table, "slashes": slashes}


def pick_gamma(t: pd.DataFrame) -> float:
    """argmax of the calibration accuracy (mean over tasks); ties go to the larger gamma."""
    allrows = t[t.task == "all"].sort_values("gamma")
    best = allrows.acc_cal.max()
    return float(allrows[allrows.acc_cal >= best - 1e-12].gamma.max())


def evaluate(model, items, cands, S, gamma, cfg: GraphSawtoothConfig, ctx: RunContext) -> dict:
    """Test accuracy: base, SLASH on S at gamma, SLASH on |S| random layers outside S (per seed)."""
    c = _cands(items, cands)
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
    for name, seed, layers, scores in conds:
        corr, acc = _accuracy(items, scores)
        correct[(name, seed)] = corr
        tasks = [t.sample.task for t in items]
        for task, a in acc.items():
            n = len(items) if task == "all" else tasks.count(task)
            rows.append({"condition": name, "seed": seed, "task": task, "acc": a, "n": n,
                         "layers": ",".join(map(str, layers or []))})
        for t, s, ok in zip(items, scores, corr):
            preds.append({"sample_id": t.sample.sample_id, "task": t.sample.task, "condition": name, "seed": seed,
                          "pred": int(np.argmax(s)), "answer_index": t.sample.answer_index, "correct": bool(ok),
                          "logprob_answer": float(s[t.sample.answer_index]), "logprob_best": float(np.max(s))})
    boot = bootstrap(items, correct, cfg, ctx.rng)
    table = pd.DataFrame(rows)
    for name, (lo, hi) in boot["ci"].items():
        sel = (table.condition == name) & (table.task == "all")
        table.loc[sel, "ci_lo"], table.loc[sel, "ci_hi"] = lo, hi
    return {"table": table, "predictions": pd.DataFrame(preds), "bootstrap": boot, "random_sets": random_sets,
            "slashes": slashes, "base_scores": base}


def answer_margin(items, scores) -> np.ndarray:
    """Per item: the answer's summed log-probability minus the best other candidate's (> 0: answered right)."""
    return np.array([s[t.sample.answer_index] - np.delete(s, t.sample.answer_index).max()
                     for t, s in zip(items, scores)])


def gamma_curve(model, items, cands, S, evals: dict, cfg: GraphSawtoothConfig, ctx: RunContext) -> pd.DataFrame:
    """Test accuracy and the answer margin's change against the base model at every gamma of the grid, with SLASH on
    S and on the first `gamma_curve_random_seeds` random layer sets of the test, each with a task-stratified
    bootstrap 95 % interval (the same resampled items for every row). The margin moves even where the argmax holds.

    Rows: gamma, condition (base | slash | random_s), seed, layers, acc, acc_ci_lo/hi, margin, margin_change,
    margin_change_ci_lo/hi, frac_flipped (items whose correctness changed), n."""
    c = _cands(items, cands)
    base = evals["base_scores"]
    m_base = answer_margin(items, base)
    ok_base = _accuracy(items, base)[0] > 0
    tasks = np.array([t.sample.task for t in items])
    groups = [np.flatnonzero(tasks == task) for task in dict.fromkeys(tasks.tolist())]
    draws = [np.concatenate([ctx.rng.choice(g, size=g.size, replace=True) for g in groups]) for _ in range(cfg.n_boot)]
    task_of = [tasks[d] for d in draws]

    def acc(ok, idx=None, tk=None):  # unweighted mean over tasks, as the test accuracy
        ok, tk = (ok, tasks) if idx is None else (ok[idx], tk)
        return float(np.mean([ok[tk == task].mean() for task in dict.fromkeys(tasks.tolist())]))

    def row(gamma, name, seed, layers, scores):
        margin, ok = answer_margin(items, scores), _accuracy(items, scores)[0] > 0  # argmax ties as the test
        a = [acc(ok, d, tk) for d, tk in zip(draws, task_of)]
        dm = margin - m_base
        b = [float(dm[d].mean()) for d in draws]
        return {"gamma": gamma, "condition": name, "seed": seed, "layers": ",".join(map(str, layers)),
                "acc": acc(ok), "acc_ci_lo": float(np.percentile(a, 2.5)), "acc_ci_hi": float(np.percentile(a, 97.5)),
                "margin": float(margin.mean()), "margin_change": float(dm.mean()),
                "margin_change_ci_lo": float(np.percentile(b, 2.5)),
                "margin_change_ci_hi": float(np.percentile(b, 97.5)),
                "frac_flipped": float((ok != ok_base).mean()), "n": len(items)}

    conds = [("slash", 0, S)] + [("random_s", i, r) for i, r in
                                  enumerate(evals["random_sets"][: cfg.gamma_curve_random_seeds])]
    rows = []
    for gamma in cfg.gamma_grid:
        rows.append(row(gamma, "base", 0, [], base))
        for name, seed, layers in conds:
            if gamma == 1.0:  # gamma = 1 is exactly the base model (verify_slash checks it)
                rows.append(row(gamma, name, seed, layers, base))
                continue
            sl = Slash(layers, gamma, cfg.sink_offsets)
            scores = score_all(model, items, c, cfg.batch_size, sl,
                               progress=lambda it, g=gamma, n=name: ctx.tqdm(it, desc=f"curve {n} gamma={g}"))
            rows.append(row(gamma, name, seed, layers, scores))
    return pd.DataFrame(rows)


def curve_metrics(curve: pd.DataFrame) -> dict:
    """Headline numbers of the gamma curve: the best SLASH accuracy gain over base and its gamma, and the largest
    mean margin change on S and on random layers."""
    sl, rnd = curve[curve.condition == "slash"], curve[curve.condition == "random_s"]
    base = float(curve[curve.condition == "base"].acc.iloc[0])
    best = sl.sort_values("gamma", ascending=False, kind="stable").loc[lambda d: d.acc.idxmax()]  # ties: larger gamma
    return {"curve_best_gamma": float(best.gamma), "curve_best_acc_gain": float(best.acc - base),
            "curve_best_acc_ci_lo": float(best.acc_ci_lo), "curve_best_acc_ci_hi": float(best.acc_ci_hi),
            "curve_max_abs_margin_change_slash": float(sl.margin_change.abs().max()),
            "curve_max_abs_margin_change_random": float(rnd.margin_change.abs().max()) if len(rnd) else None}


def bootstrap(items, correct: dict, cfg: GraphSawtoothConfig, rng: np.random.Generator) -> dict:
    """Task-stratified bootstrap of the test items: 95 % intervals of each condition's accuracy
    (random: the median over seeds) and of acc_slash - acc_random_layers."""
    tasks = np.array([t.sample.task for t in items])
    groups = [np.flatnonzero(tasks == task) for task in dict.fromkeys(tasks.tolist())]
    base, slash = correct[("base", 0)], correct[("slash", 0)]
    rand = np.stack([v for (name, _), v in correct.items() if name == "random_s"])  # (seed, item)

    def acc(vec, idx_per_task):  # unweighted mean over tasks
        return np.mean([vec[..., ix].mean(-1) for ix in idx_per_task], 0)

    draws = {"base": [], "slash": [], "random_s": [], "diff": []}
    for _ in range(cfg.n_boot):
        idx = [rng.choice(g, size=g.size, replace=True) for g in groups]
        a_b, a_s = acc(base, idx), acc(slash, idx)
        a_r = float(np.median(acc(rand, idx)))
        draws["base"].append(a_b)
        draws["slash"].append(a_s)
        draws["random_s"].append(a_r)
        draws["diff"].append(a_s - a_r)
    ci = {k: tuple(float(x) for x in np.percentile(v, [2.5, 97.5])) for k, v in draws.items()}
    return {"ci": {k: ci[k] for k in ("base", "slash", "random_s")}, "diff_ci": ci["diff"]}


# ============================================================================= 7. controls


def run_controls(model, items, layers, S, gamma, cfg: GraphSawtoothConfig, ctx: RunContext) -> dict:
    """Non-graph perplexity with SLASH on S, and the concentration of the layers after max(S)."""
    texts = load_texts(cfg.ppl_data, seed=cfg.seed)
    bos = model.info.bos_id  # BOS follows the tokenizer (Gemma): its <bos> is the sink, as in the graph prompts
    chunks = token_windows(model.tokenizer, texts, cfg.ppl_tokens // cfg.ppl_len, cfg.ppl_len + (bos is not None), bos)
    # full logits here: keep a batch's (batch, len, vocab) float32 logits near 512 MB (Gemma: 262k vocab)
    bs = max(1, min(cfg.batch_size, 2**27 // (cfg.ppl_len * model.info.d_vocab)))
    ppl_base = perplexity(model, chunks, batch_size=bs)
    sl_ppl = Slash(S, gamma, cfg.sink_offsets)  # no padding: the sink is column 0 (+ offsets)
    with model.hooks(sl_ppl.pairs()):
        ppl_slash = perplexity(model, chunks, batch_size=bs)
    later = list(range(max(S) + 1, model.info.n_layers))
    out = {"ppl_base": ppl_base, "ppl_slash": ppl_slash, "later_layers": later, "gamma": gamma,
           "later_base": None, "later_slash": None, "next_maps": {}, "slashes": [sl_ppl]}
    if later:
        sl = Slash(S, gamma, cfg.sink_offsets)
        conc = np.zeros((len(items), len(later)))
        batches = [list(range(i, min(i + cfg.batch_size, len(items)))) for i in range(0, len(items), cfg.batch_size)]
        for idx in ctx.tqdm(batches, desc="downstream"):
            caps = capture_batch(model, [items[i] for i in idx], later, cfg.sink_offsets, slash=sl, entropy=False)
            for i, cap in zip(idx, caps):
                roi = cap.roi_heads.mean(1)  # (later layer, R, R)
                conc[i] = score_sample(roi, items[i].spans, [], cfg.max_shift, cfg.binarize)["concentration"]
                if i < cfg.n_roi_maps:
                    out["next_maps"][i] = roi[0].astype(np.float32)
        out["later_base"] = float(layers["scores"][later].mean())
        out["later_slash"] = float(conc.mean())
        out["slashes"].append(sl)
    return out


# ============================================================================= save


def invariant_table(slashes: list[Slash]) -> pd.DataFrame:
    """Per layer, the worst invariant errors over every SLASH forward of the run."""
    acc: dict[int, dict[str, float]] = {}
    for sl in slashes:
        for layer, errs in sl.errors.items():
            a = acc.setdefault(layer, {key: 0.0 for key in errs})
            for key, v in errs.items():
                a[key] = a[key] + v if key == "rows_checked" else max(a[key], v)
    rows = [{"layer": layer, **errs} for layer, errs in sorted(acc.items())]
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["rows_checked"] = frame["rows_checked"].astype(int)
    return frame


def save(ctx, cfg, samples, items, st, layers, sel, sweep, evals, controls, invariants) -> None:
    n_layers = len(layers["scores"])
    S = sel["S"]
    tok = ctx.model.tokenizer
    srows = []
    for s, t in zip(samples, items):
        shown = s.split == "select" and _select_index(items, t) < cfg.n_roi_maps
        roi_tokens = [tok.decode([i]) for i in t.ids[t.roi[0] : t.roi[1] + 1]] if shown else []
        srows.append({"sample_id": s.sample_id, "split": s.split, "task": s.task, "n_nodes": s.n_nodes,
                      "n_edges": s.n_edges, "prompt": s.prompt, "answer": s.answer,
                      "candidates": json.dumps(s.candidates), "n_tokens": len(t.ids), "roi_start": t.roi[0],
                      "roi_end": t.roi[1], "spans": spans_json(t.spans), "roi_tokens": json.dumps(roi_tokens)})
    ctx.save_table("samples", pd.DataFrame(srows))

    s_score, s_ent = set(sel["S_score"]["layers"]), set(sel["S_ent"]["layers"])
    ctx.save_table("layer_scores", pd.DataFrame({
        "layer": range(n_layers), "concentration": layers["scores"],
        "concentration_null_mean": layers["concentration_null_mean"], "auc": layers["auc"],
        "auc_distmatched": layers["auc_distmatched"], "auc_null": layers["auc_null"],
        "auc_null_sd": layers["auc_null_sd"], "auc_excess": layers["excess"],
        "locality_auc": layers["locality_auc"], "sink_mass": layers["sink_mass"], "entropy": layers["entropy"],
        "in_S_score": [i in s_score for i in range(n_layers)], "in_S_ent": [i in s_ent for i in range(n_layers)],
        "selected": [i in S for i in range(n_layers)],
    }))
    if cfg.head_scores:
        hc, ha, hn = (np.nanmean(st[k], 0) for k in ("head_concentration", "head_auc", "head_auc_null"))
        n_heads = hc.shape[1]
        ctx.save_table("head_scores", pd.DataFrame({
            "layer": np.repeat(np.arange(n_layers), n_heads), "head": np.tile(np.arange(n_heads), n_layers),
            "concentration": hc.ravel(), "auc": ha.ravel(), "auc_null": hn.ravel(), "auc_excess": (ha - hn).ravel(),
        }))
    k = layers["auc_null_draws"].shape[0]
    ctx.save_table("null_draws", pd.DataFrame({
        "draw": np.repeat(np.arange(k), n_layers), "layer": np.tile(np.arange(n_layers), k),
        "concentration_null": layers["concentration_null_draws"].ravel(), "auc_null": layers["auc_null_draws"].ravel(),
    }))
    selection = {"S_score": sel["S_score"], "S_ent": sel["S_ent"], "S": S, "selection_fallback": sel["fallback"],
                 "excess_draws": layers["excess_draws"].tolist(), "l_star": layers["l_star"]}
    ctx.save_json("selection", selection)
    ctx.writer.set("selection", selection)

    maps = {}
    for i, m in st["maps"].items():
        for key, arr in m.items():
            maps[f"{key}_{i}"] = np.ascontiguousarray(arr)
        if i in controls["next_maps"]:
            maps[f"slash_next_{i}"] = controls["next_maps"][i]
    if maps:
        meta = {"layer_after_S": str(max(S) + 1) if controls["later_layers"] else "",
                "sample_ids": ",".join(str(items_sel.sample.sample_id) for items_sel in
                                       [t for t in items if t.sample.split == "select"][: cfg.n_roi_maps])}
        ctx.save_tensors("roi_maps", maps, metadata=meta)

    ctx.save_table("gamma_sweep", sweep["table"])
    ctx.save_table("eval", evals["table"])
    ctx.save_table("predictions", evals["predictions"])
    ctx.save_table("invariants", invariants)
    ctx.save_table("controls", pd.DataFrame([{
        "ppl_base": controls["ppl_base"], "ppl_slash": controls["ppl_slash"], "gamma": controls["gamma"],
        "later_layers": ",".join(map(str, controls["later_layers"])),
        "later_layer_concentration_base": controls["later_base"],
        "later_layer_concentration_slash": controls["later_slash"],
    }]))


def _select_index(items, t) -> int:
    sel = [x for x in items if x.sample.split == "select"]
    return sel.index(t)


def metrics(cfg, layers, sel, checks, invariants, sweep, gamma_best, evals, controls, gamma_ctl) -> dict:
    ls = layers["l_star"]
    sink = layers["sink_mass"]
    e = evals["table"]
    allrows = e[e.task == "all"]
    acc_base = float(allrows[allrows.condition == "base"].acc.iloc[0])
    acc_slash = float(allrows[allrows.condition == "slash"].acc.iloc[0])
    acc_random = float(np.median(allrows[allrows.condition == "random_s"].acc))
    sw = sweep["table"]
    inv = invariants
    m = {
        "best_layer_auc": float(layers["auc"][ls]),
        "locality_auc": layers["locality_auc"],
        "best_layer_concentration": float(np.max(layers["scores"])),
        "null_concentration": layers["null_concentration"],
        "sink_mass_mean": float(sink.mean()),
        "selected_layers": ",".join(map(str, sel["S"])),
        "gamma_best": gamma_best,
        "acc_base": acc_base,
        "acc_slash": acc_slash,
        "acc_random_layers": acc_random,
        "slash_rows_sum_max_err": float(inv["max_row_sum_err"].max()) if len(inv) else 0.0,
        "best_layer": ls,
        "best_concentration_layer": int(np.argmax(layers["scores"])),
        "null_concentration_sd": layers["null_concentration_sd"],
        "best_layer_auc_distmatched": float(layers["auc_distmatched"][ls]),
        "null_auc": float(layers["auc_null"][ls]),
        "null_auc_sd": float(layers["auc_null_sd"][ls]),
        "auc_excess": float(layers["excess"][ls]),
        "auc_excess_q95": layers["auc_excess_q95"],
        "sink_mass_max": float(sink.max()),
        "sink_mass_max_layer": int(np.argmax(sink)),
        "selection_fallback": sel["fallback"],
        "n_selected": len(sel["S"]),
        "slash_sink_ratio_max_err": float(inv["max_sink_ratio_err"].max()) if len(inv) else 0.0,
        "slash_nonsink_ratio_max_err": float(inv["max_nonsink_ratio_err"].max()) if len(inv) else 0.0,
        "slash_nonsink_ratio_max_abs_err": float(inv["max_nonsink_ratio_abs_err"].max()) if len(inv) else 0.0,
        "slash_rows_checked": int(inv["rows_checked"].sum()) if len(inv) else 0,
        "slash_gamma1_max_dlogit": checks["gamma1_max_dlogit"],
        "pattern_edit_reaches_z": checks["pattern_edit_reaches_z"],
        "pattern_edit_z_change": checks["z_change"],
        "pattern_edit_z_match_err": checks["z_match_err"],
        "ppl_base_nongraph": controls["ppl_base"],
        "ppl_ratio_nongraph": controls["ppl_slash"] / controls["ppl_base"],
        "gamma_controls": gamma_ctl,
        "later_layer_concentration_delta": (None if controls["later_base"] is None
                                            else controls["later_slash"] - controls["later_base"]),
        "acc_slash_minus_random": acc_slash - acc_random,
        "acc_slash_minus_random_ci_lo": evals["bootstrap"]["diff_ci"][0],
        "acc_slash_minus_random_ci_hi": evals["bootstrap"]["diff_ci"][1],
        "random_layer_sets": ";".join(",".join(map(str, s)) for s in evals["random_sets"]),
        "n_select": cfg.n_select, "n_cal": cfg.n_cal, "n_test": cfg.n_test,
    }
    for g in sorted(sw.gamma.unique()):
        row = sw[(sw.gamma == g) & (sw.task == "all")].iloc[0]
        m[f"acc_cal_gamma_{g:g}"] = float(row.acc_cal)
        if g < 1:
            m[f"cal_dlogprob_gamma_{g:g}"] = float(row.mean_abs_dlogprob)
    return m
