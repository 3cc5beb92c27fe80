"""SAE feature dashboard: stream text through the model and an SAE, keep per-feature statistics.

Two streamed passes over the same chunks, never holding all activations (state is O(d_sae x kept contexts)):
pass 1 counts firings, sums and maxima and keeps each feature's top-`n_top` contexts (a running top-k merge);
pass 2, once each feature's max is known, fills the histograms of non-zero activations over [0, max] and draws
`n_interval_samples` contexts uniformly from each of `n_intervals` equal-width activation intervals (a reservoir
by random keys). Each kept context stores the feature's value at every token of its window, so the page
highlights tokens. Position 0 (a massive activation on SmolLM2) is never counted, kept or highlighted.
The logit effect is W_dec @ W_U (no final norm, as in SAE dashboards), in chunks of latents.
"""
# host-module: the dashboard's SAE and statistics live on the host; site_codes moves each batch there

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp import load_sae
from interp.context import RunContext
from interp.data import builtin_corpus, corpus_info, load_texts, token_windows
from interp.errors import ConfigError, NumericError
from interp.sae import SAETrainConfig, cached_sae, collect_activations, encode, sae_metadata, sae_site, save_sae
from interp.sae import train_sae as train
from interp.sites import Site, parse_site

from . import SaeFeaturesConfig


def run(cfg: SaeFeaturesConfig, ctx: RunContext) -> None:
    model = ctx.model
    ids = chunks(model, cfg)                                            # 1. data: (n_seqs, seq_len) token ids
    with ctx.timed("sae"):
        sae, site, source = obtain_sae(model, cfg, ids, ctx)            # 2. the SAE
    with ctx.timed("stream"):
        stats = first_pass(model, sae, site, ids, cfg)                  # 3. density, max, top contexts
        second_pass(model, sae, site, ids, cfg, stats, ctx.torch_rng)   # 4. histograms, interval samples
    logits = logit_effects(sae, model, cfg)                              # 5. W_dec @ W_U
    features, contexts = tables(model, stats, logits, cfg)
    ctx.save_table("features", features)
    ctx.save_table("contexts", contexts)
    ctx.save_tensors("histograms", {"act_counts": stats["hist"], "act_max": stats["max"],
                                    "logit_counts": logits["hist"], "logit_range": logits["range"]})
    density = stats["fired"].double() / stats["n"]
    if source == "train":  # the run then holds its SAE, with the densities measured here
        ctx.save_dir("sae", lambda d: save_sae(sae, d, density=density.float()))
    ctx.save_json("sae", {"spec": cfg.sae.source, "hook_name": site.tl_name, "d_sae": int(sae.cfg.d_sae),
                          "d_in": int(sae.cfg.d_in), "architecture": sae.cfg.architecture(),
                          "model": model.info.name, "n_tokens": int(stats["n"]), "seq_len": cfg.seq_len,
                          "data": corpus_info(cfg.data, seed=cfg.seed)})
    ctx.log_metrics(**summary(features, stats))


# ============================================================================= stages


def chunks(model, cfg: SaeFeaturesConfig) -> Tensor:
    """(n_seqs, seq_len) token ids: the text cut into chunks, with BOS first where the tokenizer adds one."""
    texts = builtin_corpus("all", cfg.seed) if cfg.data == "builtin:all" else load_texts(cfg.data, seed=cfg.seed)
    n_train = -(-cfg.sae.train_tokens // (cfg.seq_len - 1)) if cfg.sae.source == "train" else 0
    return torch.tensor(token_windows(model.tokenizer, texts, max(cfg.n_seqs, n_train), cfg.seq_len, model.info.bos_id))


def batches(ids: Tensor, batch_size: int) -> Iterator[dict[str, Tensor]]:
    for i in range(0, ids.shape[0], batch_size):
        b = ids[i : i + batch_size]
        yield {"input_ids": b, "attention_mask": torch.ones_like(b)}


def obtain_sae(model, cfg: SaeFeaturesConfig, ids: Tensor, ctx: RunContext):
    """(sae, site, source): the given SAE (its hook from its config) or one trained on the first chunks."""
    if cfg.sae.source != "train":
        sae = load_sae(cfg.sae.source, device="cpu", field="sae.source")
        site = sae_site(sae)
        model.check_site(site)
        if sae.cfg.d_in != model.info.d_model or site.units != "d_model":
            raise ConfigError("sae.source", cfg.sae.source, f"an SAE on a d_model={model.info.d_model} site of "
                              f"{model.info.name} (this one reads {sae.cfg.d_in} dims at {site})")
        return sae, site, cfg.sae.source
    site = parse_site(cfg.sae.hook)
    tcfg = SAETrainConfig(architecture="jumprelu", d_sae=cfg.sae.d_sae, steps=cfg.sae.steps, batch=1024, lr=2e-3,
                          target_l0=cfg.target_l0, init_sparsity="data", seed=cfg.seed)
    meta = sae_metadata(model, site, context_size=cfg.seq_len, dataset=cfg.data)

    def acts() -> Tensor:
        buf = collect_activations(model, batches(ids, cfg.batch_size), {site: cfg.sae.train_tokens}, skip_first=1,
                                  progress=ctx.progress)
        return buf.acts[site]  # (tok, d_model)

    if cfg.sae.cache:
        key = f"sae_features {cfg.data} seed{cfg.seed} {ids.shape[0]}x{cfg.seq_len} skip1 n{cfg.sae.train_tokens}"
        sae, hit = cached_sae(model, site, tcfg, acts, key, metadata=meta, progress=ctx.progress, device="cpu")
        ctx.log_metrics(sae_from_cache=hit)
    else:
        sae = train(acts(), tcfg, metadata=meta, progress=ctx.progress, device="cpu")
    return sae, site, "train"


def site_codes(model, sae, site: Site, ids: Tensor) -> tuple[Tensor, Tensor]:
    """(codes, valid): SAE codes (batch, pos, d_sae) at `site` with position 0 zeroed, and the (batch, pos) mask."""
    with torch.no_grad():
        x = model.forward_until(ids, site, torch.ones_like(ids)).detach().float().cpu()  # (batch, pos, d_model)
    b, p, d = x.shape
    codes = encode(sae, x.reshape(b * p, d)).reshape(b, p, -1).float()  # (batch, pos, d_sae)
    valid = torch.ones(b, p, dtype=torch.bool)
    valid[:, 0] = False  # position 0 is never an SAE statistic
    codes = codes * valid[..., None]
    if not torch.isfinite(codes).all():
        raise NumericError(f"sae_features: the SAE's codes at {site} hold NaN or inf")
    return codes, valid


def _windows(codes: Tensor, ids: Tensor, b: Tensor, p: Tensor, f: Tensor, left: int, right: int):
    """Windows of `codes[b, p-left : p+right+1, f]` and of `ids` (pads: value 0, token -1); (n, W) each."""
    B, P, _ = codes.shape
    offs = torch.arange(-left, right + 1)  # (W,)
    pos = p[:, None] + offs  # (n, W)
    ok = (pos >= 0) & (pos < P)
    pc = pos.clamp(0, P - 1)
    vals = codes[b[:, None], pc, f[:, None]] * ok  # (n, W)
    toks = torch.where(ok, ids[b[:, None], pc], torch.full_like(pc, -1))  # (n, W)
    return vals, toks


def _merge(state: dict[str, Tensor], key: Tensor, new: dict[str, Tensor], k: int) -> None:
    """Keep, per feature, the k entries of largest `key` among state's and `new`'s; tensors are (k, F, ...)."""
    allk = torch.cat([state["key"], key])  # (k + n, F)
    top = allk.topk(k, dim=0).indices  # (k, F)
    state["key"] = allk.gather(0, top)
    for name, t in new.items():
        cat = torch.cat([state[name], t])  # (k + n, F, ...)
        idx = top.reshape(top.shape + (1,) * (cat.dim() - 2)).expand((k,) + cat.shape[1:])
        state[name] = cat.gather(0, idx)


def _candidates(codes: Tensor, ids: Tensor, key: Tensor, k: int, cfg: SaeFeaturesConfig, seq0: int):
    """The batch's best k entries per feature by `key` (batch*pos, F), with their windows; (k, F, ...) tensors."""
    B, P, F = codes.shape
    kk = min(k, B * P)
    top_key, flat = key.topk(kk, dim=0)  # (kk, F)
    b, p = flat // P, flat % P
    f = torch.arange(F).expand(kk, F)
    vals, toks = _windows(codes, ids, b.reshape(-1), p.reshape(-1), f.reshape(-1), cfg.context_left,
                          cfg.context_right)
    W = vals.shape[1]
    act = codes.reshape(B * P, F).gather(0, flat)  # (kk, F)
    new = {"act": act, "seq": b + seq0, "pos": p, "vals": vals.reshape(kk, F, W), "toks": toks.reshape(kk, F, W)}
    return top_key, new


def _empty(k: int, F: int, W: int) -> dict[str, Tensor]:
    return {"key": torch.full((k, F), -float("inf")), "act": torch.zeros(k, F), "seq": torch.full((k, F), -1),
            "pos": torch.full((k, F), -1), "vals": torch.zeros(k, F, W), "toks": torch.full((k, F, W), -1)}


def first_pass(model, sae, site: Site, ids: Tensor, cfg: SaeFeaturesConfig) -> dict:
    """Firing counts, sums and maxima over positions >= 1 of the first n_seqs chunks, and top-n_top contexts."""
    from tqdm.auto import tqdm

    F = int(sae.cfg.d_sae)
    W = cfg.context_left + cfg.context_right + 1
    fired = torch.zeros(F, dtype=torch.long)
    total = torch.zeros(F, dtype=torch.float64)
    mx = torch.zeros(F)
    top = _empty(cfg.n_top, F, W)
    n = 0
    stream = ids[: cfg.n_seqs]
    for i in tqdm(range(0, stream.shape[0], cfg.batch_size), desc="features: pass 1", leave=False):
        b = stream[i : i + cfg.batch_size]
        codes, valid = site_codes(model, sae, site, b)  # (B, P, F), (B, P)
        flat = codes.reshape(-1, F)
        fired += (flat > 0).sum(0)
        total += flat.sum(0).double()
        mx = torch.maximum(mx, flat.amax(0))
        n += int(valid.sum())
        key = torch.where(flat > 0, flat, torch.full_like(flat, -float("inf")))
        top_key, new = _candidates(codes, b, key, cfg.n_top, cfg, i)
        _merge(top, top_key, new, cfg.n_top)
    return {"fired": fired, "sum": total, "max": mx, "n": n, "top": top}


def second_pass(model, sae, site: Site, ids: Tensor, cfg: SaeFeaturesConfig, stats: dict,
                gen: torch.Generator) -> None:
    """Histograms of non-zero activations over [0, max] per feature, and uniform samples per activation interval."""
    from tqdm.auto import tqdm

    F = int(sae.cfg.d_sae)
    W = cfg.context_left + cfg.context_right + 1
    nb, Q, S = cfg.hist_bins, cfg.n_intervals, cfg.n_interval_samples
    mx = stats["max"].clamp_min(1e-12)  # (F,)
    hist = torch.zeros(F * nb, dtype=torch.float64)
    samples = [_empty(S, F, W) for _ in range(Q)]
    stream = ids[: cfg.n_seqs]
    for i in tqdm(range(0, stream.shape[0], cfg.batch_size), desc="features: pass 2", leave=False):
        b = stream[i : i + cfg.batch_size]
        codes, _ = site_codes(model, sae, site, b)
        flat = codes.reshape(-1, F)  # (B*P, F)
        on = flat > 0
        frac = flat / mx
        bins = (frac * nb).long().clamp(0, nb - 1)  # (B*P, F)
        feat = torch.arange(F).expand_as(bins)
        hist.index_add_(0, (feat * nb + bins)[on], torch.ones(int(on.sum()), dtype=torch.float64))
        interval = (frac * Q).long().clamp(0, Q - 1)
        u = torch.rand(flat.shape, generator=gen)  # random keys: the S largest are a uniform sample
        for q in range(Q):
            key = torch.where(on & (interval == q), u, torch.full_like(u, -float("inf")))
            top_key, new = _candidates(codes, b, key, S, cfg, i)
            _merge(samples[q], top_key, new, S)
    stats["hist"] = hist.reshape(F, nb).float()  # (F, bins)
    stats["samples"] = samples


@torch.no_grad()
def logit_effects(sae, model, cfg: SaeFeaturesConfig, chunk: int = 256) -> dict:
    """Per feature: the n_logits most promoted and suppressed token ids of W_dec @ W_U, and a histogram of it."""
    W_U = model.unembed_weight.detach().float().cpu()  # (vocab, d_model)
    W_dec = sae.W_dec.detach().float().cpu()  # (F, d_model)
    F, k, nb = W_dec.shape[0], cfg.n_logits, cfg.hist_bins
    out = {name: [] for name in ("pos_ids", "pos_vals", "neg_ids", "neg_vals", "hist", "range")}
    for i in range(0, F, chunk):
        lg = W_dec[i : i + chunk] @ W_U.T  # (chunk, vocab)
        pv, pi = lg.topk(k, dim=1)
        nv, ni = (-lg).topk(k, dim=1)
        lo, hi = lg.amin(1), lg.amax(1)  # (chunk,)
        width = (hi - lo).clamp_min(1e-12)
        idx = ((lg - lo[:, None]) / width[:, None] * nb).long().clamp(0, nb - 1)  # (chunk, vocab)
        h = torch.zeros(lg.shape[0], nb).scatter_add_(1, idx, torch.ones_like(lg))
        for name, t in (("pos_ids", pi), ("pos_vals", pv), ("neg_ids", ni), ("neg_vals", -nv), ("hist", h),
                        ("range", torch.stack([lo, hi], 1))):
            out[name].append(t)
    return {name: torch.cat(v) for name, v in out.items()}


# ============================================================================= tables


def _strs(model, toks: Tensor) -> list[str]:
    """Token strings of a window (pads dropped from the ends)."""
    ids = [int(t) for t in toks if t >= 0]
    return model.to_str_tokens(ids) if ids else []


def tables(model, stats: dict, logits: dict, cfg: SaeFeaturesConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """features: one row per latent; contexts: one row per kept context (top and interval samples) of a latent
    that fired, with its window's tokens and the latent's value at each (center: the kept token's index)."""
    F = stats["fired"].shape[0]
    n = max(1, stats["n"])
    left = cfg.context_left
    vocab = {}

    def tok(i: int) -> str:
        if i not in vocab:
            vocab[i] = model.to_str_tokens([i])[0]
        return vocab[i]

    ctx_rows = []
    top_token, top_share = [""] * F, [0.0] * F
    kinds = [("top", stats["top"])] + [(f"interval_{q}", s) for q, s in enumerate(stats["samples"])]
    for kind, st in kinds:
        ok = (st["key"] > -float("inf")).cpu().numpy()  # (k, F)
        act, seq, pos = st["act"].cpu().numpy(), st["seq"].cpu().numpy(), st["pos"].cpu().numpy()
        all_toks, all_vals = st["toks"].cpu().numpy(), st["vals"].cpu().numpy()  # (k, F, W)
        for r, f in zip(*ok.nonzero()):
            toks = all_toks[r, f]
            keep = toks >= 0
            first = int(keep.argmax())
            ctx_rows.append({"feature": int(f), "kind": kind, "rank": int(r), "act": float(act[r, f]),
                             "seq": int(seq[r, f]), "pos": int(pos[r, f]),
                             "tokens": [tok(int(t)) for t in toks[keep]],
                             "values": np.round(all_vals[r, f][keep], 5).tolist(),
                             "center": left - first})
    top = stats["top"]
    for f in range(F):
        ok = top["key"][:, f] > -float("inf")
        if ok.any():
            centers = top["toks"][:, f, left][ok].tolist()
            t, c = Counter(centers).most_common(1)[0]
            top_token[f], top_share[f] = tok(int(t)), c / int(ok.sum())
    fired = stats["fired"].cpu().numpy()
    features = pd.DataFrame({
        "feature": np.arange(F),
        "density": fired / n,
        "n_fired": fired,
        "max_act": stats["max"].cpu().numpy(),
        "mean_act": (stats["sum"] / stats["fired"].clamp_min(1)).float().cpu().numpy(),
        "top_token": top_token,
        "top_token_share": top_share,
        "pos_tokens": [[tok(int(i)) for i in row] for row in logits["pos_ids"]],
        "pos_values": [[round(float(v), 4) for v in row] for row in logits["pos_vals"]],
        "neg_tokens": [[tok(int(i)) for i in row] for row in logits["neg_ids"]],
        "neg_values": [[round(float(v), 4) for v in row] for row in logits["neg_vals"]],
    })
    contexts = pd.DataFrame(ctx_rows, columns=["feature", "kind", "rank", "act", "seq", "pos", "tokens", "values",
                                               "center"])
    return features, contexts


def summary(features: pd.DataFrame, stats: dict) -> dict:
    alive = features["n_fired"] > 0
    pure = features.loc[alive & (features["top_token_share"] >= 0.8)]
    return {
        "n_features": int(len(features)),
        "n_tokens": int(stats["n"]),
        "dead_frac": float(1 - alive.mean()),
        "mean_l0": float(features["density"].sum()),
        "median_density_alive": float(features.loc[alive, "density"].median()) if alive.any() else float("nan"),
        "single_token_frac": float(len(pure) / max(1, int(alive.sum()))),
    }

