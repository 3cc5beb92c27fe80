"""Patching benchmark: the probe's batched resid_pre (layer x position) sweep against TransformerLens's
`patching.get_act_patch_resid_pre` on the same bridge, pair and metric, in one run.

Both sides patch the same cells (every layer x every position of the built-in indirect-object pair, the full
sweep: TransformerLens runs one forward per cell, about 0.2 s each here) and must agree on the normalised
metric within `tolerance` (below). The probe's side skips cells whose clean and corrupted activations are equal
(positions before the first differing token: their effect is exactly 0) and grows the batch at the patched
layer; the ratio without the skip is reported beside it. Timers synchronise the model's device.

The tolerance. Both sides compute the same logits by different kernels: the probe runs cells batched (other
matmul shapes, so other reduction orders), TransformerLens one forward a cell. Each logit then carries a
rounding error of a few units in the last place of the dtype, relative to the logits' scale S (the largest
|logit| of the clean run at the last position), compounded over the layers. The metric divides the logit
difference by the clean-corrupt margin M = clean - corrupt, so the same rounding error reads larger the smaller
the margin: on a random model whose margin is a few thousandths of a logit, an H200 read 4.1e-4 in float32 and
0.73 in bfloat16 on the normalised grid, both rounding. So the bound is on the logit scale and divided by M:

    max |probe - TL| (normalised)  <=  ULPS[dtype] x eps(dtype) x S / |M|

with eps the dtype's machine epsilon (float32 1.2e-7, bfloat16 7.8e-3) and ULPS the units of rounding allowed:
256 in float32 and float64 (dot products of thousands of terms whose order changes with the batch shape, through
dozens of layers: sqrt(4096) x 4 = 256), 8 in bfloat16 and float16 (each layer's output is rounded to the 8-bit
mantissa once, so the error is a few ulps of S whatever the reduction order). On smollm2-135m in float32 on the
CPU (S about 20, M about 3) that is 2e-4, above the 4.8e-7 measured; a real disagreement (a wrong cell patched,
a hook at the wrong site) moves the grid by a sizeable fraction of 1, far above either bound.
"""

from __future__ import annotations

import pandas as pd
import torch

from .common import Row, Timer, row

#: units of rounding allowed per dtype (see the module docstring)
ULPS = {torch.float32: 256, torch.float64: 256, torch.bfloat16: 8, torch.float16: 8}


def tolerance(dtype: torch.dtype, scale: float, margin: float) -> float:
    """The largest |probe - TL| allowed on the normalised grid: ULPS[dtype] x eps(dtype) x scale / |margin|."""
    return ULPS.get(dtype, 256) * torch.finfo(dtype).eps * scale / max(abs(margin), 1e-12)


def patching_sweep(model, smoke: bool = False) -> list[Row]:
    from transformer_lens import patching as tl_patching

    from interp_probes.patching import PatchingConfig
    from interp_probes.patching.pairs import load_pairs
    from interp_probes.patching.probe import activation_patching, baselines_and_attribution, encode, token_counter

    n_layers = model.info.n_layers
    layers = list(range(n_layers))
    cfg = PatchingConfig(model=model.info.name, n_pairs=1, sites=("resid_pre",), layers=tuple(layers))
    pairs = load_pairs("ioi", None, 1, 0, token_counter(model))
    enc = encode(model, pairs)

    with Timer(model) as tb:
        base = baselines_and_attribution(model, enc, cfg, layers)
    with Timer(model) as tp:
        ours, n_forward, n_run = activation_patching(model, enc, base, cfg, layers)
    t_ours = tb.seconds + tp.seconds
    with Timer(model) as ta:
        all_cells = _all_cells(model, enc, base, cfg, layers)
    t_noskip = tb.seconds + ta.seconds  # the same baselines, every cell run

    clean_m, corrupt_m = float(base.clean_metric[0]), float(base.corrupt_metric[0])
    ans, wrong = int(enc.answer[0]), int(enc.wrong[0])

    def metric(logits):
        return ((logits[0, -1, ans] - logits[0, -1, wrong]) - corrupt_m) / (clean_m - corrupt_m)

    bridge = model.bridge
    clean_ids = enc.clean[0][None].to(model.device)
    corrupt_ids = enc.corrupt[0][None].to(model.device)
    P = clean_ids.shape[1]
    index = pd.DataFrame([(layer, pos) for layer in layers for pos in range(P)], columns=["layer", "pos"])
    with Timer(model) as tt, torch.no_grad():
        logits, cache = bridge.run_with_cache(clean_ids)
        theirs = tl_patching.get_act_patch_resid_pre(bridge, corrupt_ids, cache, metric, index_axis_names=None,
                                                     index_df=index)
    t_tl = tt.seconds
    theirs = theirs.view(len(layers), P).float().cpu()
    diff = float((ours["resid_pre"][0].float().cpu() - theirs).abs().max())
    diff_all = float((all_cells.float().cpu() - theirs).abs().max())
    scale = float(logits[0, -1].float().abs().max())
    dtype = model.dtype if isinstance(model.dtype, torch.dtype) else getattr(torch, str(model.dtype))
    tol = tolerance(dtype, scale, clean_m - corrupt_m)
    cells = f"{len(layers)} layers x {P} positions"
    return [
        row("patching_speedup", f"TL get_act_patch_resid_pre / probe sweep, {cells} (time ratio)", t_tl / t_ours,
            "report" if smoke else ">= 10", f"TL {t_tl:.1f}s ({len(index)} forwards), probe {t_ours:.2f}s "
            f"({n_forward} forwards, {n_run} cells run, baselines and attribution included)"),
        row("patching_speedup_no_skip", "the same with every cell run (no skip of equal activations)",
            t_tl / t_noskip, "report", f"probe {t_noskip:.2f}s"),
        row("patching_vs_tl_max_diff", f"max |probe - TL| of the normalised resid_pre grid ({str(dtype)[6:]})",
            diff, f"<= {tol:.3g}", f"every cell run: {diff_all:.2e}; tolerance {ULPS.get(dtype, 256)} x eps "
            f"{torch.finfo(dtype).eps:.2e} x max|logit| {scale:.3g} / margin {clean_m - corrupt_m:.3g} "
            f"(clean {clean_m:.3g}, corrupt {corrupt_m:.3g})"),
    ]


def _all_cells(model, enc, base, cfg, layers) -> torch.Tensor:
    """The resid_pre grid of pair 0 with every cell run (none skipped), normalised."""
    from interp_probes.patching.sweep import Cell, run_cells

    P = enc.lengths[0]
    cells = [Cell("resid_pre", layer, pos=p) for layer in layers for p in range(P)]
    vals, _ = run_cells(model, enc.corrupt[0][None].to(model.device), base.clean_of(0), cells, int(enc.answer[0]),
                        int(enc.wrong[0]), cfg.metric, cfg.batch_size)
    c, k = float(base.corrupt_metric[0]), float(base.clean_metric[0])
    return ((vals - c) / (k - c)).view(len(layers), P)
