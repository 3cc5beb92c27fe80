"""self_interp page: how well a frozen model describes its own vectors through tiny adapters,
against the identity injection, shuffled labels, a token-embedding positive control and the
logit-lens echo."""

from __future__ import annotations

from functools import partial

import pandas as pd
import streamlit as st

from interp.store import Run
from interp_app import common
from interp_probes.self_interp import figures as F

K = "self_interp."


def render(run: Run) -> None:
    header(run.metrics)
    recall = run.table("recall") if run.has("recall") else pd.DataFrame()
    common.tabs(run, {"Leaderboard": partial(leaderboard_panel, recall=recall),
                      "Recall by layer": partial(layer_panel, recall=recall), "Held-out labels": table_panel,
                      "Scale sweep": scale_panel, "Training curves": curves_panel,
                      "Adapter inspection": inspection_panel, "Interpret your own": interpret_panel,
                      "SAE features": sae_panel})


def header(m: dict) -> None:
    fv = common.fmt_value
    common.metric_row(
        m,
        ("recall@1 scalar_affine", "{recall_at_1_scalar_affine}",
         "held-out topics ({n_heldout}) ranked among {n_topics}; recall@10 {recall_at_10_scalar_affine}"),
        ("identity (best scale)", "{recall_at_1_identity}"),
        ("gain over identity", "{recall1_gain_vs_identity}",
         "recall@1 gain paired over the held-out topics, with its 95 % paired bootstrap interval: "
         "[{recall1_gain_vs_identity_ci_lo}, {recall1_gain_vs_identity_ci_hi}]"),
        ("logit-lens echo", "{recall_at_1_logit_lens}",
         "the vector decoded through the final norm and unembedding; its top tokens as guesses"),
        ("chance@1", "{recall_chance_at_1}"),
    )
    unchanged = m.get("lm_weights_unchanged")
    st.caption(
        f"Layer {fv(m.get('layer'))} · scorer `{m.get('retrieval_scorer')}` · template `{m.get('template')}` "
        f"(system turn: {m.get('template_system', 'default')}) · "
        f"placeholder `{m.get('placeholder')}` · {fv(m.get('adapter_params'))} adapter parameters · LM weights "
        f"unchanged: **{fv(unchanged)}** · gain over shuffled labels (recall@1): "
        f"{fv(m.get('recall1_gain_vs_shuffled'))} [{fv(m.get('recall1_gain_vs_shuffled_ci_lo'))}, "
        f"{fv(m.get('recall1_gain_vs_shuffled_ci_hi'))}] · self-interpretation margin (scalar_affine − logit lens, "
        f"recall@1): {fv(m.get('self_interp_margin_at_1'))} · bias share: {fv(m.get('bias_share'))}"
    )


def scale_panel(run: Run) -> None:
    if run.has("scale_sweep"):
        st.plotly_chart(F.scale_sweep(run.table("scale_sweep")), key=K + "sweep")
        if run.metrics.get("identity_scale_at_edge"):
            st.warning("The best identity scale lies at the edge of the grid: widen `identity_scales`.")


def curves_panel(run: Run) -> None:
    if run.has("train_curves"):
        st.plotly_chart(F.training_curves(run.table("train_curves")), key=K + "curves")


def leaderboard_panel(run: Run, recall: pd.DataFrame) -> None:
    if not len(recall):
        st.info("No recall table in this run.")
        return
    st.plotly_chart(F.leaderboard(recall), key=K + "leaderboard")
    params = {k[len("params_"):]: v for k, v in run.metrics.items() if k.startswith("params_")}
    if params:
        st.markdown("**Recall against adapter size**")
        st.plotly_chart(F.recall_vs_params(recall, params), key=K + "params")
    table = F.heldout_recall(recall)
    wide = table.pivot_table(index="variant", columns="k", values="recall").add_prefix("recall@")
    train = F.heldout_recall(recall, split="train")
    if len(train):
        wide = wide.join(train.pivot_table(index="variant", columns="k", values="recall").add_prefix("train recall@"))
    gap = {v: run.metrics.get(f"train_minus_heldout_recall1_{v}") for v in wide.index}
    if any(x is not None for x in gap.values()):
        wide["train − held-out recall@1"] = pd.Series(gap)
    st.dataframe(wide.reindex([v for v in F.ORDER if v in wide.index]).round(3), placeholder=common.BLANK)


def layer_panel(run: Run, recall: pd.DataFrame) -> None:
    if not len(recall) or recall.layer.nunique() < 2:
        st.info("Recall by layer needs a `layer_sweep` (the default run sweeps four layers).")
    if len(recall):
        k = st.radio("k", [10, 1], horizontal=True, key=K + "layer_k")
        st.plotly_chart(F.recall_by_layer(recall, k), key=K + "by_layer")
        st.caption("Self-interpretation is the gap between the adapter and the logit-lens readout: where the "
                   "logit lens already names the topic, the adapter may only be echoing a token.")


def table_panel(run: Run) -> None:
    if not (run.has("generations") and run.has("topics")):
        st.info("No generations in this run.")
        return
    gens, topics = run.table("generations"), run.table("topics")
    cats = ["all"] + sorted(topics.category.unique())
    cat = st.selectbox("Category", cats, key=K + "category")
    labels, classes = F.heldout_table(gens, topics, category=None if cat == "all" else cat)
    st.caption("Green: the true topic ranks first; yellow: within the top 10; red: a miss.")
    st.dataframe(F.style_hits(labels, classes), hide_index=True, placeholder=common.BLANK)


def inspection_panel(run: Run) -> None:
    common.metric_row(
        run.metrics,
        ("learned scale (scalar_affine)", "{learned_scale_scalar_affine}"),
        ("bias norm (scalar_affine)", "{bias_norm_scalar_affine}"),
        ("median token-embedding norm", "{median_embedding_norm}"),
    )
    if run.has("bias_probe"):
        probe = run.table("bias_probe")
        left, right = st.columns(2)
        with left:
            st.markdown("**Next token when the bias alone is injected** (the mode it switches on)")
            st.plotly_chart(F.bias_tokens(probe, "next_token"), key=K + "bias_next")
        with right:
            st.markdown("**Tokens nearest the bias** in embedding space")
            st.plotly_chart(F.bias_tokens(probe, "nearest_embedding"), key=K + "bias_near")
    if run.has("adapter_full_rank"):
        a = run.tensor_file("adapter_full_rank")["A"]
        st.markdown("**Full-rank adapter: singular values of A**")
        st.plotly_chart(F.singular_values(a, run.metrics.get("identity_best_scale")), key=K + "svd")


@st.cache_resource(show_spinner="Loading the model…")
def _model(name: str):
    from interp.models import load_model

    return load_model(name)


def interpret_panel(run: Run) -> None:
    from interp_probes.self_interp.describe import adapters_in

    names = adapters_in(run)
    if not names:
        st.info("This run saved no adapters.")
        return
    st.markdown("Type a topic (read as *Tell me about …*) or any prompt; its vector at the run's layer, minus the "
                "topic mean, is described by the chosen adapter. SAE features can be chosen when the SAE branch ran.")
    sources = ["topic", "prompt"] + (["SAE feature"] if run.has("sae_vectors") else [])
    source = st.radio("Describe a", sources, horizontal=True, key=K + "source")
    default = "scalar_affine" if "scalar_affine" in names else names[0]
    chosen = st.multiselect("Adapters", names, default=[default], key=K + "adapters")
    if source == "SAE feature":
        latents = run.table("sae_branch").latent.unique().tolist()
        text = st.selectbox("Latent", latents, key=K + "latent")
    else:
        text = st.text_input("Text", value="chess" if source == "topic" else "", key=K + "text")
    if st.button("Describe", key=K + "go") and chosen and str(text).strip():
        _describe(run, source, text, chosen)


def _describe(run: Run, source: str, text, chosen: list[str]) -> None:
    import torch

    from interp_probes.self_interp.describe import describe, load_adapter, prompt_vector

    model = _model(run.config.get("model", "smollm2-135m"))
    if source == "SAE feature":
        sae = run.tensor_file("sae_vectors")
        rows = {int(i): j for j, i in enumerate(sae["latents"])}
        v = torch.as_tensor(sae["vectors"][rows[int(text)]])
    else:
        v = prompt_vector(model, run, str(text), as_topic=source == "topic")
    rows = [{"adapter": name, "label": describe(model, v, load_adapter(run, name))} for name in chosen]
    st.dataframe(pd.DataFrame(rows), hide_index=True, placeholder=common.BLANK)


def sae_panel(run: Run) -> None:
    if not run.has("sae_branch"):
        st.info("The SAE branch did not run (switch it on with `sae_labels_file=...` or `sae_branch=token_labels`).")
        return
    sae = run.table("sae_branch")
    m = run.metrics
    scores = {k: v for k, v in m.items() if k.startswith("sae_gen_score_")}
    if scores:
        cols = st.columns(len(scores))
        for col, (k, v) in zip(cols, scores.items()):
            col.metric(k.replace("sae_gen_score_", "score: "), common.fmt_value(v))
    st.dataframe(F.sae_cards(sae), hide_index=True, placeholder=common.BLANK)
    latent = st.selectbox("Feature card", sae.latent.unique().tolist(), key=K + "card")
    card = sae[sae.latent == latent]
    st.markdown(f"**Latent {latent}** · true label: *{card.label_true.iloc[0]}*")
    for _, row in card.iterrows():
        st.markdown(f"- `{row.variant}`: best hit rate {row.best_hit_rate:.2f}; labels: "
                    + ", ".join(repr(x) for x in list(row.generated_labels)[:6]))
    if "top_contexts" in card and len(card.top_contexts.iloc[0]):
        st.markdown("Top-activating contexts:")
        for c in list(card.top_contexts.iloc[0])[:5]:
            st.code(c)
