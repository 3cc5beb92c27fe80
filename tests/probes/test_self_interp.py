"""self_interp quick size on the embedded model: a 577-parameter adapter lets the frozen model name held-out
topics from their residual vectors far above chance, the LM stays bit-identical, and a saved adapter
describes a new vector through the public `describe` call."""

import pytest


def test_adapter_reads_out_held_out_topics_above_chance(quick):
    m = quick.metrics
    sa, ident, chance = m["recall_at_10_scalar_affine"], m["recall_at_10_identity"], m["recall_chance_at_10"]
    ll = m["recall_at_10_logit_lens"]
    assert sa >= 3 * chance, (f"scalar_affine recall@10 {sa:.3f} vs chance {chance:.3f} "
                              f"(identity {ident:.3f}, logit lens {ll:.3f}, {m['n_heldout']} held out)")
    assert m["recall_at_1_scalar_affine"] >= 5 * m["recall_chance_at_1"], m["recall_at_1_scalar_affine"]


def test_adapter_lowers_held_out_label_loss_below_identity(quick):
    """Training's direct effect: the validation topics' label loss falls below identity injection at its
    best scale (at this size recall against identity is within noise: 40 held-out topics, 9 steps)."""
    m = quick.metrics
    sa, ident = m["val_loss_scalar_affine"], m["val_loss_identity"]
    assert sa <= ident - 0.1, (f"validation loss scalar_affine {sa:.3f} vs identity at s* {ident:.3f} "
                               f"(recall@10 {m['recall_at_10_scalar_affine']:.3f} vs {m['recall_at_10_identity']:.3f})")


def test_lm_frozen_and_adapter_sized_as_the_spec(quick):
    m = quick.metrics
    assert m["lm_weights_unchanged"] is True and m["optimizer_adapter_only"] is True
    assert m["adapter_params"] == 577 and m["params_scalar_affine"] == 577 and m["params_identity"] == 0
    assert m["prefix_cache_loss_diff"] <= 1e-4, m["prefix_cache_loss_diff"]
    assert m["retrieval_scorer"] == "embedding"
    rec = quick.table("recall")
    assert {"identity", "scalar_affine", "logit_lens"} <= set(rec.variant)
    gens = quick.table("generations")
    assert (gens.split == "heldout").sum() == 3 * m["n_heldout"]
    assert m["template_system"] == "none" and quick.config["template_system"] == "none"


def test_gains_are_paired_over_the_same_held_out_topics(quick):
    m = quick.metrics
    gens = quick.table("generations")
    held = gens[gens.split == "heldout"].pivot_table(index="topic_id", columns="variant", values="hit_at_1")
    gain = float((held.scalar_affine.astype(float) - held.identity.astype(float)).mean())
    assert m["recall1_gain_vs_identity"] == pytest.approx(gain)
    assert m["recall1_gain_vs_identity"] == pytest.approx(m["recall_at_1_scalar_affine"] - m["recall_at_1_identity"])
    assert m["recall1_gain_vs_identity_ci_lo"] <= gain <= m["recall1_gain_vs_identity_ci_hi"]
    assert 0 <= m["recall_at_1_scalar_affine_lexical"] <= 1 and 0 <= m["recall_at_1_identity_lexical"] <= 1


def test_saved_adapter_describes_a_vector(quick, model):
    from interp_probes.self_interp.describe import describe, load_adapter, topic_vector

    ad = load_adapter(quick, "scalar_affine")
    assert ad.n_trainable() == 577
    label = describe(model, topic_vector(model, quick, "chess"), ad, max_new_tokens=8)
    assert isinstance(label, str) and '"' not in label
    held = quick.table("generations")
    row = held[(held.variant == "scalar_affine") & (held.split == "heldout")].iloc[0]
    vec = quick.tensor_file("vectors")["topic_vectors"][int(row.topic_id)]
    assert describe(model, vec, ad, max_new_tokens=quick.config["max_label_tokens"]) == row.generated_label
