"""Step 7: the steering mini-study. x' = x + gamma f_max W_dec[i] at the SAE's hook, on every valid (non-pad)
position, including the positions decoded with the KV cache; greedy batched decoding with left padding,
explicit position ids and the tokenizer's attention mask; gamma 0 (the unsteered model) runs once for all
features. Accuracy from the last integer of the output; style = how many reasoning-detector families it shows.

Cached decoding runs on the plain HF model (where the bridge's hooks never fire), so the edit is a torch hook on
the HF decoder layer behind the SAE's site (resid_post: the layer's output; resid_pre: its input). Other site
kinds decode through the hooked bridge without a cache (slow, but the same edit). The mechanical check re-encodes
the residual the edit actually produced at the hook.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp.generate import greedy
from interp.sae import encode
from interp.sites import Site

from .acts import valid_positions
from .checks import n_families

PROMPT = "Solve the problem. Give the final answer as a number.\n\n{q}"


@contextlib.contextmanager
def hf_steer(model, site: Site, vec: Tensor, state: dict) -> Iterator[None]:
    """Add `vec` at `site` of the plain HF model on valid positions (state["mask"]: the prompt's attention mask;
    later single-token steps are all valid). state["out"] receives the edited activation of the last call."""

    def edit(x: Tensor) -> Tensor:
        mask = state.get("mask")
        add = vec.to(x)
        if mask is not None and x.shape[1] == mask.shape[1]:
            x = x + add * mask[..., None].to(x)
        else:
            x = x + add
        state["out"] = x.detach()
        return x

    layer = model.layer_module(site.layer)
    if site.kind == "resid_post":
        def hook(mod, args, output):
            if isinstance(output, tuple):
                return (edit(output[0]), *output[1:])
            return edit(output)

        handle = layer.register_forward_hook(hook)
    elif site.kind == "resid_pre":
        def pre(mod, args, kwargs):
            if args:
                return (edit(args[0]), *args[1:]), kwargs
            kwargs = dict(kwargs)
            kwargs["hidden_states"] = edit(kwargs["hidden_states"])
            return args, kwargs

        handle = layer.register_forward_pre_hook(pre, with_kwargs=True)
    else:
        raise NotImplementedError(site.kind)
    try:
        yield
    finally:
        handle.remove()


def _masked_add(vec: Tensor, mask: Tensor):
    """x + vec on the prompt's real tokens and on every generated position (the uncached hooked path)."""

    def edit(x: Tensor) -> Tensor:
        extra = x.shape[1] - mask.shape[1]
        m = torch.cat([mask.to(x.device), torch.ones(mask.shape[0], extra, dtype=mask.dtype, device=x.device)], 1)
        return x + vec.to(x) * m[..., None].to(x)

    return edit


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
            state = {"mask": enc["attention_mask"]}
            if f < 0:
                outs += greedy(model, enc, max_new)
            elif fast:
                with hf_steer(model, site, vec.to(model.device), state):
                    outs += greedy(model, enc, max_new)
            else:
                from interp import intervene

                with intervene(model, site, _masked_add(vec, enc["attention_mask"])):
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
        state = {"mask": am}
        pos = (am.long().cumsum(-1) - 1).clamp(min=0)
        with hf_steer(model, site, vec.to(model.device), state):
            model.hf(input_ids=ids, attention_mask=am, position_ids=pos)
        steered = state["out"]
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
