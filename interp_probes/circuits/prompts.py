"""The faithfulness test's prompts: short templated texts whose next token a small model predicts with some
confidence (facts, sequences, repeated names, opposites), generated offline and seeded."""

from __future__ import annotations

import random

_FACTS = [
    "The capital of France is", "The capital of Japan is", "The capital of Italy is", "The capital of Spain is",
    "The capital of Germany is", "The Eiffel Tower is in the city of", "The largest ocean on Earth is the",
    "Water freezes at zero degrees", "The opposite of hot is", "The opposite of up is", "The color of the sky is",
    "A week has seven", "The first month of the year is", "The sun rises in the",
]
_SEQUENCES = [
    "1, 2, 3, 4,", "2, 4, 6, 8,", "Monday, Tuesday, Wednesday,", "January, February, March,", "A, B, C, D,",
    "one, two, three, four,", "10, 20, 30, 40,", "red, orange, yellow, green,",
]
_NAMES = ["Mary", "John", "Alice", "Bob", "Sarah", "David", "Emma", "James"]
_PLACES = ["store", "park", "school", "office", "beach", "library"]
_OBJECTS = ["a book", "a drink", "an apple", "a letter", "a gift", "a ticket"]


def _induction(rng: random.Random) -> str:
    a, b = rng.sample(_NAMES, 2)
    return f"When {a} and {b} went to the {rng.choice(_PLACES)}, {b} gave {rng.choice(_OBJECTS)} to"


def prompts(n: int, seed: int) -> list[str]:
    """`n` distinct prompts: the fixed facts and sequences first (shuffled), then seeded name-mover sentences."""
    rng = random.Random(seed)
    fixed = _FACTS + _SEQUENCES
    rng.shuffle(fixed)
    out = fixed[:n]
    seen = set(out)
    while len(out) < n:
        p = _induction(rng)
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out
