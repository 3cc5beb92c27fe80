"""circuits page: the pruned attribution graph, a clicked node's contexts, logits and edges, quality, the ablation test.

One source of truth for the selected node: the selectbox's session state (`node_key`). A click on the graph sets
it in the chart's on_select callback, which runs before the page reruns (a selectbox with a `key` ignores a new
`index`, so the click must go through its state); the graph, the selectbox and the node box all read it.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from interp.store import Run
from interp_app import common
from interp_probes.circuits import figures as F

#: Where to get better transcoders, by the run's size (train only) and always.
BETTER_DEFAULT = ("`interp run circuits` without `--size` trains the default set (1,152 features a layer on 100k "
                  "tokens held in a 6.9 GB buffer: about 16 minutes on 2 CPU cores, once; it is cached after)")
BETTER_PRETRAINED = ("`interp run circuits --set transcoders=DIR` loads a pretrained set (a directory written by "
                     "`interp.sae.save_transcoders` or by circuit-tracer; with `INTERP_ONLINE=1` also "
                     "`saelens:<release>/<id with {l}>` or `circuit-tracer:<owner>/<repository>`)")


def node_key(run: Run) -> str:
    """Session-state key of the selected node (the selectbox's key) of this run's page."""
    return f"circuits.node:{run.path.name}"


def chart_key(run: Run) -> str:
    return f"circuits.graph:{run.path.name}"


def render(run: Run) -> None:
    m = run.metrics
    g, meta = run.tensor_file("graph"), run.json("graph_meta")
    common.metric_row(
        m,
        ("top prediction", "{top_token!r} (p={top_prob:.2f})"),
        ("replacement vs real logits", "{replacement_rel_err:.1e}", "max |difference| / max |logit|, with error nodes"),
        ("completeness error", "{completeness_rel_err:.1e}", "every node's input against its edges + bias"),
        ("nodes / edges kept", "{n_pruned_nodes} / {n_pruned_edges}"),
    )
    weak_warning(run)
    st.caption(f"Prompt: {meta['prompt']!r}. {m.get('n_attributed_features')} of {m.get('n_active_features')} active "
               f"features attributed; replacement score {m.get('replacement_score', float('nan')):.2f}, "
               f"completeness score {m.get('completeness_score', float('nan')):.2f} (circuit-tracer's).")
    st.subheader("Attribution graph (pruned)")
    graph(run, g, meta)
    ablations(run, m)
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


def weak_warning(run: Run) -> None:
    """A warning box when the transcoders fail the `F.WEAK` checks, saying how to get better ones."""
    failed = F.weak_transcoders(run.metrics)
    if not failed:
        return
    cfg = run.config
    better = [BETTER_PRETRAINED]
    if cfg.get("transcoders", "train") == "train" and cfg.get("size", "default") != "default":
        better.insert(0, BETTER_DEFAULT)
    st.warning("**These transcoders are weak**, so the graph below is a rough sketch: much of what the model "
               "does runs through error nodes, and features may not mean what their contexts suggest.\n\n"
               + "\n".join(f"- {f}" for f in failed)
               + "\n\nFor better ones: " + "; or ".join(better) + ".", icon="⚠️")


def graph(run: Run, g: dict, meta: dict) -> None:
    """The edge slider and node selector, the graph, and the selected node's box."""
    nodes = F.nodes_table(g, meta)
    edges = F.edges_table(g)
    if not len(nodes):
        st.info("Pruning kept no node.")
        return
    labels = nodes.set_index("node")["label"].to_dict()
    order = options(nodes)
    key = node_key(run)
    left, right = st.columns([1, 2])
    n_edges = 0
    with left:
        if len(edges):  # a slider needs a range
            n_edges = st.slider("Edges drawn (the strongest)", 0, len(edges), min(F.DEFAULT_EDGES, len(edges)),
                                key=f"circuits.edges:{run.path.name}",
                                help=f"The pruned graph keeps {len(edges):,} edges; drawing them all makes a "
                                f"hairball. The selected node's {F.OWN_EDGES} strongest edges are drawn too.")
        else:
            st.caption("The pruned graph keeps no edge.")
    with right:
        node = st.selectbox("Selected node (or click one on the graph)", order, format_func=labels.get, key=key)
    st.plotly_chart(F.graph_figure(g, meta, max_edges=n_edges, selected=node), key=chart_key(run),
                    on_select=lambda: on_click(run, set(labels)), selection_mode="points")
    st.caption(
        "Columns: the prompt's tokens (position 0 first); rows: layers, token embeddings at the bottom, the "
        "next-token logits on top of the last position. A **feature** is one transcoder feature active at "
        "one position; an **error** node is what the transcoders miss of that layer's MLP output there. "
        "**Edges** are direct effects on the target's input: green excites (positive weight), purple "
        "inhibits (negative); width grows with |weight|. The selected node's edges are drawn strong and the "
        "rest faded; hover the middle of an edge for its source, target and weight.")
    node_box(run, nodes.set_index("node").loc[node], edges, labels)


def options(nodes: pd.DataFrame) -> list[int]:
    """Node ids in the selectbox's order: features by influence (the most influential first, the default), then
    logits by probability, errors and embeddings."""
    rank = {"feature": 0, "logit": 1, "error": 2, "embedding": 3}
    t = nodes.assign(r=nodes.kind.map(rank), s=-nodes.influence.where(nodes.kind != "logit", nodes.prob))
    return t.sort_values(["r", "s", "node"])["node"].astype(int).tolist()


def on_click(run: Run, valid: set[int]) -> None:
    """The chart's on_select callback: a clicked node becomes the selected node (before the page reruns)."""
    node = clicked(st.session_state.get(chart_key(run)), valid)
    if node is not None:
        st.session_state[node_key(run)] = node


def clicked(event, valid: set[int]) -> int | None:
    """The node id of the first clicked node marker in a plotly selection event, if any."""
    try:
        points = event["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for p in points or []:
        node = p.get("customdata")
        node = node[0] if isinstance(node, list | tuple) and node else node
        if isinstance(node, int | float) and int(node) in valid:
            return int(node)
    return None


def node_box(run: Run, row: pd.Series, edges: pd.DataFrame, labels: dict[int, str]) -> None:
    """What the selected node is: a feature's top contexts and output logits, and any node's strongest edges."""
    node = int(row.name)
    with st.container(border=True):
        if row.kind == "feature":
            st.markdown(f"#### Feature {int(row.feature)} in layer {int(row.layer)}")
            st.caption(f"Active at position {int(row.pos)} ({F.quoted(row.token)}) of the prompt with activation "
                       f"{row.activation:.3g}; influence on the logits {row.influence:.3f}.")
            feature(run, int(row.layer), int(row.feature))
        else:
            st.markdown(f"#### {row.label[0].upper()}{row.label[1:]}")
            st.caption({"error": "What the transcoders miss of this layer's MLP output at this position (the real "
                                 "output minus their reconstruction): large error nodes mean the features explain "
                                 "little here.",
                        "embedding": "The token's embedding: where the prompt enters the graph.",
                        "logit": "A candidate next token: its logit (minus the mean logit) is what the graph "
                                 "attributes."}[row.kind]
                       + f" Influence on the logits {row.influence:.3f}.")
        ins, outs = edges[edges.target == node], edges[edges.source == node]
        left, right = st.columns(2)
        for col, part, other, title in ((left, ins, "source", "Strongest inputs"),
                                        (right, outs, "target", "Strongest outputs")):
            with col:
                st.markdown(f"**{title}** ({len(part)} in the pruned graph)")
                if len(part):
                    part = part.head(8)
                    st.dataframe(pd.DataFrame({"node": [labels[int(i)] for i in part[other]],
                                               "weight": part.weight.round(4)}), hide_index=True)


def feature(run: Run, layer: int, index: int) -> None:
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Top held-out contexts** (shade: the feature's activation; outlined: the token it fired on)")
        ctx = common.optional_table(run, "feature_contexts")
        part = ctx[(ctx.layer == layer) & (ctx.feature == index)] if ctx is not None and len(ctx) else None
        if part is None or not len(part):
            st.caption("It fires on none of the held-out tokens.")
        else:
            st.html(F.contexts_html(part.sort_values("rank")))
    with right:
        st.markdown("**Output logits** (its decoder through the unembedding)")
        lg = common.optional_table(run, "feature_logits")
        part = lg[(lg.layer == layer) & (lg.feature == index)] if lg is not None and len(lg) else None
        if part is not None and len(part):
            st.dataframe(part[["direction", "token", "value"]].assign(
                token=[F.quoted(t) for t in part.token], value=part.value.round(3)), hide_index=True)


def ablations(run: Run, m: dict) -> None:
    st.subheader("Does the graph predict ablations in the real model?")
    rows = common.optional_table(run, "ablations")
    if rows is None or not len(rows):
        st.info("This run skipped the ablation test (n_prompts = 0).")
        return
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
