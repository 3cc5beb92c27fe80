"""Step 0: the SAE. Any SAELens SAE from disk, or a TopK SAE trained by the toolkit (cached by content hash);
its hook always comes from the SAE's own config. Quality gates on held-out tokens at unpadded positions >= 1.

Training activations are read with the forward stopped at the hook (`interp.sae.collect_activations`),
at valid positions >= 1 only: position 0 is never an SAE input, nor part of b_dec's initial mean, nor of the
quality gates, where it keeps its clean activation in all three CE passes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import ConfigError
from interp.sae import (
    SAETrainConfig,
    cached_sae,
    collect_activations,
    decode,
    encode,
    sae_metadata,
    sae_site,
    train_sae,
)
from interp.sites import Site, parse_site

from .acts import valid_positions


def obtain_sae(model, cfg, train_seqs: Sequence[Sequence[int]], data_key: str, progress: bool = False):
    """(sae, site, info): the configured SAE and the Site its config names.

    cfg.sae.source == "train": a TopK SAE (toolkit loop; W_enc = W_dec^T at init, b_dec = the data mean, unit-norm
    decoder rows, Adam at a constant lr, normalised MSE plus the AuxK dead-latent loss) on the activations of
    `train_seqs`, from the cache when the model, hook, training config and data key match. Otherwise any spec of
    `interp.load_sae` (a SAELens directory, a run directory, `saelens:<release>/<sae_id>` online) loaded as it is.
    """
    if cfg.sae.source == "train":
        site = parse_site(cfg.sae.hook)
        steps = max(1, math.ceil(cfg.sae.train_tokens * cfg.sae_epochs / cfg.sae_batch))
        tcfg = SAETrainConfig(architecture="topk", d_sae=cfg.sae.d_sae, k=cfg.sae_k, steps=steps, batch=cfg.sae_batch,
                              lr=cfg.sae_lr, lr_schedule="constant", init_b_dec="mean", calibrate_l0=False,
                              seed=cfg.seed, **auxk(cfg))
        meta = sae_metadata(model, site, context_size=cfg.seq_len, dataset="sae_falsification training mix")
        acts = lambda: training_activations(model, site, train_seqs, cfg.sae.train_tokens, cfg.batch_size,  # noqa: E731
                                            progress)
        if cfg.sae.cache:
            sae, hit = cached_sae(model, site, tcfg, acts, data_key, metadata=meta, progress=progress,
                                  device=model.device)
        else:
            sae, hit = train_sae(acts(), tcfg, metadata=meta, progress=progress, device=model.device), False
        return sae, sae_site(sae), {"sae_source": "train", "sae_from_cache": hit, "sae_train_steps": steps}
    sae = load_external(cfg.sae.source, model.device)
    try:
        site = sae_site(sae)
    except ValueError as e:
        raise ConfigError("sae.source", cfg.sae.source, f"an SAE whose config names its hook ({e})") from None
    model.check_site(site)
    if sae.cfg.d_in != model.info.d_model or site.units != "d_model":
        raise ConfigError("sae.source", cfg.sae.source, f"an SAE on a d_model={model.info.d_model} site of "
                          f"{model.info.name} (this one reads {sae.cfg.d_in} dims at {site})")
    return sae, site, {"sae_source": cfg.sae.source, "sae_from_cache": False, "sae_train_steps": 0}


def auxk(cfg) -> dict:
    """The AuxK fields of the training config (empty where the core's SAETrainConfig predates them)."""
    if "aux_k" not in SAETrainConfig.__dataclass_fields__:
        return {}
    return {"aux_k": min(cfg.sae_aux_k, cfg.sae.d_sae), "aux_coeff": cfg.sae_aux_coeff,
            "aux_dead_tokens": cfg.sae_aux_dead_tokens}


def load_external(spec: str, device):
    """The SAE `spec` names, through `interp.load_sae`: a SAELens directory, a run directory holding an SAE (e.g.
    atoms'), or `saelens:<release>/<sae_id>` (INTERP_ONLINE=1 only), on `device` (the model's)."""
    from interp import load_sae as load_spec

    return load_spec(spec, device=str(device), field="sae.source")


def data_key(model, cfg, train_texts_sha: str) -> str:
    """What the training buffer depends on (enters the SAE cache key)."""
    blob = {"texts": train_texts_sha, "tokens": cfg.sae.train_tokens, "seq_len": cfg.seq_len, "skip_first": 1,
            "tokenizer": type(model.tokenizer).__name__, "v": 1}
    return json.dumps(blob, sort_keys=True)


def texts_sha(seqs: Sequence[Sequence[int]]) -> str:
    h = hashlib.sha256()
    for s in seqs:
        h.update(np.asarray(s, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()


def training_activations(model, site: Site, seqs: Sequence[Sequence[int]], n_tokens: int, batch_size: int,
                         progress: bool = False) -> Float[Tensor, "tok d"]:
    """Activations at `site` of valid positions >= 1 of `seqs` (token-id lists), forward stopped at the hook."""
    from .acts import pad_ids

    pad = pad_token_id(model.tokenizer)

    def batches():
        for i in range(0, len(seqs), batch_size):
            ids, am = pad_ids(seqs[i : i + batch_size], pad)
            yield {"input_ids": ids, "attention_mask": am}

    buf = collect_activations(model, batches(), {site: n_tokens}, skip_first=1, progress=progress)
    return buf.acts[site]


def pad_token_id(tok) -> int:
    for t in (tok.pad_token_id, tok.eos_token_id, 0):
        if t is not None:
            return int(t)
    return 0


# ============================================================================= quality gates


@dataclass
class Quality:
    explained_variance: float
    ce_recovered: float
    dead_frac: float
    ce_clean: float
    ce_sae: float
    ce_zero: float
    n_tokens: int
    heldout: Tensor
    """(tok, d) held-out activations (positions >= 1), for the SAELens round trip."""


@torch.no_grad()
def quality_gates(model, sae, site: Site, seqs: Sequence[Sequence[int]], n_tokens: int, batch_size: int,
                  progress=None) -> Quality:
    """Explained variance, dead fraction and CE-loss recovered on held-out sequences, positions >= 1 only.

    EV = 1 - sum ||x - x_hat||^2 / sum ||x - mean x||^2 over the held-out tokens; dead = share of latents never
    active on them; CE recovered = (L_zero - L_sae) / (L_zero - L_clean), each the mean next-token CE of the
    predictions made at positions >= 1, from three full passes in which position 0 keeps its clean activation
    and positions >= 1 are left alone, replaced by x_hat, or zeroed. Sequences are used until `n_tokens` valid
    tokens are covered.
    """
    from .acts import pad_ids

    pad = pad_token_id(model.tokenizer)
    d_sae = sae.cfg.d_sae
    active = torch.zeros(d_sae, dtype=torch.bool)
    sse = 0.0
    sum_x = None
    sum_x2 = 0.0
    n = 0
    ce = {"clean": 0.0, "sae": 0.0, "zero": 0.0}
    n_pred = 0
    kept: list[Tensor] = []
    longest = max(len(s) for s in seqs)
    batch_size = max(1, min(batch_size, int(2e8 // (longest * model.info.d_vocab * 4))))  # bounded logits memory
    starts = list(range(0, len(seqs), batch_size))
    for i in (progress(starts, desc="SAE quality") if progress else starts):
        if n >= n_tokens:
            break
        ids, am = pad_ids(seqs[i : i + batch_size], pad)
        ids, am = ids.to(model.device), am.to(model.device)
        valid = valid_positions(am)
        state: dict[str, Tensor] = {}

        def clean_hook(x: Tensor, state=state) -> None:
            state["x"] = x.detach()

        with model.hooks([(site, clean_hook)]):
            logits = model.forward(ids, am)
        x = state["x"][valid].float()  # (tok, d)
        codes = encode(sae, x)
        xhat = decode(sae, codes).float()
        state["xhat"] = xhat
        active |= (codes > 0).any(0).cpu()
        sse += float(((x - xhat) ** 2).sum())
        sum_x = x.double().sum(0) if sum_x is None else sum_x + x.double().sum(0)
        sum_x2 += float((x.double() ** 2).sum())
        n += x.shape[0]
        kept.append(x.cpu())
        pred = valid[:, :-1] & (am[:, 1:] > 0)  # predictions made at positions >= 1 of a real next token
        target = ids[:, 1:]
        ce["clean"] += _ce_sum(logits[:, :-1], target, pred)
        for kind in ("sae", "zero"):
            with model.hooks([(site, _replace(kind, valid, xhat))]):
                ce[kind] += _ce_sum(model.forward(ids, am)[:, :-1], target, pred)
        n_pred += int(pred.sum())
    if n == 0 or n_pred == 0:
        raise ValueError("SAE quality gates: no held-out tokens at positions >= 1")
    sst = sum_x2 - float((sum_x**2).sum()) / n  # sum ||x - mean||^2
    l_clean, l_sae, l_zero = (ce[k] / n_pred for k in ("clean", "sae", "zero"))
    denom = l_zero - l_clean
    return Quality(
        explained_variance=1.0 - sse / sst if sst > 0 else float("nan"),
        ce_recovered=(l_zero - l_sae) / denom if abs(denom) > 1e-12 else float("nan"),
        dead_frac=float((~active).float().mean()),
        ce_clean=l_clean, ce_sae=l_sae, ce_zero=l_zero, n_tokens=n, heldout=torch.cat(kept),
    )


def _replace(kind: str, valid: Tensor, xhat: Tensor):
    """Hook: positions >= 1 replaced by x_hat (sae) or zeroed (zero); position 0 and pads keep their values."""

    def hook(x: Tensor) -> Tensor:
        x = x.clone()
        x[valid] = xhat.to(x) if kind == "sae" else 0.0
        return x

    return hook


def _ce_sum(logits: Tensor, target: Tensor, where: Tensor) -> float:
    logp = logits.float().log_softmax(-1)
    nll = -logp.gather(-1, target[..., None])[..., 0]
    return float(nll[where].double().sum())
