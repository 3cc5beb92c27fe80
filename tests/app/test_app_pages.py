"""AppTest renders the Runs home and every probe's page on real fixture runs, healthy or not."""

from __future__ import annotations

import pytest
from app_fixtures import DAMAGE, FOUND_ON_READ, selected_probes

from interp.registry import probes_available
from interp_app.views.runs import SELECT_KEY

PROBES = list(probes_available())


def need(probe: str) -> None:
    if probe not in selected_probes():
        pytest.skip(f"$INTERP_TEST_PROBES leaves out {probe}")


def texts(at) -> str:
    """The text of the page's markdown, captions, titles, headers and alert boxes, in one string."""
    kinds = ("title", "subheader", "header", "markdown", "caption", "error", "warning", "info", "code")
    return "\n".join(str(e.value) for kind in kinds for e in at.get(kind))


def run_id(ref: str) -> str:
    return ref.partition("/")[2]


# ============================================================================= the Runs home


def test_runs_home_lists_every_run_with_its_status(runs, app_test):
    at = app_test(runs.root)
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Runs"]
    table = at.dataframe[0].value.set_index("run id")
    for probe, ref in runs.done.items():
        assert run_id(ref) in table.index, f"{probe} micro run missing from the table"
        assert table.loc[run_id(ref), "probe"] == probe
    expected = {runs.failed: "failed", runs.interrupted: "interrupted", runs.running: "running"}
    expected |= {ref: "done" if k in FOUND_ON_READ else "damaged" for k, ref in runs.damaged.items()}
    for ref, status in expected.items():
        assert table.loc[run_id(ref), "status"].endswith(status), (ref, table.loc[run_id(ref), "status"])
    assert "max_tokens" in table.loc[run_id(runs.failed), "error"]
    assert "sha256" in table.loc[run_id(runs.damaged["sha-mismatch"]), "error"]
    assert "not valid JSON" in table.loc[run_id(runs.damaged["manifest-json"]), "error"]
    assert "outside the artifacts root" in table.loc[run_id(runs.damaged["link-outside"]), "error"]
    assert run_id(runs.outside) not in table.index, "a run linked from outside the root was listed"
    lens = table.loc[run_id(runs.done["logit_lens"])]
    assert lens["model"] == "smollm2-135m" and any(m.startswith("final_top1=") for m in lens["metrics"]), lens.to_dict()
    assert list(table.index) == sorted(table.index, key=lambda r: r[:15], reverse=True), "not newest first"


def files_table(at):
    """The run's Files table (beside the runs table and the Metrics tab's table, whichever are drawn)."""
    tables = [d.value for d in at.dataframe if "file" in d.value.columns]
    assert len(tables) == 1, [list(d.value.columns) for d in at.dataframe]
    return tables[0]


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_runs_home_shows_a_damaged_run_and_why(runs, app_test, kind):
    at = app_test(runs.root)
    at.selectbox(key=SELECT_KEY).select(runs.damaged[kind]).run()
    assert not at.exception, at.exception
    errors = " ".join(e.value for e in at.error)
    if kind in FOUND_ON_READ:
        assert not errors, errors
    else:
        assert "damaged" in errors, errors
    assert runs.damaged[kind] in [s.value for s in at.subheader]
    if kind == "manifest-json":
        assert '"status": "do' in texts(at)  # the raw text of the broken manifest
    else:
        checks = files_table(at).set_index("file")["check"].to_dict()
        want = {
            "sha-mismatch": ("tokens.parquet", "sha256 differs"),
            "truncated-safetensors": ("lens.safetensors", "differs"),
            "missing-file": ("topk.parquet", "missing"),
            "link-outside": ("tokens.parquet", "outside the artifacts root"),
        }.get(kind)
        if want:
            assert want[1] in checks[want[0]], checks


def test_runs_home_failed_and_interrupted_runs_say_so(runs, app_test):
    at = app_test(runs.root)
    at.selectbox(key=SELECT_KEY).select(runs.failed).run()
    assert not at.exception, at.exception
    assert "failed" in at.error[0].value and "max_tokens" in at.error[0].value
    at.selectbox(key=SELECT_KEY).select(runs.interrupted).run()
    assert "interrupted" in at.warning[0].value
    at.selectbox(key=SELECT_KEY).select(runs.running).run()
    assert "running" in at.info[0].value


def test_runs_home_manifest_and_files_of_a_done_run(runs, app_test):
    at = app_test(runs.root)
    ref = runs.done["logit_lens"]
    at.selectbox(key=SELECT_KEY).select(ref).run()
    assert not at.exception, at.exception
    assert at.json[0].value and '"run_id"' in at.json[0].value and run_id(ref) in at.json[0].value
    files = files_table(at)
    assert set(files["file"]) == {"lens.safetensors", "tokens.parquet", "topk.parquet"}
    assert (files["check"] == "ok").all() and files["sha256"].str.len().eq(64).all(), files


def test_runs_home_filters(runs, app_test):
    at = app_test(runs.root)
    probe, status, model = at.multiselect
    status.select("failed").run()
    table = at.dataframe[0].value
    failed = {run_id(runs.failed)} | {run_id(runs.done[p]) for p in runs.errors}  # a probe's failed micro run too
    assert set(table["run id"]) == failed and table["status"].str.endswith("failed").all(), table
    at.multiselect[1].unselect("failed").select("damaged").run()
    damaged = {run_id(r) for k, r in runs.damaged.items() if k not in FOUND_ON_READ}
    assert set(at.dataframe[0].value["run id"]) == damaged
    at.multiselect[1].unselect("damaged")
    at.multiselect[0].select("unregistered_probe").run()
    assert list(at.dataframe[0].value["run id"]) == [run_id(runs.foreign)]
    assert not at.exception, at.exception


@pytest.mark.parametrize("where", ["empty", "missing"])
def test_an_empty_root_shows_how_to_make_runs(tmp_path, app_test, where):
    root = tmp_path / "artifacts"
    if where == "empty":
        root.mkdir()
    at = app_test(root)
    assert not at.exception, at.exception
    assert "interp run logit_lens" in at.info[0].value and "make demo" in at.info[0].value


# ============================================================================= probe pages


@pytest.mark.parametrize("probe", PROBES)
def test_probe_page_renders_its_micro_run(runs, app_test, probe):
    need(probe)
    ref = runs.done[probe]
    at = app_test(runs.root, run=ref)
    assert not at.exception, at.exception
    assert probe not in runs.errors, f"the {probe} micro run failed: {runs.errors[probe]}"
    assert [t.value for t in at.title] == [probe], "?run= did not open the probe's page"
    assert not at.error, [e.value for e in at.error]
    assert at.sidebar.selectbox[0].value == ref
    assert at.query_params["run"] == ref
    assert run_id(ref) in texts(at), "the run is not named on its page"
    assert "](http" in at.markdown[0].value, "the page does not start with a sentence and a method link"


def test_logit_lens_page_shows_the_lens(runs, app_test):
    at = app_test(runs.root, run=runs.done["logit_lens"])
    assert at.metric[0].value == "' Paris'"
    topk = at.dataframe[0].value
    assert list(topk.columns[:2]) == ["top-1", "top-2"] and len(topk) == 30
    assert topk.iloc[-1]["top-1"].startswith("▁Paris")
    at.radio(key="logit_lens.color").set_value("prob").run()
    at.selectbox(key=f"logit_lens.position:{run_id(runs.done['logit_lens'])}").select(1).run()
    assert not at.exception, at.exception
    assert len(at.dataframe[0].value) == 30


@pytest.mark.parametrize("which", ["failed", "interrupted", "running", *(f"damaged:{k}" for k in DAMAGE)])
def test_logit_lens_page_survives_a_bad_run(runs, app_test, which):
    ref = runs.damaged[which.partition(":")[2]] if which.startswith("damaged") else getattr(runs, which)
    at = app_test(runs.root, run=runs.done["logit_lens"])
    at.sidebar.selectbox[0].select(ref).run()
    assert not at.exception, at.exception
    assert at.query_params["run"] == ref
    status = which.partition(":")[0]
    boxes = {"failed": at.error, "damaged": at.error, "interrupted": at.warning, "running": at.info}[status]
    assert any(status in b.value for b in boxes), [b.value for b in boxes]


def test_probe_page_refuses_runs_of_another_probe(runs, app_test):
    at = app_test(runs.root, run=runs.done["logit_lens"])
    at.query_params["run"] = runs.foreign
    at.run()
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["logit_lens"]
    assert "belongs to probe 'unregistered_probe'" in at.error[0].value


def test_a_run_of_an_unregistered_probe_opens_on_the_home_page(runs, app_test):
    at = app_test(runs.root, run=runs.foreign)
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Runs"]
    assert at.selectbox(key=SELECT_KEY).value == runs.foreign


@pytest.mark.parametrize("probe", PROBES)
def test_generic_page_renders_every_probe_run(runs, monkeypatch, probe):
    need(probe)
    from streamlit.testing.v1 import AppTest

    def page(root: str, ref: str) -> None:
        from pathlib import Path

        from interp_app import common
        from interp_app.views import generic

        generic.render(common.load(Path(root) / ref, Path(root)))

    monkeypatch.setenv("INTERP_OUT", str(runs.root))
    at = AppTest.from_function(page, args=(str(runs.root), runs.done[probe]), default_timeout=60).run()
    assert not at.exception, at.exception
    assert "Metrics" in [s.value for s in at.subheader]
    if probe == "logit_lens":
        assert {"Tables", "Tensors"} <= {s.value for s in at.subheader}
        arrays = at.dataframe[-1].value.set_index("array")
        assert arrays.loc["final_rank", "shape"] == "30 × 5" and arrays.loc["topk_ids", "dtype"] == "int64"


# ============================================================================= ?run= outside the root


@pytest.mark.parametrize(
    "value", ["../../etc/passwd", "/etc/passwd", "logit_lens/../../../etc", "..", "/", "../outside"]
)
def test_run_query_outside_the_root_is_refused(runs, app_test, value):
    at = app_test(runs.root, run=value)
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Runs"]
    assert at.error and "Cannot open" in at.error[0].value, [e.value for e in at.error]
    assert "root:" not in texts(at)


def test_run_query_through_a_link_out_of_the_root_is_refused(runs, app_test):
    at = app_test(runs.root, run=runs.outside)
    assert "outside the artifacts root" in at.error[0].value
    at = app_test(runs.root, run=runs.done["logit_lens"])  # on the probe page itself
    for value in ("../../etc/passwd", runs.outside, "logit_lens"):
        at.query_params["run"] = value
        at.run()
        assert not at.exception, at.exception
        assert [t.value for t in at.title] == ["logit_lens"]
        assert "Cannot open" in at.error[0].value, value


def test_a_page_bug_shows_the_traceback_and_then_the_generic_page(runs, app_test, monkeypatch):
    import interp_probes.logit_lens.page as page

    def broken(run):
        raise KeyError("a bug in the page")

    monkeypatch.setattr(page, "render", broken)
    at = app_test(runs.root, run=runs.done["logit_lens"])
    assert "a bug in the page" in at.exception[0].value
    assert "Metrics" in [s.value for s in at.subheader], "the generic page did not follow the traceback"


def test_patching_page_switches_grids_and_pairs(runs, app_test):
    need("patching")
    ref = runs.done["patching"]
    at = app_test(runs.root, run=ref)
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 3, "activation, attribution and their scatter"
    assert any("Spearman" in c.value for c in at.caption), [c.value for c in at.caption]
    for grid in ("z", "resid_pre"):
        at.radio(key="patching.grid").set_value(grid).run()
        assert not at.exception, (grid, at.exception)
    at.selectbox(key=f"patching.pair:{run_id(ref)}").select(0).run()
    assert not at.exception, at.exception
    assert any("answer" in c.value for c in at.caption), "the picked pair is not described"
