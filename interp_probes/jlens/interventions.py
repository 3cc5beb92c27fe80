"""Interventions in the real model along lens directions, each against controls of the same norm and count.

A lens's direction for token t at layer l is the residual direction that raises t's readout logit most, to first
order: v_t = M_l^T N^T w_t, with w_t the unembedding row of t, N the final norm's Jacobian averaged over real final
residuals (`norm_jacobian`) and M_l the lens's linear part (J_l for the Jacobian lens, I for the logit lens, I + A_l
for the tuned lens). The paper's "row of W_U J_l, read back into the residual". Random directions are the null.

- steering: add s * v_t / |v_t| at the last position (s: a multiple of the mean residual norm at the layer); read
  t's log-probability and rank at the output.
- swap: on every position after the first, write the residual's part in span(v_source, v_target) as
  a v_source + b v_target and exchange a and b; the part orthogonal to the span is unchanged (measured); read the
  log-odds of the target's answer over the source's at the output.
- ablation: project out the directions of the lens's top n tokens at the last position (random: n random
  directions); read KL(original || ablated) at the output.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import intervene
from interp.sites import Site

from .quality import rank_of

LensDirections = Callable[[Int[Tensor, " n"]], Float[Tensor, "n d_model"]]
"""token ids -> their unit directions at the intervention layer (one lens)."""


def norm_jacobian(model, finals: Float[Tensor, "n d_model"]) -> Float[Tensor, "d_model d_model"]:
    """The final norm's Jacobian d norm(x) / dx, averaged over the residuals `finals` (float32)."""
    jac = torch.func.vmap(torch.func.jacrev(lambda x: model.final_norm(x[None])[0]))(finals.detach())
    return jac.float().mean(0)


def linear_part(transport: Callable[[int, Tensor], Tensor], layer: int, d: int, device) -> Float[Tensor, "d d"]:
    """M with transport(layer, h) = M h + c, read from the transport of the identity (float32)."""
    eye = torch.eye(d, device=device)
    zero = torch.zeros(1, d, device=device)
    with torch.no_grad():
        return (transport(layer, eye).float() - transport(layer, zero).float()).T


def directions_of(unembed_w: Float[Tensor, "vocab d"], norm_jac: Float[Tensor, "d d"],
                  m: Float[Tensor, "d d"]) -> LensDirections:
    """The unit directions v_t = M^T N^T w_t / |.| of one lens at one layer."""

    def dirs(ids: Tensor) -> Tensor:
        w = unembed_w[ids.to(unembed_w.device)].float()  # (n, d)
        v = w @ norm_jac.to(w) @ m.to(w)  # rows: (N^T w)^T M = (M^T N^T w)^T
        return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    return dirs


def pair_directions(dirs: LensDirections) -> Callable[[Tensor, Tensor], Tensor]:
    """(source ids, target ids) -> (b, d, 2): the two tokens' directions of one lens, as `swap` takes them."""
    return lambda s, t: torch.stack([dirs(s), dirs(t)], -1)


def random_directions(n: int, d: int, gen: torch.Generator, device) -> Float[Tensor, "n d"]:
    v = torch.randn(n, d, generator=gen).to(device)
    return v / v.norm(dim=-1, keepdim=True)


def boot_ci(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    """95 % bootstrap interval of the mean (NaN for no values)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return float("nan"), float("nan")
    idx = rng.integers(0, values.size, size=(n_boot, values.size))
    means = values[idx].mean(1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


EDIT_TOKENS = 2048
"""Tokens of one forward that runs several edits of a batch at once (copies of the batch, one edit each)."""


@torch.no_grad()
def last_logits(model, ids: Int[Tensor, "batch pos"], mask: Tensor | None) -> Float[Tensor, "batch vocab"]:
    """The model's logits at the last position (float32): the forward stops after the last block and only the last
    position is unembedded (`Model.unembed`: the final norm, unembedding and logit scaling of the full forward)."""
    h = model.forward_until(ids, Site("resid_post", model.info.n_layers - 1), mask)
    return model.unembed(h[:, -1]).float()


def last_logp(model, enc: Mapping[str, Tensor]) -> Float[Tensor, "batch vocab"]:
    """`last_logits` as log-probabilities."""
    return last_logits(model, enc["input_ids"], enc["attention_mask"]).log_softmax(-1)


@torch.no_grad()
def edited_logps(model, enc: Mapping[str, Tensor], site: Site, edits: Sequence[Callable[[Tensor], Tensor]]
                 ) -> list[Float[Tensor, "batch vocab"]]:
    """`last_logp` of the batch `enc` under each edit of the activation at `site` (each maps the batch's
    (batch, pos, d) activation to its edited copy). Several edits share one forward of as many copies of the batch
    (at most EDIT_TOKENS tokens), each copy edited by its own: rows do not mix in a forward, so each copy's numbers
    are those of a forward of its own (bit for bit on the CPU with the pinned kernels, where the matrix products are
    row by row; tests/unit/test_jlens_batched.py holds them within 1e-5 anywhere)."""
    ids, mask = enc["input_ids"], enc["attention_mask"]
    b, n = ids.shape
    group = max(1, EDIT_TOKENS // max(b * n, 1))
    out: list[Tensor] = []
    for g in range(0, len(edits), group):
        part = list(edits[g:g + group])
        with intervene(model, site, functools.partial(_each_copy, part, b)):
            copies = {"input_ids": ids.repeat(len(part), 1), "attention_mask": mask.repeat(len(part), 1)}
            logp = last_logp(model, copies)
        out += list(logp.split(b))
    return out


def _each_copy(edits: Sequence[Callable[[Tensor], Tensor]], b: int, x: Tensor) -> Tensor:
    """Copy i of the batch (rows i*b .. (i+1)*b - 1) edited by edits[i]."""
    return torch.cat([edit(x[i * b:(i + 1) * b]) for i, edit in enumerate(edits)])


def add_last(vector: Float[Tensor, " d"]) -> Callable[[Tensor], Tensor]:
    """Add `vector` at the last position (`interp.add(..., positions=[-1])`'s edit)."""

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        x[:, -1:] = x[:, -1:] + vector.to(x)
        return x

    return edit


@torch.no_grad()
def steering(model, layer: int, enc: Mapping[str, Tensor], targets: Int[Tensor, " tok"],
             methods: Mapping[str, LensDirections], size: float, base: Tensor | None = None) -> pd.DataFrame:
    """Steer every prompt (left-padded batch) towards each target token along each method's direction of norm
    `size`, at the last position of resid_post(layer): one row per (method, token, prompt). `base`: the unedited
    `last_logp`, when the caller has it."""
    site = Site("resid_post", layer)
    base = last_logp(model, enc) if base is None else base
    runs = [(method, t, size * vec) for method, dirs in methods.items()
            for t, vec in zip(targets.tolist(), dirs(targets))]
    logps = edited_logps(model, enc, site, [add_last(vec) for *_, vec in runs])
    rows = []
    for (method, t, _), logp in zip(runs, logps):
        tt = torch.full((logp.shape[0],), t, device=logp.device)
        rb, ra = rank_of(base, tt).cpu(), rank_of(logp, tt).cpu()
        lb, la = base[:, t].cpu(), logp[:, t].cpu()
        for i in range(logp.shape[0]):
            rows.append({"method": method, "token": t, "prompt": i, "logp_base": float(lb[i]),
                         "logp": float(la[i]), "rank_base": int(rb[i]), "rank": int(ra[i])})
    frame = pd.DataFrame(rows)
    frame["dlogp"] = frame["logp"] - frame["logp_base"]
    return frame


def swap_edit(v: Float[Tensor, "batch d 2"], pos_mask: Tensor, record: list[float]) -> Callable[[Tensor], Tensor]:
    """Exchange each residual's coordinates on the two columns of v (source, target) on the masked positions,
    leaving the part orthogonal to their span unchanged; appends max |orthogonal change| / |x| to `record`.
    The change is computed in at least float32 (pinv and qr have no bfloat16 kernels) and added in the model's dtype, so
    `record` measures the edit itself, not the bfloat16 rounding of the sum."""

    def edit(x: Tensor) -> Tensor:  # (batch, pos, d)
        x32 = x.to(torch.promote_types(x.dtype, torch.float32))
        vv = v.to(x32)
        coef = torch.linalg.pinv(vv) @ x32.transpose(1, 2)  # (b, 2, p): least-squares coordinates on the span
        delta = (vv @ (coef.flip(1) - coef)).transpose(1, 2) * pos_mask[..., None].to(x32)  # (b, p, d)
        q, _ = torch.linalg.qr(vv)  # (b, d, 2) orthonormal basis of the span
        perp = delta - (delta @ q) @ q.transpose(1, 2)
        record.append(float((perp.norm(dim=-1) / x32.norm(dim=-1).clamp_min(1e-12)).max().cpu()))
        return x + delta.to(x.dtype)

    return edit


@torch.no_grad()
def swap(model, layer: int, enc: Mapping[str, Tensor], source: Int[Tensor, " b"], target: Int[Tensor, " b"],
         ans_source: Int[Tensor, " b"], ans_target: Int[Tensor, " b"],
         methods: Mapping[str, Callable[[Tensor, Tensor], Tensor]], base: Tensor | None = None
         ) -> tuple[pd.DataFrame, dict[str, float]]:
    """Swap each prompt's bridge token for another country's at resid_post(layer), positions >= the first real token
    + 1; `methods` map (source ids, target ids) -> (b, d, 2) directions. Rows: (method, prompt) with the change of
    log p(target answer) - log p(source answer); second value: per method the largest orthogonal change measured.
    `base`: the unedited `last_logp`, when the caller has it."""
    site = Site("resid_post", layer)
    mask = enc["attention_mask"]
    first = mask.float().argmax(1)  # first real token (left padding)
    pos = torch.arange(mask.shape[1], device=mask.device)
    pos_mask = (mask.bool() & (pos[None] > first[:, None])).float()
    base = last_logp(model, enc) if base is None else base
    bi = torch.arange(base.shape[0], device=base.device)
    d_base = (base[bi, ans_target.to(base.device)] - base[bi, ans_source.to(base.device)]).cpu()
    recs: dict[str, list[float]] = {method: [] for method in methods}
    logps = edited_logps(model, enc, site, [swap_edit(make(source, target), pos_mask, recs[method])
                                            for method, make in methods.items()])
    rows, orth = [], {}
    for method, logp in zip(methods, logps):
        d_after = (logp[bi, ans_target.to(logp.device)] - logp[bi, ans_source.to(logp.device)]).cpu()
        orth[method] = max(recs[method]) if recs[method] else float("nan")
        for i in range(len(d_base)):
            rows.append({"method": method, "prompt": i, "logodds_base": float(d_base[i]),
                         "logodds": float(d_after[i]), "flipped": bool(d_after[i] > 0 and d_base[i] <= 0)})
    frame = pd.DataFrame(rows)
    frame["dlogodds"] = frame["logodds"] - frame["logodds_base"]
    return frame, orth


def project_out_edit(q: Float[Tensor, "batch d k"], removed: list[Tensor]) -> Callable[[Tensor], Tensor]:
    """Remove span(q) (orthonormal columns) from each prompt's last position; records |removed| / |x| there."""

    def edit(x: Tensor) -> Tensor:
        qq = q.to(x)
        last = x[:, -1]  # (b, d)
        part = ((last[:, None, :] @ qq) @ qq.transpose(1, 2))[:, 0]  # (b, d)
        removed.append((part.norm(dim=-1) / last.norm(dim=-1).clamp_min(1e-12)).cpu())
        x = x.clone()
        x[:, -1] = last - part
        return x

    return edit


@torch.no_grad()
def ablation(model, layer: int, enc: Mapping[str, Tensor], methods: Mapping[str, Float[Tensor, "b d k"]],
             base: Tensor | None = None) -> pd.DataFrame:
    """Project each method's directions (per prompt, orthonormalised here) out of the last position at
    resid_post(layer): rows (method, prompt) with KL(original || ablated) at the output and the removed norm share.
    `base`: the unedited `last_logp`, when the caller has it."""
    site = Site("resid_post", layer)
    base = last_logp(model, enc) if base is None else base
    removed: dict[str, list[Tensor]] = {method: [] for method in methods}
    edits = [project_out_edit(torch.linalg.qr(dirs.float())[0], removed[method]) for method, dirs in methods.items()]
    rows = []
    for method, logp in zip(methods, edited_logps(model, enc, site, edits)):
        kl = (base.exp() * (base - logp)).sum(-1).cpu()
        for i in range(len(kl)):
            rows.append({"method": method, "prompt": i, "kl": float(kl[i]),
                         "removed_frac": float(removed[method][-1][i])})
    return pd.DataFrame(rows)


def summarize_effects(frame: pd.DataFrame, value: str, n_boot: int, rng: np.random.Generator,
                      by: Sequence[str] = ("method",)) -> pd.DataFrame:
    """Mean of `value` per method with its 95 % bootstrap interval and n."""
    out = []
    for key, g in frame.groupby(list(by), sort=False):
        lo, hi = boot_ci(g[value].to_numpy(), n_boot, rng)
        out.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))), "measure": value,
                    "mean": float(g[value].mean()), "lo": lo, "hi": hi, "n": int(len(g))})
    return pd.DataFrame(out)
