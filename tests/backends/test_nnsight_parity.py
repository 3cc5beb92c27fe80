"""nnsight backend: every site and every intervention agrees with the TransformerLens backend."""

from __future__ import annotations

import pytest
import torch

from interp import AbsMean, Mean, ablate, add, capture, patch, run_with_cache, scale
from interp.errors import ConfigError, InterpError
from interp.nnsight_backend import supported_kinds
from interp.sites import Site

pytestmark = pytest.mark.slow
TOL = 1e-4


@pytest.fixture(scope="module")
def nn_model(model):
    """nnsight over the very same HF modules and weights as the session model."""
    from interp.nnsight_backend import NNsightModel

    return NNsightModel(model.hf, model.tokenizer, model.info, model.device, model.dtype)


@pytest.fixture(scope="module")
def enc(model):
    return model.tokenize(["The capital of France is", "Backends must agree on every site."], padding_side="left")


def _close(a, b, mask=None, site=None):
    if mask is not None and not (site is not None and site.is_pattern):
        a, b = a[mask], b[mask]
    err = (a - b).abs().max().item()
    assert err <= TOL, f"{site}: max |tl - nnsight| = {err:.2e}"


def test_every_site_agrees(model, nn_model, enc):
    layer = model.info.n_layers // 2
    layerless = ("embed", "final", "logits")
    sites = [Site(k, layer) for k in sorted(supported_kinds()) if k not in layerless] + [Site(k) for k in layerless]
    la, ca = run_with_cache(model, enc["input_ids"], enc["attention_mask"], sites)
    lb, cb = run_with_cache(nn_model, enc["input_ids"], enc["attention_mask"], sites)
    m = enc["attention_mask"].bool()
    _close(la, lb, m)
    for s in sites:
        assert ca[s].shape == cb[s].shape, f"{s}: {tuple(ca[s].shape)} vs {tuple(cb[s].shape)}"
        _close(ca[s], cb[s], m, s)


def test_streaming_capture_agrees(model, nn_model, enc):
    sites = {Site("mlp_post", 3): [Mean(), AbsMean()], Site("attn_z", 5): [Mean()]}
    a = capture(model, [enc], sites, skip_first=1)
    b = capture(nn_model, [enc], {s: [type(r)() for r in rs] for s, rs in sites.items()}, skip_first=1)
    for s in sites:
        for k in a[s]:
            _close(a[s][k].float(), b[s][k].float(), site=s)


@pytest.mark.parametrize("kind", ["ablate", "ablate_mean", "scale", "add", "patch"])
def test_every_intervention_agrees(model, nn_model, enc, kind):
    site = Site("mlp_post", 4) if kind != "add" else Site("resid_pre", 6)
    _, clean = run_with_cache(model, enc["input_ids"], enc["attention_mask"], [Site("attn_z", 2)])
    g = torch.Generator().manual_seed(0)
    vec = torch.randn(model.info.d_model, generator=g) * 5

    def edit(m):
        if kind == "ablate":
            return ablate(m, site, index=[1, 7, 300])
        if kind == "ablate_mean":
            return ablate(m, site, mode="mean", mean=torch.ones(model.info.d_mlp), index=[2, 3])
        if kind == "scale":
            return scale(m, site, 3.0, index=[10, 11])
        if kind == "add":
            return add(m, site, vec, positions=[-1])
        return patch(m, Site("attn_z", 2), clean[Site("attn_z", 2)].flip(0))

    outs = []
    for m in (model, nn_model):
        with torch.no_grad(), edit(m):
            outs.append(m.forward(enc["input_ids"], enc["attention_mask"]))
    base = model.forward(enc["input_ids"], enc["attention_mask"])
    mask = enc["attention_mask"].bool()
    assert (outs[0][mask] - base[mask]).abs().max() > 1e-3, "the intervention had no effect: the test would be vacuous"
    _close(outs[0], outs[1], mask)


def test_missing_capability_fails_before_load():
    from interp.registry import get_probe
    from interp.runner import check_backend

    cfg = get_probe("logit_lens").config({"backend": "nnsight"})

    class Needs(type(cfg)):
        REQUIRES = ("attn_rot_q", "edit:attn_pattern")

    with pytest.raises(ConfigError) as e:
        check_backend("demo_probe", Needs(backend="nnsight"))
    msg = str(e.value)
    assert "demo_probe" in msg and "nnsight" in msg and "attn_rot_q" in msg and "edit:attn_pattern" in msg


def test_unsupported_site_and_pattern_edit(nn_model, enc):
    with pytest.raises(InterpError, match="attn_rot_q"), nn_model.hooks([(Site("attn_rot_q", 1), lambda x: None)]):
        pass
    with pytest.raises(InterpError, match="attention patterns"), ablate(nn_model, Site("attn_pattern", 1)):
        nn_model.forward(enc["input_ids"], enc["attention_mask"])


def test_remote_is_passed_through_with_key_from_env(model, monkeypatch):
    from interp.nnsight_backend import NNsightModel

    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    with pytest.raises(InterpError, match="NDIF_API_KEY"):
        NNsightModel(model.hf, model.tokenizer, model.info, model.device, model.dtype, remote=True)
    monkeypatch.setenv("NDIF_API_KEY", "test-key-123")
    remote = NNsightModel(model.hf, model.tokenizer, model.info, model.device, model.dtype, remote=True)
    assert remote.trace_kwargs() == {"remote": True}
    from nnsight import CONFIG

    assert CONFIG.API.APIKEY == "test-key-123"
    with pytest.raises(ConfigError, match="remote"):
        from interp.registry import get_probe

        get_probe("logit_lens").config({"remote": True})


def test_logit_lens_same_answer_on_both_backends(model, nn_model, tmp_path):
    from interp.runner import execute, prepare
    from interp.store import load_run

    runs = []
    for backend, m in (("tl", model), ("nnsight", nn_model)):
        spec, cfg = prepare("logit_lens", {"backend": backend, "size": "micro"})
        runs.append(load_run(execute(spec, cfg, out=tmp_path, model=m, progress=False)))
    a, b = (r.metrics for r in runs)
    assert a["final_top1"] == b["final_top1"] == " Paris"
    assert a["final_rank_by_layer"] == b["final_rank_by_layer"]


def _float_equal(a, b, path=""):
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys differ"
        for k in a:
            _float_equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            _float_equal(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert abs(a - b) <= 1e-3 * max(1.0, abs(a)), f"{path}: tl {a} vs nnsight {b}"
    else:
        assert a == b, f"{path}: tl {a!r} vs nnsight {b!r}"


def _needs(probe: str) -> list[str]:
    """What probe `probe` declares it needs that the nnsight backend lacks."""
    from interp.registry import get_probe
    from interp.sites import CAPABILITIES

    return [need for need in get_probe(probe).config_cls.REQUIRES if need not in CAPABILITIES["nnsight"]]


def _probes_on_both_backends() -> list[str]:
    """Every probe whose declared needs the nnsight backend meets: its micro metrics must be equal on both.

    A new probe lands here by default; one that needs what nnsight lacks declares it in its config's
    REQUIRES (and is then refused before its model loads, see the test below).
    """
    from interp.registry import probes_available

    return [name for name in probes_available() if not _needs(name)]


def _probes_refused() -> list[str]:
    from interp.registry import probes_available

    return [name for name in probes_available() if _needs(name)]


@pytest.mark.parametrize("probe", _probes_refused())
def test_probe_needing_more_is_refused_before_load(probe):
    """`--set backend=nnsight` on a probe that needs what nnsight lacks fails in prepare(), naming it all."""
    from interp.runner import prepare

    with pytest.raises(ConfigError) as e:
        prepare(probe, {"backend": "nnsight", "size": "micro"})
    msg = str(e.value)
    assert probe in msg and "nnsight" in msg and all(need in msg for need in _needs(probe)), msg


def test_which_probes_run_on_nnsight():
    """The split this file tests: every probe but the three that read rotary q/k or edit attention patterns
    (circuits freezes them for its local replacement model)."""
    assert set(_probes_refused()) == {"keystone", "graph_sawtooth", "circuits"}, _probes_refused()
    assert {"logit_lens", "atoms", "sae_falsification", "self_interp", "conversational_inertia",
            "lockin"} <= set(_probes_on_both_backends())


@pytest.mark.parametrize("probe", _probes_on_both_backends())
def test_probe_micro_metrics_equal_across_backends(probe, model, nn_model, micro_runs, tmp_path):
    """Every probe whose needs the nnsight backend meets gives the same micro metrics on it."""
    from interp.runner import execute, prepare
    from interp.store import load_run

    tl = load_run(micro_runs(probe)).metrics
    spec, cfg = prepare(probe, {"backend": "nnsight", "size": "micro"})
    nn = load_run(execute(spec, cfg, out=tmp_path, model=nn_model, progress=False)).metrics
    _float_equal(tl, nn, probe)
