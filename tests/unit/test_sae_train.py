"""interp.sae.train: the learning-rate schedule against transformers', the trainer hook (`fit=`) with SAELens's
SAETrainer (the benchmark's baseline, bench/sae.py), and the package's surface: cache keys pinned to their values
before the split into a package, and the torch-free imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sae_data import sparse_data

import interp.sae
from interp.errors import ConfigError
from interp.sae import InputTransform, SAETrainConfig, sae_cache_key, train_sae
from interp.sae.train import _lr_at
from interp.sites import Site

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def hf_lrs(cfg: SAETrainConfig, scale: float = 1.0) -> list[float]:
    """The rate of each step under transformers' cosine schedule with warm-up, read as a trainer would."""
    import transformers

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr * scale)
    sched = transformers.get_cosine_schedule_with_warmup(opt, cfg.warmup_steps, cfg.steps)
    out = []
    for _ in range(cfg.steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_lr_schedule_is_transformers_cosine_only_without_warmup():
    """Why `_lr_at` stays: without warm-up its cosine is transformers' to the bit, but its warm-up runs one step
    ahead (transformers' starts at 0) and rounds differently, and scaling its value by a group's lr_scale rounds
    differently from a LambdaLR on the scaled base rate."""
    cfg = SAETrainConfig(steps=800, lr=5e-4)
    assert [_lr_at(cfg, s) for s in range(cfg.steps)] == hf_lrs(cfg)
    warm = SAETrainConfig(steps=800, lr=5e-4, warmup_steps=5)
    ours, hf = [_lr_at(warm, s) for s in range(warm.steps)], hf_lrs(warm)
    assert hf[0] == 0.0 and ours[0] == warm.lr / 5, (hf[0], ours[0])
    assert ours[:4] == pytest.approx(hf[1:5], rel=1e-12) and ours[:4] != hf[1:5]  # lr (s+1) / w vs lr (s / w)
    assert ours[5:] == hf[5:]
    scaled = [_lr_at(cfg, s) * 3.0 for s in range(cfg.steps)]
    assert sum(a != b for a, b in zip(scaled, hf_lrs(cfg, 3.0))) > 0


def saelens_cfg(**kw) -> SAETrainConfig:
    base = dict(architecture="standard", d_sae=32, steps=30, batch=128, lr=3e-3, target_l0=3.0, k=3,
                calib_tokens=1024, controller_every=10, trainer="saelens", sparsity_coeff=1e-3)
    base.update(kw)
    return SAETrainConfig(**base)


def test_saelens_trainer_through_fit_trains_and_calibrates():
    from bench.sae import train_saelens

    sae = train_sae(sparse_data(n=2000), saelens_cfg(), fit=train_saelens)
    info = sae.cfg.metadata.interp_training
    assert info["tokens_per_s"] > 0 and info["config"]["trainer"] == "saelens"
    assert abs(info["l0_train_calibrated"] - 3.0) <= 0.15 + 1e-6, info["l0_train_calibrated"]


def test_saelens_trainer_without_fit_is_refused():
    with pytest.raises(ConfigError, match="trainer"):
        train_sae(sparse_data(n=200), saelens_cfg())


class Info:
    name, weights_sha256 = "m", "abc"


PINNED = {  # sae_cache_key(Info(), resid_post 2, cfg, "d1") as interp/sae.py computed them before the split
    "default": (SAETrainConfig(), "f967c7b2f2a2f0e16807751a564b132fa3c7d1acab5168aa61b5303f46d89ae2"),
    "aux": (SAETrainConfig(architecture="topk", aux_k=8, aux_coeff=0.5),
            "bf5ca55cb93d30f0c4a63f92065f9cbbef3ab324bfeb8f206f1fd8e7e2a795b6"),
    "aux_off": (SAETrainConfig(aux_coeff=0.5), "f967c7b2f2a2f0e16807751a564b132fa3c7d1acab5168aa61b5303f46d89ae2"),
    "data_init": (SAETrainConfig(init_sparsity="data"),
                  "64102fffe9f153a2a57f6cdb8b1c2620568da9a7446981c886d2a1e14eb67ebe"),
    "resample": (SAETrainConfig(resample_every=50, resample_below=1e-4),
                 "3895b39582c1540140629e6250f090cb26070c4abe3d87a9fe41841251d4205e"),
    "saelens": (SAETrainConfig(trainer="saelens"), "568497e5a2e03ede228d3c56ae6ab038448ee4e888792869921b800e79850b70"),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_cache_keys_are_the_ones_before_the_package(name):
    cfg, key = PINNED[name]
    assert sae_cache_key(Info(), Site("resid_post", 2), cfg, "d1") == key


def test_cache_key_of_a_transform_is_unchanged():
    t = InputTransform(torch.eye(4) * 2.0, torch.eye(4) / 2.0, shift=torch.arange(4.0))
    assert sae_cache_key(Info(), Site("resid_post", 2), SAETrainConfig(), "d1", t) == \
        "1bc578313290c54fa78404bb266234ef4bd0117379fb88b9aa0db5bb8f359f23"


def test_every_public_name_resolves():
    missing = [n for n in interp.sae.__all__ if getattr(interp.sae, n, None) is None]
    assert not missing, missing
    assert interp.load_sae.__module__ == "interp.sae.source"


def test_config_and_spec_check_import_no_torch():
    code = ("import sys, interp.sae; from interp.sae import SAETrainConfig; "
            "from interp.sae.source import resolve_sae_spec; SAETrainConfig().validate(); "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out
