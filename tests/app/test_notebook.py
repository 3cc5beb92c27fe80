"""docs/notebook.ipynb executed in a Jupyter kernel (nbclient) on the embedded model, then rendered to HTML
(nbconvert): the run, the sweep and the run list render as HTML with their figures, the CircuitsVis view is
inline, the feature dashboard's highlighted contexts show the searched token, and a lens readout shows its grid."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def html_outputs(cell) -> list[str]:
    return [o["data"]["text/html"] for o in cell.get("outputs", []) if "text/html" in o.get("data", {})]


def test_the_docs_notebook_executes_and_renders(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    monkeypatch.setenv("INTERP_OUT", str(tmp_path / "artifacts"))
    monkeypatch.setenv("INTERP_PLOTLYJS", "inline")
    (tmp_path / "artifacts").mkdir()
    nb = nbformat.read(ROOT / "docs" / "notebook.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, [f"{e['ename']}: {e['evalue']}" for e in errors]

    code = [c for c in nb.cells if c.cell_type == "code"]
    run_html = html_outputs(code[0])
    assert run_html and 'class="interp-run"' in run_html[0] and "plotly-graph-div" in run_html[0], \
        "the run did not render as HTML with its figure"
    assert "final_top1" in run_html[0] and "interp app --out" in run_html[0] and "done" in run_html[0]
    sweep_html = html_outputs(code[3])
    assert sweep_html and 'class="interp-sweep"' in sweep_html[0] and "plotly-graph-div" in sweep_html[0]
    assert sweep_html[0].count("<tr>") == 5, "a header and one row per point (2 x 2 grid)"
    runs_html = html_outputs(code[4])
    assert runs_html and 'class="interp-runs"' in runs_html[0] and runs_html[0].count("logit_lens") >= 5
    view = html_outputs(code[5])
    assert view and "L3H0" in view[0] and "<script" in view[0] and 'src="http' not in view[0]
    ctx = html_outputs(code[6])
    assert ctx and 'class="tok center"' in ctx[0]
    center = ctx[0].split('class="tok center"', 1)[1].split(">", 1)[1].split("<", 1)[0]
    assert center.strip().lower() == "the", f"the highlighted token is {center!r}, not the searched 'the'"

    lens_html = html_outputs(code[7])
    assert lens_html and 'class="interp-lens-readout"' in lens_html[0] and "plotly-graph-div" in lens_html[0], \
        "the lens readout did not render as its grid"

    body, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    out = tmp_path / "notebook.html"
    out.write_text(body, encoding="utf-8")
    for marker in ('class="interp-run"', 'class="interp-sweep"', 'class="interp-runs"', "L3H0", "tok center"):
        assert marker in body, f"{marker} missing from the rendered HTML"
    print(f"rendered: {out} ({out.stat().st_size / 1e6:.1f} MB)")
