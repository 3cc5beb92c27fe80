"""interp.sae: training loop gradients, L0 calibration, input-transform folding, SAELens round trips,
the cache, and the activation buffer (position 0 and padding excluded, early stop). The SAELens trainer
(a benchmark baseline) and the learning-rate schedule: test_sae_train.py."""

from __future__ import annotations

import json

import pytest
import torch
from sae_data import sparse_data

from interp.errors import ConfigError
from interp.sae import (
    InputTransform,
    SAETrainConfig,
    build_sae,
    cached_sae,
    calibrate_l0,
    collect_activations,
    decode,
    encode,
    fold_input_transform,
    load_sae,
    pre_acts,
    roundtrip_check,
    sae_site,
    save_sae,
    train_sae,
)
from interp.sae.kernel import _SAEForward
from interp.sites import KINDS, Site


def small_cfg(arch, **kw):
    base = dict(architecture=arch, d_sae=32, steps=60, batch=128, lr=3e-3, target_l0=3.0, k=3,
                calib_tokens=1024, controller_every=10)
    base.update(kw)
    return SAETrainConfig(**base)


@pytest.mark.parametrize("arch", ["jumprelu", "standard", "topk"])
def test_fused_forward_gradients_match_autograd_and_sparse_path(arch):
    torch.manual_seed(0)
    B, H, d = 64, 12, 40
    x = torch.randn(B, H).double()
    P = [torch.randn(H, d).double() * 0.3, torch.randn(d).double() * 0.1, torch.randn(d, H).double(),
         torch.randn(H).double() * 0.1, torch.full((d,), -0.3).double()]
    grads = []
    for sparse_below in (0.0, 1.0):
        ps = [p.clone().requires_grad_(True) for p in P]
        x_hat, l0, pen, _ = _SAEForward.apply(x, *ps, arch, 4, 0.5, sparse_below)
        (((x_hat - x) ** 2).sum() + 0.3 * pen.sum()).backward()
        grads.append([p.grad for p in ps])
    ref = [p.clone().requires_grad_(True) for p in P]
    pre = (x - ref[3]) @ ref[0] + ref[1]
    if arch == "jumprelu":
        gate = (pre > ref[4].exp()).double()
    elif arch == "standard":
        gate = (pre > 0).double()
    else:
        gate = torch.zeros_like(pre).scatter_(-1, pre.topk(4, -1).indices, 1.0) * (pre > 0)
    a = pre * gate
    loss = ((a @ ref[2] + ref[3] - x) ** 2).sum() + (0.3 * a.sum() if arch == "standard" else 0)
    loss.backward()
    for i in range(4):  # W_enc, b_enc, W_dec, b_dec: the straight-through gate is the identity there
        assert torch.allclose(grads[0][i], ref[i].grad, atol=1e-9), (arch, i)
        assert torch.allclose(grads[1][i], ref[i].grad, atol=1e-9), (arch, i)
    if arch == "jumprelu":  # the threshold gets JumpReLU's pseudo-derivative, the same on both paths
        assert torch.allclose(grads[0][4], grads[1][4], atol=1e-9)
        assert grads[0][4].abs().sum() > 0


@pytest.mark.parametrize("arch", ["jumprelu", "standard"])
def test_tied_encoder_is_the_decoder_transpose_with_both_gradients(arch):
    """tied: the forward reads W_dec^T and the decoder receives the encoder's gradient too (autograd reference
    in float64); a trained and calibrated SAE keeps W_enc == W_dec^T exactly, also through resampling; the
    switch enters the cache key only when on, and SAELens's trainer refuses it."""
    from interp.sae.kernel import _ToolkitSAE

    torch.manual_seed(3)
    x = torch.randn(64, 12).double()
    cfg = small_cfg(arch, d_sae=40, tied=True, jumprelu_init_threshold=0.3)
    sae = _ToolkitSAE(12, cfg, torch.randn(12).double() * 0.1, torch.Generator().manual_seed(0), "cpu", torch.float64)
    assert sae.W_enc is None and sum(p.numel() for p in sae.parameters()) == 40 * 12 + 40 + 12 + 40
    x_hat, _, pen, _ = sae(x, sparse_below=0.0)
    (((x_hat - x) ** 2).sum() + 0.3 * pen.sum()).backward()
    W_dec = sae.W_dec.detach().clone().requires_grad_(True)
    pre = (x - sae.b_dec.detach()) @ W_dec.T + sae.b_enc.detach()
    gate = (pre > sae.log_threshold.detach().exp()) if arch == "jumprelu" else (pre > 0)
    a = pre * gate.double()
    loss = ((a @ W_dec + sae.b_dec.detach() - x) ** 2).sum() + (0.3 * a.sum() if arch == "standard" else 0)
    (g_ref,) = torch.autograd.grad(loss, W_dec)
    assert torch.allclose(sae.W_dec.grad, g_ref, atol=1e-9)
    untied_dec = torch.autograd.grad((((a.detach() @ W_dec) - x) ** 2).sum(), W_dec)[0]
    assert not torch.allclose(g_ref, untied_dec, atol=1e-3)  # the encoder's share is really there

    data = sparse_data(n=2000)
    trained = train_sae(data, small_cfg(arch, tied=True, resample_every=10, resample_below=0.5))
    assert trained.cfg.metadata.interp_training["resampled"] > 0
    assert torch.equal(trained.W_enc, trained.W_dec.T)
    assert "tied" not in small_cfg(arch).key() and small_cfg(arch, tied=True).key()["tied"] is True
    with pytest.raises(ConfigError, match="tied"):
        small_cfg(arch, tied=True, trainer="saelens").validate()


@pytest.mark.parametrize("arch", ["jumprelu", "standard", "topk"])
def test_train_returns_calibrated_saelens_sae(arch):
    from sae_lens import JumpReLUSAE, StandardSAE, TopKSAE

    x = sparse_data()
    sae = train_sae(x, small_cfg(arch), metadata={"hook_name": "blocks.1.hook_resid_post"})
    assert isinstance(sae, {"jumprelu": JumpReLUSAE, "standard": StandardSAE, "topk": TopKSAE}[arch])
    info = sae.cfg.metadata.interp_training
    assert info["config"]["architecture"] == arch and len(info["history"]) == 6
    json.dumps(info)  # JSON-able: it goes into cfg.json
    l0 = float((encode(sae, x) > 0).sum(-1).float().mean())
    if arch == "topk":
        assert l0 <= 3.0 + 1e-6
    else:
        assert abs(info["l0_train_calibrated"] - 3.0) <= 0.05 * 3.0 + 1e-6, info["l0_train_calibrated"]
        assert abs(l0 - 3.0) <= 0.25 * 3.0, l0  # the whole buffer, not just the calibration tokens
    recon = decode(sae, encode(sae, x))
    r2 = 1 - ((recon - x) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()
    assert r2 > 0.3, f"{arch}: R2 {float(r2):.3f} after training"
    assert sae_site(sae) == Site("resid_post", 1)


def test_training_is_deterministic():
    x = sparse_data(n=1000)
    a = train_sae(x, small_cfg("jumprelu", steps=15))
    b = train_sae(x, small_cfg("jumprelu", steps=15))
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k


def test_l0_controller_moves_coefficient_towards_target():
    x = sparse_data()
    sae = train_sae(x, small_cfg("jumprelu", steps=100, calibrate_l0=False, target_l0=2.0))
    hist = sae.cfg.metadata.interp_training["history"]
    assert hist[-1]["coeff"] != hist[0]["coeff"]
    assert abs(hist[-1]["l0_ema"] - 2.0) < abs(hist[0]["l0_ema"] - 2.0), hist


@pytest.mark.parametrize("arch", ["jumprelu", "standard"])
def test_data_started_gates_begin_at_the_target_l0(arch):
    """init_sparsity="data": the first steps' L0 is near target_l0 (fixed gates start far from it); fixed-gate
    configs keep their cache keys; the SAELens trainer refuses it."""
    g = torch.Generator().manual_seed(1)
    x = sparse_data(n=4000, d_in=32, n_atoms=256, k=3) * (1 + 4 * torch.rand(4000, 1, generator=g))
    kw = dict(d_sae=256, steps=40, target_l0=3.0, lr=3e-3, calibrate_l0=False, controller_every=5)
    first = {}
    for init in ("fixed", "data"):
        sae = train_sae(x, small_cfg(arch, init_sparsity=init, **kw))
        first[init] = sae.cfg.metadata.interp_training["history"][0]["l0_ema"]
    assert abs(first["data"] - 3.0) < 1.5, first
    assert abs(first["fixed"] - 3.0) > 2 * abs(first["data"] - 3.0), first
    assert "init_sparsity" not in small_cfg(arch).key()
    assert small_cfg(arch, init_sparsity="data").key()["init_sparsity"] == "data"
    with pytest.raises(ConfigError, match="init_sparsity"):
        small_cfg(arch, init_sparsity="data", trainer="saelens").validate()


@pytest.mark.parametrize("arch", ["jumprelu", "standard"])
def test_calibrate_l0_folds_one_scalar(arch):
    torch.manual_seed(1)
    H, d = 8, 64
    state = {"W_enc": torch.randn(H, d), "b_enc": torch.zeros(d), "W_dec": torch.randn(d, H), "b_dec": torch.zeros(H)}
    if arch == "jumprelu":
        state["threshold"] = torch.full((d,), 0.1)
    sae = build_sae(arch, state)
    x = torch.randn(2048, H)
    before = {k: v.clone() for k, v in sae.state_dict().items()}
    value, l0 = calibrate_l0(sae, x, target=5.0, tol=0.05)
    assert abs(l0 - 5.0) <= 0.25
    assert abs(float((encode(sae, x) > 0).sum(-1).float().mean()) - l0) < 1e-6
    after = sae.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed == (["threshold"] if arch == "jumprelu" else ["b_enc"])
    if arch == "jumprelu":
        assert torch.allclose(after["threshold"], before["threshold"] * value)


@pytest.mark.parametrize("arch", ["jumprelu", "standard", "topk"])
def test_fold_input_transform_gives_the_same_codes_on_raw_inputs(arch):
    torch.manual_seed(2)
    H, d = 10, 30
    A = torch.randn(H, H) + 3 * torch.eye(H)
    t = InputTransform(A, torch.linalg.inv(A), shift=torch.randn(H))
    state = {"W_enc": torch.randn(H, d), "b_enc": torch.randn(d) * 0.1, "W_dec": torch.randn(d, H),
             "b_dec": torch.randn(H)}
    if arch == "jumprelu":
        state["threshold"] = torch.full((d,), 0.2)
    sae_z = build_sae(arch, state, apply_b_dec_to_input=True, k=5)
    raw = fold_input_transform(sae_z, t)
    x = torch.randn(500, H)
    z = t.apply(x)
    assert torch.allclose(encode(raw, x), encode(sae_z, z), atol=1e-4)
    x_hat = decode(raw, encode(raw, x))
    z_hat = decode(sae_z, encode(sae_z, z))
    assert torch.allclose(x_hat, (z_hat @ t.W_inv) + t.shift, atol=1e-3)
    assert not raw.cfg.apply_b_dec_to_input


@pytest.mark.parametrize("arch", ["jumprelu", "standard", "topk"])
def test_saelens_roundtrip_reproduces_encodings(arch, tmp_path):
    from sae_lens import SAE

    x = sparse_data(n=2000)
    H = x.shape[1]
    A = torch.eye(H) * 2.0
    sae = train_sae(x, small_cfg(arch, steps=20), metadata={"hook_name": "blocks.0.hook_resid_post", "model_name": "t"},
                    transform=InputTransform(A, torch.eye(H) / 2.0))
    save_sae(sae, tmp_path / "sae")
    assert sorted(p.name for p in (tmp_path / "sae").iterdir()) == ["cfg.json", "sae_weights.safetensors",
                                                                     "sparsity.safetensors"]
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert cfg["architecture"] == arch and cfg["metadata"]["hook_name"] == "blocks.0.hook_resid_post"
    assert cfg["normalize_activations"] == "none"
    direct = SAE.load_from_disk(str(tmp_path / "sae"))
    assert torch.allclose(direct.encode(x), encode(sae, x), atol=1e-5)
    rt = roundtrip_check(sae, x, tmp_path / "sae")
    assert rt["max_rel_err"] <= 1e-5 and rt["support_mismatch"] == 0, rt
    loaded = load_sae(tmp_path / "sae")
    assert sae_site(loaded) == Site("resid_post", 0)
    assert loaded.cfg.metadata.interp_training["config"]["architecture"] == arch


def test_cached_sae_trains_once(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))

    class Info:
        name, weights_sha256, bos_id = "m", "abc", None

    class FakeModel:
        info = Info()
        bridge = None

    calls = []

    def data():
        calls.append(1)
        return sparse_data(n=1000)

    site = Site("resid_post", 2)
    cfg = small_cfg("jumprelu", steps=10)
    a, hit_a = cached_sae(FakeModel(), site, cfg, data, data_key="d1")
    b, hit_b = cached_sae(FakeModel(), site, cfg, data, data_key="d1")
    c, hit_c = cached_sae(FakeModel(), site, cfg, data, data_key="d2")
    assert (hit_a, hit_b, hit_c) == (False, True, False) and len(calls) == 2
    assert torch.equal(a.W_enc, b.W_enc)
    assert b.cfg.metadata.hook_name == "blocks.2.hook_resid_post"
    assert len(list((tmp_path / "saes").iterdir())) == 2


def test_config_validation():
    with pytest.raises(ConfigError, match="architecture"):
        SAETrainConfig(architecture="gated").validate()
    with pytest.raises(ConfigError, match="k="):
        SAETrainConfig(architecture="topk", d_sae=8, k=9).validate()
    with pytest.raises(ConfigError, match="target_l0"):
        SAETrainConfig(target_l0=None).validate()


def test_site_from_tl_name_roundtrips():
    for kind in KINDS:
        s = Site(kind, None if kind in ("embed", "final", "logits") else 3)
        assert Site.from_tl_name(s.tl_name) == s
    with pytest.raises(ValueError):
        Site.from_tl_name("blocks.3.hook_nothing")


def test_collect_activations_excludes_position0_and_padding(tiny_model):
    from interp import run_with_cache

    ids = torch.randint(10, 1000, (3, 12))
    am = torch.ones_like(ids)
    am[1, 8:] = 0  # padding at the end of row 1
    s0, s1 = Site("resid_post", 0), Site("resid_post", 1)
    buf = collect_activations(tiny_model, [{"input_ids": ids, "attention_mask": am}], {s0: 1000, s1: 7}, skip_first=1)
    n_real = int(am.sum()) - 3
    assert buf.acts[s0].shape == (n_real, 64)
    assert buf.acts[s1].shape == (7, 64)
    assert int(buf.pos[s0].min()) == 1
    assert not ((buf.seq[s0] == 1) & (buf.pos[s0] >= 8)).any()
    _, cache = run_with_cache(tiny_model, ids, am, [s0])
    ref = cache[s0][am.bool() & (torch.arange(12) > 0)]
    assert torch.allclose(buf.acts[s0], ref, atol=1e-5)


def test_collect_activations_stops_after_deepest_needed_site(tiny_model):
    calls = []
    s0, s1 = Site("resid_post", 0), Site("resid_post", 1)
    batches = [{"input_ids": torch.randint(10, 1000, (2, 8))} for _ in range(4)]

    def spy(x):
        calls.append(1)

    with tiny_model.hooks([(s1, spy)]):
        buf = collect_activations(tiny_model, batches, {s0: 40, s1: 10}, skip_first=1)
    # s1 is full after the first batch (14 tokens >= 10), so later batches stop at layer 0
    assert len(calls) == 1
    assert buf.acts[s0].shape[0] == 40 and buf.acts[s1].shape[0] == 10


def test_collect_stacked_holds_the_same_tokens_as_collect_activations(tiny_model):
    from interp.sae import collect_stacked

    ids = torch.randint(10, 1000, (3, 12))
    am = torch.ones_like(ids)
    am[1, 8:] = 0
    groups = [[Site("mlp_in", 0), Site("mlp_in", 1)], [Site("mlp_out", 0), Site("mlp_out", 1)]]
    batches = [{"input_ids": ids[:2], "attention_mask": am[:2]}, {"input_ids": ids[2:], "attention_mask": am[2:]}]
    n = int(am.sum()) - 3 - 2  # all kept tokens but the last two: the second batch is cut
    X, Y = collect_stacked(tiny_model, batches, groups, n, skip_first=1)
    ref = collect_activations(tiny_model, batches, {s: n for g in groups for s in g}, skip_first=1).acts
    assert X.shape == (n, 2, 64) and Y.shape == (n, 2, 64)
    for j in range(2):
        assert torch.equal(X[:, j], ref[groups[0][j]]) and torch.equal(Y[:, j], ref[groups[1][j]])
    Xb, _ = collect_stacked(tiny_model, batches, groups, n, skip_first=1, dtype=torch.bfloat16)
    assert Xb.dtype == torch.bfloat16 and torch.equal(Xb, X.to(torch.bfloat16))
    kept = int(am.sum()) - 3
    with pytest.raises(ValueError, match=f"held {kept} kept tokens, {kept + 1} asked"):
        collect_stacked(tiny_model, batches, groups, kept + 1, skip_first=1)


def test_norm_outliers_are_dropped_relative_to_the_median(tiny_model):
    s0 = Site("resid_post", 0)
    ids = torch.randint(10, 1000, (4, 16))
    buf = collect_activations(tiny_model, [{"input_ids": ids}], {s0: 10_000}, skip_first=0, norm_outlier_factor=1.0)
    assert buf.n_outliers[s0] > 0
    assert buf.acts[s0].shape[0] + buf.n_outliers[s0] == buf.n_seen[s0] == 64


def test_pre_acts_matches_saelens_hidden_pre():
    torch.manual_seed(3)
    H, d = 6, 20
    sae = build_sae("standard", {"W_enc": torch.randn(H, d), "b_enc": torch.randn(d), "W_dec": torch.randn(d, H),
                                 "b_dec": torch.randn(H)}, apply_b_dec_to_input=True)
    x = torch.randn(50, H)
    assert torch.allclose(torch.relu(pre_acts(sae, x)), encode(sae, x), atol=1e-6)
