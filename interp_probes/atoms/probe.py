"""Atoms (arXiv 2509.20784): in which geometry are hidden states sparse combinations of nearly
orthogonal units, which units qualify (neurons, SAE features, threshold SAEs in that geometry),
and how does a TSAE's success depend on dictionary size relative to data?

Method: ../shared/methods/atoms.md. Stages: `metric` (AIP, whitening, angles), `units` (R², support,
local coherence, q*), `synthetic` (known atoms); SAE training, calibration and SAELens I/O are the
core's (`interp.sae`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp import load_sae as load_sae_spec
from interp.context import RunContext
from interp.data import corpus_info, load_texts, token_windows
from interp.errors import ConfigError
from interp.sae import (
    ActivationBuffer,
    SAETrainConfig,
    cached_sae,
    calibrate_l0,
    collect_activations,
    decode,
    encode,
    roundtrip_check,
    sae_metadata,
    sae_site,
    save_sae,
    train_sae,
)
from interp.sites import Site

from . import AtomsConfig
from .metric import Metric, estimate_metric, massive_dims, pair_angles, sample_pairs, whitened_norm_sq
from .synthetic import atom_match, make_synthetic, recovery
from .units import UnitCodes, evaluate_units, neuron_codes, sae_codes


def run(cfg: AtomsConfig, ctx: RunContext) -> None:
    model = ctx.model
    site = cfg.site
    with ctx.timed("collection"):  # 1. activations, split by sequence
        windows, corpus = corpus_windows(model, cfg)
        buf = collect(model, windows, cfg, progress=ctx.progress)
        split = split_sequences(buf, site, cfg.heldout_frac, ctx.rng)
    train, held = buf.acts[site][split.train], buf.acts[site][split.held]
    ctx.log.info("collected %d train / %d held-out tokens at %s", len(train), len(held), site)
    ctx.check_finite("activations", train)

    with ctx.timed("metric"):  # 2-3. the AIP metric and the representation shift at every site
        metrics_by_site = {site: estimate_metric(train, cfg.ridge)}
        angle_rows, shift = [], {}
        for s in [site, *cfg.angle_sites]:
            sp = split if s == site else split_sequences(buf, s, cfg.heldout_frac, ctx.rng, windows_held=split.windows)
            if s not in metrics_by_site:
                metrics_by_site[s] = estimate_metric(buf.acts[s][sp.train], cfg.ridge)
            frame, means = representation_shift(buf.acts[s][sp.held], buf.seq[s][sp.held].cpu().numpy(),
                                                metrics_by_site[s], cfg.n_pairs, ctx.rng)
            angle_rows.append(frame.assign(hook=s.tl_name))
            shift[s] = means
        metric = metrics_by_site[site]
        w = metric.get(cfg.metric)
    save_metric(ctx, metric, site, cfg, metrics_by_site)
    ctx.save_table("angles", pd.concat(angle_rows, ignore_index=True))

    meta = sae_metadata(model, site, context_size=cfg.ctx_len, dataset=corpus["name"], aip_metric=cfg.metric)
    data_key = json.dumps({"corpus": corpus["sha256"], "n_tokens": cfg.n_tokens, "ctx_len": cfg.ctx_len,
                           "drop": list(cfg.drop_positions), "outlier": cfg.norm_outlier_factor,
                           "heldout_frac": cfg.heldout_frac, "seed": cfg.seed}, sort_keys=True)
    with ctx.timed("training"):  # 4. units: the TSAE in the AIP geometry, the SAE in Euclid
        tsae, sae, cached = train_units(model, site, train, w, cfg, meta, data_key, ctx)
    ctx.log_metrics(saes_from_cache=cached)
    ctx.save_dir("tsae", lambda d: save_sae(tsae, d))
    ctx.save_dir("sae", lambda d: save_sae(sae, d))
    rt = {name: roundtrip_check(s, held[:4096], ctx.path / name) for name, s in (("tsae", tsae), ("sae", sae))}

    with ctx.timed("evaluation"):  # 5-6. faithfulness and stability of the three unit types
        sub = ctx.rng.permutation(len(train))[: min(len(train), cfg.eval_tokens)]
        train_sub = train[torch.as_tensor(sub)]
        eval_idx = torch.as_tensor(np.sort(ctx.rng.permutation(len(held))[: min(len(held), cfg.eval_tokens)]))
        stats = {}
        for uc, recon_train, extra in (
            (neuron_codes(held), train_sub, {}),
            (sae_codes("sae", sae, held), _recon(sae, train_sub), _calib(sae)),
            (sae_codes("tsae", tsae, held), _recon(tsae, train_sub), _calib(tsae)),
        ):
            stats[uc.name] = evaluate_units(uc, held, train_sub, recon_train, metric.mean, w, eval_idx,
                                            cfg.coherence_max_k, cfg.q_levels, extra)
            if uc.name == "tsae":
                tsae_codes = uc
    units = pd.DataFrame([s.row for s in stats.values()])
    ctx.save_table("units", units)
    ctx.save_table("support_stats", pd.concat([s.support for s in stats.values()], ignore_index=True))
    ctx.save_table("q_curve", pd.concat([s.curve for s in stats.values()], ignore_index=True))
    atom_pages(ctx, model, cfg, tsae, tsae_codes, buf, split, windows, w)

    grid = None
    if cfg.grid_d_mults:  # 8. capacity x data grid
        with ctx.timed("grid"):
            grid = capacity_grid(train, held, metric, w, cfg, eval_idx, ctx)
        ctx.save_table("grid", grid)
    synth = None
    if cfg.synthetic:  # 9. synthetic ground truth
        with ctx.timed("synthetic"):
            synth, synth_metrics = synthetic_check(cfg, ctx)
        ctx.save_table("synthetic", synth)
        ctx.log_metrics(**synth_metrics)

    ctx.log_metrics(**summarize(cfg, site, shift, units, rt, grid, metric, held, buf, split))


# ============================================================================= 1. data


def corpus_windows(model, cfg: AtomsConfig) -> tuple[Tensor, dict]:
    """(n_windows, ctx_len) token ids: the corpus cut into windows (BOS first when the tokenizer adds one)."""
    texts = load_texts(cfg.corpus, seed=cfg.seed)
    per_window = cfg.ctx_len - len(cfg.drop_positions)
    want = max(cfg.n_tokens, cfg.angle_tokens if cfg.angle_hooks else 0)
    n_windows = math.ceil(want / per_window * 1.03) + 2  # slack for the outlier filter
    ids = torch.tensor(token_windows(model.tokenizer, texts, n_windows, cfg.ctx_len, model.info.bos_id))
    return ids, corpus_info(cfg.corpus, seed=cfg.seed, texts=texts)


def collect(model, windows: Tensor, cfg: AtomsConfig, progress: bool = False) -> ActivationBuffer:
    budgets = {cfg.site: cfg.n_tokens}
    for s in cfg.angle_sites:
        budgets[s] = max(budgets.get(s, 0), cfg.angle_tokens)
    batches = ({"input_ids": windows[i : i + cfg.batch_seqs],
                "attention_mask": torch.ones_like(windows[i : i + cfg.batch_seqs])}
               for i in range(0, windows.shape[0], cfg.batch_seqs))
    buf = collect_activations(model, batches, budgets, skip_first=len(cfg.drop_positions),
                              norm_outlier_factor=cfg.norm_outlier_factor, progress=progress)
    for s, need in budgets.items():
        if buf.acts[s].shape[0] < min(need, 64):
            raise ConfigError("n_tokens", need, f"the corpus gave only {buf.acts[s].shape[0]} tokens at {s}")
    return buf


@dataclass
class Split:
    train: Tensor
    held: Tensor
    windows: np.ndarray
    """The held-out window ids."""


def split_sequences(buf: ActivationBuffer, site: Site, frac: float, rng: np.random.Generator,
                    windows_held: np.ndarray | None = None) -> Split:
    """Train/held-out token masks at `site`, held out by whole windows (the same windows for every site)."""
    seq = buf.seq[site].cpu().numpy()
    if windows_held is None:
        uniq = np.unique(seq)
        n_held = max(1, int(round(frac * len(uniq))))
        if n_held >= len(uniq):
            raise ConfigError("n_tokens", len(seq), "enough tokens for at least two windows")
        windows_held = np.sort(rng.permutation(uniq)[:n_held])
    held = np.isin(seq, windows_held)
    if held.all() or not held.any():
        raise ConfigError("heldout_frac", frac, f"a split with both train and held-out tokens at {site}")
    return Split(torch.as_tensor(~held), torch.as_tensor(held), windows_held)


# ============================================================================= 2-3. metric and shift


def representation_shift(x: Tensor, seq: np.ndarray, metric: Metric, n_pairs: int,
                         rng: np.random.Generator) -> tuple[pd.DataFrame, dict[str, float]]:
    """Angles of random held-out pairs from different sequences, and their means."""
    i, j = sample_pairs(seq, n_pairs, rng)
    ang = pair_angles(x, i, j, metric)
    frame = pd.DataFrame({"pair_id": np.arange(len(i)), **ang})
    means = {k: float(np.mean(v)) for k, v in ang.items()}
    means["aip_norm_sq"] = whitened_norm_sq(x, metric.uncentered)
    return frame.iloc[:20_000], means


def save_metric(ctx: RunContext, metric: Metric, site: Site, cfg: AtomsConfig, by_site: dict) -> None:
    u, c = metric.uncentered, metric.centered
    ctx.save_tensors("whitening", {
        "mean": metric.mean, "M2": u.moment, "eigvals": u.eigvals, "W": u.W, "W_inv": u.W_inv,
        "cov": c.moment, "eigvals_centered": c.eigvals, "W_centered": c.W, "W_inv_centered": c.W_inv,
    }, metadata={"hook": site.tl_name, "ridge": str(cfg.ridge), "n_tokens": str(metric.n_tokens),
                 "metric": cfg.metric})
    rows = []
    for s, m in by_site.items():
        for kind in ("uncentered", "centered"):
            w = m.get(kind)
            e = w.eigvals.flip(0).cpu().numpy()  # descending
            rows.append(pd.DataFrame({"hook": s.tl_name, "metric": kind, "rank": np.arange(len(e)),
                                      "eigval": e - w.ridge_lambda, "top_dim": _top_dims(w.moment, len(e))}))
    ctx.save_table("spectrum", pd.concat(rows, ignore_index=True))


def _top_dims(moment: Tensor, n: int, k: int = 5) -> np.ndarray:
    """For the k largest eigenvalues, the coordinate that dominates the eigenvector (-1 elsewhere)."""
    _, Q = torch.linalg.eigh(moment)
    out = np.full(n, -1)
    for r in range(min(k, n)):
        out[r] = int(Q[:, -1 - r].abs().argmax())
    return out


# ============================================================================= 4. units


def train_units(model, site: Site, train: Tensor, w, cfg: AtomsConfig, meta: dict, data_key: str,
                ctx: RunContext):
    """(tsae, sae, from_cache): the TSAE on whitened activations and the Euclidean SAE, both calibrated."""
    H = train.shape[1]
    d_sae = int(round(cfg.d_sae_mult * H))
    base = dict(d_sae=d_sae, steps=cfg.steps, batch=cfg.batch, lr=cfg.lr, target_l0=cfg.target_l0,
                calib_tokens=cfg.l0_calib_tokens, init_sparsity=cfg.init_sparsity, seed=cfg.seed)
    tcfg = SAETrainConfig(architecture="jumprelu", jumprelu_bandwidth=cfg.jumprelu_bandwidth,
                          threshold_lr_scale=cfg.threshold_lr_scale, tied=cfg.tied, **base)
    scfg = SAETrainConfig(architecture="standard", **base)
    hits = []

    def get(c: SAETrainConfig, transform, name: str):
        if cfg.sae.cache:
            s, hit = cached_sae(model, site, c, lambda: train, data_key, transform=transform,
                                metadata={**meta, "interp_unit": name}, progress=ctx.progress, device="cpu")
            hits.append(hit)
            return s
        return train_sae(train, c, metadata={**meta, "interp_unit": name}, transform=transform,
                         progress=ctx.progress, device="cpu")

    tsae = get(tcfg, w.transform(), "tsae")
    if cfg.sae.source == "train":
        sae = get(scfg, None, "sae")
    else:
        sae = load_sae_spec(cfg.sae.source, device="cpu", field="sae.source")
        if sae_site(sae) != site:
            raise ConfigError("sae.source", cfg.sae.source, f"an SAE for {site.tl_name}, not {sae_site(sae).tl_name}")
        gen = torch.Generator().manual_seed(cfg.seed + 1)
        calib = train[torch.randperm(len(train), generator=gen)[: cfg.l0_calib_tokens]]
        value, l0 = calibrate_l0(sae, calib, cfg.target_l0)
        sae.cfg.metadata.interp_training = {"calib_value": value, "l0_train_calibrated": l0}
    for name, s in (("tsae", tsae), ("sae", sae)):
        info = s.cfg.metadata.get("interp_training") or {}
        if info.get("seconds") is not None and not all(hits or [False]):
            ctx.log_timings(**{f"seconds_train_{name}": round(info["seconds"], 2),
                               f"train_tokens_per_s_{name}": round(info.get("tokens_per_s") or 0, 1)})
    return tsae, sae, bool(hits) and all(hits)


def _recon(sae, x: Tensor) -> Tensor:
    return decode(sae, encode(sae, x))


def _calib(sae) -> dict:
    info = sae.cfg.metadata.get("interp_training") or {}
    return {"l0_train_calibrated": info.get("l0_train_calibrated"), "calib_value": info.get("calib_value")}


# ============================================================================= atom pages


def atom_pages(ctx: RunContext, model, cfg: AtomsConfig, tsae, codes: UnitCodes, buf: ActivationBuffer,
               split: Split, windows: Tensor, w) -> None:
    """Per-latent statistics and, for the most frequent latents, contexts, activations, logits, neighbours."""
    a = codes.codes  # (n_held, d_sae)
    active = a > 0
    freq = active.float().mean(0)
    max_act = a.amax(0)
    mean_act = a.sum(0) / active.sum(0).clamp_min(1)
    ctx.save_table("tsae_latents", pd.DataFrame({"latent": np.arange(a.shape[1]), "freq": freq.cpu().numpy(),
                                                 "mean_act": mean_act.cpu().numpy(), "max_act": max_act.cpu().numpy()}))
    if cfg.top_latents == 0:
        return
    chosen = freq.topk(min(cfg.top_latents, int((freq > 0).sum()) or 1)).indices
    seq = buf.seq[cfg.site][split.held]
    pos = buf.pos[cfg.site][split.held]
    ctx_rows, act_rows = [], []
    for lat in chosen.tolist():
        col = a[:, lat]
        k = min(cfg.top_contexts, int((col > 0).sum()))
        vals, idx = col.topk(k) if k else (col[:0], torch.zeros(0, dtype=torch.long))
        for rank, (v, i) in enumerate(zip(vals.tolist(), idx.tolist())):
            s, p = int(seq[i]), int(pos[i])
            lo, hi = max(0, p - 8), min(windows.shape[1], p + 9)
            toks = model.to_str_tokens(windows[s, lo:hi])
            ctx_rows.append({"latent": lat, "rank": rank, "seq_id": s, "pos": p, "act": v, "context": toks,
                             "center": p - lo})
        nz = col[col > 0]
        if len(nz) > 2000:
            nz = nz[torch.as_tensor(np.sort(ctx.rng.permutation(len(nz))[:2000]))]
        act_rows.append(pd.DataFrame({"latent": lat, "act": nz.cpu().numpy()}))
    ctx.save_table("tsae_top_contexts", pd.DataFrame(ctx_rows))
    ctx.save_table("tsae_acts", pd.concat(act_rows, ignore_index=True))
    # top +/- logits of the decoder rows (W_dec row x unembedding, no final norm: approximate)
    with torch.no_grad():
        rows = tsae.W_dec[chosen].float()
        logits = rows @ model.unembed_weight.detach().float().cpu().T  # (latents, vocab)
    logit_rows = []
    for li, lat in enumerate(chosen.tolist()):
        for sign, name in ((1, "+"), (-1, "-")):
            vals, ids = (sign * logits[li]).topk(10)
            for rank, (v, t) in enumerate(zip(vals.tolist(), ids.tolist())):
                logit_rows.append({"latent": lat, "direction": name, "rank": rank,
                                   "token": model.tokenizer.decode([t]), "logit": sign * v})
    ctx.save_table("tsae_logits", pd.DataFrame(logit_rows))
    # nearest atoms by AIP cosine
    d = tsae.W_dec.detach().double() @ w.W.double()
    d = d / d.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    cos = d[chosen] @ d.T
    cos[torch.arange(len(chosen)), chosen] = -2
    vals, ids = cos.topk(5, dim=-1)
    ctx.save_table("tsae_neighbors", pd.DataFrame([
        {"latent": lat, "rank": r, "neighbor": int(ids[li, r]), "cos_aip": float(vals[li, r])}
        for li, lat in enumerate(chosen.tolist()) for r in range(vals.shape[1])]))


# ============================================================================= 8. grid


def capacity_grid(train: Tensor, held: Tensor, metric: Metric, w, cfg: AtomsConfig, eval_idx: Tensor,
                  ctx: RunContext) -> pd.DataFrame:
    """A TSAE per (d_sae, n_train) cell, identical steps/batch/lr/target; R², L0, q* on the common held-out set."""
    H = train.shape[1]
    perm = torch.as_tensor(ctx.rng.permutation(len(train)))
    rows, timings = [], {}
    transform = w.transform()
    for n_frac in sorted(cfg.grid_n_fracs):
        n = max(2, int(round(n_frac * len(train))))
        cell_train = train[perm[:n]]
        fit_sub = cell_train[: min(n, cfg.eval_tokens)]
        for d_mult in sorted(cfg.grid_d_mults):
            d_sae = max(1, int(round(d_mult * H)))
            gcfg = SAETrainConfig(architecture="jumprelu", d_sae=d_sae, steps=cfg.grid_steps, batch=cfg.grid_batch,
                                  lr=cfg.lr, target_l0=cfg.target_l0, jumprelu_bandwidth=cfg.jumprelu_bandwidth,
                                  threshold_lr_scale=cfg.threshold_lr_scale, init_sparsity=cfg.init_sparsity,
                                  tied=cfg.tied, calib_tokens=min(cfg.l0_calib_tokens, n), seed=cfg.seed)
            t0 = time.perf_counter()
            cell = train_sae(cell_train, gcfg, transform=transform, device="cpu")
            uc = sae_codes("tsae", cell, held)
            st = evaluate_units(uc, held, fit_sub, _recon(cell, fit_sub), metric.mean, w, eval_idx,
                                cfg.coherence_max_k, cfg.q_levels)
            r = st.row
            rows.append({"d_sae": d_sae, "d_mult": d_mult, "n_train": n, "r2_aip_train": r["r2_aip_train"],
                         "r2_aip_heldout": r["r2_aip_heldout"], "r2_euclid_heldout": r["r2_euclid_heldout"],
                         "l0_mean": r["l0_mean"], "l0_median": r["l0_median"], "q_star": r["q_star"],
                         "dead_frac": r["dead_frac"], "l0_train_calibrated": _calib(cell)["l0_train_calibrated"]})
            timings[f"seconds_grid_d{d_sae}_n{n}"] = round(time.perf_counter() - t0, 2)
            del cell, uc
    ctx.log_timings(**timings)
    grid = pd.DataFrame(rows)
    grid["memorization_gap"] = grid["r2_aip_train"] - grid["r2_aip_heldout"]
    grid["knee"] = False
    for _n, g in grid.groupby("n_train"):
        ok = g[g["r2_aip_heldout"] >= 0.95 * g["r2_aip_heldout"].max()]
        grid.loc[ok.sort_values("d_sae").index[0], "knee"] = True
    return grid


# ============================================================================= 9. synthetic


def synthetic_check(cfg: AtomsConfig, ctx: RunContext) -> tuple[pd.DataFrame, dict]:
    """Steps 2-8 on known atoms: recovery, R², q*, the knee, and the neuron/angle sanity numbers."""
    gen = ctx.generator(offset=9)
    n_held = max(2, cfg.synth_samples // 10)
    syn = make_synthetic(cfg.synth_dim, cfg.synth_atoms, cfg.synth_k, cfg.synth_samples, n_held, gen)
    metric = estimate_metric(syn.train, cfg.ridge)
    w = metric.get("uncentered")
    seq = np.arange(n_held)
    _, shift = representation_shift(syn.heldout, seq, metric, min(cfg.n_pairs, 20_000), ctx.rng)
    eval_idx = torch.arange(min(n_held, cfg.eval_tokens))
    neu = evaluate_units(neuron_codes(syn.heldout), syn.heldout, syn.train[:n_held], syn.train[:n_held], metric.mean,
                         w, eval_idx, cfg.coherence_max_k, cfg.q_levels)
    rows = []
    for n_frac in sorted(cfg.synth_n_fracs):
        n = max(2, int(round(n_frac * cfg.synth_samples)))
        for d_frac in sorted(cfg.synth_d_fracs):
            d_sae = max(1, int(round(d_frac * cfg.synth_atoms)))
            # whitened samples have norm ~sqrt(H_s): threshold 3 starts L0 near K, not near d_sae/4 as 0.5 would
            scfg = SAETrainConfig(architecture="jumprelu", d_sae=d_sae, steps=cfg.synth_steps, batch=cfg.batch,
                                  lr=cfg.synth_lr, target_l0=float(cfg.synth_k),
                                  jumprelu_bandwidth=cfg.jumprelu_bandwidth, jumprelu_init_threshold=3.0,
                                  threshold_lr_scale=cfg.threshold_lr_scale, init_decoder="data",
                                  init_sparsity=cfg.init_sparsity, tied=cfg.synth_tied,
                                  resample_every=cfg.synth_resample_every, resample_below=1e-3,
                                  calib_tokens=min(cfg.l0_calib_tokens, n), seed=cfg.seed)
            t0 = time.perf_counter()
            sae = train_sae(syn.train[:n], scfg, transform=w.transform(), device="cpu")
            fit = syn.train[: min(n, n_held)]
            st = evaluate_units(sae_codes("tsae", sae, syn.heldout), syn.heldout, fit, _recon(sae, fit), metric.mean,
                                w, eval_idx, cfg.coherence_max_k, cfg.q_levels)
            best = atom_match(syn.atoms, sae.W_dec.detach(), w)
            rows.append({"d_sae": d_sae, "n_train": n, "r2_aip": st.row["r2_aip_heldout"],
                         "r2_aip_train": st.row["r2_aip_train"], "recovery": recovery(best),
                         "best_cos_median": float(best.median()), "q_star": st.row["q_star"],
                         "l0": st.row["l0_mean"], "l0_median": st.row["l0_median"],
                         "dead_frac": st.row["dead_frac"], "seconds": round(time.perf_counter() - t0, 2)})
    frame = pd.DataFrame(rows)
    top_n = frame["n_train"].max()
    at_n = frame[frame["n_train"] == top_n].sort_values("d_sae")
    main = at_n.iloc[(at_n["d_sae"] - cfg.synth_atoms).abs().argsort().iloc[0]]
    out = {
        "synthetic_r2_aip": float(main["r2_aip"]),
        "synthetic_recovery": float(main["recovery"]),
        "synthetic_q_star": float(main["q_star"]),
        "synthetic_l0_median": float(main["l0_median"]),
        "synthetic_r2_aip_neurons": neu.row["r2_aip_heldout"],
        "synthetic_q_star_neurons": neu.row["q_star"],
        "synthetic_angle_mean_euclid_deg": shift["euclid_deg"],
        "synthetic_angle_mean_aip_deg": shift["aip_deg"],
    }
    if len(at_n) > 1:
        small = at_n.iloc[0]
        out["synthetic_r2_aip_small_d"] = float(small["r2_aip"])
        out["synthetic_small_d"] = int(small["d_sae"])
        out["synthetic_knee_gap"] = float(main["r2_aip"] - small["r2_aip"])
    return frame, out


# ============================================================================= summary


def summarize(cfg: AtomsConfig, site: Site, shift: dict, units: pd.DataFrame, rt: dict, grid: pd.DataFrame | None,
              metric: Metric, held: Tensor, buf: ActivationBuffer, split: Split) -> dict:
    u = units.set_index("unit")
    main = shift[site]
    out = {
        "angle_mean_euclid_deg": main["euclid_deg"],
        "angle_mean_aip_deg": main["aip_deg"],
        "angle_mean_aip_centered_deg": main["aip_centered_deg"],
        "angle_mean_euclid_centered_deg": main["euclid_centered_deg"],
        "aip_norm_sq_heldout": main["aip_norm_sq"],
        "r2_aip_neurons": u.loc["neurons", "r2_aip_heldout"],
        "q_star_neurons": u.loc["neurons", "q_star"],
        "r2_aip_sae": u.loc["sae", "r2_aip_heldout"],
        "q_star_sae": u.loc["sae", "q_star"],
        "r2_aip_tsae": u.loc["tsae", "r2_aip_heldout"],
        "q_star_tsae": u.loc["tsae", "q_star"],
        "r2_euclid_tsae": u.loc["tsae", "r2_euclid_heldout"],
        "r2_euclid_sae": u.loc["sae", "r2_euclid_heldout"],
        "r2_aip_train_tsae": u.loc["tsae", "r2_aip_train"],
        "r2_aip_train_sae": u.loc["sae", "r2_aip_train"],
        "l0_tsae": u.loc["tsae", "l0_mean"],
        "l0_median_tsae": u.loc["tsae", "l0_median"],
        "l0_sae": u.loc["sae", "l0_mean"],
        "l0_median_sae": u.loc["sae", "l0_median"],
        "l0_train_tsae": u.loc["tsae", "l0_train_calibrated"],
        "l0_train_sae": u.loc["sae", "l0_train_calibrated"],
        "unique_frac_tsae": u.loc["tsae", "unique_frac"],
        "unique_frac_sae": u.loc["sae", "unique_frac"],
        "unique_frac_neurons": u.loc["neurons", "unique_frac"],
        "frac_k0_tsae": u.loc["tsae", "frac_k0"],
        "frac_k0_sae": u.loc["sae", "frac_k0"],
        "dead_frac_tsae": u.loc["tsae", "dead_frac"],
        "dead_frac_sae": u.loc["sae", "dead_frac"],
        "saelens_max_rel_err": max(r["max_rel_err"] for r in rt.values()),
        "saelens_roundtrip_ok": all(r["max_rel_err"] <= 1e-4 and r["support_mismatch"] == 0 for r in rt.values()),
        "saelens_hook_name": rt["tsae"]["hook_name"],
        "metric_condition": metric.get(cfg.metric).condition,
        "massive_dims": massive_dims(metric.mean),
        "n_tokens_train": int(split.train.sum()),
        "n_tokens_heldout": int(split.held.sum()),
        "n_outliers_dropped": int(buf.n_outliers[site]),
        "frac_outliers_dropped": buf.n_outliers[site] / max(1, buf.n_seen[site]),
        "d_model": int(held.shape[1]),
        "d_sae": int(round(cfg.d_sae_mult * held.shape[1])),
    }
    for s, m in shift.items():
        if s == site:
            continue
        sfx = f"_l{s.layer}" if s.layer is not None else f"_{s.kind}"
        out[f"angle_mean_euclid_deg{sfx}"] = m["euclid_deg"]
        out[f"angle_mean_aip_deg{sfx}"] = m["aip_deg"]
        out[f"angle_mean_aip_centered_deg{sfx}"] = m["aip_centered_deg"]
        out[f"angle_mean_euclid_centered_deg{sfx}"] = m["euclid_centered_deg"]
    if grid is not None and len(grid):
        top = grid[grid["n_train"] == grid["n_train"].max()].sort_values("d_sae")
        low = grid[grid["n_train"] == grid["n_train"].min()].sort_values("d_sae")
        out["grid_knee_d_at_max_n"] = int(top[top["knee"]]["d_sae"].iloc[0])
        out["grid_max_memorization_gap"] = float(grid["memorization_gap"].max())
        out["grid_r2_gain_at_max_n"] = float(top["r2_aip_heldout"].iloc[-1] - top["r2_aip_heldout"].iloc[0])
        out["grid_gap_gain_at_min_n"] = float(low["memorization_gap"].iloc[-1] - low["memorization_gap"].iloc[0])
    return out

