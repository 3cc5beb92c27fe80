"""Step 6's automatic, offline validity checks, and the rule-based reasoning detector they (and the steering
style score) use. Torch-free.

The detector finds signal families: EQ (an arithmetic expression: number-operator-number, or "="), ANSWER ("the
answer is", "the result is", "so we get"), STEPS ("step 1" markers, or a first/then/finally sequence carrying a
derivation) and INFER (inference connectives, counted per 50 words). The checks ban derivations in false
positives, not the feature's own tokens (a "therefore" in a story is fine); false negatives must keep the numbers,
the answer and the reasoning, while avoiding the top token ids.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_NUM = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?![\w])|\b(" + "|".join(NUMBER_WORDS) + r")\b", re.I)
_EQ = re.compile(r"\d\s*(?:[-+*/×÷x]|times|plus|minus|divided by)\s*\d|=", re.I)
_ANSWER = re.compile(r"\b(the (final )?answer is|the result is|so we get|answer:)", re.I)
_STEP = re.compile(r"\bstep\s*\d", re.I)
_SEQ = re.compile(r"\b(first|then|next|after that|finally)\b", re.I)
_DERIV = re.compile(r"\b(leaves|gives|makes|equals|in total|altogether|remain|is left|are left|total of)\b[^.]*\d",
                    re.I)
_INFER = re.compile(r"\b(therefore|thus|hence|it follows|this means|which means|consequently|implies|"
                    r"because of this)\b|(?:^|[.;,]\s*)so\b", re.I)
_VAR = r"\b[a-z]\s*(?:=|is|equals|gives)"
_AFTER = re.compile(r"(?:answer is|answer:|result is|we get|total is|final count is|we end up with|" + _VAR + r")"
                    r"\s*(?:" + _VAR + r"\s*)?(-?\d[\d,]*(?:\.\d+)?|[A-Za-z]+)", re.I)
STOPWORDS = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been it its this that these those "
    "he she they we you i his her their our my your them him us so then than there here what which who how many "
    "much has have had do does did not no yes each more some all one".split())


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9']+", text.lower())


def numbers(text: str) -> list[float]:
    """Every number in the text; number words up to twenty are normalised to their value."""
    out = []
    for m in _NUM.finditer(text):
        tok = m.group(0)
        out.append(float(NUMBER_WORDS[tok.lower()]) if tok.lower() in NUMBER_WORDS else float(tok.replace(",", "")))
    return out


def final_answer(text: str) -> float | str | None:
    """What follows the last answer phrase ("the answer is", "x =", ...): a number (digits or a number word up
    to twenty), else a word (a name, yes/no); with no answer phrase, the last number."""
    hits = list(_AFTER.finditer(text))
    if hits:
        tok = hits[-1].group(1)
        if tok.lower() in NUMBER_WORDS:
            return float(NUMBER_WORDS[tok.lower()])
        try:
            return float(tok.replace(",", ""))
        except ValueError:
            return tok.lower()
    nums = numbers(text)
    return nums[-1] if nums else None


def reasoning_signals(text: str) -> dict[str, float]:
    """The detector: EQ, ANSWER, STEPS (0/1) and INFER (count per 50 words); INFER_allowed is one per started
    block of 50 words (so a single "therefore" in a short story passes)."""
    n_words = max(1, len(words(text)))
    seq = {m.group(1).lower() for m in _SEQ.finditer(text)}
    steps = bool(_STEP.search(text)) or (len(seq) >= 2 and bool(_DERIV.search(text) or _EQ.search(text)))
    n_infer = len(_INFER.findall(text))
    return {"EQ": float(bool(_EQ.search(text))), "ANSWER": float(bool(_ANSWER.search(text))),
            "STEPS": float(steps), "INFER": n_infer * 50 / n_words, "INFER_count": float(n_infer),
            "INFER_allowed": float(max(1, math.ceil(n_words / 50)))}


def n_families(text: str) -> int:
    """How many of the four families the detector finds (the steering style score)."""
    s = reasoning_signals(text)
    return int(s["EQ"] > 0) + int(s["ANSWER"] > 0) + int(s["STEPS"] > 0) + int(s["INFER"] > 0)


def is_reasoning(text: str) -> bool:
    s = reasoning_signals(text)
    return s["EQ"] > 0 or s["ANSWER"] > 0 or s["STEPS"] > 0 or s["INFER"] > 1


def jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    sa, sb = set(a), set(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


@dataclass
class Context:
    """What the checks compare against."""

    corpus_words: list[set[str]]
    """Word sets of the corpora's texts (near-duplicate check)."""
    top_ids: set[int]
    """T_f token ids of the feature."""
    tokenize: Callable[[str], list[int]]
    """Token ids of a text, without special tokens."""
    top_words: set[str]
    """T_f tokens as lower-case words (excluded from the content-word Jaccard)."""
    similarity: Callable[[str, str], float] | None = None
    """Sentence-embedding cosine when an embedder is installed, else None (content-word Jaccard instead)."""


def common_checks(text: str, earlier: Sequence[set[str]], ctx: Context) -> dict[str, bool]:
    w = words(text)
    ascii_share = sum(c.isascii() for c in text) / max(1, len(text))
    ws = set(w)
    dup = any(jaccard(ws, e) > 0.9 for e in earlier) or any(jaccard(ws, e) > 0.9 for e in ctx.corpus_words)
    return {"ok_length": 15 <= len(w) <= 150, "ok_ascii": ascii_share >= 0.9, "ok_not_duplicate": not dup}


def fp_checks(text: str, earlier: Sequence[set[str]], ctx: Context) -> dict[str, bool]:
    """A false-positive candidate must not be reasoning (derivations banned; hypothesised tokens allowed)."""
    s = reasoning_signals(text)
    out = common_checks(text, earlier, ctx)
    out.update({"ok_no_eq": s["EQ"] == 0, "ok_no_answer": s["ANSWER"] == 0, "ok_no_steps": s["STEPS"] == 0,
                "ok_infer_rate": s["INFER_count"] <= s["INFER_allowed"]})
    return out


def content_words(text: str, exclude: set[str]) -> set[str]:
    return {w for w in words(text) if w not in STOPWORDS and w not in exclude and not w.isdigit()}


def fn_checks(text: str, source: str, earlier: Sequence[set[str]], ctx: Context) -> dict[str, bool]:
    """A false-negative candidate must keep the numbers, the answer and the reasoning, and avoid T_f ids."""
    out = common_checks(text, earlier, ctx)
    out["ok_numbers"] = Counter(numbers(text)) == Counter(numbers(source))
    out["ok_answer"] = final_answer(text) == final_answer(source)
    out["ok_no_top_tokens"] = not (set(ctx.tokenize(text)) & ctx.top_ids)
    inter = set(numbers(source)) - {final_answer(source)}
    kept = sum(1 for v in inter if v in set(numbers(text)))
    out["ok_still_reasoning"] = n_families(text) >= 1 or kept >= 2
    if ctx.similarity is not None:
        out["ok_same_meaning"] = ctx.similarity(text, source) >= 0.8
    else:
        a, b = content_words(text, ctx.top_words), content_words(source, ctx.top_words)
        out["ok_same_meaning"] = jaccard(a, b) >= 0.3
    return out


FP_FLAGS = ("ok_length", "ok_ascii", "ok_not_duplicate", "ok_no_eq", "ok_no_answer", "ok_no_steps", "ok_infer_rate")
FN_FLAGS = ("ok_length", "ok_ascii", "ok_not_duplicate", "ok_numbers", "ok_answer", "ok_no_top_tokens",
            "ok_still_reasoning", "ok_same_meaning")
ALL_FLAGS = tuple(dict.fromkeys(FP_FLAGS + FN_FLAGS))
