"""jlens: does the Jacobian lens read a workspace the logit and tuned lenses miss, and do its directions act?

Method: ../../shared/methods/jlens.md (Gurnee, Sofroniew, Lindsey et al. 2026). The lens comes from `interp.lens`
(the reference estimator, cached); the stages below are plain functions of tensors:
`quality` (KL, top-k accuracy, bridge pass@k), `workspace` (the four statistics, CKA, the band) and
`interventions` (steering, swap, ablation against controls of the same norm and count).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from interp.context import RunContext
from interp.data import bos_id
from interp.errors import ConfigError
from interp.lens import LogitLens
from interp.sites import Site

from . import JLensConfig
from . import interventions as I
from . import workspace as W
from .data import TwoHop, eval_windows, first_token, fit_windows, two_hop_prompts
from .lenses import jacobian_lens, tuned_lens
from .quality import last_position_ranks, next_token_stats, pass_at_k, rank_of
from .readout import readout_frame

LENSES = ("logit", "tuned", "jacobian")


def run(cfg: JLensConfig, ctx: RunContext) -> None:
    with ctx.timed("model"):  # the load, when this process has not loaded the model yet
        model = ctx.model
    n_layers, bos = model.info.n_layers, bos_id(model.tokenizer)
    with ctx.timed("data"):  # 1. data
        fit_ids = fit_windows(model.tokenizer, bos, cfg.seed, cfg.n_fit_prompts, cfg.fit_seq_len)
        held = eval_windows(model.tokenizer, bos, cfg.seed, cfg.n_eval_texts, cfg.eval_seq_len)
        tuned_ids = fit_windows(model.tokenizer, bos, cfg.seed + 1, max(1, cfg.tuned_tokens // cfg.fit_seq_len),
                                cfg.fit_seq_len)
        prompts = two_hop_prompts(cfg.relations, cfg.max_facts)
    with ctx.timed("keep"):
        kept = known_facts(model, prompts, cfg.keep_rank)
    with ctx.timed("fit"):  # 2. lenses
        jl, info = jacobian_lens(model, cfg, [torch.tensor(w) for w in fit_ids], ctx.progress)
    with ctx.timed("tuned"):
        tl, tinfo = tuned_lens(model, cfg, tuned_ids, ctx.progress)
    ctx.log_timings(lens_cached=bool(info.get("cached")), tuned_cached=bool(tinfo.get("cached")),
                    seconds_lens_fit=info.get("fit_seconds"), seconds_tuned_fit=tinfo.get("fit_seconds"))
    lenses = {"logit": LogitLens(n_layers), "tuned": tl, "jacobian": jl}
    transports = {name: lens.transport for name, lens in lenses.items()}
    n_read = jl.target_layer + 1  # layers every lens reads: the J-lens reads none above its target
    with ctx.timed("quality"):  # 3. per-layer quality
        stats = next_token_stats(model, transports, held, n_read, cfg.top_k)
        bridge = bridge_ranks(model, transports, kept, n_read)
    with ctx.timed("workspace"):  # 4. the band
        norm_jac = I.norm_jacobian(model, final_residuals(model, held, jl.target_layer))
        quality, cka, band = workspace(model, cfg, lenses, stats, bridge, norm_jac, ctx.generator(1))
    layer, layer_from = intervention_layer(cfg, band, n_layers, jl)
    with ctx.timed("interventions"), ctx.weights_unchanged("the interventions"):  # 5. interventions
        effects, frames, orth = intervene(model, cfg, lenses, layer, kept, norm_jac, ctx)
    ctx.check_finite("lens quality", quality[["kl", "topk_acc", "kurtosis"]].to_numpy())

    ctx.save_table("quality", quality)
    ctx.save_tensors("cka", {"jacobian": torch.tensor(cka)})
    ctx.save_table("effects", effects)
    for name, frame in frames.items():
        ctx.save_table(name, frame)
    ctx.save_table("prompts", prompt_table(prompts, kept))
    grid_prompt = kept[0].prompt if kept else prompts[0].prompt
    with ctx.timed("grid"):  # the page's readout grid: every lens, layer and position of one prompt
        tokens, grid = readout_frame(model, lenses, grid_prompt, top_k=5)
    ctx.save_table("grid", grid)
    ctx.save_table("grid_tokens", pd.DataFrame({"position": range(len(tokens)), "token": tokens}))
    ctx.save_tensors("fit_tokens", {"input_ids": torch.tensor(fit_ids)})
    ctx.save_lens("lens", jl)  # lens.pt, the reference format in float32
    ctx.log_metrics(**summarize(quality, effects, orth, band, layer, layer_from, len(prompts), len(kept),
                                n_layers, jl))


# ----------------------------------------------------------------------------- 1. data


@torch.no_grad()
def known_facts(model, prompts: list[TwoHop], keep_rank: int) -> list[TwoHop]:
    """The prompts whose two one-hop facts the model gets right: each answer's first token within its top
    `keep_rank` at the last position."""
    if not prompts:
        return []
    tok = model.tokenizer
    texts = [p.hop1 for p in prompts] + [p.hop2 for p in prompts]
    want = torch.tensor([first_token(tok, p.bridge) for p in prompts] + [first_token(tok, p.answer) for p in prompts])
    ranks = []
    for i in range(0, len(texts), 16):
        enc = model.tokenize(texts[i:i + 16], padding_side="left")
        logits = I.last_logits(model, enc["input_ids"], enc["attention_mask"])
        ranks.append(rank_of(logits, want[i:i + 16].to(logits.device)).cpu())
    r = torch.cat(ranks)
    n = len(prompts)
    return [p for i, p in enumerate(prompts) if r[i] < keep_rank and r[n + i] < keep_rank]


def prompt_table(prompts: list[TwoHop], kept: list[TwoHop]) -> pd.DataFrame:
    keep = {(p.landmark, p.relation) for p in kept}
    return pd.DataFrame([{**p.__dict__, "kept": (p.landmark, p.relation) in keep} for p in prompts])


# ----------------------------------------------------------------------------- 3. quality


def bridge_ranks(model, transports, kept: list[TwoHop], n_layers: int) -> dict[str, torch.Tensor]:
    """Rank of the bridge entity's first token in each lens's readout at the last position of every kept two-hop
    prompt: lens -> (layer, prompt); empty when none was kept."""
    if not kept:
        return {name: torch.zeros(n_layers, 0, dtype=torch.long) for name in [*transports, "model"]}
    enc = model.tokenize([p.prompt for p in kept], padding_side="left")
    ids = torch.tensor([first_token(model.tokenizer, p.bridge) for p in kept])
    return last_position_ranks(model, transports, enc, n_layers, ids)


# ----------------------------------------------------------------------------- 4. workspace


@torch.no_grad()
def workspace(model, cfg: JLensConfig, lenses, stats, bridge, norm_jac,
              gen) -> tuple[pd.DataFrame, np.ndarray, tuple]:
    """The per-(lens, layer) quality table with the workspace statistics (layers up to the J-lens's target), the
    Jacobian lens's CKA matrix and the band `workspace.pick_band` picks (None: no band). `norm_jac`: the final
    norm's averaged Jacobian (`interventions.norm_jacobian`)."""
    n_layers, d = lenses["jacobian"].target_layer + 1, model.info.d_model
    gram = norm_jac.T @ W.gram_of(model.unembed_weight.detach()) @ norm_jac  # (W N)^T (W N), one vocabulary product
    eye = torch.eye(d, device=model.device)
    eff_eye: list[float] = []  # the identity's (the logit lens; every lens at the target) is computed once

    def eff_dim(m: torch.Tensor) -> float:
        if not torch.equal(m, eye):
            return W.participation_ratio(gram, m)
        if not eff_eye:
            eff_eye.append(W.participation_ratio(gram, m))
        return eff_eye[0]

    rows = []
    mats: dict[str, list[torch.Tensor]] = {}
    for name, lens in lenses.items():
        s = stats[name]
        mats[name] = [I.linear_part(lens.transport, layer, d, model.device) for layer in range(n_layers)]
        passk = pass_at_k(bridge[name], cfg.top_k)
        for layer in range(n_layers):
            ac = W.autocorrelation(s["top1"][layer], 20, gen)
            rows.append({"lens": name, "layer": layer, "kl": float(s["kl"][layer]),
                         "topk_acc": float(s["topk_acc"][layer]), "top1_acc": float(s["top1_acc"][layer]),
                         "kurtosis": float(s["kurtosis"][layer]), "autocorr": ac["obs"],
                         "autocorr_null": ac["null_mean"], "autocorr_null_q95": ac["null_q95"],
                         "eff_dim": eff_dim(mats[name][layer]),
                         "bridge_pass": float(passk["rate"][layer]), "bridge_lo": float(passk["lo"][layer]),
                         "bridge_hi": float(passk["hi"][layer]), "n_bridge": int(passk["n"][layer])})
    quality = pd.DataFrame(rows)
    target = lenses["jacobian"].target_layer
    cka = W.cka_matrix(mats["jacobian"])
    jq = quality[quality["lens"] == "jacobian"].set_index("layer").loc[: target - 1]
    band = W.pick_band(jq["topk_acc"].to_numpy(), float(stats["model"]["topk_acc"]), jq["autocorr"].to_numpy(),
                       jq["autocorr_null_q95"].to_numpy(), cka[:target, :target])
    return quality, cka, band


def final_residuals(model, held, target: int, n: int = 32) -> torch.Tensor:
    """Up to n residuals at the target layer (positions >= 1) of the held-out text, for the final norm's Jacobian."""
    ids = torch.tensor([list(w) for w in held[:4]], device=model.device)
    with torch.no_grad():
        resid = model.forward_until(ids, Site("resid_post", target), None)
    return resid[:, 1:].reshape(-1, model.info.d_model)[:n].float()


def intervention_layer(cfg: JLensConfig, band, n_layers: int, jl) -> tuple[int, str]:
    """(layer, why): the configured one, else the middle of the band, else the middle layer (below the target)."""
    if cfg.layer is not None:
        layer = int(cfg.layer) % n_layers
        if layer >= jl.target_layer:
            raise ConfigError("layer", cfg.layer, f"a layer below the lens's target layer {jl.target_layer}")
        return layer, "config"
    if band is not None:
        return (band[0] + band[1]) // 2, "band"
    return min(n_layers // 2, jl.target_layer - 1), "middle"


# ----------------------------------------------------------------------------- 5. interventions


def intervene(model, cfg: JLensConfig, lenses, layer: int, kept: list[TwoHop], norm_jac, ctx: RunContext):
    """Steering, swap and ablation at resid_post(layer) on the kept prompts, each lens's directions against random
    ones; returns the effect summary, the per-prompt frames and the swap's measured orthogonal change. `norm_jac`:
    the final norm's averaged Jacobian (`interventions.norm_jacobian`). One unedited forward gives the residual at
    the layer and the output every effect is measured from; the edits run batched (`interventions.edited_logps`)."""
    d = model.info.d_model
    prompts = kept[: cfg.max_intervene]
    if not prompts:
        return pd.DataFrame(columns=["experiment", "method", "measure", "mean", "lo", "hi", "n"]), {}, {}
    gen = ctx.generator(2, device="cpu")
    tok = model.tokenizer
    w_u = model.unembed_weight.detach()
    dirs = {name: I.directions_of(w_u, norm_jac, I.linear_part(lens.transport, layer, d, model.device))
            for name, lens in lenses.items()}
    enc = model.tokenize([p.prompt for p in prompts], padding_side="left")
    at_layer: list[torch.Tensor] = []
    with model.hooks([(Site("resid_post", layer), lambda act: at_layer.append(act.detach().clone()))]):
        base = I.last_logp(model, enc)
    resid = at_layer[0]
    size = cfg.steer_scale * float(resid[:, -1].float().norm(dim=-1).mean())

    answers = sorted({first_token(tok, p.answer) for p in prompts})
    pick = ctx.rng.permutation(len(answers))[: cfg.n_steer_tokens]
    targets = torch.tensor([answers[i] for i in sorted(pick)])
    rand_steer = I.random_directions(len(targets), d, gen, model.device)
    steer = I.steering(model, layer, enc, targets, {**dirs, "random": lambda ids: rand_steer[: len(ids)]}, size, base)

    src, tgt, ans_s, ans_t = swap_pairs(tok, prompts, ctx.rng)
    rand_pair = I.random_directions(2 * len(prompts), d, gen, model.device).reshape(len(prompts), 2, d)
    pair = {name: I.pair_directions(f) for name, f in dirs.items()}
    pair["random"] = lambda s, t: rand_pair.transpose(1, 2)
    swap, orth = I.swap(model, layer, enc, src, tgt, ans_s, ans_t, pair, base)

    abl = {}
    for name, lens in lenses.items():
        top = lens.readout(model, layer, resid[:, -1]).float().topk(cfg.n_ablate, dim=-1).indices  # (b, k)
        abl[name] = dirs[name](top.flatten()).reshape(len(prompts), cfg.n_ablate, d).transpose(1, 2)
    abl["random"] = I.random_directions(len(prompts) * cfg.n_ablate, d, gen, model.device).reshape(
        len(prompts), cfg.n_ablate, d).transpose(1, 2)
    ablate = I.ablation(model, layer, enc, abl, base)

    effects = pd.concat([
        I.summarize_effects(steer, "dlogp", cfg.n_boot, ctx.rng).assign(experiment="steer"),
        I.summarize_effects(steer, "rank", cfg.n_boot, ctx.rng).assign(experiment="steer"),
        I.summarize_effects(swap, "dlogodds", cfg.n_boot, ctx.rng).assign(experiment="swap"),
        I.summarize_effects(swap.assign(flipped=swap["flipped"].astype(float)), "flipped", cfg.n_boot,
                            ctx.rng).assign(experiment="swap"),
        I.summarize_effects(ablate, "kl", cfg.n_boot, ctx.rng).assign(experiment="ablate"),
        I.summarize_effects(ablate, "removed_frac", cfg.n_boot, ctx.rng).assign(experiment="ablate"),
    ], ignore_index=True).assign(layer=layer)
    return effects, {"steering": steer, "swap": swap, "ablation": ablate}, orth


def swap_pairs(tok, prompts: list[TwoHop], rng: np.random.Generator):
    """Per prompt: (bridge token, another kept country's token, the answer token, that country's answer token for
    the same relation), the other country chosen by `rng` among those whose country and answer tokens differ."""
    from .data import facts

    by_country = {f["country"]: f for f in facts()}
    countries = sorted({p.bridge for p in prompts} | set(by_country))
    src, tgt, a_s, a_t = [], [], [], []
    for p in prompts:
        ok = [c for c in countries if first_token(tok, c) != first_token(tok, p.bridge)
              and first_token(tok, by_country[c][p.relation]) != first_token(tok, p.answer)]
        other = ok[int(rng.integers(len(ok)))]
        src.append(first_token(tok, p.bridge))
        tgt.append(first_token(tok, other))
        a_s.append(first_token(tok, p.answer))
        a_t.append(first_token(tok, by_country[other][p.relation]))
    return tuple(torch.tensor(x) for x in (src, tgt, a_s, a_t))


# ----------------------------------------------------------------------------- files and metrics


def _mid(n_layers: int) -> slice:
    return slice(n_layers // 3, 2 * n_layers // 3)


def summarize(quality: pd.DataFrame, effects: pd.DataFrame, orth: dict, band, layer: int, layer_from: str,
              n_total: int, n_kept: int, n_layers: int, jl) -> dict:
    mid = _mid(n_layers)
    out: dict = {"n_two_hop_total": n_total, "n_two_hop_kept": n_kept, "n_layers": n_layers,
                 "target_layer": jl.target_layer, "n_fit_prompts": jl.n_prompts,
                 "band_first": None if band is None else int(band[0]),
                 "band_last": None if band is None else int(band[1]), "has_band": band is not None,
                 "intervention_layer": layer, "intervention_layer_from": layer_from}
    for name in LENSES:
        q = quality[quality["lens"] == name].set_index("layer").iloc[mid]
        out[f"kl_mid_{name}"] = round(float(q["kl"].mean()), 6)
        out[f"topk_acc_mid_{name}"] = round(float(q["topk_acc"].mean()), 6)
        out[f"bridge_pass_mid_{name}"] = round(float(q["bridge_pass"].mean()), 6)
    out["jacobian_bridge_best_mid"] = bool(out["bridge_pass_mid_jacobian"] > max(
        out["bridge_pass_mid_logit"], out["bridge_pass_mid_tuned"]))
    out["jacobian_kl_worst_mid"] = bool(out["kl_mid_jacobian"] > max(out["kl_mid_logit"], out["kl_mid_tuned"]))
    for _, r in effects.iterrows():
        key = f"{r['experiment']}_{r['measure']}_{r['method']}"
        out[key] = round(float(r["mean"]), 6)
        out[f"{key}_lo"], out[f"{key}_hi"] = round(float(r["lo"]), 6), round(float(r["hi"]), 6)
        out[f"n_{r['experiment']}"] = int(r["n"])
    for method, v in orth.items():
        out[f"swap_orth_change_max_{method}"] = float(v)
    if "ablate_kl_random" in out and out["ablate_kl_random"] > 0:
        out["ablate_kl_ratio_jacobian_random"] = round(out["ablate_kl_jacobian"] / out["ablate_kl_random"], 6)
    return out
