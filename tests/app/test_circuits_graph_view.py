"""The circuits page's attribution graph reads as Neuronpedia's viewer does (issue 44, part 3).

Figure-level checks run on a synthetic graph with crowded cells and SentencePiece / byte-level BPE tokens; the page
checks (AppTest) run on the circuits micro fixture run: a click on the graph selects the node everywhere.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pandas as pd
import pytest
from app_fixtures import selected_probes

from interp_probes.circuits import figures as F

L, N_POS = 4, 5
TOKENS = ["<s>", "▁The", "Ġcapital", " of", "\n"]
LOGITS = [" Paris", " Rome", "\n", "Lyon"]


def synthetic(seed: int = 0, n_feat: int = 40, n_edges: int = 600) -> tuple[dict, dict]:
    """A pruned graph in graph.safetensors' layout: features crowd one (layer, position) cell (12 of them at layer
    2, position 4), every error, embedding and logit node is kept, and `n_edges` random edges join kept nodes."""
    rng = np.random.default_rng(seed)
    feats = np.column_stack([rng.integers(0, L, n_feat), rng.integers(1, N_POS, n_feat), rng.integers(0, 999, n_feat)])
    feats[:12, :2] = (2, 4)
    n_nodes = n_feat + (L + 1) * N_POS + len(LOGITS)
    pairs = rng.choice((n_nodes - len(LOGITS)) * n_nodes, n_edges, replace=False)  # distinct (source, target)
    src, dst = np.divmod(pairs, n_nodes)
    keep = src != dst
    probs = np.array([0.6, 0.2, 0.1, 0.05])
    g = {"node_mask": np.ones(n_nodes, dtype=bool), "influence": rng.random(n_nodes), "features": feats,
         "activations": rng.random(n_feat) * 5, "logit_probs": probs,
         "edge_index": np.stack([dst[keep], src[keep]]), "edge_weight": rng.normal(size=int(keep.sum())),
         "edge_mask": np.ones(int(keep.sum()), dtype=bool)}
    meta = {"n_layers": L, "n_pos": N_POS, "n_feat": n_feat, "str_tokens": TOKENS, "logit_strs": LOGITS,
            "prompt": "The capital of"}
    return g, meta


def line_segments(fig) -> list[tuple[tuple[float, float], tuple[float, float], str]]:
    """Every drawn edge of a figure as ((x0, y0), (x1, y1), colour): its line traces' NaN-separated pairs."""
    out = []
    for t in fig.data:
        if t.mode != "lines" or t.x is None or len(t.x) < 3:
            continue
        x, y = np.asarray(t.x, dtype=float), np.asarray(t.y, dtype=float)
        for i in range(0, len(x), 3):
            assert np.isnan(x[i + 2]), "segments are separated by a gap"
            out.append(((x[i], y[i]), (x[i + 1], y[i + 1]), t.line.color))
    return out


def trace(fig, name: str):
    (t,) = [t for t in fig.data if t.name == name]
    return t


def node_xy(fig) -> dict[int, tuple[float, float]]:
    """Node id -> (x, y) of every node marker (customdata carries the id)."""
    out = {}
    for t in fig.data:
        if t.customdata is not None and t.name in F.KIND_NAMES.values():
            for (node,), x, y in zip(t.customdata, t.x, t.y, strict=True):
                out[int(node)] = (float(x), float(y))
    return out


@pytest.mark.parametrize("n", [0, 25, 200, 10_000])
def test_only_the_strongest_edges_are_drawn(n):
    g, meta = synthetic()
    fig = F.graph_figure(g, meta, max_edges=n)
    total = int(np.asarray(g["edge_mask"]).sum())
    segs = line_segments(fig)
    assert len(segs) == min(n, total), (len(segs), n, total)
    assert F.edge_count(fig) == len(segs)
    # the drawn ones are the strongest: the weakest drawn |weight| is at least the strongest left out
    w = np.sort(np.abs(np.asarray(g["edge_weight"])))[::-1]
    if 0 < n < total:
        hover = trace(fig, "edge weights").hovertext
        drawn = sorted(abs(float(h.split("weight ")[1].split(" ")[0])) for h in hover)
        assert drawn[0] >= float(f"{w[n]:.3g}") * (1 - 1e-3), (drawn[0], w[n])


def test_a_graph_without_edges_draws_its_nodes():
    g, meta = synthetic(n_edges=0)
    nodes = F.nodes_table(g, meta)
    fig = F.graph_figure(g, meta, selected=int(nodes.node.iloc[0]))
    assert line_segments(fig) == [] and len(node_xy(fig)) == len(nodes)


def test_the_selected_nodes_edges_are_highlighted_and_the_rest_faded():
    g, meta = synthetic()
    nodes = F.nodes_table(g, meta)
    sel = int(nodes[nodes.kind == "feature"].node.iloc[0])
    n = 50
    fig = F.graph_figure(g, meta, max_edges=n, selected=sel)
    xy = node_xy(fig)
    edges = F.edges_table(g)
    mine = edges[(edges.source == sel) | (edges.target == sel)]
    segs = line_segments(fig)
    alpha = lambda colour: float(colour.rsplit(",", 1)[1].rstrip(")"))  # noqa: E731
    strong = [s for s in segs if alpha(s[2]) > 0.5]
    faded = [s for s in segs if alpha(s[2]) <= 0.1]
    assert len(strong) + len(faded) == len(segs)
    own = pd.concat([mine[mine.index < n], mine.head(F.OWN_EDGES)]).drop_duplicates()
    assert len(strong) == len(own) > 0, (len(strong), len(own))
    assert all(xy[sel] in (a, b) for a, b, _ in strong), "a highlighted edge does not touch the selected node"
    assert not any(xy[sel] in (a, b) for a, b, _ in faded), "an edge of the selected node is faded"
    top = edges.head(n)
    assert len(faded) == int(((top.source != sel) & (top.target != sel)).sum())
    assert len(trace(fig, "edge weights").x) == len(segs), "a drawn edge (faded or not) without a hover"
    ring = trace(fig, "selected node")
    assert (float(ring.x[0]), float(ring.y[0])) == xy[sel]
    # no selection: nothing faded, no ring
    plain = F.graph_figure(g, meta, max_edges=n)
    assert all(alpha(s[2]) > 0.1 for s in line_segments(plain))
    assert "selected node" not in [t.name for t in plain.data]


def test_edge_colours_are_explained_in_the_legend():
    g, meta = synthetic()
    fig = F.graph_figure(g, meta, max_edges=100)
    shown = {t.name: t for t in fig.data if t.showlegend is not False and t.name}
    exc = [n for n in shown if "excitatory" in n]
    inh = [n for n in shown if "inhibitory" in n]
    assert len(exc) == 1 and len(inh) == 1, list(shown)
    rgb = {name: shown[name].line.color[4:-1] for name in (*exc, *inh)}  # "rgb(r,g,b)"
    # each drawn edge carries its legend entry's colour by the sign of its weight
    xy = node_xy(fig)
    edges = F.edges_table(g).head(100)
    for a, b, colour in line_segments(fig):
        (row,) = [r for r in edges.itertuples() if (xy[r.source], xy[r.target]) == (a, b)][:1]
        want = rgb[exc[0]] if row.weight > 0 else rgb[inh[0]]
        assert colour.startswith(f"rgba({want},"), (row.weight, colour, rgb)
    assert set(F.KIND_NAMES.values()) <= set(shown), "node kinds missing from the legend"


def test_edges_hover_their_source_target_and_weight():
    g, meta = synthetic()
    fig = F.graph_figure(g, meta, max_edges=30)
    hover = trace(fig, "edge weights")
    assert len(hover.x) == 30 and hover.hovertemplate and "hovertext" in hover.hovertemplate
    labels = F.nodes_table(g, meta).set_index("node").label
    xy = node_xy(fig)
    for r, x, y, text in zip(F.edges_table(g).head(30).itertuples(), hover.x, hover.y, hover.hovertext, strict=True):
        assert text.startswith(f"{labels[r.source]} → {labels[r.target]}"), text
        assert f"weight {r.weight:+.3g}" in text and ("excitatory" if r.weight > 0 else "inhibitory") in text
        (x0, y0), (x1, y1) = xy[r.source], xy[r.target]
        assert (x, y) == pytest.approx(((x0 + x1) / 2, (y0 + y1) / 2)), "the hover sits at the edge's middle"


def test_logits_carry_their_tokens_in_the_last_positions_column():
    g, meta = synthetic()
    fig = F.graph_figure(g, meta)
    logit = trace(fig, F.KIND_NAMES["logit"])
    labels = {a.name: a for a in fig.layout.annotations if (a.name or "").startswith("logit ")}
    assert [labels[f"logit {node}"].text for (node,) in logit.customdata] == ["' Paris'", "' Rome'", "'↵'", "'Lyon'"]
    for (node,), x, y in zip(logit.customdata, logit.x, logit.y, strict=True):
        a = labels[f"logit {node}"]
        assert (a.x, a.y, a.yshift > 0, a.xanchor) == (x, y, True, "left"), "the label is not just above its logit"
    last = [s for s in fig.layout.shapes if s.name == f"position {N_POS - 1}"][0]
    assert all(last.x0 < x < last.x1 for x in logit.x), (list(logit.x), last.x0, last.x1)
    assert max(logit.x) < fig.layout.xaxis.range[1], "a logit past the last token's column"
    assert set(logit.y) == {L} and fig.layout.yaxis.ticktext[-1] == "logits"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_marker_stays_inside_its_tokens_column(seed):
    g, meta = synthetic(seed, n_feat=60)
    fig = F.graph_figure(g, meta)
    cols = {s.name: (s.x0, s.x1) for s in fig.layout.shapes}
    assert set(cols) == {f"position {p}" for p in range(N_POS)}
    bounds = sorted(cols.values())
    assert all(a[1] <= b[0] for a, b in zip(bounds, bounds[1:])), "columns overlap"
    pos = F.nodes_table(g, meta).set_index("node")["pos"]
    xy = node_xy(fig)
    assert len(xy) == int(np.asarray(g["node_mask"]).sum())
    for node, (x, _) in xy.items():
        lo, hi = cols[f"position {pos[node]}"]
        assert lo < x < hi, f"node {node} at x={x:.2f} outside position {pos[node]}'s column [{lo:.2f}, {hi:.2f}]"
    # the crowded cell's 12 features keep apart, and tick labels sit at the column centres
    cell = [xy[n][0] for n in range(12)]
    assert min(np.diff(sorted(cell))) > 0
    assert list(fig.layout.xaxis.tickvals) == pytest.approx([(a + b) / 2 for a, b in bounds])


def test_nodes_are_named_in_words():
    g, meta = synthetic()
    nodes = F.nodes_table(g, meta)
    f = nodes[nodes.kind == "feature"].iloc[0]
    assert f.label == f"feature {f.feature} in layer {f.layer}, at position {f.pos} ({F.quoted(TOKENS[f.pos])})"
    assert "' capital'" in nodes[(nodes.kind == "embedding") & (nodes.pos == 2)].label.iloc[0]
    assert not nodes.label.str.contains("@").any()
    assert not nodes.label.str.contains("[▁Ġ]").any(), "a SentencePiece or byte-level marker in a label"
    fig = F.graph_figure(g, meta)
    assert all("feature " in h and " in layer " in h for h in trace(fig, "feature").hovertext)
    assert fig.layout.yaxis.ticktext[0] == "embeddings" and "layer 0" in fig.layout.yaxis.ticktext
    assert fig.layout.xaxis.ticktext[1].startswith("' The'"), fig.layout.xaxis.ticktext


def test_context_tokens_read_as_text_and_wrap():
    words = ["▁The", "Ġcapital", " of", "▁France", "Ċ", "\t", "▁is", "<b>"] + [f"▁word{i}" for i in range(40)]
    part = pd.DataFrame([{"layer": 1, "feature": 7, "rank": 0, "activation": 3.5, "tokens": words,
                          "values": [0.5] * len(words), "at": 3}])
    out = F.contexts_html(part)
    assert "▁" not in out and "Ġ" not in out and "Ċ" not in out
    text = "".join(s.split(">", 1)[1] for s in out.split("<span")[1:]).replace("</span>", "").split("</div>")[0]
    assert text.startswith(" The capital of France↵→ is&lt;b&gt; word0 word1"), text[:80]
    assert " word39" in text and "…" not in out, "the context was cut"
    assert "white-space: pre-wrap" in out and "overflow-wrap: anywhere" in out
    kept = out.split('class="tok kept"')[1].split(">", 1)[1].split("<", 1)[0]
    assert kept == " France"


def test_weak_transcoders_are_named_against_their_thresholds():
    quick = {"fve_mean": 0.340, "dead_fraction_mean": 0.427, "recovered_mean": 0.479, "recovered_min": -3.157,
             "replacement_score": 0.273}  # the quick size's golden record (tests/golden/quick_smollm2-135m.json)
    failed = F.weak_transcoders(quick)
    assert len(failed) == 5, failed
    assert "0.34 (< 0.60)" in failed[0] and "43% (> 30%)" in failed[1] and "-3.16" in failed[3]
    assert "0.27 (< 0.30)" in failed[4]
    default = {"fve_mean": 0.70, "dead_fraction_mean": 0.16, "recovered_mean": 0.85, "recovered_min": 0.67}
    assert F.weak_transcoders(default) == [], "the default size (README, 2026-12-05) passes"
    assert F.weak_transcoders({"fve_mean": float("nan")}) == []


# ============================================================================= the page (AppTest)


@pytest.fixture
def circuits(runs):
    if "circuits" not in selected_probes():
        pytest.skip("$INTERP_TEST_PROBES leaves out circuits")
    assert "circuits" not in runs.errors, runs.errors.get("circuits")
    return runs.done["circuits"]


def _decoded(v):
    """A Plotly JSON array, typed (base64 'bdata') or plain, as a list."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return list(v)


def chart(at) -> dict:
    (c,) = [c for c in at.get("plotly_chart") if "circuits.graph" in c.proto.id]
    return c


def click(at, node: int):
    """What a click on node `node`'s marker sends: the chart's selection event, then the rerun."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    ws = at._tree.get_widget_states()
    event = {"selection": {"points": [{"customdata": [node], "curve_number": 0, "point_number": 0,
                                       "point_index": 0, "x": 0, "y": 0}],
                           "point_indices": [0], "box": [], "lasso": []}}
    state = WidgetState(id=chart(at).proto.id, string_value=json.dumps(event))
    kept = [w for w in ws.widgets if w.id != state.id]
    del ws.widgets[:]
    ws.widgets.extend([*kept, state])
    return at._run(ws)


def test_clicking_a_node_selects_it_everywhere(runs, circuits, app_test):
    from interp.store import load_run
    from interp_probes.circuits import page

    run = load_run(runs.root / circuits)
    g, meta = run.tensor_file("graph"), run.json("graph_meta")
    nodes = F.nodes_table(g, meta).set_index("node")
    ctx = run.table("feature_contexts")
    at = app_test(runs.root, run=circuits)
    assert not at.exception, at.exception
    key = page.node_key(run)
    first = at.selectbox(key=key).value
    assert first == page.options(nodes.reset_index())[0]
    # a feature that fires on held-out text, other than the default
    has_ctx = {(int(r.layer), int(r.feature)) for r in ctx.itertuples()}
    feats = nodes[(nodes.kind == "feature") & (nodes.index != first)]
    target = next(int(i) for i, r in feats.iterrows() if (int(r.layer), int(r.feature)) in has_ctx)
    row = nodes.loc[target]
    click(at, target)
    assert not at.exception, at.exception
    assert at.selectbox(key=key).value == target, "the click did not select the node"
    assert f"#### Feature {row.feature} in layer {row.layer}" in [m.value for m in at.markdown]
    want = ctx[(ctx.layer == row.layer) & (ctx.feature == row.feature)].sort_values("rank")
    bodies = [h.proto.body for h in at.get("html")]
    assert F.contexts_html(want) in bodies, "the feature box does not show the clicked feature's contexts"
    assert not any("▁" in b or "Ġ" in b for b in bodies)
    spec = json.loads(chart(at).proto.spec)
    (ring,) = [t for t in spec["data"] if t.get("name") == "selected node"]
    (feat,) = [t for t in spec["data"] if t.get("name") == "feature"]
    i = [c[0] for c in feat["customdata"]].index(target)
    assert (_decoded(ring["x"])[0], _decoded(ring["y"])[0]) == (_decoded(feat["x"])[i], _decoded(feat["y"])[i])
    # a click elsewhere than a node changes nothing; the selectbox still selects too
    click(at, -5)
    assert at.selectbox(key=key).value == target
    at.selectbox(key=key).select(first).run()
    assert not at.exception, at.exception
    first_row = nodes.loc[first]
    assert any(m.value.startswith(f"#### Feature {first_row.feature} in layer {first_row.layer}")
               for m in at.markdown), [m.value for m in at.markdown]


def test_edge_slider_and_weak_transcoder_warning(runs, circuits, app_test):
    from interp.store import load_run
    from interp_probes.circuits import page

    run = load_run(runs.root / circuits)
    edges = F.edges_table(run.tensor_file("graph"))
    at = app_test(runs.root, run=circuits)
    slider = [s for s in at.slider if s.label.startswith("Edges drawn")][0]
    assert slider.value == min(F.DEFAULT_EDGES, len(edges)) and slider.max == len(edges)
    slider.set_value(10).run()
    assert not at.exception, at.exception
    spec = json.loads(chart(at).proto.spec)
    drawn = sum(t["meta"]["edges"] for t in spec["data"] if isinstance(t.get("meta"), dict))
    sel = at.selectbox(key=page.node_key(run)).value
    mine = edges[(edges.source == sel) | (edges.target == sel)].head(F.OWN_EDGES)
    assert drawn == len(pd.concat([edges.head(10), mine]).drop_duplicates()), "the 10 strongest and the selected's"
    warn = " ".join(w.value for w in at.warning)
    assert "transcoders are weak" in warn and "interp run circuits" in warn and "transcoders=" in warn, warn


def test_quality_figure_draws_the_warnings_thresholds():
    table = pd.DataFrame({"layer": range(4), "fve": [0.3, 0.5, 0.7, 0.9], "recovered": [-3.2, 0.4, 0.8, 1.0]})
    fig = F.quality_figure(table)
    lines = {t.name: set(t.y) for t in fig.data if t.type == "scatter"}
    assert lines == {"weak below 0.6 (mean)": {0.6}, "weak below 0.7 (mean)": {0.7}}, lines
    assert {b for key, _, b, *_ in F.WEAK if key in ("fve_mean", "recovered_mean")} == {0.6, 0.7}
