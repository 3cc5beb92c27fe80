"""Keystone page: a tiny cross-prompt neuron set, its collapse against matched controls, and its mechanism."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from interp.store import Run
from interp_app import common
from interp_probes.keystone import figures as F

K = "keystone."


def _ratio(m: dict, key: str) -> str:
    base, v = m.get("ppl_base"), m.get(key)
    if base is None or v is None:
        return "–"
    return f"{v / base:.3g}×"


def render(run: Run) -> None:
    m, t, cfg = run.metrics, run.timings, run.config
    if cfg.get("selection_mode") == "global":
        st.warning("Selection mode `global` ranks all neuron types together although their scales differ "
                   "widely (o and v are small, MLP post can be huge); use `per_layer` for the paper's method.")
    header(m, t)
    common.tabs(run, {"Neurons": neurons_panel, "Ablation": ablation_panel, "Sink decomposition": mechanism_panel,
                      "Stability": stability_panel, "Teacher forcing": tf_panel, "SFT": sft_panel,
                      "Prompts": prompts_panel})


def header(m: dict, t: dict) -> None:
    common.metric_row(
        m,
        ("keystone neurons", "{keystone_count}",
         "of {n_neurons} neurons; fraction {keystone_fraction} at p = {keystone_p}"),
        ("size vs a prompt's top-p set", "{keystone_prompt_set_ratio}",
         "keystone_count / the size of each prompt's top-p set (≤ 1 by construction)"),
        ("stability IoU (chance)", "{stability_iou} ({stability_iou_chance})"),
        ("MLP units (up ∪ down)", "{mlp_effective_neurons}"),
    )
    common.metric_row(
        m,
        ("ppl keystone / base", _ratio(m, "ppl_keystone_ablated"), "{ppl_keystone_ablated} vs {ppl_base}"),
        ("ppl random / base", _ratio(m, "ppl_random_ablated"), "median over matched random sets"),
        ("ppl high-norm / base", _ratio(m, "ppl_highnorm_ablated")),
        ("ppl swap / base", _ratio(m, "ppl_swap")),
    )
    common.metric_row(
        m,
        ("position-0 norm", "{pos0_norm_base} → {pos0_norm_ablated}",
         "max over layers of ‖resid_post‖ at position 0, base → keystone ablated"),
        ("sink mass", "{sink_mass_base} → {sink_mass_ablated}",
         "attention on position 0 (queries ≥ 1), base → keystone ablated"),
        ("task accuracy", "{task_acc_base} → {task_acc_keystone_ablated}",
         "random ablation: {task_acc_random_ablated}"),
        ("teacher-forcing speed-up", common.fmt_value(t.get("teacher_forced_speedup")),
         "max rel. error {teacher_forced_max_rel_err}"),
    )
    if m.get("lm_weights_unchanged") is False:
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
    if run.has("sets"):  # every swept p's set, as the probe selected it
        sets = run.table("sets")
        indices = F.cell_indices(sets[sets.p == p])
    else:  # a run from before the probe saved them: the main p's set only (its keystone table)
        indices = F.cell_indices(ks) if p == main_p else None
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
    st.dataframe(view[[c for c in cols if c in view]], hide_index=True, key=K + "table", placeholder=common.BLANK)
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
    common.metric_row(
        row,
        ("weight-slice norm", "{weight_norm}"),
        ("mean |act| / layer median", "{ratio_to_median}"),
        ("groups containing it", "{n_groups_containing}"),
    )
    left, right = st.columns(2)
    left.plotly_chart(F.neuron_bars(row), key=K + "bars")
    if run.has("mean_abs_act"):
        means, cells = F.prompt_means(run.tensor_file("mean_abs_act")), run.table("cells")
        cell = cells[(cells.p == p) & (cells.type == row["type"]) & (cells.layer == int(row["layer"]))]
        right.plotly_chart(F.cell_histogram(means, row["type"], int(row["layer"]), int(row["index"]),
                                            int(cell["c"].iloc[0]) if len(cell) else 1), key=K + "hist")
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
    st.dataframe(ab, hide_index=True, key=K + "ablation_table", placeholder=common.BLANK)
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
        st.dataframe(mw, hide_index=True, key=K + "writers", placeholder=common.BLANK)


def stability_panel(run: Run) -> None:
    if not run.has("stability") or not len(stab := run.table("stability")):
        st.info("Stability needs at least two prompt groups.")
        return
    st.plotly_chart(F.stability_matrix(stab), key=K + "stab")
    st.caption(f"Mean IoU {common.fmt_value(run.metrics.get('stability_iou'))}; chance level (random sets with the "
               f"same per-cell sizes) {common.fmt_value(run.metrics.get('stability_iou_chance'))}.")


def tf_panel(run: Run) -> None:
    common.metric_row(
        run.timings,
        ("per-step regeneration (padded to the pass)", "{tf_per_step_s} s"),
        ("one teacher-forced pass", "{tf_one_pass_s} s"),
        ("speed-up", "{teacher_forced_speedup}"),
    )
    t = run.timings
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
    st.dataframe(sft, hide_index=True, key=K + "sft_table", placeholder=common.BLANK)
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
