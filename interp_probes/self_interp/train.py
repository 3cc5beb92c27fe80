"""Steps 3-4: train an adapter on (vector, label) pairs with the LM frozen, and the identity scale sweep.

Objective (the paper's): teacher-forced cross-entropy on label + `"` + end-of-turn, each token
clamped, averaged per sequence then over the batch. AdamW on the adapter's tensors only, with the
reference's parameter groups (no weight decay on log_scale) and its schedule (a linear warmup from
1e-6 x lr, then cosine decay to 0), gradient-norm clip; the best state by validation loss is kept.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from . import SelfInterpConfig
from .adapters import Adapter
from .inject import PrefixCache, Template, label_loss, make_batch


@dataclass
class Pairs:
    """Vectors and their tokenised targets (label + quote + end-of-turn)."""

    vectors: Float[Tensor, "n d"]
    targets: list[list[int]]

    def __len__(self) -> int:
        return self.vectors.shape[0]

    def take(self, idx: Sequence[int]) -> "Pairs":
        idx = list(idx)
        return Pairs(self.vectors[idx], [self.targets[i] for i in idx])


WARMUP_START = 1e-6
"""The reference's warmup start factor (torch LinearLR(start_factor=1e-6))."""


def schedule(step: int, total: int, warmup: int) -> float:
    """LR multiplier of optimiser step `step` (0-based), as the reference's trainer steps it: LinearLR
    from 1e-6 to 1 over `warmup` steps (step k < warmup runs at 1e-6 + (1 - 1e-6) k / warmup), then
    CosineAnnealingLR over the remaining total - warmup steps (step warmup + j runs at
    (1 + cos(pi j / (total - warmup))) / 2). Not `interp.warmup_schedule`: transformers' warmup starts from 0, the
    reference's from 1e-6, and the adapters' few hundred steps make the first steps count."""
    if step < warmup:
        return WARMUP_START + (1.0 - WARMUP_START) * step / warmup
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def effective_warmup(warmup: int, total: int) -> int:
    """`warmup` as configured when it is shorter than the run (the reference); a run of at most `warmup`
    steps (the reference's cosine would get T_max <= 0) warms up over its first third instead."""
    return warmup if warmup < total else max(1, total // 3)


def param_groups(adapter: Adapter, weight_decay: float) -> list[dict]:
    """The reference's AdamW groups: log_scale without weight decay, every other tensor (bias, U, V, A)
    with it."""
    named = [(n, p) for n, p in adapter.named_parameters() if p.requires_grad]
    scale = [p for n, p in named if "log_scale" in n]
    rest = [p for n, p in named if "log_scale" not in n]
    groups = [{"params": scale, "weight_decay": 0.0}] if scale else []
    return groups + ([{"params": rest, "weight_decay": weight_decay}] if rest else [])


@torch.no_grad()
def mean_loss(model, tmpl: Template, adapter: Adapter, pairs: Pairs, batch_size: int, pc: PrefixCache | None,
              clamp: float = 100.0) -> float:
    """Mean per-sequence loss of `adapter` over `pairs` (no gradient)."""
    total = 0.0
    for i in range(0, len(pairs), batch_size):
        part = pairs.take(range(i, min(i + batch_size, len(pairs))))
        batch = make_batch(tmpl, part.targets, model.device)
        total += float(label_loss(model, tmpl, batch, adapter(part.vectors.to(model.device)), pc, clamp,
                                  per_sequence=True).sum())
    return total / len(pairs)


def train_adapter(model, tmpl: Template, adapter: Adapter, train: Pairs, val: Pairs, s: SelfInterpConfig,
                  generator: torch.Generator, pc: PrefixCache | None = None,
                  progress=None) -> tuple[Adapter, list[dict]]:
    """Train `adapter` in place (then load its best state by validation loss); returns it and the curve rows.

    The settings are the config's own training fields (lr, weight_decay, epochs, batch_size, clip, warmup,
    loss_clamp, eval_every): one place declares, documents and validates them.

    The optimiser holds only the adapter's trainable tensors; the LM's parameters never get gradients.
    """
    params = [p for p in adapter.parameters() if p.requires_grad]
    if not params:
        return adapter, []
    lm = [p for p in model.hf.parameters() if p.requires_grad]
    if lm:
        raise RuntimeError(f"the language model must be frozen: {len(lm)} LM tensors require grad")
    opt = torch.optim.AdamW(param_groups(adapter, s.weight_decay), lr=s.lr)
    held = {id(p) for group in opt.param_groups for p in group["params"]}
    lm_ids = {id(p) for p in model.hf.parameters()}
    adapter.optimizer_adapter_only = held <= {id(p) for p in adapter.parameters()} and not held & lm_ids
    if not adapter.optimizer_adapter_only:
        raise RuntimeError("the optimiser must hold only the adapter's tensors")
    steps_per_epoch = math.ceil(len(train) / s.batch_size)
    total = s.epochs * steps_per_epoch
    warmup = effective_warmup(s.warmup, total)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: schedule(k, total, warmup))
    rows: list[dict] = []
    best_val = mean_loss(model, tmpl, adapter, val, s.batch_size, pc, s.loss_clamp) if len(val) else math.inf
    best_state = copy.deepcopy(adapter.state_dict())
    rows.append(_row(adapter, 0, math.nan, best_val, 0.0))
    step = 0
    it = range(s.epochs) if progress is None else progress(range(s.epochs), desc=f"train {adapter.variant}")
    for _ in it:
        order = torch.randperm(len(train), generator=generator).tolist()
        for i in range(0, len(train), s.batch_size):
            part = train.take(order[i : i + s.batch_size])
            batch = make_batch(tmpl, part.targets, model.device)
            lr = opt.param_groups[0]["lr"]
            loss = label_loss(model, tmpl, batch, adapter(part.vectors.to(model.device)), pc, s.loss_clamp)
            if not torch.isfinite(loss):
                from interp.errors import NumericError

                raise NumericError(f"non-finite training loss for adapter {adapter.variant} at step {step}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, s.clip)
            opt.step()
            sched.step()
            step += 1
            val_loss = math.nan
            if len(val) and (step % s.eval_every == 0 or step == total):
                val_loss = mean_loss(model, tmpl, adapter, val, s.batch_size, pc, s.loss_clamp)
                if val_loss < best_val:
                    best_val, best_state = val_loss, copy.deepcopy(adapter.state_dict())
            rows.append(_row(adapter, step, float(loss.detach()), val_loss, lr))
    if len(val):
        adapter.load_state_dict(best_state)
    return adapter, rows


def _row(adapter: Adapter, step: int, train_loss: float, val_loss: float, lr: float) -> dict:
    return {"variant": adapter.variant, "step": step, "train_loss": train_loss, "val_loss": val_loss, "lr": lr,
            "scale": adapter.scale if adapter.variant != "full_rank" else math.nan, "bias_norm": adapter.bias_norm}


def identity_sweep(model, tmpl: Template, val: Pairs, scales: Sequence[float], batch_size: int,
                   pc: PrefixCache | None, clamp: float = 100.0) -> list[float]:
    """Validation loss of identity injection at each absolute scale."""
    d = val.vectors.shape[1]
    return [mean_loss(model, tmpl, Adapter("identity", d, sc), val, batch_size, pc, clamp) for sc in scales]
