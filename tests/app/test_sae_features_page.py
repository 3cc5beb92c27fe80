"""The feature dashboard's page on the sae_features micro run: searching a top token selects a feature whose
highlighted tokens are that token; the Runs page at /runs and its metrics list column."""

from __future__ import annotations

import re

import pytest


def need(runs, probe: str) -> None:
    if probe not in runs.done:
        pytest.skip(f"no {probe} micro run in this session (INTERP_TEST_PROBES)")


def test_search_by_top_token_shows_contexts_highlighting_it(runs, app_test):
    need(runs, "sae_features")
    import pandas as pd

    feats = pd.read_parquet(runs.root / runs.done["sae_features"] / "features.parquet")
    live = feats[(feats["n_fired"] >= 5) & (feats["top_token_share"] >= 0.8)]
    token = live.sort_values("n_fired", ascending=False)["top_token"].iloc[0]
    at = app_test(runs.root, run=runs.done["sae_features"])
    assert not at.exception, at.exception
    at.text_input(key="sae_features.search").set_value(token.strip()).run()
    assert not at.exception, at.exception
    shown = at.get("html")[0].proto.body  # the top contexts
    centers = re.findall(r'class="tok center"[^>]*>([^<]*)<', shown)
    assert centers and sum(c.strip() == token.strip() for c in centers) >= 0.8 * len(centers), (token, centers)
    top = [m.value for m in at.metric][-1]
    assert top == repr(token), (top, token)
    at.text_input(key="sae_features.search").set_value("no-such-token-xyz").run()
    assert any("No live feature" in i.value for i in at.info)


def test_runs_page_lists_metrics_as_a_list_column(runs, app_test):
    at = app_test(runs.root)
    table = at.dataframe[0].value
    lens = table[table["run id"] == runs.done["logit_lens"].partition("/")[2]].iloc[0]  # the done micro run
    assert isinstance(lens["metrics"], (list, tuple)) or hasattr(lens["metrics"], "tolist")
    assert any(str(m).startswith("final_top1=") for m in list(lens["metrics"]))
