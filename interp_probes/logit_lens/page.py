"""Logit-lens page: where in depth the model's final prediction appears, position by position."""

from __future__ import annotations

import streamlit as st

from interp.store import Run
from interp_app import common
from interp_app.figures import token_label
from interp_probes.logit_lens import figures as F


def render(run: Run) -> None:
    lens = run.tensor_file("lens")
    tokens = run.table("tokens").sort_values("position")["token"].tolist()
    topk = run.table("topk")
    rank, prob = lens["final_rank"], lens["final_prob"]
    n_layers, n_pos = rank.shape

    m = run.metrics
    first = m.get("first_layer_final_top1")
    numbering = (f"Layers count from 0, as on the heatmap's axis: L0 is the residual stream after the first block, "
                 f"L{n_layers - 1} after the last of the {n_layers} (what the final norm and unembedding read).")
    common.metric_row(
        m,
        ("final prediction", "{final_top1}"),
        ("first layer with it at top-1", "never" if first is None else layer_of(first, n_layers),
         "The first layer whose logit-lens top-1 at the last position is the final prediction. " + numbering),
        ("prompt tokens", n_pos),
        ("layers", f"{n_layers} (L0–L{n_layers - 1})", numbering),
    )
    st.caption(f"Prompt{' (chat template)' if run.config.get('chat') else ''}: {run.config.get('prompt', '')!r}")

    color = st.radio(
        "Colour cells by the final prediction's",
        ["rank", "prob"],
        format_func={"rank": "rank (log scale)", "prob": "probability"}.get,
        horizontal=True,
        key="logit_lens.color",
    )
    top1 = F.top1_grid(topk, n_layers, n_pos)
    st.plotly_chart(F.lens_heatmap(rank, prob, tokens, top1, color=color), key="logit_lens.heatmap")

    st.subheader("Top-k tokens by layer at one position")
    position = st.selectbox(
        "Position",
        list(range(n_pos)),
        index=n_pos - 1,
        format_func=lambda p: f"{p}: {token_label(tokens[p], 24, escape=False)}",
        key=f"logit_lens.position:{run.path.name}",
    )
    left, right = st.columns([3, 2])
    with left:
        st.dataframe(F.topk_table(topk, position), height=min(36 * (n_layers + 1), 600), placeholder=common.BLANK)
    with right:
        fig = F.rank_by_layer(rank, prob, position, tokens[position])
        st.plotly_chart(fig, key="logit_lens.by_layer", config={"displayModeBar": False})


def layer_of(layer: int, n_layers: int) -> str:
    """A 0-based layer as the page names it: ``"L29 (last)"``, ``"L12 of 0–29"``."""
    return f"L{layer} (last)" if layer == n_layers - 1 else f"L{layer} of 0–{n_layers - 1}"
