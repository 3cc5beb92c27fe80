"""Keystone page: a tiny cross-prompt neuron set, its collapse against matched controls, and its mechanism."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import common
from app.figures import keystone as F
from interp.store import Run

QUESTION = (
    "Is there a tiny, prompt-independent set of neurons (largest mean |activation| while the model generates, "
    "shared by prompts of different capabilities) whose zeroing destroys the model while a matched random set "
    "does not, and how much of that collapse runs through the position-0 massive activation and the attention sink?"
)
METHOD = "https://arxiv.org/abs/2605.24846"
K = "keystone."


def _ratio(m: dict, key: str) -> str:
    base, v = m.get("ppl_base"), m.get(key)
    if base is None or v is None:
        return "–"
    return f"{v / base:.3g}×"


def render(run: Run) -> None:
    common.intro(QUESTION, METHOD, run)
    m, t, cfg = run.metrics, run.timings, run.config
    if cfg.get("selection_mode") == "global":
        st.warning("Selection mode `global` ranks all neuron types together although their scales differ "
                   "widely (o and v are small, MLP post can be huge); use `per_layer` for the paper's method.")
    header(m, t)
    tabs = st.tabs(["Neurons", "Ablation", "Sink decomposition", "Stability", "Teacher forcing", "SFT", "Prompts"])
    with tabs[0]:
        neurons_panel(run)
    with tabs[1]:
        ablation_panel(run)
    with tabs[2]:
        mechanism_panel(run)
    with tabs[3]:
        stability_panel(run)
    with tabs[4]:
        tf_panel(run)
    with tabs[5]:
        sft_panel(run)
    with tabs[6]:
        prompts_panel(run)


def header(m: dict, t: dict) -> None:
    fv = common.fmt_value
    cols = st.columns(4)
    cols[0].metric("keystone neurons", fv(m.get("keystone_count")),
                   help=f"of {fv(m.get('n_neurons'))} neurons; fraction {fv(m.get('keystone_fraction'))} at "
                        f"p = {fv(m.get('keystone_p'))}")
    cols[1].metric("size vs a prompt's top-p set", fv(m.get("keystone_prompt_set_ratio")),
                   help="keystone_count / the size of each prompt's top-p set (≤ 1 by construction)")
    cols[2].metric("stability IoU (chance)", f"{fv(m.get('stability_iou'))} ({fv(m.get('stability_iou_chance'))})")
    cols[3].metric("MLP units (up ∪ down)", fv(m.get("mlp_effective_neurons")))
    cols = st.columns(4)
    cols[0].metric("ppl keystone / base", _ratio(m, "ppl_keystone_ablated"),
                   help=f"{fv(m.get('ppl_keystone_ablated'))} vs {fv(m.get('ppl_base'))}")
    cols[1].metric("ppl random / base", _ratio(m, "ppl_random_ablated"), help="median over matched random sets")
    cols[2].metric("ppl high-norm / base", _ratio(m, "ppl_highnorm_ablated"))
    cols[3].metric("ppl swap / base", _ratio(m, "ppl_swap"))
    cols = st.columns(4)
    cols[0].metric("position-0 norm", f"{fv(m.get('pos0_norm_base'))} → {fv(m.get('pos0_norm_ablated'))}",
                   help="max over layers of ‖resid_post‖ at position 0, base → keystone ablated")
    cols[1].metric("sink mass", f"{fv(m.get('sink_mass_base'))} → {fv(m.get('sink_mass_ablated'))}",
                   help="attention on position 0 (queries ≥ 1), base → keystone ablated")
    cols[2].metric("task accuracy", f"{fv(m.get('task_acc_base'))} → {fv(m.get('task_acc_keystone_ablated'))}",
                   help=f"random ablation: {fv(m.get('task_acc_random_ablated'))}")
    cols[3].metric("teacher-forcing speed-up", fv(t.get("teacher_forced_speedup")),
                   help=f"max rel. error {fv(m.get('teacher_forced_max_rel_err'))}")
    if m.get("weights_hash_restored") is False:
        st.error("The model's weight hash differed after the conditions: the run is not trustworthy.")


# ----------------------------------------------------------------------------- panels


def neurons_panel(run: Run) -> None:
    if not run.has("keystone") or not run.has("cells"):
        st.info("This run has no keystone table.")
        return
    ks, cells = run.table("keystone"), run.table("cells")
    main_p = float(run.metrics.get("keystone_p") or run.config.get("top_p", 0.005))
    ps = sorted(set(cells["p"]))
    p = st.select_slider("p", options=ps, value=main_p if main_p in ps else ps[0], key=K + "p") if len(ps) > 1 \
        else ps[0]
    indices = F.cell_indices(ks) if p == main_p else None
    if indices is None and run.has("mean_abs_act"):
        sets = F.keystone_at(F.prompt_means(run.tensor_file("mean_abs_act")), p,
                             F.kv_repeat(run.manifest.get("model", {}), run.config))
        indices = {(t, int(layer)): [int(i) for i in m[layer].nonzero()[0]] for t, m in sets.items()
                   for layer in range(m.shape[0]) if m[layer].any()}
    event = st.plotly_chart(F.count_heatmap(cells, p, indices), key=K + "heatmap", on_select="rerun",
                            selection_mode="points")
    picked = _picked_cell(event)

    st.subheader(f"Keystone neurons (p = {main_p:g})")
    types = ["all"] + sorted(ks["type"].unique())
    c1, c2 = st.columns(2)
    t_sel = c1.selectbox("type", types, index=types.index(picked[0]) if picked and picked[0] in types else 0,
                         key=K + "type")
    layers = ["all"] + sorted(int(x) for x in ks["layer"].unique())
    l_sel = c2.selectbox("layer", layers, index=layers.index(picked[1]) if picked and picked[1] in layers else 0,
                         key=K + "layer")
    view = ks
    if t_sel != "all":
        view = view[view.type == t_sel]
    if l_sel != "all":
        view = view[view.layer == l_sel]
    cols = ["type", "layer", "index", "head", "dim", "kv_head", "mean_act", "ratio_to_median", "weight_norm",
            "n_groups_containing", "is_massive_writer", "massive_dim_badge", "top_tokens"]
    cols += F.prompt_columns(ks, "mean_act_prompt_")
    st.dataframe(view[[c for c in cols if c in view]], hide_index=True, key=K + "table")
    if not len(view):
        return
    labels = [f"{r.type} L{int(r.layer)} #{int(r.index)}" for r in view.itertuples()]
    choice = st.selectbox("Neuron", range(len(labels)), format_func=labels.__getitem__, key=K + "neuron")
    neuron_panel(run, view.iloc[int(choice)], main_p)


def _picked_cell(event) -> tuple[str, int] | None:
    try:
        pts = event["selection"]["points"]
    except (KeyError, TypeError):
        return None
    if not pts:
        return None
    return str(pts[0].get("x")), int(pts[0].get("y"))


def neuron_panel(run: Run, row: pd.Series, p: float) -> None:
    fv = common.fmt_value
    badges = []
    if bool(row.get("is_massive_writer")):
        badges.append(f"🔴 massive writer: alone it cuts the position-0 norm by {fv(row.get('writer_cut_frac'))}")
    if bool(row.get("massive_dim_badge")):
        badges.append(f"🟠 its output column peaks on massive residual dimension {fv(row.get('out_argmax_dim'))}")
    if badges:
        st.markdown("  \n".join(badges))
    cols = st.columns(3)
    cols[0].metric("weight-slice norm", fv(row.get("weight_norm")))
    cols[1].metric("mean |act| / layer median", fv(row.get("ratio_to_median")))
    cols[2].metric("groups containing it", fv(row.get("n_groups_containing")))
    left, right = st.columns(2)
    left.plotly_chart(F.neuron_bars(row), key=K + "bars")
    if run.has("mean_abs_act"):
        means = F.prompt_means(run.tensor_file("mean_abs_act"))
        right.plotly_chart(F.cell_histogram(means, row["type"], int(row["layer"]), int(row["index"]), p),
                           key=K + "hist")
    if isinstance(row.get("top_tokens"), str):
        st.caption("Top tokens promoted by its down_proj column through the unembedding (approximate: the final "
                   f"norm is skipped): {row['top_tokens']}")


def ablation_panel(run: Run) -> None:
    if not run.has("ablation"):
        st.info("This run skipped the ablation conditions (ablation=false).")
        return
    ab = run.table("ablation")
    st.plotly_chart(F.ablation_ppl(ab), key=K + "ppl")
    left, right = st.columns(2)
    left.plotly_chart(F.task_accuracy(ab), key=K + "tasks")
    if run.has("p_sweep"):
        right.plotly_chart(F.p_sweep(run.table("p_sweep"), run.metrics.get("ppl_base")), key=K + "sweep")
    st.dataframe(ab, hide_index=True, key=K + "ablation_table")
    if run.has("token_strip"):
        st.plotly_chart(F.token_strip(run.table("token_strip")), key=K + "strip")


def mechanism_panel(run: Run) -> None:
    if not run.has("ablation") or not run.has("sink"):
        st.info("This run skipped the ablation conditions.")
        return
    m, fv = run.metrics, common.fmt_value
    st.markdown(
        f"Massive writers (single-unit ablation cuts the position-0 norm by > 50 %): "
        f"`{m.get('massive_writer_units')}`. Perplexity: base {fv(m.get('ppl_base'))}, writers only "
        f"{fv(m.get('ppl_massive_only'))}, keystone minus writers {fv(m.get('ppl_keystone_minus_massive'))}, "
        f"keystone {fv(m.get('ppl_keystone_ablated'))}."
    )
    ab, sink = run.table("ablation"), run.table("sink")
    st.plotly_chart(F.decomposition(ab), key=K + "decomp")
    left, right = st.columns(2)
    left.plotly_chart(F.by_layer(sink, "pos0_norm", F.DECOMPOSITION, "Position-0 residual norm by layer", log=True),
                      key=K + "pos0")
    right.plotly_chart(F.by_layer(sink, "sink_mass", ("base", "keystone"), "Attention on position 0 by layer"),
                       key=K + "sink")
    if run.has("massive_writers"):
        mw = run.table("massive_writers").sort_values("cut_frac", ascending=False)
        st.caption("Single-unit position-0 test, every keystone unit (largest cut first)")
        st.dataframe(mw, hide_index=True, key=K + "writers")


def stability_panel(run: Run) -> None:
    if not run.has("stability") or not len(stab := run.table("stability")):
        st.info("Stability needs at least two prompt groups.")
        return
    st.plotly_chart(F.stability_matrix(stab), key=K + "stab")
    st.caption(f"Mean IoU {common.fmt_value(run.metrics.get('stability_iou'))}; chance level (random sets with the "
               f"same per-cell sizes) {common.fmt_value(run.metrics.get('stability_iou_chance'))}.")


def tf_panel(run: Run) -> None:
    t = run.timings
    cols = st.columns(3)
    cols[0].metric("per-step loop", f"{common.fmt_value(t.get('tf_per_step_s'))} s")
    cols[1].metric("one teacher-forced pass", f"{common.fmt_value(t.get('tf_one_pass_s'))} s")
    cols[2].metric("speed-up", common.fmt_value(t.get("teacher_forced_speedup")))
    st.caption(f"{common.fmt_value(t.get('tf_check_tokens'))} tokens of the first prompt recorded both ways. "
               f"Top-p sets identical: {common.fmt_value(run.metrics.get('tf_keystone_sets_identical'))}; "
               f"max relative error {common.fmt_value(run.metrics.get('teacher_forced_max_rel_err'))}. "
               f"CPU time (robust to other jobs on the machine): {common.fmt_value(t.get('tf_per_step_cpu_s'))} s vs "
               f"{common.fmt_value(t.get('tf_one_pass_cpu_s'))} s, "
               f"{common.fmt_value(t.get('teacher_forced_speedup_cpu'))}×.")
    if run.has("tf_check"):
        st.plotly_chart(F.tf_error(run.table("tf_check")), key=K + "tf")


def sft_panel(run: Run) -> None:
    if not run.has("sft"):
        st.info("This run did not fine-tune (sft.enable=false); the SFT comparison is a separate run.")
        return
    sft = run.table("sft")
    st.dataframe(sft, hide_index=True, key=K + "sft_table")
    if run.config.get("sft", {}).get("mode") == "paper":
        st.warning("Paper mode: gate_proj, norms, embeddings and lm_head stay trainable and weight decay is not "
                   "masked, as in the released code.")
    left, right = st.columns(2)
    if run.has("sft_curves"):
        left.plotly_chart(F.sft_curves(run.table("sft_curves")), key=K + "curves")
    right.plotly_chart(F.gain_vs_forgetting(sft), key=K + "gain")
    if "lr" in sft and sft["lr"].nunique() > 1:
        st.plotly_chart(F.sft_lr_sweep(sft), key=K + "lr_sweep")
        st.caption("The sparse masks at every sft.lr_sweep value against full fine-tuning at sft.lr, all on the same "
                   "steps and data order, with the released trainer's settings (linear schedule, clip 1.0, no decay "
                   "on biases and norms).")
    if run.has("sft_evals"):
        evals = run.table("sft_evals")
        if evals["step"].nunique() > 2:
            n_eval = (run.config.get("sft") or {}).get("n_eval")
            st.plotly_chart(F.sft_progress(evals, n_eval), key=K + "progress")
            if n_eval:
                st.caption(f"Bars: 95 % Wilson intervals of the held-out accuracy ({n_eval} items).")


def prompts_panel(run: Run) -> None:
    if not run.has("generations"):
        return
    gens = run.table("generations")
    for r in gens.itertuples():
        with st.expander(f"group {r.group} · {r.prompt_id} ({r.capability}) · {r.n_generated} tokens"):
            st.markdown("**Prompt as the model read it**")
            st.code(r.templated_prompt, language=None)
            st.markdown("**Generated**")
            st.code(r.generated_text, language=None)
