"""The Sweeps page under AppTest over a real sweep (`interp.sweep` on the tiny random model), and its figures.

The sweep: logit_lens (micro) over model x prompt x top_k, 12 points. The models are the tiny random
model and a copy of it without weights (it passes every check before loading, then its run fails), so:
4 done (tiny model), 4 failed (no weights), 4 invalid (top_k 0). The metrics are numbers (n_tokens,
first_layer_final_top1), a string (final_top1) and a list (final_rank_by_layer).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from interp_app.figures import sweeps as F

SWEEP = """
probe = "logit_lens"
models = [{models}]
[base]
size = "micro"
device = "cpu"
[grid]
prompt = [{prompts}]
top_k = [0, 3, 5]
"""
NAME = "grid"
PROMPTS = ["The capital of France is", "One two three four five six seven eight nine ten eleven twelve"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory, tiny_model_dir) -> Path:
    """The artifacts root of the sweep above: its runs and ``sweeps/grid/sweep.json``."""
    import interp
    from interp import context

    base = tmp_path_factory.mktemp("sweeps")
    root = base / "artifacts"
    broken = base / "no-weights"
    shutil.copytree(tiny_model_dir, broken, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    f = base / f"{NAME}.toml"
    f.write_text(SWEEP.format(models=", ".join(json.dumps(str(m)) for m in (tiny_model_dir, broken)),
                              prompts=", ".join(map(json.dumps, PROMPTS))))
    saved = dict(context._MODELS)  # the sweep puts the tiny model in the one-model cache: give back what was there
    try:
        interp.run_sweep(f, out=root, progress=False)
    finally:
        context._MODELS.clear()
        context._MODELS.update(saved)
    return root


def record_of(root: Path) -> dict:
    return json.loads((root / "sweeps" / NAME / "sweep.json").read_text())


def expected_cells(points: list[dict], metric: str, x: str, by: str) -> dict[tuple[str, str], float]:
    """(x value, by value) -> mean of `metric` over the finished points there, straight from sweep.json."""
    sums: dict[tuple[str, str], list[float]] = {}
    for p in points:
        if p["status"] in ("done", "skipped"):
            key = (json.dumps(p["overrides"][x]), json.dumps(p["overrides"][by]))
            sums.setdefault(key, []).append(p["metrics"][metric])
    return {k: sum(v) / len(v) for k, v in sums.items()}


def figure(at) -> dict:
    (chart,) = at.get("plotly_chart")
    return json.loads(chart.proto.spec)


def texts(at) -> str:
    kinds = ("title", "markdown", "caption", "error", "warning", "info")
    return "\n".join(str(e.value) for kind in kinds for e in at.get(kind))


def open_sweep(app_test, root: Path, name: str = NAME):
    at = app_test(root, sweep=name)
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Sweeps"], "?sweep= did not open the Sweeps page"
    return at


# ============================================================================= the sweep itself


def test_the_fixture_sweep_has_done_failed_and_invalid_points(swept):
    points = record_of(swept)["points"]
    status = {(Path(p["overrides"]["model"]).name, p["overrides"]["top_k"]): p["status"] for p in points}
    assert all(s == "invalid" for (_, k), s in status.items() if k == 0), status
    assert all(s == "failed" for (m, k), s in status.items() if m == "no-weights" and k), status
    assert all(s == "done" for (m, k), s in status.items() if m == "tiny-llama" and k), status
    assert {p["metrics"]["n_tokens"] for p in points if p["status"] == "done"} == {5, 12}


# ============================================================================= the page


@pytest.mark.parametrize("where", ["missing", "empty", "runs only"])
def test_no_sweeps_says_how_to_make_one(tmp_path, app_test, swept, where):
    root = tmp_path / "artifacts"
    if where == "empty":
        root.mkdir()
    elif where == "runs only":
        shutil.copytree(swept / "logit_lens", root / "logit_lens")
    at = open_sweep(app_test, root, "anything")
    assert "No sweeps under" in at.info[0].value and "interp sweep" in at.info[0].value
    assert not at.get("plotly_chart")


def test_lines_plot_the_metrics_of_sweep_json(swept, app_test):
    points = record_of(swept)["points"]
    at = open_sweep(app_test, swept)
    assert at.selectbox(key="sweeps.selected").value == NAME and at.query_params["sweep"] == NAME
    metric_box = at.selectbox(key=f"sweeps.metric:{NAME}")
    assert metric_box.options == ["first_layer_final_top1", "n_tokens"], "text and list metrics must not be offered"
    assert at.selectbox(key=f"sweeps.x:{NAME}").options == ["prompt", "top_k", "model"], "the grid's keys first"
    metric_box.select("n_tokens").run()
    at.selectbox(key=f"sweeps.x:{NAME}").select("top_k").run()
    at.selectbox(key=f"sweeps.by:{NAME}").select("prompt").run()
    assert not at.exception, at.exception

    fig = figure(at)
    want = expected_cells(points, "n_tokens", "top_k", "prompt")
    assert [t["name"] for t in fig["data"]] == [f"prompt={F.value_label(pr)}" for pr in PROMPTS]
    for trace, pr in zip(fig["data"], PROMPTS):
        assert trace["x"] == [0, 3, 5], "a numeric key keeps its values on the axis"
        assert trace["y"] == [want.get((json.dumps(k), json.dumps(pr))) for k in (0, 3, 5)], trace["y"]
    assert [t["y"] for t in fig["data"]] == [[None, 5, 5], [None, 12, 12]], "top_k 0 (invalid) must be a gap"
    assert "4 of 12 points plotted; not plotted: 8 failed, invalid or pending" in texts(at)


def test_heatmap_plots_the_metrics_of_sweep_json(swept, app_test):
    points = record_of(swept)["points"]
    models = list(dict.fromkeys(p["overrides"]["model"] for p in points))
    at = open_sweep(app_test, swept)
    at.selectbox(key=f"sweeps.metric:{NAME}").select("first_layer_final_top1").run()
    at.selectbox(key=f"sweeps.x:{NAME}").select("top_k").run()
    at.selectbox(key=f"sweeps.by:{NAME}").select("model").run()
    at.radio(key=f"sweeps.view:{NAME}").set_value("heatmap").run()
    assert not at.exception, at.exception
    fig = figure(at)
    (hm,) = fig["data"]
    assert hm["type"] == "heatmap"
    want = expected_cells(points, "first_layer_final_top1", "top_k", "model")
    z = [[want.get((json.dumps(k), json.dumps(m))) for k in (0, 3, 5)] for m in models]
    assert hm["z"] == z, (hm["z"], z)
    assert hm["z"][1] == [None, None, None], "the model without weights failed: its row stays blank"
    assert [t.endswith(Path(m).name) for t, m in zip(fig["layout"]["yaxis"]["ticktext"], models)] == [True, True]


def test_table_lists_every_point_with_its_status_and_run(swept, app_test):
    points = record_of(swept)["points"]
    at = open_sweep(app_test, swept)
    table = at.dataframe[0].value.set_index("point")
    assert list(table.index) == [p["index"] for p in points]
    for p in points:
        row = table.loc[p["index"]]
        assert row["status"].endswith(p["status"]), (row.to_dict(), p["status"])
        if p["status"] == "invalid":
            assert "top_k" in row["error"] and row["run"] == ""
        elif p["status"] == "failed":
            assert row["error"] and row["run"].endswith("failed"), row.to_dict()
        else:
            assert row["run"].endswith("done") and f"n_tokens={p['metrics']['n_tokens']}" in row["metrics"]
    assert set(table.columns) >= {"status", "model", "prompt", "top_k", "run", "metrics", "error"}


def test_a_point_links_to_its_run_page(swept, app_test):
    points = record_of(swept)["points"]
    done = next(p for p in points if p["status"] == "done")
    failed = next(p for p in points if p["status"] == "failed")
    invalid = next(p for p in points if p["status"] == "invalid")
    at = open_sweep(app_test, swept)
    assert at.selectbox(key=f"sweeps.point:{NAME}").value == done["index"], "the first point with a run"
    (link,) = at.get("page_link")
    ref = f"logit_lens/{Path(done['run_dir']).name}"
    assert link.value == f"Open point {done['index']} on the logit_lens page"
    assert link.proto.query_string == f"run={ref.replace('/', '%2F')}", link.proto.query_string

    at.selectbox(key=f"sweeps.point:{NAME}").select(failed["index"]).run()
    assert "failed" in at.error[0].value and failed["error"][:40] in at.error[0].value
    assert len(at.get("page_link")) == 1, "a failed run still has a page that says why"
    at.selectbox(key=f"sweeps.point:{NAME}").select(invalid["index"]).run()
    assert "invalid" in at.warning[0].value and "top_k" in at.warning[0].value
    assert not at.get("page_link") and "has no run" in texts(at)
    assert not at.exception, at.exception

    page = app_test(swept, run=ref)  # the link's target: the run on the logit_lens page
    assert [t.value for t in page.title] == ["logit_lens"] and not page.exception


def test_a_click_on_a_table_row_picks_that_point(monkeypatch):
    from types import SimpleNamespace

    from interp_app.views import sweeps as V

    state = {f"sweeps.table:{NAME}": SimpleNamespace(selection=SimpleNamespace(rows=[2]))}
    monkeypatch.setattr(V.st, "session_state", state)
    V._pick_row(NAME, [7, 8, 9, 10])  # the table's rows are points 7..10
    assert state[f"sweeps.point:{NAME}"] == 9
    state[f"sweeps.table:{NAME}"].selection.rows = []  # a click that clears the selection keeps the point
    V._pick_row(NAME, [7, 8, 9, 10])
    assert state[f"sweeps.point:{NAME}"] == 9


def test_a_sweep_whose_runs_were_deleted_still_plots(swept, tmp_path, app_test):
    root = tmp_path / "artifacts"
    shutil.copytree(swept, root)
    points = record_of(root)["points"]
    victim = next(p for p in points if p["status"] == "done")
    shutil.rmtree(root / "logit_lens" / Path(victim["run_dir"]).name)
    at = open_sweep(app_test, root)
    assert "1 of this sweep's runs are no longer under the artifacts root" in at.warning[0].value
    assert at.dataframe[0].value.set_index("point").loc[victim["index"], "run"] == "✗ deleted"
    at.selectbox(key=f"sweeps.point:{NAME}").select(victim["index"]).run()
    assert not at.get("page_link") and any("no longer under" in w.value for w in at.warning)

    shutil.rmtree(root / "logit_lens")  # every run gone: the metrics still come from sweep.json
    at = open_sweep(app_test, root)
    assert "4 of this sweep's runs" in at.warning[0].value, "the done points' recorded runs"
    table = at.dataframe[0].value
    assert set(table["run"]) == {"", "✗ deleted"}, "failed points have no recorded run and none is found by hash"
    at.selectbox(key=f"sweeps.metric:{NAME}").select("n_tokens").run()
    at.selectbox(key=f"sweeps.x:{NAME}").select("prompt").run()
    assert figure(at)["data"][0]["y"] == [5, 12]
    assert figure(at)["layout"]["xaxis"]["range"] == [-0.5, 1.5]


def test_a_broken_record_is_an_error_and_other_sweeps_still_open(swept, tmp_path, app_test):
    root = tmp_path / "artifacts"
    shutil.copytree(swept, root)
    (root / "sweeps" / "broken").mkdir()
    (root / "sweeps" / "broken" / "sweep.json").write_text('{"points": [')
    (root / "sweeps" / "foreign").mkdir()
    (root / "sweeps" / "foreign" / "sweep.json").write_text('{"schema": 1, "points": 3}')
    at = open_sweep(app_test, root, "broken")
    assert "Cannot read sweep `broken`" in at.error[0].value and "not valid JSON" in at.error[0].value
    at.selectbox(key="sweeps.selected").select("foreign").run()
    assert "not a sweep record" in at.error[0].value and at.query_params["sweep"] == "foreign"
    at.selectbox(key="sweeps.selected").select(NAME).run()
    assert not at.error and len(at.get("plotly_chart")) == 1
    at = open_sweep(app_test, root, "no-such-sweep")
    assert "No sweep `no-such-sweep`" in at.error[0].value


def test_a_sweep_with_only_text_metrics_says_there_is_nothing_to_plot(swept, tmp_path, app_test):
    root = tmp_path / "artifacts"
    shutil.copytree(swept, root)
    path = root / "sweeps" / NAME / "sweep.json"
    record = json.loads(path.read_text())
    for p in record["points"]:
        p["metrics"] = {k: v for k, v in p["metrics"].items() if isinstance(v, (str, list))}
    path.write_text(json.dumps(record))
    at = open_sweep(app_test, root)
    assert "No point of this sweep has a numeric metric" in at.info[0].value
    assert not at.get("plotly_chart") and len(at.dataframe[0].value) == 12


# ============================================================================= figure functions


def pt(i, status="done", **over):
    metrics = over.pop("metrics", {})
    return {"index": i, "status": status, "overrides": over, "metrics": metrics, "run_dir": None, "error": None}


POINTS = [
    pt(0, a=1, b="x", metrics={"m": 1.0, "s": "tok", "flag": True}),
    pt(1, a=2, b="x", metrics={"m": 3.0, "s": "tok"}),
    pt(2, a=1, b="y", metrics={"m": -2.0}),
    pt(3, "failed", a=2, b="y", metrics={"m": 99.0}),
    pt(4, "invalid", a=0, b="y"),
    pt(5, "skipped", a=2, b="x", metrics={"m": 5.0, "nan": None}),
    pt(6, a=1, b="y", metrics={"m": "not a number"}),
]


def test_metric_names_and_varying_keys():
    assert F.metric_names(POINTS) == ["m"], "strings, booleans, null and failed points' values are not plottable"
    assert F.varying_keys(["a", "b", "c"], POINTS) == ["a", "b"]
    assert F.varying_keys(["c"], POINTS) == []
    assert [p["index"] for p in F.plotted(POINTS, "m")] == [0, 1, 2, 5]


def test_cells_average_points_that_share_a_cell():
    table = F.cells(POINTS, "m", "a", "b")
    got = {(r.x, r.by): (r.value, r.n, r.points) for r in table.itertuples()}
    assert got == {(1, "x"): (1.0, 1, [0]), (2, "x"): (4.0, 2, [1, 5]), (1, "y"): (-2.0, 1, [2])}


def test_lines_numeric_axis_gaps_and_one_line_per_value():
    fig = F.metric_lines(POINTS, "m", "a", "b")
    assert [t.name for t in fig.data] == ["b=x", "b=y"]
    x, y = fig.data
    assert list(x.x) == [0, 1, 2] and list(x.y) == [None, 1.0, 4.0], "a numeric key keeps its values as x"
    assert list(y.y) == [None, -2.0, None], "failed and invalid points are gaps, not zeros"
    assert fig.layout.xaxis.title.text == "a" and fig.layout.yaxis.title.text == "m"
    single = F.metric_lines(POINTS, "m", "b")
    assert len(single.data) == 1 and list(single.data[0].y) == [(1.0 + 3.0 + 5.0) / 3, -2.0]
    assert list(single.layout.xaxis.ticktext) == ["x", "y"] and list(single.data[0].x) == [0, 1]


def test_lines_label_list_and_long_values():
    pts = [pt(0, hooks=[0, 1], metrics={"m": 1}), pt(1, hooks=[0, 1, 2, 3], metrics={"m": 2}),
           pt(2, hooks="z" * 80, metrics={"m": 3})]
    fig = F.metric_lines(pts, "m", "hooks")
    assert list(fig.layout.xaxis.ticktext) == ["[0, 1]", "[0, 1, 2, 3]", "z" * 19 + "…" + "z" * 20]
    assert list(fig.data[0].y) == [1, 2, 3]


def test_heatmap_blank_cells_and_a_diverging_scale_for_signed_values():
    fig = F.metric_heatmap(POINTS, "m", "a", "b")
    (hm,) = fig.data
    assert [list(r) for r in hm.z] == [[None, 1.0, 4.0], [None, -2.0, None]]
    assert hm.zmid == 0 and hm.zmin == -4.0 and hm.zmax == 4.0
    assert list(fig.layout.xaxis.ticktext) == ["0", "1", "2"] and list(fig.layout.yaxis.ticktext) == ["x", "y"]
    positive = F.metric_heatmap([p for p in POINTS if p["index"] != 2], "m", "a", "b").data[0]
    assert positive.zmid is None and positive.colorscale[0][1] != hm.colorscale[0][1]


def test_figures_on_the_real_sweep(swept):
    points = record_of(swept)["points"]
    fig = F.metric_lines(points, "n_tokens", "top_k")
    (line,) = fig.data
    assert list(line.x) == [0, 3, 5] and list(line.y)[0] is None
    done = [p["metrics"]["n_tokens"] for p in points if p["status"] == "done" and p["overrides"]["top_k"] == 3]
    assert len(done) == 2 and math.isclose(line.y[1], sum(done) / len(done)), "two prompts averaged"
    assert line.customdata[1][3] == 2


def test_every_point_status_the_sweep_writes_has_its_mark():
    """A point a signal stopped reads "⏸ interrupted", not "? interrupted": every status the sweep writes has a mark."""
    from interp_app.views.sweeps import points_frame

    statuses = ["done", "skipped", "failed", "interrupted", "invalid", "pending"]
    points = [{"index": i, "status": s, "overrides": {}, "metrics": {}} for i, s in enumerate(statuses)]
    frame = points_frame(points, [], {i: (None, None) for i in range(len(points))}, None)
    assert not any(v.startswith("?") for v in frame["status"]), list(frame["status"])
    assert "⏸ interrupted" in list(frame["status"])
