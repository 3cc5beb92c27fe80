"""Rich display (IPython's own formatter on runs, run lists and sweep records) and interp.viz attention views
on the tiny random model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import interp
from interp.display import SweepResult
from interp.store import RunWriter


def html_of(obj) -> str:
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(obj)
    assert "text/html" in data, f"{type(obj).__name__} has no HTML representation"
    return data["text/html"]


def make_run(root, status="done"):
    w = RunWriter.create(root, "sae_features", {"model": "m"}, "cd" * 32, 0)
    n = np.array([0, 3, 10, 40])
    w.save_table("features", pd.DataFrame({"feature": range(4), "n_fired": n, "density": n / 100}))
    w.log_metrics(**{f"m{i:02d}": float(i) for i in range(20)}, listed=[1, 2])
    w.log_timings(seconds_total=1.5)
    w.finish(None if status == "done" else RuntimeError("boom <b>"))
    return w.path


def test_a_run_a_run_list_and_a_sweep_render_as_html_with_their_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_PLOTLYJS", "cdn")  # small HTML in the test; the inline mode is the default
    done = interp.load_run(make_run(tmp_path))
    h = html_of(done)
    assert 'class="interp-run"' in h and "plotly-graph-div" in h, "no headline figure"
    assert "m00" in h and "8 more metrics" in h and "seconds_total" in h
    assert f"sae_features?run=sae_features/{done.path.name}" in h and f"interp app --out {tmp_path}" in h
    failed = interp.load_run(make_run(tmp_path, "failed"))
    hf = html_of(failed)
    assert "failed" in hf and "boom &lt;b&gt;" in hf and "plotly-graph-div" not in hf, "errors are escaped, no figure"
    listing = interp.list_runs(tmp_path)
    hl = html_of(listing)
    assert hl.count("<tr>") == 3 and "failed" in hl and done.path.name in hl
    assert html_of(listing[0]).count("<tr>") == 2
    points = [{"index": i, "status": "done", "overrides": {"top_k": k, "prompt": "p"}, "metrics": {"score": 2.0 * k},
               "run_dir": None, "error": None} for i, k in enumerate((1, 2, 3))]
    points.append({"index": 3, "status": "failed", "overrides": {"top_k": 4, "prompt": "p"}, "metrics": {},
                   "run_dir": None, "error": "ConfigError: top_k"})
    hs = html_of(SweepResult({"name": "s", "probe": "logit_lens", "keys": ["top_k", "prompt"], "state": "finished",
                              "points": points}))
    assert "plotly-graph-div" in hs and "3 done" in hs and "1 failed" in hs and "ConfigError: top_k" in hs
    no_grid = SweepResult({"name": "s", "probe": "logit_lens", "keys": [], "points": points[:1]})
    assert "plotly-graph-div" not in html_of(no_grid)


def test_attention_view_draws_the_models_patterns(tiny_model):
    from interp.sites import Site

    text = "The cat sat on the mat"
    view = interp.viz.attention(tiny_model, text, layers=[1], heads=[0, 2])
    enc = tiny_model.tokenize([text])
    got = {}
    with torch.no_grad(), tiny_model.hooks([(Site("attn_pattern", 1), lambda p: got.setdefault("p", p[0].clone()))]):
        tiny_model.forward(enc["input_ids"], enc["attention_mask"])
    want = got["p"][[0, 2]].float().numpy()  # (2 heads, q, k)
    assert np.allclose(view.patterns, want, atol=1e-6) and view.names == ["L1H0", "L1H2"]
    assert np.allclose(view.patterns.sum(-1), 1, atol=1e-5) and np.allclose(np.triu(view.patterns[0], 1), 0)
    assert view.tokens == tiny_model.to_str_tokens(enc["input_ids"][0])
    h = html_of(view)
    assert h == view.html and "L1H2" in h and "<script" in h and 'src="http' not in h and len(h) > 500_000
    with pytest.raises(interp.ConfigError, match="layers"):
        interp.viz.attention(tiny_model, text, layers=[7])
    with pytest.raises(ValueError, match="tokens"):
        interp.viz.attention_view(np.ones((1, 3, 3)), ["a", "b"])
