"""The quick configs the golden metrics are recorded with, and which metrics are compared."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent

#: Overrides beyond {"size": "quick"} that tests/probes use for a probe's quick run.
EXTRA: dict[str, dict[str, Any]] = {"graph_sawtooth": {"gamma_curve": True}}

#: Wall-clock metrics (and ratios of them) differ run to run; everything else must be identical.
_VOLATILE = re.compile(r"(^|_)(time|times|seconds|secs|wall|elapsed|overhead|speed|throughput|per_s|s)($|_)|_s$|_sec"
                       r"|from_cache")

#: Sites pinned to the layers the defaults named before they became depth-relative (issue "Any model"): on
#: gemma3-270m (18 layers) resid_post@0.2 is layer 4 and @0.3 layer 5, where the absolute defaults named 6 and 9;
#: pinned, the guard compares the same computation (on smollm2-135m the fractions resolve to 6 and 9 anyway).
PINNED: dict[str, dict[str, dict[str, Any]]] = {
    "gemma3-270m": {
        "atoms": {"hook": "blocks.6.hook_resid_post"},
        "sae_falsification": {"sae.hook": "blocks.9.hook_resid_post"},
        "sae_features": {"sae.hook": "blocks.6.hook_resid_post"},
    },
}


def overrides(probe: str, model: str, size: str = "quick") -> dict[str, Any]:
    """The config a golden run of `probe` uses: `size`, the model, and (quick) the probe tests' extras."""
    extra = EXTRA.get(probe, {}) if size == "quick" else {}
    return {"size": size, "model": model, **extra, **PINNED.get(model, {}).get(probe, {})}


def comparable(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics that a same-seed rerun reproduces exactly (NaN as the string "nan", for JSON)."""
    out = {}
    for k, v in metrics.items():
        if _VOLATILE.search(k):
            continue
        if isinstance(v, float) and math.isnan(v):
            v = "nan"
        out[k] = v
    return out
