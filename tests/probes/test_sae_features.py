"""sae_features on the embedded model (micro size, the session's shared run): a feature found by its top token
highlights that token in its contexts far above the token's base rate; the run's SAE reads back through SAELens
with its sparsity file; the Neuronpedia export validates against the schema read from SAEDashboard's source."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from interp.store import load_run
from interp_probes.sae_features import figures as F


@pytest.fixture(scope="module")
def run(micro_runs):
    return load_run(micro_runs("sae_features"))


def test_a_feature_found_by_its_top_token_highlights_that_token(run, model):
    from interp import build_config
    from interp_probes.sae_features import SaeFeaturesConfig
    from interp_probes.sae_features.probe import chunks

    feats, contexts = run.table("features"), run.table("contexts")
    fields = SaeFeaturesConfig.__dataclass_fields__
    cfg = build_config(SaeFeaturesConfig, {k: v for k, v in run.config.items() if k in fields})
    ids = chunks(model, cfg)[: cfg.n_seqs, 1:].reshape(-1).tolist()  # the streamed tokens, position 0 excluded
    base = Counter(model.to_str_tokens(ids))
    pure = feats[(feats["n_fired"] >= 5) & (feats["top_token_share"] >= 0.8)]
    assert len(pure) >= 5, f"only {len(pure)} features whose top contexts are >= 80 % one token"
    checked = 0
    for token in pure["top_token"].value_counts().index[:5]:
        hit = F.search(feats, token.strip() or token)
        assert not hit.empty and (hit["top_token"] == token).any(), f"search {token!r} found {hit['top_token'][:3]}"
        f = int(hit[hit["top_token"] == token].iloc[0]["feature"])
        top = contexts[(contexts["feature"] == f) & (contexts["kind"] == "top")]
        shown = F.highlighted_tokens(top)
        share = np.mean([t == token for t in shown])
        rate = base[token] / len(ids)
        assert share >= 0.8 and share >= 5 * rate, f"feature {f} ({token!r}): {share:.2f} of its top contexts " \
            f"highlight it vs base rate {rate:.3f}"
        for r in top.itertuples():  # the highlighted token holds the window's kept activation
            assert r.values[r.center] == pytest.approx(r.act, rel=1e-4, abs=1e-5)
        first = top.iloc[0]  # a Series: its "values" column by key (.values is the whole row)
        html = F.context_html(first["tokens"], first["values"], first["center"], first["act"])
        assert 'class="tok center"' in html
        checked += 1
    assert checked >= 3


def test_statistics_are_consistent(run):
    feats, hist = run.table("features"), run.tensor_file("histograms")
    m = run.metrics
    assert m["mean_l0"] == pytest.approx(feats["density"].sum())
    assert np.allclose(hist["act_counts"].sum(1), feats["n_fired"]), "histograms count every non-zero activation"
    assert np.allclose(hist["logit_counts"].sum(1), hist["logit_counts"].sum(1)[0])  # each row: the whole vocab
    contexts = run.table("contexts")
    assert (contexts["pos"] >= 1).all(), "position 0 is never a kept context"
    q = contexts[contexts["kind"].str.startswith("interval_")]
    mx = feats.set_index("feature")["max_act"]
    n = run.config["n_intervals"]
    k = q["kind"].str.split("_").str[1].astype(int)
    frac = q["act"].to_numpy() / mx.loc[q["feature"]].to_numpy()
    assert ((frac >= k / n - 1e-6) & (frac <= (k + 1) / n + 1e-6)).all(), "interval samples lie in their interval"


def test_the_runs_sae_reads_back_through_saelens_with_its_sparsity(run):
    import torch
    from sae_lens import SAE
    from safetensors import safe_open

    import interp

    sae = SAE.load_from_disk(str(run.dir_path("sae")))
    with safe_open(str(run.dir_path("sae") / "sparsity.safetensors"), framework="pt", device="cpu") as f:
        log10 = f.get_tensor("sparsity")
    density = run.table("features")["density"].to_numpy()
    assert log10.shape == (sae.cfg.d_sae,)
    assert np.allclose(10 ** log10.numpy(), density + 1e-10, rtol=1e-4, atol=1e-9)
    same = interp.load_sae(str(run.path))  # the run directory itself is an SAE spec
    assert torch.equal(same.W_dec, sae.W_dec)


def test_neuronpedia_export_validates_against_the_schema(run, tmp_path):
    import jsonschema

    from interp.cli import main
    from interp.neuronpedia import FILES, read_rows, schema

    assert main(["export", "neuronpedia", str(run.path), str(tmp_path)]) == 0
    (src,) = list(tmp_path.glob("*/*"))
    s = schema()
    n = {}
    for name, kind in FILES.items():
        rows = read_rows(src / name)
        validator = jsonschema.Draft202012Validator({**s, "$ref": f"#/$defs/{kind}"},
                                                    format_checker=jsonschema.FormatChecker())
        for row in rows:
            validator.validate(row)
        n[kind] = rows
    feats = run.table("features")
    assert len(n["feature"]) == int((feats["n_fired"] > 0).sum())
    assert len(n["activation"]) == len(run.table("contexts"))
    f0 = n["feature"][0]
    assert f0["layer"] == src.name and f0["frac_nonzero"] == pytest.approx(feats.loc[int(f0["index"]), "density"])
    a = n["activation"][0]
    assert a["binMin"] == -1 and a["values"][a["qualifyingTokenIndex"]] > 0  # a top context, its kept token
    bad = dict(f0)
    del bad["frac_nonzero"]  # the schema can fail: a row without a required field
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, {**s, "$ref": "#/$defs/feature"})
    wrong = {**a, "values": ["x"]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, {**s, "$ref": "#/$defs/activation"})
    assert json.loads((src / "source.jsonl").read_text())["id"] == src.name
