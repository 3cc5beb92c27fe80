"""self_interp's metrics and timings from the fitted adapters, their controls and the layer sweep (split from
probe.py)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from interp.precision import dtype_name

from .adapters import n_params
from .evaluate import Retriever, bias_share, paired_gain
from .inject import PrefixCache, label_loss, make_batch
from .vectors import first_tokens

if TYPE_CHECKING:
    from .state import Experiment, LayerResult

CORE = ("identity", "bias_only", "scalar_affine")


def summarize(exp: Experiment, main: LayerResult, controls: LayerResult, sweep: list[LayerResult], layer: int) -> dict:
    d = exp.d
    m: dict = {"layer": layer, "retrieval_scorer": exp.retriever.scorer,
               "template": exp.tmpl.kind, "template_system": exp.tmpl.system, "placeholder": exp.tmpl.placeholder,
               "n_topics": len(exp.topics),
               "n_heldout": len(exp.idx("heldout")), "n_train": len(exp.idx("train")), "n_val": len(exp.idx("val")),
               "recall_chance_at_1": 1 / len(exp.topics), "recall_chance_at_10": min(1.0, 10 / len(exp.topics)),
               "identity_best_scale": main.s_star, "median_embedding_norm": exp.median_norm,
               "identity_scale_at_edge": main.s_star in (min(main.scales), max(main.scales)),
               "adapter_params": n_params("scalar_affine", d),
               "compute_dtype": dtype_name(exp.compute_dtype)}
    if "scalar_affine" in main.adapters and main.adapters["scalar_affine"].n_trainable() != m["adapter_params"]:
        raise RuntimeError("scalar_affine's trainable tensors do not match d + 1")
    m["val_loss_identity"] = min(main.scale_losses)
    curves = main.curves
    for v, ad in main.adapters.items():
        m[f"params_{v}"] = ad.n_trainable()
        if v != "identity" and len(curves):
            m[f"val_loss_{v}"] = float(curves[curves.variant == v].val_loss.min())
        m[f"recall_at_1_{v}"] = main.r(v, 1)
        m[f"recall_at_10_{v}"] = main.r(v, 10)
        if len(exp.train_sample):
            m[f"train_recall_at_1_{v}"] = main.r(v, 1, "train")
            m[f"train_recall_at_10_{v}"] = main.r(v, 10, "train")
        if v != "identity":
            m[f"learned_scale_{v}"] = ad.scale if v != "full_rank" else None
            m[f"bias_norm_{v}"] = ad.bias_norm
    m["recall_at_1_logit_lens"] = main.r("logit_lens", 1)
    m["recall_at_10_logit_lens"] = main.r("logit_lens", 10)
    if "scalar_affine" in main.adapters:
        m["self_interp_margin_at_1"] = m["recall_at_1_scalar_affine"] - m["recall_at_1_logit_lens"]
        m["self_interp_margin_at_10"] = m["recall_at_10_scalar_affine"] - m["recall_at_10_logit_lens"]
        g = main.generations
        sa = g[(g.variant == "scalar_affine") & (g.split == "heldout")]
        m["exact_match_frac_scalar_affine"] = float(sa.exact_match.mean())
    if {"identity", "bias_only", "scalar_affine"} <= set(main.adapters):
        share = bias_share(m["recall_at_10_bias_only"], m["recall_at_10_identity"], m["recall_at_10_scalar_affine"])
        m["bias_share"] = share
        m["bias_share_defined"] = math.isfinite(share)
    for name in ("shuffled", "embed_control"):
        if name in controls.adapters:
            m[f"recall_at_1_{name}"] = controls.r(name, 1)
            m[f"recall_at_10_{name}"] = controls.r(name, 10)
    m.update(paired_gains(exp, main, controls))
    for v in main.adapters:
        if v != "identity" and len(exp.train_sample):
            m[f"train_minus_heldout_recall1_{v}"] = m[f"train_recall_at_1_{v}"] - m[f"recall_at_1_{v}"]
    m.update(lexical_recall(exp, main, controls))
    if controls.embed is not None:
        m["n_embed_control"] = int(len(controls.embed[0]))
        m["n_embed_control_heldout"] = int(len(np.intersect1d(exp.idx("heldout"), controls.embed[0])))
    m.update(echo_metrics(exp, main))
    m["prefix_cache_loss_diff"] = prefix_cache_diff(exp, main)
    m["recall_at_10_by_layer"] = {
        v: {str(r.layer): r.r(v, 10) for r in sweep} for v in ("identity", "scalar_affine", "logit_lens")
    }
    m["recall_at_1_by_layer"] = {
        v: {str(r.layer): r.r(v, 1) for r in sweep} for v in ("identity", "scalar_affine", "logit_lens")
    }
    m["optimizer_adapter_only"] = all(getattr(ad, "optimizer_adapter_only", True)
                                      for r in [*sweep, controls] for ad in r.adapters.values())
    return m


def timings(main: LayerResult, controls: LayerResult, sweep: list[LayerResult], extract_s: float) -> dict:
    """Wall-clock seconds per stage, and the spec's two budgets: core (identity, bias_only,
    scalar_affine, both controls, logit lens, scale sweep) and extended (the other variants and the
    layer sweep)."""
    out = {f"{k}_s": round(v, 1) for k, v in main.seconds.items()}
    out.update({f"{k}_s": round(v, 1) for k, v in controls.seconds.items()})
    out.update({f"layer{r.layer}_s": round(sum(r.seconds.values()), 1) for r in sweep if r is not main})
    core_keys = {"scale_sweep", "eval_logit_lens", "scale_recall"} | {f"{p}_{v}" for p in ("train", "eval")
                                                                      for v in CORE}
    core = extract_s + sum(v for k, v in main.seconds.items() if k in core_keys) + sum(controls.seconds.values())
    extended = sum(v for k, v in main.seconds.items() if k not in core_keys)
    extended += sum(sum(r.seconds.values()) for r in sweep if r is not main)
    out.update(core_s=round(core, 1), extended_s=round(extended, 1))
    return out


def _heldout_hits(res: LayerResult, variant: str) -> pd.Series:
    """Hit at 1 of `variant` per held-out topic id."""
    g = res.generations
    rows = g[(g.variant == variant) & (g.split == "heldout")] if len(g) else g
    return rows.set_index("topic_id").hit_at_1 if len(rows) else pd.Series(dtype=bool)


def paired_gains(exp: Experiment, main: LayerResult, controls: LayerResult) -> dict:
    """recall@1 gains of scalar_affine over identity and over the shuffled control, paired over the same
    held-out topics, with 95 % paired bootstrap intervals (`recall1_gain_vs_<other>`, `..._ci_lo`, `..._ci_hi`)."""
    out: dict = {}
    if "scalar_affine" not in main.adapters:
        return out
    sa = _heldout_hits(main, "scalar_affine")
    others = {"identity": _heldout_hits(main, "identity"), "shuffled": _heldout_hits(controls, "shuffled")}
    rng = np.random.default_rng([exp.cfg.seed, 7])
    for name, hits in others.items():
        if not len(hits):
            continue
        both = sa.index.intersection(hits.index)
        gain, lo, hi = paired_gain(sa[both].to_numpy(), hits[both].to_numpy(), rng, exp.cfg.bootstrap)
        out.update({f"recall1_gain_vs_{name}": gain, f"recall1_gain_vs_{name}_ci_lo": lo,
                    f"recall1_gain_vs_{name}_ci_hi": hi})
    return out


def lexical_recall(exp: Experiment, main: LayerResult, controls: LayerResult) -> dict:
    """The same held-out labels rescored with the lexical (character n-gram TF-IDF) scorer:
    `recall_at_1_<variant>_lexical` and `recall_at_10_<variant>_lexical` (the MiniLM scorer credits word fragments)."""
    if exp.retriever.scorer == "lexical":
        return {}
    lex = Retriever(exp.topics, "lexical")
    out: dict = {}
    for res, names in ((main, list(main.adapters)), (controls, list(controls.adapters))):
        g = res.generations
        for v in names:
            rows = g[(g.variant == v) & (g.split == "heldout")] if len(g) else g
            if not len(rows):
                continue
            _, _, hits = lex.rank_of(rows.generated_label.tolist(), rows.topic_id.to_numpy())
            out[f"recall_at_1_{v}_lexical"] = float(hits[1].mean())
            out[f"recall_at_10_{v}_lexical"] = float(hits[10].mean())
    return out


def echo_metrics(exp: Experiment, main: LayerResult) -> dict:
    """How often the logit lens puts the topic's own first token on top (token echo)."""
    g = main.generations
    ll = g[g.variant == "logit_lens"]
    if not len(ll):
        return {}
    first, _ = first_tokens(exp.model, [exp.topics[i].topic for i in ll.topic_id])
    toks = [exp.model.tokenizer.decode([f]).strip() for f in first]
    return {"logit_lens_echo_at_1": float(np.mean([a == b for a, b in zip(toks, ll.generated_label)]))}


@torch.no_grad()
def prefix_cache_diff(exp: Experiment, main: LayerResult) -> float:
    """|loss with the prefix cache - loss without| on one validation batch at s* (should be ~0)."""
    idx = exp.idx("val")[: exp.cfg.batch_size]
    ad = main.adapters.get("scalar_affine") or next(iter(main.adapters.values()))
    vec = main.vectors
    batch = make_batch(exp.tmpl, [exp.targets[i] for i in idx], exp.model.device)
    soft = ad(vec[list(idx)].to(exp.model.device))
    pc = exp.pc or PrefixCache(exp.model, exp.tmpl)
    a = label_loss(exp.model, exp.tmpl, batch, soft, pc)
    b = label_loss(exp.model, exp.tmpl, batch, soft, None)
    return float((a - b).abs())
