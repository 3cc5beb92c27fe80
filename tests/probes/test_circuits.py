"""circuits on the embedded model (quick): the graph is exact, its artifacts load, the transcoders beat their
nulls, and the graph's choice of features moves the top logit more than random features do."""

from __future__ import annotations

import json

import numpy as np
import pytest

from interp.errors import ConfigError
from interp.runner import prepare


def test_graph_is_exact(quick):
    m = quick.metrics
    assert m["top_token"] == " Paris"
    assert m["replacement_rel_err"] < 1e-4  # transcoders + error nodes reproduce the real logits
    assert m["no_error_rel_err"] > 1e-2  # ... and the error nodes carry something (the control)
    assert m["completeness_rel_err"] < 1e-4  # every node's input = incoming edges + bias
    assert m["n_attributed_features"] == min(m["n_active_features"], quick.config["max_feature_nodes"])
    assert 0 < m["n_pruned_nodes"] < m["n_nodes"]


def test_artifacts(quick):
    g, meta = quick.tensor_file("graph"), quick.json("graph_meta")
    n = meta["n_nodes"]
    assert n == meta["n_feat"] + (meta["n_layers"] + 1) * meta["n_pos"] + len(g["logit_tokens"])
    assert g["edge_index"].shape == (2, len(g["edge_weight"])) == (2, len(g["edge_mask"]))
    assert 0 <= int(g["edge_index"].min()) and int(g["edge_index"].max()) < n
    doc = json.loads((quick.path / "neuronpedia_graph.json").read_text())
    ids = {x["node_id"] for x in doc["nodes"]}
    assert doc["links"] and all(link["source"] in ids and link["target"] in ids for link in doc["links"])
    assert doc["metadata"]["prompt"] == quick.config["prompt"]
    q = quick.table("transcoder_quality")
    assert len(q) == meta["n_layers"]
    ctx = quick.table("feature_contexts")
    assert len(ctx) and (ctx.activation > 0).all()


def test_transcoders_beat_their_nulls(quick):
    m = quick.metrics
    assert m["fve_mean"] > 0.05  # better than predicting each layer's mean output
    assert m["loss_spliced_all"] < m["loss_zero_all"]  # all layers spliced in beats all MLPs zeroed
    assert m["dead_fraction_mean"] < 0.5


def test_graph_choice_beats_random(quick):
    rows = quick.table("ablations")
    assert rows.prompt.nunique() == quick.config["n_prompts"]
    m = quick.metrics
    assert m["mean_abs_observed_graph"] > 2 * m["mean_abs_observed_random"]
    assert np.isfinite(rows[["predicted", "observed"]].to_numpy()).all()
    assert m["n_frozen_nonfinite"] < len(rows) / 4


@pytest.mark.parametrize("over,field", [({"prompt": "  "}, "prompt"), ({"ablate_k": [0]}, "ablate_k"),
                                        ({"transcoders": "/no/such/dir"}, "transcoders"),
                                        ({"backend": "nnsight"}, "backend")])
def test_bad_input_is_refused_before_loading(over, field):
    with pytest.raises(Exception) as e:
        prepare("circuits", {"size": "micro", **over})
    assert isinstance(e.value, ConfigError) or "circuits" in str(e.value)
    assert field in str(e.value) or "edit:" in str(e.value)
