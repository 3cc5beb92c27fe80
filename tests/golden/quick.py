"""The quick configs the golden metrics are recorded with, and which metrics are compared."""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent

#: The float kernels the records are made with, set before torch loads (tests/conftest.py, record.py). Unpinned,
#: torch's own kernels take the widest vector ISA the CPU has (AVX-512 here) and MKL's GEMM another branch per
#: vendor, so the same code gave other last digits on another x86 machine (keystone micro ppl_base 51.98356617867
#: recorded, 51.98364354032 on an AMD EPYC with AVX-512, 51.98322320014 with ATen at AVX2): CI's machines vary.
#: AVX2 is on every x86 machine CI runs on; MKL's conditional-numerical-reproducibility branch pins its GEMM.
PIN = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}


def _has_amx() -> bool:
    """Whether the CPU has AMX (bf16 tiles). There torch's CPU flash attention packs bf16 operands for AMX whatever
    ATEN_CPU_CAPABILITY says, and under "avx2" then refuses: "pack_vnni2 is only supported when avx512 is supported"
    (torch 2.13, any bf16 scaled_dot_product_attention of 64 or more positions). On such a machine ATen keeps its
    own ISA; its numerics() differ from the records', so the exact tests skip there and say why."""
    try:
        return "amx_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def pin_numerics() -> None:
    """Pin the float kernels (PIN) for this process and its children; call it before torch is imported.
    INTERP_PIN_NUMERICS=0 leaves the CPU's own (`make accept` does: its wall-clock budgets are a user's)."""
    if os.environ.get("INTERP_PIN_NUMERICS") == "0":
        return
    for k, v in PIN.items():
        if k == "ATEN_CPU_CAPABILITY" and _has_amx():
            continue
        os.environ.setdefault(k, v)


@functools.cache
def numerics() -> dict[str, Any]:
    """What decides the last digits here: torch's version, its kernel ISA, its thread count, and a hash of the
    outputs of the kernels a forward and a training step use (matmul, attention, softmax, norm, backward). Two
    machines with equal numerics() give bit-identical probe metrics; with unequal ones, exactness is not owed."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 576, generator=g, requires_grad=True)  # [tokens, d_model]
    w = torch.randn(1536, 576, generator=g) / 24  # [d_mlp, d_model]
    q, k, v = torch.randn(3, 1, 9, 128, 64, generator=g).unbind(0)  # [batch, heads, pos, d_head]
    h = torch.nn.functional.silu(x @ w.T)  # [tokens, d_mlp]
    outs = [h, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), torch.softmax(h, -1),
            torch.log_softmax(h, -1), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5), h.sum(0)]
    outs.append(torch.autograd.grad(h.square().mean(), x)[0])
    digest = hashlib.sha256(b"".join(t.detach().contiguous().numpy().tobytes() for t in outs)).hexdigest()[:16]
    return {"torch": torch.__version__, "isa": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "kernels": digest}


def numerics_differ(record: dict[str, Any], probe: str | None = None) -> str | None:
    """Why this process cannot reproduce `record` (a golden file) bit for bit, or None if it can. The file's
    "_numerics" holds for every probe but one re-recorded on another machine (`record.py --probes=...`), which
    carries its own."""
    here = numerics()
    there = (record.get(probe) or {}).get("_numerics") or record.get("_numerics", {})
    if here == there:
        return None
    return (f"this machine's float kernels differ from the record's ({here} here, {there} recorded): re-record with "
            f"tests/golden/record.py on the old code to compare exactly")

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
        if _VOLATILE.search(k) or k.startswith("_"):
            continue
        if isinstance(v, float) and math.isnan(v):
            v = "nan"
        out[k] = v
    return out
