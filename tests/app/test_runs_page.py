"""The Runs page's rough edges (issue 44) and its "Running now" table, under AppTest over runs written directly
with the store (no model): twelve done runs, a failed one where asked, and one running in this process."""

from __future__ import annotations

import re

import pytest

from interp.store import RunWriter

#: Pixels of Streamlit's named column widths, and what an unsized column takes: its longest cell (or its header)
#: at about 8 pixels a character, plus padding, up to the grid's 500-pixel cap on an automatic width.
NAMED = {"small": 75, "medium": 200, "large": 400}
CONTENT_PX = 1500 - 256 - 2 * 48  # a 1500-pixel window: the sidebar, the wide layout's padding


def make_root(root, failed: bool = False, running: bool = True):
    for i in range(12):
        w = RunWriter.create(root, "logit_lens", {"size": "micro"}, f"{i:064x}", 0)
        w.set("model", {"name": "smollm2-135m"})
        w.log_metrics(final_top1=" Paris", site="embedding", ratio=0.5, n_tokens=5, ok=True)
        w.finish()
    if failed:
        w = RunWriter.create(root, "logit_lens", {"size": "micro"}, "ee" * 32, 0)
        w.finish(error=ValueError("max_tokens=1 is shorter than the prompt"))
    if running:
        w = RunWriter.create(root, "patching", {"size": "micro"}, "ff" * 32, 0)
        w.manifest["progress"] = {"stage": "patch resid_pre", "step": 3, "total": 12, "elapsed": 4.0,
                                  "updated": w.manifest["started"]}
        w.flush()  # pid: this process, so it reads as running
    return root


@pytest.fixture
def spy(monkeypatch):
    """The keyword arguments of every st.dataframe call the page makes, by the frame's columns."""
    import streamlit as st

    calls = []
    real = st.dataframe

    def dataframe(data=None, *args, **kw):
        calls.append((data, kw))
        return real(data, *args, **kw)

    monkeypatch.setattr(st, "dataframe", dataframe)
    return calls


def runs_table(at):
    return next(d.value for d in at.dataframe if "run id" in d.value.columns and "metrics" in d.value.columns)


def column_px(name: str, frame, config: dict) -> int:
    width = (config.get(name) or {}).get("width")
    if width in NAMED:
        return NAMED[width]
    longest = max([len(name)] + [len(str(v)) for v in frame[name]])
    return min(500, 8 * longest + 24)


def test_metrics_column_starts_on_screen(tmp_path, app_test):
    """The columns before the metrics leave the metrics column (400 pixels) inside a 1500-pixel window; before,
    probe, run id, model, status, started, seconds and error pushed it off the right edge."""
    import json

    at = app_test(make_root(tmp_path / "a", failed=True))
    assert not at.exception, [e.value for e in at.exception]
    element = next(d for d in at.dataframe if "metrics" in d.value.columns)
    frame, config = element.value, json.loads(element.proto.columns)
    cols = list(frame.columns)
    before = sum(column_px(c, frame, config) for c in cols[: cols.index("metrics")])
    assert before + NAMED["large"] <= CONTENT_PX, f"metrics at {before} px of {CONTENT_PX}: {cols}"


def test_every_row_shows_without_scrolling(tmp_path, app_test, spy):
    """Thirteen runs: the table is as tall as its rows (Streamlit's default height shows ten and hides the
    rest inside the table's own scroll)."""
    at = app_test(make_root(tmp_path / "a", failed=True, running=False))
    assert not at.exception, [e.value for e in at.exception]
    data, kw = next((d, kw) for d, kw in spy if d is not None and "run id" in d.columns and "metrics" in d.columns)
    assert len(data) == 13
    height = kw.get("height", "auto")
    assert height == "content" or (isinstance(height, int) and height >= 35 * (len(data) + 1)), height


def test_empty_error_column_is_dropped(tmp_path, app_test):
    """No run with an error: no error column taking width; a failed run brings it back, before the metrics."""
    at = app_test(make_root(tmp_path / "a", running=False))
    assert "error" not in runs_table(at).columns, list(runs_table(at).columns)
    at = app_test(make_root(tmp_path / "b", failed=True, running=False))
    cols = list(runs_table(at).columns)
    assert "error" in cols and cols.index("error") < cols.index("metrics"), cols
    assert any("max_tokens" in e for e in runs_table(at)["error"])


def test_string_metrics_show_without_python_quotes(tmp_path, app_test):
    """site=embedding, not site='embedding'; a token's leading space as ␣."""
    at = app_test(make_root(tmp_path / "a", running=False))
    pills = list(runs_table(at)["metrics"].iloc[0])
    assert "site=embedding" in pills and "final_top1=␣Paris" in pills, pills
    assert not [p for p in pills if "'" in p or '"' in p], pills
    assert "ratio=0.5" in pills and "n_tokens=5" in pills and "ok=true" in pills, pills


def test_running_now_shows_stage_progress_and_elapsed(tmp_path, app_test):
    """A running run: its probe, stage, step (3/12), progress (0.25) and elapsed time in "Running now"."""
    at = app_test(make_root(tmp_path / "a"))
    assert not at.exception, [e.value for e in at.exception]
    assert "Running now" in [s.value for s in at.subheader]
    bars = [(e.proto.value, e.proto.text) for e in at.get("progress")]
    assert len(bars) == 1, bars
    value, text = bars[0]
    assert value == 25, bars  # 3 of 12 (Streamlit sends a percentage)
    assert re.match(r"\*\*patching\*\* · patch resid_pre 3/12 · \d+ s · `", text), text


def test_no_running_now_when_nothing_runs(tmp_path, app_test):
    at = app_test(make_root(tmp_path / "a", running=False))
    assert "Running now" not in [s.value for s in at.subheader]
    assert not at.get("progress")
