"""SLASH hook cost: the graph_sawtooth prefill with SLASH on a few layers vs the same forward without.

Both sides are the probe's own forward (`interp_probes.graph_sawtooth.attention.forward_last`: the bridge, whose
attention is eager for every layer, so the pattern is there to hook) on one batch of the probe's own graph
prompts (`synthetic_samples`, `tokenise`, `pad_left`, the probe's batch size); the modified side adds the
probe's `Slash` hooks. The target is on the edit alone (`Slash(check=False)`), the hook's cost; the probe
also runs each hook with its float64 invariant check (`check=True`, the default), reported beside it. Also
reported: what the eager baseline itself costs against HF's sdpa attention on the same batch (sdpa has no
pattern to hook).
"""

from __future__ import annotations

import numpy as np
import torch

from interp.config import build_config
from interp.models import twin
from interp_probes.graph_sawtooth import GraphSawtoothConfig
from interp_probes.graph_sawtooth.attention import forward_last, pad_left, tokenise
from interp_probes.graph_sawtooth.graphs import synthetic_samples
from interp_probes.graph_sawtooth.slash import Slash

from .common import Row, interleaved, row

GAMMA = 0.6
"""The paper's default gamma (interp_probes.graph_sawtooth.probe.PAPER_GAMMA)."""


def slash_layers(n_layers: int) -> list[int]:
    """Three middle layers: more than the one layer the probe selects on smollm2-135m (layer 15), so the
    ratio errs on the expensive side."""
    mid = n_layers // 2
    return sorted({max(0, mid - 1), mid, min(n_layers - 1, mid + 1)})


def slash_hook(model, smoke: bool = False) -> list[Row]:
    """SLASH-modified / unmodified forward (<= 1.05; with the invariant check, reported) and the eager
    baseline / sdpa (reported)."""
    cfg = build_config(GraphSawtoothConfig, {"size": "micro"} if smoke else {})
    samples = [s for s in synthetic_samples(cfg, np.random.default_rng(cfg.seed)) if s.split == "select"]
    items = [tokenise(model, s, cfg.prompt_format) for s in samples[: (2 if smoke else cfg.batch_size)]]
    ids, mask, _ = pad_left(model, items)
    S = slash_layers(model.info.n_layers)
    edit, checked = Slash(S, GAMMA, cfg.sink_offsets, check=False), Slash(S, GAMMA, cfg.sink_offsets)
    sdpa = twin(model.hf)  # shares every weight with the model; only the attention kernel differs
    sdpa.set_attn_implementation("sdpa")

    def base():
        forward_last(model, ids, mask)

    def with_slash(slash: Slash):
        with model.hooks(slash.pairs()), slash.batch(mask):
            forward_last(model, ids, mask)

    def hf_sdpa():
        with torch.no_grad():
            sdpa(input_ids=ids, attention_mask=mask, logits_to_keep=1)

    t = interleaved({"base": base, "edit": lambda: with_slash(edit), "checked": lambda: with_slash(checked),
                     "sdpa": hf_sdpa}, repeats=1 if smoke else 3, device=model)
    if edit.applied == 0 or checked.applied == 0:
        raise RuntimeError("the SLASH hooks never ran")
    shape = f"{ids.shape[0]} graph prompts x {ids.shape[1]} tokens"
    what = f"SLASH on layers {S} (gamma {GAMMA})"
    return [
        row("slash_hook", f"{what} / unmodified eager forward", t["edit"] / t["base"], "<= 1.05",
            f"{shape}; eager {t['base']:.3f}s, with SLASH {t['edit']:.3f}s"),
        row("slash_hook_checked", f"{what}, invariants checked as the probe runs it / unmodified eager forward",
            t["checked"] / t["base"], "report", f"{shape}; {t['checked']:.3f}s"),
        row("slash_eager_baseline", "unmodified eager forward (bridge) / HF sdpa forward", t["base"] / t["sdpa"],
            "report", f"{shape}; the baseline above; sdpa {t['sdpa']:.3f}s"),
    ]
