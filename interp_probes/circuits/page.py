"""circuits page: the pruned attribution graph, a clicked feature's contexts and logits, quality, the ablation test."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from interp.store import Run
from interp_app import common
from interp_app.figures import token_label
from interp_probes.circuits import figures as F


def render(run: Run) -> None:
    m = run.metrics
    g, meta = run.tensor_file("graph"), run.json("graph_meta")
    common.metric_row(
        m,
        ("top prediction", "{top_token} (p={top_prob:.2f})"),
        ("replacement vs real logits", "{replacement_rel_err:.1e}", "max |difference| / max |logit|, with error nodes"),
        ("completeness error", "{completeness_rel_err:.1e}", "every node's input against its edges + bias"),
        ("nodes / edges kept", "{n_pruned_nodes} / {n_pruned_edges}"),
    )
    st.caption(f"Prompt: {meta['prompt']!r}. {m.get('n_attributed_features')} of {m.get('n_active_features')} active "
               f"features attributed; replacement score {m.get('replacement_score', float('nan')):.2f}, "
               f"completeness score {m.get('completeness_score', float('nan')):.2f} (circuit-tracer's).")
    st.subheader("Pruned graph")
    event = st.plotly_chart(F.graph_figure(g, meta), key="circuits.graph", on_select="rerun",
                            selection_mode="points")
    nodes = F.nodes_table(g, meta)
    feats = nodes[nodes.kind == "feature"]
    clicked = _clicked(event, feats)
    if len(feats):
        labels = {int(r.node): r.label for r in feats.itertuples()}
        order = feats.sort_values("influence", ascending=False)["node"].astype(int).tolist()
        node = st.selectbox("Feature", order, index=order.index(clicked) if clicked in order else 0,
                            format_func=labels.get, key=f"circuits.feature:{run.path.name}")
        row = feats.set_index("node").loc[node]
        _feature(run, int(row.layer), int(row.feature))
    st.subheader("Does the graph predict ablations in the real model?")
    rows = common.optional_table(run, "ablations")
    if rows is None or not len(rows):
        st.info("This run skipped the ablation test (n_prompts = 0).")
    else:
        common.metric_row(
            m,
            ("Spearman, graph's choices", "{spearman_graph:.2f}", "predicted vs observed change, real attention"),
            ("... frozen attention", "{spearman_graph_frozen:.2f}"),
            ("graph beats random", "{graph_beats_random:.2f}", "share of (prompt, k) where it moves the logit more"),
            ("graph beats top activation", "{graph_beats_activation:.2f}"),
        )
        which = st.radio("Observed in the real model with attention", ["observed", "observed_frozen"],
                         format_func={"observed": "as it is", "observed_frozen": "frozen (as the graph assumes)"}.get,
                         horizontal=True, key="circuits.observed")
        st.plotly_chart(F.ablation_figure(rows, which), key="circuits.ablations")
    st.subheader("Transcoders")
    table = run.table("transcoder_quality")
    common.metric_row(
        m,
        ("FVE (mean over layers)", "{fve_mean:.3f}"),
        ("L0 (mean)", "{l0_mean:.1f}"),
        ("loss gap recovered", "{recovered_mean:.3f}", "per layer, spliced in alone; mean over layers"),
        ("dead features", "{dead_fraction_mean:.3f}"),
    )
    st.plotly_chart(F.quality_figure(table), key="circuits.quality")


def _clicked(event, feats: pd.DataFrame) -> int | None:
    """The node id of a clicked feature marker, if any."""
    try:
        points = event.selection.points  # type: ignore[union-attr]
    except AttributeError:
        return None
    for p in points or []:
        node = p.get("customdata")
        node = node[0] if isinstance(node, list) else node
        if node is not None and int(node) in set(feats.node.astype(int)):
            return int(node)
    return None


def _feature(run: Run, layer: int, feature: int) -> None:
    left, right = st.columns([3, 2])
    with left:
        st.markdown(f"**Top held-out contexts of L{layer} #{feature}**")
        ctx = common.optional_table(run, "feature_contexts")
        part = ctx[(ctx.layer == layer) & (ctx.feature == feature)] if ctx is not None and len(ctx) else None
        if part is None or not len(part):
            st.caption("It fires on none of the held-out tokens.")
        else:
            st.dataframe(pd.DataFrame({
                "activation": part.activation.round(3),
                "context": ["".join(f"[{token_label(t, 20, escape=False)}]" if i == at else
                                    token_label(t, 20, escape=False) for i, t in enumerate(toks))
                            for toks, at in zip(part.tokens, part["at"], strict=True)]}), hide_index=True)
    with right:
        st.markdown("**Output logits (decoder through the unembedding)**")
        lg = common.optional_table(run, "feature_logits")
        part = lg[(lg.layer == layer) & (lg.feature == feature)] if lg is not None and len(lg) else None
        if part is not None and len(part):
            st.dataframe(part[["direction", "token", "value"]].assign(
                token=[token_label(t, 20, escape=False) for t in part.token], value=part.value.round(3)),
                hide_index=True)
