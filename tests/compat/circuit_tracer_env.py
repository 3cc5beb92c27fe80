"""circuit-tracer 0.5.0 in a side environment, and circuits' graph checked against it (issue 42).

The side environment is a venv under the interp cache (compat/circuit-tracer-0.5.0/), keyed by version, built once
(reruns reuse it) and atomically: it is built as a `.partial` sibling and renamed into place when every pin is
installed, so an interrupted build is never taken for a finished one. torch is installed first, at the project's
own release (a CPU wheel where the machine has one; unpinned, circuit-tracer would pull a CUDA build of several
GB), then the rest with a constraint that keeps it. Nothing of the project is imported there:
circuit_tracer_side.py runs in it and writes safetensors and JSON that `compare` reads.

What circuit-tracer's stack needs to read the embedded models' cached directories (written by transformers 5) is
done on a copy in a temporary directory, each adaptation named (`ADAPTATIONS`), never on the cache itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

HERE = Path(__file__).resolve().parent
CT_VERSION = "0.5.0"
PINS = {"torch": "2.13.0", "circuit-tracer": CT_VERSION, "transformers": "4.57.3", "transformer-lens": "3.2.1"}
"""circuit-tracer 0.5.0 pins transformers <= 4.57; TransformerLens 3.2.1 is its backend's release that knows
gemma-3-270m."""
TL_NAMES = {"smollm2-135m": None, "gemma3-270m": "google/gemma-3-270m"}
"""TransformerLens's official name of each embedded model (SmolLM2 is not one of them: its config comes from the
adapted directory)."""


class Unavailable(RuntimeError):
    """The side environment cannot be built here (no package index reachable)."""


def cache_dir() -> Path:
    from interp.embedded import cache_root

    return cache_root() / "compat"


def side_python() -> Path:
    """The side environment's python, building the environment first if it is not in the cache."""
    root = cache_dir()
    target = root / f"circuit-tracer-{CT_VERSION}"
    py = target / "bin" / "python"
    if py.exists():
        return py
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".circuit-tracer-{CT_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the second finds the first's result
        if py.exists():
            return py
        tmp = root / f".circuit-tracer-{CT_VERSION}.partial"
        shutil.rmtree(tmp, ignore_errors=True)  # left by an interrupted build
        env = {k: v for k, v in os.environ.items() if k not in ("PIP_NO_INDEX", "HF_HUB_OFFLINE")}
        base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        _run([str(base if base.exists() else sys.executable), "-m", "venv", str(tmp)], env)
        pip = [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        (tmp / "constraints.txt").write_text(f"torch=={PINS['torch']}\n")
        _run(pip + [f"torch=={PINS['torch']}"], env)
        _run(pip + ["-c", str(tmp / "constraints.txt")] + [f"{k}=={v}" for k, v in PINS.items() if k != "torch"],
             env)
        tmp.rename(target)
    return py


def _run(cmd: list[str], env: dict) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0:
        err = proc.stderr + proc.stdout
        if re.search(r"(?i)connection|resolve|network|unreachable|timed out|no matching distribution", err):
            raise Unavailable(f"cannot install circuit-tracer's side environment ({' '.join(cmd[-3:])}): "
                              f"{err.strip()[-300:]}")
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err[-3000:]}")


# ============================================================================= the models, as its stack reads them

ADAPTATIONS = {
    "rope_theta": "transformers 4.57 reads rope_theta at the top of config.json (and Gemma 3's local base as "
                  "rope_local_base_freq); transformers 5 writes them under rope_parameters, which 4.57 ignores "
                  "(it would fall back to its default 10,000)",
    "tokenizer_class": "transformers 4.57 does not know the tokenizer class TokenizersBackend (transformers 5's name "
                       "for a tokenizer.json-only tokenizer): PreTrainedTokenizerFast reads the same tokenizer.json",
    "rotary_base": "TransformerLens 3.2's Llama config is set here from the model's rope_theta explicitly, rather than "
                   "trusted to its loader (issue 42 found it ignored), and checked equal to what the loader gave",
}
"""Each change the side environment needs, with its reason; `adapt_model` applies only these."""


@dataclass
class Adapted:
    dir: Path
    tl_name: str | None
    tl_overrides: dict = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)


def adapt_model(name: str, out: Path) -> Adapted:
    """A copy of the embedded model's cached directory that transformers 4.57 and TransformerLens 3.2 read: the
    weights and tokenizer.json linked, config.json and tokenizer_config.json rewritten (`ADAPTATIONS`)."""
    from interp.embedded import ensure_cached

    src = ensure_cached(name)
    out.mkdir(parents=True, exist_ok=True)
    applied = []
    for f in src.iterdir():
        if f.name not in ("config.json", "tokenizer_config.json"):
            (out / f.name).symlink_to(f)
    cfg = json.loads((src / "config.json").read_text())
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" not in cfg and rope:
        if "rope_theta" in rope:
            cfg["rope_theta"] = rope["rope_theta"]
        else:  # per attention type (Gemma 3)
            cfg["rope_theta"] = rope["full_attention"]["rope_theta"]
            cfg["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
        applied.append("rope_theta")
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    tok = json.loads((src / "tokenizer_config.json").read_text())
    if tok.get("tokenizer_class") == "TokenizersBackend":
        tok["tokenizer_class"] = "PreTrainedTokenizerFast"
        applied.append("tokenizer_class")
    (out / "tokenizer_config.json").write_text(json.dumps(tok, indent=1))
    overrides = {}
    if cfg.get("model_type") == "llama":
        overrides["rotary_base"] = float(cfg["rope_theta"])
        applied.append("rotary_base")
    return Adapted(dir=out, tl_name=TL_NAMES.get(name), tl_overrides=overrides, applied=applied)


# ============================================================================= one run of circuit-tracer


def run_side(model_name: str | None, set_dir: Path, prompts: list[list[int]], work: Path, *,
             variants: tuple[str, ...] = ("as_loaded",), k: int = 16, max_feature_nodes: int = 512,
             batch_size: int = 64, load_only: bool = False, warm: bool = False, timeout: int = 3000) -> dict:
    """circuit-tracer's graphs of `prompts` (token ids) on `model_name` with the set at `set_dir` loaded by its own
    loader, once per activation variant (circuit_tracer_side.py): {"result": result.json, "graphs": {variant: [its
    tensors per prompt]}, "loaded": the weights it read (load_only)}."""
    from safetensors.torch import load_file

    py = side_python()
    work.mkdir(parents=True, exist_ok=True)
    ad = adapt_model(model_name, work / "model") if model_name else Adapted(dir=work, tl_name=None)
    out = work / "out"
    job = {"model_dir": str(ad.dir), "tl_name": ad.tl_name, "tl_overrides": ad.tl_overrides,
           "set_dir": str(Path(set_dir).resolve()), "variants": list(variants), "k": k, "prompts": prompts,
           "max_feature_nodes": max_feature_nodes, "batch_size": batch_size,
           "node_threshold": NODE_THRESHOLD, "edge_threshold": EDGE_THRESHOLD, "out": str(out),
           "load_only": load_only, "warm": warm}
    (work / "job.json").write_text(json.dumps(job))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               CIRCUIT_TRACER_CACHE_DIR=str(work / "ct_cache"), HF_HOME=str(work / "hf_home"))
    proc = subprocess.run([str(py), str(HERE / "circuit_tracer_side.py"), str(work / "job.json")],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=work)
    if proc.returncode != 0:
        raise RuntimeError(f"circuit-tracer side run failed ({model_name}, {set_dir}):\n"
                           f"{(proc.stderr + proc.stdout)[-4000:]}")
    result = json.loads((out / "result.json").read_text())
    result["adaptations"] = {a: ADAPTATIONS[a] for a in ad.applied}
    graphs = {v: [load_file(str(out / f"graph_{v}_{i}.safetensors")) for i in range(len(gs))]
              for v, gs in result.get("graphs", {}).items()}
    loaded = load_file(str(out / "loaded.safetensors")) if load_only else None
    return {"result": result, "graphs": graphs, "loaded": loaded}


@contextlib.contextmanager
def workdir():
    with tempfile.TemporaryDirectory(prefix="ct-compat-") as d:
        yield Path(d)


# ============================================================================= the comparison


BLOCKS = ("feature<-feature", "feature<-error", "feature<-embed", "logit<-feature", "logit<-error", "logit<-embed")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| (0 when both are empty or zero)."""
    den = float(b.norm())
    num = float((a - b).norm())
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def compare(graph, pruned, ct: dict, ct_scores: tuple[float, float]) -> dict:
    """circuits' graph (and its prune) against circuit-tracer's dense one, node for node: both order nodes as
    features (layer, position, index), errors (layer-major), embeddings, logits. Returns each edge block's relative
    difference (Frobenius), the active and attributed feature sets, the pruned nodes and edges, the scores."""
    from interp_probes.circuits.prune import scores

    A_ct = ct["adjacency"].double()
    sel_ct = ct["active_features"][ct["selected_features"]]
    ours = {tuple(r) for r in graph.features.tolist()}
    theirs = {tuple(r) for r in sel_ct.tolist()}
    out: dict = {"n_active": graph.n_active, "n_active_ct": int(ct["active_features"].shape[0]),
                 "n_feat": graph.n_feat, "n_feat_ct": int(sel_ct.shape[0]),
                 "features_only_here": len(ours - theirs), "features_only_ct": len(theirs - ours),
                 "logit_tokens_equal": torch.equal(graph.logit_tokens, ct["logit_ids"]),
                 "logit_probs_rel": _rel(graph.logit_probs.double(), ct["logit_probs"].double())
                 if graph.n_logit == ct["logit_ids"].shape[0] else float("inf")}
    same_nodes = ours == theirs and torch.equal(graph.features, sel_ct) and out["logit_tokens_equal"] \
        and A_ct.shape[0] == graph.n_nodes
    out["same_nodes"] = bool(same_nodes)
    rs, cs = scores(graph)
    out.update(replacement_score=rs, completeness_score=cs, replacement_score_ct=ct_scores[0],
               completeness_score_ct=ct_scores[1])
    # pruned nodes by identity (a feature by (layer, position, index), any other node by its place after the
    # features), so graphs with different features still compare
    kept = {_key(graph.features, i) for i in pruned.node_mask.nonzero()[:, 0].tolist()}
    kept_ct = {_key(sel_ct, i) for i in ct["node_mask"].nonzero()[:, 0].tolist()}
    out.update(n_pruned_nodes=len(kept), n_pruned_nodes_ct=len(kept_ct), pruned_nodes_common=len(kept & kept_ct),
               n_pruned_edges=int(pruned.edge_mask.sum()), n_pruned_edges_ct=int(ct["edge_mask"].sum()))
    if not same_nodes:
        return out
    A = graph.edges.dense().double()
    F, L, n = graph.n_feat, graph.n_layers, graph.n_pos
    rows = {"feature": slice(0, F), "logit": slice(graph.logit_index(0), graph.n_nodes)}
    cols = {"feature": slice(0, F), "error": slice(F, F + L * n), "embed": slice(F + L * n, F + (L + 1) * n)}
    blocks = {}
    for name in BLOCKS:
        r, c = name.split("<-")
        blocks[name] = _rel(A[rows[r], cols[c]], A_ct[rows[r], cols[c]])
    blocks["all"] = _rel(A, A_ct)
    out["edge_rel"] = blocks
    edges_here = torch.zeros(graph.n_nodes, graph.n_nodes, dtype=torch.bool)
    E = graph.edges
    edges_here[E.target[pruned.edge_mask], E.source[pruned.edge_mask]] = True
    out["pruned_nodes_equal"] = torch.equal(pruned.node_mask, ct["node_mask"].bool())
    out["pruned_edges_equal"] = torch.equal(edges_here, ct["edge_mask"].bool())
    out.update(_ties(graph, pruned, ct, edges_here))
    return out


def _margins(scores: Tensor, cut: float, keep: float, i: int) -> tuple[float, float]:
    """Element i's distance from one side's threshold decision: its score's relative distance from the threshold's
    score, and the share of the total held by the elements scoring above it, less the fraction kept (the element is
    kept exactly when that share is below `keep`: find_threshold's rule)."""
    s = scores.double().flatten()
    x = float(s[i])
    above = float(s[s > x].sum() / s.sum())
    return (x - cut) / cut, above - keep


def _ties(graph, pruned, ct: dict, edges_here: Tensor) -> dict:
    """The pruned nodes and edges on which the two sides decide differently, each with its margins on both sides
    (`_margins`) and whether it is a tie (`TIE_TOL`); and how far apart the scores that decide pruning are: the
    threshold scores (relative), all scores (sum of |differences| over the sum: the most the share above any
    element can move), the largest relative difference of one score among those above half the threshold, and
    the threshold's share of the total (how far from the fraction kept the element at the cut can sit)."""
    n = graph.n_nodes
    E = graph.edges
    ours_edge = torch.zeros(n, n, dtype=torch.float64)
    ours_edge[E.target, E.source] = pruned.edge_score.double().cpu()
    sides = {"node": (pruned.node_influence.cpu(), pruned.node_cut, ct["node_influence"], float(ct["node_cut"]),
                      NODE_THRESHOLD),
             "edge": (ours_edge, pruned.edge_cut, ct["edge_scores"], float(ct["edge_cut"]), EDGE_THRESHOLD)}
    here = {"node": pruned.node_mask.cpu(), "edge": edges_here}
    there = {"node": ct["node_mask"].bool(), "edge": ct["edge_mask"].bool()}
    out: dict = {"ties": [], "untied": []}
    for kind, (s_here, cut_here, s_ct, cut_ct, keep) in sides.items():
        a, b = s_here.double().flatten(), s_ct.double().flatten()
        near = (a >= 0.5 * cut_here) | (b >= 0.5 * cut_ct)
        out[f"{kind}_cut_rel"] = abs(cut_here - cut_ct) / cut_ct
        out[f"{kind}_scores_l1_rel"] = float((a - b).abs().sum() / b.sum())
        out[f"{kind}_score_rel_max"] = float(((a - b).abs() / torch.maximum(a, b))[near].max()) if near.any() else 0.0
        out[f"{kind}_cut_share"] = cut_ct / float(b.sum())
        for i in (here[kind] != there[kind]).flatten().nonzero()[:, 0].tolist():
            sm_h, cm_h = _margins(s_here, cut_here, keep, i)
            sm_c, cm_c = _margins(s_ct, cut_ct, keep, i)
            tie = min(abs(sm_h), abs(cm_h)) <= TIE_TOL and min(abs(sm_c), abs(cm_c)) <= TIE_TOL
            where = _key(graph.features, i) if kind == "node" else (_key(graph.features, i // n),
                                                                    _key(graph.features, i % n))
            out["ties" if tie else "untied"].append(
                {"kind": kind, "element": where, "kept_here": bool(here[kind].flatten()[i]),
                 "score_margin_here": sm_h, "cum_margin_here": cm_h, "score_margin_ct": sm_c, "cum_margin_ct": cm_c})
    return out


def _key(features: torch.Tensor, i: int) -> tuple:
    return ("feature", *features[i].tolist()) if i < features.shape[0] else ("node", i - features.shape[0])


def interp_graphs(model, tc, prompts: list[list[int]], *, bos_error: bool = False, max_feature_nodes: int = 512,
                  batch_size: int = 64) -> list:
    """circuits' (graph, pruned) of each prompt, with the same budget and batch as `run_side`."""
    from interp_probes.circuits.graph import attribute
    from interp_probes.circuits.prune import prune

    out = []
    for ids in prompts:
        g = attribute(model, tc, torch.tensor([ids]), bos_error=bos_error, max_feature_nodes=max_feature_nodes,
                      batch_size=batch_size)
        out.append((g, prune(g, NODE_THRESHOLD, EDGE_THRESHOLD)))
    return out


GATE_EDGE_REL, GATE_SCORE = 1e-5, 1e-6
"""The acceptance's tolerances: every edge block's relative difference, and each score's absolute difference."""
NODE_THRESHOLD, EDGE_THRESHOLD = 0.8, 0.98
"""circuit-tracer's default pruning fractions, used on both sides."""
TIE_TOL, MAX_TIES = 2e-5, 2
"""The tie rule for the pruned graphs. Pruning keeps a node (an edge) when its score reaches the threshold's score,
i.e. when the share of the total influence (edge score) held by the elements scoring above it is below 0.8 (0.98).
Both sides compute the same float32 scores in a different summation order (sparse edge lists here, dense matrices
there), so they agree to float32 rounding, not bit for bit, and an element that sits at the cut can fall on either
side. An element kept by one side only is a tie when, on each side, the share above it is within TIE_TOL of the
fraction kept (it is the element at the cut: the cut moved by one element, or two neighbours swapped), or its score
is within TIE_TOL relative of that side's threshold score. Why 2e-5 (measured by `_ties` on both embedded models,
three prompts, JumpReLU and TopK quick sets, 2026-12-06): the share above an element moves between the sides by at
most the sum of the score differences over the total (<= 1.2e-6 for nodes, <= 3.2e-6 for edges), plus float32
rounding of the cumulative share (6e-8 near 0.98); the element at the cut sits within its own share of the fraction
kept (an edge's: <= 6.6e-6; a node's is ~1e-3, but node scores differ by <= 1.0e-5 relative near the threshold,
which the score test covers). The largest of these bounds, 9.8e-6, doubled. Every tie is reported with its
margins; every other pruned node and edge must be identical, with at most MAX_TIES ties a graph (one element
crossing the cut, or two swapping places)."""


def cross_check(model, name: str, tc, set_dir: Path, prompts: list[list[int]], work: Path, *,
                max_feature_nodes: int = 512, batch_size: int = 64) -> tuple[list[dict], dict]:
    """Every comparison of one (model, set) on `prompts`: circuits' default graph and its bos_error graph against
    circuit-tracer's. A JumpReLU set is compared with the set as circuit-tracer loads it; a TopK set with
    circuit-tracer's TopK class followed by ReLU (what the set means here: gated) and with its TopK class alone
    (0/1 mask, negative values kept: reported). Rows carry `gated` (defaults against the same activation)."""
    topk = tc.spec.activation == "topk"
    variants = ("topk_relu", "topk") if topk else ("as_loaded",)
    side = run_side(name, set_dir, prompts, work, variants=variants, k=tc.spec.k,
                    max_feature_nodes=max_feature_nodes, batch_size=batch_size)
    rows = []
    for bos in (False, True):
        ours = interp_graphs(model, tc, prompts, bos_error=bos, max_feature_nodes=max_feature_nodes,
                             batch_size=batch_size)
        for v in variants:
            if bos and v == "topk":
                continue  # one difference at a time
            for i, (g, pr) in enumerate(ours):
                r = side["result"]["graphs"][v][i]
                c = compare(g, pr, side["graphs"][v][i], (r["replacement_score"], r["completeness_score"]))
                rows.append({"model": name, "set": tc.spec.activation, "ct_activation": v, "bos_error": bos,
                             "prompt": i, "gated": not bos and v != "topk",
                             "ct_prune_recomputed": r.get("prune_recomputed_consistent"),
                             "completeness_rel_err": g.completeness_error(), **c})
    return rows, side["result"]


def failures(row: dict) -> list[str]:
    """What a gated row misses of the acceptance (empty: node for node the reference's graph)."""
    bad = []
    if not row["same_nodes"]:
        return [f"nodes differ ({row['features_only_here']} features only here, {row['features_only_ct']} only in "
                f"circuit-tracer; logit tokens equal: {row['logit_tokens_equal']})"]
    bad += [f"edge block {b}: rel {v:.2e}" for b, v in row["edge_rel"].items() if v > GATE_EDGE_REL]
    if not row["ct_prune_recomputed"]:  # the ties are judged on these scores
        bad.append("circuit-tracer's pruning scores, recomputed, do not give its masks")
    if row["untied"]:
        bad.append(f"pruned nodes {row['n_pruned_nodes']} vs {row['n_pruned_nodes_ct']}, edges "
                   f"{row['n_pruned_edges']} vs {row['n_pruned_edges_ct']}: {len(row['untied'])} differ off the "
                   f"thresholds ({describe(row['untied'][:3])})")
    if len(row["ties"]) > MAX_TIES:
        bad.append(f"{len(row['ties'])} ties at the pruning thresholds (at most {MAX_TIES})")
    for s in ("replacement_score", "completeness_score"):
        if abs(row[s] - row[f"{s}_ct"]) > GATE_SCORE:
            bad.append(f"{s} {row[s]:.7f} vs {row[f'{s}_ct']:.7f}")
    return bad


def describe(elements: list[dict]) -> str:
    """One line per tie (or untied difference): which element, which side keeps it, its margins on both sides."""
    return "; ".join(f"{e['kind']} {e['element']} kept {'here' if e['kept_here'] else 'by circuit-tracer'}, "
                     f"score {e['score_margin_here']:+.1e} / {e['score_margin_ct']:+.1e} of the threshold, share "
                     f"above {e['cum_margin_here']:+.1e} / {e['cum_margin_ct']:+.1e} from the fraction kept"
                     for e in elements)


def summary(rows: list[dict]) -> dict:
    """Worst case of each measure over `rows`."""
    out = {"n": len(rows), "same_nodes": all(r["same_nodes"] for r in rows)}
    rels = [r["edge_rel"] for r in rows if "edge_rel" in r]
    if rels:
        out["edge_rel_max"] = {b: max(r[b] for r in rels) for b in rels[0]}
    for key in ("pruned_nodes_equal", "pruned_edges_equal"):
        out[key] = all(r.get(key, False) for r in rows)
    out["ties"] = sum(len(r.get("ties", [])) for r in rows)
    out["untied"] = sum(len(r.get("untied", [])) for r in rows)
    for key in ("node_score_rel_max", "edge_score_rel_max", "node_cut_rel", "edge_cut_rel", "node_scores_l1_rel",
                "edge_scores_l1_rel", "node_cut_share", "edge_cut_share"):
        out[key] = max((r[key] for r in rows if key in r), default=float("nan"))
    for s in ("replacement_score", "completeness_score"):
        out[f"{s}_absdiff_max"] = max(abs(r[s] - r[f"{s}_ct"]) for r in rows)
    out["completeness_rel_err_max"] = max(r["completeness_rel_err"] for r in rows)
    return out
