"""Steps 1-2: greedy generation, then recording mean |activation| over the decoding steps.

The paper re-runs the model without a cache at every decoding step t and reads the last position
P+t-1. Every activation at position j depends only on tokens 0..j and on j itself (position-wise
sublayers, causal attention, absolute RoPE positions), so one teacher-forced pass over
x_0..x_{P+T-2} gives the same numbers at positions P-1..P+T-2 up to float summation order.
`tf_check` proves it on every run against the per-step loop; `recording="per_step"` reproduces the
paper's loop for every prompt.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp.generate import greedy, windowed_repetition_penalty
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


@dataclass
class Recording:
    sums: dict[str, Float[Tensor, "layer n"]]
    """Sum over the recorded rows of |activation|, float32."""
    n_rows: int
    rows: dict[str, Float[Tensor, "layer row n"]] | None = None
    """Every recorded row of |activation| (only when asked for: the equality check)."""

    def means(self) -> dict[str, np.ndarray]:
        return {t: (s / self.n_rows).numpy() for t, s in self.sums.items()}


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
    ids = torch.tensor([gen.fed], dtype=torch.long, device=model.device)
    state = {"rows": slice(gen.n_prompt - 1, None)}
    with _recorder(model, types, state, keep_rows):
        forward_to_last_layer(model, ids)
    return _result(state, gen.n_steps, keep_rows)


def record_per_step(model, gen: Generation, types: Sequence[str], keep_rows: bool = False) -> Recording:
    """The paper's loop: for t = 0..T-1 re-run x_0..x_{P+t-1} without a cache, read the last position."""
    fed = gen.fed
    state = {"rows": slice(-1, None)}
    with _recorder(model, types, state, keep_rows):
        for t in range(gen.n_steps):
            forward_to_last_layer(model, torch.tensor([fed[: gen.n_prompt + t]], dtype=torch.long))
    return _result(state, gen.n_steps, keep_rows)


def truncated(gen: Generation, n_tokens: int) -> Generation:
    """The first `n_tokens` decoding steps of `gen` (for the equality check)."""
    if gen.n_steps <= n_tokens:
        return gen
    return Generation(gen.prompt, gen.templated, gen.prompt_ids, gen.gen_ids[:n_tokens], False, "")


@dataclass
class TFCheck:
    frame: pd.DataFrame
    """type, layer, max_abs_err, max_rel_err."""
    max_rel_err: float
    t_step: float
    t_tf: float
    cpu_step: float
    """CPU seconds of this process (all threads) for the per-step loop: robust to other jobs on the machine."""
    cpu_tf: float
    tf: Recording
    step: Recording
    n_tokens: int


def tf_check(model, gen: Generation, n_tokens: int, types: Sequence[str]) -> TFCheck:
    """Record the first `n_tokens` steps both ways; per-tensor relative error per (type, layer)."""
    g = truncated(gen, n_tokens)
    record_teacher_forced(model, g, types[:1])  # warm-up, so neither timing pays first-call costs
    t0, c0 = time.perf_counter(), time.process_time()
    step = record_per_step(model, g, types, keep_rows=True)
    t_step, cpu_step = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    tf = record_teacher_forced(model, g, types, keep_rows=True)
    t_tf, cpu_tf = time.perf_counter() - t0, time.process_time() - c0
    rows = []
    for t in types:
        for layer in range(model.info.n_layers):
            a, b = tf.rows[t][layer], step.rows[t][layer]  # (T, n) of |act|
            err = float((a - b).abs().max())
            ref = float(b.abs().max())
            rows.append({"type": t, "layer": layer, "max_abs_err": err, "max_rel_err": err / ref if ref > 0 else err})
    frame = pd.DataFrame(rows)
    return TFCheck(frame, float(frame["max_rel_err"].max()), t_step, t_tf, cpu_step, cpu_tf, tf, step, g.n_steps)


def record_all(model, gens: Sequence[Generation], types: Sequence[str], per_step: bool,
               progress=None) -> list[Recording]:
    """One recording per generation (teacher-forced, or the paper's per-step loop)."""
    fn = record_per_step if per_step else record_teacher_forced
    it = progress(gens, desc="record") if progress else gens
    return [fn(model, g, types) for g in it]
