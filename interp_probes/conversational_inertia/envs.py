"""The synthetic multi-turn environments, their episodes and the context policies (torch-free).

Two environments share one interface (method: ../shared/methods/conversational_inertia.md):

- **DoorExplore** (behaviour is gated here): four doors, one unlocked; each observation reports
  that the last try failed without naming the answer. A *bait* history kept trying one locked door
  c_prev; repeating it is inertia. A *cycle* history (the behavioural control) tried three doors in
  turn, so the untried fourth is the answer and re-trying any of the three is the second form of
  inertia (copying the history's pattern).
- **DoorWorld** (attention signature; behaviour reported): each observation names the open door. A
  bait history had the same colour every round; the current observation names another.

An `Episode` holds N prior rounds (observation, canonical reply) and the current observation with
its canonical reply (used for teacher forcing). A transcript uses one reply template for all its
turns, which keeps the earlier replies index-aligned with the current one. *Control* transcripts
write the earlier turns in a different wording that shares the content tokens (the colour, "door")
but not their positions. `context()` turns an episode and a policy (Long, Window(W), Last1,
Clip(W), Short) into chat messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

COLORS = ("red", "blue", "green", "yellow")
ENVS = ("doorexplore", "doorworld")
POLICIES = ("long", "window", "last1", "clip", "short")
ROOMS = (
    "kitchen", "library", "hallway", "bedroom", "cellar", "attic",
    "study", "garden room", "dining room", "bathroom", "workshop", "pantry",
)

# One template per transcript, used for every assistant turn of it (20-40 tokens each).
TEMPLATES: dict[str, tuple[str, ...]] = {
    "doorexplore": (
        "Thought: I will try the {c} door this time and see whether it opens. Action: open {c} door.",
        "Thought: None of the doors has opened for me yet, so I will try the {c} door now. Action: open {c} door.",
        "Thought: The {c} door is my choice for this round, so I will try it. Action: open {c} door.",
        "Thought: I am still looking for the unlocked door, and the {c} door seems like a good one to try next. "
        "Action: open {c} door.",
        "Thought: To find the way out of the house, I will try the {c} door. Action: open {c} door.",
        "Thought: I will try the {c} door. It might be the unlocked one, so it is worth a try. Action: open {c} door.",
        "Thought: My plan is simple: walk up to the {c} door, turn the handle and push. Action: open {c} door.",
        "Thought: I think the {c} door is the best door to try right now, because I still have not found the "
        "unlocked door in this house. Action: open {c} door.",
    ),
    "doorworld": (
        "Thought: the open door is {c}, so I will walk through it. Action: open {c} door.",
        "Thought: the observation tells me that the open door is the {c} one. Action: open {c} door.",
        "Thought: the open door is {c}, as the message says. Action: open {c} door.",
        "Thought: I read the message carefully, and the open door in this room is the {c} door. Action: open {c} door.",
        "Thought: the open door is {c}, and the other doors are closed, so I choose it. Action: open {c} door.",
        "Thought: since the {c} door is the one that is open, that is the door I will take. Action: open {c} door.",
        "Thought: I can see that the open door is {c}. I will go that way. Action: open {c} door.",
        "Thought: the room has four doors, and only the {c} door is open, so I will leave the room through the {c} "
        "door. Action: open {c} door.",
    ),
}

# Control wordings for the earlier turns: the content tokens, at other positions (no Thought/Action frame).
CONTROL_WORDINGS: dict[str, tuple[str, ...]] = {
    "doorexplore": (
        "Okay, so now I am going to walk over and go through the {c} door, because it might be the unlocked one.",
        "Right, let me just walk across the room and try to go through the {c} door now, since it looks good.",
        "Well, after looking around this house for a while, my decision is that I should try the {c} door at once.",
        "I will go through the {c} door now because it might be unlocked.",
        "So far nothing has worked out in here. Fine, then: the {c} door gets my next attempt, right now.",
        "Hmm. Maybe it is the {c} door that is unlocked, so going there is what makes the most sense to me now.",
    ),
    "doorworld": (
        "I will go through the {c} door now because it is open.",
        "Okay, so now I am going to walk over and go through the {c} door, because it is the open one.",
        "Right, let me just walk across the room and go through the {c} door now, since that one is open.",
        "Well, after looking around this room for a while, my decision is that I should go through the {c} door.",
        "Good news: an open way out. Off I go, straight towards the {c} door, and then into whatever is next.",
        "Hmm. It says the {c} door is open, so going there is what makes the most sense to me at this point.",
    ),
}
"""Candidate wordings; `control_wording` picks, per template, the one least aligned with it."""

ALIGN_OFFSETS = (-1, 0, 1, 2)
"""Column - row offsets the diagonal score can see (δ in {0, +1}, band w <= 1)."""


def aligned_tokens(row: Sequence[int], col: Sequence[int]) -> int:
    """How many reply tokens have an identical token in `col` within the scored band."""
    k = min(len(row), len(col))
    return sum(any(0 <= i + e < len(col) and row[i] == col[i + e] for e in ALIGN_OFFSETS) for i in range(k))


def control_wording(env: str, template: int, encode: Callable[[str], list[int]]) -> str:
    """The control wording whose tokens least often sit in the scored band of the template's tokens
    (same colour in both: the worst case)."""
    tpl = TEMPLATES[env][template]
    scores = []
    for wording in CONTROL_WORDINGS[env]:
        scores.append(max(aligned_tokens(encode(tpl.format(c=c)), encode(wording.format(c=c))) for c in COLORS))
    return CONTROL_WORDINGS[env][int(np.argmin(scores))]


def system_prompt(env: str, template: str, order: Sequence[str] = COLORS) -> str:
    """The environment's instructions, with the reply line in the transcript's template."""
    line = template.format(c="<color>")
    if env == "doorexplore":
        doors = f"{order[0]}, {order[1]}, {order[2]} and {order[3]}"
        return (
            f"You are an agent in a house with four doors: {doors}. One door is unlocked. "
            f"Each turn, try one door. Reply with one line: {line}"
        )
    if env == "doorworld":
        return f"You are an agent in a house. Each turn you are told which door is open. Reply with one line: {line}"
    raise ValueError(f"unknown environment {env!r}")


def explore_observation(k: int, tried: str | None) -> str:
    """DoorExplore's user turn of round k (1-based): the outcome of the last try, never the answer."""
    if k == 1 or tried is None:
        return f"Round {k}. Which door do you try first?"
    return f"Round {k}. You tried the {tried} door. It is locked. Which door do you try next?"


def world_observation(k: int, room: str, open_door: str) -> str:
    """DoorWorld's user turn of round k: the room and the open door."""
    return f"Round {k}. You are in the {room}. The doors are red, blue, green and yellow. The {open_door} door is open."


@dataclass(frozen=True)
class Episode:
    """N prior rounds and the current one, with what counts as repeat, success and known-locked."""

    id: str
    env: str
    kind: str
    """normal | control (attention transcripts) | bait | cycle (behaviour histories)"""
    system: str
    rounds: tuple[tuple[str, str], ...]
    """(observation, assistant reply) of each prior round."""
    query: str
    """The current observation (round N + 1)."""
    answer: str
    """The canonical current reply (teacher forcing), in the transcript's template."""
    template: int
    c_prev: str | None = None
    """The colour the history points to (the door just reported locked / the old open door)."""
    correct: tuple[str, ...] = ()
    """Actions that count as success."""
    known_locked: tuple[str, ...] = ()
    """Doors the history already reported locked (DoorExplore)."""
    clip_phase: int = 0
    """Rounds between the last clearing of the history and round 1 (Clip(W) keeps (N + phase) mod W)."""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def n(self) -> int:
        return len(self.rounds)

    def truncated(self, n: int) -> "Episode":
        """The same episode after its first n prior rounds (bait histories are nested in N)."""
        if not 1 <= n <= self.n:
            raise ValueError(f"cannot truncate {self.n} rounds to {n}")
        if self.kind not in ("bait", "cycle"):
            raise ValueError("only behaviour histories are nested")
        return _REBUILD[(self.env, self.kind)](self, n)


# ============================================================================= episode builders


def _pick(rng: np.random.Generator, seq: Sequence[Any]) -> Any:
    return seq[int(rng.integers(len(seq)))]


def attention_transcript(env: str, n: int, template: int, rng: np.random.Generator, control: str | None = None,
                         eid: str = "") -> Episode:
    """A normal history of n rounds (or, given a `control` wording, a control one) and a teacher-forced
    current reply in the template."""
    tpl = TEMPLATES[env][template]
    wording = control or tpl
    order = tuple(rng.permutation(COLORS).tolist()) if env == "doorexplore" else COLORS
    rounds, last = [], None
    if env == "doorexplore":
        for k in range(1, n + 2):
            c = _pick(rng, [x for x in COLORS if x != last])
            obs = explore_observation(k, last)
            if k <= n:
                rounds.append((obs, wording.format(c=c)))
            last = c
        query, answer = obs, tpl.format(c=c)
    else:
        for k in range(1, n + 2):
            c = _pick(rng, COLORS)
            obs = world_observation(k, _pick(rng, ROOMS), c)
            if k <= n:
                rounds.append((obs, wording.format(c=c)))
        query, answer = obs, tpl.format(c=c)
    return Episode(eid, env, "control" if control else "normal", system_prompt(env, tpl, order), tuple(rounds),
                   query, answer, template, meta={"wording": wording, "order": list(order)})


def explore_bait(n: int, template: int, c_prev: str, order: Sequence[str], eid: str = "", phase: int = 0) -> Episode:
    """DoorExplore: n rounds of trying the same locked door c_prev; the next try should be another."""
    tpl = TEMPLATES["doorexplore"][template]
    rounds = tuple((explore_observation(k, c_prev if k > 1 else None), tpl.format(c=c_prev)) for k in range(1, n + 1))
    others = tuple(c for c in COLORS if c != c_prev)
    return Episode(eid, "doorexplore", "bait", system_prompt("doorexplore", tpl, order), rounds,
                   explore_observation(n + 1, c_prev), tpl.format(c=others[0]), template, c_prev=c_prev,
                   correct=others, known_locked=(c_prev,), clip_phase=phase, meta={"order": list(order)})


def explore_cycle(n: int, template: int, cycle: Sequence[str], order: Sequence[str], eid: str = "",
                  phase: int = 0) -> Episode:
    """DoorExplore control history: the agent tried three doors in turn (each locked); the fourth is the answer."""
    tpl = TEMPLATES["doorexplore"][template]
    tries = [cycle[k % 3] for k in range(n)]
    rounds = tuple((explore_observation(k + 1, tries[k - 1] if k else None), tpl.format(c=tries[k])) for k in range(n))
    answer = next(c for c in COLORS if c not in cycle)
    locked = tuple(dict.fromkeys(tries))
    return Episode(eid, "doorexplore", "cycle", system_prompt("doorexplore", tpl, order), rounds,
                   explore_observation(n + 1, tries[-1]), tpl.format(c=answer), template, c_prev=tries[-1],
                   correct=(answer,) if len(locked) == 3 else tuple(c for c in COLORS if c not in locked),
                   known_locked=locked, clip_phase=phase, meta={"order": list(order), "cycle": list(cycle)})


def world_bait(n: int, template: int, c_prev: str, c_new: str, rooms: Sequence[str], eid: str = "",
               phase: int = 0) -> Episode:
    """DoorWorld: n rounds whose open door was c_prev; the current observation names c_new."""
    tpl = TEMPLATES["doorworld"][template]
    rounds = tuple((world_observation(k, rooms[k - 1], c_prev), tpl.format(c=c_prev)) for k in range(1, n + 1))
    return Episode(eid, "doorworld", "bait", system_prompt("doorworld", tpl), rounds,
                   world_observation(n + 1, rooms[n], c_new), tpl.format(c=c_new), template, c_prev=c_prev,
                   correct=(c_new,), clip_phase=phase, meta={"rooms": list(rooms), "c_new": c_new})


_REBUILD = {
    ("doorexplore", "bait"): lambda e, n: explore_bait(n, e.template, e.c_prev, e.meta["order"], e.id, e.clip_phase),
    ("doorexplore", "cycle"): lambda e, n: explore_cycle(n, e.template, e.meta["cycle"], e.meta["order"], e.id,
                                                          e.clip_phase),
    ("doorworld", "bait"): lambda e, n: world_bait(n, e.template, e.c_prev, e.meta["c_new"], e.meta["rooms"], e.id,
                                                    e.clip_phase),
}


def bait_episodes(env: str, kind: str, count: int, n: int, n_templates: int, clip_w: int,
                  rng: np.random.Generator) -> list[Episode]:
    """`count` behaviour histories of n rounds; templates cycle, colours and door orders are drawn from rng.

    Clip phases cycle over episodes so that the retained history under Clip(W) takes every value 0..W-1.
    """
    out = []
    for i in range(count):
        t = i % n_templates
        phase = i % clip_w
        eid = f"{env}-{kind}-{i:03d}"
        order = tuple(rng.permutation(COLORS).tolist())
        if env == "doorexplore" and kind == "bait":
            out.append(explore_bait(n, t, _pick(rng, COLORS), order, eid, phase))
        elif env == "doorexplore" and kind == "cycle":
            cycle = tuple(rng.permutation(COLORS).tolist()[:3])
            out.append(explore_cycle(n, t, cycle, order, eid, phase))
        elif env == "doorworld" and kind == "bait":
            c_prev = _pick(rng, COLORS)
            c_new = _pick(rng, [c for c in COLORS if c != c_prev])
            rooms = [ROOMS[j] for j in rng.choice(len(ROOMS), size=n + 1, replace=n + 1 > len(ROOMS))]
            out.append(world_bait(n, t, c_prev, c_new, rooms, eid, phase))
        else:
            raise ValueError(f"no {kind} histories in {env}")
    return out


# ============================================================================= context policies


def kept_rounds(policy: str, n: int, window_w: int, clip_w: int, clip_phase: int = 0) -> int:
    """How many of the n prior rounds a policy keeps (the most recent ones)."""
    if policy == "long":
        return n
    if policy == "window":
        return min(n, window_w)
    if policy == "last1":
        return min(n, 1)
    if policy == "clip":
        return min(n, (n + clip_phase) % clip_w)
    if policy == "short":
        return 0
    raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")


def messages(ep: Episode, keep: int | None = None, teacher_forced: bool = False) -> list[dict[str, str]]:
    """Chat messages: system, the last `keep` rounds (all when None), the current observation
    and, when teacher-forced, the canonical current reply."""
    rounds = ep.rounds if keep is None else (ep.rounds[len(ep.rounds) - keep :] if keep else ())
    msgs = [{"role": "system", "content": ep.system}]
    for obs, reply in rounds:
        msgs += [{"role": "user", "content": obs}, {"role": "assistant", "content": reply}]
    msgs.append({"role": "user", "content": ep.query})
    if teacher_forced:
        msgs.append({"role": "assistant", "content": ep.answer})
    return msgs


def context(ep: Episode, policy: str, window_w: int, clip_w: int) -> list[dict[str, str]]:
    """The messages the model sees for the current round under `policy`."""
    return messages(ep, kept_rounds(policy, ep.n, window_w, clip_w, ep.clip_phase))


# ============================================================================= parsing

_STRICT = re.compile(r"Action:\s*open\s+(?:the\s+)?(\w+)\s+door", re.IGNORECASE)
_COLOR = re.compile(r"\b(" + "|".join(COLORS) + r")\b", re.IGNORECASE)


def reply_text(raw: str, chat: bool) -> str:
    """The reply as the model's turn: the whole text for chat models; the first line for plain text."""
    text = raw.strip()
    if not chat:
        text = text.split("\n", 1)[0].strip()
    return text


def parse_action(text: str) -> tuple[str | None, bool]:
    """(colour, follows the format): `Action: open <colour> door`, else loosely the last colour named."""
    m = _STRICT.search(text)
    if m and m.group(1).lower() in COLORS:
        return m.group(1).lower(), True
    named = _COLOR.findall(text)
    return (named[-1].lower() if named else None), False


def score(ep: Episode, action: str | None) -> dict[str, bool]:
    """repeated (the history's door again), success (a correct door), retry of a known-locked door."""
    return {
        "repeated": action is not None and action == ep.c_prev,
        "success": action is not None and action in ep.correct,
        "retry_known_locked": action is not None and action in ep.known_locked,
    }
