"""interp.load_sae(spec): SAELens directories, run directories and SAELens release ids; sparsity.safetensors
as SAELens writes and reads it."""

from __future__ import annotations

import json

import pytest
import torch
from sae_data import sparse_data

import interp
from interp.errors import ConfigError
from interp.sae import SAETrainConfig, encode, firing_density, save_sae, train_sae
from interp.store import RunWriter

META = {"hook_name": "blocks.0.hook_resid_post", "model_name": "t"}


@pytest.fixture(scope="module")
def trained():
    x = sparse_data(n=3000, n_atoms=40, offset=0.0)
    cfg = SAETrainConfig(architecture="jumprelu", d_sae=48, steps=60, batch=128, lr=3e-3, target_l0=3.0,
                         calib_tokens=1024, controller_every=10)
    return train_sae(x, cfg, metadata=META), x


def make_run(tmp_path, saes: dict, done: bool = True):
    w = RunWriter.create(tmp_path / "out", "atoms", {}, "ab" * 32, 0)
    for name, sae in saes.items():
        w.save_dir(name, lambda d, sae=sae: save_sae(sae, d))
    if done:
        w.finish()
    return w.path


def test_sparsity_file_is_what_saelens_writes_and_reads(trained, tmp_path):
    from sae_lens import SAE
    from sae_lens.constants import SPARSITY_FILENAME
    from safetensors import safe_open

    sae, x = trained
    save_sae(sae, tmp_path / "sae")
    with safe_open(str(tmp_path / "sae" / SPARSITY_FILENAME), framework="pt", device="cpu") as f:
        assert list(f.keys()) == ["sparsity"]
        log10 = f.get_tensor("sparsity")
    assert log10.shape == (48,) and log10.dtype == torch.float32
    gen = torch.Generator().manual_seed(1)  # train_sae measures on its calibration sample
    sample = x[torch.randperm(x.shape[0], generator=gen)[:1024]]
    want = (encode(sae, sample) > 0).float().mean(0)
    assert torch.allclose(10 ** log10, want + 1e-10, rtol=1e-4, atol=1e-7)
    assert torch.allclose(firing_density(sae, sample), want)
    assert want.sum() == pytest.approx(3.0, rel=0.1)  # the calibrated L0, from the densities
    loaded = SAE.load_from_disk(str(tmp_path / "sae"))
    assert torch.allclose(loaded.encode(x[:64]), encode(sae, x[:64]), atol=1e-5)


def test_load_sae_takes_a_directory_and_a_run(trained, tmp_path):
    sae, x = trained
    save_sae(sae, tmp_path / "plain")
    a = interp.load_sae(str(tmp_path / "plain"))
    run = make_run(tmp_path, {"tsae": sae, "sae": sae})
    b = interp.load_sae(str(run))  # two SAEs: the one named "sae"
    c = interp.load_sae(str(run / "tsae"))
    for s in (a, b, c):
        assert torch.equal(encode(s, x[:32]), encode(sae, x[:32])) and not s.W_enc.requires_grad
    assert torch.allclose(b.interp_density, sae.interp_density, rtol=1e-4, atol=1e-9)


def test_load_sae_refuses_in_one_line(trained, tmp_path, monkeypatch):
    sae, _ = trained
    monkeypatch.delenv("INTERP_ONLINE", raising=False)
    with pytest.raises(ConfigError, match="'gemma-scope-2b-pt-res-canonical'.*INTERP_ONLINE=1") as e:
        interp.load_sae("saelens:gemma-scope-2b-pt-res-canonical/layer_12/width_16k/canonical")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="sae: .* does not exist"):
        interp.load_sae(str(tmp_path / "nowhere"))
    two = make_run(tmp_path, {"tsae": sae, "other": sae})
    with pytest.raises(ConfigError, match="other, tsae"):
        interp.load_sae(str(two))
    running = make_run(tmp_path, {"sae": sae}, done=False)
    with pytest.raises(ConfigError, match="this run is"):
        interp.load_sae(str(running))
    damaged = make_run(tmp_path, {"sae": sae})
    (damaged / "sae" / "sae_weights.safetensors").write_bytes(b"x" * 10)
    with pytest.raises(ConfigError, match="intact run"):
        interp.load_sae(str(damaged))
    m = json.loads((damaged / "manifest.json").read_text())
    assert m["status"] == "done"


def test_probe_configs_check_sae_specs_before_loading(tmp_path):
    from interp.config import build_config
    from interp_probes.atoms import AtomsConfig
    from interp_probes.sae_falsification import SaeFalsificationConfig
    from interp_probes.self_interp import SelfInterpConfig

    for cls in (AtomsConfig, SaeFalsificationConfig, SelfInterpConfig):
        with pytest.raises(ConfigError, match="sae.source") as e:
            build_config(cls, {"sae.source": str(tmp_path / "nowhere")})
        assert e.value.field == "sae.source"
