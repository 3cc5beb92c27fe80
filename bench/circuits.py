"""Attribution-graph time and peak memory against prompt length (circuits), at a fixed feature and edge budget.

Transcoders: a TopK set (k = 16, 576 features a layer) trained briefly on the model's own MLP pairs; the graph's
cost depends on how many features are active and attributed, not on how good they are. At each length the graph
is made twice in the same run: with its edge budget (`max_edges_per_row`, the default layout) and keeping whole
rows (every active feature, error and embedding: circuit-tracer's dense rows), both with the same backward batch
of at most `batch_tokens` prompt tokens. The figures are the peak-memory ratio of the two (the baseline), each
one's peak, and the graph's time over one plain forward + backward of the same prompt. Peak memory is the
process's RSS high-water mark over its level just before (Linux's /proc/self/clear_refs resets it); the frozen
attention patterns (layers x heads x n^2, the model's own backward keeps as much) are in both. A first graph,
untimed, takes the process's one-off allocations.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .common import Row, row


def _hwm_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _reset_hwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _glibc_returns_freed_memory() -> None:
    """As bench.capture's _MALLOC_ENV, set at run time: every allocation of 64 KiB or more mapped on its own and the
    heap trimmed at once, so a freed tensor leaves the RSS and the next graph's peak over its start is its own (in
    one process the first of two graphs otherwise left the second a higher start: 924 MB against 346 MB at 32
    tokens, in the order run). No-op off glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 65536)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 0)  # M_TRIM_THRESHOLD
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _leaf(e):
    return e.detach().requires_grad_()


def circuits_graph(model, smoke: bool = False) -> list[Row]:
    from interp.data import builtin_corpus, token_windows
    from interp.sae import TranscoderTrainConfig, train_transcoders
    from interp.sites import Site
    from interp_probes.circuits.graph import attribute_prepared, prepare
    from interp_probes.circuits.transcoders import pairs

    lengths, budget, edges, batch_tokens = ((8, 16), 64, 128, 64) if smoke else ((32, 128, 512), 256, 2048, 2048)
    text = builtin_corpus("all", 0)
    ids = torch.tensor(token_windows(model.tokenizer, text, 8, 64, model.info.bos_id))
    X, Y = pairs(model, ids, 256)
    tc = train_transcoders(X, Y, TranscoderTrainConfig(activation="topk", k=16, d_transcoder=576, steps=20,
                                                       batch=128))
    long = torch.tensor(token_windows(model.tokenizer, text, 1, max(lengths), model.info.bos_id))
    rows = []

    def graph(prompt, per_row):
        return attribute_prepared(model, tc, prepare(model, tc, prompt), batch_size=64, max_feature_nodes=budget,
                                  max_edges_per_row=per_row, batch_tokens=batch_tokens)

    graph(long[:, : lengths[0]], edges)  # warm-up: the first graph's one-off allocations are in neither figure
    for n in lengths:
        prompt = long[:, :n]
        t = time.perf_counter()
        with model.hooks([(Site("embed"), _leaf)]):
            model(prompt).float().sum().backward()
        plain = time.perf_counter() - t
        got = {}
        for name, per_row in (("budget", edges), ("whole", 1 << 40)):
            _glibc_returns_freed_memory()
            measured = _reset_hwm()
            before = _hwm_kb()
            t = time.perf_counter()
            g = graph(prompt, per_row)
            secs = time.perf_counter() - t
            got[name] = (secs, (_hwm_kb() - before) / 1024 if measured else float("nan"), len(g.edges))
            del g
        (secs, peak, n_edges), (_, whole, whole_edges) = got["budget"], got["whole"]
        what = f"{model.info.name}, {budget} features with rows, batch of {batch_tokens} tokens"
        rows.append(row(f"circuits_graph_peak_ratio_{n}", f"graph peak memory, {edges} edges a row / whole rows, "
                        f"{n} tokens", peak / whole if whole > 0 else float("nan"), "report",
                        f"{peak:.0f} MB ({n_edges} edges) vs {whole:.0f} MB ({whole_edges} edges); {what}"))
        rows.append(row(f"circuits_graph_peak_mb_{n}", f"graph peak RSS over its start (MB), {n} tokens", peak,
                        "report", what))
        rows.append(row(f"circuits_graph_ratio_{n}", f"graph / plain forward+backward, {n} tokens (time ratio)",
                        secs / plain, "report", f"graph {secs:.2f}s; plain {plain:.3f}s"))
    return rows


def transcoder_buffer(model, smoke: bool = False) -> list[Row]:
    """Peak memory of a transcoder set's training buffer (every layer's MLP input and output at the same tokens):
    `collect_stacked` writing in place into one bfloat16 buffer (what circuits trains on), the same in float32,
    and the baseline, `collect_activations` (per-batch pieces, concatenated) stacked into (tok, layer, d), the way
    circuits collected before, measured in the same run. Each figure is the RSS high-water mark over the level
    just before, with the buffer's own size beside it."""
    from interp import batched
    from interp.data import builtin_corpus, token_windows
    from interp.sae import collect_activations, collect_stacked
    from interp.sites import Site

    n_tokens, seq = (96, 16) if smoke else (8192, 128)
    L = model.info.n_layers
    ids = torch.tensor(token_windows(model.tokenizer, builtin_corpus("all", 0), -(-n_tokens // (seq - 1)), seq,
                                     model.info.bos_id))
    chunks = batched({"input_ids": ids}, 16)
    groups = [[Site("mlp_in", layer) for layer in range(L)], [Site("mlp_out", layer) for layer in range(L)]]

    def stacked(dtype):
        return collect_stacked(model, chunks, groups, n_tokens, skip_first=1, dtype=dtype)

    def pieces():
        buf = collect_activations(model, chunks, {s: n_tokens for g in groups for s in g}, skip_first=1)
        return [torch.stack([buf.acts[s] for s in g], 1) for g in groups]

    stacked(torch.float32)  # warm-up: one-off allocations in none of the figures
    got = {}
    for name, fn in (("stacked_bf16", lambda: stacked(torch.bfloat16)), ("stacked_f32", lambda: stacked(torch.float32)),
                     ("pieces_f32", pieces)):
        _glibc_returns_freed_memory()
        measured = _reset_hwm()
        before = _hwm_kb()
        out = fn()
        size = sum(t.numel() * t.element_size() for t in out) / 2**20
        got[name] = ((_hwm_kb() - before) / 1024 if measured else float("nan"), size)
        del out
    what = f"{model.info.name}, {n_tokens} tokens x {L} layers x (in, out)"
    base = got["pieces_f32"][0]
    return [row(f"transcoder_buffer_ratio_{name}", f"transcoder buffer peak memory, {name} / pieces_f32",
                peak / base if base > 0 else float("nan"), "report",
                f"{peak:.0f} MB (buffer {size:.0f} MB) vs {base:.0f} MB (buffer {got['pieces_f32'][1]:.0f} MB); "
                f"{what}") for name, (peak, size) in got.items() if name != "pieces_f32"]


def transcoder_quality(model, smoke: bool = False) -> list[Row]:
    """Time of transcoder quality's losses (clean, every MLP zeroed / spliced, each layer's alone): the branching
    forward (`edit_losses`, one per held-out chunk, edits joining at their layer) against the baseline, one forward
    per edit batched 64 rows a pass (the code before it), on the same chunks and set, in turns in the same run.
    The losses must be equal bit for bit, or the row fails."""
    from interp.data import builtin_corpus, token_windows
    from interp.sae import TranscoderTrainConfig, train_transcoders
    from interp.sae.transcoder_train import edit_losses, splice_hooks, token_losses
    from interp_probes.circuits.transcoders import pairs

    from .common import interleaved

    n, seq = (1, 16) if smoke else (2, 32)
    ids = torch.tensor(token_windows(model.tokenizer, builtin_corpus("all", 0), n + 4, seq, model.info.bos_id))
    X, Y = pairs(model, ids[n:], 4 * (seq - 1))
    tc = train_transcoders(X, Y, TranscoderTrainConfig(activation="topk", k=8, d_transcoder=256, steps=10, batch=64))
    ids, L = ids[:n], tc.n_layers

    def per_edit() -> dict:
        every = {layer: slice(None) for layer in range(L)}
        out = {"clean": token_losses(model, ids),
               "zero_all": token_losses(model, ids, splice_hooks(tc, every, "zero")),
               "splice_all": token_losses(model, ids, splice_hooks(tc, every, "splice"))}
        per = max(1, 64 // n)
        for mode in ("zero", "splice"):
            got = []
            for start in range(0, L, per):
                layers = range(start, min(L, start + per))
                rows = {layer: slice(i * n, (i + 1) * n) for i, layer in enumerate(layers)}
                got.append(token_losses(model, ids.repeat(len(layers), 1), splice_hooks(tc, rows, mode)).view(-1, n))
            out[mode] = torch.cat(got)
        return out

    a, b = edit_losses(model, tc, ids), per_edit()
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    t = interleaved({"branching": lambda: edit_losses(model, tc, ids), "per_edit": per_edit},
                    repeats=1 if smoke else 2, warmup=0, device=model)  # a, b: the warm-up
    return [Row("transcoder_quality_ratio", "quality losses, branching forward / a forward per edit (time ratio)",
                t["branching"] / t["per_edit"], "<= 1", t["branching"] <= t["per_edit"] and same,
                f"{t['branching']:.2f}s vs {t['per_edit']:.2f}s; losses {'equal bit for bit' if same else 'DIFFER'}; "
                f"{model.info.name}, {n} chunk(s) of {seq} tokens, {L} layers")]


def circuits_vs_circuit_tracer(model, smoke: bool = False) -> list[Row]:
    """The same attribution graph in circuit-tracer 0.5.0 (its side environment, tests/compat/circuit_tracer_env.py,
    built once in the interp cache) and here, in the same run: the same weights, prompt, transcoder set (a TopK set,
    k 16, 576 features a layer, trained briefly; circuit-tracer runs it with its TopK class followed by ReLU, so
    the two graphs are equal, which the row checks), feature budget and backward batch. Each side makes the graph
    once untimed (one-off allocations), then once timed; peak memory is each process's RSS high-water mark over its
    level just before. The figure is the time ratio here / circuit-tracer (the goal: <= 1)."""
    import sys
    import tempfile

    from interp.data import builtin_corpus, token_windows
    from interp.sae import TranscoderTrainConfig, save_transcoders, train_transcoders
    from interp_probes.circuits.graph import attribute
    from interp_probes.circuits.probe import prompt_ids
    from interp_probes.circuits.prune import prune
    from interp_probes.circuits.transcoders import pairs

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "compat"))
    import circuit_tracer_env as ce

    budget, batch, steps = (64, 32, 5) if smoke else (512, 64, 20)
    ids = torch.tensor(token_windows(model.tokenizer, builtin_corpus("all", 0), 8, 64, model.info.bos_id))
    X, Y = pairs(model, ids, 256)
    tc = train_transcoders(X, Y, TranscoderTrainConfig(activation="topk", k=16, d_transcoder=576, steps=steps,
                                                       batch=128))
    tc.meta = {"model": model.info.name}
    prompt = prompt_ids(model, "The capital of France is")
    kw = {"max_feature_nodes": budget, "batch_size": batch}
    with tempfile.TemporaryDirectory(prefix="bench-ct-") as d:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TopK note: circuit-tracer runs it with TopK + ReLU here
            path = save_transcoders(tc, Path(d) / "set")
        side = ce.run_side(model.info.name, path, [prompt[0].tolist()], Path(d) / "work", variants=("topk_relu",),
                           k=16, warm=True, **kw)
        attribute(model, tc, prompt, **kw)  # untimed, as circuit-tracer's first graph
        _glibc_returns_freed_memory()
        measured = _reset_hwm()
        before = _hwm_kb()
        t = time.perf_counter()
        g = attribute(model, tc, prompt, **kw)
        secs = time.perf_counter() - t
        peak = (_hwm_kb() - before) / 1024 if measured else float("nan")
    r = side["result"]["graphs"]["topk_relu"][0]
    same = ce.compare(g, prune(g), side["graphs"]["topk_relu"][0], (r["replacement_score"], r["completeness_score"]))
    same["ct_prune_recomputed"] = r.get("prune_recomputed_consistent")  # as cross_check's rows carry it
    equal = not ce.failures(same)
    what = (f"{model.info.name}, {len(prompt[0])} tokens, {g.n_feat} of {g.n_active} active features with rows, "
            f"batch {batch}; graphs equal: {equal}")
    return [row("circuits_vs_circuit_tracer_time", "graph time here / circuit-tracer 0.5 (same graph, same run)",
                secs / r["seconds"], "report", f"{secs:.2f} s vs {r['seconds']:.2f} s; {what}"),
            row("circuits_vs_circuit_tracer_peak", "graph peak RSS over start here / circuit-tracer 0.5",
                peak / r["peak_mb"] if r["peak_mb"] > 0 else float("nan"), "report",
                f"{peak:.0f} MB vs {r['peak_mb']:.0f} MB; {what}")]
