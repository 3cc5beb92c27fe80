"""Run store: atomic writes, hashes, status last, listing, damage detection, path safety."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from interp.errors import DamagedRun, InterpError
from interp.store import RunWriter, list_runs, load_run, resolve_run


def make_run(root, fail=False):
    w = RunWriter.create(root, "demo", {"a": 1}, "ab" * 32, 0, {"interp": "0.1.0"})
    w.save_tensors("scores", {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    w.save_table("table", pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}))
    w.save_json("extra", {"k": [1, 2]})
    w.log_metrics(m=1.5, n=np.float32(2.0), bad=float("nan"))
    w.finish(RuntimeError("boom") if fail else None)
    return w.path


def test_round_trip(out_dir):
    path = make_run(out_dir)
    m = json.loads((path / "manifest.json").read_text())
    assert m["status"] == "done" and set(m["files"]) == {"scores.safetensors", "table.parquet", "extra.json"}
    assert m["metrics"] == {"m": 1.5, "n": 2.0, "bad": None}
    run = load_run(path)
    assert run.tensor_file("scores")["x"].shape == (2, 3)
    assert list(run.table("table")["b"]) == ["x", "y"]
    assert run.json("extra") == {"k": [1, 2]}
    assert not [p for p in path.iterdir() if p.name.startswith(".")], "temporary files left behind"


def test_failed_and_listing(out_dir):
    ok, bad = make_run(out_dir), make_run(out_dir, fail=True)
    assert ok != bad, "two runs of one config must get distinct directories"
    runs = {r.path: r for r in list_runs(out_dir)}
    assert runs[ok].status == "done" and runs[bad].status == "failed" and "boom" in runs[bad].error


def test_interrupted_run_is_not_done(out_dir):
    w = RunWriter.create(out_dir, "demo", {}, "cd" * 32, 0)
    w.manifest["pid"] = 2**22 + 12345  # a pid that does not exist
    w.flush()
    (info,) = list_runs(out_dir)
    assert info.status == "interrupted"


@pytest.mark.parametrize("damage", ["truncate_tensor", "flip_parquet", "bad_json", "missing_file"])
def test_damage_is_detected(out_dir, damage):
    path = make_run(out_dir)
    if damage == "truncate_tensor":
        p = path / "scores.safetensors"
        p.write_bytes(p.read_bytes()[:20])
    elif damage == "flip_parquet":
        p = path / "table.parquet"
        b = bytearray(p.read_bytes())
        b[len(b) // 2] ^= 0xFF
        p.write_bytes(bytes(b))
    elif damage == "bad_json":
        (path / "manifest.json").write_text("{not json")
    else:
        (path / "extra.json").unlink()
    (info,) = list_runs(out_dir)
    assert info.status == "damaged" and info.error
    with pytest.raises(DamagedRun):
        load_run(path)


def test_paths_stay_inside_root(out_dir):
    path = make_run(out_dir)
    assert resolve_run(out_dir, f"demo/{path.name}") == path.resolve()
    for ref in ("../../etc/passwd", "/etc", "demo/../../x"):
        with pytest.raises(InterpError):
            resolve_run(out_dir, ref)
    w = RunWriter.create(out_dir, "demo", {}, "ef" * 32, 0)
    with pytest.raises(InterpError):
        w.save_json("../escape", {})


def test_directory_artifact(out_dir):
    w = RunWriter.create(out_dir, "demo", {}, "12" * 32, 0)

    def write(d):
        (d / "cfg.json").write_text("{}")
        (d / "w.safetensors").write_bytes(b"x")

    w.save_dir("sae", write)
    w.finish()
    run = load_run(w.path)
    assert run.dir_path("sae").is_dir() and "sae/cfg.json" in run.manifest["files"]
    os.truncate(w.path / "sae" / "w.safetensors", 0)
    with pytest.raises(DamagedRun):
        load_run(w.path)


def test_lens_artifact_is_the_reference_layout(out_dir):
    """A run's lens.pt is the reference jlens dict (J float32, n_prompts, source_layers, d_model), hashed in the
    manifest, loaded back through weights_only; a file that is not that layout is refused in one line."""
    import torch

    from interp.errors import ConfigError
    from interp.lens import JacobianLens

    g = torch.Generator().manual_seed(0)
    J = {0: torch.randn(4, 4, generator=g), 1: torch.randn(4, 4, generator=g)}
    w = RunWriter.create(out_dir, "demo", {"a": 1}, "cd" * 32, 0, {"interp": "0.1.0"})
    w.save_lens("lens", JacobianLens(J, n_prompts=3, target_layer=2, n_layers=3))
    w.finish()
    run = load_run(w.path)
    assert "lens.pt" in run.manifest["files"]
    raw = torch.load(w.path / "lens.pt", weights_only=True)
    assert {"J", "n_prompts", "source_layers", "d_model"} <= set(raw)
    assert raw["J"][0].dtype == torch.float32 and raw["n_prompts"] == 3 and raw["source_layers"] == [0, 1]
    back = run.lens("lens")
    assert all(torch.equal(back.J[k], J[k]) for k in J)
    torch.save({"weights": torch.zeros(2)}, w.path / "lens.pt")  # damaged: not the layout
    with pytest.raises(ConfigError, match="reference format"):
        run.lens("lens")
