"""Activation patching and attribution patching: which (layer, position) and which heads carry a behaviour.

Method: activation patching (Meng et al. 2022; Wang et al. 2022, the IOI circuit; TransformerLens's
`patching` module) and attribution patching (Nanda 2023, https://www.neelnanda.io/mechanistic-interpretability/attribution-patching).
This module is torch-free: the config, its sizes and its pre-load checks. The run is `interp_probes.patching.probe:run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from interp.config import ModelLimits, ProbeConfig, Range, Subset
from interp.errors import ConfigError
from interp.registry import probe

from .pairs import TASKS, load_pairs

POSITION_SITES = ("resid_pre", "attn_out", "mlp_out")
SITES = (*POSITION_SITES, "z")


@probe("patching", run="interp_probes.patching.probe:run",
       page="interp_probes.patching.page", figures="interp_probes.patching.figures")
@dataclass(frozen=True)
class PatchingConfig(ProbeConfig):
    """Activation and attribution patching: which layers, positions and heads carry clean -> corrupted.

    Which layers, positions and attention heads carry a behaviour? Each component's clean activation is put back into
    the corrupted run, and the effect is normalised as (patched − corrupt) / (clean − corrupt): 1 where that component
    alone restores the clean answer; attribution patching estimates the same grid from one backward pass.
    """

    task: Literal["ioi", "factual", "capital"] = "ioi"
    """Built-in pairs (when `data` is not set): ioi (indirect object), factual (landmark -> city), capital."""
    data: str | None = None
    """A JSONL file of pairs, one object a line with clean, corrupt, answer, wrong (overrides `task`)."""
    n_pairs: Annotated[int, Range(1, 1000)] = 4
    """Pairs patched (the first n of `data`)."""
    metric: Literal["logit_diff", "prob", "loss"] = "logit_diff"
    """At the last position: logit(answer) - logit(wrong), p(answer), or -log p(answer)."""
    sites: Annotated[tuple[str, ...], Subset(SITES)] = SITES
    """Any of resid_pre, attn_out, mlp_out (by layer x position) and z (by layer x head, all positions)."""
    z_by_position: bool = False
    """Also patch each head's z at each position (a layer x head x position grid)."""
    layers: tuple[int | str, ...] = ()
    """Layers swept (negative counts from the end; "@0.5" is a depth fraction); empty: every `layer_stride`-th
    layer and the last."""
    layer_stride: Annotated[int, Range(1, 1000)] = 1
    """With `layers` empty: sweep layers 0, k, 2k, ... and the last one."""
    batch_size: Annotated[int, Range(1, 65536)] = 192
    """Patched rows per forward pass (each row is one cell of a grid)."""
    top_k: Annotated[int, Range(1, 1000)] = 10
    """Components in the top table and in the top-k overlap of attribution and activation patching."""

    SIZE_PRESETS = {
        "micro": {"n_pairs": 1, "sites": ["resid_pre", "z"], "layers": [0, -1]},
        "quick": {"n_pairs": 2, "layer_stride": 2},
    }

    def validate(self) -> None:
        super().validate()
        if self.task not in TASKS:
            raise ConfigError("task", self.task, "one of " + ", ".join(TASKS))
        if self.z_by_position and "z" not in self.sites:
            raise ConfigError("z_by_position", True, "z among the sites")
        if len(set(self.layers)) != len(self.layers):
            raise ConfigError("layers", list(self.layers), "distinct layer indices")

    LAYER_FIELDS = ("layers",)

    def validate_for_model(self, n_layers: int | None) -> None:
        if any(isinstance(x, str) for x in self.layers):  # depth fractions wait for the depth (at_depth)
            return
        for layer in self.layers:
            self.check_layer("layers", layer, n_layers)
        if n_layers is not None and len({layer % n_layers for layer in self.layers}) != len(self.layers):
            raise ConfigError("layers", list(self.layers), f"distinct layers of {self.model} ({n_layers} layers)")
        if n_layers is not None and self.layer_stride > n_layers:
            raise ConfigError("layer_stride", self.layer_stride, f"a stride in [1, {n_layers}] for {self.model}")

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        pairs = load_pairs(self.task, self.data, self.n_pairs, self.seed, limits.count_tokens)
        if self.data is not None and len(pairs) < self.n_pairs:
            raise ConfigError("n_pairs", self.n_pairs, f"at most the {len(pairs)} pair(s) of {self.data}")
        if limits.count_tokens is not None and limits.n_ctx is not None:
            longest = max(limits.count_tokens(p.clean) for p in pairs)
            if longest + 1 > limits.n_ctx:
                raise ConfigError("data", self.data or self.task, f"prompts within the context ({limits.n_ctx})")

    def resolved_layers(self, n_layers: int) -> list[int]:
        """The swept layers as indices 0..n_layers-1, ascending."""
        if self.layers:
            return sorted(layer % n_layers for layer in self.layers)
        return sorted(set(range(0, n_layers, self.layer_stride)) | {n_layers - 1})
