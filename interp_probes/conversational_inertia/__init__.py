"""Conversational inertia: index-aligned attention to the model's own earlier replies, its growth
with the number of rounds, and the context policies (and preference pairs) that reduce it.

Method: ../shared/methods/conversational_inertia.md (paper arXiv 2602.03664, no released code;
layers, score, null, environments and the short-context construction are reconstructed there).
This module is torch-free: the config, its sizes and its validation. The run is
`interp_probes.conversational_inertia.probe:run`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Annotated, Literal

from interp.config import ProbeConfig, Range, Subset
from interp.errors import ConfigError
from interp.registry import probe

from .envs import ENVS, POLICIES, TEMPLATES


@probe("conversational_inertia", run="interp_probes.conversational_inertia.probe:run",
       page="interp_probes.conversational_inertia.page", figures="interp_probes.conversational_inertia.figures")
@dataclass(frozen=True)
class ConversationalInertiaConfig(ProbeConfig):
    """Conversational inertia: diagonal attention to earlier replies and context policies that reduce it.

    Does the model treat its own earlier replies as demonstrations (the i-th token of the current reply attending to the
    i-th token of an earlier one, more so as rounds accumulate), and do shorter contexts stop it from repeating an
    action the observation already ruled out?
    """

    envs: Annotated[tuple[str, ...], Subset(ENVS)] = ENVS
    """Synthetic environments for the attention transcripts: doorexplore, doorworld (behaviour is gated on
    doorexplore; doorworld's bait behaviour is reported when n_doorworld_episodes > 0)."""
    rounds_grid: tuple[Annotated[int, Range(1, 64)], ...] = (1, 2, 4, 8, 12)
    """Prior rounds N of the teacher-forced attention transcripts."""
    n_transcripts_per_n: Annotated[int, Range(1, 10000)] = 8
    """Attention transcripts per N (split evenly over envs)."""
    n_control_transcripts: Annotated[int, Range(0, 10000)] = 16
    """Control transcripts (earlier replies in a non-aligned wording), spread over the N >= 2 of rounds_grid."""
    offsets: tuple[Annotated[int, Range(-4, 4)], ...] = (0, 1)
    """Diagonal offsets δ: 0 is the paper's i-th to i-th, +1 the induction/copy variant."""
    bands: tuple[Annotated[int, Range(0, 4)], ...] = (0, 1)
    """Band half-widths w (1 tolerates tokenisation drift); 0 must be among them (the headline uses w = 0)."""
    target_turn: Literal["most_recent", "all"] = "most_recent"
    """Which earlier reply forms the column block: the most recent one, or every earlier reply (one block each)."""
    n_perm: Annotated[int, Range(10, 100000)] = 200
    """Draws of the column-permutation null."""
    null: Literal["permute", "circular"] = "permute"
    """Null model: independent column permutations, or circular shifts of at least ceil(m/4)."""
    z_thresh: Annotated[float, Range(0.0, 100.0, lo_open=True)] = 4.0
    """z at or above which a head counts as an inertia head (about Bonferroni over heads x offsets)."""
    n_bait_episodes: Annotated[int, Range(1, 100000)] = 40
    """DoorExplore bait histories per N (the same episodes at every N of bait_rounds_grid)."""
    bait_rounds_grid: tuple[Annotated[int, Range(1, 64)], ...] = (1, 2, 4, 8)
    """Prior rounds N of the bait histories under Long; every policy runs at the largest."""
    policies: Annotated[tuple[str, ...], Subset(POLICIES)] = POLICIES
    """Context policies at the largest N: long, window (last W rounds), last1, clip (cleared every W rounds), short."""
    window_w: Annotated[int, Range(1, 64)] = 2
    """W of Window(W)."""
    clip_w: Annotated[int, Range(2, 64)] = 4
    """W of Clip(W): the history is cleared every W rounds (its phase cycles over episodes)."""
    n_control_episodes: Annotated[int, Range(0, 100000)] = 40
    """DoorExplore cycle histories (three doors tried in turn) at the largest N, under Long and Window."""
    n_doorworld_episodes: Annotated[int, Range(0, 100000)] = 40
    """DoorWorld bait histories at the largest N, under Long and Short (reported, not gated; needs doorworld)."""
    n_templates: int = 8
    """Reply templates used (of 8 per environment, 20-40 tokens); one per transcript for all its turns."""
    max_new_tokens: Annotated[int, Range(8, 1024)] = 48
    """Greedy decoding budget of each action."""
    n_cpl_states: Annotated[int, Range(0, 100000)] = 60
    """States sampled from the behaviour histories for Context Preference Learning pairs."""
    cpl_filter: Literal["differs", "short_correct"] = "differs"
    """Keep a pair when the long and short actions differ (short_correct: and the short one is correct)."""
    train_dpo: bool = False
    """Train a LoRA adapter with DPO on the pairs (needs peft and trl; not part of the CPU default)."""
    n_boot: Annotated[int, Range(100, 1000000)] = 2000
    """Paired bootstrap resamples for the policy differences."""
    n_top_heads: Annotated[int, Range(1, 64)] = 8
    """Heads (by z) whose blocks and attention rows are saved for the page."""
    n_view_transcripts: Annotated[int, Range(1, 16)] = 4
    """Transcripts whose blocks and attention rows are saved for the page."""
    attn_batch_size: Annotated[int, Range(1, 256)] = 4
    """Transcripts per hooked forward pass."""
    decode_batch_size: Annotated[int, Range(1, 1024)] = 32
    """Prompts per batched greedy decode step (a decode step reads every weight once, whatever the batch)."""
    decode_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Autocast dtype of behaviour and CPL decoding (the attention measurement stays float32). auto: bfloat16 where
    it runs natively (CUDA, CPUs with AVX512-BF16/AMX: about 1.5x faster here, the same greedy actions on the
    benchmark's prompts), else float32."""

    SIZE_PRESETS = {
        "micro": {
            "envs": ["doorexplore"],
            "rounds_grid": [4],
            "n_transcripts_per_n": 4,
            "n_control_transcripts": 2,
            "n_perm": 100,
            "n_bait_episodes": 8,
            "bait_rounds_grid": [4],
            "policies": ["long", "window"],
            "n_control_episodes": 0,
            "n_doorworld_episodes": 0,
            "max_new_tokens": 40,
            "n_cpl_states": 8,
            "n_boot": 500,
            "n_view_transcripts": 2,
        },
        "quick": {
            "rounds_grid": [1, 2, 4, 8],
            "n_transcripts_per_n": 4,
            "n_control_transcripts": 4,
            "n_bait_episodes": 20,
            "bait_rounds_grid": [8],
            "policies": ["long", "window", "short"],
            "n_control_episodes": 0,
            "n_doorworld_episodes": 0,
            "n_cpl_states": 20,
            "n_boot": 1000,
            "max_new_tokens": 40,
        },
    }

    def validate(self) -> None:
        super().validate()
        if "long" not in self.policies:
            raise ConfigError("policies", list(self.policies), "a list that includes long (the reference policy)")
        for name, grid in (("rounds_grid", self.rounds_grid), ("bait_rounds_grid", self.bait_rounds_grid)):
            if not grid or len(set(grid)) != len(grid):
                raise ConfigError(name, list(grid), "a non-empty list of distinct round counts")
        if self.n_control_transcripts and not any(n >= 2 for n in self.rounds_grid):
            raise ConfigError("rounds_grid", list(self.rounds_grid), "some N >= 2 when control transcripts are used")
        if not self.offsets or len(set(self.offsets)) < len(self.offsets):
            raise ConfigError("offsets", list(self.offsets), "distinct offsets in [-4, 4]")
        if 0 not in self.bands or len(set(self.bands)) != len(self.bands):
            raise ConfigError("bands", list(self.bands), "distinct band widths in [0, 4] including 0")
        if self.n_doorworld_episodes and "doorworld" not in self.envs:
            raise ConfigError("n_doorworld_episodes", self.n_doorworld_episodes, "0 unless doorworld is in envs")
        Range(1, min(len(t) for t in TEMPLATES.values())).check("n_templates", self.n_templates)
        if self.train_dpo:
            missing = [p for p in ("peft", "trl") if importlib.util.find_spec(p) is None]
            if missing:
                raise ConfigError(
                    "train_dpo", True,
                    f"false: DPO on LoRA needs {' and '.join(missing)}, not installed here (pip install peft trl)",
                )
            raise ConfigError("train_dpo", True, "false: DPO training is not built into this version of the probe yet")
