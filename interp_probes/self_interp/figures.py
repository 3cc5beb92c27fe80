"""Figures of the self_interp page: artifacts (pandas / numpy) in, Plotly figures or tables out."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from interp_app.figures import line_labels, token_label

ORDER = ("identity", "scale_only", "bias_only", "scalar_affine", "low_rank", "low_rank_only", "full_rank",
         "shuffled", "embed_control", "logit_lens")
KIND = {"shuffled": "control", "embed_control": "control", "logit_lens": "baseline"}
COLOUR = {"adapter": "#4c78a8", "control": "#9d9d9d", "baseline": "#f58518"}
HIT = {"hit@1": "#c7e9c0", "hit@10": "#fdf5b0", "miss": "#f4c7c3"}


def _ordered(variants) -> list[str]:
    known = [v for v in ORDER if v in set(variants)]
    return known + sorted(set(variants) - set(known))


def heldout_recall(recall: pd.DataFrame, layer: int | None = None, split: str = "heldout") -> pd.DataFrame:
    """The rows of one layer (default: the run's main layer = the most common one) and split."""
    if not len(recall):
        return recall
    if layer is None:
        layer = int(recall.layer.mode().iloc[0])
    return recall[(recall.layer == layer) & (recall.split == split)]


def leaderboard(recall: pd.DataFrame, ks=(1, 10), layer: int | None = None) -> go.Figure:
    """Bars of held-out recall@k per variant with 95 % bootstrap intervals; controls grey, the
    logit-lens baseline orange; a dashed line at chance for each k."""
    df = heldout_recall(recall, layer)
    fig = go.Figure()
    variants = _ordered(df.variant.unique()) if len(df) else []
    chances: dict[str, float] = {}
    for j, k in enumerate(ks):
        part = df[df.k == k].set_index("variant").reindex(variants)
        colours = [COLOUR[KIND.get(v, "adapter")] for v in variants]
        fig.add_bar(
            x=variants, y=part.recall, name=f"recall@{k}", offsetgroup=str(k),
            marker=dict(color=colours, opacity=0.55 if j == 0 else 1.0, line=dict(color="black", width=0.5)),
            error_y=dict(type="data", symmetric=False, array=(part.ci_high - part.recall).clip(lower=0),
                         arrayminus=(part.recall - part.ci_low).clip(lower=0)),
            hovertemplate="%{x}<br>recall@" + str(k) + " %{y:.3f}<extra></extra>",
        )
        chance = float(part.chance.dropna().iloc[0]) if part.chance.notna().any() else None
        if chance is not None:
            fig.add_hline(y=chance, line_dash="dash", line_color="black" if j else "grey")
            chances[f"chance@{k}"] = chance
    fig.update_layout(barmode="group", yaxis=dict(title="held-out recall", range=[0, 1.05]),
                      xaxis_title="adapter (grey: controls; orange: logit-lens readout)",
                      height=420, margin=dict(t=30, b=80, r=90), legend=dict(orientation="h", y=1.1))
    # chance@1 and chance@10 lie a few pixels apart near 0: named in the right margin, pushed apart
    line_labels(fig, chances, (0, 1.05))
    return fig


def recall_vs_params(recall: pd.DataFrame, params: Mapping[str, int], k: int = 10,
                     layer: int | None = None) -> go.Figure:
    """Held-out recall@k against trainable parameters (log x; identity drawn at 1)."""
    df = heldout_recall(recall, layer)
    df = df[(df.k == k) & df.variant.isin(list(params))]
    x = [max(1, int(params[v])) for v in df.variant]
    fig = go.Figure(go.Scatter(
        x=x, y=df.recall, mode="markers+text", text=list(df.variant), textposition="top center",
        error_y=dict(type="data", symmetric=False, array=(df.ci_high - df.recall).clip(lower=0),
                     arrayminus=(df.recall - df.ci_low).clip(lower=0)),
        marker=dict(size=11, color=COLOUR["adapter"]),
        customdata=[params[v] for v in df.variant],
        hovertemplate="%{text}<br>%{customdata} parameters<br>recall %{y:.3f}<extra></extra>",
    ))
    fig.update_layout(xaxis=dict(type="log", title="trainable parameters (identity shown at 1)"),
                      yaxis=dict(title=f"held-out recall@{k}", range=[0, 1.05]), height=380, margin=dict(t=30))
    return fig


def recall_by_layer(recall: pd.DataFrame, k: int = 10) -> go.Figure:
    """Held-out recall@k by layer for the scalar-affine adapter, identity and the logit-lens readout:
    self-interpretation is the gap between the adapter and the logit lens."""
    df = recall[(recall.split == "heldout") & (recall.k == k)
                & recall.variant.isin(["identity", "scalar_affine", "logit_lens"])]
    fig = go.Figure()
    styles = {"scalar_affine": COLOUR["adapter"], "identity": "#72b7b2", "logit_lens": COLOUR["baseline"]}
    for v in ("scalar_affine", "identity", "logit_lens"):
        part = df[df.variant == v].sort_values("layer")
        if not len(part):
            continue
        fig.add_scatter(x=part.layer, y=part.recall, mode="lines+markers", name=v, line=dict(color=styles[v]),
                        error_y=dict(type="data", symmetric=False, array=(part.ci_high - part.recall).clip(lower=0),
                                     arrayminus=(part.recall - part.ci_low).clip(lower=0)))
    if len(df):
        fig.add_hline(y=float(df.chance.iloc[0]), line_dash="dash", line_color="grey", annotation_text="chance")
    fig.update_layout(xaxis_title="layer (residual after block)", yaxis=dict(title=f"held-out recall@{k}",
                      range=[0, 1.05]), height=380, margin=dict(t=30))
    return fig


def scale_sweep(sweep: pd.DataFrame, layer: int | None = None) -> go.Figure:
    """Identity injection: validation loss and held-out recall against the scale (log x), s* marked."""
    if layer is None and len(sweep):
        layer = int(sweep.layer.mode().iloc[0])
    df = sweep[sweep.layer == layer].sort_values("scale") if len(sweep) else sweep
    fig = go.Figure()
    fig.add_scatter(x=df.scale, y=df.val_loss, mode="lines+markers", name="validation loss", yaxis="y")
    for col, dash in (("recall_at_1", "dot"), ("recall_at_10", "dash")):
        if col in df and df[col].notna().any():
            fig.add_scatter(x=df.scale, y=df[col], mode="lines+markers", name=col.replace("_at_", "@"),
                            yaxis="y2", line=dict(dash=dash))
    best = df[df.best] if "best" in df else df.iloc[:0]
    if len(best):
        fig.add_vline(x=float(best.scale.iloc[0]), line_dash="dash", line_color="green",
                      annotation_text=f"s* = {float(best.scale.iloc[0]):.3g}")
    fig.update_layout(xaxis=dict(type="log", title="identity scale (absolute norm of the injected vector)"),
                      yaxis=dict(title="validation loss"),
                      yaxis2=dict(title="held-out recall", overlaying="y", side="right", range=[0, 1.05]),
                      height=380, margin=dict(t=30), legend=dict(orientation="h", y=1.12))
    return fig


def training_curves(curves: pd.DataFrame, layer: int | None = None) -> go.Figure:
    """Training (thin) and validation (markers) loss per variant against the optimiser step."""
    if layer is None and len(curves):
        layer = int(curves.layer.mode().iloc[0])
    df = curves[curves.layer == layer] if len(curves) else curves
    fig = go.Figure()
    palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d", "#bab0ac"]
    for i, v in enumerate(_ordered(df.variant.unique()) if len(df) else []):
        part = df[df.variant == v].sort_values("step")
        c = palette[i % len(palette)]
        tr = part[part.train_loss.notna()]
        fig.add_scatter(x=tr.step, y=tr.train_loss, mode="lines", name=f"{v} train", line=dict(color=c, width=1),
                        opacity=0.6, legendgroup=v)
        va = part[part.val_loss.notna()]
        fig.add_scatter(x=va.step, y=va.val_loss, mode="lines+markers", name=f"{v} val", line=dict(color=c, width=2),
                        legendgroup=v)
    fig.update_layout(xaxis_title="optimiser step", yaxis_title="label loss (nats / token)", height=420,
                      margin=dict(t=30))
    return fig


def hit_class(rank: int) -> str:
    return "hit@1" if rank <= 1 else ("hit@10" if rank <= 10 else "miss")


def heldout_table(gens: pd.DataFrame, topics: pd.DataFrame, layer: int | None = None,
                  category: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(labels, classes): one row per held-out topic with its category and each variant's generated
    label, and a same-shaped frame of "hit@1" / "hit@10" / "miss" (empty for topic and category)."""
    df = gens[gens.split == "heldout"]
    if layer is None and len(df):
        layer = int(df.layer.mode().iloc[0])
    df = df[df.layer == layer]
    names = topics.set_index("topic_id")
    labels = df.pivot_table(index="topic_id", columns="variant", values="generated_label", aggfunc="first")
    ranks = df.pivot_table(index="topic_id", columns="variant", values="rank_of_truth", aggfunc="first")
    cols = _ordered(labels.columns)
    labels, ranks = labels[cols], ranks[cols]
    out = pd.DataFrame({"topic": names.topic.reindex(labels.index), "category": names.category.reindex(labels.index)})
    classes = pd.DataFrame({"topic": "", "category": ""}, index=labels.index)
    for c in cols:
        out[c] = labels[c].fillna("")
        classes[c] = [hit_class(r) if not (isinstance(r, float) and math.isnan(r)) else "" for r in ranks[c]]
    if category:
        keep = out.category == category
        out, classes = out[keep], classes[keep]
    return out.reset_index(drop=True), classes.reset_index(drop=True)


def style_hits(labels: pd.DataFrame, classes: pd.DataFrame):
    """A pandas Styler colouring each label cell by hit@1 (green), hit@10 (yellow) or miss (red)."""
    return labels.style.apply(lambda _: classes.map(lambda c: f"background-color: {HIT[c]}" if c in HIT else ""),
                              axis=None)


def singular_values(a: np.ndarray, scale: float | None = None) -> go.Figure:
    """Singular-value spectrum of the full-rank adapter's matrix A (initialised at s* I: flat)."""
    s = np.linalg.svd(np.asarray(a, dtype=np.float64), compute_uv=False)
    fig = go.Figure(go.Scatter(y=s, mode="lines", name="singular values"))
    if scale:
        fig.add_hline(y=scale, line_dash="dash", line_color="grey", annotation_text="initial scale")
    fig.update_layout(xaxis_title="index", yaxis=dict(title="singular value", type="log"), height=320,
                      margin=dict(t=30))
    return fig


def bias_tokens(probe: pd.DataFrame, kind: str = "next_token") -> go.Figure:
    """Top tokens when the learned bias alone is injected (kind next_token: logit) or nearest to it
    in embedding space (kind nearest_embedding: cosine)."""
    df = probe[probe.kind == kind].sort_values("logit")
    fig = go.Figure(go.Bar(x=df.logit, y=[token_label(t) for t in df.token], orientation="h",
                           marker_color=COLOUR["adapter"]))
    fig.update_layout(xaxis_title="next-token logit" if kind == "next_token" else "cosine to the bias",
                      yaxis=dict(type="category"), height=max(250, 18 * len(df) + 60), margin=dict(t=30))
    return fig


def sae_cards(sae: pd.DataFrame) -> pd.DataFrame:
    """One row per latent: its true label and, per variant, the best hit rate and labels."""
    if not len(sae):
        return sae
    wide = sae.pivot_table(index=["latent", "label_true"], columns="variant", values="best_hit_rate", aggfunc="first")
    wide.columns = [f"best_hit_rate_{c}" for c in wide.columns]
    return wide.reset_index()


def headline(run) -> go.Figure:
    """The figure a run shows in a notebook next to its metrics (`interp.Run._repr_html_`)."""
    return leaderboard(run.table("recall"))
