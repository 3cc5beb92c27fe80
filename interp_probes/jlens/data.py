"""The probe's data: wiki-like text for fitting and held-out statistics, and two-hop prompts with a known bridge.

Text: the built-in corpus's expository paragraphs (encyclopedic, history, science, nature, biography, travel), in an
order the seed fixes, then the generated documents of that seed. Every fourth text is held out (next-token KL,
accuracy and the workspace statistics read it); the lenses are fitted on the rest.

Two-hop prompts: facts.json holds landmarks with their country (the bridge entity) and that country's capital and
language. "The capital of the country where the Eiffel Tower is located is" -> Paris, through France. A prompt is
kept only when the model gets both one-hop facts right ("The Eiffel Tower is located in the country of" -> France;
"The capital of France is" -> Paris): its first answer token ranks within the top k of the model's output.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from interp import corpora
from interp.data import token_windows
from interp.errors import ConfigError

WIKI_GENRES = ("encyclopedic", "history", "science", "nature", "biography", "travel")
HELDOUT_EVERY = 4

ONE_HOP_COUNTRY = "{Landmark} is located in the country of"
ONE_HOP = {"capital": "The capital of {country} is", "language": "The official language of {country} is"}
TWO_HOP = {"capital": "The capital of the country where {landmark} is located is",
           "language": "The official language of the country where {landmark} is located is"}


def wiki_texts(seed: int, generated: bool = True) -> tuple[list[str], list[str]]:
    """(fitting texts, held-out texts): the expository paragraphs shuffled by `seed`, then the generated documents;
    every HELDOUT_EVERY-th one held out. `generated=False`: the paragraphs' part of each list only (its start)."""
    by_genre = corpora.paragraphs_by_genre()
    paras = [p for g in WIKI_GENRES for p in by_genre.get(g, ())]
    random.Random(seed).shuffle(paras)
    texts = (paras + list(corpora.generated(seed))) if generated else paras
    held = [t for i, t in enumerate(texts) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
    train = [t for i, t in enumerate(texts) if i % HELDOUT_EVERY != HELDOUT_EVERY - 1]
    return train, held


def fit_windows(tokenizer, bos: int | None, seed: int, n: int, length: int) -> list[list[int]]:
    """`n` token windows of `length` (BOS first where the model has one) of the fitting texts."""
    return _windows(tokenizer, bos, seed, n, length, 0)


def eval_windows(tokenizer, bos: int | None, seed: int, n: int, length: int) -> list[list[int]]:
    """`n` token windows of `length` of the held-out texts."""
    return _windows(tokenizer, bos, seed, n, length, 1)


def _windows(tokenizer, bos: int | None, seed: int, n: int, length: int, part: int) -> list[list[int]]:
    """Windows of wiki_texts(seed)[part]. They are cut from the start of the list, so when its paragraphs hold
    enough tokens the windows are theirs, and the generated documents (a few tenths of a second a seed) are made
    only when the windows reach them."""
    try:
        return token_windows(tokenizer, wiki_texts(seed, generated=False)[part], n, length, bos)
    except ConfigError:  # more tokens than the paragraphs hold
        return token_windows(tokenizer, wiki_texts(seed)[part], n, length, bos)


@lru_cache(maxsize=1)
def facts() -> tuple[dict[str, str], ...]:
    """The built-in facts (facts.json): landmark, country, capital, language."""
    return tuple(json.loads((Path(__file__).with_name("facts.json")).read_text(encoding="utf-8"))["facts"])


@dataclass(frozen=True)
class TwoHop:
    """One two-hop prompt with its bridge entity and answer, and its two one-hop prompts."""

    landmark: str
    relation: str
    bridge: str
    """The intermediate entity (the landmark's country)."""
    answer: str
    prompt: str
    hop1: str
    """The first hop's prompt (answer: the bridge)."""
    hop2: str
    """The second hop's prompt (answer: `answer`)."""


def two_hop_prompts(relations: tuple[str, ...], max_facts: int) -> list[TwoHop]:
    """Every (fact, relation) of the first `max_facts` facts."""
    out = []
    for f in facts()[:max_facts]:
        lm = f["landmark"]
        for rel in relations:
            out.append(TwoHop(
                landmark=lm, relation=rel, bridge=f["country"], answer=f[rel],
                prompt=TWO_HOP[rel].format(landmark=lm),
                hop1=ONE_HOP_COUNTRY.format(Landmark=lm[:1].upper() + lm[1:]),
                hop2=ONE_HOP[rel].format(country=_the(f["country"])),
            ))
    return out


def _the(country: str) -> str:
    """The country as a sentence names it ("the Netherlands", "the Czech Republic")."""
    return f"the {country}" if country in ("Netherlands", "Czech Republic") else country


def first_token(tokenizer, word: str) -> int:
    """The first token id of " word" (as it follows a prompt ending in a word)."""
    return int(tokenizer.encode(" " + word, add_special_tokens=False)[0])
