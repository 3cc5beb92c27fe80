"""Step 6: the LLM-guided counterexample loop, run in lockstep over the loop features (one batch of generator
calls per iteration), with automatic validity checks on every candidate, the template fallback, the stop rule
and the per-feature verdicts.

Candidates: false positives (FP) are non-reasoning texts that should activate the feature above
`fp_ratio` x tau_ref; false negatives (FN) are meaning-preserving rewrites of a reasoning trace on which it fires
that should stay below `fn_ratio` x tau_ref (tau_ref: the feature's max over its top reasoning examples).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import prompts as P
from .checks import FN_FLAGS, FP_FLAGS, Context, fn_checks, fp_checks, words
from .generator import Generator, GeneratorError, parse_candidates, parse_json_object, yes_no


@dataclass
class LoopFeature:
    feature: int
    rank: int
    forced: bool
    """Not context-dependent: taken because fewer than loop_max_features were (lowest injection d first)."""
    tau_ref: float
    top_ids: list[int]
    top_strs: list[str]
    ngram_texts: list[str]
    examples: list[str]
    """Top reasoning examples with the max token in [brackets] (hypothesis evidence)."""
    sources: list[str]
    """Full texts of the top reasoning samples, FN sources in turn."""
    best_d: float = float("nan")
    cls: str = ""
    hypothesis: str = ""
    n_valid_fp: int = 0
    n_valid_fn: int = 0
    iterations: int = 0
    judge_genuine: bool | None = None
    verdict: dict | None = None
    history: list[tuple[str, str, float, bool]] = field(default_factory=list)
    """(kind, text, ratio, valid) of every candidate so far."""


def token_summary(strs: Sequence[str], k: int = 5) -> str:
    """The deterministic hypothesis of the local and template generators: "fires on ' therefore', '=', ..."."""
    return "fires on " + ", ".join(repr(s) for s in strs[:k])


# ============================================================================= template candidates

FP_BASES = (
    "On a quiet {day} morning, {name} walked down to the harbour with a basket of flowers. {s1} The air smelled of "
    "rain and fresh bread, and a few gulls were calling over the roofs. {name2} waved from the bakery door and asked "
    "about the garden. {s2} They laughed about the old cat that sleeps on the wall every afternoon.",
    "The old lighthouse stands at the end of a narrow stone path, painted white with a red band near the top. {s1} "
    "Moss grows along the lower wall, and in the evening the windows glow orange over the water. {s2} Visitors often "
    "stop there to take pictures of the boats and the long view across the bay.",
    "I bought this little desk lamp for my reading corner, and it has been lovely so far. {s1} The light is warm and "
    "even, the base feels heavy and solid, and the switch is easy to find in the dark. {s2} The only small problem is "
    "that the cord is a bit short for my room.",
    "The village fair opened under a pale blue sky, with stalls of cakes, honey and old books along the green. {s1} "
    "Children ran between the tents while a brass band played near the church. {s2} By the evening the lanterns were "
    "lit and people stayed late to talk.",
)
FP_SLOTS = (
    "Someone had painted the word{tok} on the old fence.",
    "A small sign above the door read{tok} in faded blue letters.",
    "{name} hummed a song with the line{tok} over and over.",
    "The note pinned to the board simply said{tok} and nothing more.",
)
NGRAM_SLOTS = ("A postcard on the shelf read \"{ng}\" in neat handwriting.",
               "Painted on the wall of the shed were the words \"{ng}\".")
DAYS = ("Monday", "Tuesday", "Saturday", "Sunday", "Friday")


def template_fps(f: LoopFeature, iteration: int, n: int, names: Sequence[str]) -> list[str]:
    """Non-reasoning texts (story, description, review, report) with T_f tokens and n-grams slotted into
    non-derivational places; deterministic in (feature, iteration, index)."""
    out = []
    toks = [t for t in f.top_strs if t.strip()] or [" signal"]
    for j in range(n):
        k = (iteration - 1) * n + j
        base = FP_BASES[(k + f.feature) % len(FP_BASES)]
        tok = toks[k % len(toks)]
        tok = tok if tok.startswith(" ") else " " + tok
        name, name2 = names[(k * 3 + f.feature) % len(names)], names[(k * 5 + 1 + f.feature) % len(names)]
        s1 = FP_SLOTS[k % len(FP_SLOTS)].format(tok=tok, name=name)
        ng = f.ngram_texts[k % len(f.ngram_texts)].strip() if f.ngram_texts else tok.strip()
        s2 = NGRAM_SLOTS[(k // len(FP_SLOTS)) % len(NGRAM_SLOTS)].format(ng=ng)
        out.append(base.format(day=DAYS[k % len(DAYS)], name=name, name2=name2, s1=s1, s2=s2))
    return out


# (pattern, alternatives): deterministic synonym and restructuring rewrites that keep every number
FN_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"\bTherefore,?\s+the answer is\b", ("Putting it together, the result is", "All in all, the result is")),
    (r"\bThe final answer is\b", ("The result is", "In the end we get")),
    (r"\b(So|Hence|Thus) the answer is\b", ("Altogether the result is", "In the end the result is")),
    (r"\bThis means the answer is\b", ("That gives a result of", "Altogether the result is")),
    (r"\b[Tt]he answer is\b", ("the result is", "the final count is")),
    (r"\bSo we get\b", ("The result is", "We end up with")),
    (r"\bTherefore,?\s*", ("Putting it together, ", "As a result, ")),
    (r"\bHence,?\s*", ("As a result, ", "Putting it together, ")),
    (r"\bThis means\b", ("That tells us", "In other words")),
    (r"\bwhich means\b", ("and that tells us", "in other words")),
    (r"\bit follows that\b", ("we can tell that", "we learn that")),
    (r"\b(So|so)\b,?", ("thus", "and")),
    (r"\bhence\b", ("thus", "and")),
    (r"\bStep (\d+):", (r"Stage \1:", r"Part \1:")),
    (r"\b(First|To begin|Start with this:|Let us see\.|Begin with the facts\.),?",
     ("To start,", "At the outset,")),
    (r"\b(Next|After that|Now|In the next step|Moving on),?", ("After this,", "Following that,")),
    (r"\bThen\b", ("After this,", "Following that,")),
    (r"\bthen\b", ("after this", "later")),
    (r"\bWait\b", ("Hold on", "Hmm")),
    (r"\s*=\s*", (" is ", " equals ", " gives ")),
    (r"\s*\+\s*", (" plus ", " added to ")),
    (r"(?<=\d)\s*-\s*(?=\d)", (" minus ", " take away ")),
    (r"\s*×\s*", (" times ", " multiplied by ")),
    (r"(?<=\d)\s*/\s*(?=\d)", (" divided by ", " shared by ")),
    (r"\b(we|We) know that\b", ("we are told that", "it is given that")),
)


def rewrite(source: str, choice: int) -> str:
    """One deterministic rewrite of `source`: every rule applies with alternative (choice >> rule) & 1."""
    text = source
    for r, (pattern, alts) in enumerate(FN_RULES):
        alt = alts[(choice >> (r % 8)) & 1 if len(alts) == 2 else choice % len(alts)]
        text = re.sub(pattern, alt, text)
    text = re.sub(r"\s+([,.;:?])", r"\1", text)
    text = re.sub(r"\s{2,}", " ", text).strip()
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)


_NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                 "sixteen seventeen eighteen nineteen twenty").split()


def spell_numbers(text: str) -> str:
    """Integers up to twenty as words (the numbers check normalises them back), so digit tokens can go."""
    return re.sub(r"(?<![\w.:$])(\d+)(?![\w.]\w|\w)",
                  lambda m: _NUMBER_WORDS[int(m.group(1))] if int(m.group(1)) <= 20 else m.group(1), text)


def template_fns(f: LoopFeature, iteration: int, n: int, tokenize: Callable[[str], list[int]]) -> list[tuple[str, str]]:
    """(source, rewrite) pairs: synonym/restructuring rewrites (and, as variants, small numbers spelled out) of the
    top sources, preferring sources with a rewrite free of T_f ids; deterministic in (feature, iteration)."""
    top = set(f.top_ids)
    k = len(f.sources)
    start = ((iteration - 1) * n) % k
    clean, dirty = [], []
    for j in range(k):
        src = f.sources[(start + j) % k]
        variants = [rewrite(src, c) for c in range(8)]
        variants += [spell_numbers(v) for v in variants]
        ok = [v for v in variants if not set(tokenize(v)) & top]
        (clean if ok else dirty).append((src, (ok or variants)[(iteration - 1) % len(ok or variants)]))
        if len(clean) >= n:
            break
    return (clean + dirty)[:n]


# ============================================================================= the loop


@dataclass
class LoopResult:
    features: list[LoopFeature]
    candidates: pd.DataFrame
    hypotheses: pd.DataFrame
    transcript: list[dict]


def run_loop(features: list[LoopFeature], gen: Generator, cfg, score: Callable[[list[str], list[int]], np.ndarray],
             make_context: Callable[[LoopFeature], Context], names: Sequence[str],
             rng_for: Callable[[int, int], np.random.Generator],
             judge: bool = False) -> LoopResult:
    """The loop over iterations, in lockstep across features (see the module docstring)."""
    rows: list[dict] = []
    hyps: list[dict] = []
    transcript: list[dict] = []
    contexts = {f.feature: make_context(f) for f in features}
    earlier: dict[int, list[set[str]]] = {f.feature: [] for f in features}
    for f in features:
        f.hypothesis = hypothesis(f, gen, cfg)
        hyps.append({"feature": f.feature, "iteration": 0, "hypothesis": f.hypothesis, "generator": gen.name})
    for it in range(1, cfg.loop_max_iters + 1):
        stop = cfg.loop_stop_valid
        active = [f for f in features if not (f.n_valid_fp >= stop and f.n_valid_fn >= stop)]
        if not active:
            break
        proposed = propose(active, gen, cfg, it, rng_for)  # feature -> [(kind, source_text, text, origin)]
        batch = evaluate(active, proposed, it, cfg, score, contexts, earlier, gen if judge else None)
        for f in active:
            f.iterations = it
            got = [r for r in batch if r["feature"] == f.feature]
            extra = []
            for kind in ("FP", "FN"):
                if (cfg.template_fallback or gen.name == "template") and not any(
                        r["valid"] for r in got if r["kind"] == kind):
                    if kind == "FP":
                        extra += [("FP", "", t, "template") for t in template_fps(f, it, cfg.n_fp, names)]
                    else:
                        pairs = template_fns(f, it, cfg.n_fn, contexts[f.feature].tokenize)
                        extra += [("FN", s, t, "template") for s, t in pairs]
            if extra:
                got += evaluate([f], {f.feature: extra}, it, cfg, score, contexts, earlier, gen if judge else None)
            for r in got:
                f.history.append((r["kind"], r["text"], r["ratio"], r["valid"]))
                if r["valid"]:
                    if r["kind"] == "FP":
                        f.n_valid_fp += 1
                    else:
                        f.n_valid_fn += 1
            rows += got
    for f in features:
        if gen.capable and judge:
            f.verdict, f.judge_genuine = verdict(f, gen, cfg)
    cand = pd.DataFrame(rows)
    return LoopResult(features, cand, pd.DataFrame(hyps), transcript)


def hypothesis(f: LoopFeature, gen: Generator, cfg) -> str:
    """Capable generators explain the evidence in one sentence; otherwise the deterministic token summary."""
    if not gen.capable:
        return token_summary(f.top_strs)
    ngrams = ", ".join(repr(t) for t in f.ngram_texts[:8])
    msg = P.HYPOTHESIS.format(tokens=", ".join(repr(t) for t in f.top_strs), ngrams=ngrams,
                              examples="\n".join(f"- {e}" for e in f.examples[:10]))
    try:
        text = gen.chat([{"role": "system", "content": P.SYSTEM}, {"role": "user", "content": msg}],
                        cfg.temperature_judge, 120).strip()
    except GeneratorError:
        text = ""
    return " ".join(text.split()[:60]) or token_summary(f.top_strs)


def _words_for_local(f: LoopFeature) -> list[str]:
    ws = [t.strip() for t in f.top_strs if re.fullmatch(r"[A-Za-z]{2,}", t.strip())]
    ws += [w for g in f.ngram_texts for w in re.findall(r"[A-Za-z]{3,}", g)]
    return list(dict.fromkeys(ws)) or ["so", "then"]


def propose(active: list[LoopFeature], gen: Generator, cfg, it: int, rng_for) -> dict[int, list[tuple]]:
    """The generator's candidates of iteration `it` for every active feature: feature -> [(kind, source, text,
    origin)]."""
    out: dict[int, list[tuple]] = {f.feature: [] for f in active}
    if gen.name == "template":
        return out
    if not gen.capable:  # the local set: one concrete candidate per call, everything in one batch
        reqs, keys = [], []
        for f in active:
            rng = rng_for(f.feature, it)
            ws = _words_for_local(f)
            for _ in range(cfg.n_fp):
                w1, w2 = ws[int(rng.integers(len(ws)))], ws[int(rng.integers(len(ws)))]
                topic = P.TOPICS[int(rng.integers(len(P.TOPICS)))]
                reqs.append([{"role": "user", "content": P.LOCAL_FP.format(topic=topic, w1=w1, w2=w2)}])
                keys.append((f.feature, "FP", ""))
            for j in range(cfg.n_fn):
                src = f.sources[((it - 1) * cfg.n_fn + j) % len(f.sources)]
                toks = ", ".join(repr(t.strip()) for t in f.top_strs[:5] if t.strip())
                reqs.append([{"role": "user", "content": P.LOCAL_FN.format(tokens=toks, source=src)}])
                keys.append((f.feature, "FN", src))
        replies = gen.chat_many(reqs, cfg.temperature_gen, cfg.gen_max_tokens)
        for (feat, kind, src), text in zip(keys, replies):
            out[feat].append((kind, src, " ".join(text.split()), gen.name))
        return out
    for f in active:  # capable: several FPs per call with history; one FN per source
        hist = [f"- ({kind}, ratio {ratio:.2f}, {'success' if ok else 'failure'}) {text[:200]}"
                for kind, text, ratio, ok in (
                    [h for h in f.history if h[3]][-3:] + [h for h in f.history if not h[3]][-3:])]
        history = P.HISTORY.format(lines="\n".join(hist)) if hist else ""
        msg = P.FALSE_POSITIVES.format(hypothesis=f.hypothesis, tokens=", ".join(repr(t) for t in f.top_strs[:5]),
                                       n=cfg.n_fp, history=history)
        try:
            reply = gen.chat([{"role": "system", "content": P.SYSTEM}, {"role": "user", "content": msg}],
                             cfg.temperature_gen, 4 * cfg.gen_max_tokens * cfg.n_fp)
        except GeneratorError:
            reply = ""
        out[f.feature] += [("FP", "", t, gen.name) for t in parse_candidates(reply)[: cfg.n_fp]]
        for j in range(cfg.n_fn):
            src = f.sources[((it - 1) * cfg.n_fn + j) % len(f.sources)]
            msg = P.FALSE_NEGATIVE.format(source=src, tokens=", ".join(repr(t) for t in f.top_strs[:10]),
                                          hypothesis=f.hypothesis)
            try:
                reply = gen.chat([{"role": "system", "content": P.SYSTEM}, {"role": "user", "content": msg}],
                                 cfg.temperature_gen, 4 * cfg.gen_max_tokens)
            except GeneratorError:
                reply = ""
            got = parse_candidates(reply)
            if got:
                out[f.feature].append(("FN", src, " ".join(got[0].split()) if len(got) == 1 else " ".join(
                    " ".join(got).split()), gen.name))
    return out


def evaluate(active: list[LoopFeature], proposed: dict[int, list[tuple]], it: int, cfg, score, contexts,
             earlier: dict[int, list[set[str]]], judge: Generator | None) -> list[dict]:
    """Checks, the activation test and (optionally) the judge for every proposed candidate."""
    rows = []
    texts, feats, where = [], [], []
    by_id = {f.feature: f for f in active}
    for feat, items in proposed.items():
        for kind, src, text, origin in items:
            rows.append({"feature": feat, "iteration": it, "kind": kind, "source": origin, "text": text,
                         "source_text": src})
            if text.strip():
                texts.append(text)
                feats.append(feat)
                where.append(len(rows) - 1)
    acts = score(texts, feats) if texts else np.zeros(0)
    act_of = {w: float(a) for w, a in zip(where, acts)}
    for i, r in enumerate(rows):
        f = by_id[r["feature"]]
        ctx = contexts[f.feature]
        text = r["text"]
        flags = (fp_checks(text, earlier[f.feature], ctx) if r["kind"] == "FP"
                 else fn_checks(text, r["source_text"], earlier[f.feature], ctx)) if text.strip() else {}
        names = FP_FLAGS if r["kind"] == "FP" else FN_FLAGS
        for name in names:
            r[name] = bool(flags.get(name, False))
        r["act_max"] = act_of.get(i, 0.0)
        r["ratio"] = r["act_max"] / f.tau_ref if f.tau_ref > 0 else 0.0
        r["ok_activation"] = (r["ratio"] > cfg.fp_ratio) if r["kind"] == "FP" else (r["ratio"] < cfg.fn_ratio)
        if judge is not None and text.strip():
            r["ok_judge"] = _judge(judge, r, cfg)
        r["valid"] = bool(text.strip()) and all(r[n] for n in names) and r["ok_activation"] and r.get("ok_judge", True)
        if text.strip():
            earlier[f.feature].append(set(words(text)))
    return rows


def _judge(judge: Generator, r: dict, cfg) -> bool:
    try:
        if r["kind"] == "FP":
            ans = judge.chat([{"role": "user", "content": P.JUDGE_REASONING.format(text=r["text"])}],
                             cfg.temperature_judge, 5)
            return yes_no(ans) is False
        ans = judge.chat([{"role": "user", "content": P.JUDGE_SAME.format(source=r["source_text"], text=r["text"])}],
                         cfg.temperature_judge, 5)
        return yes_no(ans, yes="same") is True
    except GeneratorError:
        return False


def verdict(f: LoopFeature, gen: Generator, cfg) -> tuple[dict | None, bool | None]:
    fps = [t[:160] for k, t, _, ok in f.history if ok and k == "FP"][:3]
    fns = [t[:160] for k, t, _, ok in f.history if ok and k == "FN"][:3]
    msg = P.VERDICT.format(tokens=", ".join(repr(t) for t in f.top_strs[:10]), hypothesis=f.hypothesis,
                           d=f.best_d if np.isfinite(f.best_d) else 0.0, cls=f.cls or "n/a",
                           fps=fps or "none found", fns=fns or "none found")
    try:
        obj = parse_json_object(gen.chat([{"role": "user", "content": msg}], cfg.temperature_judge, 300))
    except GeneratorError:
        return None, None
    if obj is None:
        return None, None
    g = obj.get("is_genuine_reasoning_feature")
    return obj, (bool(g) if isinstance(g, bool) else None)
