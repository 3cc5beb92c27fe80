"""Behaviour under context policies: batched greedy actions in bait states, rates and paired intervals.

Every (episode, policy) becomes a prompt; identical prompts are decoded once (the CPL pairs reuse the
behaviour runs' generations) by batched greedy decoding on the plain HF model with a shared-prefix KV
cache (`decode.shared_prefix_greedy`; the same continuations as `interp.generate.greedy`, which it
falls back to for sliding-window models).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from interp.generate import default_stop_ids

from . import envs
from .decode import shared_prefix_greedy
from .envs import Episode
from .render import render
from .stats import paired_bootstrap, spearman


@dataclass
class Request:
    """One decode: an episode under a policy."""

    episode: Episode
    policy: str
    n: int
    messages: list[dict[str, str]]
    text: str
    ids: list[int]
    kept: int

    @property
    def n_tokens(self) -> int:
        return len(self.ids)


def request(model, ep: Episode, policy: str, window_w: int, clip_w: int) -> Request:
    keep = envs.kept_rounds(policy, ep.n, window_w, clip_w, ep.clip_phase)
    msgs = envs.messages(ep, keep)
    r = render(model.tokenizer, msgs, model.info.chat, generation_prompt=True)
    return Request(ep, policy, ep.n, msgs, r.text, r.ids, keep)


def stop_ids(model) -> list[int]:
    """End-of-turn tokens; for the plain-text role format also the newline tokens (a reply is one line)."""
    ids = set(default_stop_ids(model))
    if not model.info.chat:
        for nl in ("\n", "\n\n"):
            enc = model.tokenizer.encode(nl, add_special_tokens=False)
            if len(enc) == 1:
                ids.add(enc[0])
    return sorted(ids)


def decode(model, requests: Sequence[Request], max_new_tokens: int, batch_size: int,
           progress: Callable | None = None) -> dict[str, str]:
    """prompt text -> the model's reply (greedy), each distinct prompt decoded once."""
    ids = {r.text: tuple(r.ids) for r in requests}
    gen = shared_prefix_greedy(model, list(ids.values()), max_new_tokens, stop_ids(model), batch_size=batch_size,
                               progress=progress)
    return {text: envs.reply_text(model.tokenizer.decode(gen[p], skip_special_tokens=True), model.info.chat)
            for text, p in ids.items()}


def score_rows(requests: Sequence[Request], outputs: dict[str, str]) -> pd.DataFrame:
    """One row per request: the output, the parsed action and what it counts as."""
    rows = []
    for r in requests:
        out = outputs[r.text]
        action, formatted = envs.parse_action(out)
        ep = r.episode
        rows.append({
            "episode_id": ep.id, "env": ep.env, "kind": ep.kind, "policy": r.policy, "N": r.n,
            "kept_rounds": r.kept, "c_prev": ep.c_prev, "c_new": ep.meta.get("c_new"),
            "correct": ",".join(ep.correct), "context_tokens": r.n_tokens, "output": out, "parsed": action,
            "format_ok": formatted, "unparsed": action is None, **envs.score(ep, action),
        })
    return pd.DataFrame(rows)


def summarize(rows: pd.DataFrame, n_boot: int, rng: np.random.Generator) -> pd.DataFrame:
    """Rates per (env, kind, N, policy) and the paired Long - policy differences with bootstrap CIs."""
    out = []
    for (env, kind, n), grp in rows.groupby(["env", "kind", "N"], sort=True):
        long = grp[grp.policy == "long"].set_index("episode_id")
        for policy, g in grp.groupby("policy", sort=False):
            rec = {
                "env": env, "kind": kind, "N": int(n), "policy": policy, "n_episodes": len(g),
                "repeat_rate": g.repeated.mean(), "success_rate": g.success.mean(),
                "retry_known_locked_rate": g.retry_known_locked.mean(), "unparsed_rate": g.unparsed.mean(),
                "format_rate": g.format_ok.mean(), "mean_context_tokens": g.context_tokens.mean(),
                "mean_kept_rounds": g.kept_rounds.mean(),
                "diff": np.nan, "ci_low": np.nan, "ci_high": np.nan,
            }
            if policy != "long" and len(long):
                g = g.set_index("episode_id")
                both = long.index.intersection(g.index)
                d, lo, hi = paired_bootstrap(long.loc[both, "repeated"].to_numpy(float),
                                             g.loc[both, "repeated"].to_numpy(float), n_boot, rng)
                rec.update(diff=d, ci_low=lo, ci_high=hi)
            out.append(rec)
    frame = pd.DataFrame(out)
    if len(frame):
        frame["_order"] = frame.policy.map({p: i for i, p in enumerate(envs.POLICIES)})
        frame = frame.sort_values(["env", "kind", "N", "_order"]).drop(columns="_order").reset_index(drop=True)
    return frame


def headline(summary: pd.DataFrame, rows: pd.DataFrame) -> dict:
    """The manifest's behaviour metrics: DoorExplore bait at the largest N, plus controls and DoorWorld."""
    m: dict = {}
    bait = summary[(summary.env == "doorexplore") & (summary.kind == "bait")]
    if not len(bait):
        return m
    n_max = int(bait.N.max())
    top = bait[bait.N == n_max].set_index("policy")
    for policy, r in top.iterrows():
        m[f"repeat_rate_{policy}"] = float(r.repeat_rate)
        m[f"success_rate_{policy}"] = float(r.success_rate)
        m[f"format_rate_{policy}"] = float(r.format_rate)
        m[f"unparsed_rate_{policy}"] = float(r.unparsed_rate)
        m[f"mean_context_tokens_{policy}"] = float(r.mean_context_tokens)
        if policy != "long":
            m[f"repeat_diff_long_{policy}"] = float(r["diff"])
            m[f"repeat_diff_long_{policy}_ci_low"] = float(r.ci_low)
            m[f"repeat_diff_long_{policy}_ci_high"] = float(r.ci_high)
    long = bait[bait.policy == "long"].sort_values("N")
    m["repeat_rate_long_by_n"] = {str(int(n)): float(v) for n, v in zip(long.N, long.repeat_rate)}
    ep = rows[(rows.env == "doorexplore") & (rows.kind == "bait") & (rows.policy == "long")]
    rho, p = spearman(ep.N, ep.repeated.astype(float))
    m["repeat_rate_long_n_rho"], m["repeat_rate_long_n_p"] = rho, p
    m["bait_n"] = n_max
    cyc = summary[(summary.env == "doorexplore") & (summary.kind == "cycle")].set_index("policy")
    for policy, r in cyc.iterrows():
        m[f"retry_known_locked_rate_{policy}"] = float(r.retry_known_locked_rate)
        m[f"cycle_success_rate_{policy}"] = float(r.success_rate)
    world = summary[(summary.env == "doorworld") & (summary.kind == "bait")].set_index("policy")
    for policy, r in world.iterrows():
        m[f"doorworld_repeat_rate_{policy}"] = float(r.repeat_rate)
        m[f"doorworld_success_rate_{policy}"] = float(r.success_rate)
    return m
