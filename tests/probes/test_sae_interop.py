"""The SAE atoms trains loads through interp.load_sae into sae_falsification (`sae=<run dir>`) and self_interp
(`sae=<run dir>`), micro size on the embedded model: each run uses atoms' SAE (its hook and its decoder
rows), not one of its own."""

from __future__ import annotations

import numpy as np

import interp
from interp.runner import execute, prepare
from interp.store import load_run


def test_atoms_sae_feeds_sae_falsification_and_self_interp(micro_runs, model, tmp_path):
    atoms = micro_runs("atoms")
    sae = interp.load_sae(str(atoms))  # the run's "sae" (standard), read back through SAELens
    hook = sae.cfg.metadata.hook_name
    assert hook == load_run(atoms).config["hook"]
    from sae_lens import SAE
    from safetensors import safe_open

    for name in ("tsae", "sae"):  # both of atoms' SAEs read back through SAELens, with their sparsity files
        other = SAE.load_from_disk(str(atoms / name))
        with safe_open(str(atoms / name / "sparsity.safetensors"), framework="pt", device="cpu") as f:
            log10 = f.get_tensor("sparsity")
        assert log10.shape == (other.cfg.d_sae,) and float((10 ** log10).sum()) > 1, name  # mean L0 > 1

    spec, cfg = prepare("sae_falsification", {"size": "micro", "sae.source": str(atoms)})
    sf = load_run(execute(spec, cfg, out=tmp_path, model=model, progress=False))
    m = sf.metrics
    assert m["sae_source"] == str(atoms) and m["sae_from_cache"] is False
    assert m["sae_hook_name"] == hook != cfg.sae.hook, (m["sae_hook_name"], cfg.sae.hook)  # atoms' hook, not its own
    assert m["sae_d_sae"] == sae.cfg.d_sae

    layer = int(hook.split(".")[1])
    spec, cfg = prepare("self_interp", {"size": "micro", "sae.source": str(atoms), "layer": layer,
                                        "sae_branch": "token_labels", "sae_max_latents": 2, "sae_trials": 1,
                                        "sae_scales": [1.0], "sae_variants": ["identity"]})
    si = load_run(execute(spec, cfg, out=tmp_path, model=model, progress=False))
    vecs = si.tensor_file("sae_vectors")
    rows = sae.W_dec.detach().float().numpy()[vecs["latents"]]
    assert np.allclose(vecs["vectors"], rows, atol=1e-6), "self_interp's SAE vectors are not atoms' decoder rows"
    assert si.metrics["sae_d_sae"] == sae.cfg.d_sae

