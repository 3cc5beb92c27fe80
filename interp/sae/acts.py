"""The activation buffer SAEs train on: `collect_activations` reads several sites' activations at kept tokens
in one set of passes (the batch loop of `interp.capture`), each forward stopped after the deepest site that
still needs tokens."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from .._capture import masked_batches
from ..sites import Site, forward_rank


@dataclass
class ActivationBuffer:
    """Activations of some sites at kept tokens, with where each token came from."""

    acts: dict[Site, Float[Tensor, "tok d"]]
    seq: dict[Site, Tensor]
    """(tok,) index of the sequence (batch row across all batches) of each kept token."""
    pos: dict[Site, Tensor]
    """(tok,) position of each kept token in its sequence."""
    n_seen: dict[Site, int] = field(default_factory=dict)
    """Tokens that passed the mask (before the norm-outlier filter)."""
    n_outliers: dict[Site, int] = field(default_factory=dict)
    """Tokens dropped as norm outliers."""


def collect_activations(
    model: Any,
    batches: Iterable[Mapping[str, Tensor]],
    budgets: Mapping[Site, int],
    skip_first: int = 1,
    norm_outlier_factor: float | None = None,
    progress: bool = False,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> ActivationBuffer:
    """Activations at each site until it holds `budgets[site]` tokens, in one set of passes.

    Only tokens of the attention mask count, without the first `skip_first` positions of
    each sequence (position 0 carries a massive activation). The forward stops after the
    deepest site that still needs tokens (`Model.forward_until`), so later layers never run.
    `norm_outlier_factor`: drop tokens whose norm exceeds that factor times the median norm
    of the first batch's kept tokens (a relative threshold; Gemma's norms are large).
    Sites must hold a (batch, pos, d) activation (residual-stream-like sites).
    """
    from tqdm.auto import tqdm

    if not budgets:
        raise ValueError("collect_activations: no sites")
    for site in budgets:
        model.check_site(site)
    order = {site: forward_rank(site) for site in budgets}
    chunks: dict[Site, list[Tensor]] = {s: [] for s in budgets}
    seqs: dict[Site, list[Tensor]] = {s: [] for s in budgets}
    poss: dict[Site, list[Tensor]] = {s: [] for s in budgets}
    have = {s: 0 for s in budgets}
    seen = {s: 0 for s in budgets}
    dropped = {s: 0 for s in budgets}
    limit: dict[Site, float] = {}
    state: dict[str, Any] = {}

    def make_hook(site: Site):
        def hook(act: Tensor) -> None:
            need = budgets[site] - have[site]
            if need > 0:
                x = act[state["mask"]].detach()  # (tok, d)
                if x.dim() != 2:
                    raise ValueError(f"collect_activations: {site} is not a (batch, pos, d) site")
                where = state["where"]
                seen[site] += x.shape[0]
                if norm_outlier_factor is not None:
                    norms = x.float().norm(dim=-1)
                    if site not in limit:
                        limit[site] = float(norms.median()) * norm_outlier_factor
                    keep = norms <= limit[site]
                    dropped[site] += int((~keep).sum())
                    x, where = x[keep], where[keep]
                x, where = x[:need], where[:need]
                chunks[site].append(x.to(device=device, dtype=dtype))
                seqs[site].append(where[:, 0].cpu())
                poss[site].append(where[:, 1].cpu())
                have[site] += x.shape[0]
            return None

        return hook

    pairs = [(site, make_hook(site)) for site in budgets]
    total = sum(budgets.values())
    bar = tqdm(total=total, desc="activations", disable=not progress, leave=False)
    with torch.no_grad(), model.hooks(pairs):
        for ids, am, mask, where in masked_batches(model, batches, skip_first):
            pending = [s for s in budgets if have[s] < budgets[s]]
            if not pending:
                break
            state.update(mask=mask, where=where)
            before = sum(have.values())
            model.forward_until(ids, max(pending, key=order.get), am)  # the deepest site still collecting
            bar.update(sum(have.values()) - before)
    bar.close()
    for site in budgets:
        if have[site] == 0:
            raise ValueError(f"collect_activations: no tokens collected at {site} (data exhausted or all masked)")
    return ActivationBuffer(
        acts={s: torch.cat(chunks[s]) for s in budgets},
        seq={s: torch.cat(seqs[s]) for s in budgets},
        pos={s: torch.cat(poss[s]) for s in budgets},
        n_seen=seen,
        n_outliers=dropped,
    )


def collect_stacked(
    model: Any,
    batches: Iterable[Mapping[str, Tensor]],
    groups: Sequence[Sequence[Site]],
    n_tokens: int,
    skip_first: int = 1,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> list[Float[Tensor, "tok site d"]]:
    """Each group's sites' activations at the same first `n_tokens` kept tokens, one (tok, len(group), d) tensor
    a group (a transcoder set's MLP inputs and outputs at every layer: groups [mlp_in sites, mlp_out sites]).

    The buffers are allocated once and written in place, batch by batch, so the peak is the buffers themselves
    (`collect_activations` keeps per-batch pieces and concatenates them, twice the memory); in bfloat16 a
    buffer is half the float32 one. Tokens are counted as `collect_activations` counts them (mask, `skip_first`);
    each forward stops after the deepest site. Fewer tokens than asked (the data ran out) are refused.
    """
    from tqdm.auto import tqdm

    sites = [s for g in groups for s in g]
    if not sites or n_tokens < 1:
        raise ValueError("collect_stacked: no sites, or n_tokens < 1")
    for site in sites:
        model.check_site(site)
    bufs: list[Tensor | None] = [None] * len(groups)  # allocated at the first activation (its width)
    state = {"at": 0, "n": 0}

    def make_hook(gi: int, j: int):
        def hook(act: Tensor) -> None:
            x = act[state["mask"]].detach()[: state["n"]]  # (m, d)
            if bufs[gi] is None:
                bufs[gi] = torch.empty(n_tokens, len(groups[gi]), x.shape[-1], dtype=dtype, device=device)
            elif x.shape[-1] != bufs[gi].shape[-1]:
                raise ValueError(f"collect_stacked: {groups[gi][j]} is {x.shape[-1]} wide, its group's sites "
                                 f"{bufs[gi].shape[-1]}")
            bufs[gi][state["at"] : state["at"] + x.shape[0], j] = x.to(device=device, dtype=dtype)
        return hook

    hooks = [(site, make_hook(gi, j)) for gi, g in enumerate(groups) for j, site in enumerate(g)]
    deepest = max(sites, key=forward_rank)
    bar = tqdm(total=n_tokens, desc="activations", disable=not progress, leave=False)
    with torch.no_grad(), model.hooks(hooks):
        for ids, am, mask, _ in masked_batches(model, batches, skip_first):
            if state["at"] >= n_tokens:
                break
            state.update(mask=mask, n=min(int(mask.sum()), n_tokens - state["at"]))
            model.forward_until(ids, deepest, am)
            state["at"] += state["n"]
            bar.update(state["n"])
    bar.close()
    if state["at"] < n_tokens:
        raise ValueError(f"collect_stacked: the data held {state['at']} kept tokens, {n_tokens} asked")
    return bufs


__all__ = ["ActivationBuffer", "collect_activations", "collect_stacked"]
