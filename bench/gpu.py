"""GPU figures (only with CUDA): bf16 capture and SAE training, as tokens/s, ratios to same-run baselines and
a fraction of the matmul peak.

The peak is measured in the same run: a bf16 8192^3 matmul, timed after a warm-up (`gpu_matmul_peak`). Every
timer synchronises the device (bench.common.Timer); every input is made on the model's device.

Capture (`gpu_capture_vs_sdpa`, target <= 1.05) is bench/capture.py's overhead measurement on the model in bf16
on the GPU: every layer's MLP post, abs-mean reduced, against a plain Hugging Face forward on the same batches
with SDPA attention (`interp.models.twin` of the model's HF module, sharing every weight, set to "sdpa": what a
user of transformers runs). Also reported: the forward as the toolkit loaded it against SDPA, TransformerLens's
`run_with_cache(names_filter=<every mlp.hook_post>)` against SDPA, and capture tokens/s as a fraction of the peak
(FLOPs counted as 2 x (layer + unembedding weights) per token plus the attention products; capture stops after
the last site, so this overcounts the unembedding: an upper bound).

SAE training (`gpu_sae`, `gpu_sae_saelens`) is interp.sae's JumpReLU loop under bf16 autocast (the toolkit keeps
float32 master weights) at d_in 4096 (the model's d_model; a different d_model is said in the row), d_sae 65536,
batch 4096, beside SAELens's trainer (bench/sae.py's `train_saelens`) in the same conditions, each as tokens/s
and as a fraction of the peak (dense-equivalent FLOPs 12 x d_in x d_sae per token: encoder, decoder, and their
backward at twice the forward).

Without CUDA one row says so; `device="cpu"` (and `smoke`) runs the same code at toy sizes.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import torch

from interp import AbsMean, capture
from interp.models import synchronize
from interp.sae import SAETrainConfig
from interp.sites import Site

from .common import Row, interleaved, model_batches, row, timed
from .sae import activations, train

SAE_D_SAE, SAE_BATCH, SAE_STEPS = 65_536, 4096, 100


def matmul_peak(device: str, n: int = 8192, iters: int = 20, dtype=torch.bfloat16) -> float:
    """FLOP/s of an n x n x n matmul in `dtype` (median of `iters` timed products after a warm-up)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    synchronize(device)
    times = [timed(lambda: a @ b, device) for _ in range(iters)]
    return 2 * n**3 / statistics.median(times)


def forward_flops(model, tokens: int, seq: int) -> float:
    """Approximate FLOPs of a forward over `tokens` tokens in sequences of `seq`: the layers' and the
    unembedding's weight products, plus QK^T and AV over a causal half of the keys."""
    layers = sum(p.numel() for i in range(model.info.n_layers) for p in model.layer_module(i).parameters())
    unembed = model.unembed_weight.numel()
    attn = 2 * model.info.n_layers * seq * model.info.n_heads * model.info.d_head  # 2 products x 2 FLOPs x seq/2
    return tokens * (2 * (layers + unembed) + attn)


def _on_device(model, device: str):
    """The model in bf16 on `device`: itself when it already is, else loaded again by name."""
    if torch.device(model.device).type == torch.device(device).type and model.dtype == torch.bfloat16:
        return model
    from interp.models import load_model

    return load_model(model.info.name, device=device, dtype="bfloat16")


def capture_rows(m, peak: float, smoke: bool) -> list[Row]:
    """Capture of every mlp_post (AbsMean) vs an SDPA forward; the loaded forward and TL's cache beside it."""
    from interp.models import twin

    batch, seq, n = (2, 32, 2) if smoke else (16, 512, 4)
    batches = model_batches(m, batch, seq, n)
    sites = [Site("mlp_post", layer) for layer in range(m.info.n_layers)]
    sdpa = twin(m.hf)  # shares every weight with the model; only the attention kernel differs
    sdpa.set_attn_implementation("sdpa")
    names = {f"blocks.{i}.mlp.hook_post" for i in range(m.info.n_layers)}

    def forward(hf):
        def run():
            with torch.no_grad():
                for b in batches:
                    hf(**b)
        return run

    def ours():
        capture(m, batches, {s: [AbsMean()] for s in sites})

    def tl():
        with torch.no_grad():
            for b in batches:
                m.bridge.run_with_cache(b["input_ids"], attention_mask=b["attention_mask"],
                                        names_filter=lambda name: name in names)

    fns = {"sdpa": forward(sdpa), "loaded": forward(m.hf), "capture": ours}
    if getattr(m, "bridge", None) is not None:
        fns["tl"] = tl
    t = interleaved(fns, repeats=2 if smoke else 5, device=m)
    tokens = n * batch * seq
    flops = forward_flops(m, tokens, seq)
    tps = {k: tokens / v for k, v in t.items()}
    rows = [
        row("gpu_capture_vs_sdpa", "bf16 capture(all mlp_post, abs-mean) / HF SDPA forward (time ratio)",
            t["capture"] / t["sdpa"], "report" if smoke else "<= 1.05",
            f"{n} batches of {batch}x{seq}; capture {tps['capture']:,.0f} tok/s, SDPA {tps['sdpa']:,.0f} tok/s; "
            f"forward as loaded ({m.hf.config._attn_implementation}) / SDPA {t['loaded'] / t['sdpa']:.3f}"),
        Row("gpu_capture", "bf16 capture tokens/s", tps["capture"], "report", None,
            f"{100 * flops / t['capture'] / peak:.1f}% of the bf16 matmul peak; SDPA forward "
            f"{100 * flops / t['sdpa'] / peak:.1f}%"),
        Row("gpu_capture_peak_frac", "bf16 capture FLOP/s / matmul peak", flops / t["capture"] / peak, "report", None,
            f"{flops / tokens / 1e9:.2f} GFLOP a token (approx., unembedding included: an upper bound)"),
    ]
    if "tl" in t:
        rows.append(Row("gpu_tl_cache_vs_sdpa", "TransformerLens run_with_cache(names_filter=mlp.hook_post) / "
                        "HF SDPA forward (time ratio)", t["tl"] / t["sdpa"], "report", None,
                        f"{tps['tl']:,.0f} tok/s; TL / capture {t['tl'] / t['capture']:.3f}"))
    return rows


def sae_rows(m, peak: float, smoke: bool, device: str) -> list[Row]:
    """JumpReLU SAE training tokens/s under bf16 autocast, toolkit and SAELens, each as a fraction of the peak."""
    d_sae, batch, steps = (256, 128, 3) if smoke else (SAE_D_SAE, SAE_BATCH, SAE_STEPS)
    acts = activations(m, 512 if smoke else 4 * batch).to(device)  # float32, on the GPU
    d_in = acts.shape[1]
    cfg = SAETrainConfig(architecture="jumprelu", d_sae=d_sae, steps=steps, batch=batch, calibrate_l0=False)
    flops = 12 * d_in * cfg.d_sae
    tps, errors = {}, {}
    for trainer in ("toolkit", "saelens"):
        c = replace(cfg, trainer=trainer)
        try:
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
                train(acts, replace(c, steps=2))  # warm-up: kernels, allocator
                synchronize(device)
                tps[trainer] = train(acts, c).cfg.metadata.interp_training["tokens_per_s"]
        except (RuntimeError, TypeError, ValueError) as e:  # reported in the row: SAELens under autocast
            if trainer == "toolkit":
                raise
            errors[trainer] = f"{type(e).__name__}: {str(e)[:120]}"
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    shape = f"d_in {d_in}, d_sae {cfg.d_sae}, batch {cfg.batch}, {cfg.steps} steps, bf16 autocast"
    rows = [Row("gpu_sae", "JumpReLU SAE training tokens/s (toolkit)", tps["toolkit"], "report", None,
                f"{100 * tps['toolkit'] * flops / peak:.1f}% of the bf16 matmul peak; {shape}"),
            Row("gpu_sae_peak_frac", "SAE training FLOP/s (dense-equivalent) / matmul peak (toolkit)",
                tps["toolkit"] * flops / peak, "report", None, f"{flops / 1e6:.1f} MFLOP a token")]
    if "saelens" in tps:
        rows.append(Row("gpu_sae_saelens", "JumpReLU SAE training tokens/s (SAELens SAETrainer)", tps["saelens"],
                        "report", None, f"{100 * tps['saelens'] * flops / peak:.1f}% of the peak; toolkit / SAELens "
                        f"{tps['toolkit'] / tps['saelens']:.2f}; {shape}"))
    else:
        rows.append(Row("gpu_sae_saelens", "JumpReLU SAE training tokens/s (SAELens SAETrainer)", float("nan"),
                        "report", None, f"SAELens failed under autocast: {errors['saelens']}"))
    return rows


def gpu(model, smoke: bool = False, device: str | None = None) -> list[Row]:
    """bf16 capture vs SDPA and SAE-training throughput on the GPU, with their fraction of the matmul peak.

    `device` overrides the CUDA check (tests and the device check's dry run use "cpu" at smoke size)."""
    if device is None:
        if not torch.cuda.is_available():
            return [Row("gpu", "bf16 capture and SAE training on the GPU", float("nan"), "report", None,
                        "no GPU: torch.cuda.is_available() is false; skipped")]
        device = "cuda"
    cuda = torch.device(device).type == "cuda"
    name = torch.cuda.get_device_name(0) if cuda else device
    n = 256 if smoke else 8192
    peak = matmul_peak(device, n=n, iters=2 if smoke else 20)
    rows = [Row("gpu_matmul_peak", "bf16 matmul peak (TFLOP/s, measured)", peak / 1e12, "report", None,
                f"{name}; {n}^3 bf16 products, median of {2 if smoke else 20}")]
    m = _on_device(model, device)
    rows += capture_rows(m, peak, smoke)
    if cuda:
        torch.cuda.empty_cache()
    rows += sae_rows(m, peak, smoke, device)
    return rows
