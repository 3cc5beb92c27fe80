"""The transcoder stage: the training chunks, the set (trained here and cached, or loaded), its quality, and the
top held-out contexts of the features a graph keeps."""

from __future__ import annotations

import re
import time

import pandas as pd
import torch
from torch import Tensor

from interp import batched
from interp.data import builtin_corpus, corpus_info, load_texts, token_windows
from interp.sae import (
    Transcoders,
    TranscoderTrainConfig,
    cached_transcoders,
    collect_stacked,
    load_transcoders,
    train_transcoders,
    transcoder_quality,
)
from interp.sites import Site

from . import CircuitsConfig


def chunks(model, cfg: CircuitsConfig) -> tuple[Tensor, Tensor]:
    """(train, held-out) token chunks (n, seq_len) of `data`, BOS first where the tokenizer adds one."""
    texts = builtin_corpus("all", cfg.seed) if cfg.data == "builtin:all" else load_texts(cfg.data, seed=cfg.seed)
    n_train = -(-cfg.train_tokens // (cfg.seq_len - 1)) if cfg.transcoders == "train" else 0
    ids = torch.tensor(token_windows(model.tokenizer, texts, n_train + cfg.eval_seqs, cfg.seq_len, model.info.bos_id))
    return ids[:n_train], ids[n_train : n_train + cfg.eval_seqs]


def pairs(model, ids: Tensor, n_tokens: int, progress: bool = False, dtype: torch.dtype = torch.float32
          ) -> tuple[Tensor, Tensor]:
    """(X, Y): every layer's MLP input and output at the same `n_tokens` tokens (positions >= 1), (tok, layer, d),
    written in place (the training buffer in bfloat16: 100k tokens of SmolLM2's 30 layers are 6.9 GB)."""
    L = model.info.n_layers
    X, Y = collect_stacked(model, batched({"input_ids": ids}, 16), [[Site("mlp_in", layer) for layer in range(L)],
                                                  [Site("mlp_out", layer) for layer in range(L)]],
                           n_tokens, skip_first=1, dtype=dtype, progress=progress)
    return X, Y


def _pretrained(model, spec: str) -> Transcoders:
    """Per-layer SAELens transcoders of a release (downloaded; the config allows it only with INTERP_ONLINE=1),
    refused unless they read and write the model's own mlp_in / mlp_out hooks. Not exercised offline: the
    conversion (`interp.sae.transcoder.from_saelens`) is tested on local SAELens directories."""
    from interp import load_sae
    from interp.errors import ConfigError
    from interp.sae import from_saelens

    release, _, template = spec[len("saelens:"):].partition("/")
    saes = [load_sae(f"saelens:{release}/{template.format(l=layer)}", device="cpu", field="transcoders")
            for layer in range(model.info.n_layers)]
    for layer, sae in enumerate(saes):
        got = (getattr(sae.cfg.metadata, "hook_name", None), getattr(sae.cfg.metadata, "hook_name_out", None))
        want = (Site("mlp_in", layer).tl_name, Site("mlp_out", layer).tl_name)
        if got != want:
            raise ConfigError("transcoders", spec, f"transcoders on {want[0]} -> {want[1]} (layer {layer} of this "
                              f"release reads {got[0]} and writes {got[1]})")
    return from_saelens(saes)


def train_config(cfg: CircuitsConfig) -> TranscoderTrainConfig:
    return TranscoderTrainConfig(kind=cfg.kind, activation=cfg.activation, d_transcoder=cfg.d_transcoder,
                                 steps=cfg.steps, batch=cfg.train_batch, lr=cfg.lr, target_l0=cfg.target_l0,
                                 k=max(1, round(cfg.target_l0)), seed=cfg.seed)


def obtain(model, cfg: CircuitsConfig, train_ids: Tensor, progress: bool = False) -> tuple[Transcoders, dict]:
    """The transcoder set and how it was had: {"source", "from_cache", "seconds", ...}."""
    t0 = time.perf_counter()
    if cfg.transcoders.startswith("saelens:"):
        tc = _pretrained(model, cfg.transcoders)
        return tc.to(model.device), {"source": cfg.transcoders, "from_cache": False,
                                     "seconds": time.perf_counter() - t0}
    if cfg.transcoders != "train":
        from interp.errors import ConfigError

        where = cfg.transcoders
        if where.startswith("circuit-tracer:"):  # the config refuses this offline; not exercised here
            from huggingface_hub import snapshot_download

            where = snapshot_download(where[len("circuit-tracer:"):], allow_patterns=["*.yaml", "*.safetensors"])
        tc = load_transcoders(where, device=model.device)

        if tc.n_layers != model.info.n_layers or tc.spec.d_in != model.info.d_model:
            raise ConfigError("transcoders", cfg.transcoders, f"a set for {model.info.n_layers} layers of d_model "
                              f"{model.info.d_model} (this one: {tc.n_layers} layers, d_in {tc.spec.d_in})")
        hooks = {k: re.sub(r"^blocks\.\d+\.", "blocks.{l}.", str(v)) for k, v in (tc.meta.get("hooks") or {}).items()}
        want = {"in": Site("mlp_in", 0).tl_name.replace(".0.", ".{l}."),
                "out": Site("mlp_out", 0).tl_name.replace(".0.", ".{l}.")}
        if hooks and {k: hooks.get(k) for k in want} != want:
            raise ConfigError("transcoders", cfg.transcoders, f"a set reading {want['in']} and writing "
                              f"{want['out']} (this one reads {hooks.get('in')} and writes {hooks.get('out')})")
        return tc, {"source": cfg.transcoders, "from_cache": False, "seconds": time.perf_counter() - t0}
    tcfg = train_config(cfg)
    meta = {"model": model.info.name, "data": corpus_info(cfg.data, seed=cfg.seed)}

    def data():
        return pairs(model, train_ids, cfg.train_tokens, progress, dtype=torch.bfloat16)

    if cfg.cache:
        key = f"circuits {cfg.data} seed{cfg.seed} {train_ids.shape[0]}x{cfg.seq_len} skip1 n{cfg.train_tokens}"
        tc, hit = cached_transcoders(model, tcfg, data, key, meta=meta, progress=progress, device=model.device)
    else:
        X, Y = data()
        tc, hit = train_transcoders(X, Y, tcfg, meta=meta, progress=progress, device=model.device), False
    info = {"source": "train", "from_cache": hit, "seconds": time.perf_counter() - t0,
            "train_seconds": tc.meta.get("training", {}).get("seconds")}
    return tc, info


def quality(model, tc: Transcoders, eval_ids: Tensor) -> tuple[pd.DataFrame, dict]:
    """Per-layer quality table and its summary, on the held-out chunks."""
    n = eval_ids.shape[0] * (eval_ids.shape[1] - 1)
    X, Y = pairs(model, eval_ids, n)
    q = transcoder_quality(model, tc, X, Y, eval_ids)
    L = tc.n_layers
    table = pd.DataFrame({"layer": range(L), "fve": q["fve"], "l0": q["l0"], "dead_fraction": q["dead_fraction"],
                          "loss_zero": q["loss_zero"] or [float("nan")] * L,
                          "loss_spliced": q["loss_spliced"] or [float("nan")] * L,
                          "recovered": q["recovered"] or [float("nan")] * L})
    summary = {"fve_mean": float(table.fve.mean()), "l0_mean": float(table.l0.mean()),
               "dead_fraction_mean": float(table.dead_fraction.mean()), "loss_clean": q["loss_clean"],
               "recovered_mean": float(table.recovered.mean()), "recovered_min": float(table.recovered.min()),
               "loss_spliced_all": q["loss_spliced_all"], "loss_zero_all": q["loss_zero_all"],
               "recovered_all": q["recovered_all"]}
    return table, summary


def _keeper(box: dict, key):
    def hook(v):
        box[key] = v
    return hook


@torch.no_grad()
def top_contexts(model, tc: Transcoders, ids: Tensor, feats: list[tuple[int, int]], n_top: int,
                 left: int = 10, right: int = 3) -> pd.DataFrame:
    """The `n_top` held-out tokens where each (layer, feature) fires most (positions >= 1), with their windows."""
    if not feats:
        return pd.DataFrame(columns=["layer", "feature", "rank", "activation", "seq", "pos", "tokens", "values"])
    by_layer: dict[int, list[int]] = {}
    for layer, idx in feats:
        by_layer.setdefault(layer, []).append(idx)
    vals = {layer: [] for layer in by_layer}
    for b in batched({"input_ids": ids}, 16):
        x = b["input_ids"].to(model.device)
        got: dict[int, Tensor] = {}
        with model.hooks([(Site("mlp_in", layer), _keeper(got, layer)) for layer in by_layer]):
            model.forward_until(x, Site("mlp_in", max(by_layer)), torch.ones_like(x))
        for layer, idx in by_layer.items():
            a = tc.encode(layer, got[layer].float())[..., idx].cpu()  # (B, pos, m)
            a[:, 0] = 0
            vals[layer].append(a)
    rows = []
    for layer, idx in by_layer.items():
        a = torch.cat(vals[layer])  # (n, pos, m)
        n, P, m = a.shape
        flat = a.reshape(n * P, m)
        top = flat.topk(min(n_top, n * P), dim=0)
        for j, f in enumerate(idx):
            for r in range(top.values.shape[0]):
                v = float(top.values[r, j])
                if v <= 0:
                    break
                s, p = divmod(int(top.indices[r, j]), P)
                lo, hi = max(0, p - left), min(P, p + right + 1)
                rows.append({"layer": layer, "feature": f, "rank": r, "activation": v, "seq": s, "pos": p,
                             "tokens": model.to_str_tokens(ids[s, lo:hi].tolist()),
                             "values": a[s, lo:hi, j].tolist(), "at": p - lo})
    return pd.DataFrame(rows)


@torch.no_grad()
def feature_logits(model, tc: Transcoders, feats: list[tuple[int, int]], k: int = 8) -> pd.DataFrame:
    """Each (layer, feature)'s top promoted and suppressed tokens through its decoder (summed over the layers it
    writes to) and the unembedding, without the final norm (as SAE dashboards show a feature's logit effect)."""
    W = model.unembed_weight.detach().float()  # (vocab, d)
    rows = []
    for layer, idx in feats:
        d = sum(tc.dec(layer, out)[idx].float() for out in tc.out_layers(layer))
        eff = W @ d.to(W.device)
        for sign, name in ((1, "promoted"), (-1, "suppressed")):
            top = (sign * eff).topk(k)
            for r, (v, t) in enumerate(zip(top.values.tolist(), top.indices.tolist(), strict=True)):
                rows.append({"layer": layer, "feature": idx, "direction": name, "rank": r,
                             "token": model.to_str_tokens([t])[0], "value": sign * v})
    return pd.DataFrame(rows, columns=["layer", "feature", "direction", "rank", "token", "value"])
