"""Backend benchmark: capture speed of the TransformerLens and nnsight backends against a bare HF forward.

Both backends run over the same HF weights (the nnsight model wraps the TransformerLens model's plain HF
twin), on the same batches, timed in turns in one run.
"""

from __future__ import annotations

import torch

from interp import AbsMean, capture
from interp.sites import Site

from .capture import _batches
from .common import Row, interleaved


def backend_capture(model, smoke: bool = False) -> list[Row]:
    """Every layer's resid_post and mlp_post, abs-mean reduced, on each backend / bare HF forward.

    `smoke`: a toy size (a check that both backends run, not a figure). About 2 min on 2 cores otherwise.
    """
    from interp.nnsight_backend import NNsightModel

    nn = NNsightModel(model.hf, model.tokenizer, model.info, model.device, model.dtype)
    batches = _batches(model, 2, 32, 1) if smoke else _batches(model, 8, 128, 2)
    sites = [Site(kind, layer) for layer in range(model.info.n_layers) for kind in ("resid_post", "mlp_post")]

    def bare():
        with torch.no_grad():
            for b in batches:
                model.hf(**b)

    def on(m):
        return lambda: capture(m, batches, {s: [AbsMean()] for s in sites})

    t = interleaved({"bare": bare, "tl": on(model), "nnsight": on(nn)}, repeats=1 if smoke else 5, device=model)
    rows = []
    for name in ("tl", "nnsight"):
        ratio = t[name] / t["bare"]
        rows.append(Row(f"backend_capture_{name}", f"{name} capture(all resid_post + mlp_post) / bare HF forward",
                        ratio, "report", None, f"bare {t['bare']:.3f}s, {name} {t[name]:.3f}s"))
    rows.append(Row("backend_capture_nnsight_vs_tl", "nnsight capture / tl capture (time ratio)",
                    t["nnsight"] / t["tl"], "report", None))
    return rows
