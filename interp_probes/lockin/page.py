"""Lock-in page: the geometry of a narrow fine-tune (a project reconstruction; the paper was not found)."""

from __future__ import annotations

import math
from functools import partial

import streamlit as st

from interp.store import Run
from interp_app import common
from interp_probes.lockin import figures as F

BANNER = (
    "**Reconstruction.** The paper this probe is named after (trajectory lock-in, drift paradox, spectral "
    "bifurcation) was **not found**; every definition and threshold here is the project's own reconstruction. "
    "Closest related work: *The Geometry of Alignment Collapse* (arXiv 2602.15799), *LoRA Learns Less and Forgets "
    "Less* (arXiv 2405.09673), *On the Geometry of On-Policy Distillation* (arXiv 2606.07082), *Gradient descent "
    "happens in a tiny subspace* (Gur-Ari et al., 2018), PyHessian (Lanczos / power iteration on Hessian-vector "
    "products) and a loss-curvature account of fine-tuning fragility (HiLD @ ICML 2026). The method link above "
    "points to the first of these."
)
K = "lockin."


def render(run: Run) -> None:
    st.warning(BANNER)
    m = run.metrics
    common.metric_row(
        m,
        ("collapse R²", "{collapse_r2}", "R² of one shared monotone b(u) over all non-projection runs"),
        ("rate ratio", "{rate_ratio}", "max / min steps to u = 0.5 over non-projection runs"),
        ("ρ(b, ‖D‖) vs ρ(b, q̂)", "{drift_norm_spearman} vs {curvature_drift_spearman}",
         "drift paradox: Spearman across runs at matched u, Euclidean vs curvature-weighted drift"),
        ("harm signal ρ (random)", "{harm_signal_spearman} ({harm_signal_random_spearman})",
         "Spearman of the early predicted degradation against the final b; random k-frame control"),
    )
    common.metric_row(
        m,
        ("projection below curve", "{projection_run_below_curve}"),
        ("bifurcation detected", "{bifurcation_detected}"),
        ("λ₁ (Lanczos / power)", "{lambda_1} / {lambda_1_power}"),
        ("probe overhead", common.fmt_value(run.timings.get("probe_overhead_ratio")),
         "wall time per step with the probes on / off (same log-time loss evaluations)"),
    )
    st.caption(
        f"Curvature operator: {m.get('curvature', '?')}; HVP finite-difference error "
        f"{common.fmt_value(m.get('hvp_fd_rel_err'))} (eps {common.fmt_value(m.get('hvp_fd_eps'))}); "
        f"cached-input max |Δlogit| {common.fmt_value(m.get('cache_max_abs_diff'))}; "
        f"model weights unchanged: {common.fmt_value(m.get('lm_weights_unchanged'))}."
    )

    runs = run.table("runs")
    common.tabs(run, {"Collapse": partial(collapse_panel, runs=runs), "Paradox": partial(paradox_panel, runs=runs),
                      "Harm": partial(harm_panel, runs=runs), "Subspace": partial(subspace_panel, runs=runs),
                      "Spectrum": spectrum_panel, "Bifurcation": partial(bifurcation_panel, runs=runs),
                      "Overhead & drift": overhead_panel, "Ground truth": ground_truth_panel})


def collapse_panel(run: Run, runs) -> None:
    curve = run.table("curve_fit") if run.has("curve_fit") else None
    sigma = float(curve["sigma_res"].iloc[0]) if curve is not None and len(curve) else None
    shape, speed = st.tabs(["b against u", "u(t) and b(t)"])
    with shape:
        st.plotly_chart(F.collapse(runs, curve, sigma), key=K + "collapse")
        if run.has("below_curve") and len(run.table("below_curve")):
            st.caption("Projection run against the shared curve at fixed u levels:")
            st.dataframe(run.table("below_curve"), hide_index=True, placeholder=common.BLANK)
    with speed:
        st.plotly_chart(F.rates(runs), key=K + "rates")
        st.dataframe(run.table("rates"), hide_index=True, placeholder=common.BLANK)
    st.dataframe(run.table("run_configs"), hide_index=True, placeholder=common.BLANK)


def paradox_panel(run: Run, runs) -> None:
    st.plotly_chart(F.drift_vs_broad(runs), key=K + "drift")
    table = run.table("paradox")
    if not len(table):
        st.info("No u level in {0.3, 0.5, 0.7} is reached by at least 4 runs: no matched-u comparison.")
        return
    levels = sorted(table["u_level"].unique())
    level = st.selectbox("u level", levels, key=K + "level")
    m = run.metrics
    st.plotly_chart(F.paradox(table, level, m.get("drift_norm_spearman"), m.get("curvature_drift_spearman")),
                    key=K + "paradox")


def harm_panel(run: Run, runs) -> None:
    st.plotly_chart(F.harm_series(runs, run.table("steps")), key=K + "harm")
    st.plotly_chart(F.predicted_vs_observed(runs), key=K + "pred")
    m = run.metrics
    st.plotly_chart(F.early_harm(run.table("rates"), m.get("harm_signal_spearman"),
                                 m.get("harm_signal_random_spearman")), key=K + "early")
    if run.has("harm_curve") and len(run.table("harm_curve")):
        steps = run.config.get("steps")
        frac = run.config.get("early_frac")
        harm_step = math.ceil(frac * steps) if steps and frac else None
        st.plotly_chart(F.harm_curve(run.table("harm_curve"), harm_step), key=K + "harm_curve")
        st.caption("Negative ρ would mean the wrong sign; the claim is a strongly positive ρ early in the run, above "
                   "the random-frame control and above what the observed b already tells.")


def subspace_panel(run: Run, runs) -> None:
    st.plotly_chart(F.series(runs, "erank", "Effective rank of the update window", "erank"), key=K + "erank")
    st.plotly_chart(F.series(runs, "max_angle_deg", "Largest principal angle between V_t and V_{t−τ}", "degrees"),
                    key=K + "angle")
    ids = list(dict.fromkeys(runs["run_id"]))
    rid = st.selectbox("run", ids, key=K + "run")
    overlaps = run.table("overlaps")
    if len(overlaps[overlaps["run_id"] == rid]):
        st.plotly_chart(F.overlap_heatmap(overlaps, rid), key=K + "heat")
    spectra = run.tensor_file("spectra")
    sv, steps = spectra.get(f"sv_{rid}"), spectra.get(f"sv_steps_{rid}")
    if sv is not None and len(sv) > 1:
        i = st.slider("log", 0, len(sv) - 1, len(sv) - 1, key=K + "svlog",
                      help="singular values of the stacked window of updates U_t at this log")
        st.plotly_chart(F.singular_values(sv, steps, i), key=K + "sv")


def bifurcation_panel(run: Run, runs) -> None:
    st.plotly_chart(F.bifurcation(runs, run.table("changepoints")), key=K + "bif")
    st.caption("The most speculative part of the reconstruction: reported, gated only on synthetic data.")
    st.dataframe(run.table("changepoints"), hide_index=True, placeholder=common.BLANK)


def overhead_panel(run: Run) -> None:
    st.dataframe(F.timings_table(run.timings), hide_index=True, placeholder=common.BLANK)
    st.plotly_chart(F.matrices(run.table("matrices")), key=K + "mats")


def spectrum_panel(run: Run) -> None:
    spectra = run.tensor_file("spectra")
    lam_power = spectra.get("lambda_power")
    st.plotly_chart(F.spectrum(spectra["ritz_all"], spectra["lambda"],
                               float(lam_power[0]) if lam_power is not None else None), key=K + "spectrum")
    m = run.metrics
    st.caption(f"λ₁: Lanczos {common.fmt_value(m.get('lambda_1'))}, power iteration "
               f"{common.fmt_value(m.get('lambda_1_power'))} (relative difference "
               f"{common.fmt_value(m.get('lanczos_power_rel_diff'))}); restarts {m.get('lanczos_restarts', '–')}.")


def ground_truth_panel(run: Run) -> None:
    if not run.has("synthetic"):
        st.info("This run skipped the quadratic ground truth (synthetic = false).")
        return
    m = run.metrics
    st.markdown(
        "The quadratic ground truth with known answers (5 stiff directions at λ = 100, 195 soft at 0.1; the narrow "
        "loss sees the stiff five weakly and 20 soft ones strongly): every instrument on this page is checked "
        "against it. Passed: **" + common.fmt_value(m.get("synthetic_passed")) + "**."
    )
    names = ["stiff_max_angle_deg", "collapse_r2", "rate_ratio", "drift_norm_spearman", "curvature_drift_spearman",
             "harm_signal_spearman", "harm_signal_random_spearman", "projection_run_below_curve",
             "bifurcation_detected", "bifurcation_detected_control"]
    st.dataframe([{"check": n, "value": common.fmt_value(m.get(f"synthetic_{n}"))} for n in names], hide_index=True,
                 placeholder=common.BLANK)
    syn = run.table("synthetic_runs")
    st.plotly_chart(F.collapse(syn, None, None), key=K + "syn")
    st.dataframe(run.table("synthetic"), hide_index=True, placeholder=common.BLANK)
