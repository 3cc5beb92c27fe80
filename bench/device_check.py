"""Helpers of bench/device_check.sh: prepare on the host what a bare GPU machine lacks, then on the device build
random models, run the GPU rows and write one results file.

    device_check.py prepare [--dest gpu]    (host) wheels of the missing distributions, SmolLM2-135M's tokenizer
                                            and config, the project's entry points; prints the folder's size
    device_check.py models DIR              (device) DIR/rand-smollm2 (SmolLM2-135M's config, random weights,
                                            float32 on the CPU) and DIR/rand-8b (Llama-3-8B's shape with SmolLM2's
                                            49,152-token vocabulary, built on the device in bf16); SMALL=1: toys
    device_check.py bench MODEL OUT.jsonl   (device) bench/gpu.py's rows on MODEL in bf16 on $DEV, one JSON a line
    device_check.py manifests ROOT STAGE    one JSON line per run under ROOT (probe, status, seconds, key metrics)
    device_check.py report OUT              OUT/device_check.json and OUT/device_check.md from OUT/rows/*.jsonl

The prepared folder holds only what the device cannot get: it travels with the working tree (`run`'s carry,
64 MiB at most), so the model weights are built there from configs rather than carried.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV = os.environ.get("DEV", "cuda")
SMALL = os.environ.get("SMALL") == "1"

#: distributions a bare GPU machine already has (../shared/gpu/README.md: Python 3.12, torch with CUDA,
#: transformers, numpy, pandas, scipy, scikit-learn, networkx, einops, jaxtyping, safetensors, accelerate), and
#: what those pull in themselves. Everything else the import trace finds is carried as a wheel.
BARE = {
    "torch", "triton", "transformers", "huggingface-hub", "tokenizers", "safetensors", "regex", "requests", "urllib3",
    "idna", "certifi", "charset-normalizer", "pyyaml", "packaging", "filelock", "fsspec", "tqdm", "numpy", "pandas",
    "python-dateutil", "six", "tzdata", "pytz", "scipy", "scikit-learn", "joblib", "threadpoolctl", "networkx",
    "einops", "jaxtyping", "wadler-lindig", "accelerate", "psutil", "sympy", "mpmath", "jinja2", "markupsafe",
    "typing-extensions", "setuptools", "pip", "wheel", "pillow", "hf-xet",
    "interp",  # the project: the working tree itself, with its entry points written by `prepare`
}
#: traced but not carried unless `prepare --with NAME`: pyarrow's wheel is 52 MB, over what a run carries beside
#: wandb's 20 MB; the reference preparation (../shared/gpu/README.md: 33 MB in all, wandb 20 MB of it) ran datasets
#: and sae-lens on the device without it, so the machine has it. `run` checks every traced import first and says
#: which is missing before any GPU time is spent.
NOT_CARRIED = {"pyarrow"}
#: imported by the trace: every probe's run module, the benches the device check runs, and pytest (tests/gpu)
TRACE_MODULES = ["interp.cli", "interp.runner", "interp.store", "interp.models.load", "interp.sae", "bench.gpu",
                 "bench.capture", "bench.patching", "bench.sae", "transformer_lens.patching", "sae_lens", "pytest"]
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64",
             "linux_x86_64"]


def norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def traced_distributions() -> dict[str, str]:
    """distribution -> version of every installed distribution whose top-level package is in sys.modules after
    importing every registered probe's run module and TRACE_MODULES."""
    import importlib
    import importlib.metadata as md

    sys.path.insert(0, str(ROOT))
    from interp.registry import probes_available

    for spec in probes_available().values():
        spec.run_function()
    for mod in TRACE_MODULES:
        importlib.import_module(mod)
    by_top = md.packages_distributions()
    out = {}
    for name in list(sys.modules):
        for dist in by_top.get(name.partition(".")[0], []):
            out[dist] = md.version(dist)
    return dict(sorted(out.items(), key=lambda kv: norm(kv[0])))


def write_entry_points(site: Path) -> Path:
    """A minimal interp dist-info under `site` (METADATA + the venv's entry_points.txt): with `site` and the
    working tree on PYTHONPATH, the registry finds the probes without building the project on the device."""
    import importlib.metadata as md

    dist = md.distribution("interp")
    info = site / f"interp-{dist.version}.dist-info"
    shutil.rmtree(site, ignore_errors=True)
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: interp\nVersion: {dist.version}\n")
    (info / "entry_points.txt").write_text(dist.read_text("entry_points.txt") or "")
    return info


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def prepare(dest: Path, extra: set[str] = frozenset()) -> int:
    """Fill `dest`: whl/ (one wheel per traced distribution the bare machine lacks, at the venv's version),
    tok/ (SmolLM2-135M's tokenizer and config), site/ (the project's entry points), prepared.json."""
    from interp.embedded import ensure_cached

    t0 = time.time()
    dists = traced_distributions()
    missing = {d: v for d, v in dists.items() if norm(d) not in BARE and (norm(d) not in NOT_CARRIED or
                                                                        norm(d) in extra)}
    whl = dest / "whl"
    shutil.rmtree(whl, ignore_errors=True)
    whl.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none", "-q", "-d", str(whl)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    failed = []
    r = subprocess.run(cmd + [f"{d}=={v}" for d, v in missing.items()], capture_output=True, text=True)
    if r.returncode:  # one at a time, to name the ones without a wheel
        for d, v in missing.items():
            if subprocess.run(cmd + [f"{d}=={v}"], capture_output=True, text=True).returncode:
                failed.append(f"{d}=={v}")
    tok = dest / "tok"
    shutil.rmtree(tok, ignore_errors=True)
    tok.mkdir(parents=True)
    src = ensure_cached("smollm2-135m")
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".gguf")):
            shutil.copy2(f, tok / f.name)
    write_entry_points(dest / "site")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    wheels = {f.name: round(f.stat().st_size / 2**20, 2) for f in sorted(whl.glob("*.whl"))}
    info = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "head": head, "python": sys.version.split()[0],
            "traced": dists, "carried": missing, "assumed_on_device": sorted(d for d in dists if d not in missing),
            "check_modules": check_modules(dists),
            "failed": failed, "wheels_mb": wheels, "size_mb": round(size_mb(dest), 1)}
    (dest / "prepared.json").write_text(json.dumps(info, indent=1))
    print(f"prepared {dest} in {time.time() - t0:.0f}s: {len(wheels)} wheels ({sum(wheels.values()):.1f} MB), "
          f"tokenizer+config {size_mb(tok):.1f} MB, total {info['size_mb']} MB")
    biggest = sorted(wheels.items(), key=lambda kv: -kv[1])[:5]
    print("largest wheels: " + ", ".join(f"{k} {v} MB" for k, v in biggest))
    if failed:
        print(f"NO WHEEL for: {' '.join(failed)}", file=sys.stderr)
    if info["size_mb"] > 60:
        print(f"WARNING: {info['size_mb']} MB is over what a device run can carry (64 MiB with the rest)",
              file=sys.stderr)
    return 1 if failed else 0


def check_modules(dists: dict[str, str]) -> dict[str, list[str]]:
    """distribution -> its top-level modules that the trace imported (what `check` imports on the device)."""
    import importlib.metadata as md

    out: dict[str, list[str]] = {}
    for top, names in md.packages_distributions().items():
        if top in sys.modules and not top.startswith("_"):
            for d in names:
                if d in dists:
                    out.setdefault(d, []).append(top)
    return out


# ------------------------------------------------------------------------------------------------ on the device
def check(prepared: Path) -> int:
    """Import every module the host's trace imported; name each distribution that fails (exit 1 if any), with
    the version the host has and the one found here."""
    import importlib
    import importlib.metadata as md

    info = json.loads(prepared.read_text())
    bad = []
    for dist, mods in sorted(info["check_modules"].items()):
        for mod in mods:
            try:
                importlib.import_module(mod)
            except Exception as e:  # noqa: BLE001 - reported, the run goes on to say what else is missing
                try:
                    here = md.version(dist)
                except md.PackageNotFoundError:
                    here = "absent"
                carried = "carried" if dist in info["carried"] else "not carried"
                bad.append(f"{dist} (host {info['traced'][dist]}, here {here}, {carried}): import {mod}: "
                           f"{type(e).__name__}: {str(e)[:160]}")
    print("\n".join(bad) if bad else f"all {len(info['check_modules'])} traced distributions import")
    return 1 if bad else 0


def big_config(base):
    """Llama-3-8B's shape (32 layers, d_model 4096, d_mlp 14336, 32 heads, 8 KV heads, rope theta 5e5) with
    SmolLM2's vocabulary and special tokens; SMALL=1: 4 layers, d_model 256."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=base.vocab_size, hidden_size=256 if SMALL else 4096, intermediate_size=512 if SMALL else 14336,
        num_hidden_layers=4 if SMALL else 32, num_attention_heads=8 if SMALL else 32,
        num_key_value_heads=2 if SMALL else 8, max_position_embeddings=8192, rope_theta=500000.0,
        tie_word_embeddings=False, bos_token_id=base.bos_token_id, eos_token_id=base.eos_token_id,
        pad_token_id=base.pad_token_id)


def small_config(base):
    """SmolLM2-135M's config (SMALL=1: 4 layers, d_model 128, the same vocabulary and tokens)."""
    if not SMALL:
        return base
    cfg = base.__class__.from_dict({**base.to_dict(), "num_hidden_layers": 4, "hidden_size": 128,
                                    "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2})
    return cfg


def build_random(cfg, tokdir: Path, out: Path, device: str = "cpu", dtype: str = "float32") -> str:
    """A random-weight model of `cfg` (seed 0) built on `device` in `dtype`, saved with the tokenizer of `tokdir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t = time.time()
    torch.manual_seed(0)
    with torch.device(device):
        m = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    m.save_pretrained(out)
    AutoTokenizer.from_pretrained(tokdir).save_pretrained(out)
    n = sum(p.numel() for p in m.parameters())
    del m
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return f"{out.name}: {n / 1e9:.3f}B params on {device} in {dtype}, built and saved in {time.time() - t:.1f}s"


def models(dest: Path, tokdir: Path) -> int:
    from transformers import AutoConfig

    base = AutoConfig.from_pretrained(tokdir)
    print(build_random(small_config(base), tokdir, dest / "rand-smollm2"), flush=True)
    if os.environ.get("SKIP_BIG") != "1":
        print(build_random(big_config(base), tokdir, dest / "rand-8b", device=DEV, dtype="bfloat16"), flush=True)
    return 0


def emit(path: Path, **row) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row, default=str) + "\n")
    print("ROW", json.dumps(row, default=str), flush=True)


def bench(model_dir: str, out: Path) -> int:
    """bench/gpu.py's rows on `model_dir` loaded in bf16 on $DEV (SMALL=1: its smoke sizes)."""
    import torch

    sys.path.insert(0, str(ROOT))
    from bench.gpu import gpu
    from interp.models import load_model

    t = time.time()
    m = load_model(model_dir, device=DEV, dtype="bfloat16")
    detail = f"{m.info.n_layers} layers, d_model {m.info.d_model}, {m.info.d_vocab} tokens"
    if DEV.startswith("cuda"):
        detail += f"; {torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated"
    emit(out, stage="bench", name="load_rand_8b_s", value=round(time.time() - t, 1), detail=detail)
    t = time.time()
    for r in gpu(m, smoke=SMALL, device=DEV):
        emit(out, stage="bench", name=r.name, value=r.value, target=r.target, ok=r.ok,
             detail=f"{r.figure}; {r.detail}")
    emit(out, stage="bench", name="bench_gpu_s", value=round(time.time() - t, 1))
    return 0


KEY_METRICS = ("teacher_forced_max_rel_err", "tf_keystone_sets_identical", "lm_weights_unchanged")


def manifests(root: Path, stage: str, out: Path) -> int:
    """One row per run under `root`: probe, status, device, dtype, seconds, the key metrics and the first few."""
    for mf in sorted(root.glob("*/*/manifest.json")):
        d = json.loads(mf.read_text())
        met = d.get("metrics") or {}
        keys = [k for k in met if k in KEY_METRICS or "unchanged" in k] + [k for k in list(met)[:4]]
        cfg = d.get("config") or {}
        finite = all(math.isfinite(v) for v in met.values() if isinstance(v, float))
        emit(out, stage=stage, name=d.get("probe"), status=d.get("status"), device=cfg.get("device"),
             dtype=cfg.get("dtype"), seconds=(d.get("timings") or {}).get("seconds_total"),
             metrics={k: met[k] for k in dict.fromkeys(keys)}, finite=finite, error=d.get("error"))
    return 0


def report(out: Path) -> int:
    """device_check.json (every row, with the stage) and device_check.md (one table a stage)."""
    rows = []
    for f in sorted((out / "rows").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                rows.append({"stage": f.stem, "name": "unreadable row", "status": "?", "detail": line[:300]})
    env = (out / "env.txt").read_text() if (out / "env.txt").exists() else ""
    (out / "device_check.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1, default=str))
    md = ["# Device check", "", "```", env.strip(), "```", ""]
    for stage in dict.fromkeys(r["stage"] for r in rows):
        md += [f"## {stage}", "", "| name | status / value | seconds | detail |", "|---|---|---:|---|"]
        for r in (r for r in rows if r["stage"] == stage):
            value = r.get("status", r.get("value"))
            if "ok" in r and r["ok"] is not None:
                value = f"{value} ({'PASS' if r['ok'] else 'FAIL'} {r.get('target')})"
            detail = r.get("detail") or json.dumps(r.get("metrics") or {}, default=str)
            if r.get("error"):
                detail += f" error: {str(r['error'])[:200]}"
            cells = [r.get("name"), value, r.get("seconds", ""), detail]
            md.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
        md.append("")
    (out / "device_check.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else ""
    if cmd == "prepare":
        dest, extra = ROOT / "gpu", set()
        for flag, value in zip(argv[1::2], argv[2::2]):
            if flag == "--dest":
                dest = Path(value)
            elif flag == "--with":
                extra.add(norm(value))
        return prepare(dest.resolve(), extra)
    if cmd == "check":
        return check(Path(argv[1]) if len(argv) > 1 else ROOT / "gpu" / "prepared.json")
    if cmd == "models":
        return models(Path(argv[1]), Path(argv[2]) if len(argv) > 2 else ROOT / "gpu" / "tok")
    if cmd == "bench":
        return bench(argv[1], Path(argv[2]))
    if cmd == "manifests":
        return manifests(Path(argv[1]), argv[2], Path(argv[3]))
    if cmd == "report":
        return report(Path(argv[1]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
