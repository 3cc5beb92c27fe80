"""Step 7: the steering mini-study. x' = x + gamma f_max W_dec[i] at the SAE's hook, on every valid (non-pad)
position, including the positions decoded with the KV cache; greedy batched decoding with left padding,
explicit position ids and the tokenizer's attention mask; gamma 0 (the unsteered model) runs once for all
features. Accuracy from the last integer of the output; style = how many reasoning-detector families it shows.

Cached decoding runs on the plain HF model (where the bridge's hooks never fire), so the edit is the core's
`interp.steer(..., on="hf")` on the HF decoder layer behind the SAE's site (resid_post: the layer's output;
resid_pre: its input). Other site kinds decode through the hooked bridge without a cache (`on="hooked"`; slow, but
the same edit). The mechanical check re-encodes the residual the edit actually produced at the hook.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp import steer as steer_at
from interp.generate import greedy
from interp.sae import encode
from interp.sites import Site

from .acts import valid_positions
from .checks import n_families

PROMPT = "Solve the problem. Give the final answer as a number.\n\n{q}"


def last_int(text: str) -> int | None:
    """The last integer of the text (None without one, or when it has more than 15 digits)."""
    nums = re.findall(r"-?\d+", text.replace(",", ""))
    return int(nums[-1]) if nums and len(nums[-1].lstrip("-")) <= 15 else None


@torch.no_grad()
def steer(model, sae, site: Site, problems: Sequence[tuple[str, int]], features: Sequence[int],
          f_max: dict[int, float], gammas: Sequence[float], max_new: int, batch_size: int = 32
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steering rows: feature, gamma, problem_id, output, pred, correct, style_score; mechanical checks)."""
    chat = model.info.chat
    texts = [model.chat_text(PROMPT.format(q=q), system="") if chat else PROMPT.format(q=q) + "\n\nAnswer:"
             for q, _ in problems]
    encs = [model.tokenize(texts[i : i + batch_size], padding_side="left", templated=chat)
            for i in range(0, len(texts), batch_size)]
    fast = site.kind in ("resid_post", "resid_pre")
    rows, checks = [], []
    conditions = [(-1, 0.0)] + [(f, g) for f in features for g in gammas if g != 0]
    for f, g in conditions:
        vec = torch.zeros(model.info.d_model) if f < 0 else g * f_max[f] * sae.W_dec[f].detach().float().cpu()
        outs: list[list[int]] = []
        for enc in encs:
            if f < 0:
                outs += greedy(model, enc, max_new)
            elif fast:
                with steer_at(model, site, vec.to(model.device), enc["attention_mask"], on="hf"):
                    outs += greedy(model, enc, max_new)
            else:
                with steer_at(model, site, vec, enc["attention_mask"], on="hooked"):
                    outs += greedy(model, enc, max_new, hooked=True)
        for pid, (ids, (_, ans)) in enumerate(zip(outs, problems)):
            text = model.tokenizer.decode(ids, skip_special_tokens=True)
            pred = last_int(text)
            feats = features if f < 0 else [f]  # gamma 0 is shared by every feature
            for ff in feats:
                rows.append({"feature": int(ff), "gamma": 0.0 if f < 0 else float(g), "problem_id": pid,
                             "output": text, "pred": pred, "correct": pred == ans, "style_score": n_families(text)})
        if f >= 0:
            checks.append(mechanical_check(model, sae, site, encs[0], f, g, f_max[f], vec, fast))
    return pd.DataFrame(rows), pd.DataFrame(checks)


@torch.no_grad()
def mechanical_check(model, sae, site: Site, enc: dict, f: int, gamma: float, fmax: float, vec: Tensor,
                     fast: bool) -> dict:
    """Re-encode the residual the edit produced at the hook: the mean activation of f over valid positions >= 1
    must rise by >= 0.5 gamma f_max (for gamma > 0; fall for gamma < 0)."""
    from .acts import site_activations

    ids, am = enc["input_ids"].to(model.device), enc["attention_mask"].to(model.device)
    valid = valid_positions(am)
    clean = site_activations(model, site, ids, am)
    if fast:
        pos = (am.long().cumsum(-1) - 1).clamp(min=0)
        with steer_at(model, site, vec.to(model.device), am, on="hf") as steering:
            model.hf(input_ids=ids, attention_mask=am, position_ids=pos)
        steered = steering.out
    else:
        steered = clean + vec.to(clean) * am[..., None].to(clean)
    a0 = encode(sae, clean[valid])[:, f].float()
    a1 = encode(sae, steered[valid].to(clean))[:, f].float()
    rise = float((a1 - a0).mean())
    need = 0.5 * gamma * fmax
    ok = rise >= need if gamma > 0 else rise <= need
    return {"feature": int(f), "gamma": float(gamma), "f_max": float(fmax), "mean_rise": rise, "required": need,
            "ok": bool(ok)}


def summarize_steering(frame: pd.DataFrame, checks: pd.DataFrame) -> dict:
    base = frame[frame.gamma == 0].drop_duplicates("problem_id")
    acc_base = float(base.correct.mean()) if len(base) else float("nan")
    style_base = float(base.style_score.mean()) if len(base) else float("nan")
    steered = frame[frame.gamma != 0]
    per = steered.groupby(["feature", "gamma"]).agg(acc=("correct", "mean"), style=("style_score", "mean"))
    return {
        "steer_acc_base": acc_base,
        "steer_acc_best": float(per.acc.max()) if len(per) else acc_base,
        "steer_style_delta": float(per["style"].max() - style_base) if len(per) else 0.0,
        "steer_applied_ok": bool(len(checks) and checks.ok.all()),
    }


def np_or_none(x) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)
