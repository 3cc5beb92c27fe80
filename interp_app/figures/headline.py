"""Each probe's headline figure, built from a loaded run with the probe's own pure figure functions.

`headline_figure(run)` is what a run shows in a notebook (`interp.Run._repr_html_`) next to its metrics. A
probe can name its own: a `headline(run) -> go.Figure` function in `interp_app/figures/<probe>.py` (or, for a plugin,
in its page module) wins over the table below. Runs without the artifacts a figure needs get None.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import plotly.graph_objects as go

from interp.errors import InterpError


def _logit_lens(run) -> go.Figure:
    from . import logit_lens as F

    lens = run.tensor_file("lens")
    tokens = run.table("tokens").sort_values("position")["token"].tolist()
    rank = lens["final_rank"]
    return F.lens_heatmap(rank, lens["final_prob"], tokens, F.top1_grid(run.table("topk"), *rank.shape))


def _keystone(run) -> go.Figure:
    from . import keystone as F

    return F.ablation_ppl(run.table("ablation"))


def _atoms(run) -> go.Figure:
    from . import atoms as F

    return F.units_bars(run.table("units"))


def _sae_falsification(run) -> go.Figure:
    from . import sae_falsification as F

    return F.funnel(run.metrics, run.table("features"), run.metrics.get("sae_d_sae"))


def _self_interp(run) -> go.Figure:
    from . import self_interp as F

    return F.leaderboard(run.table("recall"))


def _conversational_inertia(run) -> go.Figure:
    from . import conversational_inertia as F

    scores = run.tensor_file("diag_scores")
    offsets, bands = scores["offsets"].tolist(), scores["bands"].tolist()
    d = offsets.index(0) if 0 in offsets else 0
    z = scores["z"][:, :, d, 0]
    return F.head_heatmap(z, f"Diagonal z per head (δ = {offsets[d]:+d}, w = {bands[0]})",
                          run.config.get("z_thresh"))


def _graph_sawtooth(run) -> go.Figure:
    from . import graph_sawtooth as F

    m = run.metrics
    sel = run.json("selection")
    l_star = int(m.get("best_layer", sel.get("l_star", 0)))
    return F.excess_plot(run.table("layer_scores"), max(0.05, m.get("auc_excess_q95") or 0.0), l_star)


def _lockin(run) -> go.Figure:
    from . import lockin as F

    names = {f.removesuffix(".parquet") for f in run.manifest.get("files", {})}
    curve = run.table("curve_fit") if "curve_fit" in names else None
    sigma = float(curve["sigma_res"].iloc[0]) if curve is not None and len(curve) else None
    return F.collapse(run.table("runs"), curve, sigma)


def _sae_features(run) -> go.Figure:
    from . import sae_features as F

    return F.density_histogram(run.table("features"))


HEADLINES: dict[str, Callable[[Any], go.Figure]] = {
    "logit_lens": _logit_lens,
    "keystone": _keystone,
    "atoms": _atoms,
    "sae_falsification": _sae_falsification,
    "self_interp": _self_interp,
    "conversational_inertia": _conversational_inertia,
    "graph_sawtooth": _graph_sawtooth,
    "lockin": _lockin,
    "sae_features": _sae_features,
}


def _own(probe: str) -> Callable[[Any], go.Figure] | None:
    """A `headline(run)` defined by the probe's figures module or its page module."""
    from interp.registry import probes_available

    spec = probes_available().get(probe)
    modules = [f"interp_app.figures.{probe}"]
    if spec is not None and spec.page and spec.source != "interp":  # a plugin's page (built-in pages import
        modules.append(spec.page)                                    # Streamlit; their figures live here)
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(mod, "headline", None)):
            return mod.headline
    return None


def headline_figure(run) -> go.Figure | None:
    """The probe's headline figure of a done run, or None (no figure known, or its artifacts are missing)."""
    fn = _own(run.probe) or HEADLINES.get(run.probe)
    if fn is None:
        return None
    try:
        return fn(run)
    except (InterpError, KeyError, IndexError, ValueError):  # a run without that artifact (an older or micro run)
        return None


def sweep_figure(record: Mapping[str, Any]) -> go.Figure | None:
    """The sweep's first numeric metric against its first swept key (by its second, if any), or None."""
    from . import sweeps as F

    points = list(record.get("points") or [])
    metrics = F.metric_names(points)
    keys = F.varying_keys(list(record.get("keys") or []), points)
    if not metrics or not keys:
        return None
    return F.metric_lines(points, metrics[0], keys[0], keys[1] if len(keys) > 1 else None)
