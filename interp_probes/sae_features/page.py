"""Feature-dashboard page: any SAE's features, searched by top token, with contexts, histograms and logits."""

from __future__ import annotations

import streamlit as st

from interp.store import Run
from interp_app import common
from interp_probes.sae_features import figures as F


def render(run: Run) -> None:
    feats = run.table("features")
    contexts = run.table("contexts")
    hist = run.tensor_file("histograms")
    info = run.json("sae")
    m = run.metrics
    common.metric_row(
        m,
        ("features", f"{int(m.get('n_features', len(feats))):,}"),
        ("tokens", f"{int(m.get('n_tokens', 0)):,}"),
        ("dead", f"{m.get('dead_frac', 0):.1%}"),
        ("mean L0", "{mean_l0}"),
        ("single-token features", f"{m.get('single_token_frac', 0):.0%}"),
    )
    st.caption(f"SAE `{info.get('spec')}` at `{info.get('hook_name')}` · d_sae {info.get('d_sae')} · "
               f"{info.get('architecture')} · position 0 excluded · export: "
               f"`interp export neuronpedia {common.ref(run)} OUT`")
    st.plotly_chart(F.density_histogram(feats), key="sae_features.density")

    st.subheader("Find a feature")
    query = st.text_input("Search features by top token", value=st.query_params.get("token", ""),
                          key="sae_features.search", placeholder="e.g. the, Paris, 1",
                          help="Features whose top-activating token is this token (the purest first); "
                          "empty: the densest features.")
    hits = F.search(feats, query)
    if hits.empty:
        st.info(f"No live feature has the top token {query!r}.")
        return
    st.dataframe(hits[["feature", "top_token", "top_token_share", "density", "max_act"]].head(50), hide_index=True,
                 column_config={"density": st.column_config.NumberColumn(format="%.2e"),
                                "top_token_share": st.column_config.NumberColumn("share", format="%.2f")},
                 height=min(38 * (min(len(hits), 50) + 1), 300), placeholder=common.BLANK)
    options = hits["feature"].tolist()
    wanted = st.query_params.get("feature")
    index = options.index(int(wanted)) if wanted and wanted.isdigit() and int(wanted) in options else 0
    feature = st.selectbox("Feature", options, index=index, key=f"sae_features.feature:{query}",
                           format_func=lambda f: f"{f} · top token {feats.at[f, 'top_token']!r}")
    row = feats.loc[feature]
    show_feature(run, row, contexts[contexts["feature"] == feature], hist)


def show_feature(run: Run, row, ctx, hist) -> None:
    f = int(row["feature"])
    st.subheader(f"Feature {f}")
    common.metric_row(
        row,
        ("density", "{density:.2e}"),
        ("max activation", "{max_act:.3g}"),
        ("mean non-zero", "{mean_act:.3g}"),
        ("top token", "{top_token!r}", None, "{top_token_share:.0%} of top contexts"),
        delta_color="off",
    )
    left, right = st.columns(2)
    with left:
        st.plotly_chart(F.activation_histogram(hist["act_counts"][f], float(hist["act_max"][f]), f),
                        key="sae_features.hist")
    with right:
        st.plotly_chart(F.logit_bars(row), key="sae_features.logits")
    vmax = float(row["max_act"])
    top = ctx[ctx["kind"] == "top"].sort_values("act", ascending=False)
    st.markdown("**Top-activating contexts** (the kept token outlined; colour: the feature's value per token)")
    st.html(F.contexts_html(top, vmax))
    kinds = sorted((k for k in ctx["kind"].unique() if k.startswith("interval_")), key=lambda k: -int(k.split("_")[1]))
    if kinds:
        st.markdown("**Quantile samples**: contexts drawn uniformly from equal-width activation intervals")
        n = int(run.config.get("n_intervals", len(kinds)))
        for k in kinds:
            q = int(k.split("_")[1])
            rows = ctx[ctx["kind"] == k].sort_values("act", ascending=False)
            st.html(F.contexts_html(rows, vmax, f"interval {q / n:.1f}-{(q + 1) / n:.1f} x max ({len(rows)})"))
