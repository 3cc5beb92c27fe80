"""Rough edges a new user met on the pages (issue "One probe, one folder", item 7), under AppTest over the
session's micro runs (conftest.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_inertia_circuitsvis_view_built_once(runs, app_test, monkeypatch):
    """The CircuitsVis view of the conversational_inertia page (seconds for a (heads, 320, 320) view) is built
    on the first render only, not again on every rerun."""
    import interp.viz

    calls = []
    real = interp.viz.attention_view
    monkeypatch.setattr(interp.viz, "attention_view", lambda *a, **k: calls.append(1) or real(*a, **k))
    at = app_test(runs.root, runs.done["conversational_inertia"])
    assert not at.exception, [e.value for e in at.exception]
    at.run()
    at.run()
    assert len(calls) <= 1, f"the view was built {len(calls)} times in three renders"


def test_metric_tiles_fit(runs, app_test):
    """No metric tile's value is longer than a tile in a row of four shows ("0.6265 (0.001…" was cut off)."""
    long, TILE_CHARS = {}, 12  # app.common.TILE_CHARS: what a tile in a row of four shows in full
    for probe, ref in sorted(runs.done.items()):
        if probe in runs.errors:
            continue
        at = app_test(runs.root, ref)
        long.update({f"{probe}: {m.label}": m.value for m in at.metric if len(str(m.value)) > TILE_CHARS})
    assert not long, long


def test_patching_caption_counts_are_integers(runs, app_test):
    """"over 224 cells", not "over 224.0 cells"."""
    import re

    at = app_test(runs.root, runs.done["patching"])
    captions = [c.value for c in at.caption if "cells" in c.value]
    assert captions, "the patching page lost its agreement caption"
    assert not [c for c in captions if re.search(r"\d\.0 cells|top-\d+\.0", c)], captions


def test_topk_table_shows_no_escapes():
    """A no-break space or zero-width token shows as a readable mark, not a literal backslash-u escape."""
    import pandas as pd

    from interp_probes.logit_lens.figures import topk_table

    topk = pd.DataFrame({"layer": [0, 0, 0], "position": [1, 1, 1], "k": [0, 1, 2],
                         "token": ["\xa0Paris", "\u200b", " the"], "prob": [0.5, 0.3, 0.2]})
    cells = topk_table(topk, 1).to_numpy().ravel().tolist()
    assert not [c for c in cells if "\\u" in c], cells
    assert cells[0].startswith("␣Paris"), cells


def test_failed_run_error_before_metrics(runs, app_test):
    """On the Runs page a failed run's error comes before the metrics pills, so it is on screen."""
    at = app_test(runs.root)
    table = next(d.value for d in at.dataframe if "run id" in d.value.columns)
    cols = list(table.columns)
    assert cols.index("error") < cols.index("metrics") and cols.index("error") <= 6, cols
    failed = table[table["run id"] == runs.failed.split("/")[-1]]
    assert "max_tokens" in failed["error"].iloc[0]
