"""Graph-sawtooth page: per-layer structure vs its null, the ROI maps, layer selection, SLASH's
gamma sweep, accuracy against the random-layer control, and the exact invariants."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import streamlit as st

from interp.store import Run
from interp_app import common
from interp_app.figures import head_label
from interp_probes.graph_sawtooth import figures as F

_f = partial(common.fmt_digits, kind="f")


def render(run: Run) -> None:
    m = run.metrics
    layers = run.table("layer_scores")
    nulls = run.table("null_draws")
    sel = run.json("selection")
    l_star = int(m.get("best_layer", sel.get("l_star", 0)))
    S = [int(x) for x in sel["S"]]

    st.subheader("Is there a sawtooth beyond recency?")
    gap = max(0.05, 3 * (m.get("null_concentration_sd") or 0.0))
    thr = max(0.05, m.get("auc_excess_q95") or 0.0)
    common.metric_row(
        m,
        ("best-layer concentration (paper)", _f(m.get("best_layer_concentration")), None,
         f"{m['best_layer_concentration'] - m['null_concentration']:+.3f} vs null (gate +{gap:.3f})"),
        (f"plain AUC at l* = L{l_star} (not the paper's)", _f(m.get("best_layer_auc")), None,
         f"{m['best_layer_auc'] - m['null_auc']:+.3f} vs null (gate +{thr:.3f})"),
        ("distance-matched AUC at l*", _f(m.get("best_layer_auc_distmatched"))),
        ("locality baseline −(i−j)", _f(m.get("locality_auc"))),
    )
    common.metric_row(
        m,
        ("sink mass, mean over layers", _f(m.get("sink_mass_mean")), None,
         f"max {_f(m.get('sink_mass_max'))} at L{m.get('sink_mass_max_layer')}"),
        ("selected layers S", m.get("selected_layers", ""), None,
         "fallback" if m.get("selection_fallback") else "S_score ∩ S_ent"),
        ("γ_best (calibration)", _f(m.get("gamma_best"), 2)),
        ("non-graph perplexity ratio", _f(m.get("ppl_ratio_nongraph"), 4), None,
         f"at γ = {_f(m.get('gamma_controls'), 2)}"),
        delta_color="off",
    )

    sets = {"S_score": sel["S_score"]["layers"], "S_ent": sel["S_ent"]["layers"], "S": S}
    st.plotly_chart(F.layer_strip(layers, nulls, l_star, sets), key="graph_sawtooth.strip")
    st.plotly_chart(F.excess_plot(layers, thr, l_star), key="graph_sawtooth.excess")

    _roi_viewer(run, layers, S)

    st.subheader("Layer selection")
    ss = sel["S_score"]
    st.caption(f"S_score (Otsu over concentration): {ss['layers']} (threshold {ss['threshold']:.4f}"
               f"{', top-40 % fallback' if ss.get('top40_fallback') else ''}); S_ent band {sel['S_ent']['band']}; "
               f"S = {S}{' (fallback)' if sel.get('selection_fallback') else ''}.")
    st.plotly_chart(F.entropy_panel(sel["S_ent"]), key="graph_sawtooth.entropy")

    st.subheader("SLASH: calibration and test")
    sweep = run.table("gamma_sweep")
    st.plotly_chart(F.gamma_curve(sweep, float(m.get("gamma_best", 1.0))), key="graph_sawtooth.gamma")
    if "mean_abs_dlogprob" in sweep:
        st.caption("How far SLASH moves the scores, flipped or not (calibration, mean over items): the answer's "
                   "margin over the best other candidate, and |Δ log p(answer)| against γ = 1.")
        st.dataframe(sweep[sweep["task"] == "all"][["gamma", "acc_cal", "margin", "mean_abs_dlogprob"]],
                     hide_index=True, placeholder=common.BLANK)
    if "gamma_curve.parquet" in run.manifest.get("files", {}):
        curve = run.table("gamma_curve")
        st.plotly_chart(F.gamma_response(curve), key="graph_sawtooth.response")
        st.caption("The graded study (gamma_curve = true): every γ of the grid on the test split, SLASH on S against "
                   "the same edit on random layers. The margin is the answer's summed log-probability minus the best "
                   "other candidate's; it moves even where no argmax flips.")
        st.dataframe(curve, hide_index=True, placeholder=common.BLANK)
    ev = run.table("eval")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(F.accuracy_bars(ev), key="graph_sawtooth.acc")
    with right:
        st.plotly_chart(F.task_bars(ev), key="graph_sawtooth.tasks")
    st.caption(f"acc_slash − acc_random_layers = {m.get('acc_slash_minus_random', 0):+.3f} "
               f"(95 % bootstrap CI {_f(m.get('acc_slash_minus_random_ci_lo'))} … "
               f"{_f(m.get('acc_slash_minus_random_ci_hi'))}); random layer sets: {m.get('random_layer_sets', '')}. "
               "A gain means something only where it beats the random-layer control.")
    ctl = run.table("controls")
    st.dataframe(ctl, hide_index=True, placeholder=common.BLANK)

    st.subheader("Exact invariants of the edit")
    common.metric_row(
        m,
        ("max |row sum − 1|", f"{m.get('slash_rows_sum_max_err', 0):.2e}"),
        ("max |p'_s − γ p_s|", f"{m.get('slash_sink_ratio_max_err', 0):.2e}"),
        ("γ = 1: max |Δ logit|", f"{m.get('slash_gamma1_max_dlogit', 0):.2e}"),
        ("edited pattern reaches z", str(m.get("pattern_edit_reaches_z"))),
    )
    st.dataframe(run.table("invariants"), hide_index=True, placeholder=common.BLANK)

    if "head_scores.parquet" in run.manifest.get("files", {}):
        with st.expander("Per-head plain AUC excess over the null (not the paper's metric)"):
            st.plotly_chart(F.head_heatmap(run.table("head_scores")), key="graph_sawtooth.heads")


def _roi_viewer(run: Run, layers, S: list[int]) -> None:
    st.subheader("ROI viewer: attention over the edge list beside the template")
    if "roi_maps.safetensors" not in run.manifest.get("files", {}):
        st.info("This run stored no ROI maps (n_roi_maps = 0).")
        return
    maps = run.tensor_file("roi_maps")
    samples = run.table("samples")
    sel = samples[samples["split"] == "select"].reset_index(drop=True)
    shown = sorted(int(k.split("_")[1]) for k in maps if k.startswith("raw_"))
    n_layers = len(layers)
    c1, c2, c3 = st.columns([2, 2, 1])
    i = c1.selectbox("Sample", shown, format_func=lambda k: f"#{k}: {sel.loc[k, 'task']}, "
                     f"{sel.loc[k, 'n_nodes']} nodes, {sel.loc[k, 'n_edges']} edges", key="graph_sawtooth.sample")
    best = int(run.metrics.get("best_layer", 0))
    layer = c2.selectbox("Layer", list(range(n_layers)), index=best,
                         format_func=lambda x: f"L{x}" + (" (in S)" if x in S else "") + (" = l*" if x == best else ""),
                         key="graph_sawtooth.layer")
    per_head = c3.toggle("per head", key="graph_sawtooth.per_head")
    row = sel.loc[i]
    spans = json.loads(row["spans"])
    tokens = json.loads(row["roi_tokens"]) if isinstance(row.get("roi_tokens"), str) else []
    prompt = str(row["prompt"])  # its real line breaks, not a repr's "\n"
    st.caption("Prompt, as the model read it:")
    st.code(prompt, language=None, wrap_lines=True, height=400 if prompt.count("\n") > 16 else "content")
    raw, binary, template = maps[f"raw_{i}"][layer], maps[f"binary_{i}"][layer], maps[f"template_{i}"]
    title = f"sample #{i}, L{layer}: rows are queries, columns keys; segment blocks outlined"
    st.plotly_chart(F.roi_panels(raw, binary, template, tokens, spans, title), key="graph_sawtooth.roi")
    if per_head:
        if f"heads_{i}" in maps:
            st.plotly_chart(F.head_grid(np.asarray(maps[f"heads_{i}"][layer]), layer, spans),
                            key="graph_sawtooth.headgrid")
            st.caption("Heads " + ", ".join(head_label(layer, h) for h in range(maps[f"heads_{i}"].shape[1])) + ".")
        else:
            st.info("Per-head maps are stored for the first sample only.")
    if f"heads_{i}" in maps and np.asarray(maps[f"heads_{i}"]).shape[-1] == len(tokens):  # CircuitsVis view
        st.markdown(f"**CircuitsVis: every head of L{layer} over the ROI** (click a head to enlarge it)")
        hm = np.asarray(maps[f"heads_{i}"][layer])  # (heads, roi, roi)
        common.attention_view(hm, tokens, [head_label(layer, h) for h in range(hm.shape[0])])
    if f"slash_next_{i}" in maps:
        nxt = max(S) + 1
        if st.toggle(f"SLASH on/off: the map at L{nxt}, one layer after S", key="graph_sawtooth.slash_toggle"):
            st.plotly_chart(F.slash_toggle_panels(maps[f"raw_{i}"][nxt], maps[f"slash_next_{i}"], spans, nxt),
                            key="graph_sawtooth.next")
