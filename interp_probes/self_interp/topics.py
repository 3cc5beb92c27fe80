"""The built-in topic list (500 common topics, 25 categories of 20) and the stratified split.

Topics are chosen to be well known even to a 135M model; each has a category and aliases
("USA" for "United States"). A user JSONL of ``{topic, category, aliases}`` rows replaces it.
Torch-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from interp.errors import ConfigError

TOPICS_FILE = Path(__file__).with_name("topics.json")
"""The built-in list, category -> topics in a fixed order; "name|alias|alias" carries aliases."""


@dataclass(frozen=True)
class Topic:
    topic: str
    category: str
    aliases: tuple[str, ...] = field(default_factory=tuple)


def builtin_topics() -> list[Topic]:
    """The 500 built-in topics in a fixed order (category, then listing order)."""
    out = []
    for category, items in json.loads(TOPICS_FILE.read_text(encoding="utf-8")).items():
        for item in items:
            name, *aliases = item.split("|")
            out.append(Topic(name, category, tuple(aliases)))
    return out


def load_topics(path: str | None) -> list[Topic]:
    """The built-in list, or a user JSONL of {topic, category, aliases} rows."""
    if path is None:
        return builtin_topics()
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError("topics_file", path, "an existing JSONL file of {topic, category, aliases} rows")
    out, seen = [], set()
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            t = Topic(str(row["topic"]).strip(), str(row.get("category", "all")), tuple(row.get("aliases", ())))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError("topics_file", f"{path}:{n}",
                              f"a JSON object with topic, category, aliases ({e})") from None
        if t.topic and t.topic.lower() not in seen:
            seen.add(t.topic.lower())
            out.append(t)
    if len(out) < 20:
        raise ConfigError("topics_file", path, "at least 20 distinct topics")
    return out


def split_topics(topics: Sequence[Topic], heldout_frac: float, cap: int | None,
                 seed: int = 0) -> tuple[list[Topic], list[str]]:
    """Stratified split: within each category the topics are shuffled (seed), the first
    floor(cap * n_c / N) kept when a cap applies, and of those the first ceil(heldout_frac * n_c) held out.

    Returns (kept topics in category order, split per kept topic: "train" | "heldout").
    """
    by_cat: dict[str, list[Topic]] = {}
    for t in topics:
        by_cat.setdefault(t.category, []).append(t)
    n_total = len(topics)
    kept, split = [], []
    for i, items in enumerate(by_cat.values()):
        rng = np.random.default_rng([seed, i])
        order = rng.permutation(len(items))
        items = [items[j] for j in order]
        if cap is not None and cap < n_total:
            items = items[: math.floor(cap * len(items) / n_total)]
        n_held = math.ceil(heldout_frac * len(items)) if len(items) > 1 else 0
        for j, t in enumerate(items):
            kept.append(t)
            split.append("heldout" if j < n_held else "train")
    return kept, split
