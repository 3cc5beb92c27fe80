"""Keystone neurons: a tiny cross-task set whose removal collapses the model.

Method: ../shared/methods/keystone.md (paper arXiv 2605.24846). One teacher-forced pass replaces
the paper's per-step regeneration (`record.record_teacher_forced`, checked on every run against the
per-step regeneration padded to the one pass's shape, exact in any dtype: see `record`); beyond the
paper, Step 6 measures how much of the collapse runs through the position-0 massive activation and the
attention sink.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

import numpy as np
import pandas as pd
import torch

from interp.context import RunContext
from interp.errors import NumericError
from interp.precision import dtype_name

from . import KeystoneConfig
from .ablate import (
    Condition,
    evaluate,
    highnorm,
    massive_writers,
    matched_random,
    ppl_batch_size,
    sink_rows,
    swap_pairs,
)
from .data import load_prompts, load_tasks, sft_data
from .neurons import SPECS, SliceMap, kv_ranking, neuron_coords, recording_site, widths
from .record import generate, record_all, tf_check
from .selection import (
    cells_frame,
    count,
    from_units,
    keystone,
    mlp_effective,
    select_prompt,
    sets_frame,
    stability,
    units,
)

# seeds of the controls: np.random.default_rng((cfg.seed, KIND, s))
_RANDOM, _HIGHNORM, _SWAP = 1, 2, 3


def run(cfg: KeystoneConfig, ctx: RunContext) -> None:
    cpu0 = time.process_time()
    model = ctx.model
    types = list(cfg.neuron_types)
    prompts = load_prompts(cfg.prompt_source, cfg.n_groups)  # 1. data and generation
    with ctx.timed("generation"):
        gens = [g for group in _groups(prompts) for g in generate(
            model, group, cfg.max_new_tokens, cfg.repetition_penalty, cfg.penalty_window, batch_size=len(group))]
    ctx.save_table("generations", generations_frame(gens))

    with ctx.timed("tf_check"):  # 2. recording, with the equality check on the first prompt
        first = generate(model, [gens[0].prompt], cfg.tf_check_tokens, cfg.repetition_penalty, cfg.penalty_window,
                         stop=False)[0]
        check = tf_check(model, first, cfg.tf_check_tokens, types)
    with ctx.timed("recording"):
        recs = record_all(model, gens, types, per_step=cfg.recording == "per_step", progress=ctx.tqdm)
    means = {(g.prompt.group, g.prompt.id): r.means() for g, r in zip(gens, recs)}
    for k, m in means.items():
        ctx.check_finite(f"mean |activation| of prompt {k}", np.stack([v.sum() for v in m.values()]))
    ctx.save_tensors("mean_abs_act", {f"g{g}/{pid}/{t}": v for (g, pid), m in means.items() for t, v in m.items()},
                     metadata=recording_metadata(model, types, gens, cfg))
    ctx.save_table("tf_check", check.frame)
    ctx.writer.set("tf_check", check.summary())  # which regeneration the check compared with
    kv = kv_ranking(model.info, types, cfg.kv_width)
    set_tf = select_prompt(check.tf.means(), cfg.top_p, cfg.selection_mode, kv)
    set_step = select_prompt(check.step.means(), cfg.top_p, cfg.selection_mode, kv)
    tf_same = all(np.array_equal(set_tf[t], set_step[t]) for t in types)
    ctx.log_metrics(teacher_forced_max_rel_err=check.max_rel_err, tf_keystone_sets_identical=tf_same)
    ctx.log_timings(teacher_forced_speedup=check.t_step / check.t_tf, tf_per_step_s=check.t_step,
                    tf_one_pass_s=check.t_tf, tf_check_tokens=check.n_tokens,
                    teacher_forced_speedup_cpu=check.cpu_step / max(check.cpu_tf, 1e-9),
                    tf_per_step_cpu_s=check.cpu_step, tf_one_pass_cpu_s=check.cpu_tf)

    by_group = defaultdict(list)  # 3. selection, the p sweep's sets, 4. stability
    for (g, _), m in means.items():
        by_group[g].append(m)
    key, per_prompt = keystone(by_group[1], cfg.top_p, cfg.selection_mode, kv)
    if count(key) == 0:
        raise NumericError(f"empty keystone set at p={cfg.top_p}: the {len(by_group[1])} prompts share no top-p neuron")
    sweep = {p: keystone(by_group[1], p, cfg.selection_mode, kv) for p in cfg.sweep_ps}
    ctx.save_table("cells", pd.concat([cells_frame(p, pp) for p, (_, pp) in sweep.items()], ignore_index=True))
    ctx.save_table("sets", sets_frame({p: k for p, (k, _) in sweep.items()}))
    group_sets = {g: keystone(ms, cfg.top_p, cfg.selection_mode, kv)[0] for g, ms in sorted(by_group.items())}
    stab = stability(group_sets)
    ctx.save_table("stability", stab)
    ctx.save_tensors("keystone_mask", {t: torch.from_numpy(m) for t, m in key.items()})
    total = sum(w * model.info.n_layers for w in widths(model.info, types).values())
    per_prompt_size = count(per_prompt[0])
    ctx.log_metrics(
        keystone_count=count(key), keystone_fraction=count(key) / total,
        keystone_prompt_set_ratio=count(key) / per_prompt_size, keystone_p=cfg.top_p, n_prompts=len(by_group[1]),
        n_neurons=total, mlp_effective_neurons=mlp_effective(key),
        stability_iou=float(stab["iou"].mean()) if len(stab) else None,
        stability_iou_chance=float(stab["iou_chance"].mean()) if len(stab) else None,
    )

    smap = SliceMap(model, bias=cfg.zero_bias)
    writers = pd.DataFrame(columns=["type", "layer", "index", "pos0_norm_single", "cut_frac", "is_writer"])
    massive_dims: list[int] = []
    with ctx.weights_unchanged("the ablation conditions / SFT"):  # every edit below is undone exactly
        if cfg.ablation:  # 5. ablation with controls, 6. position 0 and the sink
            with ctx.timed("ablation"):
                writers, massive_dims = ablation_study(cfg, ctx, model, smap, key, sweep, total)
        ctx.save_table("keystone", keystone_frame(model, smap, key, means, group_sets, writers, massive_dims))
        if cfg.sft.enable:  # 7. keystone-only fine-tuning
            with ctx.timed("sft"):
                sft_study(cfg, ctx, model, smap, key)
    ctx.log_timings(cpu_seconds_total=round(time.process_time() - cpu0, 3))


# ----------------------------------------------------------------------------- stages


def ablation_study(cfg: KeystoneConfig, ctx: RunContext, model, smap: SliceMap, key, sweep, total: int):
    """Every perplexity condition (with position-0 norm and sink mass), tasks, writers, the p sweep."""
    chunks = ppl_chunks(model, cfg)
    batch = ppl_batch_size(model, cfg.ppl_len)
    tasks = load_tasks(cfg.task_suite, cfg.task_items, cfg.seed)
    rng = lambda kind, s: np.random.default_rng((cfg.seed, kind, s))
    norms = {t: torch.stack([smap.slice_norms(t, layer) for layer in range(model.info.n_layers)]).cpu().numpy()
             for t in key}
    conds = [Condition("base", None, cfg.top_p, None, tasks=True),
             Condition("keystone", None, cfg.top_p, key, tasks=True)]
    conds += [Condition("random", s, cfg.top_p, matched_random(key, rng(_RANDOM, s)), tasks=s == 1)
              for s in range(1, cfg.n_random_seeds + 1)]
    conds += [Condition("highnorm", s, cfg.top_p, highnorm(key, norms, cfg.highnorm_pool_frac, rng(_HIGHNORM, s)))
              for s in range(1, cfg.n_highnorm_seeds + 1)]
    conds.append(Condition("highnorm_top", None, cfg.top_p, highnorm(key, norms, cfg.highnorm_pool_frac, None)))
    conds += [Condition("swap", s, cfg.top_p, swap=swap_pairs(key, rng(_SWAP, s)))
              for s in range(1, cfg.n_swap_seeds + 1)]

    # Step 6: single-unit position-0 test on the first tokens of the first sequences
    mchunks = chunks[: cfg.massive_test_seqs, : cfg.massive_test_len]
    writers, _ = massive_writers(model, key, mchunks, cfg.rope_pair_ablation, progress=ctx.tqdm)
    ctx.save_table("massive_writers", writers)
    writer_units = [(r.type, int(r.layer), int(r["index"])) for _, r in writers[writers.is_writer].iterrows()]
    wmask = from_units(writer_units, key)
    conds.append(Condition("keystone_minus_massive", None, cfg.top_p, {t: key[t] & ~wmask[t] for t in key}))
    conds.append(Condition("massive_only", None, cfg.top_p, wmask))

    rows, sinks, stats = [], [], {}
    for cond in ctx.tqdm(conds, desc="conditions"):
        row, st = evaluate(model, smap, cond, chunks, batch, tasks, cfg.rope_pair_ablation)
        ctx.check_finite(f"perplexity of condition {cond.name} (seed {cond.seed})", row["ppl"])
        rows.append(row)
        sinks += sink_rows(cond, st)
        if cond.seed in (None, 1):
            stats[cond.name] = st
    ab = pd.DataFrame(rows)
    ctx.save_table("ablation", ab)
    ctx.save_table("sink", pd.DataFrame(sinks))

    n_strip = min(3, chunks.shape[0])  # token strip: per-token loss change, keystone - base
    delta = torch.zeros(n_strip, chunks.shape[1])
    delta[:, 1:] = stats["keystone"].nll[:n_strip] - stats["base"].nll[:n_strip]
    ctx.save_tensors("token_loss_delta", {"tokens": chunks[:n_strip].to(torch.int32), "delta": delta})
    ctx.save_table("token_strip", pd.DataFrame(
        [{"seq": s, "pos": j, "token_id": int(chunks[s, j]), "token": model.tokenizer.decode([int(chunks[s, j])]),
          "delta": float(delta[s, j])} for s in range(n_strip) for j in range(chunks.shape[1])]))

    sweep_rows = []  # the p sweep: keystone and one random seed per p (the main p reuses its rows)
    for p, (kp, _) in ctx.tqdm(list(sweep.items()), desc="p sweep"):
        if p == cfg.top_p:
            pk = float(ab.loc[ab.condition == "keystone", "ppl"].iloc[0])
            pr = float(ab.loc[(ab.condition == "random") & (ab.seed == 1), "ppl"].iloc[0])
        else:
            pk = evaluate(model, smap, Condition("keystone", None, p, kp), chunks, batch, None,
                          cfg.rope_pair_ablation)[0]["ppl"]
            pr = evaluate(model, smap, Condition("random", 1, p, matched_random(kp, rng(_RANDOM, 1))), chunks, batch,
                          None, cfg.rope_pair_ablation)[0]["ppl"]
        sweep_rows.append({"p": p, "keystone_count": count(kp), "keystone_fraction": count(kp) / total,
                           "ppl_keystone": pk, "ppl_random": pr})
    ctx.save_table("p_sweep", pd.DataFrame(sweep_rows))

    massive_dims = massive_residual_dims(model, mchunks)
    ctx.log_metrics(**ablation_metrics(ab, writer_units))
    return writers, massive_dims


def ablation_metrics(ab: pd.DataFrame, writer_units) -> dict:
    one = lambda c, col="ppl": float(ab.loc[ab.condition == c, col].iloc[0])
    med = lambda c: float(ab.loc[ab.condition == c, "ppl"].median())
    rnd1 = ab[(ab.condition == "random") & (ab.seed == 1)]
    return {
        "ppl_base": one("base"), "ppl_keystone_ablated": one("keystone"), "ppl_random_ablated": med("random"),
        "ppl_highnorm_ablated": med("highnorm"), "ppl_highnorm_top": one("highnorm_top"), "ppl_swap": med("swap"),
        "task_acc_base": one("base", "task_acc"), "task_acc_keystone_ablated": one("keystone", "task_acc"),
        "task_acc_random_ablated": float(rnd1["task_acc"].iloc[0]),
        "pos0_norm_base": one("base", "pos0_norm"), "pos0_norm_ablated": one("keystone", "pos0_norm"),
        "sink_mass_base": one("base", "sink_mass"), "sink_mass_ablated": one("keystone", "sink_mass"),
        "massive_writer_units": [list(u) for u in writer_units],
        "ppl_keystone_minus_massive": one("keystone_minus_massive"), "ppl_massive_only": one("massive_only"),
    }


def sft_study(cfg: KeystoneConfig, ctx: RunContext, model, smap: SliceMap, key) -> None:
    from .sft import run_sft

    train_items, eval_items = sft_data(cfg.sft.n_train, cfg.sft.n_eval, cfg.seed)
    rand = matched_random(key, np.random.default_rng((cfg.seed, _RANDOM, 1)))
    chunks = ppl_chunks(model, cfg)
    table, curves, evals = run_sft(model, smap, key, rand, cfg.sft, train_items, eval_items, chunks,
                                   ppl_batch_size(model, cfg.ppl_len), cfg.seed, progress=ctx.tqdm)
    ctx.save_table("sft", table)
    ctx.save_table("sft_curves", curves)
    ctx.save_table("sft_evals", evals)
    by = table[table.main_lr].set_index("variant")  # the headline metrics are at sft.lr
    metrics = {f"sft_task_gain_{v}": float(by.loc[v, "gain"]) for v in by.index}
    metrics.update({f"sft_broad_ppl_ratio_{v}": float(by.loc[v, "ppl_ratio"]) for v in by.index})
    if cfg.sft.lr_sweep:  # the learning-rate sweep: each sparse variant at its best lr (ties to the smaller lr)
        for v, g in table[table.variant != "full"].groupby("variant", sort=False):
            best = g.sort_values(["gain", "lr"], ascending=[False, True]).iloc[0]
            metrics.update({f"sft_best_lr_{v}": float(best.lr), f"sft_task_gain_{v}_best_lr": float(best.gain),
                            f"sft_broad_ppl_ratio_{v}_best_lr": float(best.ppl_ratio)})
    if "keystone" in by.index:
        metrics["sft_trainable_fraction_keystone"] = float(by.loc["keystone", "trainable_fraction"])
    metrics["sft_mask_exact"] = bool(table["mask_exact"].all())
    metrics["sft_task_acc_before"] = float(table["task_acc_before"].iloc[0])
    ctx.log_metrics(**metrics)


# ----------------------------------------------------------------------------- helpers


def ppl_chunks(model, cfg: KeystoneConfig) -> torch.Tensor:
    """(ppl_seqs, ppl_len) raw-text tokens of the fixed held-out corpus split (no chat template); a BOS
    model's chunks start with its BOS (position 0 is then the BOS, else the first text token)."""
    from interp import data

    source = "builtin:heldout" if cfg.ppl_corpus == "builtin" else cfg.ppl_corpus
    texts = data.load_texts(source, seed=0)
    return torch.tensor(data.token_windows(model.tokenizer, texts, cfg.ppl_seqs, cfg.ppl_len, model.info.bos_id))


@torch.no_grad()
def massive_residual_dims(model, chunks: torch.Tensor) -> list[int]:
    """Residual dimensions with |resid_post| > 100 x the median |resid_post| (over layers, tokens, dims)."""
    from interp import run_with_cache
    from interp.sites import Site

    sites = [Site("resid_post", layer) for layer in range(model.info.n_layers)]
    _, cache = run_with_cache(model, chunks.to(model.device), None, sites)
    r = torch.stack([cache[s].float().abs().cpu() for s in sites])  # (layer, seq, pos, d_model)
    med = float(r.median())
    peak = r.amax(dim=(0, 1, 2))
    return torch.nonzero(peak > 100 * med).flatten().tolist()


def keystone_frame(model, smap: SliceMap, key, means, group_sets, writers: pd.DataFrame, massive_dims) -> pd.DataFrame:
    """One row per keystone neuron: coordinates, weight norm, per-prompt mean |act| and rank, badges."""
    group1 = [(pid, m) for (g, pid), m in means.items() if g == 1]
    ranks = {}
    for pid, m in group1:
        for t in key:
            order = np.argsort(-m[t], axis=1, kind="stable")
            r = np.empty_like(order)
            np.put_along_axis(r, order, np.arange(order.shape[1])[None].repeat(order.shape[0], 0), axis=1)
            ranks[(pid, t)] = r
    wr = {(r.type, int(r.layer), int(r["index"])): r for _, r in writers.iterrows()}
    unembed = model.unembed_weight.detach().float()
    rows = []
    for t, layer, i in units(key):
        row = {"type": t, "layer": layer, "index": i, **neuron_coords(t, i, model.info),
               "weight_norm": float(smap.slice_norms(t, layer)[i])}
        ratios = []
        for pid, m in group1:
            row[f"rank_in_prompt_{pid}"] = int(ranks[(pid, t)][layer, i])
            row[f"mean_act_prompt_{pid}"] = float(m[t][layer, i])
            ratios.append(m[t][layer, i] / max(float(np.median(m[t][layer])), 1e-12))
        row["mean_act"] = float(np.mean([m[t][layer, i] for _, m in group1]))
        row["ratio_to_median"] = float(np.mean(ratios))
        row["n_groups_containing"] = int(sum(bool(s[t][layer, i]) for s in group_sets.values()))
        col = None
        if t in ("fwd_up", "fwd_down"):
            col = smap.neuron_slice("fwd_down", layer, i).float()
        elif t == "attn_o":
            col = smap.neuron_slice("attn_o", layer, i).float()
        if col is not None:
            top = (unembed @ col).topk(5).indices.tolist() if t != "attn_o" else []
            row["top_tokens"] = " | ".join(model.tokenizer.decode([j]) for j in top) if top else None
            row["out_argmax_dim"] = int(col.abs().argmax())
            row["massive_dim_badge"] = row["out_argmax_dim"] in set(massive_dims)
        else:
            row.update(top_tokens=None, out_argmax_dim=None, massive_dim_badge=False)
        w = wr.get((t, layer, i))
        row["is_massive_writer"] = bool(w.is_writer) if w is not None else False
        row["writer_cut_frac"] = float(w.cut_frac) if w is not None else None
        rows.append(row)
    return pd.DataFrame(rows)


def generations_frame(gens) -> pd.DataFrame:
    return pd.DataFrame([{"group": g.prompt.group, "prompt_id": g.prompt.id, "capability": g.prompt.capability,
                          "prompt": g.prompt.text, "templated_prompt": g.templated, "generated_text": g.text,
                          "n_prompt_tokens": g.n_prompt, "n_generated": g.n_steps} for g in gens])


def recording_metadata(model, types, gens, cfg) -> dict[str, str]:
    return {
        "hooks": json.dumps({t: recording_site(model, t, 0).tl_name.replace(".0.", ".{l}.") for t in types}),
        "positions": json.dumps({f"g{g.prompt.group}/{g.prompt.id}": [g.n_prompt - 1, g.n_prompt + g.n_steps - 2]
                                 for g in gens}),
        "dtype": dtype_name(model.dtype),
        "accumulation": "float32",
        "recording": cfg.recording,
        "slices": json.dumps({t: {"dim": model.anatomy.proj(0, SPECS[t].role).axis} for t in types}),
    }


def _groups(prompts):
    out = defaultdict(list)
    for p in prompts:
        out[p.group].append(p)
    return [out[g] for g in sorted(out)]
