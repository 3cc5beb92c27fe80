"""Activation patching and attribution patching on clean / corrupted prompt pairs.

For each pair the corrupted prompt is run with one component's clean activation put back (patching clean into
corrupted, "denoising"), and the effect is normalised as ``(patched - corrupt) / (clean - corrupt)``: 1 where
the component alone restores the clean behaviour, 0 where it does nothing. Components: ``resid_pre``,
``attn_out`` and ``mlp_out`` by (layer, position), and each head's ``z`` by (layer, head) at all positions
(and per position with ``z_by_position``). The sweep is batched (`sweep.run_cells`).

Attribution patching (Nanda 2023; TransformerLens's demo) estimates the same grids linearly:
``(a_clean - a_corrupt) . d metric / d a`` with the gradient taken on the *corrupted* run, the first-order
Taylor estimate of ``metric(corrupt with a_clean) - metric(corrupt)``, i.e. of exactly what activation patching
measures. So it costs one forward and backward on the corrupted prompts plus one forward on the clean ones
(the clean run also gives the clean activations the sweep needs). The gradient on the clean run would instead
estimate the opposite patch (corrupted into clean).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import capture_grads, run_with_cache
from interp.context import RunContext
from interp.errors import ConfigError, NumericError
from interp.sites import Site

from . import POSITION_SITES, PatchingConfig
from .pairs import Pair, load_pairs
from .sweep import Cell, metric_values, run_cells

GAP_MIN = 1e-6
"""Smallest |clean - corrupt| metric gap a pair may have (the normalisation divides by it)."""


def run(cfg: PatchingConfig, ctx: RunContext) -> None:
    model = ctx.model
    pairs = load_pairs(cfg.task, cfg.data, cfg.n_pairs, cfg.seed, token_counter(model))  # 1. data
    enc = encode(model, pairs)
    layers = cfg.resolved_layers(model.info.n_layers)
    t0 = time.perf_counter()
    base = baselines_and_attribution(model, enc, cfg, layers)  # 2. clean run; corrupted forward + backward
    t1 = time.perf_counter()
    act, n_forward, n_run = activation_patching(model, enc, base, cfg, layers, ctx)  # 3. batched sweep
    t2 = time.perf_counter()
    checks = identity_checks(model, enc, base, cfg)  # 4. exact identities
    grids = {**{f"act_{k}": v for k, v in act.items()}, **{f"attr_{k}": v for k, v in base.attr.items()}}
    for name, g in grids.items():
        ctx.check_finite(f"{name} (cells the pairs have)", g[~torch.isnan(g)])
    agree = agreement(act, base.attr, base.differs, cfg.top_k)  # 5. attribution vs activation patching
    top = top_components(act, base.attr, enc, layers, cfg.top_k)

    ctx.save_tensors("grids", {**grids, **{f"differs_{k}": v for k, v in base.differs.items()},
                               "layers": torch.tensor(layers), "lengths": torch.tensor(enc.lengths),
                               "clean_metric": base.clean_metric, "corrupt_metric": base.corrupt_metric})
    ctx.save_table("pairs", pairs_frame(pairs, enc, base, checks))
    ctx.save_table("tokens", tokens_frame(enc))
    ctx.save_table("agreement", agree)
    ctx.save_table("top", top)
    ctx.log_metrics(**summarize(cfg, base, agree, top, checks, len(layers), n_run))
    ctx.log_timings(seconds_attribution=round(t1 - t0, 3), seconds_activation_patching=round(t2 - t1, 3),
                    n_forward_passes=n_forward)


# ============================================================================= 1. data


def token_counter(model):
    """Tokens of a text without special tokens, by the model's tokenizer (as the pre-load check counts)."""
    return lambda text: len(model.tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass
class Encoded:
    """The pairs as token ids (each pair's own length; BOS as the tokenizer adds it)."""

    clean: list[Tensor]
    """(pos,) ids of each clean prompt."""
    corrupt: list[Tensor]
    answer: Int[Tensor, " pairs"]
    wrong: Int[Tensor, " pairs"]
    lengths: list[int]
    n_cols: int
    """Grid columns: the longest pair; shorter pairs are right-aligned (their last token in the last column)."""
    clean_tokens: list[list[str]]
    corrupt_tokens: list[list[str]]

    def groups(self) -> dict[int, list[int]]:
        """Pair indices by token length (one group runs as one batch)."""
        out: dict[int, list[int]] = {}
        for i, n in enumerate(self.lengths):
            out.setdefault(n, []).append(i)
        return out

    def col(self, pair: int, pos: int) -> int:
        return self.n_cols - self.lengths[pair] + pos


def encode(model, pairs: Sequence[Pair]) -> Encoded:
    clean, corrupt, ans, wrong = [], [], [], []
    for i, p in enumerate(pairs):
        a = model.tokenize(p.clean)["input_ids"][0].cpu()
        b = model.tokenize(p.corrupt)["input_ids"][0].cpu()
        if a.shape != b.shape:
            raise ConfigError("data", f"pair {i}", f"token-aligned prompts ({len(a)} vs {len(b)} tokens)")
        x, y = (model.tokenizer(t, add_special_tokens=False)["input_ids"] for t in (p.answer, p.wrong))
        if not x or not y or x[0] == y[0]:
            raise ConfigError("data", f"pair {i}", f"answers whose first tokens differ ({p.answer!r}, {p.wrong!r})")
        clean.append(a)
        corrupt.append(b)
        ans.append(x[0])
        wrong.append(y[0])
    lengths = [len(a) for a in clean]
    return Encoded(clean, corrupt, torch.tensor(ans), torch.tensor(wrong), lengths, max(lengths),
                   [model.to_str_tokens(a) for a in clean], [model.to_str_tokens(b) for b in corrupt])


def sites_of(cfg: PatchingConfig, layers: Sequence[int]) -> list[Site]:
    kinds = [{"z": "attn_z"}.get(s, s) for s in cfg.sites]
    return [Site(k, layer) for layer in layers for k in kinds]


# ============================================================================= 2. baselines and attribution


@dataclass
class Baselines:
    clean_metric: Float[Tensor, " pairs"]
    corrupt_metric: Float[Tensor, " pairs"]
    clean_acts: dict[int, dict[Site, Tensor]]
    """group length -> site -> (group pairs, pos, *units)"""
    corrupt_acts: dict[int, dict[Site, Tensor]]
    attr: dict[str, Tensor]
    """site name -> normalised attribution grid (pairs, layers, cols | heads [, cols])."""
    differs: dict[str, Tensor]
    """site name -> bool grid: the cell's clean and corrupted activations differ (per pair)."""
    group_of: dict[int, tuple[int, int]]
    """pair -> (group length, index in its group)"""

    def clean_of(self, pair: int) -> dict[Site, Tensor]:
        """The clean activations of one pair: site -> (1, pos, *units)."""
        length, gi = self.group_of[pair]
        return {s: v[gi:gi + 1] for s, v in self.clean_acts[length].items()}


def empty_grids(cfg: PatchingConfig, enc: Encoded, n_layers: int, n_heads: int, dtype=torch.float32):
    n = len(enc.lengths)
    out = {s: torch.full((n, n_layers, enc.n_cols), float("nan"), dtype=dtype) for s in cfg.sites if s != "z"}
    if "z" in cfg.sites:
        out["z"] = torch.full((n, n_layers, n_heads), float("nan"), dtype=dtype)
        if cfg.z_by_position:
            out["z_pos"] = torch.full((n, n_layers, n_heads, enc.n_cols), float("nan"), dtype=dtype)
    return out


def baselines_and_attribution(model, enc: Encoded, cfg: PatchingConfig, layers: list[int]) -> Baselines:
    """Clean forward (activations, metric); corrupted forward + backward (activations, metric, gradients);
    attribution = (a_clean - a_corrupt) . grad_corrupt, normalised by the pair's clean - corrupt gap."""
    sites = sites_of(cfg, layers)
    n = len(enc.lengths)
    clean_m, corrupt_m = torch.empty(n), torch.empty(n)
    clean_acts, corrupt_acts = {}, {}
    raw = empty_grids(cfg, enc, len(layers), model.info.n_heads)
    differs = {k: torch.zeros(v.shape, dtype=torch.bool) for k, v in raw.items()}
    for length, idx in enc.groups().items():
        ids_clean = torch.stack([enc.clean[i] for i in idx]).to(model.device)  # (g, pos)
        ids_corrupt = torch.stack([enc.corrupt[i] for i in idx]).to(model.device)
        ans, wrong = enc.answer[idx].to(model.device), enc.wrong[idx].to(model.device)
        logits, cache = run_with_cache(model, ids_clean, None, sites + [Site("resid_pre", 0),
                                                                        Site("resid_post", model.info.n_layers - 1)])
        clean_m[idx] = metric_values(logits[:, -1], ans, wrong, cfg.metric).cpu()
        start = [Site("resid_pre", 0)] if Site("resid_pre", 0) not in sites else []  # where the sweep's rows begin
        grad = capture_grads(model, ids_corrupt, None, sites + start,
                             lambda lg, a=ans, w=wrong: metric_values(lg[:, -1], a, w, cfg.metric).sum())
        corrupt_m[idx] = metric_values(grad.logits[:, -1], ans, wrong, cfg.metric).cpu()
        clean_acts[length] = {s: v.float().cpu() for s, v in cache.items()}
        corrupt_acts[length] = {s: v.float().cpu() for s, v in grad.acts.items()}
        cols = torch.arange(length) + enc.n_cols - length  # host: indices into host grids
        for li, layer in enumerate(layers):
            for name in raw:
                kind = "attn_z" if name.startswith("z") else name
                s = Site(kind, layer)
                d = clean_acts[length][s] - corrupt_acts[length][s]  # (g, pos, *units)
                g = grad.grads[s].float().cpu()
                if name == "z":  # (g, pos, head, d_head) -> (g, head)
                    raw[name][idx, li] = (d * g).sum((1, 3))
                    differs[name][idx, li] = (d != 0).any(3).any(1)
                elif name == "z_pos":  # -> (g, head, pos)
                    raw[name][torch.tensor(idx)[:, None], li, :, cols[None]] = (d * g).sum(3)
                    differs[name][torch.tensor(idx)[:, None], li, :, cols[None]] = (d != 0).any(3)
                else:  # (g, pos, d_model) -> (g, pos)
                    raw[name][torch.tensor(idx)[:, None], li, cols[None]] = (d * g).sum(2)
                    differs[name][torch.tensor(idx)[:, None], li, cols[None]] = (d != 0).any(2)
    gap = clean_m - corrupt_m
    small = (gap.abs() < GAP_MIN).nonzero()
    if len(small):
        i = int(small[0])
        raise NumericError(f"pair {i}: clean and corrupted {cfg.metric} are equal ({float(clean_m[i]):.6g}); "
                           "the normalised effect (patched - corrupt) / (clean - corrupt) is undefined")
    attr = {k: v / gap.view(-1, *[1] * (v.dim() - 1)) for k, v in raw.items()}
    group_of = {pair: (length, gi) for length, idx in enc.groups().items() for gi, pair in enumerate(idx)}
    return Baselines(clean_m, corrupt_m, clean_acts, corrupt_acts, attr, differs, group_of)


# ============================================================================= 3. activation patching


def grid_cells(enc: Encoded, base: Baselines, layers: list[int], pair: int,
               n_heads: int) -> tuple[list[Cell], list[tuple]]:
    """The cells of one pair to run, and where each result goes: (grid name, pair, layer slot, col|head[, col]).
    Cells whose clean and corrupted activations are equal are left out: their effect is exactly 0."""
    length = enc.lengths[pair]
    cells, where = [], []
    for li, layer in enumerate(layers):
        for name in base.attr:
            if name == "z":
                for h in range(n_heads):
                    if base.differs["z"][pair, li, h]:
                        cells.append(Cell("z", layer, head=h))
                        where.append(("z", pair, li, h))
                continue
            for pos in range(length):
                c = enc.col(pair, pos)
                if name == "z_pos":
                    for h in range(n_heads):
                        if base.differs["z_pos"][pair, li, h, c]:
                            cells.append(Cell("z", layer, head=h, pos=pos))
                            where.append(("z_pos", pair, li, h, c))
                elif base.differs[name][pair, li, c]:
                    cells.append(Cell(name, layer, pos=pos))
                    where.append((name, pair, li, c))
    return cells, where


def activation_patching(model, enc: Encoded, base: Baselines, cfg: PatchingConfig, layers: list[int],
                        ctx: RunContext | None = None) -> tuple[dict[str, Tensor], int, int]:
    """Normalised activation-patching grids (shaped like the attribution grids), the forward passes used and
    the cells run. Cells whose activations agree are 0 (patching them is the identity)."""
    grids = {k: torch.where(torch.isnan(v), v, torch.zeros_like(v)) for k, v in base.attr.items()}
    n_forward = n_run = 0
    gap = base.clean_metric - base.corrupt_metric
    for length, idx in enc.groups().items():  # the pairs of one token length share every forward
        cells, where = [], []
        for gi, pair in enumerate(idx):
            c, w = grid_cells(enc, base, layers, pair, model.info.n_heads)
            cells += [replace(x, pair=gi) for x in c]
            where += w
        if not cells:
            continue
        vals, k = run_cells(model, cells=cells, metric=cfg.metric, batch_size=cfg.batch_size,
                            progress=ctx.tqdm if ctx else None, **group_inputs(model, enc, base, length, idx))
        n_forward += k
        n_run += len(cells)
        for v, w in zip(vals.tolist(), where):
            name, pair = w[0], w[1]
            grids[name][(pair, *w[2:])] = (v - float(base.corrupt_metric[pair])) / float(gap[pair])
    return grids, n_forward, n_run


def group_inputs(model, enc: Encoded, base: Baselines, length: int, idx: list[int]) -> dict:
    """run_cells' inputs of one group of pairs of one length: corrupted ids, clean activations, answers,
    wrong answers and the corrupted resid_pre of layer 0 the grown rows start from."""
    ids = torch.stack([enc.corrupt[i] for i in idx]).to(model.device)  # (g, pos)
    return {"corrupt_ids": ids, "clean": base.clean_acts[length], "answer": enc.answer[idx], "wrong": enc.wrong[idx],
            "start": base.corrupt_acts[length][Site("resid_pre", 0)]}


# ============================================================================= 4. identities


def identity_checks(model, enc: Encoded, base: Baselines, cfg: PatchingConfig) -> dict[str, Tensor]:
    """Per pair: patching resid_pre of layer 0 at every position (-> 1), resid_post of the last layer at the
    last position (-> 1), and resid_pre of layer 0 at each position where the tokens agree (-> 0, run
    although it is skipped in the sweep)."""
    last = model.info.n_layers - 1
    n = len(enc.lengths)
    full, final, same = torch.empty(n), torch.empty(n), torch.zeros(n)
    gap = base.clean_metric - base.corrupt_metric
    for length, idx in enc.groups().items():
        cells, kind = [], []
        for gi, pair in enumerate(idx):
            cells += [Cell("resid_pre", 0, pair=gi), Cell("resid_post", last, pos=length - 1, pair=gi)]
            kind += [("full", pair), ("final", pair)]
            agree = (enc.clean[pair] == enc.corrupt[pair]).nonzero()[:, 0].tolist()
            cells += [Cell("resid_pre", 0, pos=p, pair=gi) for p in agree]
            kind += [("same", pair)] * len(agree)
        vals, _ = run_cells(model, cells=cells, metric=cfg.metric, batch_size=max(cfg.batch_size, len(cells)),
                            **group_inputs(model, enc, base, length, idx))
        for v, (what, pair) in zip(vals.tolist(), kind):
            norm = (v - float(base.corrupt_metric[pair])) / float(gap[pair])
            if what == "full":
                full[pair] = norm
            elif what == "final":
                final[pair] = norm
            else:
                same[pair] = max(float(same[pair]), abs(norm))
    return {"layer0_all_positions": full, "final_resid_post": final, "layer0_same_token_max_abs": same}


# ============================================================================= 5. agreement and summaries


def mean_grid(g: Tensor) -> Tensor:
    """Mean over pairs, ignoring the columns a (shorter) pair does not have."""
    return torch.nanmean(g, 0)


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(spearmanr(x, y).statistic)


def agreement(act: dict[str, Tensor], attr: dict[str, Tensor], differs: dict[str, Tensor], k: int) -> pd.DataFrame:
    """Per grid: Spearman of attribution vs activation patching (mean over pairs) over every cell and over the
    cells whose activations differ for some pair, and the overlap of their top-k cells by |effect|."""
    rows = []
    for name in act:
        a, b = mean_grid(act[name]).flatten().cpu().numpy(), mean_grid(attr[name]).flatten().cpu().numpy()
        d = differs[name].any(0).flatten().cpu().numpy()
        ok = np.isfinite(a) & np.isfinite(b)
        kk = min(k, int(ok.sum()))
        ia = set(np.argsort(-np.abs(np.where(ok, a, 0)))[:kk].tolist())
        ib = set(np.argsort(-np.abs(np.where(ok, b, 0)))[:kk].tolist())
        rows.append({"grid": name, "spearman": spearman(a[ok], b[ok]), "spearman_differing": spearman(
            a[ok & d], b[ok & d]), "topk_overlap": len(ia & ib) / kk if kk else None, "k": kk,
            "n_cells": int(ok.sum()), "n_differing": int((ok & d).sum())})
    return pd.DataFrame(rows)


def top_components(act: dict[str, Tensor], attr: dict[str, Tensor], enc: Encoded, layers: list[int],
                   k: int) -> pd.DataFrame:
    """The k cells of each grid with the largest |mean activation-patching effect|."""
    longest = int(np.argmax(enc.lengths))
    tok = lambda c: enc.clean_tokens[longest][c - enc.n_cols + enc.lengths[longest]]  # noqa: E731
    rows = []
    for name, g in act.items():
        m, a = mean_grid(g), mean_grid(attr[name])
        flat = torch.where(torch.isnan(m), torch.zeros_like(m), m).abs().flatten()
        for rank, i in enumerate(flat.argsort(descending=True)[:k].tolist()):
            at = np.unravel_index(i, m.shape)
            layer = layers[int(at[0])]
            head = int(at[1]) if name.startswith("z") else None
            col = int(at[-1]) if name != "z" else None
            label = (f"L{layer}H{head}" if head is not None else f"{name} L{layer}") + (
                f" @{col} {tok(col)!r}" if col is not None else "")
            rows.append({"grid": name, "rank": rank, "component": label, "layer": layer, "head": head,
                         "column": col, "token": tok(col) if col is not None else None,
                         "act": float(m[at]), "attr": float(a[at])})
    return pd.DataFrame(rows)


def pairs_frame(pairs: Sequence[Pair], enc: Encoded, base: Baselines, checks: dict[str, Tensor]) -> pd.DataFrame:
    rows = []
    for i, p in enumerate(pairs):
        diff = (enc.clean[i] != enc.corrupt[i]).nonzero()[:, 0].tolist()
        rows.append({"pair": i, **p.to_dict(), "n_tokens": enc.lengths[i], "differing_positions": diff,
                     "clean_metric": float(base.clean_metric[i]), "corrupt_metric": float(base.corrupt_metric[i]),
                     **{f"identity_{k}": float(v[i]) for k, v in checks.items()}})
    return pd.DataFrame(rows)


def tokens_frame(enc: Encoded) -> pd.DataFrame:
    rows = [{"pair": i, "column": enc.col(i, pos), "position": pos, "clean_token": a, "corrupt_token": b,
             "differs": a != b}
            for i, (ta, tb) in enumerate(zip(enc.clean_tokens, enc.corrupt_tokens))
            for pos, (a, b) in enumerate(zip(ta, tb))]
    return pd.DataFrame(rows)


def summarize(cfg: PatchingConfig, base: Baselines, agree: pd.DataFrame, top: pd.DataFrame,
              checks: dict[str, Tensor], n_layers: int, n_run: int) -> dict:
    out = {"n_pairs": len(base.clean_metric), "n_layers_swept": n_layers, "n_cells_run": n_run,
           "clean_metric_mean": float(base.clean_metric.mean()),
           "corrupt_metric_mean": float(base.corrupt_metric.mean()),
           "identity_layer0_all_positions_err": float((checks["layer0_all_positions"] - 1).abs().max()),
           "identity_final_resid_post_err": float((checks["final_resid_post"] - 1).abs().max()),
           "identity_layer0_same_token_max_abs": float(checks["layer0_same_token_max_abs"].max())}
    for r in agree.itertuples():
        out[f"{r.grid}_spearman"] = r.spearman
        out[f"{r.grid}_spearman_differing"] = r.spearman_differing
        out[f"{r.grid}_topk_overlap"] = r.topk_overlap
    for name in agree["grid"]:
        first = top[(top["grid"] == name) & (top["rank"] == 0)]
        if len(first):
            out[f"{name}_top"] = str(first["component"].iloc[0])
            out[f"{name}_top_effect"] = float(first["act"].iloc[0])
    return out


__all__ = ["run", "POSITION_SITES"]
