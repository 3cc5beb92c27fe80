"""Atoms stages on synthetic data: whitening, angles, R², support, local coherence, q*, recovery, config."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from interp.config import build_config
from interp.errors import ConfigError
from interp_probes.atoms import AtomsConfig, parse_hook
from interp_probes.atoms.metric import estimate_metric, pair_angles, sample_pairs, whitened_norm_sq, whitening
from interp_probes.atoms.synthetic import atom_match, make_synthetic, recovery
from interp_probes.atoms.units import aip_gram, local_coherence, neuron_codes, q_star, r2, support_mask, unique_frac


def anisotropic(n=6000, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    scales = torch.logspace(-0.5, 1, d)
    x = torch.randn(n, d, generator=g) * scales
    return x + 5 * torch.ones(d)  # a shared offset: Euclidean angles far below 90


def test_whitening_inverts_the_regularised_moment():
    x = anisotropic()
    m = estimate_metric(x, ridge=1e-4)
    for w in (m.uncentered, m.centered):
        d = w.moment.shape[0]
        S = torch.linalg.inv(w.moment + w.ridge_lambda * torch.eye(d, dtype=torch.float64))
        assert torch.allclose(w.W @ w.W, S, rtol=1e-6, atol=1e-9)
        assert torch.allclose(w.W @ w.W_inv, torch.eye(d, dtype=torch.float64), atol=1e-8)
    assert abs(whitened_norm_sq(x, m.uncentered) - x.shape[1]) < 0.01 * x.shape[1]
    assert torch.allclose(m.centered.shift, x.double().mean(0))
    assert m.uncentered.condition > 1


def test_ridge_scales_with_the_trace():
    M = torch.diag(torch.tensor([4.0, 2.0, 0.0], dtype=torch.float64))
    w = whitening(M, ridge=0.1)
    assert w.ridge_lambda == pytest.approx(0.1 * 6 / 3)
    assert torch.isfinite(w.W).all()


def test_aip_recentres_angles_at_90():
    x = anisotropic()
    train, held = x[:5000], x[5000:]
    m = estimate_metric(train, ridge=1e-4)
    seq = np.arange(len(held))
    i, j = sample_pairs(seq, 3000, np.random.default_rng(0))
    ang = pair_angles(held, i, j, m)
    assert abs(ang["euclid_deg"].mean() - 90) > 20
    assert abs(ang["aip_deg"].mean() - 90) < 2
    assert abs(ang["aip_centered_deg"].mean() - 90) < 2


def test_pairs_come_from_different_sequences():
    seq = np.repeat(np.arange(5), 10)
    i, j = sample_pairs(seq, 500, np.random.default_rng(1))
    assert len(i) == 500 and (seq[i] != seq[j]).all()
    with pytest.raises(ValueError):
        sample_pairs(np.zeros(10, dtype=int), 5, np.random.default_rng(0))


def test_r2_geometries():
    x = anisotropic(n=500)
    m = estimate_metric(x, 1e-4)
    mean = x.mean(0)
    assert r2(x, x, mean, m.uncentered) == pytest.approx(1.0)
    assert r2(x, mean.expand_as(x), mean, None) == pytest.approx(0.0, abs=1e-9)
    # an error along the smallest-variance direction costs much more under the AIP than under Euclid
    noisy = x.clone()
    noisy[:, 0] += 0.1
    assert r2(x, noisy, mean, m.uncentered) < r2(x, noisy, mean, None)


def test_support_rule_is_relative_to_the_norm():
    m = torch.tensor([[1000.0, 0.0], [1.0, 1.0]])
    codes = torch.tensor([[1e-4, 2.0], [1e-7, 0.5]])
    assert support_mask(codes, m).tolist() == [[False, True], [False, True]]


def test_local_coherence_uses_coactive_units_only():
    gram = torch.tensor([[0.0, 0.9, 0.1, 0.0], [0.9, 0.0, 0.2, 0.0], [0.1, 0.2, 0.0, 0.3], [0.0, 0.0, 0.3, 0.0]])
    codes = torch.tensor([[1.0, 0.0, 2.0, 0.0],   # {0, 2}: 0.1
                          [1.0, 1.0, 0.0, 0.0],   # {0, 1}: 0.9
                          [0.0, 0.0, 0.0, 3.0],   # K = 1: 0
                          [0.0, 0.0, 0.0, 0.0],   # K = 0: 0
                          [1.0, 0.5, 3.0, 2.0]])  # top-2 by |a| with max_k=2: {2, 3}: 0.3
    sup = codes != 0
    mu = local_coherence(codes, sup, gram, max_k=256)
    assert mu[:4].tolist() == pytest.approx([0.1, 0.9, 0.0, 0.0])
    assert float(mu[4]) == pytest.approx(0.9)
    assert float(local_coherence(codes[4:], sup[4:], gram, max_k=2)[0]) == pytest.approx(0.3)


def test_q_star_quantile_rule():
    K = np.array([1, 1, 2, 2, 3, 3, 3, 10, 10, 0])
    mu = np.array([0.0, 0.0, 0.2, 0.5, 0.1, 0.1, 0.3, 0.05, 0.06, 0.0])
    q, curve = q_star(K, mu, levels=9)  # samples with K >= 1 only (9 of them)
    # sorted K: 1 1 2 2 3 3 3 10 10; sorted mu: 0 0 .05 .06 .1 .1 .2 .3 .5 -> holds up to the 6th level
    assert q == pytest.approx(6 / 9)
    assert curve["K_q"].iloc[0] == 1 and curve["bound"].iloc[0] == 1
    assert unique_frac(K, mu) == pytest.approx(np.mean(mu[K >= 1] < 1 / (2 * K[K >= 1] - 1)))
    assert q_star(np.zeros(3, dtype=int), np.zeros(3), 10)[0] == 0.0


def test_neuron_coherence_is_the_largest_partial_correlation():
    x = anisotropic(n=3000, d=6)
    x[:, 1] += 0.8 * x[:, 0]
    m = estimate_metric(x, 1e-6)
    w = m.uncentered
    uc = neuron_codes(x[:50])
    gram = aip_gram(uc.decoder, w)
    S = torch.linalg.inv(w.moment + w.ridge_lambda * torch.eye(6, dtype=torch.float64))
    partial = (S / torch.sqrt(torch.outer(S.diag(), S.diag()))).abs()
    partial.fill_diagonal_(0)
    mu = local_coherence(uc.codes, support_mask(uc.codes, x[:50]), gram)
    assert torch.allclose(mu, torch.full_like(mu, float(partial.max())), atol=1e-5)
    K = support_mask(uc.codes, x[:50]).sum(-1).numpy()
    assert (K == 6).all() and q_star(K, mu.numpy())[0] == 0.0


def test_synthetic_atoms_are_recovered_by_the_true_dictionary():
    g = torch.Generator().manual_seed(0)
    syn = make_synthetic(dim=32, n_atoms=64, k=3, n_train=3000, n_heldout=300, gen=g)
    assert syn.train.shape == (3000, 32) and syn.atoms.shape == (64, 32)
    w = estimate_metric(syn.train, 1e-4).uncentered
    best = atom_match(syn.atoms, syn.atoms * 2.0, w)
    assert recovery(best) == 1.0
    assert recovery(atom_match(syn.atoms, torch.randn(64, 32, generator=g), w)) < 0.1
    # the offset is 3x the median norm of the mixed part: Euclidean angles are small
    norms = (syn.train - syn.offset).norm(dim=-1)
    assert float(syn.offset.norm() / norms.median()) == pytest.approx(3.0, rel=0.01)


def test_tied_synthetic_tsae_generalises_where_untied_memorises():
    """The synthetic TSAE's recipe (data-started decoder and gates, resampling) with ~1.4 samples per encoder weight
    for each latent (H_s 128, N* 256, 15k samples, K 3), as at the default size: untied, the encoder learns the
    training samples' interference (train-held R²_AIP gap ~0.014 on seeds 0-3, held out 0.960-0.966); tied to the
    decoder (synth_tied, the paper's W_enc = D^T S~), the gap is ~0.002 and held out 0.971-0.975."""
    from interp.sae import SAETrainConfig, decode, encode, train_sae

    gen = torch.Generator().manual_seed(0)
    syn = make_synthetic(dim=128, n_atoms=256, k=3, n_train=15_000, n_heldout=3000, gen=gen)
    m = estimate_metric(syn.train, 1e-4)
    w = m.uncentered
    got = {}
    for tied in (False, True):
        cfg = SAETrainConfig(architecture="jumprelu", d_sae=256, steps=1000, batch=512, lr=3e-3, target_l0=3.0,
                             jumprelu_init_threshold=3.0, init_decoder="data", init_sparsity="data",
                             resample_every=50, resample_below=1e-3, calib_tokens=4096, tied=tied)
        sae = train_sae(syn.train, cfg, transform=w.transform())
        fit = [r2(x, decode(sae, encode(sae, x)), m.mean, w) for x in (syn.train[:3000], syn.heldout)]
        got[tied] = {"train": fit[0], "held": fit[1], "gap": fit[0] - fit[1]}
    assert got[True]["gap"] < 0.5 * got[False]["gap"], got
    assert got[True]["held"] > got[False]["held"] + 0.003, got


def test_config_sizes_and_validation():
    quick = build_config(AtomsConfig, {"size": "quick"})
    assert quick.n_tokens == 16384 and quick.grid_d_mults == () and quick.synth_d_fracs == (1.0,)
    micro = build_config(AtomsConfig, {"size": "micro"})
    assert micro.grid_d_mults == (2.0,) and micro.synth_dim == 64 and micro.angle_hooks == ()
    default = build_config(AtomsConfig, {})
    smol = default.at_depth(30)  # the depth-relative defaults on SmolLM2's 30 layers: the layers they used to name
    assert smol.site == parse_hook("resid_post.6") and smol.angle_sites[0].layer == 14
    assert smol.hook == "blocks.6.hook_resid_post" and default.at_depth(18).site.layer == 4
    for bad in ({"hook": "blocks.6.attn.hook_pattern"}, {"drop_positions": [1]}, {"grid_n_fracs": [2.0]},
                {"grid_d_mults": []}, {"heldout_frac": 0.0}, {"hook": "nonsense"}):
        with pytest.raises(ConfigError):
            build_config(AtomsConfig, bad)
    with pytest.raises(ConfigError):
        build_config(AtomsConfig, {"hook": "blocks.6.hook_resid_post"}).validate_for_model(6)
    default.at_depth(6).validate_for_model(6)  # resid_post@0.2 of a 6-layer model is layer 1


def test_config_import_is_torch_free():
    code = "import sys, interp_probes.atoms; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
