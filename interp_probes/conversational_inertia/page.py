"""Conversational-inertia page: the diagonal attention to earlier replies, its growth with rounds,
and how context policies change repetition in bait states."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import streamlit as st

from interp.store import Run
from interp_app import common
from interp_app.figures import head_label
from interp_probes.conversational_inertia import figures as F

K = "conversational_inertia."


def render(run: Run) -> None:
    m = run.metrics
    common.metric_row(
        m,
        ("max diagonal z", "{max_diag_z}",
         "largest permutation-null z of diagonal mass over heads and δ ∈ {{0, +1}} (w = 0)"),
        ("control max z", "{max_diag_z_control}",
         "the same on control transcripts (earlier replies not index-aligned)"),
        ("inertia heads", "{n_inertia_heads}", f"heads with z ≥ {run.config.get('z_thresh')}"),
        ("ρ(N, share to earlier replies)", "{prev_assistant_share_rho}"),
    )
    policies = ("long", "window", "clip", "short")
    common.metric_row(m, *((f"repeat rate {F.POLICY_NAMES[p]}", "{repeat_rate_" + p + "}") for p in policies))
    st.caption(
        f"Role format: {m.get('role_format', '?')}; DoorExplore bait histories at N = {m.get('bait_n', '?')}; "
        f"W = {run.config.get('window_w')} (Window), {run.config.get('clip_w')} (Clip)."
    )

    common.tabs(run, {"Head census": head_census, "Rounds": rounds_panel, "Behaviour": behaviour_panel,
                      "CPL pairs": cpl_panel, "Transcript viewer": transcript_viewer})


# ============================================================================= heads


def _viewers(run: Run) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    blocks = run.tensor_file("blocks")
    tokens = run.table("view_tokens")
    transcripts = run.table("transcripts")
    return blocks, tokens, transcripts


def head_census(run: Run) -> None:
    scores = run.tensor_file("diag_scores")
    offsets, bands = scores["offsets"].tolist(), scores["bands"].tolist()
    c1, c2, c3 = st.columns(3)
    delta = c1.selectbox("offset δ", offsets, key=K + "delta",
                         help="0: i-th to i-th token; +1: to the token after the aligned one (copy/induction)")
    w = c2.selectbox("band w", bands, key=K + "band")
    which = c3.radio("transcripts", ["normal", "control"], horizontal=True, key=K + "which",
                     disabled="z_control" not in scores)
    key = "z" if which == "normal" or "z_control" not in scores else "z_control"
    z = scores[key][:, :, offsets.index(delta), bands.index(w)]
    st.plotly_chart(F.head_heatmap(z, f"Diagonal z per head ({which}, δ = {delta:+d}, w = {w})",
                                   run.config.get("z_thresh")), key=K + "census")
    st.caption("z against a column-permutation null (every block's columns permuted independently). Control "
               "transcripts keep the content tokens of the earlier replies but not their positions.")
    heads = run.table("heads").sort_values("z", ascending=False).head(20)
    names = [head_label(a, b) for a, b in zip(heads["layer"], heads["head"])]
    st.dataframe(heads.assign(name=names).set_index("name"), placeholder=common.BLANK)

    blocks, tokens, transcripts = _viewers(run)
    top = blocks["heads"]
    views = blocks["transcripts"].tolist()
    c1, c2 = st.columns(2)
    h = c1.selectbox("head", list(range(len(top))), format_func=lambda i: head_label(*top[i]), key=K + "head")
    v = c2.selectbox("transcript", list(range(len(views))), key=K + "view",
                     format_func=lambda k: _transcript_name(transcripts, views[k]))
    tok = tokens[tokens.view == v].sort_values("position")
    row_tokens = tok[tok.row >= 0].sort_values("row").token.tolist()
    col_tokens = tok[tok.col >= 0].sort_values("col").token.tolist()
    layer, head = (int(x) for x in top[h])
    st.plotly_chart(F.block_heatmap(blocks[f"block_{v}"][h], row_tokens, col_tokens,
                                    f"{head_label(layer, head)}: current reply × most recent earlier reply"),
                    key=K + "block")
    avg = blocks[f"headavg_block_{v}"][layer]
    title = f"Layer {layer}, averaged over heads (the paper's view)"
    st.plotly_chart(F.block_heatmap(avg, row_tokens, col_tokens, title), key=K + "block_avg")
    fig = F.reply_rows_heatmap(blocks[f"rows_{v}"][h], row_tokens, tok.token.tolist(), tok.segment.tolist(),
                               f"{head_label(layer, head)}: reply rows against every key")
    st.plotly_chart(fig, key=K + "rows")
    st.markdown(F.segment_legend(), unsafe_allow_html=True)
    circuitsvis_rows(blocks[f"rows_{v}"], top, tok)


def circuitsvis_rows(rows, top, tok: pd.DataFrame) -> None:
    """The reply rows of every top head against the most recent earlier reply, as a CircuitsVis view
    (`F.reply_rows_view`), coloured up to the largest weight shown: the attention sink at position 0 is outside it."""
    view = F.reply_rows_view(rows, top, tok)
    if view is None:
        return
    patterns, tokens, names = view
    st.markdown("**CircuitsVis: the current reply's rows of the top heads**, from the most recent earlier reply on "
                "(rows outside the current reply are empty; colour up to the largest weight shown, "
                f"{float(patterns.max()):.3g})")
    common.attention_view(patterns, tokens, names, height=760, max_value=float(patterns.max()) or None)


def _transcript_name(transcripts: pd.DataFrame, index: int) -> str:
    r = transcripts.iloc[index]
    return f"{r.transcript_id}: {r.env}, N = {r.N}"


# ============================================================================= rounds


def rounds_panel(run: Run) -> None:
    shares = run.table("segment_shares")
    m = run.metrics
    layers = sorted(shares.layer.unique().tolist())
    layer = st.selectbox("layer", ["all"] + layers, key=K + "layer")
    layer = None if layer == "all" else int(layer)
    left, right = st.columns(2)
    with left:
        st.plotly_chart(F.shares_by_n(shares, layer), key=K + "shares")
    with right:
        st.plotly_chart(F.enrichment_by_n(shares, layer), key=K + "enrich")
    rows = [(seg, m.get(f"{seg}_share_rho"), m.get(f"{seg}_share_p")) for seg in ("prev_assistant", "system", "user")]
    rows += [(f"{seg} enrichment", m.get(f"{seg}_enrichment_rho"), m.get(f"{seg}_enrichment_p"))
             for seg in ("prev_assistant", "user")]
    st.dataframe(pd.DataFrame(rows, columns=["segment", "Spearman ρ vs N", "p"]), hide_index=True,
                 placeholder=common.BLANK)
    if (shares.layer_type == "local").any():
        st.caption("Local (sliding-window) layers see only the keys inside their window; the key fractions of the "
                   "enrichment count visible keys only.")


# ============================================================================= behaviour


def behaviour_panel(run: Run) -> None:
    summary = run.table("behavior_summary")
    rows = run.table("behavior")
    if not len(summary):
        st.info("No behaviour episodes in this run.")
        return
    bait = summary[(summary.env == "doorexplore") & (summary.kind == "bait")]
    n_max = int(bait.N.max())
    top = bait[bait.N == n_max]
    left, right = st.columns(2)
    with left:
        st.plotly_chart(F.policy_rates(top, f"DoorExplore bait states, N = {n_max} (Wilson 95 %)"), key=K + "rates")
    with right:
        st.plotly_chart(F.policy_differences(top, "Paired Long − policy (bootstrap 95 %)"), key=K + "diffs")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(F.repeat_by_n(summary), key=K + "by_n")
    with right:
        st.plotly_chart(F.context_cost(top), key=K + "cost")
    st.dataframe(summary.round(3), hide_index=True, placeholder=common.BLANK)
    st.caption("Repeat: the door just reported locked (DoorExplore) or the old open door (DoorWorld). Unparsed "
               "replies count as neither; format = the exact `Action: open <colour> door` line.")
    st.subheader("Bait episodes, outputs side by side")
    ep = rows[(rows.env == "doorexplore") & (rows.kind == "bait") & (rows.N == n_max)]
    wide = ep.pivot_table(index=["episode_id", "c_prev"], columns="policy", values="output", aggfunc="first")
    wide = wide[[p for p in F.POLICY_NAMES if p in wide.columns]].reset_index()
    st.dataframe(wide, hide_index=True, placeholder=common.BLANK)


# ============================================================================= CPL


def cpl_panel(run: Run) -> None:
    m = run.metrics
    st.metric("CPL pairs kept", m.get("n_cpl_pairs", 0), f"of {m.get('n_cpl_states', 0)} states", delta_color="off",
              delta_arrow="off")
    st.caption("prompt = the Long-context messages of the state; chosen = the reply under Short; rejected = the "
               "reply under Long (kept when their actions differ). Saved as cpl_pairs.jsonl in the conversational "
               "preference format of DPO trainers.")
    pairs = run.table("cpl_pairs")
    if len(pairs):
        st.dataframe(pairs[["state_id", "N", "action_chosen", "action_rejected", "chosen", "rejected"]].head(20),
                     hide_index=True, placeholder=common.BLANK)
        first = pairs.iloc[0]
        with st.expander(f"Prompt of {first.state_id}"):
            for msg in json.loads(first.prompt):
                st.markdown(f"**{msg['role']}**: {msg['content']}")
    if any(k.startswith("cpl_") and k not in ("n_cpl_pairs", "n_cpl_states") for k in m):
        st.json({k: v for k, v in m.items() if k.startswith("cpl_")})
    else:
        st.info("No DPO adapter was trained in this run (train_dpo is off). The paper's \"preference calibration\" "
                "stage is not public and is not implemented.")


# ============================================================================= transcript viewer


def transcript_viewer(run: Run) -> None:
    blocks, tokens, transcripts = _viewers(run)
    top, views = blocks["heads"], blocks["transcripts"].tolist()
    c1, c2, c3 = st.columns(3)
    v = c1.selectbox("transcript", list(range(len(views))), key=K + "tv_view",
                     format_func=lambda k: _transcript_name(transcripts, views[k]))
    h = c2.selectbox("head", list(range(len(top))), format_func=lambda i: head_label(*top[i]), key=K + "tv_head")
    tok = tokens[tokens.view == v].sort_values("position")
    reply = tok[tok.row >= 0].sort_values("row")
    r = c3.selectbox("reply token", list(range(len(reply))), key=K + "tv_row",
                     format_func=lambda i: f"{i}: {reply.token.iloc[i]!r}")
    weights = np.asarray(blocks[f"rows_{v}"][h][r])
    st.markdown(F.colored_tokens(tok.token.tolist(), weights, tok.segment.tolist(), int(reply.position.iloc[r])),
                unsafe_allow_html=True)
    st.markdown("Shading: attention from the selected reply token (outlined); underline: segment. "
                + F.segment_legend(), unsafe_allow_html=True)
