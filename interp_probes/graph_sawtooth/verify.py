"""Stage 4 and the run's invariant table: SLASH's exact checks.

The verification pass shows that gamma = 1 reproduces the base logits and that the edited pattern is the
one multiplied with V; every SLASH forward of the run records its row invariants, tabled per layer at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from interp.context import RunContext
from interp.errors import NumericError
from interp.sites import Site

from . import GraphSawtoothConfig
from .attention import Tokenised, forward_last, pad_left
from .slash import Slash


@dataclass(frozen=True)
class SlashCheck:
    """The verification pass on the first selection prompts."""

    slash: Slash
    """The edit at the check's gamma on S (its invariant errors join the run's table)."""
    gamma1_max_dlogit: float
    """Largest |logit change| of gamma = 1 against the unhooked model (exactly 0 expected)."""
    pattern_edit_reaches_z: bool
    """Whether z of S[0] changed and equals the edited pattern times V."""
    z_change: float
    """Largest |change| of z at S[0] under the edit."""
    z_match_err: float
    """Largest |z - p' V| at S[0]."""

    def metrics(self) -> dict[str, Any]:
        return {"slash_gamma1_max_dlogit": self.gamma1_max_dlogit,
                "pattern_edit_reaches_z": self.pattern_edit_reaches_z,
                "pattern_edit_z_change": self.z_change, "pattern_edit_z_match_err": self.z_match_err}


@torch.no_grad()
def verify_slash(model, items: list[Tokenised], S: list[int], cfg: GraphSawtoothConfig,
                 gamma: float = 0.5) -> SlashCheck:
    """The verification pass (three forwards): gamma = 1 reproduces the base logits; the edited
    pattern is the one multiplied with V (z changes, and equals p' V); SLASH's row invariants."""
    ids, mask, _ = pad_left(model, items)
    layer = S[0]
    grab: dict[str, torch.Tensor] = {}

    def keep(name):
        def fn(x):
            grab[name] = x.detach().clone()

        return fn

    zsite = Site("attn_z", layer)
    with model.hooks([(zsite, keep("z0"))]):
        base = forward_last(model, ids, mask)
    one = Slash(S, 1.0, cfg.sink_offsets)
    with model.hooks(one.pairs()), one.batch(mask):
        same = forward_last(model, ids, mask)
    dlogit = float((same.float() - base.float()).abs().max())

    # SLASH at `gamma` on S; hooks after the edit see the edited pattern, z and v of S[0]
    check = Slash(S, gamma, cfg.sink_offsets)
    after = [(Site("attn_pattern", layer), keep("p")), (zsite, keep("z1")), (Site("attn_v", layer), keep("v"))]
    with model.hooks(check.pairs() + after), check.batch(mask):
        forward_last(model, ids, mask)
    if check.applied != len(S):
        raise NumericError(f"SLASH hooks ran {check.applied} times on {len(S)} selected layers")
    v = grab["v"]  # (b, pos, kv_head, d_head)
    v = v.repeat_interleave(model.info.n_heads // v.shape[2], dim=2)  # (b, pos, head, d_head)
    z_expected = torch.einsum("bhqk,bkhd->bqhd", grab["p"].float(), v.float())
    z_change = float((grab["z1"] - grab["z0"]).abs().max())
    z_err = float((grab["z1"].float() - z_expected).abs().max())
    reaches = z_change > 1e-6 and z_err <= 1e-4 * max(1.0, float(z_expected.abs().max()))
    return SlashCheck(slash=check, gamma1_max_dlogit=dlogit, pattern_edit_reaches_z=bool(reaches),
                      z_change=z_change, z_match_err=z_err)


@dataclass(frozen=True)
class Invariants:
    """Per layer, the worst invariant errors over every SLASH forward of the run."""

    table: pd.DataFrame
    """Rows: layer, the max of each error, rows_checked (summed)."""

    def metrics(self) -> dict[str, Any]:
        inv = self.table
        worst = lambda col: float(inv[col].max()) if len(inv) else 0.0  # noqa: E731
        return {"slash_rows_sum_max_err": worst("max_row_sum_err"),
                "slash_sink_ratio_max_err": worst("max_sink_ratio_err"),
                "slash_nonsink_ratio_max_err": worst("max_nonsink_ratio_err"),
                "slash_nonsink_ratio_max_abs_err": worst("max_nonsink_ratio_abs_err"),
                "slash_rows_checked": int(inv["rows_checked"].sum()) if len(inv) else 0}


def invariant_table(slashes: list[Slash]) -> pd.DataFrame:
    """Per layer, the worst invariant errors over `slashes`."""
    acc: dict[int, dict[str, float]] = {}
    for sl in slashes:
        for layer, errs in sl.errors.items():
            a = acc.setdefault(layer, {key: 0.0 for key in errs})
            for key, v in errs.items():
                a[key] = a[key] + v if key == "rows_checked" else max(a[key], v)
    rows = [{"layer": layer, **errs} for layer, errs in sorted(acc.items())]
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["rows_checked"] = frame["rows_checked"].astype(int)
    return frame


def collect_invariants(ctx: RunContext, slashes: list[Slash]) -> Invariants:
    """The invariant table of `slashes`, saved as `invariants`."""
    table = invariant_table(slashes)
    ctx.save_table("invariants", table)
    return Invariants(table)
