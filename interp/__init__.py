"""interp: hook-based mechanistic-interpretability probes, with a run store and a dashboard.

import interp
run = interp.run("logit_lens", prompt="The capital of France is")
run.metrics["final_top1"]            # ' Paris'
model = interp.load_model("smollm2-135m")
stats = interp.capture(model, batches, {interp.Site("mlp_post", 3): [interp.AbsMean()]})

The public API is the names of `interp` (`__all__`) and the public modules below; a probe (interp_probes/) or
the dashboard (interp_app/) imports from nothing else (tests/unit/test_public_surface.py), and every other module,
`interp._x` above all, may change without notice:

    interp.config      ProbeConfig, build_config and the field types a probe's config declares (Range, Subset, ...)
    interp.context     RunContext, what every probe gets: model, seeded RNGs, the run's store, progress
    interp.corpora     the project's own versioned English corpus and its name tables (FEMALE_NAMES, MALE_NAMES)
    interp.data        text sources: the built-in corpus, .txt/.jsonl files, HF datasets; token windows
    interp.display     how a metric, a run and a sweep read in a table or a notebook (fmt, _repr_html_)
    interp.embedder    the packaged sentence embedder (all-MiniLM-L6-v2), when installed
    interp.errors      the exceptions front ends turn into one-line messages (ConfigError, NumericError, ...)
    interp.generate    batched greedy decoding and perplexity
    interp.lens        logit, tuned and Jacobian lenses: one readout; fit, merge, cache, the reference's file
    interp.models      load_model, Model, ModelInfo and model resolution (a package, an index of its modules)
    interp.precision   dtypes and autocast where the hardware runs them natively
    interp.registry    @probe and the one list of probes the CLI, sweeps and dashboard read
    interp.replacement the local replacement model's frozen norm denominators and attention patterns
    interp.runner      run, and its two halves prepare / execute (validate; then run into a store)
    interp.sae         SAEs and transcoders: collect, train, calibrate, encode / decode, save, load, cache
    interp.sites       Site, parse_site and the token-first view of an activation
    interp.store       run directories: Run, RunInfo, list_runs, load_run, atomic writes
    interp.sweep       sweep files, planning and executors (run_sweep is `interp.run_sweep`)
    interp.viz         CircuitsVis attention views (the viz extra)

Interventions (ablate, scale, add, patch, steer, patch_batched, edit_weights), capture and gradients are names of
`interp` itself; their modules (`interp._intervene`, `interp._capture`, `interp.gradients`) are not public.
"""

from __future__ import annotations

import os
from importlib import import_module
from typing import Any

# libgomp's idle OpenMP threads spin 300,000 times before sleeping: alone that is fastest, but two torch
# processes sharing the cores then run ~10x slower each. 20,000 spins keep a lone run as fast (self_interp's
# adapter training 24.7 s vs 24.1 s) and make the shared case 3.7x faster; OMP_WAIT_POLICY=PASSIVE (no spin)
# is faster still when shared but 1.5x slower alone. Read when torch loads, so set before any import of it.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")

__version__ = "0.1.0"

# Torch-free names are imported eagerly; the rest load on first use so `import interp` stays fast. The modules
# behind the lazy names are private (`interp._capture`, `interp._intervene`): a public submodule named like the
# function it serves would replace that function as the package attribute once anything imported it: so sweeps
# run through `interp.run_sweep` (the package `interp.sweep` holds the rest), and tests/unit/test_api_names.py
# fails on any public function named like a submodule.
from .config import ProbeConfig, build_config
from .errors import ConfigError, DamagedRun, InterpError, ModelNotFound, NumericError
from .registry import get_probe, probe, probes_available
from .runner import run
from .sites import Site
from .store import Run, RunInfo, list_runs, load_run

#: The public modules (the docstring's list): what code outside the core may import besides `interp`'s names.
PUBLIC_MODULES = (
    "config", "context", "corpora", "data", "display", "embedder", "errors", "generate", "lens", "models",
    "precision", "registry", "replacement", "runner", "sae", "sites", "store", "sweep", "viz",
)

_LAZY = {
    "load_model": "interp.models.load",
    "Model": "interp.models.model",
    "ModelInfo": "interp.models.model",
    "capture": "interp._capture",
    "run_with_cache": "interp._capture",
    "Mean": "interp._capture",
    "AbsMean": "interp._capture",
    "Max": "interp._capture",
    "TopK": "interp._capture",
    "Welford": "interp._capture",
    "MeanSquare": "interp._capture",
    "token_mask": "interp._capture",
    "batched": "interp._capture",
    "intervene": "interp._intervene",
    "ablate": "interp._intervene",
    "scale": "interp._intervene",
    "add": "interp._intervene",
    "patch": "interp._intervene",
    "steer": "interp._intervene",
    "Steering": "interp._intervene",
    "patch_batched": "interp._intervene",
    "PatchCell": "interp._intervene",
    "edit_weights": "interp._intervene",
    "WeightEdit": "interp._intervene",
    "weights_digest": "interp._intervene",
    "warmup_schedule": "interp.schedule",
    "RunContext": "interp.context",
    "load_sae": "interp.sae.source",
    "capture_grads": "interp.gradients",
    "GradCapture": "interp.gradients",
    "run_sweep": "interp.sweep.driver",
}


def __getattr__(name: str) -> Any:
    if name in ("viz", "sweep"):  # interp.viz.attention(...): CircuitsVis views (the viz extra); interp.sweep.*
        return import_module(f"interp.{name}")
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "DamagedRun",
    "InterpError",
    "ModelNotFound",
    "NumericError",
    "ProbeConfig",
    "Run",
    "RunInfo",
    "Site",
    "build_config",
    "get_probe",
    "list_runs",
    "load_run",
    "probe",
    "probes_available",
    "run",
    *_LAZY,
]
