"""Attribution graphs on tiny random models of three families and every transcoder kind: exact by construction,
checked against an independent computation of the edges, pruned as circuit-tracer prunes, and consistent with
ablations in the real model where the graph's assumptions hold exactly."""

from __future__ import annotations

import json

import pytest
import torch
from torch import Tensor

import interp
from interp.replacement import frozen, mlp_swap
from interp.sae import TranscoderTrainConfig, load_transcoders, save_transcoders, train_transcoders
from interp.sites import Site
from interp_probes.circuits.checks import exactness
from interp_probes.circuits.graph import attribute_prepared, prepare
from interp_probes.circuits.interventions import observe, predict
from interp_probes.circuits.neuronpedia import graph_json
from interp_probes.circuits.probe import prompt_ids
from interp_probes.circuits.prune import influence, normalize, prune, scores, threshold_for
from interp_probes.circuits.transcoders import pairs

PROMPT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def setup(family_dirs):
    """family -> (model, ids (n, len) of text)."""
    cache = {}

    def get(family: str):
        if family not in cache:
            m = interp.load_model(str(family_dirs(family)))
            from interp.data import builtin_corpus, token_windows

            ids = torch.tensor(token_windows(m.tokenizer, builtin_corpus("all", 0), 48, 32, m.info.bos_id))
            cache[family] = (m, ids)
        return cache[family]

    return get


def _transcoders(m, ids, kind: str, activation: str = "topk"):
    X, Y = pairs(m, ids, 1200)
    cfg = TranscoderTrainConfig(kind=kind, activation=activation, d_transcoder=128, steps=40, batch=256,
                                target_l0=6, k=6, matmul_dtype="float32")
    return train_transcoders(X, Y, cfg)


@pytest.fixture(scope="module")
def graphs(setup):
    made = {}

    sets = {}

    def get(family: str, kind: str, max_feature_nodes: int = 8192):
        key = (family, kind, max_feature_nodes)
        if key not in made:
            m, ids = setup(family)
            if (family, kind) not in sets:
                sets[family, kind] = _transcoders(m, ids, kind)
            tc = sets[family, kind]
            p = prepare(m, tc, prompt_ids(m, PROMPT))
            made[key] = (m, tc, p, attribute_prepared(m, tc, p, batch_size=16, max_feature_nodes=max_feature_nodes))
        return made[key]

    return get


CASES = [("llama", "plt"), ("gemma3_text", "clt"), ("gpt2", "skip"), ("qwen2", "plt")]


@pytest.mark.parametrize("family,kind", CASES)
def test_graph_is_exact(graphs, family, kind):
    m, tc, p, g = graphs(family, kind)
    assert g.n_feat > 0 and g.n_logit >= 1
    # every target's input = its incoming edges + its bias (bias from a separate all-sources-zero forward)
    assert g.completeness_error() < 1e-4
    ex = exactness(m, tc, p)
    assert ex["replacement_rel_err"] < 1e-4  # replacement + error nodes = the real model's logits
    assert ex["no_error_rel_err"] > 100 * ex["replacement_rel_err"]  # the control: without errors it is not exact
    # causality: no edge from a later position into a target
    pos = g.features[:, 1]
    later = pos[None, :] > pos[:, None]
    assert g.adjacency[: g.n_feat, : g.n_feat][later].abs().max() == 0


def test_completeness_fails_when_an_edge_is_wrong(graphs):
    """The check can fail: perturb one edge and it reports it."""
    _, _, _, g = graphs("llama", "plt")
    row = g.adjacency[: g.n_feat].abs().sum(1).argmax()
    e = g.edges
    wrong = type(e)(torch.cat([e.target, row[None]]), torch.cat([e.source, torch.tensor([g.embed_index(0)])]),
                    torch.cat([e.weight, 0.01 * g.inputs[: g.n_feat].abs().max()[None]]), e.n)
    g2 = type(g)(**{**g.__dict__, "edges": wrong})
    assert g2.completeness_error() > 1e-3


@pytest.mark.parametrize("family,kind", [("llama", "plt"), ("gpt2", "skip")])
def test_bos_error_moves_position_0_between_nodes_and_bias(graphs, family, kind):
    """circuit-tracer's convention (the default): position 0's MLP output belongs to no node, so its error nodes
    send nothing and each target's bias holds what they would send; with bos_error they are nodes. An exact
    identity: bias(default) = bias(bos_error) + sum over layers of A_bos_error[t, error(l, 0)], and both graphs are
    complete. Everything else (features, other edges, inputs) is the same graph."""
    m, tc, p, g = graphs(family, kind)
    gb = attribute_prepared(m, tc, prepare(m, tc, p.ids, bos_error=True), batch_size=16)
    A, Ab = g.adjacency, gb.adjacency
    err0 = torch.tensor([g.error_index(layer, 0) for layer in range(g.n_layers)])
    assert not A[:, err0].any()  # the default: the first position's errors send nothing ...
    assert Ab[:, err0].abs().sum() > 1e-3 * Ab.abs().sum()  # ... with bos_error they do (the control)
    targets = torch.cat([torch.arange(g.n_feat), torch.arange(g.logit_index(0), g.n_nodes)])
    scale = float(g.inputs.abs().max())
    torch.testing.assert_close(g.bias[targets], (gb.bias + Ab[:, err0].sum(1))[targets], rtol=0, atol=1e-5 * scale)
    torch.testing.assert_close(g.inputs, gb.inputs)
    rest = torch.ones(g.n_nodes, dtype=torch.bool)
    rest[err0] = False
    torch.testing.assert_close(A[:, rest], Ab[:, rest], rtol=0, atol=1e-6 * float(Ab.abs().max()))
    assert g.completeness_error() < 1e-4 and gb.completeness_error() < 1e-4


def test_capped_graph_stays_complete(graphs):
    m, tc, p, g = graphs("llama", "plt", max_feature_nodes=12)
    assert g.n_feat == 12 < g.n_active
    assert g.completeness_error() < 1e-4


def _input_without(m, tc, p, drop: tuple | None, target: tuple[int, int, int] | None) -> float:
    """The independent formula: the frozen replacement model run forward with every source a fixed injection
    (features from the clean forward, not recomputed), one source removed; returns the target's input."""
    acts = {layer: p.acts[layer].clone() for layer in p.acts}
    errors, embed = p.errors.clone(), p.embed.clone()
    if drop is not None:  # ("feature", layer, pos, index) | ("error", layer, pos) | ("embed", pos)
        if drop[0] == "feature":
            acts[drop[1]][drop[2], drop[3]] = 0
        elif drop[0] == "error":
            errors[drop[1], drop[2]] = 0
        else:
            embed[drop[1]] = 0
    box = {}

    def write(layer, x, y):
        est = tc.reconstruct(layer, acts, x[0].float()) + errors[layer]
        return est[None].to(y.dtype)

    swap, x = mlp_swap(tc.n_layers, write)
    hooks = [(Site("embed"), lambda e: embed[None].to(e.dtype)), *swap,
             (Site("final"), lambda f: box.__setitem__("f", f))]
    with torch.no_grad(), frozen(m, p.fz), m.hooks(hooks):
        m(p.ids)
    if target is None:  # the top logit node
        return float(box["f"][0, -1].float() @ p.logit_vecs[0])
    layer, pos, idx = target
    return float(tc.pre(layer, x[layer][0, pos].float())[idx])


def test_edges_match_an_independent_computation(graphs):
    """A[t, s] = input_t - input_t(without s) in the frozen replacement model, an affine map: a finite difference
    is exact, and it shares no code with the batched backward passes."""
    m, tc, p, g = graphs("llama", "plt")
    gen = torch.Generator().manual_seed(0)
    scale = float(g.inputs.abs().max())
    checked = 0
    targets = [None] + [tuple(g.features[i].tolist()) for i in torch.randperm(g.n_feat, generator=gen)[:3]]
    for target in targets:
        row = g.logit_index(0) if target is None else \
            int(((g.features == torch.tensor(target)).all(1)).nonzero()[0])
        base = _input_without(m, tc, p, None, target)
        assert abs(base - float(g.inputs[row])) < 1e-4 * scale
        strongest = g.adjacency[row].abs().topk(3).indices.tolist()
        for s in strongest:
            if s < g.n_feat:
                drop = ("feature", *g.features[s].tolist())
            elif s < g.embed_index(0):
                drop = ("error", *divmod(s - g.n_feat, g.n_pos))
            else:
                drop = ("embed", s - g.embed_index(0))
            edge = base - _input_without(m, tc, p, drop, target)
            assert abs(edge - float(g.adjacency[row, s])) < 1e-5 * scale, (target, drop)
            checked += 1
    assert checked >= 8


def _dense_prune(g, node_threshold: float, edge_threshold: float) -> tuple[Tensor, Tensor]:
    """circuit-tracer's prune_graph on the dense adjacency (the test's reference): node mask, edge mask (n, n)."""
    A = g.adjacency
    n_tail = g.n_logit + g.n_pos
    w = torch.zeros(g.n_nodes)
    w[g.logit_index(0):] = g.logit_probs
    node_inf = influence(normalize(A), w)
    node_mask = node_inf >= threshold_for(node_inf, node_threshold)
    node_mask[-n_tail:] = True
    pruned = A.clone()
    pruned[~node_mask] = 0
    pruned[:, ~node_mask] = 0
    norm = normalize(pruned)
    scores_ = norm * (influence(norm, w) + w)[:, None]
    edge_mask = scores_ >= threshold_for(scores_[scores_ > 0], edge_threshold)
    old = None
    while old is None or not torch.equal(node_mask, old):
        old = node_mask.clone()
        edge_mask &= node_mask[:, None] & node_mask[None]
        node_mask[:-n_tail] &= edge_mask[:, :-n_tail].any(0)
        node_mask[: g.n_feat] &= edge_mask[: g.n_feat].any(1)
    return node_mask, edge_mask & node_mask[:, None] & node_mask[None]


def test_prune_keeps_what_matters(graphs):
    _, _, _, g = graphs("llama", "plt")
    pr = prune(g, 0.8, 0.98)
    n_keep = g.n_logit + g.n_pos
    assert pr.node_mask[-n_keep:].all()  # embeddings and logits always stay
    kept_share = pr.node_influence[pr.node_mask].sum() / pr.node_influence.sum()
    assert 0 < int(pr.node_mask[: g.n_feat].sum()) <= g.n_feat
    assert kept_share > 0.5
    kept = g.edges.select(pr.edge_mask)
    assert pr.node_mask[kept.target].all() and pr.node_mask[kept.source].all()
    # the edge-list pruning is circuit-tracer's dense prune_graph, step for step
    dense_nodes, dense_edges = _dense_prune(g, 0.8, 0.98)
    assert torch.equal(pr.node_mask, dense_nodes)
    assert torch.equal(g.edges.select(pr.edge_mask).dense() != 0, dense_edges)
    # what it decided on (the cross-check's tie rule reads these): every kept feature and edge reaches its
    # threshold's score, and the edges reaching the edge threshold hold at least 0.98 of the edge scores
    assert (pr.node_influence[: g.n_feat][pr.node_mask[: g.n_feat]] >= pr.node_cut).all()
    assert (pr.edge_score[pr.edge_mask] >= pr.edge_cut).all()
    assert pr.edge_score[pr.edge_score >= pr.edge_cut].sum() >= 0.98 * (1 - 1e-6) * pr.edge_score.sum()
    # influence is A + A^2 + ...: on the normalised matrix, (I - A)^-1 - I gives the same numbers
    A = normalize(g.adjacency).double()
    w = torch.zeros(g.n_nodes, dtype=torch.float64)
    w[g.logit_index(0):] = g.logit_probs.double()
    closed = w @ (torch.linalg.inv(torch.eye(g.n_nodes, dtype=torch.float64) - A) - torch.eye(g.n_nodes))
    torch.testing.assert_close(influence(A, w), closed, rtol=1e-6, atol=1e-9)
    rep, comp = scores(g)
    assert 0 <= rep <= 1 and 0 <= comp <= 1


def test_ablating_a_last_layer_feature_is_predicted_exactly(graphs):
    """With attention frozen and no MLP after it, a feature of the last layer reaches the logit only directly: the
    real model's change must equal the graph's prediction; a feature that sends nothing is a null."""
    m, tc, p, g = graphs("llama", "plt")
    last = (g.features[:, 0] == tc.n_layers - 1).nonzero()[:, 0]
    assert len(last)
    node = g.logit_index(0)
    i = last[g.adjacency[node, last].abs().argmax()]
    pred = predict(g, i[None], node)
    assert abs(pred + float(g.adjacency[node, i])) < 1e-6 * (1 + abs(pred))
    obs = observe(m, tc, p, [(g.features[i][None], g.activations[i][None])], p.logit_vecs[0], freeze=True)[0]
    assert abs(obs - pred) < 1e-4 * (1 + abs(pred))
    assert abs(pred) > 1e-6


def test_neuronpedia_json(graphs, tmp_path):
    m, tc, p, g = graphs("gemma3_text", "clt")
    pr = prune(g)
    doc = graph_json(g, pr, m.to_str_tokens(g.tokens), m.to_str_tokens(g.logit_tokens.tolist()), slug="t",
                     scan="tiny", prompt=PROMPT, node_threshold=0.8)
    json.loads(json.dumps(doc))
    ids = [n["node_id"] for n in doc["nodes"]]
    assert len(ids) == len(set(ids))
    assert all(link["source"] in ids and link["target"] in ids for link in doc["links"])
    assert {n["feature_type"] for n in doc["nodes"]} >= {"embedding", "logit"}
    assert sum(n["is_target_logit"] for n in doc["nodes"]) == 1
    assert set(doc["metadata"]) >= {"slug", "scan", "prompt_tokens", "prompt", "node_threshold"}
    html = g._repr_html_()
    assert html.startswith("<svg") and html.count("<circle") == int(pr.node_mask.sum())


@pytest.mark.parametrize("kind,activation", [("plt", "jumprelu"), ("skip", "jumprelu"), ("plt", "topk"),
                                             ("clt", "topk")])
def test_transcoders_round_trip(setup, tmp_path, kind, activation):
    m, ids = setup("llama")
    tc = _transcoders(m, ids, kind, activation)
    x = torch.randn(5, tc.spec.d_in)
    if activation == "topk":  # circuit-tracer 0.5 would read it as ReLU: the save says so, in one line
        with pytest.warns(UserWarning, match="circuit-tracer 0.5 cannot express TopK") as got:
            path = save_transcoders(tc, tmp_path / kind)
        assert len(got) == 1 and "\n" not in str(got[0].message)
    else:
        path = save_transcoders(tc, tmp_path / kind)
    back = load_transcoders(path)
    for layer in range(tc.n_layers):
        acts = {src: tc.encode(src, x) for src in range(layer + 1)}
        acts2 = {src: back.encode(src, x) for src in range(layer + 1)}
        torch.testing.assert_close(back.reconstruct(layer, acts2, x), tc.reconstruct(layer, acts, x))
    if activation == "jumprelu" and kind != "clt":  # SAELens's own transcoder class reads the directory
        import sae_lens
        import yaml
        from safetensors.torch import load_file

        # ... and circuit-tracer's layout is there too: its keys a layer, its config with the layer list
        want = {"W_enc", "W_dec", "b_enc", "b_dec", "activation_function.threshold"} | ({"W_skip"} if kind == "skip"
                                                                                        else set())
        assert set(load_file(str(path / "layer_1.safetensors"))) == want
        cfg = yaml.safe_load((path / "config.yaml").read_text())
        assert cfg["transcoders"] == [str((path / f"layer_{i}.safetensors").resolve()) for i in range(tc.n_layers)]
        assert (cfg["model_kind"], cfg["activation"], cfg["feature_input_hook"]) == ("transcoder_set", "jumprelu",
                                                                                      "mlp.hook_in")

        sae = sae_lens.SAE.load_from_disk(str(path / "layer_1"))
        assert type(sae).__name__ == ("JumpReLUSkipTranscoder" if kind == "skip" else "JumpReLUTranscoder")
        torch.testing.assert_close(sae(x), tc.reconstruct(1, {1: tc.encode(1, x)}, x), rtol=1e-5, atol=1e-5)
    else:  # circuit-tracer's layout and key names
        import yaml
        from safetensors.torch import load_file

        cfg = yaml.safe_load((path / "config.yaml").read_text())
        if kind == "clt":
            assert cfg["model_kind"] == "cross_layer_transcoder"
            assert set(load_file(str(path / "W_dec_1.safetensors"))) == {"W_dec_1"}
            assert "W_enc_1" in load_file(str(path / "W_enc_1.safetensors"))
        else:  # a transcoder set: SingleLayerTranscoder's state dict a layer, TopK's k in the config
            assert (cfg["model_kind"], cfg["activation"], cfg["k"]) == ("transcoder_set", "topk", tc.spec.k)
            assert "cannot express TopK" in cfg["interp_note"]
            assert (path / "config.yaml").read_text().startswith("# circuit-tracer 0.5 cannot express TopK")
            assert set(load_file(str(path / "layer_1.safetensors"))) == {"W_enc", "W_dec", "b_enc", "b_dec"}


def test_circuit_tracer_directories_load(setup, tmp_path):
    """A directory as circuit-tracer publishes a JumpReLU transcoder set (config.yaml and layer_<l>.safetensors with
    SingleLayerTranscoder's keys; no interp file), written here from those names, reads back as the same maths:
    a_l = JumpReLU(x W_enc^T + b_enc), y_hat = a_l W_dec + b_dec."""
    import yaml
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    L, F, d = 2, 24, 16
    w = [{"W_enc": torch.randn(F, d, generator=g), "W_dec": torch.randn(F, d, generator=g),
          "b_enc": torch.randn(F, generator=g), "b_dec": torch.randn(d, generator=g),
          "activation_function.threshold": torch.rand(F, generator=g)} for _ in range(L)]
    for layer in range(L):
        save_file(w[layer], str(tmp_path / f"layer_{layer}.safetensors"))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "model_kind": "transcoder_set", "feature_input_hook": "mlp.hook_in", "feature_output_hook": "hook_mlp_out"}))
    tc = load_transcoders(tmp_path)
    assert (tc.spec.kind, tc.spec.activation, tc.n_layers, tc.spec.d_transcoder) == ("plt", "jumprelu", L, F)
    x = torch.randn(7, d, generator=g)
    for layer in range(L):
        pre = x @ w[layer]["W_enc"].T + w[layer]["b_enc"]
        a = pre * (pre > w[layer]["activation_function.threshold"])
        torch.testing.assert_close(tc.reconstruct(layer, {layer: tc.encode(layer, x)}),
                                   a @ w[layer]["W_dec"] + w[layer]["b_dec"])
    assert tc.meta["hooks"] == {"in": "blocks.{l}.mlp.hook_in", "out": "blocks.{l}.hook_mlp_out"}


def test_a_moved_set_loads_from_beside_its_config(setup, tmp_path):
    """A saved set lists its layer files by absolute path (circuit-tracer's load_transcoders reads that list); moved
    elsewhere, it still loads here (and in circuit-tracer's cache route) from the files beside config.yaml."""
    m, ids = setup("llama")
    tc = _transcoders(m, ids, "plt", "jumprelu")
    path = save_transcoders(tc, tmp_path / "a")
    (path / "interp_transcoders.json").unlink()  # read as circuit-tracer's own directory
    moved = path.rename(tmp_path / "b")
    back = load_transcoders(moved)
    x = torch.randn(5, tc.spec.d_in)
    torch.testing.assert_close(back.encode(1, x), tc.encode(1, x))


def test_a_circuit_tracer_config_listing_other_files_is_refused(tmp_path):
    import yaml

    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "model_kind": "transcoder_set", "feature_input_hook": "mlp.hook_in", "feature_output_hook": "hook_mlp_out",
        "transcoders": ["hf://some/other-repo/layer_0/params.npz"]}))
    with pytest.raises(ValueError, match="lists its layers elsewhere .hf://some/other-repo/layer_0/params.npz"):
        load_transcoders(tmp_path)


@pytest.mark.filterwarnings("ignore:.*cannot express TopK")
def test_a_set_on_other_hooks_is_refused_by_name(setup, tmp_path):
    """circuits refuses a directory set that reads or writes other hooks than the MLP's input and output."""
    import yaml

    from interp.errors import ConfigError
    from interp_probes.circuits import CircuitsConfig
    from interp_probes.circuits.transcoders import obtain

    m, ids = setup("llama")
    path = save_transcoders(_transcoders(m, ids, "plt"), tmp_path / "set")
    (path / "interp_transcoders.json").unlink()  # circuit-tracer's own directory now
    cfg = yaml.safe_load((path / "config.yaml").read_text())
    (path / "config.yaml").write_text(yaml.safe_dump({**cfg, "feature_input_hook": "hook_resid_mid"}))
    with pytest.raises(ConfigError, match="reads blocks.{l}.hook_resid_mid"):
        obtain(m, CircuitsConfig(transcoders=str(path)), ids[:0])


def test_saelens_transcoders_convert(setup, tmp_path):
    """Per-layer SAELens transcoders (as a pretrained release would give them) become the same set."""
    import sae_lens

    from interp.sae.transcoder import from_saelens

    m, ids = setup("llama")
    tc = _transcoders(m, ids, "skip", "jumprelu")
    path = save_transcoders(tc, tmp_path / "set")
    back = from_saelens([sae_lens.SAE.load_from_disk(str(path / f"layer_{layer}")) for layer in range(tc.n_layers)])
    x = torch.randn(4, tc.spec.d_in)
    for layer in range(tc.n_layers):
        torch.testing.assert_close(back.reconstruct(layer, {layer: back.encode(layer, x)}, x),
                                   tc.reconstruct(layer, {layer: tc.encode(layer, x)}, x))
    assert back.meta["hooks"] == {"in": "blocks.0.mlp.hook_in", "out": "blocks.0.hook_mlp_out"}


def test_pretrained_release_refused_offline(monkeypatch):
    from interp.errors import ConfigError
    from interp.runner import prepare

    monkeypatch.delenv("INTERP_ONLINE", raising=False)
    spec = "saelens:gemma-scope-2-270m-pt-transcoders/layer_{l}_width_16k_l0_small"
    with pytest.raises(ConfigError, match="INTERP_ONLINE=1") as e:
        prepare("circuits", {"size": "micro", "transcoders": spec})
    assert len(str(e.value).splitlines()) == 1
    with pytest.raises(ConfigError, match="{l}"):
        prepare("circuits", {"size": "micro", "transcoders": "saelens:some-release/layer_3"})
    with pytest.raises(ConfigError, match="circuit-tracer release 'some/transcoders'.*INTERP_ONLINE=1") as e:
        prepare("circuits", {"size": "micro", "transcoders": "circuit-tracer:some/transcoders"})
    assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("kind", ["plt", "clt"])
def test_quality_splices_only_the_positions_the_set_trains_on(graphs, setup, kind):
    """Splicing and zero-ablation edit positions >= 1 (the set trains on them): the BOS position's logits are the
    clean ones (a causal model's position 0 sees nothing later), every later position's are not."""
    from interp.sae.transcoder_train import splice_hooks

    m, tc, _p, _g = graphs("llama", kind)
    ids = setup("llama")[1][:2].to(m.device)
    clean = m(ids).float()
    for mode in ("splice", "zero"):
        rows = {layer: slice(None) for layer in range(tc.n_layers)}
        with torch.no_grad(), m.hooks(splice_hooks(tc, rows, mode)):
            got = m(ids).float()
        assert torch.equal(got[:, 0], clean[:, 0]), f"{mode} edited the BOS position"
        assert (got[:, 1:] - clean[:, 1:]).abs().amax() > 1e-3, f"{mode} edited nothing"


@pytest.mark.parametrize("family,kind", [("llama", "plt"), ("gpt2", "skip"), ("gemma3_text", "clt")])
def test_the_branching_forward_equals_one_forward_per_edit(graphs, setup, family, kind):
    """`edit_losses` grows one row's batch layer by layer (the edits of layer l join at l's input): every row's
    loss equals its own forward with `splice_hooks` editing that layer (or all of them), bit for bit, on a family
    with SDPA (llama), one with eager attention and a batch-sized mask (gpt2), and a CLT (whole-model rows only).
    Control: the edits move the loss, and a layer's zeroing differs from its splicing."""
    from interp.sae.transcoder_train import edit_losses, splice_hooks, token_losses

    m, tc, _p, _g = graphs(family, kind)
    ids = setup(family)[1][:2]
    per_layer = kind != "clt"
    got = edit_losses(m, tc, ids, per_layer)
    L, everywhere = tc.n_layers, {layer: slice(None) for layer in range(tc.n_layers)}
    want = {"clean": token_losses(m, ids), "zero_all": token_losses(m, ids, splice_hooks(tc, everywhere, "zero")),
            "splice_all": token_losses(m, ids, splice_hooks(tc, everywhere, "splice"))}
    if per_layer:
        for mode in ("zero", "splice"):
            want[mode] = torch.stack([token_losses(m, ids, splice_hooks(tc, {layer: slice(None)}, mode))
                                      for layer in range(L)])
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), f"{k}: {got[k]} != {want[k]}"
    assert (got["zero_all"] - got["clean"]).abs().min() > 1e-3
    if per_layer:
        assert got["zero"].shape == (L, 2) and not torch.equal(got["zero"], got["splice"])


def test_an_edge_budget_keeps_each_rows_strongest_edges_and_completeness(graphs):
    """max_edges_per_row keeps the strongest edges of each row and moves the rest into the unattributed input
    (completeness still exact); a backward batch cut down by batch_tokens computes the same edges."""
    m, tc, p, g = graphs("llama", "plt")
    budget = 24
    small = attribute_prepared(m, tc, p, batch_size=16, max_edges_per_row=budget, batch_tokens=2 * p.ids.shape[1])
    assert small.n_feat == g.n_feat and small.completeness_error() < 1e-4
    full, part = g.adjacency, small.adjacency
    scale = float(full.abs().max())
    rows = torch.cat([torch.arange(g.n_feat), torch.arange(g.logit_index(0), g.n_nodes)])
    truncated = 0
    for r in rows.tolist():
        kept = part[r].nonzero()[:, 0]
        assert len(kept) <= budget
        torch.testing.assert_close(part[r, kept], full[r, kept], rtol=1e-4, atol=1e-6 * scale)
        if (full[r] != 0).sum() > budget:
            truncated += 1
            weakest_kept = part[r, kept].abs().min()
            dropped = (full[r] != 0) & (part[r] == 0)
            assert full[r, dropped].abs().max() <= weakest_kept * (1 + 1e-4) + 1e-6 * scale
    assert truncated > len(rows) // 2, "the budget truncated too few rows to test anything"
    assert small.unattributed.abs().sum() > 0 and len(small.edges) < len(g.edges)
