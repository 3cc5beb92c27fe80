"""GPU figures (only with CUDA): bf16 capture and SAE training, as tokens/s and a fraction of the matmul peak.

The peak is measured in the same run: a large bf16 matmul, timed after a warm-up. Capture is the same
measurement as bench/capture.py's overhead (every layer's MLP post, abs-mean reduced) on the model loaded
in bf16 on the GPU, against the bare HF forward; its FLOPs are counted as 2 x (layer + unembedding
weights) per token plus the attention products. SAE training is interp.sae's JumpReLU loop under bf16
autocast (the toolkit keeps float32 master weights) on activations captured from that model, beside
SAELens's trainer (bench/sae.py's `train_saelens`) in the same conditions; its FLOPs are the dense-equivalent
12 x d_in x d_sae per token.
Without CUDA one row says so.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import torch

from interp import AbsMean, capture
from interp.sae import SAETrainConfig
from interp.sites import Site

from .common import Row, interleaved
from .sae import activations, train


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device: str, n: int = 8192, iters: int = 20, dtype=torch.bfloat16) -> float:
    """FLOP/s of an n x n x n matmul in `dtype` (median of `iters` timed products after a warm-up)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync(device)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        a @ b
        _sync(device)
        times.append(time.perf_counter() - t)
    return 2 * n**3 / statistics.median(times)


def forward_flops(model, tokens: int, seq: int) -> float:
    """Approximate FLOPs of a forward over `tokens` tokens in sequences of `seq`: the layers' and the
    unembedding's weight products, plus QK^T and AV over a causal half of the keys."""
    layers = sum(p.numel() for i in range(model.info.n_layers) for p in model.layer_module(i).parameters())
    unembed = model.unembed_weight.numel()
    attn = 2 * model.info.n_layers * seq * model.info.n_heads * model.info.d_head  # 2 products x 2 FLOPs x seq/2
    return tokens * (2 * (layers + unembed) + attn)


def gpu(model, smoke: bool = False, device: str | None = None) -> list[Row]:
    """bf16 capture and SAE-training throughput on the GPU, with their fraction of the measured matmul peak.

    `device` overrides the CUDA check (tests run the same code on "cpu" at smoke size)."""
    if device is None:
        if not torch.cuda.is_available():
            return [Row("gpu", "bf16 capture and SAE training on the GPU", float("nan"), "report", None,
                        "no GPU: torch.cuda.is_available() is false; skipped")]
        device = "cuda"
    from interp.models import load_model

    name = torch.cuda.get_device_name(0) if torch.device(device).type == "cuda" else device
    peak = matmul_peak(device, n=256 if smoke else 8192, iters=2 if smoke else 20)
    m = load_model(model.info.name, device=device, dtype="bfloat16")
    rows = [Row("gpu_matmul_peak", "bf16 matmul peak (TFLOP/s, measured)", peak / 1e12, "report", None,
                f"{name}; {256 if smoke else 8192}^3 bf16 products")]

    batch, seq, n = (2, 32, 2) if smoke else (16, 512, 8)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, m.info.d_vocab - 100, (n, batch, seq), generator=g).to(device)
    batches = [{"input_ids": b, "attention_mask": torch.ones_like(b)} for b in ids]
    sites = [Site("mlp_post", layer) for layer in range(m.info.n_layers)]

    def bare():
        with torch.no_grad():
            for b in batches:
                m.hf(**b)
        _sync(device)

    def ours():
        capture(m, batches, {s: [AbsMean()] for s in sites})
        _sync(device)

    t = interleaved({"bare": bare, "capture": ours}, repeats=2 if smoke else 5)
    tokens = n * batch * seq
    tps = tokens / t["capture"]
    frac = forward_flops(m, tokens, seq) / t["capture"] / peak
    rows += [
        Row("gpu_capture", "bf16 capture(all mlp_post, abs-mean) tokens/s", tps, "report", None,
            f"{batch}x{seq} tokens a batch; capture / bare forward {t['capture'] / t['bare']:.3f}; bare "
            f"{tokens / t['bare']:,.0f} tok/s"),
        Row("gpu_capture_peak_frac", "bf16 capture FLOP/s / matmul peak", frac, "report", None,
            f"{forward_flops(m, tokens, seq) / tokens / 1e9:.2f} GFLOP a token (approx.)"),
    ]

    acts = activations(m, 512 if smoke else 65_536).to(device)  # float32, on the GPU
    d_in = acts.shape[1]
    cfg = SAETrainConfig(architecture="jumprelu", d_sae=4 * d_in if smoke else 16 * d_in,
                         steps=3 if smoke else 200, batch=128 if smoke else 4096, calibrate_l0=False)
    autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    sae_tps, errors = {}, {}
    for trainer in ("toolkit", "saelens"):
        c = replace(cfg, trainer=trainer)
        try:
            with autocast:
                train(acts, replace(c, steps=2))  # warm-up: kernels, allocator
                _sync(device)
                sae_tps[trainer] = train(acts, c).cfg.metadata.interp_training["tokens_per_s"]
        except (RuntimeError, TypeError, ValueError) as e:  # reported in the row: SAELens under autocast
            if trainer == "toolkit":
                raise
            errors[trainer] = f"{type(e).__name__}: {str(e)[:120]}"
    flops = 12 * d_in * cfg.d_sae
    saelens = (f"SAELens {sae_tps['saelens']:,.0f} tok/s (toolkit / SAELens "
               f"{sae_tps['toolkit'] / sae_tps['saelens']:.2f})") if "saelens" in sae_tps else \
        f"SAELens failed under autocast: {errors['saelens']}"
    rows += [
        Row("gpu_sae", "bf16-autocast JumpReLU SAE training tokens/s (toolkit)", sae_tps["toolkit"], "report", None,
            f"d_in {d_in}, d_sae {cfg.d_sae}, batch {cfg.batch}, {cfg.steps} steps; {saelens}"),
        Row("gpu_sae_peak_frac", "SAE training FLOP/s (dense-equivalent) / matmul peak",
            sae_tps["toolkit"] * flops / peak, "report", None, f"{flops / 1e6:.1f} MFLOP a token"),
    ]
    return rows
