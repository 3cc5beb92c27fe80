"""Steps 1-2: greedy generation, then recording mean |activation| over the decoding steps.

The paper re-runs the model without a cache at every decoding step t and reads the last position
P+t-1. Every activation at position j depends only on tokens 0..j and on j itself (position-wise
sublayers, causal attention, absolute RoPE positions), so one teacher-forced pass over
x_0..x_{P+T-2} gives the same numbers at positions P-1..P+T-2 up to float summation order.
`recording="per_step"` reproduces the paper's loop for every prompt (`record_per_step`).

The equality check's reference (`tf_check`) is the per-step regeneration *at the teacher-forced pass's
shape* (`record_per_step_padded`): step t feeds x_0..x_{P+t-1} followed by filler tokens (the pad id, never
the real continuation) up to the one pass's length, and reads position P+t-1. Position P+t-1 is blind to
the filler (causal attention gives the masked scores exactly zero weight; position-wise sublayers see only
their own row), and every GEMM and attention kernel runs at the one pass's shape, so it takes the same
algorithm and the same summation order (GPU kernels choose split-K and tiling by shape). The rows are
therefore bitwise those of the one pass, in any dtype on any device: `teacher_forced_max_rel_err` is 0 by
construction, and any leak of a later position into an earlier one (broken causality) makes it > 0. The
paper's unpadded loop runs at P+t positions per step, so in bfloat16 on a GPU it differs from the one pass
by rounding alone (0.089 measured on an H200, 8B-shaped Llama; 0.0 in float32 and on this CPU);
`tf_check(paper_loop=True)` runs it as well and reports that error. `teacher_forced_speedup` is the padded
regeneration's seconds over the one pass's: T passes of the full length against one, so about T (a little
more than the paper loop's T(P+T/2)/(P+T)). The manifest's "tf_check" entry names the reference the check used.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp.generate import greedy, windowed_repetition_penalty
from interp.models import synchronize
from interp.sites import Site

from .data import Prompt
from .neurons import recording_site, widths

ROLE_USER, ROLE_ASSISTANT = "User:", "Assistant:"


@dataclass
class Generation:
    prompt: Prompt
    templated: str
    """The exact string the model read (chat template with its default system prompt, or plain roles)."""
    prompt_ids: list[int]
    gen_ids: list[int]
    """Generated tokens, without the stop token."""
    stopped: bool
    """Stopped at EOS / end of turn (the stop token counts in T but is never fed back)."""
    text: str

    @property
    def n_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def n_steps(self) -> int:
        """T: decoding steps, the stop token included."""
        return len(self.gen_ids) + (1 if self.stopped else 0)

    @property
    def fed(self) -> list[int]:
        """x_0..x_{P+T-2}: the tokens whose activations the recording reads."""
        ids = self.prompt_ids + self.gen_ids
        return ids if self.stopped else ids[:-1]


def prompt_text(model, user: str, system: str | None = None) -> str:
    """Chat template with the generation prompt (instruct models), else the plain-text role format."""
    if model.info.chat:
        return model.chat_text(user, system=system)
    head = f"{system}\n\n" if system else ""
    return f"{head}{ROLE_USER} {user}\n{ROLE_ASSISTANT}"


def _plain_stop(model, ids: list[int]) -> tuple[list[int], bool]:
    """Cut a base model's continuation before the newline that starts the next user turn ("\\nUser:").

    That newline's token is the stop token (counted in T, never fed back)."""
    marker = "\n" + ROLE_USER
    at = model.tokenizer.decode(ids).find(marker)
    if at < 0:
        return ids, False
    for k in range(len(ids)):  # the token that reaches into the marker's first character
        if len(model.tokenizer.decode(ids[: k + 1])) > at:
            return ids[:k], True
    return ids, False  # pragma: no cover


def generate(model, prompts: Sequence[Prompt], max_new_tokens: int, penalty: float, window: int,
             batch_size: int = 4, stop: bool = True) -> list[Generation]:
    """Greedy decoding (KV cache) with the windowed repetition penalty, batched per group.

    `stop=False` decodes exactly `max_new_tokens` tokens, past any stop token (the equality check's prefix)."""
    texts = [prompt_text(model, p.text) for p in prompts]
    chat = model.info.chat
    out = greedy(model, texts, max_new_tokens, logits_fn=windowed_repetition_penalty(penalty, window),
                 hooked=False, templated=chat, batch_size=batch_size, stop_ids=None if stop else [])
    gens = []
    for p, text, ids in zip(prompts, texts, out):
        stopped = stop and len(ids) < max_new_tokens
        if stop and not chat:
            ids, cut = _plain_stop(model, ids)
            stopped = stopped or cut
        pids = model.tokenize(text, templated=chat)["input_ids"][0].tolist()
        gens.append(Generation(p, text, pids, ids, stopped, model.tokenizer.decode(ids)))
    return gens


# ----------------------------------------------------------------------------- recording


def forward_to_last_layer(model, ids: Tensor) -> None:
    """A hooked forward of `ids` that stops after the last layer's resid_post (its hooks have all fired):
    measurements that need no logits skip the final norm and unembedding."""
    model.forward_until(ids.to(model.device), Site("resid_post", model.info.n_layers - 1))


def _one_pass(model, ids: list[int]) -> None:
    """The teacher-forced pass's forward: one sequence (batch 1), no mask, in one piece.

    `record_per_step_padded` runs every step through this same function at the same length, which is what
    makes its rows bitwise the one pass's. A chunked prefill (the method's scaling note, "2,048 tokens at a
    time") would go here, and both recordings would then share its chunk boundaries."""
    forward_to_last_layer(model, torch.tensor([ids], dtype=torch.long, device=model.device))


@dataclass
class Recording:
    sums: dict[str, Float[Tensor, "layer n"]]
    """Sum over the recorded rows of |activation|, float32."""
    n_rows: int
    rows: dict[str, Float[Tensor, "layer row n"]] | None = None
    """Every recorded row of |activation| (only when asked for: the equality check)."""

    def means(self) -> dict[str, np.ndarray]:
        return {t: (s / self.n_rows).cpu().numpy() for t, s in self.sums.items()}


@contextlib.contextmanager
def _recorder(model, types: Sequence[str], state: dict, keep_rows: bool):
    """Hooks that add |act| of the rows in state["rows"] into state["sums"] (and keep them)."""
    L = model.info.n_layers
    w = widths(model.info, types)
    state["sums"] = {t: torch.zeros(L, w[t], dtype=torch.float32) for t in types}
    state["kept"] = {t: [[] for _ in range(L)] for t in types} if keep_rows else None

    def make(t: str, layer: int):
        def hook(act: Tensor) -> None:
            x = act[0].reshape(act.shape[1], -1)[state["rows"]]  # (rows, n): heads flattened h*d_head + d
            a = x.detach().abs().float().cpu()
            state["sums"][t][layer] += a.sum(0)
            if state["kept"] is not None:
                state["kept"][t][layer].append(a)

        return hook

    pairs = [(recording_site(model, t, layer), make(t, layer)) for t in types for layer in range(L)]
    with torch.no_grad(), model.hooks(pairs):
        yield


def _result(state: dict, n_rows: int, keep_rows: bool) -> Recording:
    rows = None
    if keep_rows:
        width = {t: s.shape[1] for t, s in state["sums"].items()}  # a generation of 0 steps keeps 0 rows
        rows = {t: torch.stack([torch.cat(r, 0) if r else torch.zeros(0, width[t]) for r in per_layer])
                for t, per_layer in state["kept"].items()}
    return Recording(state["sums"], n_rows, rows)


def record_teacher_forced(model, gen: Generation, types: Sequence[str], keep_rows: bool = False) -> Recording:
    """One pass over x_0..x_{P+T-2}; rows P-1..P+T-2 (the last position of each paper step)."""
    state = {"rows": slice(gen.n_prompt - 1, None)}
    with _recorder(model, types, state, keep_rows):
        _one_pass(model, gen.fed)
    return _result(state, gen.n_steps, keep_rows)


def record_per_step(model, gen: Generation, types: Sequence[str], keep_rows: bool = False) -> Recording:
    """The paper's loop: for t = 0..T-1 re-run x_0..x_{P+t-1} without a cache, read the last position."""
    fed = gen.fed
    state = {"rows": slice(-1, None)}
    with _recorder(model, types, state, keep_rows):
        for t in range(gen.n_steps):
            forward_to_last_layer(model, torch.tensor([fed[: gen.n_prompt + t]], dtype=torch.long,
                                                      device=model.device))
    return _result(state, gen.n_steps, keep_rows)


def filler_id(model) -> int:
    """The token that pads a padded regeneration: the tokenizer's pad id, else its EOS id, else 0."""
    tok = model.tokenizer
    for i in (tok.pad_token_id, tok.eos_token_id):
        if i is not None:
            return int(i)
    return 0


def record_per_step_padded(model, gen: Generation, types: Sequence[str], keep_rows: bool = False,
                           future: Literal["filler", "real"] = "filler") -> Recording:
    """The per-step regeneration at the one pass's shape: for t = 0..T-1 run x_0..x_{P+t-1} followed by filler
    up to the one pass's length P+T-1, and read position P+t-1 (the module docstring says why this is exact).

    `future="real"` feeds the real x_{P+t}.. instead of filler (the one pass's input at every step): a causal
    model gives the same rows either way, which the tests use as a control."""
    fed = gen.fed
    fill = filler_id(model)
    state: dict = {}
    with _recorder(model, types, state, keep_rows):
        for t in range(gen.n_steps):
            j = gen.n_prompt + t - 1  # the last real position
            state["rows"] = slice(j, j + 1)
            _one_pass(model, fed if future == "real" else fed[: j + 1] + [fill] * (len(fed) - j - 1))
    return _result(state, gen.n_steps, keep_rows)


def truncated(gen: Generation, n_tokens: int) -> Generation:
    """The first `n_tokens` decoding steps of `gen` (for the equality check)."""
    if gen.n_steps <= n_tokens:
        return gen
    return Generation(gen.prompt, gen.templated, gen.prompt_ids, gen.gen_ids[:n_tokens], False, "")


#: The regeneration `tf_check` compares the one pass with (the manifest's "tf_check" entry names it).
REFERENCE = "per_step_padded"


@dataclass
class TFCheck:
    frame: pd.DataFrame
    """type, layer, max_abs_err, max_rel_err: the one pass against the padded per-step regeneration."""
    max_rel_err: float
    t_step: float
    """Seconds of the per-step regeneration (padded: T passes of the one pass's length)."""
    t_tf: float
    cpu_step: float
    """CPU seconds of this process (all threads) for the per-step loop: robust to other jobs on the machine."""
    cpu_tf: float
    tf: Recording
    step: Recording
    """The reference: the per-step regeneration at the one pass's shape (`record_per_step_padded`)."""
    n_tokens: int
    t_paper: float | None = None
    """Seconds of the paper's unpadded loop (growing prefixes), when `tf_check` ran it (`paper_loop=True`)."""
    paper_max_rel_err: float | None = None
    """The one pass against the paper's unpadded loop: rounding alone where kernels depend on the shape."""
    reference: str = REFERENCE

    def summary(self) -> dict:
        """The manifest's "tf_check" entry: the regeneration the check compared with and timed."""
        out = {"reference": self.reference, "tokens": self.n_tokens,
               "filler": "pad id (else EOS) after x_0..x_{P+t-1}, up to the one pass's length"}
        if self.paper_max_rel_err is not None:
            out["paper_loop_max_rel_err"] = self.paper_max_rel_err
        return out


def _errors(model, types: Sequence[str], tf: Recording, ref: Recording) -> pd.DataFrame:
    rows = []
    for t in types:
        for layer in range(model.info.n_layers):
            a, b = tf.rows[t][layer], ref.rows[t][layer]  # (T, n) of |act|
            err = float((a - b).abs().max())
            m = float(b.abs().max())
            rows.append({"type": t, "layer": layer, "max_abs_err": err, "max_rel_err": err / m if m > 0 else err})
    return pd.DataFrame(rows)


def _timed(model, fn):
    """fn()'s result, its wall seconds and its CPU seconds (the device synchronised at both ends)."""
    synchronize(model)
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    synchronize(model)
    return out, time.perf_counter() - t0, time.process_time() - c0


def tf_check(model, gen: Generation, n_tokens: int, types: Sequence[str], paper_loop: bool = False) -> TFCheck:
    """Record the first `n_tokens` steps by the one pass and by the per-step regeneration padded to its shape
    (the reference); per-tensor relative error per (type, layer), and both timed.

    `paper_loop=True` also runs and times the paper's unpadded loop and reports the one pass's error against it
    (`paper_max_rel_err`: 0 on this CPU, 0.089 in bfloat16 on an H200)."""
    g = truncated(gen, n_tokens)
    record_teacher_forced(model, g, types[:1])  # warm-up, so no timing pays first-call costs
    t_paper = paper_err = None
    if paper_loop:
        paper, t_paper, _ = _timed(model, lambda: record_per_step(model, g, types, keep_rows=True))
    step, t_step, cpu_step = _timed(model, lambda: record_per_step_padded(model, g, types, keep_rows=True))
    tf, t_tf, cpu_tf = _timed(model, lambda: record_teacher_forced(model, g, types, keep_rows=True))
    frame = _errors(model, types, tf, step)
    if paper_loop:
        paper_err = float(_errors(model, types, tf, paper)["max_rel_err"].max())
    return TFCheck(frame, float(frame["max_rel_err"].max()), t_step, t_tf, cpu_step, cpu_tf, tf, step, g.n_steps,
                   t_paper, paper_err)


def record_all(model, gens: Sequence[Generation], types: Sequence[str], per_step: bool,
               progress=None) -> list[Recording]:
    """One recording per generation (teacher-forced, or the paper's per-step loop)."""
    fn = record_per_step if per_step else record_teacher_forced
    it = progress(gens, desc="record") if progress else gens
    return [fn(model, g, types) for g in it]
