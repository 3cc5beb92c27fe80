"""Render a conversation to text and tokens, with the token span of every segment (torch-free).

Chat models: the model's chat template, rendered incrementally (messages[:1], messages[:2], ...) so
each message's character span is the text its own rendering adds; role headers and end-of-turn
markers thus belong to the turn they open or close. Templates without a system role get the
instructions at the start of the first user turn (that block is the system segment). Models without
a chat template (the embedded base Gemma-3-270M) use the plain-text role format below. Character
spans map to token spans through the tokenizer's offset mapping: a token belongs to the turn that
holds its last character; a turn's *content* tokens are those overlapping its content text.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from interp.errors import InterpError

#: The partition of the keys 1..T-1 (position 0, the attention sink, is kept apart).
SEGMENTS = ("system", "user", "prev_assistant", "self", "other")
#: Shares also reported: the most recent earlier reply (a subset of prev_assistant) and the sink.
EXTRA = ("recent_assistant", "sink")
SHARE_COLUMNS = SEGMENTS + EXTRA

# The project's plain-text role format for models without a chat template.
PLAIN_SYSTEM = "{content}\n\n"
PLAIN_TURN = {"user": "User: {content}\n", "assistant": "Assistant: {content}\n\n"}
PLAIN_GENERATION = "Assistant:"


@dataclass(frozen=True)
class Turn:
    """One message (or the generation prompt) of a rendered conversation."""

    role: str
    """system | user | assistant | generation (the assistant header the reply will follow)"""
    index: int
    """Message index (the generation prompt: len(messages))."""
    chars: tuple[int, int]
    content_chars: tuple[int, int]
    tokens: tuple[int, int] = (0, 0)
    """[start, end) token positions of the whole turn, header included."""
    content: tuple[int, int] = (0, 0)
    """[start, end) token positions of its content (no header or end-of-turn marker)."""


@dataclass
class Rendered:
    """A conversation as text and token ids with segment spans."""

    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    turns: list[Turn]
    teacher_forced: bool
    """The last message is the assistant's current reply (the response rows)."""
    segment: list[str] = field(default_factory=list)
    """Segment of each position (one of SEGMENTS, or "sink" at position 0)."""

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def assistant_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.role == "assistant"]

    @property
    def response(self) -> Turn:
        """The current (teacher-forced) reply."""
        if not self.teacher_forced:
            raise InterpError("a rendering without a teacher-forced reply has no response rows")
        return self.assistant_turns[-1]

    @property
    def previous_replies(self) -> list[Turn]:
        """The earlier assistant turns, oldest first."""
        turns = self.assistant_turns
        return turns[:-1] if self.teacher_forced else turns

    def spans(self) -> list[dict[str, Any]]:
        """JSON-able token spans of every turn."""
        return [{"role": t.role, "index": t.index, "start": t.tokens[0], "end": t.tokens[1],
                 "content_start": t.content[0], "content_end": t.content[1]} for t in self.turns]


_SYSTEM_SUPPORT: dict[int, bool] = {}


def supports_system(tokenizer: Any) -> bool:
    """Whether the chat template renders a system message as its own text (cached per tokenizer)."""
    key = id(tokenizer)
    if key not in _SYSTEM_SUPPORT:
        _SYSTEM_SUPPORT[key] = _renders_system(tokenizer)
    return _SYSTEM_SUPPORT[key]


def _renders_system(tokenizer: Any) -> bool:
    probe_text = "SYSTEM-PROBE-7f3a"
    try:
        out = tokenizer.apply_chat_template(
            [{"role": "system", "content": probe_text}, {"role": "user", "content": "hi"}], tokenize=False
        )
    except Exception:  # noqa: BLE001 - jinja raises its own TemplateError for "no system role"
        return False
    return probe_text in out


def render(tokenizer: Any, messages: Sequence[dict[str, str]], chat: bool, generation_prompt: bool = False) -> Rendered:
    """Text, ids and spans of `messages` (system first), through the chat template or the plain format.

    generation_prompt: end with the assistant header the reply follows (for decoding); otherwise the
    last message, when it is the assistant's, is the teacher-forced response.
    """
    messages = [dict(m) for m in messages]
    if not messages or messages[0]["role"] != "system":
        raise InterpError("render() needs the system message first")
    if chat:
        text, turns = _chat_turns(tokenizer, messages, generation_prompt)
    else:
        text, turns = _plain_turns(messages, generation_prompt)
    enc = tokenizer(text, add_special_tokens=not chat, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    turns = _token_spans(turns, offsets)
    teacher_forced = not generation_prompt and messages[-1]["role"] == "assistant"
    r = Rendered(text, ids, offsets, turns, teacher_forced)
    r.segment = _segments(r)
    return r


# ============================================================================= character spans


def _plain_turns(messages: list[dict[str, str]], generation_prompt: bool) -> tuple[str, list[Turn]]:
    text, turns = "", []
    for i, m in enumerate(messages):
        fmt = PLAIN_SYSTEM if m["role"] == "system" else PLAIN_TURN[m["role"]]
        piece = fmt.format(content=m["content"])
        start = len(text) + fmt.index("{content}")
        turns.append(Turn(m["role"], i, (len(text), len(text) + len(piece)), (start, start + len(m["content"]))))
        text += piece
    if generation_prompt:
        turns.append(Turn("generation", len(messages), (len(text), len(text) + len(PLAIN_GENERATION)),
                          (len(text) + len(PLAIN_GENERATION),) * 2))
        text += PLAIN_GENERATION
    return text, turns


def _chat_turns(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> tuple[str, list[Turn]]:
    merged = not supports_system(tokenizer)
    system = messages[0]["content"]
    msgs = messages
    if merged:  # the instructions open the first user turn
        if len(messages) < 2 or messages[1]["role"] != "user":
            raise InterpError("a template without a system role needs a user turn after the system message")
        msgs = [{"role": "user", "content": system + "\n\n" + messages[1]["content"]}] + messages[2:]

    def apply(ms: list[dict[str, str]], gen: bool = False) -> str:
        return tokenizer.apply_chat_template(ms, tokenize=False, add_generation_prompt=gen)

    turns: list[Turn] = []
    prev = ""
    for k in range(1, len(msgs) + 1):
        cur = apply(msgs[:k])
        if not cur.startswith(prev):
            raise InterpError(
                "the chat template re-renders earlier turns when one is added (not prefix-stable); "
                "segment spans cannot be read from it"
            )
        m = msgs[k - 1]
        at = cur.find(m["content"], len(prev))
        if at < 0:
            raise InterpError(f"message {k - 1} ({m['role']}) does not appear verbatim in the chat template's output")
        content = (at, at + len(m["content"]))
        if merged and k == 1:  # split: [header + instructions + separator] is system, the rest user
            split = at + len(system) + 2
            turns.append(Turn("system", 0, (len(prev), split), (at, at + len(system))))
            turns.append(Turn("user", 1, (split, len(cur)), (split, content[1])))
        else:
            index = k - 1 + (1 if merged else 0)
            turns.append(Turn(m["role"], index, (len(prev), len(cur)), content))
        prev = cur
    text = prev
    if generation_prompt:
        full = apply(msgs, gen=True)
        if not full.startswith(text):
            raise InterpError("the generation prompt changes the rendered conversation")
        turns.append(Turn("generation", len(messages), (len(text), len(full)), (len(full), len(full))))
        text = full
    return text, turns


# ============================================================================= token spans


def _token_spans(turns: list[Turn], offsets: list[tuple[int, int]]) -> list[Turn]:
    starts = [t.chars[0] for t in turns]
    owner = []
    for s, e in offsets:
        c = e - 1 if e > s else s
        owner.append(max(0, bisect.bisect_right(starts, c) - 1))
    out = []
    for k, t in enumerate(turns):
        pos = [i for i, o in enumerate(owner) if o == k]
        tok = (pos[0], pos[-1] + 1) if pos else (0, 0)
        ca, cb = t.content_chars
        cpos = [i for i, (s, e) in enumerate(offsets) if e > s and s < cb and e > ca]
        content = (cpos[0], cpos[-1] + 1) if cpos else (tok[1], tok[1])
        if pos and pos != list(range(tok[0], tok[1])):
            raise InterpError(f"turn {k} ({t.role}) does not map to a contiguous token span")
        out.append(Turn(t.role, t.index, t.chars, t.content_chars, tok, content))
    return out


def _segments(r: Rendered) -> list[str]:
    seg = ["other"] * len(r.ids)
    last_assistant = r.assistant_turns[-1].index if r.teacher_forced else None
    for t in r.turns:
        if t.role == "system":
            name = "system"
        elif t.role == "user":
            name = "user"
        elif t.role == "generation" or t.index == last_assistant:
            name = "self"
        else:
            name = "prev_assistant"
        for i in range(*t.tokens):
            seg[i] = name
    if seg:
        seg[0] = "sink"
    return seg
