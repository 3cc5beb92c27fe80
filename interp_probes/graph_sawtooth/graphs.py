"""Synthetic graph tasks, edge-list parsing and standardisation, and segment spans (sections 1, 9).

Everything here is pure Python / networkx / numpy: no model. A prompt is a `Sample`; its edge
list is standardised (stable sort by source only), its segments are maximal runs of edges that
share a source, as character spans, later mapped to token spans through the offset mapping.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np

from interp.errors import ConfigError

PREAMBLE = (
    "In an undirected graph, (i, j) means that node i and node j are joined by an edge. "
    "Graph G has nodes 0 to {last}. The edges of G are: {edges}\nQ: {question}\nA:"
)
QUESTIONS = {
    "edge": "Is there an edge between node {a} and node {b}?",
    "degree": "How many neighbours does node {a} have?",
    "connectivity": "Is there a path from node {a} to node {b}?",
    "cycle": "Does G contain a cycle?",
}
YES_NO = (" Yes", " No")
ANSWER_END = "\n"
"""Appended to every candidate: the newline that ends the answer line (section 9)."""

# (u,v) (u,v,w) (u->v) (u->v,w): a third number is a weight and is ignored
_EDGE = re.compile(r"\(\s*(\d+)\s*(?:,|->)\s*(\d+)\s*(?:,\s*-?\d+(?:\.\d+)?\s*)?\)")


@dataclass
class Sample:
    """One prompt with its closed answer set and the character spans of its edge list."""

    sample_id: int
    split: str
    task: str
    prompt: str
    answer: str
    candidates: list[str]
    n_nodes: int = 0
    n_edges: int = 0
    edge_chars: list[tuple[int, int]] = field(default_factory=list)
    """Character span [start, end) of each edge, in standardised order."""
    segment_chars: list[tuple[int, int]] = field(default_factory=list)
    """Character span [start, end) of each segment (a run of edges with one source)."""

    @property
    def answer_index(self) -> int:
        return self.candidates.index(self.answer)


# ============================================================================= parsing


def parse_edges(text: str) -> list[tuple[int, int, int, int]]:
    """(u, v, char_start, char_end) of every edge written as (u,v), (u,v,w), (u->v) or (u->v,w)."""
    return [(int(m.group(1)), int(m.group(2)), m.start(), m.end()) for m in _EDGE.finditer(text)]


def standardise(text: str) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
    """Stable-sort the edge list by source only, joined by single spaces; text before and after kept.

    Returns (text, edge char spans, segment char spans). Without edges: (text, [], []).
    """
    edges = parse_edges(text)
    if not edges:
        return text, [], []
    start, end = edges[0][2], edges[-1][3]
    order = sorted(range(len(edges)), key=lambda i: edges[i][0])  # sorted() is stable
    pieces = [text[edges[i][2] : edges[i][3]] for i in order]
    sources = [edges[i][0] for i in order]
    new = text[:start] + " ".join(pieces) + text[end:]
    spans, pos = [], start
    for p in pieces:
        spans.append((pos, pos + len(p)))
        pos += len(p) + 1
    return new, spans, segments_of(sources, spans)


def segments_of(sources: list[int], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive edges with the same source, as (first start, last end)."""
    segs: list[tuple[int, int]] = []
    for k, (src, (a, b)) in enumerate(zip(sources, spans)):
        if k and src == sources[k - 1]:
            segs[-1] = (segs[-1][0], b)
        else:
            segs.append((a, b))
    return segs


def token_spans(offsets: list[tuple[int, int]], chars: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive token spans of character spans: the first token whose end is past the span start,
    the last token whose start is before the span end. Special tokens (offset (0, 0)) never match."""
    real = [(i, a, b) for i, (a, b) in enumerate(offsets) if b > a]
    out = []
    for s, e in chars:
        first = next(i for i, a, b in real if b > s)
        last = max(i for i, a, b in real if a < e)
        out.append((first, last))
    return out


# ============================================================================= graphs


def serialise(g: nx.Graph, rng: np.random.Generator) -> str:
    """Edges written once as (u, v), u < v, shuffled, then stable-sorted by u (source only)."""
    edges = [tuple(sorted(e)) for e in g.edges()]
    order = rng.permutation(len(edges))
    edges = sorted((edges[i] for i in order), key=lambda e: e[0])
    return " ".join(f"({u}, {v})" for u, v in edges)


def _gnp_in_range(n: int, lo: int, hi: int, rng: np.random.Generator, need=None) -> nx.Graph:
    """G(n, p) with p aimed at a random edge count in [lo, hi], redrawn until the count (and
    `need(g)`) hold."""
    pairs = n * (n - 1) / 2
    for _ in range(10000):
        target = rng.integers(lo, hi + 1)
        g = nx.gnp_random_graph(n, min(1.0, target / pairs), seed=int(rng.integers(2**31)))
        if lo <= g.number_of_edges() <= hi and (need is None or need(g)):
            return g
    raise RuntimeError(f"no G({n}, p) graph with {lo}..{hi} edges satisfying the task's condition")


def _gnm_class(n: int, m: int, forest: bool, rng: np.random.Generator) -> nx.Graph:
    """G(n, m) conditioned on being a forest (or on holding a cycle)."""
    for _ in range(100000):
        g = nx.gnm_random_graph(n, m, seed=int(rng.integers(2**31)))
        if nx.is_forest(g) == forest:
            return g
    raise RuntimeError(f"no G({n}, {m}) graph that is {'a forest' if forest else 'cyclic'}")


def make_task(
    task: str, positive: bool, n_range, e_range, rng: np.random.Generator
) -> tuple[nx.Graph, str, str, list[str]]:
    """(graph, question, answer, candidates) of one task item; `positive` picks the Yes class of the
    binary tasks (ignored by degree)."""
    n = int(rng.integers(n_range[0], n_range[1] + 1))
    elo, ehi = e_range
    ehi = min(ehi, n * (n - 1) // 2)
    elo = min(elo, ehi)
    if task == "edge":
        g = _gnp_in_range(n, elo, ehi, rng, need=lambda g: nx.complement(g).number_of_edges() > 0)
        pool = list(g.edges()) if positive else list(nx.complement(g).edges())
        a, b = pool[int(rng.integers(len(pool)))]
        if rng.random() < 0.5:
            a, b = b, a
        return g, QUESTIONS[task].format(a=a, b=b), YES_NO[0 if positive else 1], list(YES_NO)
    if task == "degree":
        g = _gnp_in_range(n, elo, ehi, rng)
        a = int(rng.integers(n))
        cands = [f" {d}" for d in range(n)]
        return g, QUESTIONS[task].format(a=a), f" {g.degree(a)}", cands
    if task == "connectivity":
        # both classes from graphs with >= 2 components, so component count gives nothing away
        def ok(g):
            comps = list(nx.connected_components(g))
            return len(comps) >= 2 and any(len(c) >= 2 for c in comps)

        g = _gnp_in_range(n, elo, ehi, rng, need=ok)
        comps = [sorted(c) for c in nx.connected_components(g)]
        if positive:
            big = [c for c in comps if len(c) >= 2]
            comp = big[int(rng.integers(len(big)))]
            a, b = rng.choice(comp, size=2, replace=False).tolist()
        else:
            i, j = rng.choice(len(comps), size=2, replace=False).tolist()
            a, b = int(rng.choice(comps[i])), int(rng.choice(comps[j]))
        return g, QUESTIONS[task].format(a=a, b=b), YES_NO[0 if positive else 1], list(YES_NO)
    if task == "cycle":
        # both classes share the edge count n-3 .. n-1, so the list's length gives nothing away
        m = int(rng.integers(max(1, n - 3), n))
        g = _gnm_class(n, m, forest=not positive, rng=rng)
        return g, QUESTIONS[task], YES_NO[0 if positive else 1], list(YES_NO)
    raise ValueError(f"unknown task {task!r}")


def synthetic_samples(cfg, rng: np.random.Generator) -> list[Sample]:
    """The selection, calibration and test prompts: balanced over tasks and over Yes/No."""
    out: list[Sample] = []
    plan = [("select", cfg.n_select), ("cal", cfg.n_cal), ("test", cfg.n_test)]
    for split, count in plan:
        pool = list(cfg.tasks)
        if split == "select" and len(pool) > 1:
            # the structure is read on edge lists in the n_edges range (the paper samples selection prompts
            # near the median edge count, preferring long lists): the cycle task's short forests are left out
            pool = [t for t in pool if t != "cycle"] or pool
        tasks = [pool[i % len(pool)] for i in range(count)]
        rng.shuffle(tasks)
        seen: dict[str, int] = {}
        first_yes = {t: bool(rng.integers(2)) for t in cfg.tasks}  # odd counts: a coin picks the extra class
        for task in tasks:
            k = seen.get(task, 0)
            seen[task] = k + 1
            positive = (k % 2 == 0) == first_yes[task]
            g, question, answer, cands = make_task(task, positive, cfg.n_nodes, cfg.n_edges, rng)
            text = PREAMBLE.format(last=g.number_of_nodes() - 1, edges=serialise(g, rng), question=question)
            out.append(make_sample(len(out), split, task, text, answer, cands, g.number_of_nodes()))
    return out


def make_sample(sample_id: int, split: str, task: str, text: str, answer: str, candidates: list[str],
                n_nodes: int = 0) -> Sample:
    """A Sample with its edge list standardised and its edge and segment character spans."""
    text, edge_chars, seg_chars = standardise(text)
    if not n_nodes:
        ids = {x for u, v, _, _ in parse_edges(text) for x in (u, v)}
        n_nodes = len(ids)
    return Sample(sample_id, split, task, text, answer, list(candidates), n_nodes, len(edge_chars),
                  edge_chars, seg_chars)


def read_rows(source: str) -> list[dict]:
    """The JSON objects of a JSONL file, one per non-empty line."""
    path = Path(source).expanduser()
    if not path.is_file():
        raise ConfigError("data", source, "an existing JSONL file of {prompt, answer, candidates} rows")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ConfigError("data", source, f"valid JSON on every line (line {n}: {err.msg})") from None
    return rows


def user_samples(rows: list[dict], cfg, rng: np.random.Generator) -> list[Sample]:
    """Samples from user rows {prompt, answer, candidates[, task]}, split select / cal / test."""
    need = cfg.n_select + cfg.n_cal + cfg.n_test
    if len(rows) < need:
        raise ConfigError("data", cfg.data, f"at least n_select + n_cal + n_test = {need} rows (found {len(rows)})")
    order = rng.permutation(len(rows))[:need]
    splits = ["select"] * cfg.n_select + ["cal"] * cfg.n_cal + ["test"] * cfg.n_test
    out = []
    for sid, (i, split) in enumerate(zip(order, splits)):
        r = rows[int(i)]
        for key in ("prompt", "answer", "candidates"):
            if key not in r:
                raise ConfigError("data", cfg.data, f"rows with prompt, answer and candidates (row {i} lacks {key})")
        cands = [str(c) for c in r["candidates"]]
        if str(r["answer"]) not in cands:
            raise ConfigError("data", cfg.data, f"the answer among the candidates (row {i})")
        s = make_sample(sid, split, str(r.get("task", "user")), str(r["prompt"]), str(r["answer"]), cands)
        if not s.segment_chars:
            raise ConfigError("data", cfg.data, f"prompts with an edge list such as (0, 1) (0, 2) (row {i})")
        out.append(s)
    return out


def spans_json(spans: list[tuple[int, int]]) -> str:
    return json.dumps([list(s) for s in spans])
