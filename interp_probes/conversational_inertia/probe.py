"""Conversational inertia (arXiv 2602.03664): does the model copy its own earlier replies?

Method: ../shared/methods/conversational_inertia.md. The story:

1. teacher-forced transcripts of N prior rounds (normal, and control-worded earlier replies), rendered
   through the chat template with the token span of every segment;
2. one hooked pass per batch keeps, per layer, the reply x earlier-reply blocks and segment shares;
3. the diagonal mass of each head's blocks against a column-permutation null (z), and on control
   transcripts, where only the positional alignment is gone;
4. segment shares and enrichments against N (Spearman);
5. greedy actions in bait states under Long, Window(W), Last1, Clip(W) and Short, with paired
   bootstrap intervals of Long - policy;
6. Context Preference Learning pairs (prompt = Long context, chosen = Short reply, rejected = Long reply).
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pandas as pd

from interp.context import RunContext
from interp.precision import autocast_dtype, dtype_name, inference_autocast

from . import ConversationalInertiaConfig, behavior, cpl, envs
from .attention import key_fractions, layer_windows, measure, prepare
from .decode import plan as plan_prefixes
from .envs import Episode
from .render import SEGMENTS, SHARE_COLUMNS, render
from .stats import null_calibration, null_test, spearman


def run(cfg: ConversationalInertiaConfig, ctx: RunContext) -> None:
    model = ctx.model
    t0, cpu0 = time.perf_counter(), time.process_time()
    transcripts = attention_transcripts(cfg, ctx.rng, model.tokenizer)  # 1. data
    rendered = [render(model.tokenizer, envs.messages(ep, teacher_forced=True), model.info.chat) for ep in transcripts]
    preps = [prepare(r, cfg.target_turn) for r in rendered]
    viewers = viewer_transcripts(transcripts, cfg.n_view_transcripts)
    measured = measure(model, preps, cfg.attn_batch_size, viewers, ctx.tqdm)  # 2. measure
    t_attn = time.perf_counter()

    scores = diagonal_scores(measured.blocks, transcripts, cfg, ctx.rng)  # 3. diagonal vs null
    heads = head_table(scores, cfg, model.info.n_heads, model.info.n_kv_heads)
    top = heads.sort_values("z", ascending=False).head(cfg.n_top_heads)[["layer", "head"]].to_numpy()
    shares = share_table(measured.shares, preps, transcripts, layer_windows(model))  # 4. rounds
    t_stats = time.perf_counter()

    plan = behaviour_plan(model, cfg, ctx.rng)  # 5. behaviour (and the CPL states' prompts)
    decode_dtype = autocast_dtype(cfg.decode_dtype, model)
    with inference_autocast(decode_dtype, model.hf, model.device):
        outputs = behavior.decode(model, plan["requests"], cfg.max_new_tokens, cfg.decode_batch_size, ctx.tqdm)
    rows = behavior.score_rows(plan["scored"], outputs)
    summary = behavior.summarize(rows, cfg.n_boot, ctx.rng)
    t_decode = time.perf_counter()
    pairs = cpl.pairs(plan["cpl_states"], plan["cpl_long"], plan["cpl_short"], plan["cpl_messages"], outputs,
                      cfg.cpl_filter)  # 6. preference pairs

    calib = null_calibration(100, 25, 25, cfg.n_perm, ctx.rng, mode=cfg.null)  # invariants
    constant = null_test([np.full((25, 25), 1 / 25)], 0, 0, cfg.n_perm, ctx.rng, cfg.null).z

    ctx.save_table("transcripts", transcript_table(transcripts, rendered))
    ctx.save_tensors("diag_scores", scores["tensors"])
    ctx.save_table("heads", heads)
    ctx.save_tensors("blocks", view_blocks(measured, viewers, top))
    ctx.save_table("view_tokens", view_tokens(model, rendered, viewers))
    ctx.save_table("segment_shares", shares)
    ctx.save_table("behavior", rows)
    ctx.save_table("behavior_summary", summary)
    ctx.save_jsonl("cpl_pairs", pairs)
    ctx.save_table("cpl_pairs", cpl.table(pairs))
    ctx.log_metrics(
        **scores["metrics"],
        **head_counts(heads, cfg.z_thresh),
        **share_trends(shares),
        **behavior.headline(summary, rows),
        n_cpl_pairs=len(pairs),
        n_cpl_states=len(plan["cpl_states"]),
        n_transcripts=int(sum(ep.kind == "normal" for ep in transcripts)),
        n_control_transcripts=int(sum(ep.kind == "control" for ep in transcripts)),
        pattern_row_sum_max_err=measured.row_sum_err,
        share_sum_max_err=measured.share_sum_err,
        null_calibration_within_3=int((np.abs(calib) <= 3).sum()),
        null_calibration_n=len(calib),
        null_constant_block_z=float(constant),
        colors_single_token=colors_single_token(model),
        role_format="chat_template" if model.info.chat else "plain_text",
        decode_dtype=dtype_name(decode_dtype),
        attention_tokens=int(sum(len(p.ids) for p in preps)),
        **decode_cost(plan["requests"]),
    )
    ctx.log_timings(
        attention_seconds=round(t_attn - t0, 2), statistics_seconds=round(t_stats - t_attn, 2),
        decode_seconds=round(t_decode - t_stats, 2), cpu_seconds=round(time.process_time() - cpu0, 1),
    )


# ============================================================================= 1. transcripts


def attention_transcripts(cfg: ConversationalInertiaConfig, rng: np.random.Generator, tokenizer) -> list[Episode]:
    """n_transcripts_per_n normal transcripts per N (envs and templates in turn), then the controls, whose
    wording is the one least index-aligned with their template under this tokenizer."""
    encode = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    out, i = [], 0
    for n in cfg.rounds_grid:
        for k in range(cfg.n_transcripts_per_n):
            env = cfg.envs[k % len(cfg.envs)]
            out.append(envs.attention_transcript(env, n, i % cfg.n_templates, rng, eid=f"t{i:03d}"))
            i += 1
    ns = [n for n in cfg.rounds_grid if n >= 2]
    for k in range(cfg.n_control_transcripts):
        env = cfg.envs[(k // len(ns)) % len(cfg.envs)]
        t = i % cfg.n_templates
        wording = envs.control_wording(env, t, encode)
        out.append(envs.attention_transcript(env, ns[k % len(ns)], t, rng, control=wording, eid=f"c{k:03d}"))
        i += 1
    return out


def viewer_transcripts(transcripts: list[Episode], count: int) -> list[int]:
    """Normal transcripts for the page: the smallest N >= 2 first (short to store), alternating envs."""
    normal = [i for i, ep in enumerate(transcripts) if ep.kind == "normal"]
    ranked = sorted(normal, key=lambda i: (transcripts[i].n < 2, transcripts[i].n, i))
    return sorted(ranked[:count])


# ============================================================================= 3. diagonal scores


def diagonal_scores(blocks: list[list[np.ndarray]], transcripts: list[Episode], cfg: ConversationalInertiaConfig,
                    rng: np.random.Generator) -> dict:
    """z, diag, dr [L, H, δ, w] (and head-averaged [L, δ, w]) for normal N >= 2 and control transcripts."""
    normal = [i for i, ep in enumerate(transcripts) if ep.kind == "normal" and ep.n >= 2]
    if not normal:  # a rounds grid of N = 1 only
        normal = [i for i, ep in enumerate(transcripts) if ep.kind == "normal"]
    control = [i for i, ep in enumerate(transcripts) if ep.kind == "control"]
    tensors, metrics = {"offsets": np.array(cfg.offsets), "bands": np.array(cfg.bands)}, {}
    w0 = cfg.bands.index(0)
    for name, idx in (("", normal), ("_control", control)):
        if not idx:
            continue
        per_head = [b for i in idx for b in blocks[i]]  # [L, H, n, m] each
        per_layer = [b.mean(1) for b in per_head]  # head-averaged blocks [L, n, m]
        # [δ][w] grids of per-head tests and head-averaged tests
        tests = [[null_test(per_head, d, w, cfg.n_perm, rng, cfg.null) for w in cfg.bands] for d in cfg.offsets]
        avg = [[null_test(per_layer, d, w, cfg.n_perm, rng, cfg.null).z for w in cfg.bands] for d in cfg.offsets]
        z, diag, dr = _grid(tests, "z"), _grid(tests, "observed"), _grid(tests, "ratio")
        zl = np.stack([np.stack(r, -1) for r in avg], -2)
        tensors[f"z{name}"] = z.astype(np.float32)  # [L, H, δ, w]
        tensors[f"diag{name}"] = diag.astype(np.float32)
        tensors[f"dr{name}"] = dr.astype(np.float32)
        tensors[f"z_headavg{name}"] = zl.astype(np.float32)  # [L, δ, w]
        headline = [cfg.offsets.index(d) for d in (0, 1) if d in cfg.offsets]
        metrics[f"max_diag_z{name}"] = float(tensors[f"z{name}"][:, :, headline, w0].max())
        metrics[f"max_diag_z_headavg{name}"] = float(tensors[f"z_headavg{name}"][:, headline, w0].max())
        metrics[f"max_diag_ratio{name}"] = float(tensors[f"dr{name}"][:, :, headline, w0].max())
    metrics["diag_n_blocks"] = sum(len(blocks[i]) for i in normal)
    return {"tensors": tensors, "metrics": metrics}


def _grid(tests, attr: str) -> np.ndarray:
    """[δ][w] lists of NullTest -> (..., δ, w) array of one attribute."""
    return np.stack([np.stack([getattr(t, attr) for t in row], -1) for row in tests], -2)


def head_table(scores: dict, cfg: ConversationalInertiaConfig, n_heads: int, n_kv_heads: int) -> pd.DataFrame:
    """One row per (layer, head): the best δ at w = 0, its z and ratio, the control z, inertia flag."""
    t = scores["tensors"]
    w0 = cfg.bands.index(0)
    z, dr = t["z"][..., w0], t["dr"][..., w0]  # [L, H, δ]
    best = z.argmax(-1)
    zc = t.get("z_control")
    rows = []
    for layer in range(z.shape[0]):
        for head in range(z.shape[1]):
            b = int(best[layer, head])
            rows.append({
                "layer": layer, "head": head, "kv_group": head // max(1, n_heads // max(1, n_kv_heads)),
                "best_delta": int(cfg.offsets[b]), "z": float(z[layer, head, b]), "dr": float(dr[layer, head, b]),
                **{f"z_delta{d}": float(z[layer, head, k]) for k, d in enumerate(cfg.offsets)},
                "z_control": float(zc[layer, head, :, w0].max()) if zc is not None else float("nan"),
                "is_inertia_head": bool(z[layer, head].max() >= cfg.z_thresh),
            })
    return pd.DataFrame(rows)


def head_counts(heads: pd.DataFrame, z_thresh: float) -> dict:
    groups = heads.groupby(["layer", "kv_group"]).z.max()
    return {
        "n_inertia_heads": int(heads.is_inertia_head.sum()),
        "n_heads_z_gt_3": int((heads.z > 3).sum()),
        "n_heads": len(heads),
        "n_inertia_kv_groups": int((groups >= z_thresh).sum()),
        "n_inertia_heads_control": int((heads.z_control >= z_thresh).sum()),
    }


# ============================================================================= 4. segment shares


def share_table(shares: np.ndarray, preps, transcripts: list[Episode], windows) -> pd.DataFrame:
    """Long table: transcript, N, layer, segment, share (of non-sink attention), key fraction, enrichment."""
    rows = []
    cols = list(SEGMENTS) + ["recent_assistant"]
    for s, (prep, ep) in enumerate(zip(preps, transcripts)):
        kf = key_fractions(prep.onehot, prep.rows, windows)  # [L, len(cols)]
        for layer in range(shares.shape[1]):
            for c, seg in enumerate(SHARE_COLUMNS):
                frac = float(kf[layer, cols.index(seg)]) if seg in cols else float("nan")
                share = float(shares[s, layer, c])
                rows.append({
                    "transcript_id": ep.id, "env": ep.env, "kind": ep.kind, "N": ep.n, "layer": layer,
                    "layer_type": "global" if windows[layer] is None else "local", "segment": seg, "share": share,
                    "key_frac": frac, "enrichment": share / frac if frac > 0 else float("nan"),
                })
    return pd.DataFrame(rows)


def share_trends(shares: pd.DataFrame) -> dict:
    """Spearman ρ of N against layer-averaged shares and enrichments (normal transcripts)."""
    normal = shares[shares.kind == "normal"]
    per = normal.groupby(["transcript_id", "N", "segment"])[["share", "key_frac"]].mean().reset_index()
    per["enrichment"] = per.share / per.key_frac
    m: dict = {}
    for seg in ("prev_assistant", "system", "user", "recent_assistant", "self"):
        g = per[per.segment == seg]
        m[f"{seg}_share_rho"], m[f"{seg}_share_p"] = spearman(g.N, g.share)
    for seg in ("prev_assistant", "user", "system", "recent_assistant"):
        g = per[per.segment == seg]
        m[f"{seg}_enrichment_rho"], m[f"{seg}_enrichment_p"] = spearman(g.N, g.enrichment)
        last = g[g.N == g.N.max()]
        m[f"{seg}_enrichment_last"] = float(last.enrichment.mean()) if len(last) else float("nan")
    by_n = per.groupby(["segment", "N"]).share.mean()
    m["share_by_n"] = {seg: {str(int(n)): float(v) for n, v in by_n[seg].items()} for seg in ("prev_assistant",
                       "system", "user") if seg in by_n.index.get_level_values(0)}
    return m


# ============================================================================= 5. behaviour plan


def behaviour_plan(model, cfg: ConversationalInertiaConfig, rng: np.random.Generator) -> dict:
    """Every prompt to decode: bait histories by N and policy, cycle controls, DoorWorld, and CPL states."""
    n_max = max(cfg.bait_rounds_grid)
    req = lambda ep, policy: behavior.request(model, ep, policy, cfg.window_w, cfg.clip_w)  # noqa: E731
    scored, states = [], []
    bait = envs.bait_episodes("doorexplore", "bait", cfg.n_bait_episodes, n_max, cfg.n_templates, cfg.clip_w, rng)
    for n in sorted(cfg.bait_rounds_grid):
        for ep in bait:
            ep_n = ep if n == n_max else ep.truncated(n)
            states.append(ep_n)
            for policy in (cfg.policies if n == n_max else ("long",)):
                scored.append(req(ep_n, policy))
    cycle = envs.bait_episodes("doorexplore", "cycle", cfg.n_control_episodes, n_max, cfg.n_templates, cfg.clip_w, rng)
    for ep in cycle:
        states.append(ep)
        scored += [req(ep, "long"), req(ep, "window")]
    world = envs.bait_episodes("doorworld", "bait", cfg.n_doorworld_episodes, n_max, cfg.n_templates, cfg.clip_w, rng)
    for ep in world:
        states.append(ep)
        scored += [req(ep, "long"), req(ep, "short")]
    chosen = sorted(rng.choice(len(states), size=min(cfg.n_cpl_states, len(states)), replace=False).tolist())
    cpl_states, cpl_long, cpl_short, cpl_messages, extra = [], {}, {}, {}, []
    for i in chosen:
        ep = states[i]
        sid = f"{ep.id}-n{ep.n}"
        ep = dataclasses.replace(ep, id=sid)
        long, short = req(ep, "long"), req(ep, "short")
        cpl_states.append(ep)
        cpl_long[sid], cpl_short[sid], cpl_messages[sid] = long.text, short.text, long.messages
        extra += [long, short]
    return {"requests": scored + extra, "scored": scored, "cpl_states": cpl_states, "cpl_long": cpl_long,
            "cpl_short": cpl_short, "cpl_messages": cpl_messages}


# ============================================================================= artifacts


def transcript_table(transcripts: list[Episode], rendered) -> pd.DataFrame:
    return pd.DataFrame([{
        "transcript_id": ep.id, "env": ep.env, "kind": ep.kind, "N": ep.n, "template": ep.template,
        "rendered_text": r.text, "n_tokens": len(r), "spans": json.dumps(r.spans()),
    } for ep, r in zip(transcripts, rendered)])


def view_blocks(measured, viewers: list[int], top: np.ndarray) -> dict[str, np.ndarray]:
    """Blocks and reply rows of the top heads for the viewer transcripts, plus head-averaged blocks."""
    out: dict[str, np.ndarray] = {"heads": top.astype(np.int64), "transcripts": np.array(viewers, np.int64)}
    ls, hs = top[:, 0], top[:, 1]
    for k, i in enumerate(viewers):
        block = measured.blocks[i][-1]  # [L, H, n, m], the most recent earlier reply
        out[f"block_{k}"] = block[ls, hs].astype(np.float32)
        out[f"headavg_block_{k}"] = block.mean(1).astype(np.float32)
        out[f"rows_{k}"] = measured.rows[i][ls, hs].astype(np.float32)
    return out


def view_tokens(model, rendered, viewers: list[int]) -> pd.DataFrame:
    """Tokens of the viewer transcripts with their segment and whether they are block rows / columns."""
    rows = []
    for k, i in enumerate(viewers):
        r = rendered[i]
        resp, prev = range(*r.response.content), range(*r.previous_replies[-1].content)
        toks = model.to_str_tokens(r.ids)
        for pos, tok in enumerate(toks):
            rows.append({"view": k, "transcript": i, "position": pos, "token": tok, "segment": r.segment[pos],
                         "row": resp.index(pos) if pos in resp else -1, "col": prev.index(pos) if pos in prev else -1})
    return pd.DataFrame(rows)


def decode_cost(requests) -> dict:
    """Distinct prompts, their tokens, and the tokens actually prefilled with the shared-prefix cache."""
    ids = {r.text: tuple(r.ids) for r in requests}
    _, jobs = plan_prefixes(list(ids.values()))
    keep: dict[int, int] = {}
    for j in jobs:
        keep[j.root] = max(keep.get(j.root, 0), j.shared)
    return {
        "n_decoded_prompts": len(ids),
        "decoded_prompt_tokens": int(sum(len(p) for p in ids.values())),
        "prefilled_tokens": int(sum(keep.values()) + sum(len(j.prompt) - j.shared for j in jobs)),
    }


def colors_single_token(model) -> bool:
    """Each colour (with its leading space) is one token: index alignment needs it (method pitfall)."""
    return all(len(model.tokenizer.encode(" " + c, add_special_tokens=False)) == 1 for c in envs.COLORS)
