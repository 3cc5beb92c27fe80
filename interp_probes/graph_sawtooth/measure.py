"""Stages 2-3: the sawtooth of every layer against its segment-shuffled nulls, and the selected layers S.

One capture pass over the selection prompts scores every layer (head mean) and head at once:
concentration and plain AUC against the real template and `n_null` shuffled ones, the distance-matched
and locality AUCs, the sink mass and the entropy. S = S_score (Otsu) ∩ S_ent (entropy peak).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from interp.context import RunContext

from . import GraphSawtoothConfig
from .attention import Tokenised, batches, capture_batch
from .selection import entropy_band, final_set, otsu_set
from .structure import score_sample, shuffled_spans


@dataclass(frozen=True)
class SampleScores:
    """Per selection sample (axis `sample`) and null draw (axis `draw`), the scores of every layer and head."""

    concentration: np.ndarray
    """(sample, layer) concentration of the head-mean ROI map against the real template."""
    concentration_null: np.ndarray
    """(draw, sample, layer) the same against each segment-shuffled template."""
    auc: np.ndarray
    """(sample, layer) plain AUC of the template (not the paper's)."""
    auc_null: np.ndarray
    """(draw, sample, layer) the same against each shuffled template."""
    auc_distmatched: np.ndarray
    """(sample, layer) AUC with in- and out-of-template keys matched in distance."""
    locality_auc: np.ndarray
    """(sample,) the distance-only baseline's AUC."""
    sink_mass: np.ndarray
    """(sample, layer) head-mean attention of the ROI rows to the sink."""
    entropy: np.ndarray
    """(sample, layer) spectral entropy of the head-mean attention."""
    head_concentration: np.ndarray
    """(sample, layer, head) concentration of every head (zeros without `head_scores`)."""
    head_auc: np.ndarray
    """(sample, layer, head) AUC of every head."""
    head_auc_null: np.ndarray
    """(sample, layer, head) mean null AUC of every head over the draws."""
    maps: dict[int, dict[str, np.ndarray]]
    """sample index (< n_roi_maps) -> raw / binary / template ROI maps (and, for sample 0, every head's)."""


@dataclass(frozen=True)
class LayerScores:
    """Per-layer means over the selection samples, the nulls by draw, l* and the selection-matched threshold."""

    concentration: np.ndarray
    """(layer,) mean concentration: the score Otsu splits."""
    concentration_null_mean: np.ndarray
    """(layer,) mean null concentration over the draws."""
    concentration_null_draws: np.ndarray
    """(draw, layer) null concentration of each draw."""
    auc: np.ndarray
    """(layer,) mean plain AUC."""
    auc_null: np.ndarray
    """(layer,) mean null AUC over the draws."""
    auc_null_sd: np.ndarray
    """(layer,) its standard deviation over the draws."""
    auc_null_draws: np.ndarray
    """(draw, layer) null AUC of each draw."""
    auc_distmatched: np.ndarray
    """(layer,) mean distance-matched AUC."""
    excess: np.ndarray
    """(layer,) auc - auc_null."""
    l_star: int
    """The layer of the largest AUC excess."""
    excess_draws: np.ndarray
    """(draw,) each null draw's largest excess over the mean of the other draws."""
    auc_excess_q95: float
    """95th percentile of `excess_draws`: the selection-matched threshold for the excess of l*."""
    null_concentration: float
    """Mean over draws of the largest null concentration over layers."""
    null_concentration_sd: float
    """Its standard deviation over the draws."""
    locality_auc: float
    """Mean locality-baseline AUC."""
    sink_mass: np.ndarray
    """(layer,) mean sink mass."""
    entropy: np.ndarray
    """(layer,) mean spectral entropy."""


@dataclass(frozen=True)
class Selection:
    """The selected layers: S = S_score ∩ S_ent, with the fallback when the intersection is empty."""

    S_score: dict[str, Any]
    """Otsu's split of the per-layer concentration (its `layers`, threshold and variances)."""
    S_ent: dict[str, Any]
    """The middle wide entropy peak (its `layers` and the series it was found on)."""
    S: list[int]
    """The layers SLASH edits."""
    fallback: bool
    """Whether S is the fallback rather than the intersection."""


@dataclass(frozen=True)
class Structure:
    """Stages 2-3: the per-sample scores, their per-layer summary and the selected layers."""

    samples: SampleScores
    """The scores of every selection sample."""
    layers: LayerScores
    """Their per-layer summary."""
    selection: Selection
    """The selected layers."""

    def metrics(self) -> dict[str, Any]:
        lay, sel = self.layers, self.selection
        ls, sink = lay.l_star, lay.sink_mass
        return {
            "best_layer_auc": float(lay.auc[ls]), "locality_auc": lay.locality_auc,
            "best_layer_concentration": float(np.max(lay.concentration)),
            "null_concentration": lay.null_concentration, "sink_mass_mean": float(sink.mean()),
            "selected_layers": ",".join(map(str, sel.S)), "best_layer": ls,
            "best_concentration_layer": int(np.argmax(lay.concentration)),
            "null_concentration_sd": lay.null_concentration_sd,
            "best_layer_auc_distmatched": float(lay.auc_distmatched[ls]), "null_auc": float(lay.auc_null[ls]),
            "null_auc_sd": float(lay.auc_null_sd[ls]), "auc_excess": float(lay.excess[ls]),
            "auc_excess_q95": lay.auc_excess_q95, "sink_mass_max": float(sink.max()),
            "sink_mass_max_layer": int(np.argmax(sink)), "selection_fallback": sel.fallback, "n_selected": len(sel.S),
        }


def structure_study(model, items: list[Tokenised], cfg: GraphSawtoothConfig, ctx: RunContext) -> Structure:
    """Measure the selection prompts, summarise per layer and select S; saves layer_scores, head_scores (with
    `head_scores`), null_draws and selection (also in the manifest)."""
    samples = measure_structure(model, items, cfg, ctx)
    layers = summarize_layers(samples)
    sel = select_layers(layers.concentration, layers.entropy, cfg.entropy_rule)
    _save(ctx, samples, layers, sel, cfg.head_scores)
    return Structure(samples, layers, sel)


def _units(roi_heads: np.ndarray, heads: bool) -> np.ndarray:
    """(layer, head, R, R) -> units (layer [+ layer*head], R, R): the head means first, then every head."""
    n_layers, n_heads, r, _ = roi_heads.shape
    if not heads:
        return roi_heads.mean(1)
    return np.concatenate([roi_heads.mean(1), roi_heads.reshape(n_layers * n_heads, r, r)])


def measure_structure(model, items: list[Tokenised], cfg: GraphSawtoothConfig, ctx: RunContext) -> SampleScores:
    """Capture every layer's attention on the selection prompts and score it per sample at once (see SampleScores)."""
    L, n_heads = model.info.n_layers, model.info.n_heads
    n, k = len(items), cfg.n_null
    out = SampleScores(
        concentration=np.zeros((n, L)), concentration_null=np.zeros((k, n, L)), auc=np.zeros((n, L)),
        auc_null=np.zeros((k, n, L)), auc_distmatched=np.zeros((n, L)), locality_auc=np.zeros(n),
        sink_mass=np.zeros((n, L)), entropy=np.zeros((n, L)), head_concentration=np.zeros((n, L, n_heads)),
        head_auc=np.zeros((n, L, n_heads)), head_auc_null=np.zeros((n, L, n_heads)), maps={},
    )
    # the null layouts are drawn up front so they do not depend on the batching
    nulls = [[shuffled_spans(t.spans, ctx.rng) for _ in range(k)] for t in items]
    for idx in ctx.tqdm(batches(n, cfg.batch_size), desc="structure"):
        caps = capture_batch(model, [items[i] for i in idx], list(range(L)), cfg.sink_offsets)
        for i, cap in zip(idx, caps):
            sc = score_sample(_units(cap.roi_heads, cfg.head_scores), items[i].spans, nulls[i], cfg.max_shift,
                              cfg.binarize)
            out.concentration[i] = sc["concentration"][:L]
            out.concentration_null[:, i] = sc["concentration_null"][:, :L]
            out.auc[i] = sc["auc"][:L]
            out.auc_null[:, i] = sc["auc_null"][:, :L]
            out.auc_distmatched[i] = sc["auc_distmatched"][:L]
            out.locality_auc[i] = sc["locality_auc"]
            out.sink_mass[i] = cap.sink_mass
            out.entropy[i] = cap.entropy
            if cfg.head_scores:
                out.head_concentration[i] = sc["concentration"][L:].reshape(L, n_heads)
                out.head_auc[i] = sc["auc"][L:].reshape(L, n_heads)
                out.head_auc_null[i] = np.nanmean(sc["auc_null"][:, L:], 0).reshape(L, n_heads)
            if i < cfg.n_roi_maps:
                out.maps[i] = {
                    "raw": cap.roi_heads.mean(1).astype(np.float32),
                    "binary": sc["processed"][:L].astype(np.uint8),
                    "template": sc["template"].astype(np.uint8),
                }
                if i == 0:
                    out.maps[i]["heads"] = cap.roi_heads.astype(np.float16)
    for key in ("concentration", "auc", "sink_mass", "entropy"):
        ctx.check_finite(f"per-layer {key} of the selection prompts", getattr(out, key))
    return out


def summarize_layers(st: SampleScores) -> LayerScores:
    """Per-layer means, the nulls by draw, the headline layer l* and the selection-matched threshold."""
    conc = np.nanmean(st.concentration, 0)  # (layer,)
    conc_null_draw = np.nanmean(st.concentration_null, 1)  # (draw, layer)
    auc = np.nanmean(st.auc, 0)
    auc_null_draw = np.nanmean(st.auc_null, 1)  # (draw, layer)
    auc_null = auc_null_draw.mean(0)
    excess = auc - auc_null
    k = auc_null_draw.shape[0]
    others = (auc_null_draw.sum(0, keepdims=True) - auc_null_draw) / (k - 1)  # mean of the other draws
    e = (auc_null_draw - others).max(1)  # (draw,)
    null_max = conc_null_draw.max(1)  # (draw,): the same max over layers as the real score
    return LayerScores(
        concentration=conc, concentration_null_mean=conc_null_draw.mean(0), concentration_null_draws=conc_null_draw,
        auc=auc, auc_null=auc_null, auc_null_sd=auc_null_draw.std(0, ddof=1), auc_null_draws=auc_null_draw,
        auc_distmatched=np.nanmean(st.auc_distmatched, 0), excess=excess, l_star=int(np.nanargmax(excess)),
        excess_draws=e, auc_excess_q95=float(np.percentile(e, 95)), null_concentration=float(null_max.mean()),
        null_concentration_sd=float(null_max.std(ddof=1)), locality_auc=float(np.nanmean(st.locality_auc)),
        sink_mass=st.sink_mass.mean(0), entropy=st.entropy.mean(0),
    )


def select_layers(scores: np.ndarray, entropy: np.ndarray, rule: str = "reference") -> Selection:
    """S_score (Otsu), S_ent (middle wide entropy peak, under `rule`) and S = their intersection (with fallback)."""
    s_score = otsu_set(scores)
    s_ent = entropy_band(entropy, rule)
    S, fallback = final_set(scores, s_score["layers"], s_ent)
    return Selection(S_score=s_score, S_ent=s_ent, S=S, fallback=fallback)


def _save(ctx: RunContext, st: SampleScores, layers: LayerScores, sel: Selection, head_scores: bool) -> None:
    n_layers = len(layers.concentration)
    s_score, s_ent = set(sel.S_score["layers"]), set(sel.S_ent["layers"])
    ctx.save_table("layer_scores", pd.DataFrame({
        "layer": range(n_layers), "concentration": layers.concentration,
        "concentration_null_mean": layers.concentration_null_mean, "auc": layers.auc,
        "auc_distmatched": layers.auc_distmatched, "auc_null": layers.auc_null,
        "auc_null_sd": layers.auc_null_sd, "auc_excess": layers.excess,
        "locality_auc": layers.locality_auc, "sink_mass": layers.sink_mass, "entropy": layers.entropy,
        "in_S_score": [i in s_score for i in range(n_layers)], "in_S_ent": [i in s_ent for i in range(n_layers)],
        "selected": [i in sel.S for i in range(n_layers)],
    }))
    if head_scores:
        hc, ha, hn = (np.nanmean(a, 0) for a in (st.head_concentration, st.head_auc, st.head_auc_null))
        n_heads = hc.shape[1]
        ctx.save_table("head_scores", pd.DataFrame({
            "layer": np.repeat(np.arange(n_layers), n_heads), "head": np.tile(np.arange(n_heads), n_layers),
            "concentration": hc.ravel(), "auc": ha.ravel(), "auc_null": hn.ravel(), "auc_excess": (ha - hn).ravel(),
        }))
    k = layers.auc_null_draws.shape[0]
    ctx.save_table("null_draws", pd.DataFrame({
        "draw": np.repeat(np.arange(k), n_layers), "layer": np.tile(np.arange(n_layers), k),
        "concentration_null": layers.concentration_null_draws.ravel(), "auc_null": layers.auc_null_draws.ravel(),
    }))
    selection = {"S_score": sel.S_score, "S_ent": sel.S_ent, "S": sel.S, "selection_fallback": sel.fallback,
                 "excess_draws": layers.excess_draws.tolist(), "l_star": layers.l_star}
    ctx.save_json("selection", selection)
    ctx.writer.set("selection", selection)
