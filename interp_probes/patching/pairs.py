"""Clean / corrupted prompt pairs: the built-in tasks and JSONL files (torch-free).

A pair is two prompts of the same token length that differ in a few tokens, with the answer the clean prompt
should get and the wrong answer (the corrupted prompt's answer). The built-in tasks pick their words with the
model's own token counter so that every pair is token-aligned:

* ``ioi`` (indirect object): "When Mary and John went to the store, John gave a drink to" -> " Mary"; the
  corrupted prompt repeats the other name ("..., Mary gave a drink to", answer " John"). Names from
  `interp.corpora`.
* ``factual``: "The Eiffel Tower is located in the city of" -> " Paris", corrupted with another landmark of
  the same token length ("The Colosseum is located in the city of" -> " Rome").
* ``capital``: "The capital of France is" -> " Paris", corrupted with another country ("... of Japan is").

`load_pairs` is what the probe calls (after the model loads, with its tokenizer) and what the config's
pre-load check calls (with the tokenizer.json counter), so both see the same pairs and a mismatch fails
before the model loads, naming the pair.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass

from interp.corpora import FEMALE_NAMES, MALE_NAMES
from interp.data import read_jsonl
from interp.errors import ConfigError

TASKS = ("ioi", "factual", "capital")
FIELDS = ("clean", "corrupt", "answer", "wrong")

IOI_TEMPLATE = "When {A} and {B} went to the {place}, {S} gave a {thing} to"
PLACES = ("store", "park", "station", "market", "school", "garden", "office", "library", "beach", "museum")
THINGS = ("drink", "book", "letter", "ball", "ring", "bag", "cake", "map", "key", "pen")

LANDMARKS = (
    ("The Eiffel Tower", "Paris"), ("The Colosseum", "Rome"), ("Big Ben", "London"),
    ("The Brandenburg Gate", "Berlin"), ("The Sagrada Familia", "Barcelona"), ("The Acropolis", "Athens"),
    ("The Kremlin", "Moscow"), ("The Statue of Liberty", "New York"), ("The Golden Gate Bridge", "San Francisco"),
    ("The Tower of London", "London"), ("The Louvre", "Paris"), ("The Prado Museum", "Madrid"),
    ("The Rijksmuseum", "Amsterdam"), ("The Forbidden City", "Beijing"), ("The Sydney Opera House", "Sydney"),
    ("The Space Needle", "Seattle"), ("The Little Mermaid statue", "Copenhagen"), ("The Hagia Sophia", "Istanbul"),
    ("The Vatican", "Rome"), ("The Parthenon", "Athens"), ("Times Square", "New York"), ("The CN Tower", "Toronto"),
)
FACT_TEMPLATE = "{subject} is located in the city of"

COUNTRIES = (
    ("France", "Paris"), ("Italy", "Rome"), ("Germany", "Berlin"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("Russia", "Moscow"), ("Egypt", "Cairo"), ("Greece", "Athens"), ("Poland", "Warsaw"), ("Austria", "Vienna"),
    ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Hungary", "Budapest"), ("China", "Beijing"),
    ("Thailand", "Bangkok"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Canada", "Ottawa"), ("Cuba", "Havana"),
    ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Australia", "Canberra"), ("Belgium", "Brussels"),
    ("Argentina", "Buenos Aires"), ("Mexico", "Mexico City"), ("Brazil", "Brasilia"), ("England", "London"),
)
CAPITAL_TEMPLATE = "The capital of {country} is"

Counter = Callable[[str], int]


@dataclass(frozen=True)
class Pair:
    """A clean / corrupted prompt pair with the clean answer and the wrong (corrupted) answer."""

    clean: str
    corrupt: str
    answer: str
    """The clean prompt's answer; its first token is the one the metric reads."""
    wrong: str
    """The corrupted prompt's answer (the metric's other token for the logit difference)."""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def load_pairs(task: str, data: str | None, n_pairs: int, seed: int, count_tokens: Counter | None) -> list[Pair]:
    """The pairs of a run: the JSONL file `data` (its first `n_pairs` rows) or built-in `task`; every pair
    checked for token alignment with `count_tokens` (when given). ConfigError naming the pair otherwise."""
    if data is not None:
        rows = read_jsonl(data, field="data", required=FIELDS, needed_for="clean/corrupt pairs")
        pairs = []
        for i, row in enumerate(rows[:n_pairs]):
            bad = [k for k in FIELDS if not isinstance(row[k], str) or not row[k].strip()]
            if bad:
                raise ConfigError("data", data, f"line {i + 1}: {', '.join(bad)} must be non-empty text")
            pairs.append(Pair(row["clean"], row["corrupt"], row["answer"], row["wrong"]))
        where = lambda i: f"{data} line {i + 1}"  # noqa: E731
    else:
        if count_tokens is None:
            raise ConfigError("task", task, "a model with a tokenizer (the built-in pairs are chosen by token length)")
        pairs = builtin_pairs(task, n_pairs, seed, count_tokens)
        where = lambda i: f"built-in {task} pair {i}"  # noqa: E731
    if count_tokens is not None:
        for i, p in enumerate(pairs):
            check_aligned(p, count_tokens, where(i))
    return pairs


def check_aligned(p: Pair, count_tokens: Counter, where: str) -> None:
    """ConfigError unless the two prompts have the same token count and the answers differ."""
    a, b = count_tokens(p.clean), count_tokens(p.corrupt)
    if a != b:
        raise ConfigError("data", where, f"clean and corrupted prompts of the same token length; "
                          f"clean {p.clean!r} has {a} tokens, corrupt {p.corrupt!r} has {b}")
    if p.answer.strip() == p.wrong.strip():
        raise ConfigError("data", where, f"different answers (both are {p.answer!r})")


def builtin_pairs(task: str, n: int, seed: int, count_tokens: Counter) -> list[Pair]:
    """`n` token-aligned pairs of built-in `task`, deterministic given `seed` and the tokenizer."""
    if task not in TASKS:
        raise ConfigError("task", task, "one of " + ", ".join(TASKS))
    rng = random.Random(f"patching:{task}:{seed}")
    make = {"ioi": _ioi, "factual": _factual, "capital": _capital}[task]
    pairs = make(rng, n, count_tokens)
    if len(pairs) < n:
        raise ConfigError("n_pairs", n, f"at most {len(pairs)} for task {task} with this tokenizer")
    return pairs


def _single(words, count_tokens: Counter) -> list[str]:
    return [w for w in words if count_tokens(" " + w) == 1]


def _ioi(rng: random.Random, n: int, count_tokens: Counter) -> list[Pair]:
    names = _single(sorted(set(FEMALE_NAMES) | set(MALE_NAMES)), count_tokens)
    places, things = _single(PLACES, count_tokens), _single(THINGS, count_tokens)
    if len(names) < 2 or not places or not things:
        return []
    pairs: list[Pair] = []
    seen = set()
    for _ in range(50 * n):
        if len(pairs) == n:
            break
        a, b = rng.sample(names, 2)
        slots = dict(A=a, B=b, place=rng.choice(places), thing=rng.choice(things))
        clean, corrupt = IOI_TEMPLATE.format(S=b, **slots), IOI_TEMPLATE.format(S=a, **slots)
        if clean in seen or count_tokens(clean) != count_tokens(corrupt):
            continue
        seen.add(clean)
        pairs.append(Pair(clean, corrupt, " " + a, " " + b))
    return pairs


def _swaps(rng: random.Random, n: int, items, template: str, slot: str, count_tokens: Counter) -> list[Pair]:
    """Pairs of two items whose prompts have equal token counts and whose answers start differently."""
    first = lambda ans: ans.split()[0]  # noqa: E731
    cands = []
    for i, (s1, a1) in enumerate(items):
        for s2, a2 in items[i + 1:]:
            p1, p2 = template.format(**{slot: s1}), template.format(**{slot: s2})
            if first(a1) != first(a2) and count_tokens(p1) == count_tokens(p2):
                cands.append((p1, p2, a1, a2))
    rng.shuffle(cands)
    pairs = []
    for p1, p2, a1, a2 in cands[:n]:
        if rng.random() < 0.5:
            p1, p2, a1, a2 = p2, p1, a2, a1
        pairs.append(Pair(p1, p2, " " + a1, " " + a2))
    return pairs


def _factual(rng: random.Random, n: int, count_tokens: Counter) -> list[Pair]:
    return _swaps(rng, n, LANDMARKS, FACT_TEMPLATE, "subject", count_tokens)


def _capital(rng: random.Random, n: int, count_tokens: Counter) -> list[Pair]:
    return _swaps(rng, n, COUNTRIES, CAPITAL_TEMPLATE, "country", count_tokens)

