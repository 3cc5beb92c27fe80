"""Learning-rate schedules: one definition for every trainer in the toolkit (transformers' own).

`warmup_schedule` wraps `transformers.get_{constant,linear,cosine}_schedule_with_warmup`: a linear warmup from 0
over `warmup` optimizer steps, then a constant rate, a linear decay to 0 at `total`, or a half-cosine to 0 at
`total`. Step it once after every optimizer step (the scheduler's usual contract).
"""

from __future__ import annotations

from typing import Literal

import torch

Kind = Literal["constant", "linear", "cosine"]


def warmup_schedule(opt: torch.optim.Optimizer, kind: Kind, warmup: int, total: int
                    ) -> torch.optim.lr_scheduler.LambdaLR:
    """The scheduler of `opt`: linear warmup over `warmup` steps, then `kind` until step `total`."""
    import transformers

    if kind == "constant":
        return transformers.get_constant_schedule_with_warmup(opt, warmup)
    if kind == "linear":
        return transformers.get_linear_schedule_with_warmup(opt, warmup, total)
    if kind == "cosine":
        return transformers.get_cosine_schedule_with_warmup(opt, warmup, total)
    raise ValueError(f"schedule kind {kind!r}: one of constant, linear, cosine")


__all__ = ["warmup_schedule"]
