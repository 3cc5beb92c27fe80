"""Models: embedded names, HF ids and local paths, loaded behind one hooked `Model`.

    res = resolve_model("smollm2-135m")          # where the weights are; torch-free, no network
    check_architecture(res); check_model_files(res)
    model = load_model("smollm2-135m", device="auto")
    with model.hooks([(Site("mlp_post", 3), fn)]):
        logits = model(ids, mask)

Resolution never touches the network: embedded name, then local directory, then the HF cache with
``local_files_only=True``; only ``INTERP_ONLINE=1`` lets a hub id download.

One job a module:

- `resolve`: `resolve_model` and `Resolved`, and the checks before any weight loads (architecture, files,
  layers, context, a token counter: `model_limits`); torch-free at import and in use, so the CLI checks a name
  in a second;
- `device`: `pick_device`, `pick_dtype`, `set_cpu_threads`, whether the weights fit the free memory
  (`free_memory`, `check_fits`), and `synchronize` (wait for a device's queued kernels: every timer's ends);
- `model`: `ModelInfo` and `Model` (hooks at sites, forward, tokens, the unembedding), `HookFn`;
- `load`: `load_model` (resolve, check, load the HF weights, wrap them in the TransformerBridge or the nnsight
  backend) and `twin`.

Names load on first use from the module that defines them (patch a name there, not here), so
`import interp.models` and `interp.models.resolve` import no torch.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_LAZY = {
    "Resolved": "resolve",
    "check_architecture": "resolve",
    "check_model_files": "resolve",
    "embedded_names": "resolve",
    "model_family": "resolve",
    "model_limits": "resolve",
    "model_n_ctx": "resolve",
    "model_n_layers": "resolve",
    "online": "resolve",
    "resolve_model": "resolve",
    "token_counter": "resolve",
    "check_fits": "device",
    "free_memory": "device",
    "pick_device": "device",
    "pick_dtype": "device",
    "set_cpu_threads": "device",
    "synchronize": "device",
    "HookFn": "model",
    "Model": "model",
    "ModelInfo": "model",
    "load_model": "load",
    "twin": "load",
}
"""Public name -> the submodule that defines it."""


__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY)
