"""Patching page: activation patching by (layer, position) and (layer, head) beside its attribution estimate,
for the mean over pairs or one pair."""

from __future__ import annotations

import numpy as np
import streamlit as st

from interp.store import Run
from interp_app import common
from interp_probes.patching import figures as F

_f = common.fmt_digits


def render(run: Run) -> None:
    g = run.tensor_file("grids")
    tokens = run.table("tokens")
    pairs = run.table("pairs")
    agree = run.table("agreement").set_index("grid")
    top = run.table("top")
    m = run.metrics
    layers = [int(x) for x in np.asarray(g["layers"]).tolist()]
    names = [k.removeprefix("act_") for k in g if k.startswith("act_")]
    order = [n for n in F.GRID_TITLES if n in names]

    worst = max(m.get("identity_layer0_all_positions_err") or 0.0, m.get("identity_final_resid_post_err") or 0.0,
                m.get("identity_layer0_same_token_max_abs") or 0.0)
    common.metric_row(
        m,
        ("pairs", m.get("n_pairs"), None, f"metric: {run.config.get('metric', 'logit_diff')}"),
        ("clean metric (mean)", _f(m.get("clean_metric_mean")), None, f"corrupt {_f(m.get('corrupt_metric_mean'))}"),
        ("resid_pre Spearman (attr vs act)", _f(m.get("resid_pre_spearman_differing")), None,
         "cells whose activations differ"),
        ("identities, worst error", _f(worst), None, "layer 0 all → 1, last resid_post → 1, equal tokens → 0"),
        delta_color="off",
    )

    left, right = st.columns([1, 2])
    with left:
        name = st.radio("Grid", order, format_func=lambda n: F.GRID_TITLES[n], key="patching.grid")
    with right:
        options = [None, *range(len(pairs))]
        pair = st.selectbox(
            "Pairs", options, key=f"patching.pair:{run.path.name}",
            format_func=lambda p: "mean over pairs" if p is None else
            f"{p}: {pairs.loc[p, 'clean']!r} vs {pairs.loc[p, 'corrupt']!r}")
    if pair is not None:
        r = pairs.loc[pair]
        st.caption(f"answer {r['answer']!r}, wrong {r['wrong']!r}; clean {r['clean_metric']:.3f}, "
                   f"corrupt {r['corrupt_metric']:.3f}")

    act, attr = F.select(g[f"act_{name}"], pair), F.select(g[f"attr_{name}"], pair)
    n_cols = int(g[f"act_{name}"].shape[-1])
    labels = F.column_labels(tokens, n_cols, pair) if name != "z" else F.head_labels(n_cols)
    if name == "z_pos":
        head = st.selectbox("Head", list(range(act.shape[1])), key="patching.head",
                            format_func=lambda h: f"H{h}")
        act, attr = act[:, head], attr[:, head]
    heads = name == "z"
    zrange = F.signed_range_of(act, attr)
    a, b = st.columns(2)
    with a:
        st.plotly_chart(F.grid_heatmap(act, layers, labels, "activation patching", heads, zrange),
                        key="patching.act")
    with b:
        st.plotly_chart(F.grid_heatmap(attr, layers, labels, "attribution patching (linear estimate)", heads,
                                       zrange), key="patching.attr")
    rho = F.spearman(act, attr)
    st.plotly_chart(F.agreement_scatter(act, attr, layers, labels, rho, heads), key="patching.scatter")
    if name in agree.index:
        row = agree.loc[name]
        st.caption(f"Mean over pairs: Spearman {_f(row['spearman'])} over {int(row['n_cells'])} cells, "
                   f"{_f(row['spearman_differing'])} over the {int(row['n_differing'])} cells whose clean and "
                   f"corrupted activations differ; top-{int(row['k'])} overlap {_f(row['topk_overlap'])}.")

    st.subheader("Top components (mean over pairs)")
    st.dataframe(top[top["grid"] == name].drop(columns=["grid"]), hide_index=True, placeholder=common.BLANK)
    st.subheader("Pairs")
    st.dataframe(pairs, hide_index=True, placeholder=common.BLANK)
