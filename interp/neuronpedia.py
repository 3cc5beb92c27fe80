"""`interp export neuronpedia RUN OUT`: a sae_features run as Neuronpedia's bulk-import files.

The layout and rows are those SAEDashboard's export writes (sae_dashboard/neuronpedia/neuronpedia_export.py;
the row schema, read from that source, is `interp/schemas/neuronpedia_export.schema.json`):

    OUT/<model_id>/<source_id>/release.jsonl, model.jsonl, sourceset.jsonl, source.jsonl,
                               features/batch-0.jsonl.gz, activations/batch-0.jsonl.gz

with source_id = "<layer>-<source set>". Feature rows carry the density (frac_nonzero), the activation
histogram (freq_hist_*), the logit histogram (logits_hist_*) and the top promoted / suppressed tokens
(pos_str / neg_str); activation rows are the top contexts (binMin -1, binContains -1, as SAEDashboard marks
them) and the interval samples (binMin/binMax in activation units, binContains the share of the non-zero
activations in that interval). Fields SAEDashboard fills from analyses interp does not run (neuron alignment,
correlations, DFA, loss) are left empty as its dataclass defaults have them. Every file is written atomically;
nothing needs torch.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import re
import secrets
from pathlib import Path
from typing import Any

from .errors import InterpError
from .store import Run, atomic_write, atomic_write_text, jsonable, load_run

SCHEMA_FILE = Path(__file__).with_name("schemas") / "neuronpedia_export.schema.json"
BATCH = "batch-0"


def _now() -> str:
    return _dt.datetime.now().isoformat()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def _dumps(row: dict[str, Any]) -> bytes:
    return json.dumps(jsonable(row), ensure_ascii=False).encode("utf-8") + b"\n"


def _write_jsonl(path: Path, rows: list[dict[str, Any]], gz: bool = False) -> Path:
    data = b"".join(_dumps(r) for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        atomic_write(path, lambda p: p.write_bytes(gzip.compress(data, compresslevel=5, mtime=0)))
    else:
        atomic_write_text(path, data.decode("utf-8"))
    return path


def _layer(hook_name: str) -> int:
    m = re.match(r"^blocks\.(\d+)\.", hook_name or "")
    return int(m.group(1)) if m else 0


def export_run(run: Run | str | Path, out: str | Path, model_id: str | None = None, source_set: str | None = None,
               creator_id: str = "interp", creator_name: str = "interp") -> Path:
    """Write the Neuronpedia layout of a done sae_features run under `out`; returns the source directory."""
    run = run if isinstance(run, Run) else load_run(Path(run))
    if run.probe != "sae_features":
        raise InterpError(f"{run.path}: a {run.probe} run; the Neuronpedia export reads sae_features runs")
    if run.status != "done":
        raise InterpError(f"{run.path}: status {run.status}; only a done run can be exported")
    info = run.json("sae")
    feats = run.table("features")
    contexts = run.table("contexts")
    hist = run.tensor_file("histograms")
    hook = info["hook_name"]
    layer = _layer(hook)
    model_id = _slug(model_id or info.get("model") or "model")
    point = re.sub(r"^blocks\.\d+\.", "", hook).replace("hook_", "")  # blocks.6.hook_resid_post -> resid_post
    source_set = _slug(source_set or f"interp-{point}-{info['d_sae']}")
    source_id = f"{layer}-{source_set}"
    src_dir = Path(out) / model_id / source_id
    created = _now()
    n_int = int(run.config.get("n_intervals", 5))

    _write_jsonl(src_dir / "release.jsonl", [{
        "name": source_set, "description": f"interp sae_features run {run.path.name}", "creatorName": creator_name,
        "creatorId": creator_id, "visibility": "PUBLIC", "isNewUi": False, "featured": False,
        "descriptionShort": f"interp sae_features {run.path.name}", "urls": [], "creatorEmail": None,
        "creatorNameShort": creator_name, "defaultSourceSetName": None, "defaultSourceId": None,
        "defaultUmapSourceIds": [], "createdAt": created}])
    _write_jsonl(src_dir / "model.jsonl", [{
        "id": model_id, "instruct": model_id.endswith("-it") or "instruct" in model_id.lower(),
        "creatorId": creator_id, "displayNameShort": model_id, "displayName": model_id, "tlensId": None,
        "dimension": int(info["d_in"]), "visibility": "PUBLIC", "defaultSourceSetName": None, "defaultSourceId": None,
        "inferenceEnabled": False, "layers": 0, "neuronsPerLayer": 0, "createdAt": created, "owner": "",
        "updatedAt": created, "website": None}])
    _write_jsonl(src_dir / "sourceset.jsonl", [{
        "modelId": model_id, "name": source_set, "creatorId": creator_id, "hasDashboards": True,
        "visibility": "PUBLIC", "description": f"SAE at {hook} ({info['architecture']}, d_sae {info['d_sae']})",
        "type": "", "creatorName": creator_name, "urls": [], "creatorEmail": None, "releaseName": source_set,
        "defaultOfModelId": None, "defaultRange": 1, "defaultShowBreaks": True, "showDfa": False,
        "showCorrelated": False, "showHeadAttribution": False, "showUmap": False, "createdAt": created}])
    data = info.get("data") or {}
    _write_jsonl(src_dir / "source.jsonl", [{
        "id": source_id, "modelId": model_id, "setName": source_set, "creatorId": creator_id, "hasDashboards": True,
        "inferenceEnabled": False, "inferenceHosts": [], "saelensConfig": None, "saelensRelease": None,
        "saelensSaeId": None, "hfRepoId": None, "hfFolderId": None, "visibility": "PUBLIC", "defaultOfModelId": None,
        "hasUmap": False, "hasUmapLogSparsity": False, "hasUmapClusters": False,
        "num_prompts": int(-(-int(info["n_tokens"]) // max(1, int(info["seq_len"]) - 1))),
        "num_tokens_in_prompt": int(info["seq_len"]), "dataset": str(data.get("name") or run.config.get("data")),
        "notes": f"interp run {run.path.parent.name}/{run.path.name}", "createdAt": created}])

    act_counts, act_max = hist["act_counts"], hist["act_max"]  # (F, bins), (F,)
    logit_counts, logit_range = hist["logit_counts"], hist["logit_range"]  # (F, bins), (F, 2)
    nb = act_counts.shape[1]
    by_feature = {f: g for f, g in contexts.groupby("feature")}
    feature_rows, activation_rows = [], []
    prefix = "c" + secrets.token_hex(6)
    counter = 0
    for row in feats.itertuples():
        f = int(row.feature)
        if row.n_fired == 0:
            continue
        mx = float(act_max[f])
        width = mx / nb
        lo, hi = (float(v) for v in logit_range[f])
        lw = (hi - lo) / logit_counts.shape[1]
        feature_rows.append({
            "modelId": model_id, "layer": source_id, "index": f, "creatorId": creator_id, "createdAt": created,
            "maxActApprox": mx, "hasVector": False, "vector": [], "vectorLabel": None,
            "vectorDefaultSteerStrength": 10.0, "hookName": None, "topkCosSimIndices": [], "topkCosSimValues": [],
            "neuron_alignment_indices": [], "neuron_alignment_values": [], "neuron_alignment_l1": [],
            "correlated_neurons_indices": [], "correlated_neurons_pearson": [], "correlated_neurons_l1": [],
            "correlated_features_indices": [], "correlated_features_pearson": [], "correlated_features_l1": [],
            "neg_str": list(row.neg_tokens), "neg_values": [float(v) for v in row.neg_values],
            "pos_str": list(row.pos_tokens), "pos_values": [float(v) for v in row.pos_values],
            "frac_nonzero": float(row.density),
            "freq_hist_data_bar_heights": [float(c) for c in act_counts[f]],
            "freq_hist_data_bar_values": [(i + 0.5) * width for i in range(nb)],
            "logits_hist_data_bar_heights": [float(c) for c in logit_counts[f]],
            "logits_hist_data_bar_values": [lo + (i + 0.5) * lw for i in range(logit_counts.shape[1])],
            "decoder_weights_dist": [], "sourceSetName": None,
        })
        total = float(act_counts[f].sum()) or 1.0
        for c in (by_feature.get(f, contexts.iloc[:0])).itertuples():
            values = [float(v) for v in c.values]
            if c.kind == "top":
                bmin, bmax, contains = -1.0, mx, -1.0
            else:
                q = int(c.kind.split("_")[1])
                bmin, bmax = q * mx / n_int, (q + 1) * mx / n_int
                lo_b, hi_b = round(q * nb / n_int), round((q + 1) * nb / n_int)
                contains = float(act_counts[f][lo_b:hi_b].sum()) / total
            counter += 1
            top_i = max(range(len(values)), key=values.__getitem__) if values else 0
            activation_rows.append({
                "id": f"{prefix}{counter:012x}"[:25], "tokens": list(c.tokens), "index": f, "layer": source_id,
                "modelId": model_id, "maxValue": max(values) if values else 0.0, "maxValueTokenIndex": top_i,
                "minValue": min(values) if values else 0.0, "values": values, "creatorId": creator_id,
                "dataSource": None, "dataIndex": None, "dfaValues": [], "dfaTargetIndex": None, "dfaMaxValue": None,
                "createdAt": created, "lossValues": [], "logitContributions": None, "binMin": bmin, "binMax": bmax,
                "binContains": contains, "qualifyingTokenIndex": int(c.center), "zIndices": None, "zValues": None,
            })
    if not feature_rows:
        raise InterpError(f"{run.path}: no live feature to export")
    _write_jsonl(src_dir / "features" / f"{BATCH}.jsonl.gz", feature_rows, gz=True)
    _write_jsonl(src_dir / "activations" / f"{BATCH}.jsonl.gz", activation_rows, gz=True)
    return src_dir


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of one exported .jsonl or .jsonl.gz file."""
    path = Path(path)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]


def schema() -> dict[str, Any]:
    """The row schema (JSON Schema 2020-12; $defs: activation, feature, model, source, release, sourceset)."""
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


FILES = {"release.jsonl": "release", "model.jsonl": "model", "sourceset.jsonl": "sourceset",
         "source.jsonl": "source", f"features/{BATCH}.jsonl.gz": "feature",
         f"activations/{BATCH}.jsonl.gz": "activation"}
"""Each exported file and the $defs entry its rows follow."""
