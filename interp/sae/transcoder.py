"""Transcoders: sparse replacements of a model's MLPs, per layer (PLT), with a skip path, or cross-layer (CLT).

A transcoder reads the MLP's input at layer l, x_l = the `mlp_in` site (the residual stream after the MLP's own
normalisation, so nothing is folded in), and writes an estimate of the MLP's output y_l' (the `mlp_out` site):

    a_l = act(x_l W_enc[l] + b_enc[l])                      (act: JumpReLU with threshold theta, or TopK)
    y_hat_l' = sum_{l <= l'} a_l W_dec[l -> l'] + b_dec[l'] (+ x_l' W_skip[l']^T for a skip transcoder)

A per-layer transcoder (PLT) has only l' = l; a cross-layer transcoder (CLT) has a decoder for every l' >= l.
`Transcoders` holds one set (every layer of a model, or the layers it covers); its layout is circuit-tracer's
(decoderesearch/circuit-tracer, `SingleLayerTranscoder` / `CrossLayerTranscoder`): W_enc (F, d_in) per layer,
W_dec (F, n_out, d_out) with n_out = 1 (PLT) or n_layers - l (CLT), W_skip (d_out, d_in).

Every set is saved in circuit-tracer 0.5's layout with its `config.yaml` (a PLT or skip set: a transcoder set,
`layer_<l>.safetensors` with `SingleLayerTranscoder`'s keys; CLT: `W_enc_<l>.safetensors` / `W_dec_<l>.safetensors`
with its key names), which circuit-tracer 0.5 loads as it is (JumpReLU from the thresholds; a TopK set it can only
read as ReLU, which the save says: `TOPK_NOTE`). Where SAELens has the class (JumpReLU PLT: `JumpReLUTranscoder`,
skip: `JumpReLUSkipTranscoder`) the set is also written as SAELens transcoder directories, one `layer_<l>` each,
that `sae_lens.SAE.load_from_disk` loads (the weights twice on disk). `load_transcoders` reads either
(`interp_transcoders.json` says which it reads) and circuit-tracer's own directories.

Activations: JumpReLU is circuit-tracer's exactly (pre * (pre > theta)). TopK here is Gao et al.'s (2024): the k
largest pre-activations, then ReLU; circuit-tracer's `TopK` multiplies by a 0/1 mask of the k largest and keeps
negative values, so on a token with fewer than k positive pre-activations it has more active features.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from jaxtyping import Float
from torch import Tensor, nn

KINDS = ("plt", "skip", "clt")
ACTIVATIONS = ("jumprelu", "topk")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class TranscoderSpec:
    """The shape of a transcoder set (what `Transcoders.__init__` needs)."""

    kind: Literal["plt", "skip", "clt"]
    activation: Literal["jumprelu", "topk"]
    n_layers: int
    d_in: int
    d_out: int
    d_transcoder: int
    k: int = 16
    """Active features per token (topk)."""

    def n_out(self, layer: int) -> int:
        """Output layers of layer `layer`'s features: 1 (PLT, skip) or n_layers - layer (CLT)."""
        return self.n_layers - layer if self.kind == "clt" else 1


class Transcoders(nn.Module):
    """A set of transcoders, one per layer; see the module docstring for the maths."""

    def __init__(self, spec: TranscoderSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        super().__init__()
        s = spec
        if s.kind not in KINDS or s.activation not in ACTIVATIONS:
            raise ValueError(f"transcoders: kind {s.kind!r} / activation {s.activation!r}; known {KINDS} / "
                             f"{ACTIVATIONS}")
        self.spec = s
        kw = dict(device=device, dtype=dtype)
        L, F = s.n_layers, s.d_transcoder
        self.W_enc = nn.Parameter(torch.zeros(L, F, s.d_in, **kw))  # (layer, F, d_in)
        self.b_enc = nn.Parameter(torch.zeros(L, F, **kw))
        self.threshold = nn.Parameter(torch.zeros(L, F, **kw), requires_grad=False)  # jumprelu only
        self.W_dec = nn.ParameterList([nn.Parameter(torch.zeros(F, s.n_out(layer), s.d_out, **kw))
                                       for layer in range(L)])  # per layer (F, n_out, d_out)
        self.b_dec = nn.Parameter(torch.zeros(L, s.d_out, **kw))
        self.W_skip = nn.Parameter(torch.zeros(L, s.d_out, s.d_in, **kw)) if s.kind == "skip" else None
        self.meta: dict[str, Any] = {}
        """Free-form: hooks read and written, model, training summary, quality (saved with the set)."""

    # ------------------------------------------------------------------ maths
    @property
    def n_layers(self) -> int:
        return self.spec.n_layers

    def pre(self, layer: int, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... F"]:
        """Pre-activations x W_enc^T + b_enc of layer `layer`'s features."""
        return torch.nn.functional.linear(x.to(self.W_enc.dtype), self.W_enc[layer], self.b_enc[layer])

    def activate(self, layer: int, pre: Float[Tensor, "... F"]) -> Float[Tensor, "... F"]:
        """The activation function: JumpReLU (pre where pre > theta, else 0) or TopK (k largest, ReLU)."""
        if self.spec.activation == "jumprelu":
            return pre * (pre > self.threshold[layer])
        top = pre.topk(min(self.spec.k, pre.shape[-1]), dim=-1)
        return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())

    def encode(self, layer: int, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... F"]:
        return self.activate(layer, self.pre(layer, x))

    def out_layers(self, layer: int) -> range:
        """The layers whose MLP output layer `layer`'s features write to."""
        return range(layer, layer + self.spec.n_out(layer))

    def dec(self, source: int, target: int) -> Float[Tensor, "F d_out"]:
        """Decoder of layer `source`'s features into layer `target`'s MLP output (target in out_layers(source))."""
        return self.W_dec[source][:, target - source]

    def skip(self, layer: int, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... d_out"] | None:
        """The skip path x W_skip^T (None without one)."""
        return None if self.W_skip is None else x.to(self.W_skip.dtype) @ self.W_skip[layer].T

    def reconstruct(self, layer: int, acts: dict[int, Tensor], x: Tensor | None = None) -> Float[Tensor, "... d_out"]:
        """y_hat at layer `layer` from the features of every layer that writes to it (`acts[l]`, (..., F)) and,
        for a skip transcoder, the layer's input `x`."""
        y = self.b_dec[layer].expand(*next(iter(acts.values())).shape[:-1], -1).clone()
        for src in range(layer + 1):
            if layer in self.out_layers(src) and src in acts:
                y = y + acts[src].to(y.dtype) @ self.dec(src, layer)
        if self.W_skip is not None:
            if x is None:
                raise ValueError("reconstruct: a skip transcoder needs the layer's input x")
            y = y + self.skip(layer, x)
        return y

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


# ============================================================================= save / load


def _saelens_class(tc: Transcoders) -> str | None:
    """The SAELens architecture this set saves as, or None (circuit-tracer's layout)."""
    s = tc.spec
    if s.activation != "jumprelu" or s.kind == "clt":
        return None
    return "jumprelu_skip_transcoder" if s.kind == "skip" else "jumprelu_transcoder"


def _saelens_transcoder(arch: str, s: TranscoderSpec, state: dict[str, Tensor], meta: dict[str, Any]):
    """A SAELens (skip) JumpReLU transcoder holding `state`."""
    from sae_lens.saes.sae import SAEMetadata
    from sae_lens.saes.transcoder import (
        JumpReLUSkipTranscoder,
        JumpReLUSkipTranscoderConfig,
        JumpReLUTranscoder,
        JumpReLUTranscoderConfig,
    )

    cls, cfg_cls = ((JumpReLUSkipTranscoder, JumpReLUSkipTranscoderConfig) if arch == "jumprelu_skip_transcoder"
                    else (JumpReLUTranscoder, JumpReLUTranscoderConfig))
    cfg = cfg_cls(d_in=s.d_in, d_sae=s.d_transcoder, d_out=s.d_out, dtype="float32", device="cpu",
                  metadata=SAEMetadata(**meta), apply_b_dec_to_input=False)
    sae = cls(cfg)
    sae.load_state_dict(state)
    return sae


TOPK_NOTE = ("circuit-tracer 0.5 cannot express TopK: its loader reads these layer files as ReLU transcoders (every "
             "positive pre-activation active). Load them there with its TopK(k) class, which also differs: it keeps "
             "the k largest pre-activations even when negative, where this set applies ReLU to them (Gao et al.)")
"""What a TopK set's save says (one warning line, and `interp_note` in its config.yaml)."""


def _ct_config(tc: Transcoders, listed_as: Path) -> dict[str, Any]:
    """circuit-tracer 0.5's config.yaml of a set that lives in `listed_as`: the keys its loaders read. `transcoders`
    lists the layer files by absolute path: `circuit_tracer.utils.hf_utils.load_transcoders(config)` reads that
    list (without it, it looks for `repo_id` and raises KeyError) and opens each path as given, from any working
    directory. `load_transcoder_from_hub(<absolute directory>)` (and `ReplacementModel.from_pretrained(model,
    <absolute directory>)`) instead finds the directory as a cached set and reads the `layer_<l>.safetensors`
    beside config.yaml, so a moved set still loads there. `activation` / `k` are what later circuit-tracer
    releases read (0.5 ignores them and takes JumpReLU from the files' thresholds, ReLU otherwise)."""
    s = tc.spec
    cfg: dict[str, Any] = {
        "model_kind": "cross_layer_transcoder" if s.kind == "clt" else "transcoder_set",
        "model_name": tc.meta.get("model"), "feature_input_hook": "mlp.hook_in",
        "feature_output_hook": "hook_mlp_out", "scan": f"interp-{tc.meta.get('model')}-{s.kind}-{s.d_transcoder}",
        "activation": s.activation}
    if s.kind != "clt":
        cfg["transcoders"] = [str((listed_as / f"layer_{layer}.safetensors").resolve())
                              for layer in range(s.n_layers)]
    if s.activation == "topk":
        cfg.update(k=s.k, interp_note=TOPK_NOTE)
    return cfg


def save_transcoders(tc: Transcoders, path: str | Path, listed_as: str | Path | None = None) -> Path:
    """Write `tc` under `path` (see the module docstring for the formats); returns `path`. `listed_as`: the
    directory config.yaml's layer list names, where the set will live when it is written elsewhere first and
    renamed into place (the cache); `path` by default. Every set is also
    circuit-tracer 0.5's own layout with its config.yaml (`_ct_config`), so a JumpReLU (or ReLU: threshold 0)
    set loads there as it is; a TopK set cannot be read there exactly, which the save says in one warning line and
    in config.yaml (`TOPK_NOTE`)."""
    import warnings

    import yaml
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    s = tc.spec
    arch = _saelens_class(tc)
    hooks = tc.meta.get("hooks", {})
    with torch.no_grad():
        for layer in range(s.n_layers):
            W_enc, b_enc = tc.W_enc[layer].detach().cpu(), tc.b_enc[layer].detach().cpu()
            W_dec, b_dec = tc.W_dec[layer].detach().cpu(), tc.b_dec[layer].detach().cpu()
            if arch is not None:  # SAELens: W_enc (d_in, F), W_dec (F, d_out), W_skip (d_out, d_in)
                state = {"W_enc": W_enc.T.contiguous(), "b_enc": b_enc, "W_dec": W_dec[:, 0].contiguous(),
                         "b_dec": b_dec, "threshold": tc.threshold[layer].detach().cpu()}
                if tc.W_skip is not None:
                    state["W_skip"] = tc.W_skip[layer].detach().cpu()
                meta = {"hook_name": hooks.get("in", "blocks.{l}.mlp.hook_in").format(l=layer),
                        "hook_name_out": hooks.get("out", "blocks.{l}.hook_mlp_out").format(l=layer),
                        "model_name": tc.meta.get("model")}
                _saelens_transcoder(arch, s, state, meta).save_model(str(path / f"layer_{layer}"))
            if s.kind == "clt":  # circuit-tracer's CLT: W_enc_<l> (F, d_in), b_enc, b_dec, threshold; W_dec_<l>
                enc = {f"W_enc_{layer}": W_enc.contiguous(), f"b_enc_{layer}": b_enc, f"b_dec_{layer}": b_dec}
                if s.activation == "jumprelu":
                    enc[f"threshold_{layer}"] = tc.threshold[layer].detach().cpu()
                save_file(enc, str(path / f"W_enc_{layer}.safetensors"))
                save_file({f"W_dec_{layer}": W_dec.contiguous()}, str(path / f"W_dec_{layer}.safetensors"))
            else:  # circuit-tracer's transcoder set: layer_<l> with SingleLayerTranscoder's state-dict keys
                state = {"W_enc": W_enc.contiguous(), "W_dec": W_dec[:, 0].contiguous(), "b_enc": b_enc,
                         "b_dec": b_dec}
                if s.activation == "jumprelu":
                    state["activation_function.threshold"] = tc.threshold[layer].detach().cpu()
                if tc.W_skip is not None:
                    state["W_skip"] = tc.W_skip[layer].detach().cpu()
                save_file(state, str(path / f"layer_{layer}.safetensors"))
    head = f"# {TOPK_NOTE}\n" if s.activation == "topk" else ""
    ct = _ct_config(tc, Path(listed_as or path))
    (path / "config.yaml").write_text(head + yaml.safe_dump(ct, sort_keys=False, width=1 << 16))
    if s.activation == "topk":
        warnings.warn(f"save_transcoders {path}: {TOPK_NOTE}", stacklevel=2)
    doc = {"format_version": FORMAT_VERSION, "format": "saelens" if arch else "circuit_tracer",
           "spec": s.__dict__, "meta": tc.meta}
    (path / "interp_transcoders.json").write_text(json.dumps(doc, indent=1, default=str))
    return path


def load_transcoders(path: str | Path, device: str | torch.device = "cpu") -> Transcoders:
    """A set written by `save_transcoders` (either format), or a circuit-tracer directory (its config.yaml with
    `layer_<l>.safetensors` of a transcoder set or the `W_enc_<l>` / `W_dec_<l>` files of a CLT). Reads
    safetensors, JSON and YAML only."""
    path = Path(path)
    doc_path = path / "interp_transcoders.json"
    if not doc_path.is_file():
        if (path / "config.yaml").is_file():
            return _load_circuit_tracer(path).to(device).eval().requires_grad_(False)
        raise FileNotFoundError(f"{path}: not a transcoder set (no interp_transcoders.json, no circuit-tracer "
                                "config.yaml)")
    doc = json.loads(doc_path.read_text())
    if doc.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: transcoder format {doc.get('format_version')}, this interp reads {FORMAT_VERSION}")
    spec = TranscoderSpec(**doc["spec"])
    if doc["format"] == "saelens":
        tc = _fill(Transcoders(spec), [_saelens_layer(path / f"layer_{layer}") for layer in range(spec.n_layers)])
    else:
        tc = _fill(Transcoders(spec), [_ct_layer(path, layer) for layer in range(spec.n_layers)])
    tc.meta = doc.get("meta", {})
    return tc.to(device).eval().requires_grad_(False)


def _saelens_layer(d: Path) -> dict[str, Tensor]:
    """One SAELens transcoder directory's weights in this module's layout (W_enc (F, d_in), W_dec (F, n_out, d))."""
    from safetensors.torch import load_file

    st = load_file(str(d / "sae_weights.safetensors"))
    return {"W_enc": st["W_enc"].T, "W_dec": st["W_dec"][:, None], "b_enc": st["b_enc"], "b_dec": st["b_dec"],
            "threshold": st.get("threshold"), "W_skip": st.get("W_skip")}


def _ct_layer(path: Path, layer: int) -> dict[str, Tensor]:
    """Layer `layer` of a circuit-tracer directory: a transcoder set's `layer_<l>.safetensors` or a CLT's
    `W_enc_<l>` / `W_dec_<l>` files, in this module's layout."""
    from safetensors.torch import load_file

    if (path / f"layer_{layer}.safetensors").is_file():
        st = load_file(str(path / f"layer_{layer}.safetensors"))
        return {"W_enc": st["W_enc"], "W_dec": st["W_dec"][:, None], "b_enc": st["b_enc"], "b_dec": st["b_dec"],
                "threshold": st.get("activation_function.threshold"), "W_skip": st.get("W_skip")}
    st = load_file(str(path / f"W_enc_{layer}.safetensors"))
    return {"W_enc": st[f"W_enc_{layer}"], "W_dec": load_file(str(path / f"W_dec_{layer}.safetensors"))[
        f"W_dec_{layer}"], "b_enc": st[f"b_enc_{layer}"], "b_dec": st[f"b_dec_{layer}"],
        "threshold": st.get(f"threshold_{layer}"), "W_skip": st.get(f"W_skip_{layer}")}


def _fill(tc: Transcoders, layers: list[dict[str, Tensor]]) -> Transcoders:
    """`tc` with each layer's weights (a missing threshold is 0: ReLU)."""
    with torch.no_grad():
        for layer, w in enumerate(layers):
            tc.W_enc[layer] = w["W_enc"]
            tc.W_dec[layer].copy_(w["W_dec"])
            tc.b_enc[layer] = w["b_enc"]
            tc.b_dec[layer] = w["b_dec"]
            tc.threshold[layer] = 0 if w["threshold"] is None else w["threshold"]
            if tc.W_skip is not None:
                tc.W_skip[layer] = w["W_skip"]
    return tc


def _load_circuit_tracer(path: Path) -> Transcoders:
    """A directory as circuit-tracer writes and publishes them (config.yaml: model_kind transcoder_set or
    cross_layer_transcoder, activation topk with k, relu, or JumpReLU from the files' thresholds)."""
    import yaml

    cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
    kind = cfg.get("model_kind")
    if kind not in ("transcoder_set", "cross_layer_transcoder"):
        raise ValueError(f"{path}: circuit-tracer model_kind {kind!r}, expected transcoder_set or "
                         "cross_layer_transcoder")
    # a set saved here lists its own files by absolute path (read beside config.yaml when the set has moved)
    listed = [str(p) for p in cfg.get("transcoders") or []]
    if listed and not all((path / p).is_file() or (path / Path(p).name).is_file() for p in listed):
        raise ValueError(f"{path}: config.yaml lists its layers elsewhere ({listed[0]}, ...): only a directory that "
                         "holds its own layer files loads here (Gemma Scope's sets load as saelens:<release>)")
    stem = "layer_{}.safetensors" if kind == "transcoder_set" else "W_enc_{}.safetensors"
    n = 0
    while (path / stem.format(n)).is_file():
        n += 1
    if n == 0:
        raise FileNotFoundError(f"{path}: config.yaml says {kind} but there is no {stem.format(0)}")
    layers = [_ct_layer(path, layer) for layer in range(n)]
    act = cfg.get("activation")
    first = layers[0]
    spec = TranscoderSpec(
        kind="clt" if kind == "cross_layer_transcoder" else ("skip" if first["W_skip"] is not None else "plt"),
        activation="topk" if act == "topk" else "jumprelu", n_layers=n, d_in=int(first["W_enc"].shape[1]),
        d_out=int(first["b_dec"].shape[0]), d_transcoder=int(first["W_enc"].shape[0]), k=int(cfg.get("k") or 16))
    tc = _fill(Transcoders(spec), layers)
    tc.meta = {"model": cfg.get("model_name"), "source": "circuit-tracer",
               "hooks": {"in": "blocks.{l}." + str(cfg.get("feature_input_hook")),
                         "out": "blocks.{l}." + str(cfg.get("feature_output_hook"))}}
    return tc


def from_saelens(saes: list) -> Transcoders:
    """A per-layer set from SAELens transcoders, one per layer in order (`JumpReLUTranscoder`,
    `JumpReLUSkipTranscoder`, or the plain ReLU `Transcoder`, whose threshold is 0)."""
    first = saes[0]
    arch = first.cfg.architecture()
    if arch not in ("transcoder", "skip_transcoder", "jumprelu_transcoder", "jumprelu_skip_transcoder"):
        raise ValueError(f"from_saelens: {arch!r} is not a per-layer SAELens transcoder")
    spec = TranscoderSpec(kind="skip" if "skip" in arch else "plt", activation="jumprelu", n_layers=len(saes),
                          d_in=int(first.cfg.d_in), d_out=int(first.cfg.d_out), d_transcoder=int(first.cfg.d_sae))
    tc = Transcoders(spec)
    with torch.no_grad():
        for layer, sae in enumerate(saes):
            tc.W_enc[layer] = sae.W_enc.detach().float().cpu().T
            tc.b_enc[layer] = sae.b_enc.detach().float().cpu()
            tc.W_dec[layer].copy_(sae.W_dec.detach().float().cpu()[:, None])
            tc.b_dec[layer] = sae.b_dec.detach().float().cpu()
            thr = getattr(sae, "threshold", None)
            tc.threshold[layer] = 0 if thr is None else thr.detach().float().cpu()
            if tc.W_skip is not None:
                tc.W_skip[layer] = sae.W_skip.detach().float().cpu()
    tc.meta = {"hooks": {"in": getattr(first.cfg.metadata, "hook_name", None),
                         "out": getattr(first.cfg.metadata, "hook_name_out", None)}}
    return tc.eval().requires_grad_(False)


__all__ = ["ACTIVATIONS", "KINDS", "TOPK_NOTE", "TranscoderSpec", "Transcoders", "from_saelens", "load_transcoders",
           "save_transcoders"]
