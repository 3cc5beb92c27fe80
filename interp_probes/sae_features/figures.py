"""Feature-dashboard figures: the sae_features run's tables and histograms in, Plotly figures and HTML out.

Artifacts (interp_probes/sae_features): ``features.parquet`` (feature, density, n_fired, max_act, mean_act, top_token,
top_token_share, pos_tokens/pos_values, neg_tokens/neg_values), ``contexts.parquet`` (feature, kind "top" or
"interval_<q>", rank, act, tokens, values, center) and ``histograms.safetensors`` (act_counts (F, bins) over
[0, act_max], logit_counts (F, bins) over logit_range (F, 2)). Usable from a notebook as they are.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from interp_app.figures import modebar_room, token_label


def search(features: pd.DataFrame, query: str, limit: int = 200) -> pd.DataFrame:
    """Features whose top-activating token matches `query` (case and surrounding spaces ignored), the purest
    first; an empty query gives the live features by density. A query that matches no top token exactly falls
    back to top tokens containing it."""
    live = features[features["n_fired"] > 0]
    q = query.strip().lower()
    if not q:
        return live.sort_values("density", ascending=False).head(limit)
    tops = live["top_token"].str.strip().str.lower()
    hit = live[tops == q]
    if hit.empty:
        hit = live[tops.str.contains(q, regex=False)]
    return hit.sort_values(["top_token_share", "max_act"], ascending=False).head(limit)


def density_histogram(features: pd.DataFrame) -> go.Figure:
    """How often the features fire: a histogram of log10 density over the live features (dead ones counted)."""
    live = features[features["n_fired"] > 0]
    fig = go.Figure(go.Histogram(x=np.log10(live["density"]), nbinsx=50, marker_color="#4C78A8",
                                 hovertemplate="log10 density %{x}<br>%{y} features<extra></extra>"))
    dead = int((features["n_fired"] == 0).sum())
    fig.update_layout(title=f"Feature density ({len(live)} live, {dead} dead)", height=280, bargap=0.05,
                      xaxis_title="log10 fraction of tokens on which the feature fires", yaxis_title="features",
                      margin=dict(t=40, b=40, l=50, r=10))
    return modebar_room(fig)


def activation_histogram(counts: np.ndarray, max_act: float, feature: int) -> go.Figure:
    """The feature's non-zero activations: counts (bins,) over [0, max_act]."""
    nb = len(counts)
    width = max(float(max_act), 1e-12) / nb
    centers = (np.arange(nb) + 0.5) * width
    fig = go.Figure(go.Bar(x=centers, y=counts, width=width * 0.95, marker_color="#E45756",
                           hovertemplate="activation %{x:.3g}<br>%{y} tokens<extra></extra>"))
    fig.update_layout(title=f"Non-zero activations of feature {feature}", height=260, xaxis_title="activation",
                      yaxis_title="tokens", margin=dict(t=40, b=40, l=50, r=10))
    return modebar_room(fig)


def logit_bars(row: pd.Series) -> go.Figure:
    """The tokens the feature's decoder direction promotes (red) and suppresses (blue) through W_U."""
    pos_t, pos_v = list(row["pos_tokens"]), list(row["pos_values"])
    neg_t, neg_v = list(row["neg_tokens"]), list(row["neg_values"])
    labels = [token_label(t, 20) for t in neg_t[::-1]] + [token_label(t, 20) for t in pos_t]
    values = list(neg_v[::-1]) + list(pos_v)
    colours = ["#4C78A8"] * len(neg_v) + ["#E45756"] * len(pos_v)
    fig = go.Figure(go.Bar(x=values, y=list(range(len(values))), orientation="h", marker_color=colours,
                           text=labels, hovertemplate="%{text}: %{x:.3f}<extra></extra>"))
    fig.update_layout(title="Logit effect (W_dec @ W_U)", height=max(260, 18 * len(values) + 60),
                      yaxis=dict(tickmode="array", tickvals=list(range(len(values))), ticktext=labels),
                      xaxis_title="logit per unit activation", margin=dict(t=40, b=40, l=110, r=10))
    return modebar_room(fig)


def _visible(tok: str) -> str:
    return html.escape(tok.replace("\n", "↵").replace("\t", "→"))


def context_html(tokens: Sequence[str], values: Sequence[float], center: int, vmax: float) -> str:
    """One context as HTML: each token's background shows the feature's value there (white 0 to red vmax, the
    kept token outlined); hover shows the value."""
    vmax = max(float(vmax), 1e-12)
    center = int(center)
    spans = []
    for i, (t, v) in enumerate(zip(tokens, values)):
        a = min(1.0, max(0.0, float(v) / vmax))
        style = f"background: rgba(228,87,86,{a:.2f}); border-radius: 2px; white-space: pre;"
        if i == center:
            style += " outline: 1.5px solid #222;"
        kind = "tok center" if i == center else "tok"
        spans.append(f'<span class="{kind}" title="{float(v):.3g}" style="{style}">'
                     f"{_visible(t)}</span>")
    return '<div class="ctx" style="font-family: monospace; line-height: 1.9;">' + "".join(spans) + "</div>"


def contexts_html(contexts: pd.DataFrame, vmax: float, label: str = "") -> str:
    """Several contexts (rows of contexts.parquet), one line each, with the kept activation in front."""
    rows = []
    for r in contexts.itertuples():
        rows.append(f'<div style="display:flex; gap: .6em;"><code style="min-width: 4.5em">{r.act:.3g}</code>'
                    + context_html(r.tokens, r.values, r.center, vmax) + "</div>")
    head = f"<div><b>{html.escape(label)}</b></div>" if label else ""
    return f'<div class="contexts">{head}{"".join(rows)}</div>'


def highlighted_tokens(contexts: pd.DataFrame) -> list[str]:
    """The kept (highlighted) token of each context row."""
    return [r.tokens[r.center] for r in contexts.itertuples()]


def headline(run) -> go.Figure:
    """The figure a run shows in a notebook next to its metrics (`interp.Run._repr_html_`)."""
    return density_histogram(run.table("features"))
