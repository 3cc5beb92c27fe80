"""Steps 4-5: token injection into plainly non-reasoning text, and the frequency-matched random-token control.

All eight strategies work on token ids (the "avoid/insert top tokens" logic is on ids, never strings). Two payload
rules (`injection_payload`):

- reference (default), as the released code (GeorgeMLP/reasoning-probing, run_token_injection_experiment.py):
  every text gets its own seeded random 3 of the feature's top-10 tokens (`random.sample(tokens, 3)` there), and
  inject_bigram inserts 2 of the feature's top bigrams (sampled per text) at seeded word starts;
- top (the project's first rule): always the top 3 tokens, and one bigram at positions 1-2.

| strategy | payload | where |
|---|---|---|
| prepend | 3 tokens of T_f | positions 1-3, right after the first token (after BOS on a BOS model) |
| intersperse | 3 tokens of T_f, one at a time | 3 seeded word starts, one in each third of the text |
| replace | 3 tokens of T_f | replace the tokens at 3 seeded word starts |
| inject_bigram | 2 of the top bigrams holding a T_f token (top: the first) | 2 word starts (top: positions 1-2) |
| inject_trigram | the corpus's most frequent trigram holding a T_f token | positions 1-3 |
| bigram_before | the 2 top (context, token) pairs of the feature's activating contexts | 2 seeded word starts |
| trigram | the top (before, token, after) triple of the activating contexts | 1 seeded word start |
| comma_list | "t1, t2, t3" of 3 tokens of T_f | 1 seeded word start |

The code inserts at random word positions of the whitespace-split text (position 0 too); here the positions are
word starts >= 1, so that position 0 (the attention sink, the BOS on a BOS model) stays the text's first token.
The payload sample is seeded by (seed, feature, text, strategy), so the control arm swaps the same tokens.

Seeded positions come from a generator seeded by (seed, text id, strategy), so a text gets the same positions for
every feature and for both arms. The base text is first cut so that the injected text fits in `seq_len`; every
injected token's position is then checked to lie in 1 .. seq_len - 1.

The control replaces each T_f token t by a token t' drawn (seeded by (seed, feature, t)) from the tokens whose
log10 corpus frequency is within 0.1 of t's (widened in 0.1 steps until the pool holds `pool_min` tokens),
excluding the feature's top-50 tokens, special and whitespace-only tokens, digit tokens, every candidate's top
tokens and tokens whose reasoning share is >= `max_reasoning_share`; each n-gram becomes a corpus n-gram holding
t' in t's slot, matched on log count. The same strategies and the same max over strategies then apply.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .detection import cohen_d_avg, student_p, welch_p
from .tokens import FeatureTokens

#: Fixed payload length per strategy: the base text is cut by this much so the injection fits.
PAYLOAD_LEN = {"prepend": 3, "intersperse": 3, "replace": 0, "inject_bigram": 2, "inject_trigram": 3,
               "bigram_before": 4, "trigram": 3, "comma_list": 5}
PAYLOADS = ("reference", "top")
REF_POOL = 10
"""The released code samples its tokens from the feature's top-10 (--top-k-tokens 10)."""
REF_N_BIGRAMS = 2
"""... and injects 2 bigrams (--n-inject-bigram 2)."""


def payload_len(strategy: str, rule: str = "reference") -> int:
    """Tokens a strategy adds (the base text is cut by this much so the injection fits)."""
    if strategy == "inject_bigram" and rule == "reference":
        return 2 * REF_N_BIGRAMS
    return PAYLOAD_LEN[strategy]


def positional(strategy: str, rule: str = "reference") -> bool:
    """Strategies that insert right after the first token rather than at seeded word starts."""
    return strategy in ("prepend", "inject_trigram") or (strategy == "inject_bigram" and rule == "top")
CLASSES = ("token_driven", "partially", "weakly", "context_dependent")


@dataclass
class Payload:
    """What one strategy injects for one feature and arm: chunks of token ids (and the slot of T_f in each)."""

    chunks: list[list[int]]


def payloads(strategy: str, ft: FeatureTokens, comma_id: int, swap: dict[int, int] | None = None,
             ngram_swap: Callable[[tuple[int, ...], str], tuple[int, ...]] | None = None,
             rule: str = "top", rng: np.random.Generator | None = None) -> Payload | None:
    """The chunks `strategy` injects for feature `ft`; with `swap`/`ngram_swap`, the control arm's chunks.

    rule "reference" samples (with `rng`) 3 of the top-10 tokens and 2 of the top bigrams; "top" takes the top 3
    and the top bigram. None when the feature lacks what the strategy needs (e.g. no n-gram).
    """
    if rule == "reference":
        pool = ft.top[:REF_POOL]
        top = [pool[i] for i in rng.choice(len(pool), size=min(3, len(pool)), replace=False)] if pool else []
    else:
        top = ft.top[:3]
    if not top:
        return None
    tok = (lambda t: swap.get(t, t)) if swap else (lambda t: t)
    ng = ngram_swap if ngram_swap else (lambda g, kind: g)
    if strategy in ("prepend", "intersperse", "replace"):
        ids = [tok(t) for t in top]
        return Payload([ids] if strategy == "prepend" else [[t] for t in ids])
    if strategy == "comma_list":
        ids = [tok(t) for t in top]
        chunk = []
        for i, t in enumerate(ids):
            chunk += ([comma_id] if i else []) + [t]
        return Payload([chunk])
    kind, n = {"inject_bigram": ("frequent_bigram", 1), "inject_trigram": ("frequent_trigram", 1),
               "bigram_before": ("bigram_before", 2), "trigram": ("trigram", 1)}[strategy]
    grams = [g for g, _ in ft.ngrams.get(kind, [])[:n]]
    if strategy == "inject_bigram" and rule == "reference":
        pool = [g for g, _ in ft.ngrams.get(kind, [])[:REF_POOL]]
        grams = [pool[i] for i in rng.choice(len(pool), size=min(REF_N_BIGRAMS, len(pool)), replace=False)] \
            if pool else []
    if not grams:
        return None
    return Payload([list(ng(tuple(g), kind)) for g in grams])


def word_starts(ids: Sequence[int], is_word_start: Callable[[int], bool]) -> list[int]:
    """Indices >= 1 whose token starts a word (a leading space)."""
    return [i for i in range(1, len(ids)) if is_word_start(int(ids[i]))]


def seeded_slots(n_slots: int, starts: list[int], length: int, rng: np.random.Generator) -> list[int]:
    """`n_slots` sorted insertion indices: one seeded word start in each of n equal parts of the word starts."""
    if not starts:
        starts = list(range(1, max(2, length)))
    parts = np.array_split(np.asarray(starts), n_slots)
    out = []
    for part in parts:
        pool = part if len(part) else np.asarray(starts)
        out.append(int(rng.choice(pool)))
    return sorted(out)


def inject(strategy: str, base: Sequence[int], payload: Payload, slots: list[int], seq_len: int,
           rule: str = "top") -> tuple[list[int], list[int]]:
    """(injected ids, positions of the injected tokens). `base` is already cut for this strategy."""
    ids = list(base)
    if positional(strategy, rule):
        chunk = payload.chunks[0]
        out = ids[:1] + chunk + ids[1:]
        return out[:seq_len], list(range(1, 1 + len(chunk)))
    if strategy == "replace":
        out = list(ids)
        pos = []
        for slot, chunk in zip(slots, payload.chunks):
            out[slot] = chunk[0]
            pos.append(slot)
        return out[:seq_len], pos
    # insert chunks before the seeded word starts, last slot first so earlier indices stay put
    out = list(ids)
    pairs = list(zip(slots, payload.chunks))
    for slot, chunk in sorted(pairs, key=lambda p: -p[0]):
        out = out[:slot] + chunk + out[slot:]
    pos, shift = [], 0
    for slot, chunk in sorted(pairs):
        pos += list(range(slot + shift, slot + shift + len(chunk)))
        shift += len(chunk)
    return out[:seq_len], pos


def n_slots(strategy: str, payload: Payload) -> int:
    return {"intersperse": 3, "replace": 3}.get(strategy, len(payload.chunks))


# ============================================================================= control


@dataclass
class ControlPool:
    log_freq: np.ndarray
    """log10 corpus count per token id (-inf where absent)."""
    allowed: np.ndarray
    """Tokens that may enter any control pool (bool per id)."""


def control_pool(counts: np.ndarray, counts_reasoning: np.ndarray, decode: Callable[[int], str],
                 special_ids: Sequence[int], candidate_top: Sequence[int], max_reasoning_share: float) -> ControlPool:
    """Global exclusions: absent, special, whitespace-only and digit tokens, every candidate's top tokens,
    and tokens that occur in reasoning text at least `max_reasoning_share` of the time."""
    with np.errstate(divide="ignore"):
        logf = np.log10(counts.astype(np.float64))
    allowed = counts > 0
    share = np.where(counts > 0, counts_reasoning / np.maximum(counts, 1), 0.0)
    allowed &= share < max_reasoning_share
    allowed[list(special_ids)] = False
    allowed[list(candidate_top)] = False
    for t in np.flatnonzero(allowed):
        s = decode(int(t))
        if not s.strip() or any(c.isdigit() for c in s):
            allowed[t] = False
    return ControlPool(logf, allowed)


def draw_control(pool: ControlPool, t: int, exclude: Sequence[int], rng: np.random.Generator, pool_min: int = 20
                 ) -> tuple[int, float]:
    """(t', window): a token whose log10 frequency is within `window` of t's, drawn uniformly."""
    ok = pool.allowed.copy()
    ok[list(exclude)] = False
    target = pool.log_freq[t] if np.isfinite(pool.log_freq[t]) else 0.0
    cand = np.flatnonzero(ok)
    if len(cand) == 0:
        raise ValueError("the control pool is empty: no token passes the exclusions")
    dist = np.abs(pool.log_freq[cand] - target)
    window = 0.1
    while True:
        members = cand[dist <= window + 1e-12]
        if len(members) >= pool_min or len(members) == len(cand):
            return int(rng.choice(members)), round(window, 3)
        window += 0.1


def corpus_ngrams(ids: np.ndarray, valid: np.ndarray, token: int) -> dict[str, Counter]:
    """Corpus n-grams holding `token` (slot-tagged by kind), counted at its valid occurrences."""
    real = valid.copy()
    real[:, 0] = True
    out = {"bigram_before": Counter(), "bigram_after": Counter(), "trigram": Counter()}
    for s, p in zip(*np.nonzero((ids == token) & valid)):
        prev = int(ids[s, p - 1]) if p >= 1 else None
        nxt = int(ids[s, p + 1]) if p + 1 < ids.shape[1] and real[s, p + 1] else None
        if prev is not None:
            out["bigram_before"][(prev, token)] += 1
        if nxt is not None:
            out["bigram_after"][(token, nxt)] += 1
        if prev is not None and nxt is not None:
            out["trigram"][(prev, token, nxt)] += 1
    return out


def match_ngram(gram: tuple[int, ...], swap: dict[int, int], real_count: int, ids: np.ndarray, valid: np.ndarray,
                rng: np.random.Generator) -> tuple[int, ...]:
    """A corpus n-gram holding t' where `gram` holds t (t in T_f), with the closest log count; else t -> t'."""
    slots = [i for i, t in enumerate(gram) if t in swap]
    if not slots:
        return gram
    slot = 1 if len(gram) == 3 and gram[1] in swap else slots[0]
    t2 = swap[gram[slot]]
    kind = "trigram" if len(gram) == 3 else ("bigram_before" if slot == 1 else "bigram_after")
    options = []
    if len(gram) in (2, 3) and (len(gram) == 2 or slot == 1):
        options = [(g, c) for g, c in corpus_ngrams(ids, valid, t2)[kind].items() if g[slot] == t2]
    if not options:
        return tuple(swap.get(t, t) for t in gram)
    target = math.log10(max(real_count, 1))
    best = min(abs(math.log10(c) - target) for _, c in options)
    tied = sorted(g for g, c in options if abs(math.log10(c) - target) == best)
    return tuple(tied[int(rng.integers(len(tied)))])


def injection_jobs(features: Sequence[int], tokens: dict[int, FeatureTokens], arms: dict[str, dict[int, dict]],
                   bases: Sequence[Sequence[int]], strategies: Sequence[str], seq_len: int, seed: int,
                   is_word_start: Callable[[int], bool], comma_id: int, rules: dict[str, str] | None = None
                   ) -> tuple[list[dict], list[list[int]], int]:
    """Every (feature, arm, strategy, text) injected sequence; returns (jobs, sequences, n_position_violations).

    arms[arm][feature] = {"swap": {t: t'}, "ngrams": {gram: control gram}} ({} for the real arm); rules[arm] is the
    arm's payload rule (default "top"). Every rule cuts the base texts by the longest payload of a strategy, so the
    arms of one strategy share the base texts and the slots.
    """
    rules = rules or {}
    jobs, seqs = [], []
    violations = 0
    for si, strategy in enumerate(strategies):
        cut = seq_len - max(payload_len(strategy, rules.get(a, "top")) for a in arms)
        cut_bases = [list(b[:cut]) for b in bases]
        starts = [word_starts(b, is_word_start) for b in cut_bases]
        for f in features:
            for arm, per_feature in arms.items():
                spec = per_feature.get(f, {})
                swap = spec.get("swap")
                grams = spec.get("ngrams", {})
                rule = rules.get(arm, "top")
                for ti, base in enumerate(cut_bases):
                    pick = np.random.default_rng((seed, 0x5AF, f, ti, si))  # the same sample in every arm
                    pay = payloads(strategy, tokens[f], comma_id, swap,
                                   (lambda g, kind, grams=grams: grams.get(tuple(g), g)) if swap else None, rule, pick)
                    if pay is None:
                        break
                    rng = np.random.default_rng((seed, 0x5AE, ti, si))
                    slots = seeded_slots(n_slots(strategy, pay), starts[ti], len(base), rng)
                    ids, pos = inject(strategy, base, pay, slots, seq_len, rule)
                    n_inj = sum(len(c) for c in pay.chunks) if strategy != "replace" else len(pay.chunks)
                    if len(pos) != n_inj or any(not 1 <= p < min(seq_len, len(ids)) for p in pos):
                        violations += 1
                    jobs.append({"feature": f, "arm": arm, "strategy": strategy, "text": ti})
                    seqs.append(ids)
    return jobs, seqs, violations


# ============================================================================= scoring and classes


def classify(d: float, p: float) -> str:
    """token_driven (d >= 0.8, p < 0.01), partially (d >= 0.5, p < 0.01), weakly (d >= 0.2, p < 0.05), else
    context_dependent."""
    if d >= 0.8 and p < 0.01:
        return "token_driven"
    if d >= 0.5 and p < 0.01:
        return "partially"
    if d >= 0.2 and p < 0.05:
        return "weakly"
    return "context_dependent"


def score_rows(feature: int, arm: str, strategy: str, base: np.ndarray, inj: np.ndarray, stats: str = "reference"
               ) -> dict:
    """Means, d and two-sided p of one (feature, arm, strategy): reference = Cohen's d with population variances
    (ddof 0) and Student's t, as the released code; welch = sample variances (ddof 1) and Welch's t."""
    ref = stats == "reference"
    d = cohen_d_avg(inj, base, ddof=0, constant=0.0) if ref else cohen_d_avg(inj, base)
    p = student_p(inj, base) if ref else welch_p(inj, base)
    return {"feature": feature, "arm": arm, "strategy": strategy, "mean_base": float(np.mean(base)),
            "mean_inj": float(np.mean(inj)), "d": d, "p": p, "n": len(inj)}


def summarize_feature(rows: pd.DataFrame, gap: float) -> dict:
    """Best strategy (argmax d, ties by strategy order) per arm, its class and the share of the gap it closes."""
    out = {}
    for arm, prefix in (("real", ""), ("control", "control_"), ("alt", "alt_")):
        sub = rows[rows.arm == arm]
        if not len(sub):
            out.update({f"{prefix}best_strategy": None, f"{prefix}best_d": float("nan"), f"{prefix}best_p": 1.0,
                        f"{prefix}class": "context_dependent", f"{prefix}transfer": float("nan")})
            continue
        best = sub.iloc[int(np.argmax(sub.d.to_numpy()))]
        transfer = (best.mean_inj - best.mean_base) / gap if gap > 0 else float("nan")
        out.update({f"{prefix}best_strategy": best.strategy, f"{prefix}best_d": float(best.d),
                    f"{prefix}best_p": float(best.p), f"{prefix}class": classify(best.d, best.p),
                    f"{prefix}transfer": float(transfer)})
    return out
