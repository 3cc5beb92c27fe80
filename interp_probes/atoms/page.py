"""Atoms page: the representation shift (Euclid vs AIP), units compared by R², q* and L0, the
capacity x data grid, the synthetic check, and Neuronpedia-like pages for TSAE atoms."""

from __future__ import annotations

import streamlit as st

from interp.store import Run
from interp_app import common
from interp_probes.atoms import figures as F


def render(run: Run) -> None:
    m = run.metrics
    common.metric_row(
        m,
        ("mean angle, Euclid", "{angle_mean_euclid_deg}"),
        ("mean angle, AIP", "{angle_mean_aip_deg}"),
        ("TSAE R² (AIP) / q*", "{r2_aip_tsae} / {q_star_tsae}"),
        ("SAE R² (AIP) / q*", "{r2_aip_sae} / {q_star_sae}"),
    )
    st.caption(f"Gated site `{run.config.get('hook')}`, metric {run.config.get('metric')}, target L0 "
               f"{run.config.get('target_l0')}; SAELens round trip "
               f"{'ok' if m.get('saelens_roundtrip_ok') else 'FAILED'} (max rel. err "
               f"{common.fmt_value(m.get('saelens_max_rel_err'))}).")

    st.subheader("Representation shift")
    angles, spectrum = common.optional_table(run, "angles"), common.optional_table(run, "spectrum")
    if angles is not None and len(angles):
        hooks = list(dict.fromkeys(angles["hook"]))
        hook = st.selectbox("Site", hooks, key=f"atoms.site:{run.path.name}")
        st.plotly_chart(F.angle_histogram(angles, hook), key="atoms.angles")
        st.caption("AIP angles sit near 90° by construction when the metric is estimated on the same distribution "
                   "(here on the training split, angles on held-out tokens): a sanity check of the whitening.")
        if spectrum is not None and len(spectrum):
            kind = st.radio("Moment", ["uncentered", "centered"], horizontal=True, key="atoms.moment")
            st.plotly_chart(F.spectrum_figure(spectrum, hook, kind), key="atoms.spectrum")

    st.subheader("Units: faithfulness and stability")
    units = common.optional_table(run, "units")
    if units is not None and len(units):
        st.plotly_chart(F.units_bars(units), key="atoms.units")
        st.dataframe(F.units_table(units), placeholder=common.BLANK)
        st.caption("q* is never meaningful without L0: with K ≤ 1 the uniqueness condition holds trivially. "
                   "Coherence is local (over co-active units, decoder rows at unit AIP norm): a global bound "
                   "cannot hold for an overcomplete dictionary (Welch bound).")
    support, curve = common.optional_table(run, "support_stats"), common.optional_table(run, "q_curve")
    if support is not None and len(support):
        st.plotly_chart(F.support_scatter(support), key="atoms.support")
        st.plotly_chart(F.coherence_histogram(support), key="atoms.coherence")
    if curve is not None and units is not None and len(curve):
        st.plotly_chart(F.q_curves(curve, units), key="atoms.qcurve")

    grid = common.optional_table(run, "grid")
    if grid is not None and len(grid):
        st.subheader("Capacity × data")
        view = st.radio("Show", list(F.GRID_VIEWS), format_func=F.GRID_VIEWS.get, horizontal=True,
                        key="atoms.grid_view")
        st.plotly_chart(F.grid_heatmap(grid, view), key="atoms.grid")
        st.caption("A dictionary with d close to n can memorise its training set: always read held-out R² "
                   "and the gap together.")

    synth = common.optional_table(run, "synthetic")
    if synth is not None and len(synth):
        st.subheader("Synthetic ground truth (known atoms)")
        st.dataframe(F.synthetic_table(synth), placeholder=common.BLANK)
        st.caption(f"Recovery: share of true atoms matched by a learned atom with |cos_AIP| ≥ 0.95. "
                   f"Neurons on the same data: R² {common.fmt_value(m.get('synthetic_r2_aip_neurons'))}, "
                   f"q* {common.fmt_value(m.get('synthetic_q_star_neurons'))}.")

    atom_pages(run)


def atom_pages(run: Run) -> None:
    contexts = common.optional_table(run, "tsae_top_contexts")
    if contexts is None or not len(contexts):
        return
    st.subheader("TSAE atoms")
    latents = sorted(set(contexts["latent"]))
    stats = common.optional_table(run, "tsae_latents")
    lat = st.selectbox("Latent (most frequent on held-out tokens)", latents, key=f"atoms.latent:{run.path.name}")
    if stats is not None:
        row = stats[stats["latent"] == lat]
        if len(row):
            r = row.iloc[0]
            st.caption(f"active on {100 * r['freq']:.2f}% of held-out tokens; mean {r['mean_act']:.3f}, "
                       f"max {r['max_act']:.3f}")
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Top-activating contexts**")
        for _, r in contexts[contexts["latent"] == lat].sort_values("rank").iterrows():
            st.markdown(F.context_html(r), unsafe_allow_html=True)
    with right:
        acts = common.optional_table(run, "tsae_acts")
        if acts is not None:
            st.plotly_chart(F.activation_histogram(acts, lat), key="atoms.acts")
    logits, neighbors = common.optional_table(run, "tsae_logits"), common.optional_table(run, "tsae_neighbors")
    a, b = st.columns(2)
    if logits is not None:
        sub = logits[logits["latent"] == lat]
        a.markdown("**Top ± logits** (W_dec row × unembedding, no final norm: approximate)")
        a.dataframe(sub.pivot(index="rank", columns="direction", values="token"), placeholder=common.BLANK)
    if neighbors is not None:
        b.markdown("**Nearest atoms (AIP cosine)**")
        b.dataframe(neighbors[neighbors["latent"] == lat][["neighbor", "cos_aip"]].reset_index(drop=True),
                    placeholder=common.BLANK)
