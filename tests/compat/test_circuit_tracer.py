"""circuit-tracer 0.5.0 itself, in its side environment (circuit_tracer_env.py: a venv in the interp cache, built
once, reused; skipped with the reason where no package index is reachable): a JumpReLU set saved here loads there
with no edit, and on smollm2-135m, one prompt and a small JumpReLU set, circuit-tracer's graph is circuits' default
graph node for node. The full comparison (both embedded models, three prompts, trained JumpReLU and TopK sets) is
circuits' acceptance (tests/acceptance/test_circuits.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import circuit_tracer_env as ce  # noqa: E402

from interp.sae import save_transcoders  # noqa: E402
from interp.sae.transcoder import Transcoders, TranscoderSpec  # noqa: E402
from interp.sites import Site  # noqa: E402


def _side():
    try:
        return ce.side_python()
    except ce.Unavailable as e:
        pytest.skip(str(e))


def _random_set(L: int, d: int, F: int, activation: str = "jumprelu", seed: int = 0) -> Transcoders:
    g = torch.Generator().manual_seed(seed)
    tc = Transcoders(TranscoderSpec(kind="plt", activation=activation, n_layers=L, d_in=d, d_out=d,
                                    d_transcoder=F, k=4))
    with torch.no_grad():
        tc.W_enc.copy_(torch.randn(L, F, d, generator=g) / d**0.5)
        tc.b_enc.copy_(0.1 * torch.randn(L, F, generator=g))
        tc.threshold.copy_(torch.rand(L, F, generator=g))
        for layer in range(L):
            tc.W_dec[layer].copy_(torch.randn(F, 1, d, generator=g) / F**0.5)
        tc.b_dec.copy_(0.1 * torch.randn(L, d, generator=g))
    tc.meta = {"model": "toy"}
    return tc.eval().requires_grad_(False)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_a_jumprelu_set_saved_here_loads_in_circuit_tracer(tmp_path):
    """Saved by save_transcoders and not touched since, the set loads through both of circuit-tracer 0.5's loading
    routes (its cache route for an absolute directory, and load_transcoders(config.yaml)) as JumpReLU transcoders
    with the same weights and thresholds. The control: a TopK set loads there too, but as ReLU, which is why its
    save warns."""
    _side()
    tc = _random_set(3, 16, 24)
    path = save_transcoders(tc, tmp_path / "jumprelu")
    got = ce.run_side(None, path, [], tmp_path / "w1", load_only=True)
    loaded = got["result"]["loaded"]
    assert (loaded["class"], loaded["activation"], loaded["n_layers"], loaded["d_transcoder"]) == \
        ("TranscoderSet", "JumpReLU", 3, 24)
    assert loaded["hooks"] == ["mlp.hook_in", "hook_mlp_out"] and loaded["routes_agree"]
    w = got["loaded"]
    for layer in range(3):
        assert torch.equal(w[f"{layer}.W_enc"], tc.W_enc[layer])
        assert torch.equal(w[f"{layer}.W_dec"], tc.W_dec[layer][:, 0])
        assert torch.equal(w[f"{layer}.b_enc"], tc.b_enc[layer]) and torch.equal(w[f"{layer}.b_dec"], tc.b_dec[layer])
        assert torch.equal(w[f"{layer}.threshold"], tc.threshold[layer])
    with pytest.warns(UserWarning, match="cannot express TopK"):
        topk = save_transcoders(_random_set(3, 16, 24, "topk"), tmp_path / "topk")
    assert ce.run_side(None, topk, [], tmp_path / "w2", load_only=True)["result"]["loaded"]["activation"] == "relu"


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_default_graph_is_circuit_tracers_node_for_node(model, tmp_path):
    """smollm2-135m, "The capital of France is", a JumpReLU set of 64 random features a layer (thresholds set so
    about 6 fire a token): every edge block within 1e-5 relative, the same features, pruned nodes and edges (up to
    ties at the pruning thresholds: circuit_tracer_env.TIE_TOL), and scores within 1e-6. With bos_error it is not
    circuit-tracer's graph (the control): its first position's error nodes take influence, which moves the
    features chosen for rows and the scores."""
    from interp_probes.circuits.graph import prepare
    from interp_probes.circuits.probe import prompt_ids

    _side()
    L, d, F = model.info.n_layers, model.info.d_model, 64
    tc = _random_set(L, d, F, seed=1)
    ids = prompt_ids(model, "The capital of France is")
    p = prepare(model, tc, ids)  # thresholds: each layer's 90th percentile of pre-activations on this prompt
    with torch.no_grad():
        for layer in range(L):
            pre = tc.pre(layer, p.fz.sites[Site("mlp_in", layer)][1:].float())
            tc.threshold[layer] = pre.quantile(0.9, dim=0).clamp_min(0)
    tc.meta = {"model": "smollm2-135m"}
    path = save_transcoders(tc, tmp_path / "set")
    rows, result = ce.cross_check(model, "smollm2-135m", tc, path, [ids[0].tolist()], tmp_path / "w",
                                  max_feature_nodes=256, batch_size=32)
    gated = [r for r in rows if r["gated"]]
    assert len(gated) == 1 and gated[0]["n_feat"] > 100
    assert not ce.failures(gated[0]), ce.failures(gated[0])
    bos = next(r for r in rows if r["bos_error"])  # the control: the other convention is not the reference's graph
    assert abs(bos["replacement_score"] - bos["replacement_score_ct"]) > 1e-3 and ce.failures(bos)
