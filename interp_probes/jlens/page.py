"""jlens page: the readout grid of a two-hop prompt under each lens, the three lenses' quality per layer, the
workspace statistics with the band, and the interventions against their controls."""

from __future__ import annotations

import streamlit as st

from interp.store import Run
from interp_app import common
from interp_probes.jlens import figures as F
from interp_probes.jlens.workspace import BAND_RULE


def render(run: Run) -> None:
    m = run.metrics
    band = F.band_of(m)
    common.metric_row(
        m,
        ("two-hop prompts kept", "{n_two_hop_kept} / {n_two_hop_total}",
         "both one-hop facts right (the model's own answers)"),
        ("workspace band", "none" if band is None else f"layers {band[0]}-{band[1]}", BAND_RULE),
        ("intervention layer", "{intervention_layer} ({intervention_layer_from})"),
        ("bridge pass@k, middle third", "J {bridge_pass_mid_jacobian:.2f} / logit {bridge_pass_mid_logit:.2f} / "
         "tuned {bridge_pass_mid_tuned:.2f}"),
        ("Jacobian-lens fit", f"{run.timings.get('seconds_lens_fit') or float('nan'):.1f} s",
         "the fit's own time; " + (f"loaded from the cache in {run.timings.get('seconds_fit') or 0:.1f} s"
                                   if run.timings.get("lens_cached") else "fitted in this run")),
    )
    common.tabs(run, {"Readout": readout, "Lens quality": quality, "Workspace": workspace,
                      "Interventions": interventions})


def readout(run: Run) -> None:
    grid = run.table("grid")
    tokens = run.table("grid_tokens").sort_values("position")["token"].tolist()
    lenses = list(dict.fromkeys(grid["lens"]))
    lens = st.radio("Lens", lenses, index=len(lenses) - 1, horizontal=True, format_func=F.LENS_NAMES.get,
                    key=f"jlens.lens:{run.path.name}")
    st.plotly_chart(F.readout_grid(grid, tokens, lens), key=f"jlens.grid:{run.path.name}")


def quality(run: Run) -> None:
    st.plotly_chart(F.quality_curves(run.table("quality"), int(run.config.get("top_k", 10))),
                    key=f"jlens.quality:{run.path.name}")
    m = run.metrics
    st.caption("Paper's claims in the middle third of the layers (reported, not gated): the Jacobian lens recalls "
               f"the bridge entity best: **{m.get('jacobian_bridge_best_mid')}**; it has the worst next-token KL: "
               f"**{m.get('jacobian_kl_worst_mid')}**.")


def workspace(run: Run) -> None:
    band = F.band_of(run.metrics)
    st.plotly_chart(F.workspace_stats(run.table("quality"), band), key=f"jlens.ws:{run.path.name}")
    st.plotly_chart(F.cka_heatmap(run.tensor_file("cka")["jacobian"], band), key=f"jlens.cka:{run.path.name}")
    st.caption(f"Band rule: {BAND_RULE}.")


def interventions(run: Run) -> None:
    effects = run.table("effects")
    if effects.empty:
        st.info("No two-hop prompt was kept, so no intervention ran.")
        return
    st.plotly_chart(F.effects_figure(effects), key=f"jlens.effects:{run.path.name}")
    st.dataframe(effects, hide_index=True)
