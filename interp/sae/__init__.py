"""SAEs for the probes: collect an activation buffer, train, calibrate L0, save, load, cache.

One place for every probe that needs a sparse autoencoder (atoms, sae_falsification, sae_features,
self_interp). The SAEs are SAELens objects (`sae_lens.StandardSAE`, `JumpReLUSAE`, `TopKSAE`), built from
SAELens's own config classes and saved with its own `save_model`, so `sae_lens.SAE.load_from_disk` loads
what this package writes and this package loads any SAELens directory. The hook an SAE reads is in its
config (`sae.cfg.metadata.hook_name`, a TransformerLens hook name); consumers take the site from there
(`sae_site(sae)`).

    buf = collect_activations(model, batches, {Site("resid_post", 6): 100_000})
    cfg = SAETrainConfig(architecture="jumprelu", d_sae=2304, target_l0=16)
    sae = train_sae(buf.acts[site], cfg, metadata=sae_metadata(model, site))
    save_sae(sae, out_dir); sae2 = load_sae(out_dir)
    sae = cached_sae(model, site, cfg, data_fn=lambda: acts, data_key="corpus sha + sizes")

Training is a small loop of the toolkit's own on an in-memory buffer (Adam, cosine decay, unit-norm
decoder rows renormalised after each step), with an L0 controller that steers the sparsity coefficient
towards `target_l0` and a calibration that then sets the mean L0 on training tokens to the target within
a tolerance (one shared scalar, bisected on stored pre-activations): a common factor on every JumpReLU
threshold, or a common offset on a standard SAE's encoder bias. An optional affine input transform
z = (x - shift) @ W (e.g. whitening) is applied to the buffer before training and folded into the saved
weights, so the saved SAE reads raw activations. SAELens's own SAETrainer is the benchmark's baseline
(bench/sae.py), passed to `train_sae` as `fit=`.

One concern a module:

- `config`: `SAETrainConfig` (torch-free), its validation and cache key;
- `acts`: `collect_activations`, the `ActivationBuffer`; `collect_stacked` (several sites at the same tokens into
  one preallocated buffer, e.g. a transcoder set's pairs);
- `kernel`: the training-time SAE and its fused forward/backward; encode / decode / pre-activations of
  SAELens SAEs; the `InputTransform`;
- `train`: the training loop and `train_sae`;
- `calibrate`: L0 calibration and firing densities;
- `io`: building SAELens SAEs from weights, folding a transform in, metadata, save / load / round trip;
- `cache`: `cached_sae` and its key;
- `transcoder`: `Transcoders`, a set of per-layer, skip or cross-layer transcoders (MLP input -> MLP output), saved
  as SAELens transcoders where SAELens has the class and in circuit-tracer's layout otherwise;
- `transcoder_train`: `train_transcoders` on (MLP input, MLP output) pairs, `transcoder_quality` (FVE, L0, dead
  fraction, spliced-in loss against clean and zero-ablation), `cached_transcoders`;
- `source`: `load_sae(spec)` for a SAELens directory, a run directory or a SAELens release id (what
  `interp.load_sae` is), and `resolve_sae_spec`, its torch-free check.

Names load on first use, so `import interp.sae` and the torch-free names (`SAETrainConfig`,
`interp.sae.source.resolve_sae_spec`) import no torch.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_LAZY = {
    "ARCHITECTURES": "config",
    "SAETrainConfig": "config",
    "ActivationBuffer": "acts",
    "collect_activations": "acts",
    "collect_stacked": "acts",
    "InputTransform": "kernel",
    "active_from_pre": "kernel",
    "decode": "kernel",
    "encode": "kernel",
    "pre_acts": "kernel",
    "sae_architecture": "kernel",
    "TrainLog": "train",
    "train_sae": "train",
    "calibrate_l0": "calibrate",
    "firing_density": "calibrate",
    "set_density": "calibrate",
    "build_sae": "io",
    "fold_input_transform": "io",
    "load_density": "io",
    "load_sae": "io",
    "roundtrip_check": "io",
    "sae_metadata": "io",
    "sae_site": "io",
    "sae_state": "io",
    "save_density": "io",
    "save_sae": "io",
    "cached_sae": "cache",
    "sae_cache_key": "cache",
    "TranscoderTrainConfig": "config",
    "TranscoderSpec": "transcoder",
    "Transcoders": "transcoder",
    "load_transcoders": "transcoder",
    "save_transcoders": "transcoder",
    "train_transcoders": "transcoder_train",
    "transcoder_quality": "transcoder_train",
    "cached_transcoders": "transcoder_train",
    "from_saelens": "transcoder",
}
"""Public name -> the submodule that defines it. `load_sae` here loads a SAELens directory; the spec loader
(directories, runs, releases) is `interp.sae.source.load_sae`, exported as `interp.load_sae`."""


__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY)
