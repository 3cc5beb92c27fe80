"""Issue 44's rough edges on the probe pages: the Sweeps hint, "None" in tables, overlapping labels, the toolbar over
titles, a repr'd prompt, the logit lens's layer count, slow CircuitsVis views and the deprecated components.html.

Figures are checked on the worst cases drawn by hand (labels whose points nearly coincide), in the pixels the
figure's own height, margins and axis ranges give; pages under AppTest over the session's micro runs (conftest.py).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interp_app.figures import LABEL_GAP, MODEBAR_PX, TITLE_PX, plot_height, spread

ROOT = Path(__file__).resolve().parents[2]


def apart(px: list[float], gap: float = LABEL_GAP - 1) -> None:
    """Every two label centres (pixels) at least `gap` apart."""
    close = [(a, b) for a, b in combinations(sorted(px), 2) if b - a < gap]
    assert not close, f"labels closer than {gap} px: {close} (all: {sorted(px)})"


def margin_labels(fig, names, y_range) -> list[float]:
    """The pixel heights of the labels `names` that `line_labels` put in the right margin (asserting they are
    there: right of the plot, left-anchored), from the bottom of the plot area."""
    lo, hi = y_range
    h = plot_height(fig)
    got = {a.text: a for a in fig.layout.annotations if a.text in names}
    assert set(got) == set(names), f"labels {sorted(got)}, want {sorted(names)}"
    for a in got.values():
        assert (a.x, a.xref, a.xanchor) == (1, "x domain", "left"), f"{a.text} is not in the right margin: {a}"
    return [(a.y - lo) / (hi - lo) * h + (a.yshift or 0) for a in got.values()]


# ============================================================================= no fixture runs


def test_spread_keeps_order_gap_and_bounds():
    out = spread([10, 11, 12, 200], 15, 0, 210)
    assert out[0] < out[1] < out[2] < out[3] and min(np.diff(out)) >= 15 - 1e-9, out
    assert spread([5, 100], 15) == [5, 100], "labels already apart were moved"
    assert max(spread([200, 201, 202], 15, 0, 205)) <= 205


def test_no_page_uses_the_deprecated_components_html():
    """st.components.v1.html "will be removed after 2026-06-01": nothing in the project calls it."""
    hits = []
    for pkg in ("interp_app", "interp_probes", "interp"):
        for path in (ROOT / pkg).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if re.search(r"components\.v1|components\.html\(|import streamlit\.components", text):
                hits.append(str(path.relative_to(ROOT)))
    assert not hits, hits


def test_attention_view_needs_no_torch():
    """CircuitsVis's Python package imports torch (5-15 s on a busy machine, the bulk of the slow first load of the
    conversational_inertia and graph_sawtooth pages); the view is drawn without it, with the same props."""
    code = ("import sys, json, re, numpy as np; from interp.viz import attention_view as v; "
            "p = np.random.default_rng(0).random((2, 3, 3)).astype('float32'); "
            "h = v(p, ['a', 'b', 'c'], ['L0H0', 'L0H1'], max_value=0.5).html; "
            "props = json.loads(re.search(r'CircuitsVis.AttentionHeads, (.*)\\)\\n</script>', h).group(1)); "
            "assert np.allclose(props['attention'], p, atol=1e-5), props; "
            "assert props['tokens'] == ['a', 'b', 'c'] and props['maxValue'] == 0.5 and props['maskUpperTri']; "
            "assert 'CircuitsVis.render' in h and len(h) > 500_000 and 'src=\"http' not in h; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False", "drawing an attention view imported torch"


def _layers(n: int = 12) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    x = np.arange(n)
    layers = pd.DataFrame({"layer": x, "concentration": rng.random(n), "auc_null": 0.5 + 0 * x,
                           "auc_null_sd": 0.02 + 0 * x, "auc": rng.random(n), "auc_distmatched": rng.random(n),
                           "locality_auc": 0.9 + 0 * x, "sink_mass": rng.random(n), "entropy": rng.random(n)})
    nulls = pd.DataFrame({"layer": np.repeat(x, 5), "concentration_null": rng.random(5 * n)})
    return layers, nulls


def test_sawtooth_strip_labels_each_in_a_lane_of_its_own():
    """l* and the S_score / S_ent / S labels all start at layer 8 here (the issue's case): each is drawn once, in a
    lane of its own at the top of the first panel, LANE_PX apart."""
    from interp_probes.graph_sawtooth.figures import layer_strip

    layers, nulls = _layers()
    fig = layer_strip(layers, nulls, 8, {"S_score": [8, 9, 10], "S_ent": [8, 9], "S": [8]})
    want = {"l* = 8", "S_score", "S_ent", "S"}
    labels = [a for a in fig.layout.annotations if a.text in want]
    assert sorted(a.text for a in labels) == sorted(want), [a.text for a in labels]
    assert {(a.yref, a.y, a.yanchor) for a in labels} == {("y domain", 1, "top")}, [a.to_plotly_json() for a in labels]
    apart([-(a.yshift or 0) for a in labels])
    assert len(fig.layout.shapes) >= 3 * 3, "each set is shaded on all three panels"


def test_sawtooth_roi_colour_bar_sits_in_the_gap():
    """The attention map's colour bar lies between the first and the second map, over neither, and the second and
    third maps hide their row tick labels (the same rows as the first's), which it would cover."""
    from interp_probes.graph_sawtooth.figures import roi_panels

    n = 12
    raw = np.random.default_rng(0).random((n, n))
    fig = roi_panels(raw, raw > 0.5, np.tril(np.ones((n, n))), [f"t{i}" for i in range(n)], [[0, 5], [6, 11]])
    bar = fig.data[0].colorbar
    first, second = fig.layout.xaxis.domain, fig.layout.xaxis2.domain
    assert bar.xanchor == "left" and bar.x >= first[1], (bar.x, first)
    width = 900  # a narrow page: the bar (thickness + ~30 px of tick labels) still ends before the second map
    assert bar.x + (bar.thickness + 30) / width <= second[0], (bar.x, bar.thickness, second)
    assert fig.layout.yaxis2.showticklabels is False and fig.layout.yaxis3.showticklabels is False


def test_atoms_spectrum_dim_labels_apart():
    """"dim 230" printed over "dim 118": the leading ranks' labels (a few pixels apart on the curve) are pushed
    apart, each still pointing at its own rank."""
    from interp_probes.atoms.figures import spectrum_figure

    eig = np.r_[12000, 1800, 335, 170, 137, 120, np.geomspace(100, 0.1, 60)]
    dims = np.r_[507, 247, 308, 230, 118, 230, -np.ones(60)].astype(int)
    spec = pd.DataFrame({"hook": "h", "metric": "uncentered", "rank": np.arange(len(eig)), "eigval": eig,
                         "top_dim": dims})
    fig = spectrum_figure(spec, "h")
    labels = [a for a in fig.layout.annotations if a.text.startswith("dim ")]
    assert sorted(a.x for a in labels) == [0, 1, 2, 3, 4, 5]
    lo, hi = fig.layout.yaxis.range
    h = plot_height(fig)
    px = [(a.y - lo) / (hi - lo) * h - (a.ay or 0) for a in labels]  # ay: pixels down from the point
    apart(px)
    assert all(-5 <= p <= h + 5 for p in px), (px, h)


def test_sae_falsification_thresholds_off_the_bars_and_legend_off_the_axis():
    """The threshold names go in the right margin (not on the bars), pushed apart, and the legends of the
    injection, scatter and steering figures sit under the plot: on the right they covered the second y axis and
    those names."""
    from interp_probes.sae_falsification.figures import (
        THRESHOLDS,
        injection_bars,
        scatter_real_control,
        steering_figure,
    )

    inj = pd.DataFrame({"feature": 3, "arm": ["real", "control", "real", "control"],
                        "strategy": ["prepend", "prepend", "append", "append"], "d": [12.0, 0.1, 9.0, 0.3],
                        "p": [1e-5, 0.5, 1e-4, 0.4]})
    fig = injection_bars(inj, 3)
    apart(margin_labels(fig, set(THRESHOLDS), fig.layout.yaxis.range))
    assert fig.layout.yaxis.range[1] > 12.0 * 1.15, "no room above the tallest bar for its text"
    feats = pd.DataFrame({"feature": [1, 2], "analysed": True, "class": ["token_driven", "weakly"],
                          "best_d": [2.0, 0.3], "control_best_d": [0.1, 0.2]})
    fig2 = scatter_real_control(feats)
    apart(margin_labels(fig2, set(THRESHOLDS), fig2.layout.yaxis.range))
    steer = pd.DataFrame({"feature": [1, 1, 2, 2], "gamma": [0, 4, 0, 4], "correct": [0, 1, 0, 0],
                          "style_score": [0.2, 0.5, 0.2, 0.3]})
    fig3 = steering_figure(steer)
    assert fig3.layout.yaxis2.side == "right"
    for f in (fig, fig2, fig3):
        assert f.layout.legend.orientation == "h" and f.layout.legend.y < 0, f.layout.legend


def test_self_interp_chance_labels_apart():
    """chance@1 and chance@10 lie a few pixels apart near 0 (here 0.012 and 0.03): their names do not overlap."""
    from interp_probes.self_interp.figures import leaderboard

    rows = [{"layer": 6, "split": "heldout", "variant": v, "k": k, "recall": r, "ci_low": r - 0.05,
             "ci_high": r + 0.05, "chance": 0.01 * k / 5 + 0.01}
            for v, r in (("identity", 0.2), ("scalar_affine", 0.3), ("logit_lens", 0.8)) for k in (1, 10)]
    fig = leaderboard(pd.DataFrame(rows))
    apart(margin_labels(fig, {"chance@1", "chance@10"}, fig.layout.yaxis.range))


# ============================================================================= pages (fixture runs)

pages = pytest.mark.slow


def page(runs, app_test, probe: str):
    if probe not in runs.done:
        pytest.skip(f"$INTERP_TEST_PROBES leaves out {probe}")
    at = app_test(runs.root, runs.done[probe])
    assert not at.exception, [e.value for e in at.exception]
    return at


@pages
@pytest.mark.parametrize("probe", ["atoms", "keystone", "patching", "sae_falsification"])
def test_tables_show_a_dash_not_none(runs, app_test, probe):
    """A missing value (None, NaN) reads "—" in every table of the page, not Streamlit's "None"."""
    at = page(runs, app_test, probe)
    with_gaps = [d for d in at.dataframe if d.value.isna().to_numpy().any()]
    assert with_gaps, f"the {probe} micro run shows no table with a missing value: the check checks nothing"
    assert [d.proto.placeholder for d in with_gaps] == ["—"] * len(with_gaps)
    literal = [(c, v) for d in at.dataframe for c in d.value.columns for v in d.value[c]
               if isinstance(v, str) and v in ("None", "nan")]
    assert not literal, literal


@pages
@pytest.mark.parametrize("probe", ["graph_sawtooth", "sae_features"])
def test_titles_clear_of_the_toolbar(runs, app_test, probe):
    """Plotly's toolbar (the modebar) shows in the top MODEBAR_PX of a figure: every titled figure on the page
    draws its title below that band, at the bottom of a top margin that holds both."""
    at = page(runs, app_test, probe)
    charts = at.get("plotly_chart")
    assert charts, probe
    for chart in charts:
        layout = json.loads(chart.proto.spec)["layout"]
        title = (layout.get("title") or {}).get("text")
        subplot_titles = [a for a in layout.get("annotations", []) if a.get("yref") == "paper"
                          and a.get("yanchor") == "bottom"]
        if not title and not subplot_titles:
            continue
        top = layout.get("margin", {}).get("t")
        assert top is not None and top >= MODEBAR_PX + TITLE_PX, (title, top)
        if title:
            t = layout["title"]
            assert (t.get("yref"), t.get("y"), t.get("yanchor")) == ("paper", 1, "bottom"), (title, t)


@pages
def test_sawtooth_prompt_shows_its_line_breaks(runs, app_test):
    """The ROI viewer's prompt is shown with its line breaks, not as a repr with a literal "\\nQ:"."""
    at = page(runs, app_test, "graph_sawtooth")
    shown = [*at.caption, *at.markdown]
    assert not [e.value for e in shown if "\\n" in e.value], [e.value for e in shown if "\\n" in e.value]
    prompts = [c.value for c in at.code if "\nQ:" in c.value or "\nA:" in c.value]
    assert prompts, [c.value[:80] for c in at.code]


@pages
def test_logit_lens_counts_layers_one_way(runs, app_test):
    """"first layer with it at top-1: 29 of 29" beside "layers 30": both tiles now name layers L0..L29, and say so."""
    from interp.store import load_run
    from interp_probes.logit_lens.page import layer_of

    at = page(runs, app_test, "logit_lens")
    run = load_run(runs.root / runs.done["logit_lens"])
    n = run.tensor_file("lens")["final_rank"].shape[0]
    first = run.metrics.get("first_layer_final_top1")
    tiles = {m.label: m for m in at.metric}
    assert tiles["layers"].value == f"{n} (L0–L{n - 1})"
    assert tiles["first layer with it at top-1"].value == ("never" if first is None else layer_of(first, n))
    assert "count from 0" in tiles["layers"].proto.help
    assert layer_of(n - 1, n) == f"L{n - 1} (last)" and layer_of(3, n) == f"L3 of 0–{n - 1}"


# ============================================================================= the Sweeps page


def test_sweeps_hint_runs_the_sweep_into_this_root(tmp_path, app_test):
    """The empty Sweeps page's command writes where the page reads: `--out <its root>` (quoted for a shell)."""
    root = tmp_path / "my artifacts"
    root.mkdir()
    at = app_test(root, sweep="anything")
    assert not at.exception, at.exception
    hint = at.info[0].value
    assert f"interp sweep sweeps/logit_lens_demo.toml --out {shlex.quote(str(root.resolve()))}" in hint, hint
