"""The weights proof: `interp.weights_digest` against the host sha256 digest it replaced.

`RunContext.weights_unchanged` digests every parameter before and after the stages that edit weights and
restore them. The old digest copied every parameter to the host and hashed its bytes with sha256 (0.46 s for
smollm2-135m in float32, 30 GB through the host at 8B); the new one hashes host parameters with xxh3-128 over a
zero-copy view and checksums accelerator parameters where they live. Both are timed in turns on the same model.
"""

from __future__ import annotations

import hashlib
import statistics

import torch

from interp import weights_digest

from .common import Row, interleaved_runs, row

REPEATS, SMOKE_REPEATS = 7, 2


def sha256_digest(model) -> str:
    """The digest as it was: every parameter's bytes copied to the host and hashed with sha256 (name order)."""
    h = hashlib.sha256()
    for name, p in sorted(model.hf.named_parameters(), key=lambda kv: kv[0]):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def digest(model, smoke: bool = False) -> list[Row]:
    """Seconds of one `weights_digest` (<= 0.1 on smollm2-135m on the CPU) and the speed-up over sha256."""
    times = interleaved_runs({"new": lambda: weights_digest(model), "old": lambda: sha256_digest(model)},
                             repeats=SMOKE_REPEATS if smoke else REPEATS)
    new, old = statistics.median(times["new"]), statistics.median(times["old"])
    n = sum(p.numel() for p in model.hf.parameters())
    mb = sum(p.numel() * p.element_size() for p in model.hf.parameters()) / 2**20
    where = f"{model.info.name}, {n / 1e6:.0f}M parameters ({mb:.0f} MiB, {model.dtype}) on {model.device}"
    return [
        row("digest_seconds", "weights_digest seconds (median)", new, "<= 0.1",
            f"{where}; median of {len(times['new'])}, min {min(times['new']):.3f}s"),
        row("digest_speedup", "host sha256 digest / weights_digest (time ratio)", old / new, "report",
            f"sha256 {old:.3f}s, weights_digest {new:.3f}s"),
    ]
