"""Attribution-graph time and peak memory against prompt length (circuits), at a fixed feature budget.

Transcoders: a TopK set (k = 16, 576 features a layer) trained briefly on the model's own MLP pairs; the graph's
cost depends on how many features are active and attributed, not on how good they are. Each length's graph is
timed against one plain forward + backward of the same prompt measured in the same run (the ratio is the
figure); its peak memory is the process's RSS high-water mark over its level just before (Linux's
/proc/self/clear_refs resets it). The adjacency is dense (rows: attributed features, at most
max_feature_nodes; columns: features, errors and embeddings), so memory grows with the prompt length through
the error and embedding columns and the batch of prompt copies the backward passes share.
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


def _leaf(e):
    return e.detach().requires_grad_()


def circuits_graph(model, smoke: bool = False) -> list[Row]:
    from interp.data import builtin_corpus, token_windows
    from interp.sae import TranscoderTrainConfig, train_transcoders
    from interp.sites import Site
    from interp_probes.circuits.graph import attribute_prepared, prepare
    from interp_probes.circuits.transcoders import pairs

    lengths, budget, batch = ((8, 16), 64, 16) if smoke else ((16, 64, 256), 1024, 64)
    text = builtin_corpus("all", 0)
    ids = torch.tensor(token_windows(model.tokenizer, text, 8, 64, model.info.bos_id))
    X, Y = pairs(model, ids, 256)
    tc = train_transcoders(X, Y, TranscoderTrainConfig(activation="topk", k=16, d_transcoder=576, steps=20,
                                                       batch=128))
    long = torch.tensor(token_windows(model.tokenizer, text, 1, max(lengths), model.info.bos_id))
    rows = []
    for n in lengths:
        prompt = long[:, :n]
        t = time.perf_counter()
        with model.hooks([(Site("embed"), _leaf)]):
            model(prompt).float().sum().backward()
        plain = time.perf_counter() - t
        measured = _reset_hwm()
        before = _hwm_kb()
        t = time.perf_counter()
        g = attribute_prepared(model, tc, prepare(model, tc, prompt), batch_size=batch, max_feature_nodes=budget)
        secs = time.perf_counter() - t
        peak = (_hwm_kb() - before) / 1024 if measured else float("nan")
        rows.append(row(f"circuits_graph_ratio_{n}", f"graph / plain forward+backward, {n} tokens (time ratio)",
                        secs / plain, "report", f"graph {secs:.2f}s ({g.n_feat} of {g.n_active} active features "
                        f"attributed, {g.n_nodes} nodes, batch {batch}); plain {plain:.3f}s"))
        rows.append(row(f"circuits_graph_peak_mb_{n}", f"graph peak RSS over its start (MB), {n} tokens", peak,
                        "report", f"{model.info.name}, max_feature_nodes {budget}"))
    return rows
