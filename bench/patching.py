"""Patching benchmark: the probe's batched resid_pre (layer x position) sweep against TransformerLens's
`patching.get_act_patch_resid_pre` on the same bridge, pair and metric, in one run.

Both sides patch the same cells (every layer x every position of the built-in indirect-object pair, the full
sweep: TransformerLens runs one forward per cell, about 0.2 s each here) and must agree within 1e-4 on the
normalised metric. The probe's side skips cells whose clean and corrupted activations are equal (positions
before the first differing token: their effect is exactly 0) and grows the batch at the patched layer; the
ratio without the skip is reported beside it.
"""

from __future__ import annotations

import time

import pandas as pd
import torch

from .common import Row, row


def patching_sweep(model, smoke: bool = False) -> list[Row]:
    from transformer_lens import patching as tl_patching

    from probes.patching import PatchingConfig
    from probes.patching.pairs import load_pairs
    from probes.patching.probe import activation_patching, baselines_and_attribution, encode, token_counter

    n_layers = model.info.n_layers
    layers = list(range(n_layers))
    cfg = PatchingConfig(model=model.info.name, n_pairs=1, sites=("resid_pre",), layers=tuple(layers))
    pairs = load_pairs("ioi", None, 1, 0, token_counter(model))
    enc = encode(model, pairs)

    t = time.perf_counter()
    base = baselines_and_attribution(model, enc, cfg, layers)
    t_base = time.perf_counter() - t
    ours, n_forward, n_run = activation_patching(model, enc, base, cfg, layers)
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    all_cells = _all_cells(model, enc, base, cfg, layers)
    t_noskip = t_base + time.perf_counter() - t  # the same baselines, every cell run

    clean_m, corrupt_m = float(base.clean_metric[0]), float(base.corrupt_metric[0])
    ans, wrong = int(enc.answer[0]), int(enc.wrong[0])

    def metric(logits):
        return ((logits[0, -1, ans] - logits[0, -1, wrong]) - corrupt_m) / (clean_m - corrupt_m)

    bridge = model.bridge
    clean_ids = enc.clean[0][None].to(model.device)
    corrupt_ids = enc.corrupt[0][None].to(model.device)
    P = clean_ids.shape[1]
    index = pd.DataFrame([(layer, pos) for layer in layers for pos in range(P)], columns=["layer", "pos"])
    t = time.perf_counter()
    with torch.no_grad():
        _, cache = bridge.run_with_cache(clean_ids)
        theirs = tl_patching.get_act_patch_resid_pre(bridge, corrupt_ids, cache, metric, index_axis_names=None,
                                                     index_df=index)
    t_tl = time.perf_counter() - t
    theirs = theirs.view(len(layers), P).cpu()
    diff = float((ours["resid_pre"][0] - theirs).abs().max())
    diff_all = float((all_cells - theirs).abs().max())
    cells = f"{len(layers)} layers x {P} positions"
    return [
        row("patching_speedup", f"TL get_act_patch_resid_pre / probe sweep, {cells} (time ratio)", t_tl / t_ours,
            "report" if smoke else ">= 10", f"TL {t_tl:.1f}s ({len(index)} forwards), probe {t_ours:.2f}s "
            f"({n_forward} forwards, {n_run} cells run, baselines and attribution included)"),
        row("patching_speedup_no_skip", "the same with every cell run (no skip of equal activations)",
            t_tl / t_noskip, "report", f"probe {t_noskip:.2f}s"),
        row("patching_vs_tl_max_diff", "max |probe - TL| of the normalised resid_pre grid", diff, "<= 1e-4",
            f"every cell run: {diff_all:.2e}"),
    ]


def _all_cells(model, enc, base, cfg, layers) -> torch.Tensor:
    """The resid_pre grid of pair 0 with every cell run (none skipped), normalised."""
    from probes.patching.sweep import Cell, run_cells

    P = enc.lengths[0]
    cells = [Cell("resid_pre", layer, pos=p) for layer in layers for p in range(P)]
    vals, _ = run_cells(model, enc.corrupt[0][None].to(model.device), base.clean_of(0), cells, int(enc.answer[0]),
                        int(enc.wrong[0]), cfg.metric, cfg.batch_size)
    c, k = float(base.corrupt_metric[0]), float(base.clean_metric[0])
    return ((vals - c) / (k - c)).view(len(layers), P)
