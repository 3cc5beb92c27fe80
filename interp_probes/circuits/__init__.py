"""circuits: transcoders and attribution graphs (Ameisen et al. 2025, "Circuit Tracing"; circuit-tracer's code).

Method: https://transformer-circuits.pub/2025/attribution-graphs/methods.html

Transcoders replace the model's MLPs (per-layer, skip or cross-layer; trained here on the model's own MLP inputs
and outputs, and cached); the attribution graph of a prompt holds attention patterns and norm denominators fixed,
so the residual stream is linear in the active features, error nodes and token embeddings, and every edge is an
exact direct effect. The graph is pruned by influence on the logits, written in Neuronpedia's graph JSON, and
tested by ablating features in the real model: does the graph predict how the target logit moves, better than
random or top-activation features?
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from interp.config import ModelLimits, NonNegativeInt, PositiveInt, ProbeConfig, Range
from interp.data import check_source
from interp.errors import ConfigError, MissingPath, did_you_mean
from interp.registry import probe


@probe("circuits", run="interp_probes.circuits.probe:run",
       page="interp_probes.circuits.page", figures="interp_probes.circuits.figures")
@dataclass(frozen=True)
class CircuitsConfig(ProbeConfig):
    """Attribution graphs over transcoders: exactness, pruning, and ablations that test the graph.

    Which transcoder features carry this prompt's prediction, and does the graph that says so predict what happens when
    those features are removed from the real model?
    """

    prompt: str = "The capital of France is"
    """The prompt of the headline graph (BOS first where the tokenizer has one)."""
    transcoders: str = "train"
    """"train": trained here on `data` (cached); a directory written by `interp.sae.save_transcoders` or by
    circuit-tracer (a transcoder set or CLT with its config.yaml, hooks mlp.hook_in -> hook_mlp_out);
    "circuit-tracer:<owner>/<repository>", such a directory as released (downloads: only with INTERP_ONLINE=1); or
    "saelens:<release>/<sae_id>" with {l} for the layer (per-layer SAELens transcoders such as Gemma Scope 2's;
    downloads, so only with INTERP_ONLINE=1; their hooks must be the model's mlp_in / mlp_out)."""
    kind: Literal["plt", "skip", "clt"] = "plt"
    """Per-layer transcoders, with a skip path, or cross-layer (train only)."""
    activation: Literal["jumprelu", "topk"] = "topk"
    """The transcoders' activation (train only). TopK by default: at the token budgets a CPU affords here,
    JumpReLU's L0 penalty drove most features dead (held-out FVE 0.05-0.26 against TopK's 0.42-0.53 on layers
    5, 15, 25 of SmolLM2, 38k tokens, 1000 steps)."""
    d_transcoder: Annotated[int, Range(8, 1_000_000)] = 1152
    """Features per layer (train only)."""
    target_l0: Annotated[float, Range(1, 4096)] = 16.0
    """Mean active features per token and layer (jumprelu; topk uses k = round(target_l0))."""
    train_tokens: Annotated[int, Range(256, 100_000_000)] = 100_000
    """Tokens of (MLP input, MLP output) pairs per layer the transcoders train on, held in one bfloat16 buffer
    (4 x n_layers x d_model bytes a token: 6.9 GB for SmolLM2 at 100k). Fewer tokens overfit: at 30k (20 passes
    over the data) held-out FVE on SmolLM2's layers 2, 5, 15, 18 was 0.57 and the spliced-in loss recovered 0.52
    of the gap; at 100k, 0.71 and 0.85, in the same training time."""
    steps: Annotated[int, Range(1, 10_000_000)] = 1200
    """Optimiser steps (every layer in each step)."""
    train_batch: PositiveInt = 512
    """Tokens per step."""
    lr: Annotated[float, Range(1e-6, 1.0)] = 2e-3
    """Peak learning rate."""
    cache: bool = True
    """Keep trained transcoders in the cache (keyed by model, training config and data)."""
    data: str = "builtin:all"
    """Text the transcoders train on, and whose held-out part measures their quality and feature contexts."""
    seq_len: Annotated[int, Range(8, 8192)] = 128
    """Tokens per training chunk."""
    eval_seqs: PositiveInt = 24
    """Held-out chunks for quality (FVE, L0, dead fraction, spliced-in loss) and top contexts. One layer's MLP
    moves SmolLM2's loss by 0.1-0.2 nats, so the share recovered is noisy on few tokens (one layer read 0.73 and
    1.03 on 8 chunks of 128 for two sets of equal FVE)."""
    batch_size: PositiveInt = 64
    """Targets per backward pass of the graph (copies of the prompt in one forward)."""
    batch_tokens: PositiveInt = 4096
    """The backward batch holds at most this many prompt tokens and 64 x this many attention pairs (fewer than
    batch_size copies of a long prompt), so its memory stays flat in the prompt length up to one copy."""
    max_feature_nodes: PositiveInt = 8192
    """Most features that get a row (circuit-tracer's max_feature_nodes), chosen by partial influence."""
    max_edges_per_row: PositiveInt = 8192
    """Edges kept per row, the strongest (the rest joins the target's unattributed input): a row has an entry for
    every active feature and every (layer, position), so this bounds the graph's memory on long prompts."""
    bos_error: bool = False
    """Position 0's MLP output (minus the transcoders' b_dec) as error nodes (True), or held in every target's bias
    and belonging to no node (False: circuit-tracer 0.5's graph, which zeroes the error vectors at position 0).
    The paper defines an error node at every (layer, position) and names no exception; circuit-tracer's code makes
    one, and the default follows it so the graph equals the reference's node for node. Those errors are large (an
    attention sink's MLP output: norm about 1,630 against 46 elsewhere on smollm2-135m) and, as nodes, take much of
    the influence: the pruned graph and the scores move. Completeness is exact either way."""
    node_threshold: Annotated[float, Range(0.0, 1.0)] = 0.8
    """Pruning: keep the fewest nodes holding this share of the influence on the logits."""
    edge_threshold: Annotated[float, Range(0.0, 1.0)] = 0.98
    """Pruning: then the fewest edges holding this share of the edge scores."""
    desired_logit_prob: Annotated[float, Range(0.0, 1.0)] = 0.95
    """Logit nodes: the fewest top tokens whose probabilities reach this, ..."""
    max_n_logits: Annotated[int, Range(1, 100)] = 10
    """... at most this many."""
    n_prompts: NonNegativeInt = 20
    """Prompts of the faithfulness test (built-in, templated); 0 skips it."""
    test_max_feature_nodes: PositiveInt = 1024
    """Features attributed in each test prompt's graph (the most influential first, as for the headline graph)."""
    ablate_k: tuple[int, ...] = (1, 3, 10)
    """Features ablated per prompt and selection (graph influence, random active, top activation)."""
    n_contexts: PositiveInt = 8
    """Top activating held-out contexts kept per feature of the pruned headline graph."""

    SIZE_PRESETS = {
        "micro": {"d_transcoder": 256, "target_l0": 8.0, "train_tokens": 2048, "steps": 60, "train_batch": 256,
                  "seq_len": 32, "eval_seqs": 1, "n_prompts": 2, "ablate_k": (1, 3), "batch_size": 32,
                  "max_feature_nodes": 256, "test_max_feature_nodes": 256, "n_contexts": 4},
        "quick": {"d_transcoder": 576, "train_tokens": 8192, "steps": 300, "train_batch": 256, "seq_len": 64,
                  "eval_seqs": 2, "n_prompts": 5, "max_feature_nodes": 512, "test_max_feature_nodes": 512},
    }
    CONTEXT_FIELDS = ("seq_len",)
    REQUIRES = ("mlp_in", "mlp_out", "edit:mlp_out", "embed", "edit:embed", "final", "attn_pattern",
                "edit:attn_pattern")

    def validate(self) -> None:
        super().validate()
        if not self.prompt.strip():
            raise ConfigError("prompt", self.prompt, "a non-empty text")
        if not self.ablate_k or min(self.ablate_k) < 1:
            raise ConfigError("ablate_k", self.ablate_k, "a non-empty tuple of positive counts")
        if self.transcoders.startswith("saelens:"):
            release, _, sae_id = self.transcoders[len("saelens:"):].partition("/")
            if not release or "{l}" not in sae_id:
                raise ConfigError("transcoders", self.transcoders, "saelens:<release>/<sae_id with {l} for the "
                                  "layer>, e.g. saelens:gemma-scope-2-270m-pt-transcoders/layer_{l}_width_16k_l0_small")
            if os.environ.get("INTERP_ONLINE") != "1":
                raise ConfigError("transcoders", self.transcoders, f"a local transcoder set: SAELens release "
                                  f"{release!r} downloads its weights, which needs the network (set INTERP_ONLINE=1)")
        elif self.transcoders.startswith("circuit-tracer:"):
            repo = self.transcoders[len("circuit-tracer:"):]
            if repo.count("/") != 1 or not all(repo.split("/")):
                raise ConfigError("transcoders", self.transcoders, "circuit-tracer:<owner>/<repository> of a "
                                  "released transcoder set (with its config.yaml)")
            if os.environ.get("INTERP_ONLINE") != "1":
                raise ConfigError("transcoders", self.transcoders, f"a local transcoder set: circuit-tracer release "
                                  f"{repo!r} downloads its weights, which needs the network (set INTERP_ONLINE=1)")
        elif self.transcoders != "train" and not any((Path(self.transcoders) / f).is_file()
                                                     for f in ("interp_transcoders.json", "config.yaml")):
            forms = ('"train", a directory written by interp.sae.save_transcoders (with interp_transcoders.json) or '
                     "by circuit-tracer (with config.yaml), saelens:<release>/<id> or "
                     "circuit-tracer:<owner>/<repository>")
            hint = did_you_mean(self.transcoders, ["train"])
            if not hint and not Path(self.transcoders).exists():
                raise MissingPath("transcoders", self.transcoders, forms)  # named as missing before the forms
            raise ConfigError("transcoders", self.transcoders, hint + forms)
        if self.kind == "clt" and self.transcoders == "train" and self.d_transcoder > 65536:
            raise ConfigError("d_transcoder", self.d_transcoder, "at most 65536 for a CLT trained here")

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        need = self.train_tokens + self.eval_seqs * self.seq_len if self.transcoders == "train" else \
            self.eval_seqs * self.seq_len
        check_source(self.data, field="data", seed=self.seed, min_tokens=need, count_tokens=limits.count_tokens,
                     needed_for="train_tokens and eval_seqs x seq_len")
