"""The project's own versioned English corpus.

Two parts, both deterministic and independent of the Python installation:

* hand-written paragraphs in `paragraphs_<genre>.txt` (UTF-8, paragraphs separated by blank lines), and
* generated documents from the template generators in `gen_*.py` (their word tables in `gen_*.json`, read by
  `tables.load_tables`), seeded with `random.Random(seed)`.

`documents(seed)` is the paragraphs (genres in file-name order) followed by the generated documents.
`corpus_sha256(seed)` hashes `"\\n\\n".join(documents(seed))` so runs can record exactly which text they saw;
`PINNED_SHA256` holds the expected value for seed 0, and any change to the text must bump `VERSION`.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from interp.errors import ConfigError

from .gen_people import biography, conversation, letter, short_story
from .gen_places import building_history, nature_note, town_entry, travel_diary, weather_report
from .gen_things import event_notice, news_brief, plant_care, product_review, recipe
from .tables import FEMALE_NAMES, MALE_NAMES  # re-exported: the name lists a probe builds prompts from

VERSION = "1"
N_GENERATED = 3600
PINNED_SHA256 = {0: "502ff85d1bca8b0a07420f99ff71193532a646ac304cc4df197265e1f75255ad"}

GENERATORS: tuple[tuple[str, Callable[[random.Random], str]], ...] = (
    ("town_entry", town_entry),
    ("building_history", building_history),
    ("travel_diary", travel_diary),
    ("weather_report", weather_report),
    ("nature_note", nature_note),
    ("biography", biography),
    ("letter", letter),
    ("short_story", short_story),
    ("conversation", conversation),
    ("product_review", product_review),
    ("recipe", recipe),
    ("news_brief", news_brief),
    ("plant_care", plant_care),
    ("event_notice", event_notice),
)

_DIR = Path(__file__).parent
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def split_paragraphs(text: str) -> list[str]:
    """Split text into paragraphs at blank lines; line endings are normalised and each paragraph stripped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [p.strip() for p in _BLANK_LINE.split(text) if p.strip()]


@lru_cache(maxsize=1)
def paragraphs_by_genre() -> dict[str, tuple[str, ...]]:
    """The hand-written paragraphs, keyed by genre (the `<genre>` in `paragraphs_<genre>.txt`)."""
    out = {}
    for path in sorted(_DIR.glob("paragraphs_*.txt"), key=lambda p: p.name):
        genre = path.stem.removeprefix("paragraphs_")
        out[genre] = tuple(split_paragraphs(path.read_bytes().decode("utf-8")))
    return out


def paragraphs() -> tuple[str, ...]:
    """All hand-written paragraphs, genres in file-name order."""
    return tuple(p for genre in paragraphs_by_genre().values() for p in genre)


@lru_cache(maxsize=4)
def generated(seed: int = 0, n: int = N_GENERATED) -> tuple[str, ...]:
    """`n` distinct generated documents for `seed`.

    Generators are visited in blocks, each block a fresh shuffle of all kinds, so every stretch of the
    sequence (and every held-out stride) mixes all of them.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    docs: list[str] = []
    order: list[int] = []
    while len(docs) < n:
        if not order:
            order = list(range(len(GENERATORS)))
            rng.shuffle(order)
        name, make = GENERATORS[order.pop()]
        for _ in range(100):
            doc = make(rng)
            if doc not in seen:
                break
        else:  # pragma: no cover - the tables make this practically impossible
            raise RuntimeError(f"generator {name} keeps repeating itself")
        seen.add(doc)
        docs.append(doc)
    return tuple(docs)


def documents(seed: int = 0) -> tuple[str, ...]:
    """The whole corpus: hand-written paragraphs, then `N_GENERATED` generated documents."""
    return paragraphs() + generated(seed)


def corpus_text(seed: int = 0) -> str:
    """All documents joined by blank lines."""
    return "\n\n".join(documents(seed))


def corpus_sha256(seed: int = 0, version: str = VERSION) -> str:
    """sha256 (hex) of `corpus_text(seed)` encoded as UTF-8, for run manifests."""
    if str(version) != VERSION:
        raise ConfigError("corpus_version", version, f"this installation ships corpus version {VERSION} only")
    return hashlib.sha256(corpus_text(seed).encode("utf-8")).hexdigest()


def manifest(seed: int = 0) -> dict[str, object]:
    """A small JSON-able description of the corpus for `seed`."""
    docs = documents(seed)
    return {
        "name": "builtin",
        "version": VERSION,
        "seed": seed,
        "n_paragraphs": len(paragraphs()),
        "n_generated": len(docs) - len(paragraphs()),
        "n_docs": len(docs),
        "n_words": sum(len(d.split()) for d in docs),
        "sha256": corpus_sha256(seed),
    }


__all__ = [
    "FEMALE_NAMES", "MALE_NAMES",
    "GENERATORS", "N_GENERATED", "PINNED_SHA256", "VERSION", "corpus_sha256", "corpus_text", "documents",
    "generated", "manifest", "paragraphs", "paragraphs_by_genre", "split_paragraphs",
]
