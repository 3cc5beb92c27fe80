"""sae_falsification figures: the probe's tables in, Plotly figures and display tables out (no Streamlit).

Artifacts (interp_probes/sae_falsification): ``features`` (one row per kept candidate: statistics, class, control class,
loop verdict), ``detection`` (every feature), ``injection`` (feature, arm, strategy, d, p, ...),
``control_tokens``, ``token_analysis``, ``ngrams``, ``top_contexts`` (tokens and per-token activations),
``family_acts``, ``candidates`` (the loop's FP/FN candidates with validity flags), ``hypotheses``, ``steering``,
``steering_checks``; the tensors ``sample_max`` (reasoning / nonreasoning per-sample maxima).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from interp_app.figures import line_labels, token_label

CLASS_COLOURS = {"token_driven": "#c62828", "partially": "#ef6c00", "weakly": "#f9a825",
                 "context_dependent": "#2e7d32"}
THRESHOLDS = {"weakly": 0.2, "partially": 0.5, "token_driven": 0.8}
#: A horizontal legend under the plot's x-axis title: the right margin holds a second axis or line labels.
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.25, "xanchor": "left", "x": 0}


def funnel(metrics: Mapping[str, Any], features: pd.DataFrame, d_sae: int | None) -> go.Figure:
    """All features -> candidates -> analysed -> classes -> falsified -> genuine, with the control beside injection."""
    ana = features[features["analysed"]] if len(features) else features
    loop = features[features["loop_status"].isin(["analysed", "forced"])] if len(features) else features
    stages = [("all features", d_sae or 0), ("candidates", metrics.get("n_candidates") or 0),
              ("analysed", len(ana))]
    for cls in ("token_driven", "partially", "weakly", "context_dependent"):
        stages.append((cls.replace("_", " "), int((ana["class"] == cls).sum()) if len(ana) else 0))
    stages += [("loop-analysed", len(loop)),
               ("falsified", int(loop["falsified"].sum()) if len(loop) else 0),
               ("genuine", int(metrics.get("n_genuine") or 0))]
    names = [s for s, _ in stages]
    fig = go.Figure(go.Bar(y=names, x=[v for _, v in stages], orientation="h", name="real",
                           text=[str(v) for _, v in stages], textposition="outside", marker_color="#1565c0"))
    ctrl = {cls: int((ana["control_class"] == cls).sum()) if len(ana) else 0
            for cls in ("token_driven", "partially", "weakly", "context_dependent")}
    fig.add_trace(go.Bar(y=[c.replace("_", " ") for c in ctrl], x=list(ctrl.values()), orientation="h",
                         name="control (random tokens)", marker_color="#9e9e9e",
                         text=[str(v) for v in ctrl.values()], textposition="outside"))
    fig.update_layout(barmode="group", xaxis_type="log" if (d_sae or 0) > 100 else None,
                      yaxis={"autorange": "reversed"}, title="Funnel: detection, injection (with its control), "
                      "counterexamples", height=460, xaxis_title="features")
    return fig


def candidate_table(features: pd.DataFrame) -> pd.DataFrame:
    """The candidates in ranking order: statistics, class, best strategy and verdict."""
    cols = ["feature", "rank", "d", "auc", "auc_arith_vs_narrative", "concentration", "class", "best_strategy",
            "best_d", "transfer", "control_class", "control_best_d", "loop_status", "n_valid_fp", "n_valid_fn",
            "falsified", "genuine"]
    out = features.sort_values("rank", kind="stable")[[c for c in cols if c in features]].copy()
    out["verdict"] = [verdict(r) for r in out.to_dict("records")]
    return out.reset_index(drop=True)


def verdict(row: Mapping[str, Any]) -> str:
    if row.get("genuine"):
        return "genuine (survived)"
    if row.get("falsified"):
        return "falsified"
    cls = row.get("class")
    if cls in ("token_driven", "partially"):
        return "token-driven"
    if row.get("loop_status") == "not_reached":
        return "unresolved"
    return "not analysed" if cls is None or (isinstance(cls, float) and np.isnan(cls)) else str(cls)


def scatter_real_control(features: pd.DataFrame) -> go.Figure:
    """Best-strategy d with the real top tokens against d with frequency-matched random tokens, per feature."""
    ana = features[features["analysed"]] if len(features) else features
    fig = go.Figure()
    for cls, colour in CLASS_COLOURS.items():
        sub = ana[ana["class"] == cls]
        if len(sub):
            fig.add_trace(go.Scatter(x=sub["control_best_d"], y=sub["best_d"], mode="markers+text", name=cls,
                                     text=[str(f) for f in sub["feature"]], textposition="top center",
                                     marker={"color": colour, "size": 10}))
    vals = np.r_[ana["best_d"].astype(float), ana["control_best_d"].astype(float)] if len(ana) else np.zeros(1)
    finite = np.where(np.isfinite(vals), vals, 0)
    hi = float(np.nanmax(np.r_[finite, 1.0]))
    lo = min(0.0, float(np.nanmin(finite)), hi * -0.1)
    fig.add_trace(go.Scatter(x=[min(0, hi * -0.1), hi], y=[min(0, hi * -0.1), hi], mode="lines", name="y = x",
                             line={"dash": "dash", "color": "#bbb"}))
    pad = 0.08 * (hi - lo)
    fig.update_layout(xaxis_title="best d, control (random tokens)", yaxis_title="best d, real top tokens",
                      title="Injection effect: real tokens vs frequency-matched control (same max over strategies)",
                      height=460, margin={"t": 60, "b": 120, "r": 110}, yaxis_range=[lo - pad, hi + pad],
                      legend=LEGEND_BELOW)
    for v in THRESHOLDS.values():
        fig.add_hline(y=v, line_dash="dot", line_color="#888")
        fig.add_vline(x=v, line_dash="dot", line_color="#ccc")
    line_labels(fig, THRESHOLDS, (lo - pad, hi + pad))
    return fig


def injection_bars(injection: pd.DataFrame, feature: int) -> go.Figure:
    """d per strategy for one feature, real against control, with the class thresholds."""
    sub = injection[injection["feature"] == feature]
    fig = go.Figure()
    names = {"real": "real", "control": "control", "alt": "real, other payload rule"}
    for arm, colour in (("real", "#1565c0"), ("control", "#9e9e9e"), ("alt", "#ef6c00")):
        s = sub[sub["arm"] == arm]
        if not len(s):
            continue
        fig.add_trace(go.Bar(x=s["strategy"], y=s["d"], name=names[arm], marker_color=colour,
                             text=[f"d {d:.2f}<br>p {p:.1e}" for d, p in zip(s["d"], s["p"])], textposition="outside"))
    d = sub["d"].to_numpy(dtype=float)
    d = d[np.isfinite(d)]
    top, bottom = max([*d, max(THRESHOLDS.values())]), min([*d, 0.0])
    span = top - bottom or 1.0
    y_range = (bottom - 0.05 * span if bottom < 0 else 0.0, top + 0.25 * span)  # room for the bars' text
    fig.update_layout(barmode="group", yaxis_title="Cohen's d (injected vs base)", yaxis_range=list(y_range),
                      title=f"Feature {feature}: injection per strategy", height=400,
                      margin={"t": 60, "b": 110, "r": 110}, legend=LEGEND_BELOW)
    # the class thresholds as dotted lines, named in the right margin: off the bars and their text
    for v in THRESHOLDS.values():
        fig.add_hline(y=v, line_dash="dot", line_color="#888")
    line_labels(fig, THRESHOLDS, y_range)
    return fig


def activation_histogram(reasoning: np.ndarray, non: np.ndarray, feature: int) -> go.Figure:
    """Per-sample max activation of one feature on each corpus."""
    fig = go.Figure()
    fig.add_trace(go.Histogram(x=np.asarray(reasoning, float), name="reasoning", opacity=0.6, nbinsx=40))
    fig.add_trace(go.Histogram(x=np.asarray(non, float), name="non-reasoning", opacity=0.6, nbinsx=40))
    fig.update_layout(barmode="overlay", title=f"Feature {feature}: per-sample max activation",
                      xaxis_title="max activation over positions >= 1", yaxis_title="samples", height=320)
    return fig


def family_bars(family: pd.DataFrame, feature: int) -> go.Figure:
    """Mean per-sample max by generator family (the confound view)."""
    sub = family[family["feature"] == feature]
    colours = ["#1565c0" if lab == "reasoning" else "#9e9e9e" for lab in sub["label"]]
    fig = go.Figure(go.Bar(x=sub["family"], y=sub["mean_max"], marker_color=colours,
                           text=[f"{f:.0%} active" for f in sub["freq"]], textposition="outside"))
    fig.update_layout(title=f"Feature {feature}: activation by family (blue: reasoning)",
                      yaxis_title="mean per-sample max", height=320)
    return fig


def context_html(tokens: Sequence[str], acts: Sequence[float], vmax: float | None = None,
                 note: str | None = None) -> str:
    """Neuronpedia-style tokens with a background shaded by activation (position 0 is never scored)."""
    acts = np.asarray(acts, float)
    top = vmax if vmax and vmax > 0 else (float(acts.max()) if len(acts) and acts.max() > 0 else 1.0)
    parts = []
    for i, (t, a) in enumerate(zip(tokens, acts)):
        label = html.escape(token_label(t, 24, escape=False))
        alpha = min(1.0, max(0.0, a / top))
        style = f"background:rgba(255,112,67,{alpha:.2f});border-radius:3px;padding:0 1px"
        if i == 0:
            style += ";color:#999"
        parts.append(f"<span title='{a:.3f}' style='{style}'>{label}</span>")
    tail = f" &nbsp;<span style='color:#888'>({note})</span>" if note else ""
    return "<div style='line-height:1.9;font-family:monospace'>" + "".join(parts) + tail + "</div>"


def top_tokens_table(token_analysis: pd.DataFrame, feature: int, n: int = 15) -> pd.DataFrame:
    sub = token_analysis[token_analysis["feature"] == feature].sort_values("rank").head(n)
    out = sub[[c for c in ("token_str", "mean_act", "count", "pmi", "is_top") if c in sub]].copy()
    out["token_str"] = [token_label(t, 24, escape=False) for t in out["token_str"]]
    return out.reset_index(drop=True)


def ngram_table(ngrams: pd.DataFrame, feature: int, n: int = 5) -> pd.DataFrame:
    sub = ngrams[ngrams["feature"] == feature]
    out = sub.groupby("kind", sort=False).head(n)[["kind", "text", "count"]].copy()
    out["text"] = [token_label(t, 40, escape=False) for t in out["text"]]
    return out.reset_index(drop=True)


FLAG_COLUMNS = ("ok_length", "ok_ascii", "ok_not_duplicate", "ok_no_eq", "ok_no_answer", "ok_no_steps",
                "ok_infer_rate", "ok_numbers", "ok_answer", "ok_no_top_tokens", "ok_still_reasoning",
                "ok_same_meaning", "ok_judge", "ok_activation")


def transcript(candidates: pd.DataFrame, feature: int, kind: str) -> pd.DataFrame:
    """The loop's candidates of one kind for one feature: iteration, source, ratio, failed checks, text."""
    sub = candidates[(candidates["feature"] == feature) & (candidates["kind"] == kind)]
    rows = []
    for r in sub.to_dict("records"):
        failed = [c[3:] for c in FLAG_COLUMNS if c in r and r[c] is not None and not pd.isna(r[c]) and not r[c]]
        rows.append({"iter": r["iteration"], "source": r["source"], "valid": bool(r["valid"]),
                     "activation": float(r["act_max"]), "ratio": float(r["ratio"]),
                     "failed checks": ", ".join(failed) or "-", "text": r["text"]})
    return pd.DataFrame(rows, columns=["iter", "source", "valid", "activation", "ratio", "failed checks", "text"])


def steering_figure(steering: pd.DataFrame) -> go.Figure:
    """Accuracy and reasoning-style score per feature and gamma (gamma 0 is the shared unsteered run)."""
    if not len(steering):
        return go.Figure()
    agg = steering.groupby(["feature", "gamma"]).agg(acc=("correct", "mean"), style=("style_score", "mean"))
    agg = agg.reset_index()
    fig = go.Figure()
    for f, g in agg.groupby("feature"):
        fig.add_trace(go.Scatter(x=g["gamma"], y=g["acc"], mode="lines+markers", name=f"feature {f}: accuracy"))
        fig.add_trace(go.Scatter(x=g["gamma"], y=g["style"], mode="lines+markers", name=f"feature {f}: style",
                                 line={"dash": "dot"}, yaxis="y2"))
    fig.update_layout(xaxis_title="gamma (x f_max along W_dec[i])", yaxis_title="accuracy",
                      yaxis2={"title": "reasoning families in output", "overlaying": "y", "side": "right"},
                      title="Steering the top candidates", height=420, margin={"t": 60, "b": 120},
                      legend=LEGEND_BELOW)  # the right side holds the second axis
    return fig


def steering_samples(steering: pd.DataFrame, feature: int, n: int = 5) -> pd.DataFrame:
    """Sample outputs side by side: the unsteered model and each gamma of one feature."""
    sub = steering[steering["feature"] == feature]
    wide = sub.pivot_table(index="problem_id", columns="gamma", values="output", aggfunc="first")
    wide.columns = [f"gamma {g:g}" for g in wide.columns]
    return wide.head(n).reset_index()


def headline(run) -> go.Figure:
    """The figure a run shows in a notebook next to its metrics (`interp.Run._repr_html_`)."""
    return funnel(run.metrics, run.table("features"), run.metrics.get("sae_d_sae"))
