"""Keystone neurons: a tiny cross-task set whose removal collapses the model.

Method: ../shared/methods/keystone.md (paper arXiv 2605.24846, code JxtGTG/keystone). This
module is torch-free: the config, its sizes and its validation (the CLI checks a config before
any heavy import). The run itself is `interp_probes.keystone.probe:run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from interp.config import ModelLimits, ProbeConfig, Range, Subset
from interp.data import check_source, read_jsonl
from interp.errors import ConfigError
from interp.registry import probe

NEURON_TYPES = ("fwd_up", "fwd_down", "attn_q", "attn_k", "attn_v", "attn_o")
SFT_VARIANTS = ("keystone", "random", "full", "mask_keystone")


@dataclass(frozen=True)
class SFTConfig:
    """Keystone-only fine-tuning against random-only and full fine-tuning (Step 7)."""

    enable: bool = False
    """Run the SFT comparison (a separate check: off in the core run, micro and quick)."""
    mode: Literal["strict", "paper"] = "strict"
    """strict: only the slices change (frozen entries restored after each step); paper: the released
    code's masking (only q/k/v/o/up/down gradients masked; gate, norms, embeddings stay trainable)."""
    lr: Annotated[float, Range(0.0, 1.0, lo_open=True)] = 2e-4
    """AdamW learning rate of every variant (the headline metrics are at this lr)."""
    lr_sweep: tuple[Annotated[float, Range(0.0, 1.0, lo_open=True)], ...] = ()
    """Extra learning rates for the sparse variants (keystone, random, mask_keystone), each trained from the original
    weights on the same data order: sparse updates may need larger steps than full fine-tuning (full runs at lr)."""
    eval_every: Annotated[int, Range(0, 100000)] = 0
    """Also score held-out accuracy and broad perplexity every this many optimizer steps (0: after training only),
    so that gains can be compared on the same steps and full fine-tuning's plateau seen (`sft_evals`)."""
    epochs: Annotated[int, Range(1, 100)] = 2
    """Passes over the training examples."""
    batch: Annotated[int, Range(1, 4096)] = 8
    """Examples per optimizer step (gradient accumulation over micro_batch)."""
    micro_batch: Annotated[int, Range(1, 4096)] = 8
    """Examples per forward/backward (memory knob; the batch is accumulated)."""
    warmup_frac: Annotated[float, Range(0.0, 1.0)] = 0.03
    """Linear warmup over ceil(warmup_frac * steps) steps (the released trainer's warmup_ratio)."""
    schedule: Literal["linear", "cosine"] = "linear"
    """Decay after warmup: linear to 0 (the HF Trainer default the released code runs) or cosine (the project's
    earlier choice)."""
    max_grad_norm: Annotated[float, Range(0.0, 1e6)] = 1.0
    """Clip the global gradient norm (of the masked gradients) to this value, the HF Trainer default; 0 disables."""
    weight_decay: Annotated[float, Range(0.0, 1.0)] = 0.01
    """AdamW decoupled weight decay (on weights only: the HF Trainer exempts biases and norms)."""
    decay_all: bool = False
    """Decay every trainable parameter, norms and biases included (the project's earlier choice)."""
    n_train: Annotated[int, Range(1, 100000)] = 80
    """Training examples (two-step arithmetic word problems)."""
    n_eval: Annotated[int, Range(1, 100000)] = 60
    """Held-out examples scored by exact match of the final integer."""
    max_len: Annotated[int, Range(16, 131072)] = 256
    """Longest training sequence in tokens (longer ones are an error)."""
    eval_batch: Annotated[int, Range(1, 4096)] = 20
    """Held-out items decoded per batch (left padding, explicit position ids)."""
    max_new_tokens: Annotated[int, Range(1, 4096)] = 32
    """Greedy decoding budget for the held-out answers."""
    variants: Annotated[tuple[str, ...], Subset(SFT_VARIANTS, repeats=True)] = ("keystone", "random", "full")
    """Any of keystone, random, full, mask_keystone."""


@probe("keystone", run="interp_probes.keystone.probe:run",
       page="interp_probes.keystone.page", figures="interp_probes.keystone.figures")
@dataclass(frozen=True)
class KeystoneConfig(ProbeConfig):
    """Keystone neurons: a tiny prompt-independent set whose zeroing collapses the model.

    Is there a tiny, prompt-independent set of neurons (largest mean |activation| while the model generates, shared by
    prompts of different capabilities) whose zeroing destroys the model while a matched random set does not, and how
    much of that collapse runs through the position-0 massive activation and the attention sink?
    """

    prompt_source: str = "builtin"
    """"builtin" (four capability prompts plus generated disjoint groups) or a JSONL file of
    {id, capability, prompt[, group]} rows; a repeated prompt is an error (the groups must be disjoint)."""
    n_groups: Annotated[int, Range(2, 10)] = 3
    """Disjoint prompt groups (one prompt per capability each) for the stability measure."""
    max_new_tokens: Annotated[int, Range(16, 16000)] = 192
    """Greedy tokens generated per prompt (stops earlier at EOS / end of turn)."""
    repetition_penalty: Annotated[float, Range(1.0, 10.0)] = 1.1
    """Penalty on tokens among the last `penalty_window` generated tokens (1.0 disables)."""
    penalty_window: Annotated[int, Range(1, 100000)] = 64
    """How many of the latest generated tokens the repetition penalty looks at."""
    neuron_types: Annotated[tuple[str, ...], Subset(NEURON_TYPES)] = NEURON_TYPES
    """Any subset of fwd_up, fwd_down, attn_q, attn_k, attn_v, attn_o."""
    top_p: Annotated[float, Range(0.0, 1.0, lo_open=True)] = 0.005
    """Fraction p of neurons per layer and type kept for each prompt."""
    p_sweep: tuple[Annotated[float, Range(0.0, 1.0, lo_open=True)], ...] = (0.001, 0.002, 0.005, 0.01, 0.02)
    """Values of p re-selected from the recorded means (perplexity only); top_p is always included."""
    selection_mode: Literal["per_layer", "global_per_type", "global"] = "per_layer"
    """per_layer (the paper), global_per_type (one ranking per type), global (mixes type scales; keeps
    ceil(n * p) as the released code, the others int(n * p))."""
    kv_width: Literal["query", "native"] = "query"
    """Where K and V neurons are ranked: query (the released code: at query width after repeat_kv, count
    max(1, int(n_heads * d_head * p)), then the distinct KV rows) or native (the KV width, n_kv * d_head)."""
    recording: Literal["teacher_forced", "per_step"] = "teacher_forced"
    """teacher_forced: one pass per prompt; per_step: the paper's no-cache re-run per token (slow)."""
    tf_check_tokens: Annotated[int, Range(8, 128)] = 24
    """Tokens of the first prompt recorded both ways for the equality check (always runs)."""
    n_random_seeds: Annotated[int, Range(5, 100)] = 5
    """Matched random sets (sampled per cell from the non-keystone neurons); at least 5 (the median of the random
    control)."""
    n_highnorm_seeds: Annotated[int, Range(1, 100)] = 3
    """Matched sets sampled from each cell's highest-weight-norm non-keystone neurons."""
    highnorm_pool_frac: Annotated[float, Range(0.0, 1.0, lo_open=True)] = 0.05
    """High-norm pool per cell: the top max(5*count, ceil(frac*n)) neurons by weight norm."""
    n_swap_seeds: Annotated[int, Range(1, 100)] = 3
    """Swap controls: random same-cell neurons' weight slices copied into the keystone slots."""
    ppl_corpus: str = "builtin"
    """"builtin" (the held-out split of the project's corpus) or a text/JSONL file."""
    ppl_seqs: Annotated[int, Range(1, 100000)] = 16
    """Perplexity sequences (raw text; position 0 is the first text token, or the BOS)."""
    ppl_len: Annotated[int, Range(4, 131072)] = 128
    """Tokens per perplexity sequence."""
    massive_test_seqs: Annotated[int, Range(1, 100000)] = 4
    """Sequences of the single-unit position-0 test (the first perplexity sequences)."""
    massive_test_len: Annotated[int, Range(1, 131072)] = 32
    """Tokens of each sequence in the single-unit position-0 test."""
    task_suite: str = "builtin"
    """"builtin" (addition, capitals, sequences) or a JSONL file of {task, prompt, answer} rows (repeated prompts
    are kept, each counting, with a warning)."""
    task_items: Annotated[int, Range(3, 100000)] = 150
    """Task-suite items, split evenly across the tasks."""
    zero_bias: bool = False
    """Also zero (and, in SFT, mask) the bias entry of a row neuron; false: edit .weight only and train every bias,
    as the released code (the embedded models have no projection biases, so this changes nothing there)."""
    rope_pair_ablation: bool = False
    """Also zero each ablated q/k dimension's RoPE partner (weight zeroing acts before RoPE), in the model's own
    layout (`Anatomy.rope_partner`: rotate-half, GPT-J's adjacent pairs, partial rotaries)."""
    ablation: bool = True
    """Run the ablation conditions, controls and the position-0 mechanism (false: selection and SFT only)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Keystone-only fine-tuning (see sft.*)."""

    REQUIRES = ("attn_rot_q", "attn_rot_k", "attn_v", "attn_z", "mlp_up", "mlp_post", "attn_pattern")
    CONTEXT_FIELDS = ("ppl_len", "sft.max_len")

    SIZE_PRESETS = {
        "micro": {
            "n_groups": 2,
            "max_new_tokens": 16,
            "tf_check_tokens": 8,
            "p_sweep": [],
            "ppl_seqs": 2,
            "ppl_len": 32,
            "n_highnorm_seeds": 1,
            "n_swap_seeds": 1,
            "task_items": 6,
            "massive_test_seqs": 1,
            "massive_test_len": 4,
        },
        "quick": {
            "n_groups": 2,
            "max_new_tokens": 48,
            "tf_check_tokens": 8,
            "p_sweep": [],
            "ppl_seqs": 8,
            "ppl_len": 64,
            "n_highnorm_seeds": 1,
            "n_swap_seeds": 1,
            "task_items": 30,
            "massive_test_len": 8,
        },
    }

    @property
    def sweep_ps(self) -> tuple[float, ...]:
        """The p values of the sweep, the main p always among them, ascending."""
        return tuple(sorted(set(self.p_sweep) | {self.top_p}))

    def validate(self) -> None:
        super().validate()
        if not self.prompt_source.strip():
            raise ConfigError("prompt_source", self.prompt_source, '"builtin" or a JSONL file')
        if not self.ppl_corpus.strip():
            raise ConfigError("ppl_corpus", self.ppl_corpus, '"builtin" or a text file')
        if self.massive_test_seqs > self.ppl_seqs:
            raise ConfigError("massive_test_seqs", self.massive_test_seqs, f"at most ppl_seqs={self.ppl_seqs}")
        if self.massive_test_len > self.ppl_len:
            raise ConfigError("massive_test_len", self.massive_test_len, f"at most ppl_len={self.ppl_len}")
        if not self.task_suite.strip():
            raise ConfigError("task_suite", self.task_suite, '"builtin" or a JSONL file')
        s = self.sft
        if s.batch % s.micro_batch:
            raise ConfigError("sft.micro_batch", s.micro_batch, f"a divisor of sft.batch={s.batch}")
        if not s.enable and not self.ablation:
            raise ConfigError("ablation", self.ablation, "true unless sft.enable is true (nothing would be measured)")

    def validate_data(self, limits: ModelLimits) -> None:
        super().validate_data(limits)
        check_source(self.ppl_corpus, field="ppl_corpus", min_tokens=self.ppl_seqs * (self.ppl_len - 1),
                     count_tokens=limits.count_tokens, needed_for=f"ppl_seqs={self.ppl_seqs} x ppl_len={self.ppl_len}")
        if self.prompt_source != "builtin":
            rows = read_jsonl(self.prompt_source, field="prompt_source", required=("prompt",), unique="prompt",
                              min_rows=2, needed_for="two prompts or more per group")
            if limits.count_tokens is not None and limits.n_ctx is not None:  # the prompt and its generation
                room = limits.n_ctx - self.max_new_tokens
                n, i = max((limits.count_tokens(str(r["prompt"])), i) for i, r in enumerate(rows))
                if n > room:
                    raise ConfigError("prompt_source", self.prompt_source,
                                      f"prompts of at most {room} tokens (the context of {self.model}, {limits.n_ctx}, "
                                      f"less max_new_tokens={self.max_new_tokens}); row {i + 1} has {n}")
        if self.task_suite != "builtin":
            read_jsonl(self.task_suite, field="task_suite", required=("prompt", "answer"), unique="prompt",
                       duplicates="all")

    def n_selected(self, n: int, p: float | None = None) -> int:
        """c = max(1, int(n * p)): neurons kept per prompt in a cell of width n (the released code's count)."""
        return max(1, int(n * (self.top_p if p is None else p)))
