"""Step 6 (optional): describe SAE features and score the descriptions by generation.

Vectors are an SAE's decoder rows at the adapter's layer (the toolkit's cached SAE for the model,
trained once on the built-in corpus, or any SAELens directory via `sae`). Labels come from a
user file ({latent, label} rows) or, offline, from "token labels": a latent whose top-activating
positions are >= 80 % one token is labelled `the word "<token>"`.

For each latent and adapter, labels are sampled (T = 0.7) at several relative scales of the
vector term; for each label the same model writes k short conversations "exhibiting" it; a
trial hits when the latent fires (> 0) at any position >= 1 of the conversation. A latent's score
is the best hit rate over its labels; the variant's score is the mean over latents. Controls:
another latent's generated labels (random pairing) and the true label itself (a ceiling).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp.errors import ConfigError
from interp.sites import Site

from .inject import generate, render

CONVERSATION = "Write a very short conversation which exhibits '{label}'."
PURITY = 0.8
TOP_POSITIONS = 20
MIN_COUNT = 5


@dataclass
class Feature:
    latent: int
    label: str
    contexts: list[str]


def read_labels(path: str) -> dict[int, str]:
    """{latent: label} from a JSONL of {latent, label} rows (e.g. exported auto-interp explanations)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError("sae_labels_file", path, "an existing JSONL file of {latent, label} rows")
    out = {}
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                out[int(row["latent"])] = str(row["label"]).strip()
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise ConfigError("sae_labels_file", f"{path}:{n}",
                                  f"a JSON object with latent and label ({e})") from None
    return {k: v for k, v in out.items() if v}


def token_labels(top_tokens: list[list[str]], purity: float = PURITY,
                 min_count: int = MIN_COUNT) -> dict[int, tuple[str, float]]:
    """{latent: (label, purity)} for latents whose top-activating tokens (at least `min_count` of
    them) are >= `purity` one token."""
    out = {}
    for latent, toks in enumerate(top_tokens):
        if len(toks) < min_count:
            continue
        tok, n = Counter(t.strip() for t in toks).most_common(1)[0]
        share = n / len(toks)
        if share >= purity and tok and any(c.isalnum() for c in tok):
            out[latent] = (f'the word "{tok}"', share)
    return out


def scaled_soft(adapter, vectors: Tensor, scale: float) -> Tensor:
    """The adapter's output with its vector-dependent part multiplied by `scale` (b + r (f(v) - b))."""
    with torch.no_grad():
        soft = adapter(vectors)
        return adapter.bias + scale * (soft - adapter.bias)


def best_hit_score(hits: np.ndarray) -> float:
    """Mean over latents of the max over labels of the hit rate; hits: (latents, labels, trials) booleans."""
    return float(hits.mean(-1).max(-1).mean()) if hits.size else float("nan")


# ============================================================================= the branch


def run_sae_branch(exp, main, cfg, ctx) -> pd.DataFrame:
    model = exp.model
    layer = cfg.resolved_layer(model.info.n_layers)
    site = Site("resid_post", layer)
    sae, tokens, acts_top = _sae_and_tops(model, site, cfg, ctx)
    w_dec = sae.W_dec.detach().float().cpu()  # (d_sae, d)
    if cfg.sae_labels_file:
        labels = read_labels(cfg.sae_labels_file)
        chosen = [i for i in sorted(labels) if 0 <= i < w_dec.shape[0]][: cfg.sae_max_latents]
        feats = [Feature(i, labels[i], acts_top.get(i, [])) for i in chosen]
    else:
        tl = token_labels([[t for t, _ in acts_top.get(i, [])] for i in range(w_dec.shape[0])])
        order = sorted(tl, key=lambda i: (-tl[i][1], i))[: cfg.sae_max_latents]
        feats = [Feature(i, tl[i][0], [c for _, c in acts_top.get(i, [])]) for i in order]
    if not feats:
        raise ConfigError("sae_branch", cfg.sae_branch, "at least one labelled latent (none qualified)")
    ctx.log.info("SAE branch: %d latents", len(feats))
    latents = [f.latent for f in feats]
    vecs = w_dec[latents]
    ctx.save_tensors("sae_vectors", {"vectors": vecs, "latents": torch.tensor(latents)},
                     metadata={"layer": str(layer), "hook": site.tl_name})

    rows, scores = [], {}
    conv_cache: dict[str, list[str]] = {}
    for variant in cfg.sae_variants:
        ad = main.adapters[variant]
        labels = [[] for _ in feats]
        for j, r in enumerate(cfg.sae_scales):
            soft = scaled_soft(ad, vecs.to(model.device), r)
            gen = generate(model, exp.tmpl, soft, 30, temperature=cfg.sae_temperature, seed=cfg.seed * 1000 + j,
                           pc=exp.pc)
            for i, lab in enumerate(gen):
                labels[i].append(lab)
        hits = _hits(model, sae, site, feats, labels, cfg, conv_cache)  # (latents, labels, trials)
        scores[variant] = best_hit_score(hits)
        for i, f in enumerate(feats):
            rates = hits[i].mean(-1)
            rows.append({"latent": f.latent, "label_true": f.label, "variant": variant, "generated_labels": labels[i],
                         "hit_rates": rates.tolist(), "best_hit_rate": float(rates.max()),
                         "top_contexts": f.contexts[:5]})
        if variant == cfg.sae_variants[-1]:
            perm = np.roll(np.arange(len(feats)), 1)  # each latent gets its neighbour's labels
            other = _hits(model, sae, site, feats, [labels[p] for p in perm], cfg, conv_cache)
            scores["random_labels"] = best_hit_score(other)
    true = _hits(model, sae, site, feats, [[f.label] for f in feats], cfg, conv_cache)
    scores["true_label"] = best_hit_score(true)
    ctx.log_metrics(**{f"sae_gen_score_{k}": v for k, v in scores.items()}, sae_n_latents=len(feats),
                    sae_d_sae=int(w_dec.shape[0]))
    del tokens
    return pd.DataFrame(rows)


def _hits(model, sae, site, feats, labels, cfg, cache) -> np.ndarray:
    """(latents, labels, trials) booleans: latent fires at a position >= 1 of each written conversation."""
    from interp.sae import encode

    from .vectors import _resid_at

    n_lab = max(len(x) for x in labels)
    out = np.zeros((len(feats), n_lab, cfg.sae_trials), dtype=bool)
    todo = sorted({lab for labs in labels for lab in labs if lab not in cache})
    if todo:
        prompts = [render(model, CONVERSATION.format(label=lab))[0] for lab in todo]
        texts = _sample(model, prompts, cfg)
        for k, lab in enumerate(todo):
            cache[lab] = texts[k * cfg.sae_trials:(k + 1) * cfg.sae_trials]
    for i, f in enumerate(feats):
        for j, lab in enumerate(labels[i]):
            convs = cache[lab]
            acts = _resid_at(model, convs, site)  # list of (pos, d)
            for t, a in enumerate(acts):
                codes = encode(sae, a[1:].to(sae.W_dec.device)) if a.shape[0] > 1 else None
                out[i, j, t] = bool(codes is not None and (codes[:, f.latent] > 0).any())
    return out


@torch.no_grad()
def _sample(model, prompts: list[str], cfg, max_new: int = 48, batch: int = 16) -> list[str]:
    """cfg.sae_trials sampled (T = sae_temperature) continuations of each prompt, in prompt order."""
    from transformers import GenerationConfig

    gc = GenerationConfig(max_new_tokens=max_new, do_sample=True, temperature=cfg.sae_temperature, top_k=0, top_p=1.0,
                          pad_token_id=model.tokenizer.pad_token_id or model.tokenizer.eos_token_id)
    rep = [p for p in prompts for _ in range(cfg.sae_trials)]
    out: list[str] = []
    for i in range(0, len(rep), batch):
        enc = model.tokenize(rep[i:i + batch], padding_side="left", templated=model.info.chat)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed * 7919 + i)
            gen = model.hf.generate(**enc, generation_config=gc)
        out += model.tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return out


def _sae_and_tops(model, site: Site, cfg, ctx):
    """The SAE (cached, or trained on the built-in corpus) and each latent's top-activating (token, context)."""
    from interp import load_sae as load_sae_spec
    from interp.data import builtin_corpus, token_windows
    from interp.sae import SAETrainConfig, cached_sae, collect_activations, encode

    seq_len = 64
    n_seqs = max(8, cfg.sae_tokens // seq_len)
    bos = model.info.bos_id  # Gemma's windows start with <bos>, as its texts do; skip_first drops that position
    chunks = token_windows(model.tokenizer, builtin_corpus("train", 0), n_seqs, seq_len, bos)
    ids = torch.tensor(chunks)

    def batches():
        for i in range(0, len(ids), 32):
            yield {"input_ids": ids[i:i + 32], "attention_mask": torch.ones_like(ids[i:i + 32])}

    buf = collect_activations(model, batches(), {site: n_seqs * (seq_len - 1)}, skip_first=1)
    acts = buf.acts[site]
    if cfg.sae.source != "train":
        sae = load_sae_spec(cfg.sae.source, device="cpu", field="sae.source")
        hook = sae.cfg.metadata.hook_name
        if hook != site.tl_name or sae.cfg.d_in != model.info.d_model:
            raise ConfigError("sae.source", cfg.sae.source, f"an SAE on {site.tl_name} (d_in {model.info.d_model}), "
                              f"the adapter's layer; this one reads {hook} (d_in {sae.cfg.d_in}): set layer to match")
    else:
        tcfg = SAETrainConfig(architecture="jumprelu", d_sae=4 * model.info.d_model, steps=cfg.sae.steps, batch=1024,
                              target_l0=16.0, seed=cfg.seed)
        key = f"builtin:train seed0 {n_seqs}x{seq_len} skip1" + ("" if bos is None else f" bos{bos}")
        sae, _ = cached_sae(model, site, tcfg, data_fn=lambda: acts, data_key=key, device="cpu")
    codes = encode(sae, acts)  # (tok, d_sae)
    k = min(TOP_POSITIONS, codes.shape[0])
    top_v, top_i = codes.topk(k, dim=0)  # (k, d_sae)
    seq, pos = buf.seq[site], buf.pos[site]
    tops: dict[int, list[tuple[str, str]]] = {}
    tok = model.tokenizer
    for latent in range(codes.shape[1]):
        items = []
        for v, t in zip(top_v[:, latent].tolist(), top_i[:, latent].tolist()):
            if v <= 0:
                break
            s, p = int(seq[t]), int(pos[t])
            token = tok.decode([chunks[s][p]])
            context = tok.decode(chunks[s][max(0, p - 8):p]) + "[[" + token + "]]"
            items.append((token, context))
        if items:
            tops[latent] = items
    return sae, ids, tops
