"""Graph sawtooth attention and SLASH: do some layers rebuild a serialised graph's adjacency, and
does moving attention-sink mass onto real keys in those layers help graph reasoning?

Method: ../shared/methods/graph_sawtooth.md (paper arXiv 2605.10503, "SLASH the Sink", code
liuyiming01/SLASH). This module is torch-free: the config, its sizes and its validation. The run
itself is `interp_probes.graph_sawtooth.probe:run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from interp.config import ModelLimits, ProbeConfig, Range, Subset
from interp.data import check_source, read_jsonl
from interp.errors import ConfigError
from interp.registry import probe

TASKS = ("edge", "degree", "connectivity", "cycle")


@probe("graph_sawtooth", run="interp_probes.graph_sawtooth.probe:run",
       page="interp_probes.graph_sawtooth.page", figures="interp_probes.graph_sawtooth.figures")
@dataclass(frozen=True)
class GraphSawtoothConfig(ProbeConfig):
    """Graph sawtooth: layers whose attention rebuilds an edge list's adjacency, and SLASH on them.

    When a model reads a serialised graph, do some layers attend within each node's neighbour list (a "sawtooth" that
    rebuilds the adjacency), can those layers be found automatically, and does moving part of the attention-sink mass
    onto the real keys there (SLASH) help graph reasoning more than the same edit on random layers, without hurting
    ordinary text?
    """

    prompt_format: Literal["raw", "chat"] = "raw"
    """raw: the prompt text as is; chat: wrapped in the model's chat template (empty system prompt)."""
    n_nodes: Annotated[tuple[int, int], Range(3, 60)] = (8, 12)
    """Inclusive range of the number of nodes of each synthetic graph."""
    n_edges: Annotated[tuple[int, int], Range(2)] = (12, 20)
    """Inclusive range of edges per prompt (the cycle task sets its own: n_nodes - 3 .. n_nodes - 1)."""
    n_select: Annotated[int, Range(1, 100000)] = 30
    """Prompts whose attention is captured for the structure scores, the nulls and the entropy."""
    n_cal: int = 40
    """Calibration prompts (balanced over tasks) for the gamma sweep."""
    n_test: int = 80
    """Test prompts (balanced over tasks) for base / SLASH / random-layer accuracy."""
    tasks: Annotated[tuple[str, ...], Subset(TASKS)] = TASKS
    """Any of edge, degree, connectivity, cycle."""
    binarize: Literal["topk", "threshold"] = "topk"
    """topk: the |M| largest ROI values (the paper); threshold: values >= 10 % of the min-max range."""
    max_shift: Annotated[int, Range(0, 16)] = 2
    """Span shifts -max_shift..+max_shift searched by the concentration score."""
    n_null: Annotated[int, Range(2, 10000)] = 20
    """Segment-shuffled template draws (the null of both structure scores)."""
    gammas: tuple[Annotated[float, Range(0.0, 1.0)], ...] = (0.2, 0.4, 0.6, 0.8, 1.0)
    """Sink factors swept on the calibration split (1.0 is the unmodified model and always included)."""
    sink_offsets: tuple[Annotated[int, Range(0, 64)], ...] = (0,)
    """Sink columns relative to the first real token (e.g. [0, 1, 2, 3] for StreamingLLM-style sinks)."""
    entropy_rule: Literal["reference", "reference_newest", "spec"] = "reference"
    """S_ent band rule: reference (the released selection: heights clamped at 1e-12, ties to the narrower band and
    the later peak), reference_newest (also the code's newest extra layer after the band) or spec (no clamp, ties
    to the wider band and the first peak); see interp_probes.graph_sawtooth.selection."""
    n_random_layer_seeds: Annotated[int, Range(1, 100)] = 3
    """Random layer sets of size |S| drawn outside S for the control (median accuracy reported)."""
    mode: Literal["per_layer"] = "per_layer"
    """per_layer: heads averaged per layer for scoring, selection and SLASH (the paper's; per_head is not
    implemented: per-head scores are reported, see head_scores)."""
    head_scores: bool = True
    """Also score every head against the template and its null (memory per batch grows with layers x heads x
    ROI^2: turn off for long prompts on large models)."""
    ppl_tokens: int = 4096
    """Tokens of non-graph text (the built-in corpus) for the perplexity control."""
    ppl_len: Annotated[int, Range(8, 8192)] = 128
    """Tokens per perplexity sequence."""
    ppl_data: str = "builtin:heldout"
    """Non-graph text for the perplexity control: any `interp.data` source (default the held-out
    split of the built-in corpus)."""
    data: str | None = None
    """Optional JSONL of {prompt, answer, candidates[, task]} rows (e.g. exported GraphWiz) replacing
    the synthetic tasks; prompts must contain an edge list in one of the parsed formats and be distinct (the rows
    are split into selection, calibration and test: a repeat would leak across the splits)."""
    batch_size: Annotated[int, Range(1, 1024)] = 8
    """Prompts per forward pass (left padding; the sink column comes from the attention mask)."""
    n_roi_maps: Annotated[int, Range(0, 100)] = 3
    """Selection samples whose ROI maps (raw, binary, template) are stored for every layer (at most n_select)."""
    gamma_curve: bool = False
    """Also score the test split at every gamma of the grid with SLASH on S and on random layer sets (accuracy and
    answer-margin change with bootstrap intervals, `gamma_curve.parquet`): the graded study; it adds
    (len(gamma_grid) - 1) x (1 + gamma_curve_random_seeds) scoring passes over the test split."""
    gamma_curve_random_seeds: Annotated[int, Range(0, 100)] = 1
    """Random layer sets (the test's first ones) the gamma curve scores."""
    n_boot: Annotated[int, Range(10, 100000)] = 1000
    """Bootstrap resamples of the test items for the accuracy intervals."""

    #: SLASH edits the post-softmax pattern; scoring rebuilds the KV cache from post-rotary keys and values
    REQUIRES = ("attn_pattern", "edit:attn_pattern", "attn_rot_k", "attn_v", "attn_z")
    NEEDS_EXACT = ("attn_rot_k",)  # the rebuilt KV cache holds the rotated keys
    CONTEXT_FIELDS = ("ppl_len",)

    SIZE_PRESETS = {
        "micro": {
            "n_nodes": [6, 8],
            "n_edges": [8, 10],
            "n_select": 4,
            "n_cal": 4,
            "n_test": 4,
            "gammas": [0.6, 1.0],
            "n_null": 4,
            "n_random_layer_seeds": 1,
            "ppl_tokens": 256,
            "n_boot": 200,
            "gamma_curve": True,
        },
        "quick": {
            "n_select": 10,
            "n_cal": 8,
            "n_test": 16,
            "gammas": [0.4, 0.6, 1.0],
            "n_null": 10,
            "n_random_layer_seeds": 1,
            "ppl_tokens": 1024,
        },
    }

    @property
    def gamma_grid(self) -> tuple[float, ...]:
        """The swept gammas, ascending, 1.0 always among them."""
        return tuple(sorted(set(self.gammas) | {1.0}))

    def validate(self) -> None:
        super().validate()
        lo, hi = self.n_nodes
        if lo > hi:
            raise ConfigError("n_nodes", list(self.n_nodes), "[lo, hi] with 3 <= lo <= hi <= 60")
        elo, ehi = self.n_edges
        if elo > ehi:
            raise ConfigError("n_edges", list(self.n_edges), "[lo, hi] with 2 <= lo <= hi")
        if ehi > hi * (hi - 1) // 2 or elo > lo * (lo - 1) // 2 - 1:
            raise ConfigError("n_edges", list(self.n_edges),
                              f"edge counts that graphs of n_nodes={lo}..{hi} can hold (lo < n(n-1)/2, hi <= n(n-1)/2)")
        for name in ("n_cal", "n_test"):
            n = getattr(self, name)
            if not len(self.tasks) <= n <= 100000:
                raise ConfigError(name, n, f"an integer in [len(tasks)={len(self.tasks)}, 100000]")
        if not self.gammas:
            raise ConfigError("gammas", list(self.gammas), "a non-empty list of values in [0, 1]")
        if not self.sink_offsets or len(set(self.sink_offsets)) != len(self.sink_offsets):
            raise ConfigError("sink_offsets", list(self.sink_offsets), "a non-empty list of distinct offsets >= 0")
        if not self.ppl_len <= self.ppl_tokens <= 10_000_000:
            raise ConfigError("ppl_tokens", self.ppl_tokens, f"an integer in [ppl_len={self.ppl_len}, 10000000]")
        if self.data is not None and not self.data.strip():
            raise ConfigError("data", self.data, "null (synthetic graphs) or a JSONL file")
        if not self.ppl_data.strip():
            raise ConfigError("ppl_data", self.ppl_data, "builtin, builtin:heldout or a .txt / .jsonl file")
        if self.gamma_curve_random_seeds > self.n_random_layer_seeds:
            raise ConfigError("gamma_curve_random_seeds", self.gamma_curve_random_seeds,
                              f"at most n_random_layer_seeds={self.n_random_layer_seeds}")

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        n_seqs = self.ppl_tokens // self.ppl_len
        check_source(self.ppl_data, field="ppl_data", seed=self.seed, min_tokens=n_seqs * self.ppl_len,
                     count_tokens=limits.count_tokens, needed_for=f"{n_seqs} sequences of ppl_len={self.ppl_len}")
        if self.data is None:
            return
        need = self.n_select + self.n_cal + self.n_test
        rows = read_jsonl(self.data, field="data", required=("prompt", "answer", "candidates"), unique="prompt",
                          min_rows=need, needed_for="n_select + n_cal + n_test")
        if limits.count_tokens is not None and limits.n_ctx is not None:
            n, i = max((limits.count_tokens(str(r["prompt"])), i) for i, r in enumerate(rows))
            if n >= limits.n_ctx:
                raise ConfigError("data", self.data, f"prompts shorter than the context of {self.model} "
                                  f"({limits.n_ctx} tokens); row {i + 1} has {n}")

    def validate_for_model(self, n_layers: int | None) -> None:
        if n_layers is not None and n_layers < 2:
            raise ConfigError("model", self.model, "a model with at least 2 layers (random-layer control)")
