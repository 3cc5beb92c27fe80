"""Jacobian lens files (interp.lens.io, interp.lens.cache): the reference jlens package's layout, keys and dtypes
both ways (a file written here from that layout loads; a file saved here has it), refusals in one line of files
that are not the format or were made for another model, the `lens=` spec, and the cache."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest
import torch

from interp.errors import ConfigError
from interp.lens import JacobianLens, load_lens, obtain_jacobian_lens, resolve_lens_spec, save_lens

MODEL = SimpleNamespace(name="tiny", n_layers=4, d_model=8)


def reference_file(path, d=8, layers=(0, 1, 2), dtype=torch.float16, n_prompts=3):
    """What the reference's JacobianLens.save writes: torch.save of this dict (float16 J by default)."""
    g = torch.Generator().manual_seed(0)
    J = {ly: torch.randn(d, d, generator=g).to(dtype) for ly in layers}
    torch.save({"J": J, "n_prompts": n_prompts, "source_layers": list(layers), "d_model": d}, path)
    return J


def test_a_reference_layout_file_loads(tmp_path):
    J = reference_file(tmp_path / "lens.pt")
    lens = load_lens(tmp_path / "lens.pt", MODEL)
    assert lens.source_layers == [0, 1, 2] and lens.n_prompts == 3 and lens.target_layer == 3
    for ly, m in J.items():
        assert lens.J[ly].dtype == torch.float32 and torch.equal(lens.J[ly], m.float())
    h = torch.randn(5, 8)
    assert torch.equal(lens.transport(3, h), h)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_saved_lens_has_the_reference_layout(tmp_path, dtype):
    lens = JacobianLens({0: torch.randn(8, 8), 2: torch.randn(8, 8)}, n_prompts=5, target_layer=3, n_layers=4,
                        metadata={"skip_first": 16})
    save_lens(lens, tmp_path / "lens.pt", dtype=dtype)
    raw = torch.load(tmp_path / "lens.pt", map_location="cpu", weights_only=True)
    assert set(raw) == {"J", "n_prompts", "source_layers", "d_model", "metadata"}
    assert raw["source_layers"] == [0, 2] and raw["n_prompts"] == 5 and raw["d_model"] == 8
    assert all(isinstance(k, int) and v.dtype == dtype and v.shape == (8, 8) for k, v in raw["J"].items())
    assert raw["metadata"]["target_layer"] == 3 and raw["metadata"]["skip_first"] == 16
    back = load_lens(tmp_path / "lens.pt", MODEL)
    for ly in (0, 2):
        assert torch.equal(back.J[ly], lens.J[ly].to(dtype).float())
    save_lens(lens, tmp_path / "lens.safetensors")  # the cache's layout, same content
    assert torch.equal(load_lens(tmp_path / "lens.safetensors").J[2], lens.J[2])


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and isinstance(exc.value, ConfigError), msg
    return msg


def test_files_that_are_not_the_format_are_refused(tmp_path):
    (tmp_path / "noise.pt").write_bytes(b"\x00not a pickle at all")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    torch.save({"jacobian_sum": {}, "n_done": 1, "next_idx": 1}, tmp_path / "ckpt.pt")
    torch.save({"J": {0: torch.zeros(8, 4)}, "n_prompts": 1, "source_layers": [0], "d_model": 8}, tmp_path / "shape.pt")
    (tmp_path / "evil.pt").write_bytes(pickle.dumps(SimpleNamespace(x=1)))
    for name, why in [("noise.pt", "weights_only"), ("other.pt", "missing"), ("ckpt.pt", "checkpoint"),
                      ("shape.pt", "not \\[8, 8\\]"), ("evil.pt", "weights_only"), ("absent.pt", "existing")]:
        with pytest.raises(ConfigError, match=why) as e:
            load_lens(tmp_path / name, MODEL)
        assert "lens=" in one_line(e)


def test_a_lens_for_another_model_is_refused_by_name(tmp_path):
    reference_file(tmp_path / "wide.pt", d=16)
    with pytest.raises(ConfigError, match="d_model=16, tiny has d_model=8") as e:
        load_lens(tmp_path / "wide.pt", MODEL)
    one_line(e)
    reference_file(tmp_path / "deep.pt", layers=tuple(range(9)))
    with pytest.raises(ConfigError, match="tiny has 4 layers") as e:
        load_lens(tmp_path / "deep.pt", MODEL)
    one_line(e)
    lens = JacobianLens({0: torch.eye(8)}, n_prompts=1, target_layer=1, n_layers=6)
    save_lens(lens, tmp_path / "six.pt")
    with pytest.raises(ConfigError, match="6-layer model") as e:
        load_lens(tmp_path / "six.pt", MODEL)
    one_line(e)


def test_lens_spec(tmp_path, monkeypatch):
    reference_file(tmp_path / "lens.pt")
    assert resolve_lens_spec(str(tmp_path)) == tmp_path / "lens.pt"
    assert resolve_lens_spec(str(tmp_path / "lens.pt")) == tmp_path / "lens.pt"
    monkeypatch.delenv("INTERP_ONLINE", raising=False)
    with pytest.raises(ConfigError, match="INTERP_ONLINE=1") as e:
        resolve_lens_spec("jlens:someone/lenses/smollm2/jlens/wiki/SmolLM2_jacobian_lens.pt")
    one_line(e)
    for bad in ["jlens:someone/lenses", str(tmp_path / "nothing")]:
        with pytest.raises(ConfigError) as e:
            resolve_lens_spec(bad)
        one_line(e)


def test_the_cache_fits_once(tmp_path, monkeypatch):
    from test_lens_jacobian import Linear, Stack, prompts

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    model = Stack([Linear(8) for _ in range(3)], 8)
    ps = prompts(2, 20)
    lens, info = obtain_jacobian_lens(model, ps, skip_first=4, progress=False)
    again, info2 = obtain_jacobian_lens(model, ps, skip_first=4, batch=3, progress=False)
    assert not info["cached"] and info2["cached"] and info["key"] == info2["key"] and info["fit_seconds"] > 0
    assert all(torch.equal(lens.J[ly], again.J[ly]) for ly in lens.source_layers)
    _, info3 = obtain_jacobian_lens(model, ps, skip_first=5, progress=False)
    assert not info3["cached"] and info3["key"] != info["key"]
    assert not list(tmp_path.rglob("*.checkpoint.safetensors"))
