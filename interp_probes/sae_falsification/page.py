"""sae_falsification page: the funnel, the candidate table (with the digit-oracle baseline), real vs control
injection, Neuronpedia-style feature pages (contexts, tokens, injection per strategy, the loop's counterexamples),
steering, and a "try your own text" box."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from interp.errors import InterpError
from interp.store import Run
from interp_app import common
from interp_probes.sae_falsification import figures as F


def render(run: Run) -> None:
    m = run.metrics
    common.metric_row(
        m,
        ("candidates (pass all filters)", "{n_candidates}"),
        ("token-driven: real / control", "{frac_token_driven} / {frac_token_driven_control}"),
        ("falsified (loop)", "{frac_falsified}"),
        ("genuine / unresolved", "{n_genuine} / {n_unresolved}"),
    )
    st.caption(f"SAE at `{m.get('sae_hook_name')}` (from its config; {m.get('sae_source')}, d_sae "
               f"{m.get('sae_d_sae')}): explained variance {common.fmt_value(m.get('sae_explained_variance'))}, "
               f"CE recovered {common.fmt_value(m.get('sae_ce_recovered'))}, dead "
               f"{common.fmt_value(m.get('sae_dead_frac'))}. Generator `{m.get('generator_backend')}`, template share "
               f"{common.fmt_value(m.get('template_share'))}.")

    features = common.optional_table(run, "features")
    if features is None or not len(features):
        st.info("This run kept no candidate features.")
        return
    st.subheader("Funnel")
    st.plotly_chart(F.funnel(m, features, m.get("sae_d_sae")), key="sf.funnel")

    st.subheader("Candidates")
    digit, top = m.get("digit_oracle_auc"), m.get("top_candidate_auc")
    st.markdown(f"Baseline: a **contains a digit** detector reaches AUC {common.fmt_value(digit)} "
                f"(a **contains a reasoning marker** detector {common.fmt_value(m.get('marker_oracle_auc'))}); "
                f"the top candidate reaches {common.fmt_value(top)}.")
    if not m.get("top_auc_beats_digit_oracle"):
        st.warning("The best \"reasoning\" feature does no better than a digit detector.")
    if m.get("candidates_unfiltered"):
        st.warning("No feature passed the detection filters; the table shows the top of the whole ranking.")
    st.dataframe(F.candidate_table(features), key="sf.candidates", placeholder=common.BLANK)
    st.plotly_chart(F.scatter_real_control(features), key="sf.scatter")
    st.caption("Both arms take the same max over strategies, so the control shows how much the max alone "
               "inflates d. Prepending any tokens right after position 0 moves some features a little.")

    feature_page(run, features)
    steering_section(run)
    try_text(run, features)


def feature_page(run: Run, features: pd.DataFrame) -> None:
    st.subheader("Feature page")
    order = features.sort_values("rank", kind="stable")
    labels = {int(r["feature"]): f"{int(r['feature'])} (rank {int(r['rank'])}, {F.verdict(r)})"
              for r in order.to_dict("records")}
    f = st.selectbox("Feature (ranking order)", list(labels), format_func=labels.get, key=f"sf.feature:{run.path.name}")
    row = features[features["feature"] == f].iloc[0]
    hyp = row.get("hypothesis")
    st.markdown(f"d **{row['d']:.2f}**, AUC **{row['auc']:.3f}**, concentration **{row['concentration']:.2f}**, "
                f"entropy {row['entropy']:.2f}; class **{row.get('class') or 'not analysed'}**"
                + (f"; hypothesis: _{hyp}_" if isinstance(hyp, str) and hyp else ""))

    contexts = common.optional_table(run, "top_contexts")
    if contexts is not None and len(contexts):
        sub = contexts[contexts["feature"] == f]
        vmax = float(sub["max_act"].max()) if len(sub) else None
        left, right = st.columns(2)
        for col, corpus, title in ((left, "reasoning", "Top reasoning contexts"),
                                   (right, "non", "Top non-reasoning contexts")):
            with col:
                st.markdown(f"**{title}**")
                for r in sub[sub["corpus"] == corpus].sort_values("rank").itertuples():
                    st.markdown(F.context_html(list(r.tokens), list(r.acts), vmax, f"max {r.max_act:.2f}"),
                                unsafe_allow_html=True)
    try:
        maxes = run.tensor_file("sample_max")
        a, b = st.columns(2)
        a.plotly_chart(F.activation_histogram(np.asarray(maxes["reasoning"])[:, f],
                                              np.asarray(maxes["nonreasoning"])[:, f], f), key="sf.hist")
        fam = common.optional_table(run, "family_acts")
        if fam is not None and len(fam):
            b.plotly_chart(F.family_bars(fam, f), key="sf.family")
    except (InterpError, KeyError, IndexError):
        pass
    toks, grams = common.optional_table(run, "token_analysis"), common.optional_table(run, "ngrams")
    a, b = st.columns(2)
    if toks is not None:
        a.markdown("**Top tokens** (mean activation, >= 5 occurrences)")
        a.dataframe(F.top_tokens_table(toks, f), key="sf.tokens", placeholder=common.BLANK)
    if grams is not None:
        b.markdown("**Top n-grams** around the top tokens")
        b.dataframe(F.ngram_table(grams, f), key="sf.ngrams", placeholder=common.BLANK)

    inj, ctrl = common.optional_table(run, "injection"), common.optional_table(run, "control_tokens")
    if inj is not None and (inj["feature"] == f).any():
        st.plotly_chart(F.injection_bars(inj, f), key="sf.injection")
        if ctrl is not None:
            st.markdown("**Control tokens used** (frequency-matched random tokens and n-grams)")
            st.dataframe(ctrl[ctrl["feature"] == f].drop(columns=["feature"]).reset_index(drop=True),
                         key="sf.control", placeholder=common.BLANK)

    cand = common.optional_table(run, "candidates")
    if cand is not None and (cand["feature"] == f).any():
        st.markdown(f"**Counterexample loop**: {int(row['n_valid_fp'])} valid false positives, "
                    f"{int(row['n_valid_fn'])} valid false negatives in {int(row['iterations'])} iteration(s); "
                    f"ratio = activation / reference max ({'falsified' if row['falsified'] else 'not falsified'}).")
        a, b = st.columns(2)
        a.markdown("False positives (non-reasoning texts that fire)")
        a.dataframe(F.transcript(cand, f, "FP"), key="sf.fp", placeholder=common.BLANK)
        b.markdown("False negatives (reasoning rewrites that do not)")
        b.dataframe(F.transcript(cand, f, "FN"), key="sf.fn", placeholder=common.BLANK)


def steering_section(run: Run) -> None:
    steering = common.optional_table(run, "steering")
    if steering is None or not len(steering):
        return
    st.subheader("Steering")
    m = run.metrics
    st.caption(f"Base accuracy {common.fmt_value(m.get('steer_acc_base'))}, best steered "
               f"{common.fmt_value(m.get('steer_acc_best'))}, style delta "
               f"{common.fmt_value(m.get('steer_style_delta'))}; the edit reached the hook: "
               f"{m.get('steer_applied_ok')}. At 135M, accuracy is low: read it descriptively.")
    st.plotly_chart(F.steering_figure(steering), key="sf.steer")
    feats = sorted(set(steering["feature"]))
    f = st.selectbox("Sample outputs of feature", feats, key=f"sf.steer_feature:{run.path.name}")
    st.dataframe(F.steering_samples(steering, f), key="sf.steer_samples", placeholder=common.BLANK)


@st.cache_resource(show_spinner="Loading the model and the SAE…")
def _model_and_sae(model_name: str, sae_dir: str):
    from interp.models import load_model
    from interp.sae import load_sae, sae_site

    model = load_model(model_name, device="cpu")
    sae = load_sae(sae_dir, device="cpu")  # beside the page's CPU model
    return model, sae, sae_site(sae)


def try_text(run: Run, features: pd.DataFrame) -> None:
    st.subheader("Try your own text")
    text = st.text_area("Text", key="sf.try_text", placeholder="First, 12 + 5 = 17. Therefore, the answer is 17.")
    f = st.selectbox("Feature", list(features.sort_values("rank")["feature"]), key="sf.try_feature")
    if not st.button("Show activations", key="sf.try_go") or not text.strip():
        return
    sae_cfg = run.config.get("sae")
    spec = sae_cfg.get("source") if isinstance(sae_cfg, dict) else sae_cfg  # a string in runs before sae.source
    sae_dir = run.path / "sae" if (run.path / "sae" / "cfg.json").is_file() else spec
    if not sae_dir or sae_dir == "train":
        st.error("This run has no SAE directory to load.")
        return
    import torch

    from interp_probes.sae_falsification.acts import encode_valid, site_activations, valid_positions

    model, sae, site = _model_and_sae(run.config.get("model"), str(sae_dir))
    enc = model.tokenize([text], max_length=512)
    with torch.no_grad():
        codes = encode_valid(sae, site_activations(model, site, enc["input_ids"], enc["attention_mask"]),
                             valid_positions(enc["attention_mask"]))
    acts = codes[0, :, int(f)].cpu().numpy()
    st.markdown(F.context_html(model.to_str_tokens(enc["input_ids"][0]), acts, None, f"max {acts.max():.3f}"),
                unsafe_allow_html=True)
