"""tests/gpu: every probe's micro config and the identities it asserts, on CUDA in bfloat16 and float32.

Every test here is marked `gpu`. Without CUDA the whole folder is skipped at collection (the reason is printed
with `-ra`), so a CPU machine collects it in a moment. `INTERP_GPU_TEST_DEVICE=cpu` runs it on the CPU instead
(the dry run of bench/device_check.sh; bfloat16 on a CPU proves nothing about CUDA's kernels, only that the
code runs). `INTERP_GPU_SHARD=i/n` keeps every n-th test from the i-th (0-based): the device check runs shards
in parallel processes.

The model: `INTERP_GPU_TEST_MODEL` (a model directory) when set; else the embedded smollm2-135m when its weights
are cached (and SMALL is not 1); else a random-weight twin built in-process from a config + tokenizer directory
(`INTERP_GPU_TOKDIR`, else the repo's gpu/tok prepared by bench/device_check.sh, else the embedded model's cache
directory, which holds its config and tokenizer even where the weights are not converted yet). SMALL=1 shrinks
the twin to 4 layers, d_model 128 (same vocabulary and tokenizer).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEVICE = os.environ.get("INTERP_GPU_TEST_DEVICE", "cuda")
DTYPES = ("bfloat16", "float32")


def _no_device_reason() -> str | None:
    if not DEVICE.startswith("cuda"):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return ("no CUDA device: torch.cuda.is_available() is False (tests/gpu runs on a GPU machine, e.g. "
            "`bash bench/device_check.sh run`; INTERP_GPU_TEST_DEVICE=cpu runs it on the CPU as a dry run)")


def pytest_collection_modifyitems(config, items):
    mine = [it for it in items if HERE in Path(str(it.path)).resolve().parents]
    if not mine:
        return
    for it in mine:
        it.add_marker(pytest.mark.gpu)
    reason = _no_device_reason()
    if reason:
        for it in mine:
            it.add_marker(pytest.mark.skip(reason=reason))
        return
    shard = os.environ.get("INTERP_GPU_SHARD")
    if shard:
        i, n = (int(x) for x in shard.split("/"))
        drop = {id(it) for k, it in enumerate(mine) if k % n != i}
        config.hook.pytest_deselected(items=[it for it in items if id(it) in drop])
        items[:] = [it for it in items if id(it) not in drop]


def _config_dir() -> Path:
    env = os.environ.get("INTERP_GPU_TOKDIR")
    if env:
        return Path(env)
    if (ROOT / "gpu" / "tok" / "config.json").is_file():
        return ROOT / "gpu" / "tok"
    from interp.embedded import model_cache_dir

    return model_cache_dir("smollm2-135m")


@pytest.fixture(scope="session")
def gpu_model_name(tmp_path_factory) -> str:
    """What the runs load: a model directory or the embedded model's name (see the module docstring)."""
    env = os.environ.get("INTERP_GPU_TEST_MODEL")
    if env:
        return env
    from interp.embedded import is_cached

    if is_cached("smollm2-135m") and os.environ.get("SMALL") != "1":
        return "smollm2-135m"
    return str(random_model_dir(_config_dir(), tmp_path_factory.mktemp("gpu-models") / "rand-smollm2"))


def random_model_dir(src: Path, out: Path) -> Path:
    """A random-weight model (seed 0) of the config in `src`, saved with its tokenizer under `out`."""
    from transformers import AutoConfig

    from bench.device_check import build_random, small_config

    build_random(small_config(AutoConfig.from_pretrained(src)), src, out)
    return out


@pytest.fixture(scope="session")
def gpu_models(gpu_model_name):
    """dtype -> the model loaded on the test device in that dtype (loaded once per session on first use)."""
    from interp.models import load_model

    made = {}

    def get(dtype: str):
        if dtype not in made:
            made[dtype] = load_model(gpu_model_name, device=DEVICE, dtype=dtype)
        return made[dtype]

    return get


@pytest.fixture(scope="session")
def gpu_runs(tmp_path_factory, gpu_model_name, gpu_models):
    """(probe, dtype) -> its micro run on the test device (a loaded Run), made once per session on first use."""
    from interp.runner import execute, prepare
    from interp.store import load_run

    root = tmp_path_factory.mktemp("gpu-runs")
    made = {}

    def get(probe: str, dtype: str):
        if (probe, dtype) not in made:
            spec, cfg = prepare(probe, {"size": "micro", "model": gpu_model_name, "device": DEVICE, "dtype": dtype})
            made[probe, dtype] = load_run(execute(spec, cfg, out=root / dtype, model=gpu_models(dtype),
                                                  progress=False))
        return made[probe, dtype]

    return get
