"""Figure functions on real logit_lens artifacts, and the shared page helpers (no Streamlit runtime)."""

from __future__ import annotations

import numpy as np
import pytest

from interp.store import list_runs, load_run
from interp_app import common
from interp_app.figures import DIVERGING, head_label, numeric_axis, signed_range, token_label, token_labels
from interp_app.views.generic import array_summary, split_metrics
from interp_app.views.runs import runs_frame
from interp_probes.logit_lens import figures as F


@pytest.fixture(scope="module")
def lens(runs):
    run = load_run(runs.root / runs.done["logit_lens"])
    tensors = run.tensor_file("lens")
    tokens = run.table("tokens").sort_values("position")["token"].tolist()
    return run, tensors, tokens, run.table("topk")


def test_heatmap_of_ranks_has_token_axis_layer_axis_and_top1_text(lens):
    run, t, tokens, topk = lens
    rank, prob = t["final_rank"], t["final_prob"]
    top1 = F.top1_grid(topk, *rank.shape)
    fig = F.lens_heatmap(rank, prob, tokens, top1)
    (hm,) = fig.data
    assert hm.type == "heatmap" and np.asarray(hm.z).shape == rank.shape == (30, len(tokens))
    assert list(fig.layout.xaxis.ticktext) == token_labels(tokens)
    assert list(fig.layout.xaxis.tickvals) == list(range(len(tokens)))
    assert fig.layout.xaxis.title.text == "position (token)" and fig.layout.yaxis.title.text == "layer"
    assert "▁France" in fig.layout.xaxis.ticktext
    np.testing.assert_allclose(hm.z, np.log10(1 + rank))  # log-scaled colour
    assert hm.colorbar.ticktext[0] == "0" and hm.zmax >= np.log10(1 + rank.max())
    text = np.asarray(hm.text)
    assert text[-1, -1] == token_label(run.metrics["final_top1"]) == "▁Paris", text[-1]
    assert (rank[-1] == 0).all(), "the last layer's top-1 is the final prediction by definition"


def test_heatmap_of_probabilities(lens):
    _, t, tokens, topk = lens
    fig = F.lens_heatmap(t["final_rank"], t["final_prob"], tokens, None, color="prob")
    (hm,) = fig.data
    np.testing.assert_allclose(hm.z, t["final_prob"])
    assert (hm.zmin, hm.zmax) == (0.0, 1.0) and hm.text is None
    assert "probability" in fig.layout.title.text
    with pytest.raises(ValueError, match="color"):
        F.lens_heatmap(t["final_rank"], t["final_prob"], tokens, color="logit")
    with pytest.raises(ValueError, match="tokens"):
        F.lens_heatmap(t["final_rank"], t["final_prob"], tokens[:-1])


def test_rank_by_layer_and_topk_table(lens):
    run, t, tokens, topk = lens
    last = len(tokens) - 1
    fig = F.rank_by_layer(t["final_rank"], t["final_prob"], last, tokens[last])
    assert [d.name for d in fig.data] == ["1 + rank", "probability"] and len(fig.data[0].x) == 30
    assert fig.layout.yaxis.type == "log" and fig.layout.xaxis.title.text == "layer"
    table = F.topk_table(topk, last)
    assert table.shape == (30, run.config["top_k"]) and table.index.name == "layer"
    assert list(table.columns) == [f"top-{k}" for k in range(1, run.config["top_k"] + 1)]
    assert table.loc[29, "top-1"].startswith("▁Paris (")


def test_shared_figure_helpers():
    assert head_label(3, 7) == "L3H7"
    assert signed_range([-2.0, 1.0, np.nan]) == {"zmin": -2.0, "zmax": 2.0}
    assert signed_range(np.zeros(3)) == {"zmin": -1.0, "zmax": 1.0}
    assert DIVERGING == "RdBu_r"
    assert numeric_axis(["a", "a"]) == {"tickmode": "array", "tickvals": [0, 1], "ticktext": ["a", "a"]}
    assert token_label(" Paris") == "▁Paris" and token_label("\n\t") == "↵→" and token_label("") == "∅"
    assert token_label("<|im_start|>") == "&lt;|im_start|&gt;" and token_label("<b>", escape=False) == "<b>"
    assert token_label("\xa0\u200b") == "␣⟨U+200B⟩" and token_label("x" * 40) == "x" * 15 + "…"
    assert F.rank_ticks(49151)[1] == ["0", "1", "10", "100", "1,000", "10,000"]


def test_metric_strings_and_tables(runs):
    assert common.fmt_value(0.123456) == "0.1235" and common.fmt_value(" Paris") == "' Paris'"
    assert common.fmt_value(None) == "–" and common.fmt_value(True) == "true"
    assert common.fmt_value([1, 2]) == "[2 values]"
    s = common.short_metrics({"a": 1.0, "b": [1, 2], "c": "x" * 200}, limit=40)
    assert s.startswith("a=1, c='xxx") and len(s) <= 40 and "b=" not in s
    scalars, others = split_metrics({"a": 1, "b": [1]})
    assert list(scalars["metric"]) == ["a"] and others == {"b": [1]}
    arrays = array_summary({"x": np.array([[1.0, np.inf], [3.0, 2.0]], dtype=np.float32), "s": np.array([], np.int8)})
    assert {"array": "x", "shape": "2 × 2", "dtype": "float32", "max": 3.0}.items() <= arrays.iloc[0].to_dict().items()
    frame = runs_frame(list_runs(runs.root))
    # the metrics start on screen: probe, status, the error (the fixture has a failed run), then the metrics
    assert list(frame.columns) == ["probe", "status", "error", "metrics", "seconds", "model", "started", "run id"]
    assert common.status_badge("damaged") == ":red-badge[damaged]" and common.status_label("done") == "✓ done"


def test_resolve_ref_stays_inside_the_root(runs):
    good = runs.done["logit_lens"]
    assert common.resolve_ref(runs.root, good) == (runs.root / good).resolve()
    for bad in ("../../etc/passwd", "/etc", runs.outside, "logit_lens", f"{good}/../.."):
        with pytest.raises(Exception, match="outside|manifest|not a run"):
            common.resolve_ref(runs.root, bad)
    with pytest.raises(Exception, match="belongs to probe"):
        common.resolve_ref(runs.root, good, probe="keystone")
