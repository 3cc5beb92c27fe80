"""Bad input on the GPU, checked on the CPU: CUDA devices counted without torch, a model that does not fit the free
memory refused before its weights load, and an out-of-memory error that names the stage and the settings to lower."""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass

import pytest

from interp import runner
from interp.config import PositiveInt, ProbeConfig, SAESource
from interp.errors import ConfigError, OutOfMemory


@pytest.mark.parametrize("visible, n, shown", [
    ("0", 2, 1), ("1,0", 2, 2), ("0,2,1", 2, 1), ("", 2, 0), ("-1", 2, 0), ("0,0", 2, 1), (" 1 , 0 ", 2, 2),
    ("GPU-8f2c4e1a-0000-0000-0000-000000000000", 1, 1), ("0,x,1", 4, 1), ("3", 2, 0),
])
def test_cuda_visible_devices_narrows_the_driver_count_as_cuda_does(visible, n, shown):
    assert runner._visible_count(visible, n) == shown


@pytest.mark.parametrize("device, gpus, visible, needle", [
    ("cuda", 0, None, "no NVIDIA GPU or driver here"),
    ("cuda:3", 0, None, "no NVIDIA GPU or driver here"),
    ("cuda:0", 2, "", "CUDA_VISIBLE_DEVICES='' hides every GPU"),
    ("cuda:2", 2, None, "shows 2 GPUs: cuda, cuda:0..cuda:1"),
    ("cuda:1", 2, "1", "shows 1 GPU (CUDA_VISIBLE_DEVICES='1')"),
])
def test_an_absent_cuda_device_is_refused_naming_what_exists(device, gpus, visible, needle, monkeypatch):
    monkeypatch.setattr(runner, "_nvidia_gpus", lambda: gpus)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(ConfigError, match="device=") as e:
        runner.check_device(device)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("device, gpus", [("cuda", 1), ("cuda:1", 2), ("cuda:7", None), ("cpu", 0), ("auto", 0)])
def test_a_present_or_unknowable_device_passes(device, gpus, monkeypatch):
    monkeypatch.setattr(runner, "_nvidia_gpus", lambda: gpus)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    runner.check_device(device)  # None: ROCm, WSL or another system; pick_device decides when the model loads


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:", "cuda0", "cuda:-1", "CUDA", "tpu"])
def test_a_malformed_device_is_refused_naming_what_is_allowed(device):
    from interp.registry import get_probe

    with pytest.raises(ConfigError, match='one of "auto", "cpu", "cuda", "cuda:N"'):
        get_probe("logit_lens").config({"device": device})


# ----------------------------------------------------------------------------- a model that does not fit


def test_a_model_larger_than_the_free_memory_is_refused_before_its_weights_load(tiny_model_dir, tmp_path,
                                                                                   monkeypatch):
    import transformers

    from interp import models
    from interp.models import device

    d = shutil.copytree(tiny_model_dir, tmp_path / "big-llama")
    need = 4 * sum(math.prod(shape) for shape in models.check_model_files(models.resolve_model(str(d))).values())
    monkeypatch.setattr(device, "free_memory", lambda where: need // 2)

    def never(*a, **k):
        raise AssertionError("from_pretrained was reached")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    with pytest.raises(OutOfMemory) as e:
        models.load_model(str(d), device="cpu", dtype="float32")
    msg = str(e.value)
    assert "\n" not in msg and f"{device._bytes(need)} for its weights in float32" in msg, msg
    assert f"cpu has {device._bytes(need // 2)} free" in msg, msg


def test_a_tiny_model_fits(tiny_model_dir):
    from interp.models import load_model

    assert load_model(str(tiny_model_dir), device="cpu").info.n_layers == 2


# ----------------------------------------------------------------------------- out of memory in a stage


@dataclass(frozen=True)
class _Sized(ProbeConfig):
    batch_size: PositiveInt = 8
    attn_batch_size: PositiveInt | None = 1
    seq_len: PositiveInt = 64
    n_prompts: PositiveInt = 10
    sae: SAESource = SAESource()


def _cuda_oom(text="CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.8 GiB"):
    import torch

    return torch.OutOfMemoryError(text)


def test_cuda_out_of_memory_names_the_stage_and_the_settings_to_lower():
    err = runner.out_of_memory(_cuda_oom(), _Sized(), "record")
    assert isinstance(err, OutOfMemory)
    assert str(err) == ("CUDA out of memory in stage 'record' (batch_size=8, attn_batch_size=1, seq_len=64, tried to "
                        "allocate 2.00 GiB): lower batch_size, attn_batch_size or seq_len (--set batch_size=4)")
    two = runner.out_of_memory(_cuda_oom(), _Sized(attn_batch_size=4), "record")  # which of two: no value to try
    assert str(two).endswith("lower batch_size, attn_batch_size or seq_len"), str(two)


def test_out_of_memory_without_a_stage_or_such_settings_still_says_what_to_do():
    assert str(runner.out_of_memory(_cuda_oom("CUDA out of memory."), ProbeConfig(), None)) == (
        "CUDA out of memory outside any named stage: use a smaller size (--size quick), a smaller model or a smaller "
        "dtype")
    host = runner.out_of_memory(RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory"),
                                _Sized(batch_size=1, attn_batch_size=None), "sae")
    assert str(host).startswith("out of host memory in stage 'sae' (batch_size=1,") and "--set seq_len=32" in str(host)


def test_out_of_memory_while_the_model_loads_says_the_model_does_not_fit():
    err = runner.out_of_memory(_cuda_oom(), _Sized(model="big-model"), "model load")
    assert str(err) == ("CUDA out of memory in stage 'model load': the weights of big-model do not fit; use a smaller "
                        "model, a smaller dtype or another device")


def test_other_errors_are_not_out_of_memory():
    assert runner.out_of_memory(ValueError("x"), _Sized(), "s") is None
    assert runner.out_of_memory(OutOfMemory("model too large"), _Sized(), "model load") is None


def test_synchronize_waits_on_the_device_of_a_model_tensor_or_name_and_never_on_the_cpu(monkeypatch):
    """The one device wait of the project's timers (bench/common.py, keystone's tf_check): a model, a tensor, a
    torch.device or a name; CUDA is synchronised on that very device, the CPU not at all."""
    import torch

    from interp.models import synchronize

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: waited.append(dev))
    synchronize(None)
    synchronize("cpu")
    synchronize(torch.zeros(1))

    @dataclass
    class Stub:
        device: object

    synchronize(Stub("cpu"))
    assert waited == [], f"a CPU wait reached CUDA: {waited}"
    synchronize("cuda:1")
    synchronize(Stub(torch.device("cuda", 0)))
    synchronize(torch.device("cuda"))
    assert waited == [torch.device("cuda", 1), torch.device("cuda", 0), torch.device("cuda")], waited
