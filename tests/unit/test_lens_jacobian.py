"""The Jacobian lens fit (interp.lens.jacobian) against closed forms and against an independent implementation of
the reference estimator written here from its definition: a plain loop of one backward pass per output dimension
over the whole prompt, no replication, no batching, no prefix cache."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from interp.errors import ConfigError
from interp.lens import JacobianLens, fit_jacobian_lens, merge_lenses

# -- tiny models of the protocol (n_layers, d_model, layers, forward) ---------------------------------------------


class Linear(nn.Module):
    """h + 0.1 W h at every position: no attention."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Linear(d, d, bias=False)

    def forward(self, h):
        return h + 0.1 * self.w(h)


class CumSum(nn.Module):
    """A causal block whose output at p is the sum of its inputs at positions <= p."""

    def forward(self, h):
        return h.cumsum(dim=-2)


class Stack(nn.Module):
    def __init__(self, blocks, d: int, vocab: int = 32, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(vocab, d)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(vocab, d, generator=g))
            for b in blocks:
                if isinstance(b, Linear):
                    b.w.weight.copy_(torch.randn(d, d, generator=g))
        self.layers = nn.ModuleList(blocks)
        self.n_layers, self.d_model = len(blocks), d

    def forward(self, input_ids):
        h = self.embed(input_ids)
        for b in self.layers:
            h = b(h)
        return h


def prompts(n: int, length: int, vocab: int = 32, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (length + i,), generator=g) for i in range(n)]


def test_linear_blocks_give_identity_plus_w():
    d = 8
    model = Stack([Linear(d) for _ in range(4)], d)
    lens = fit_jacobian_lens(model, prompts(2, 24), batch=3, progress=False)
    assert lens.source_layers == [0, 1, 2] and lens.target_layer == 3
    eye = torch.eye(d)
    want = eye.clone()
    for layer in (2, 1, 0):  # J_l = prod over the blocks above l of (I + 0.1 W)
        want = want @ (eye + 0.1 * model.layers[layer + 1].w.weight.detach())
        err = (lens.J[layer] - want).abs().max().item()
        assert err < 1e-5, f"J_{layer} differs from the product of (I + W) above it by {err:.2e}"


@pytest.mark.parametrize("skip_first,length", [(16, 30), (3, 11), (0, 7)])
def test_cumulative_sum_block_gives_mean_count_of_later_positions(skip_first, length):
    d = 6
    model = Stack([Linear(d), CumSum()], d)
    lens = fit_jacobian_lens(model, prompts(1, length), skip_first=skip_first, batch=4, progress=False)
    n_valid = length - 1 - skip_first
    want = (n_valid + 1) / 2 * torch.eye(d)
    err = (lens.J[0] - want).abs().max().item()
    assert err < 1e-5, f"J = {lens.J[0].diagonal()[:3].tolist()}..., want {(n_valid + 1) / 2} I (err {err:.2e})"


def test_all_prompts_equal_the_merge_of_per_prompt_fits():
    d = 8
    model = Stack([Linear(d), CumSum(), Linear(d)], d)
    ps = prompts(3, 20)
    whole = fit_jacobian_lens(model, ps, skip_first=4, batch=5, progress=False)
    parts = [fit_jacobian_lens(model, [p], skip_first=4, batch=5, progress=False) for p in ps]
    merged = merge_lenses([merge_lenses(parts[:2]), parts[2]])
    assert merged.n_prompts == whole.n_prompts == 3
    for layer in whole.source_layers:
        rel = ((merged.J[layer] - whole.J[layer]).norm() / whole.J[layer].norm()).item()
        assert rel < 1e-6, f"layer {layer}: merge vs whole-set fit rel {rel:.2e}"
    unrelated = fit_jacobian_lens(model, prompts(1, 20, seed=9), skip_first=4, batch=5, progress=False)
    assert (unrelated.J[0] - whole.J[0]).norm() > 1e-3  # the comparison can fail


def test_killed_fit_resumes_bit_for_bit(tmp_path, monkeypatch):
    import interp.lens.jacobian as jac

    d = 8
    model = Stack([Linear(d), CumSum(), Linear(d)], d)
    ps = prompts(5, 14)
    ps.insert(2, torch.arange(5))  # too short: skipped, and not re-counted on resume
    whole = fit_jacobian_lens(model, ps, skip_first=4, batch=3, progress=False)
    ckpt = tmp_path / "fit.safetensors"
    real, calls = jac.jacobian_for_prompt, []

    def dies_on_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed while the third usable prompt runs
        return real(*a, **k)

    monkeypatch.setattr(jac, "jacobian_for_prompt", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        fit_jacobian_lens(model, ps, skip_first=4, batch=3, checkpoint=ckpt, progress=False)
    monkeypatch.setattr(jac, "jacobian_for_prompt", real)
    assert ckpt.is_file()
    resumed = fit_jacobian_lens(model, ps, skip_first=4, batch=7, checkpoint=ckpt, progress=False)
    assert resumed.n_prompts == whole.n_prompts == 5
    for layer in whole.source_layers:
        assert torch.equal(resumed.J[layer], whole.J[layer]), f"layer {layer} differs after resume"
    with pytest.raises(ConfigError, match="checkpoint"):  # another prompt set is refused
        fit_jacobian_lens(model, ps[:-1], skip_first=4, batch=3, checkpoint=ckpt, progress=False)


# -- the reference estimator from its definition, on a tiny random Hugging Face model -------------------------


def definition(hf, ids: torch.Tensor, sources: list[int], target: int, skip_first: int) -> dict[int, torch.Tensor]:
    """Row i of J_l = mean over p in V of sum over p' in V, p' >= p of d h_target[p', i] / d h_l[p, :], with
    V = skip_first .. n-2: one forward of the whole prompt, one backward per output dimension i (a one-hot at i at
    every valid target position), float64 sums."""
    base = hf.model if hasattr(hf, "model") else hf.transformer
    layers = base.layers if hasattr(base, "layers") else base.h
    acts = {}

    def keep(layer):
        def hook(module, args, out):
            x = out if torch.is_tensor(out) else out[0]
            if layer == min(sources):
                x = x.detach().requires_grad_(True)
                acts[layer] = x
                return x if torch.is_tensor(out) else (x, *out[1:])
            acts[layer] = x

        return hook

    handles = [layers[ly].register_forward_hook(keep(ly)) for ly in [*sources, target]]
    try:
        with torch.enable_grad():
            base(input_ids=ids[None], use_cache=False)
    finally:
        for h in handles:
            h.remove()
    n, d = ids.shape[0], hf.config.hidden_size
    valid = list(range(skip_first, n - 1))
    J = {ly: torch.zeros(d, d, dtype=torch.float64) for ly in sources}
    for i in range(d):
        cot = torch.zeros_like(acts[target])
        for p in valid:
            cot[0, p, i] = 1.0
        grads = torch.autograd.grad(acts[target], [acts[ly] for ly in sources], cot, retain_graph=True)
        for ly, g in zip(sources, grads):
            row = torch.zeros(d, dtype=torch.float64)
            for p in valid:
                row += g[0, p].double()
            J[ly][i] = row / len(valid)
    return J


@pytest.fixture(scope="module")
def tiny_hf(family_dirs):
    from interp.models import load_model

    return load_model(str(family_dirs("llama")), device="cpu")


def test_equals_the_definition_on_a_tiny_model(tiny_hf):
    model = tiny_hf
    g = torch.Generator().manual_seed(1)
    ps = [torch.randint(5, 1000, (n,), generator=g) for n in (27, 40, 17, 33)]  # the third has no valid position
    with pytest.warns(Warning, match="1 of 4 prompts"):
        lens = fit_jacobian_lens(model, ps, progress=False)
    assert lens.n_prompts == 3 and lens.source_layers == [0, 1, 2] and lens.target_layer == 3
    want = {ly: torch.zeros(128, 128, dtype=torch.float64) for ly in range(3)}
    for p in (ps[0], ps[1], ps[3]):
        for ly, J in definition(model.hf, p, [0, 1, 2], 3, 16).items():
            want[ly] += J / 3
    for ly in range(3):
        rel = ((lens.J[ly].double() - want[ly]).norm() / want[ly].norm()).item()
        assert rel < 1e-5, f"J_{ly}: rel Frobenius {rel:.2e} against the definition"
    # the target layer 2, from layer 0 only: also the same estimator
    low = fit_jacobian_lens(model, ps[:1], source_layers=[0], target_layer=2, skip_first=3, batch=50, progress=False)
    ref = definition(model.hf, ps[0], [0], 2, 3)[0]
    rel = ((low.J[0].double() - ref).norm() / ref.norm()).item()
    assert rel < 1e-5, f"target 2, skip 3: rel {rel:.2e}"
    assert (low.J[0].double() - want[0]).norm() / want[0].norm() > 1e-2  # a different target is a different J


def test_bad_settings_are_refused_in_one_line(tiny_hf):
    ps = [torch.arange(40)]
    with pytest.raises(ConfigError, match="target_layer"):
        fit_jacobian_lens(tiny_hf, ps, target_layer=4, progress=False)
    with pytest.raises(ConfigError, match="source_layers"):
        fit_jacobian_lens(tiny_hf, ps, source_layers=[3], target_layer=3, progress=False)
    with pytest.raises(ConfigError, match="skip_first \\+ 1 = 17") as e:
        fit_jacobian_lens(tiny_hf, [torch.arange(17), torch.arange(5)], progress=False)
    assert "\n" not in str(e.value)


def test_transport_convention_and_identity_at_the_target():
    J = {0: torch.randn(4, 4), 1: torch.randn(4, 4)}
    lens = JacobianLens(J, n_prompts=1)
    h = torch.randn(3, 4)
    assert torch.allclose(lens.transport(0, h), (J[0] @ h.T).T)  # J_l @ h for each row
    assert lens.transport(2, h) is h and lens.layers() == [0, 1, 2]
    with pytest.raises(ConfigError, match="layer"):
        lens.transport(3, h)


@pytest.mark.parametrize("family", ["gemma3_text", "gpt2"])
def test_equals_the_definition_on_other_families(family_dirs, family):
    """Gemma 3 (sliding-window layers in the KV cache of the first positions) and GPT-2 (learned positions)."""
    from interp.models import load_model

    model = load_model(str(family_dirs(family)), device="cpu")
    ids = torch.randint(5, 1000, (26,), generator=torch.Generator().manual_seed(2))
    lens = fit_jacobian_lens(model, [ids], source_layers=[1, 2], skip_first=6, progress=False)
    want = definition(model.hf, ids, [1, 2], 3, 6)
    for ly in (1, 2):
        rel = ((lens.J[ly].double() - want[ly]).norm() / want[ly].norm()).item()
        assert rel < 1e-5, f"{family} J_{ly}: rel Frobenius {rel:.2e} against the definition"
