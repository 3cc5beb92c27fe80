"""Streaming capture: reduce a site's activations over batches without holding them.

    stats = capture(model, batches, {Site("mlp_post", 3): [Mean(), AbsMean(), TopK(8)]},
                    skip_first=1)
    stats[Site("mlp_post", 3)]["abs_mean"]      # (d_mlp,)

Every reducer sees the site's activation as ``(batch, pos, *units)`` and a boolean token
mask ``(batch, pos)`` (attention mask, optionally without the first positions) and keeps
O(units) state, accumulated in float64.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from .sites import Site, forward_rank, token_first


class Reducer:
    """Accumulates over tokens; `result()` returns a dict of tensors shaped like the units."""

    name = "reducer"

    def update(self, x: Float[Tensor, "tok ..."], where: Tensor | None = None) -> None:
        """x: the masked tokens' activations, flattened to (tok, *units); where: (tok, 2) of (seq, pos).
        x may be a view of the model's activation: copy what you keep."""
        raise NotImplementedError

    def result(self) -> dict[str, Tensor]:
        raise NotImplementedError


class _Sum(Reducer):
    transform = staticmethod(lambda x: x)  # exact in x's dtype, or casting to float64 itself (MeanSquare)

    def __init__(self) -> None:
        self.total: Tensor | None = None
        self.n = 0

    def update(self, x, where=None):
        s = self.transform(x).sum(0, dtype=torch.float64)  # a float64 accumulator, no float64 copy of the batch
        self.total = s if self.total is None else self.total + s
        self.n += x.shape[0]

    def result(self):
        if self.total is None:
            raise ValueError(f"{self.name}: no tokens were captured")
        return {self.name: (self.total / self.n).float(), "n_tokens": torch.tensor(self.n)}


class Mean(_Sum):
    name = "mean"


class AbsMean(_Sum):
    name = "abs_mean"
    transform = staticmethod(torch.abs)


class MeanSquare(_Sum):
    name = "mean_square"
    transform = staticmethod(lambda x: x.double().square())


class Max(Reducer):
    """Maximum (and minimum) over tokens per unit."""

    name = "max"

    def __init__(self) -> None:
        self.hi: Tensor | None = None
        self.lo: Tensor | None = None

    def update(self, x, where=None):
        hi, lo = x.amax(0).float(), x.amin(0).float()
        self.hi = hi if self.hi is None else torch.maximum(self.hi, hi)
        self.lo = lo if self.lo is None else torch.minimum(self.lo, lo)

    def result(self):
        if self.hi is None:
            raise ValueError("max: no tokens were captured")
        return {"max": self.hi, "min": self.lo}


class Welford(Reducer):
    """Mean and (population) variance per unit, merged batch by batch (Chan et al.)."""

    name = "welford"

    def __init__(self) -> None:
        self.n = 0
        self.mean: Tensor | None = None
        self.m2: Tensor | None = None

    def update(self, x, where=None):
        x = x.double()
        nb = x.shape[0]
        if nb == 0:
            return
        mb = x.mean(0)
        m2b = ((x - mb) ** 2).sum(0)
        if self.mean is None:
            self.n, self.mean, self.m2 = nb, mb, m2b
            return
        n = self.n + nb
        delta = mb - self.mean
        self.mean = self.mean + delta * (nb / n)
        self.m2 = self.m2 + m2b + delta**2 * (self.n * nb / n)
        self.n = n

    def result(self):
        if self.mean is None:
            raise ValueError("welford: no tokens were captured")
        return {"mean": self.mean.float(), "var": (self.m2 / self.n).float(), "n_tokens": torch.tensor(self.n)}


class TopK(Reducer):
    """The k largest values per unit (optionally of |x|) and where they occurred (seq, pos)."""

    name = "topk"

    def __init__(self, k: int, absolute: bool = False) -> None:
        self.k, self.absolute = k, absolute
        self.values: Tensor | None = None
        self.where: Tensor | None = None

    def update(self, x, where=None):
        v = x.abs() if self.absolute else x
        v = v.float()
        w = where if where is not None else torch.zeros(x.shape[0], 2, dtype=torch.long, device=x.device)
        # candidate pool = kept (k, *units) + new (tok, *units)
        w = w.view(w.shape[0], *([1] * (v.dim() - 1)), 2).expand(*v.shape, 2)
        if self.values is not None:
            v = torch.cat([self.values, v], 0)
            w = torch.cat([self.where, w], 0)
        k = min(self.k, v.shape[0])
        self.values, idx = v.topk(k, dim=0)
        self.where = torch.gather(w, 0, idx.unsqueeze(-1).expand(*idx.shape, 2))

    def result(self):
        if self.values is None:
            raise ValueError("topk: no tokens were captured")
        return {"topk_values": self.values, "topk_where": self.where}


def token_mask(attention_mask: Bool[Tensor, "batch pos"], skip_first: int = 0) -> Bool[Tensor, "batch pos"]:
    """Real tokens, without the first `skip_first` real positions of each sequence."""
    mask = attention_mask.bool()
    if skip_first:
        rank = mask.long().cumsum(-1)  # 1-based index among real tokens
        mask = mask & (rank > skip_first)
    return mask


def masked_batches(
    model, batches: Iterable[Mapping[str, Tensor]], skip_first: int = 0
) -> Iterator[tuple[Tensor, Tensor, Bool[Tensor, "batch pos"], Tensor]]:
    """(input_ids, attention_mask, token mask, where) of each batch, on the model's device: the batch loop of
    `capture` and `interp.sae.collect_activations`.

    A missing attention mask is all ones; the token mask is `token_mask(attention_mask, skip_first)`; `where`
    (tok, 2) holds the (sequence, position) of each masked token, sequences counted across all batches so far.
    """
    seq_offset = 0
    for batch in batches:
        ids = batch["input_ids"].to(model.device)
        am = batch.get("attention_mask")
        am = torch.ones_like(ids) if am is None else am.to(model.device)
        mask = token_mask(am, skip_first)
        where = mask.nonzero()
        where[:, 0] += seq_offset
        yield ids, am, mask, where
        seq_offset += ids.shape[0]


def capture(
    model,
    batches: Iterable[Mapping[str, Tensor]],
    reducers: Mapping[Site, Sequence[Reducer]],
    skip_first: int = 0,
    progress: bool = False,
) -> dict[Site, dict[str, Tensor]]:
    """Run `model` over `batches` (dicts with input_ids, attention_mask) and reduce each site.

    Only the tokens of the attention mask count (padding never does); `skip_first=1` also
    drops position 0 (the massive-activation position). Memory is O(units) per reducer. Unless a site is the
    logits, the forward stops after the last site (`Model.forward_until`): no final norm, no unembedding.
    """
    from tqdm.auto import tqdm

    state: dict[str, Tensor] = {}

    def make_hook(site: Site, reds: Sequence[Reducer]):
        def hook(act: Tensor) -> None:
            x = token_first(site, act)
            flat = x.flatten(0, 1) if state["full"] else x[state["mask"]]  # (tok, *units)
            where = state["where"]
            for r in reds:
                r.update(flat.detach(), where)
            return None

        return hook

    pairs = [(site, make_hook(site, reds)) for site, reds in reducers.items()]
    last = max(reducers, key=forward_rank) if reducers else None
    bar = tqdm(batches, desc="capture", disable=not progress, leave=False)
    with torch.no_grad(), model.hooks(pairs):
        for ids, am, mask, where in masked_batches(model, bar, skip_first):
            state["mask"], state["where"], state["full"] = mask, where, bool(mask.all())
            if last is None or last.kind == "logits":
                model.forward(ids, am)
            else:
                model.forward_until(ids, last, am)
    return {site: {k: v for r in reds for k, v in r.result().items()} for site, reds in reducers.items()}


def batched(encoded: Mapping[str, Tensor], batch_size: int) -> list[dict[str, Tensor]]:
    """Split tokenized {input_ids, attention_mask} into batches along dim 0."""
    n = encoded["input_ids"].shape[0]
    return [{k: v[i : i + batch_size] for k, v in encoded.items()} for i in range(0, n, batch_size)]


def run_with_cache(
    model, input_ids: Tensor, attention_mask: Tensor | None, sites: Sequence[Site]
) -> tuple[Tensor, dict[Site, Tensor]]:
    """Logits and the full activations at `sites` (for small inputs; use capture() for streams)."""
    cache: dict[Site, Tensor] = {}

    def keep(site):
        def hook(act):
            cache[site] = act.detach().clone()

        return hook

    with torch.no_grad(), model.hooks([(s, keep(s)) for s in sites]):
        logits = model.forward(input_ids, attention_mask)
    return logits, cache
