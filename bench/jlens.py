"""The Jacobian lens fit per prompt: `interp.lens` against the reference's algorithm, same prompt, same run.

Baseline, written here from the reference's definition (the jlens package's `jacobian_for_prompt`): one forward of
the whole prompt replicated dim_batch = 8 times (the graph rooted at the lowest source layer's output, parameters
frozen), then ceil(d_model / 8) backward passes, replica b carrying a one-hot cotangent at output dimension
start + b at every valid target position; row = the gradient's mean over the valid source positions, in float32.
interp: `interp.lens.jacobian.jacobian_for_prompt` as `fit_jacobian_lens` runs it (the first skip_first positions
once into a KV cache without a graph, the valid positions in the graph, the same 8 dimensions a backward pass).
Both in float32 on the model's Hugging Face twin, in turns; the row holds the time ratio and the largest relative
Frobenius difference of J_l over the layers. The detail says where the time goes (forward / backward seconds).
"""

from __future__ import annotations

import math
import time

import torch

from .common import Row, is_tiny, row

DIM_BATCH = 8
TEXT = ("The river Danube flows through ten countries, more than any other river in the world, and it empties "
        "into the Black Sea after a journey of nearly three thousand kilometres, passing four capital cities.")


def reference_algorithm(model, ids: torch.Tensor, sources: list[int], target: int, skip_first: int,
                        dim_batch: int = DIM_BATCH) -> tuple[dict[int, torch.Tensor], float, float]:
    """(J per source layer, forward seconds, backward seconds) by the reference's algorithm (module docstring)."""
    layers = model.anatomy.layers
    base = model.anatomy._base()
    d = model.info.d_model
    acts: dict[int, torch.Tensor] = {}
    root = min(sources)

    def keep(layer):
        def hook(module, args, out):
            x = out if torch.is_tensor(out) else out[0]
            if layer == root:
                x.requires_grad_(True)  # the reference's start_graph_at: the graph's leaf
            acts[layer] = x

        return hook

    handles = [layers[ly].register_forward_hook(keep(ly)) for ly in [*sources, target]]
    t0 = time.perf_counter()
    try:
        with torch.enable_grad():
            base(input_ids=ids.to(model.device)[None].expand(dim_batch, -1), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    t1 = time.perf_counter()
    n = ids.shape[0]
    valid = torch.arange(skip_first, n - 1, device=model.device)
    tgt, srcs = acts[target], [acts[ly] for ly in sources]
    J = {ly: torch.zeros(d, d) for ly in sources}
    b = torch.arange(dim_batch, device=model.device)
    cot = torch.zeros_like(tgt)
    n_passes = math.ceil(d / dim_batch)
    for i, start in enumerate(range(0, d, dim_batch)):
        nd = min(dim_batch, d - start)
        cot.zero_()
        cot[b[:nd, None], valid[None, :], start + b[:nd, None]] = 1.0
        grads = torch.autograd.grad(tgt, srcs, cot, retain_graph=i < n_passes - 1)
        for ly, g in zip(sources, grads):
            J[ly][start:start + nd] = g[:nd, valid].float().mean(1).cpu()
    return J, t1 - t0, time.perf_counter() - t1


def interp_step(model, ids, sources, target, skip_first, dim_batch=DIM_BATCH):
    """(J, forward seconds, backward seconds) of interp's per-prompt step (forward and backward timed apart by
    timing the forward alone once more: the step itself does both)."""
    from interp.lens.jacobian import FitModel, jacobian_for_prompt

    net = FitModel(model)
    t0 = time.perf_counter()
    with net.frozen(), torch.enable_grad():
        net.graph(ids, sources, target, skip_first, dim_batch)
    t1 = time.perf_counter()
    with net.frozen():
        J = jacobian_for_prompt(net, ids, sources, target, skip_first, dim_batch)
    t2 = time.perf_counter()
    return J, t1 - t0, (t2 - t1) - (t1 - t0)


def jlens_fit(model, smoke: bool = False) -> list[Row]:
    """interp's fit per prompt / the reference algorithm's (>= 1.0x with max rel Frobenius <= 1e-5)."""
    if model.dtype != torch.float32:
        return [row("jlens_fit_speedup", "J-lens fit per prompt vs the reference algorithm", float("nan"), "report",
                    f"needs the model in float32 (it is {model.dtype})")]
    tiny = is_tiny(model)
    n_tok, skip = (24, 8) if (smoke or tiny) else (36, 16)
    ids = model.tokenize(TEXT)["input_ids"][0, :n_tok].cpu()
    L = model.info.n_layers
    sources, target = list(range(L - 1)), L - 1
    repeats = 2 if (smoke or tiny) else 1
    ref_t, our_t, ref_f, our_f = [], [], [], []
    J_ref = J_our = None
    for _ in range(repeats):  # in turns: reference, then interp
        J_ref, f, b = reference_algorithm(model, ids, sources, target, skip)
        ref_t.append(f + b)
        ref_f.append(f)
        J_our, f, b = interp_step(model, ids, sources, target, skip)
        our_t.append(f + b)
        our_f.append(f)
    rel = max(float((J_our[ly] - J_ref[ly]).norm() / J_ref[ly].norm()) for ly in sources)
    ref_s, our_s = min(ref_t), min(our_t)
    speedup = ref_s / our_s
    ok = speedup >= 1.0 and rel <= 1e-5
    n_valid = n_tok - 1 - skip
    where = (f"{model.info.name} float32 on {model.device}, {n_tok} tokens (skip_first {skip}: {n_valid} valid), "
             f"{len(sources)} source layers, d_model {model.info.d_model}, dim_batch {DIM_BATCH}, "
             f"{torch.get_num_threads()} threads, best of {repeats}")
    return [
        Row("jlens_fit_speedup", "J-lens fit per prompt: reference algorithm / interp (time ratio)", speedup,
            ">= 1.0", ok, f"{where}; reference {ref_s:.2f}s (forward {min(ref_f):.2f}s of {DIM_BATCH} x {n_tok} "
            f"positions), interp {our_s:.2f}s (forward {min(our_f):.2f}s of {DIM_BATCH} x {n_valid} positions "
            f"and {skip} cached); max rel Frobenius {rel:.1e}" + ("" if ok else " (FAIL: needs >= 1.0 and <= 1e-5)")),
        Row("jlens_fit_rel_err", "J-lens: max over layers of ||J_interp - J_reference||_F / ||J_reference||_F", rel,
            "<= 1e-05", rel <= 1e-5, "the same prompt and settings, float32"),
    ]
