"""A model directory that cannot work fails `interp run` with exit 2 and one line naming the path and the problem,
before any probe work: encoder-only or unknown architectures, missing, pickled-only, truncated or misshapen
weights, a missing tokenizer."""

from __future__ import annotations

import json
import shutil

import pytest

from interp.cli import main

pytestmark = pytest.mark.slow


def _trunc(d):
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _shape(d):
    c = json.loads((d / "config.json").read_text())
    c["intermediate_size"] *= 2
    (d / "config.json").write_text(json.dumps(c))


def _no_tokenizer(d):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (d / name).unlink()


def _bert(d):
    from transformers import AutoConfig

    (d / "config.json").unlink()
    AutoConfig.for_model("bert").save_pretrained(d)


def _unknown(d):
    c = json.loads((d / "config.json").read_text())
    c.update(model_type="frobnicator", architectures=["FrobForCausalLM"])
    (d / "config.json").write_text(json.dumps(c))


CASES = {
    "truncated": (_trunc, "is truncated"),
    "wrong shape": (_shape, "with shape [128, 256], but its config gives [128, 512]"),
    "no tokenizer": (_no_tokenizer, "no tokenizer"),
    "encoder-only": (_bert, "not a decoder-only causal LM"),
    "unknown architecture": (_unknown, "unknown architecture model_type='frobnicator'"),
    "no weights": (lambda d: (d / "model.safetensors").unlink(), "no *.safetensors weights"),
    "pickled only": (lambda d: (d / "model.safetensors").rename(d / "pytorch_model.bin"),
                     "pickled weights are never loaded"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_model_directory_fails_in_one_line(case, family_dirs, tmp_path, capsys):
    d = tmp_path / "model"
    shutil.copytree(family_dirs("llama"), d)
    damage, expected = CASES[case]
    damage(d)
    capsys.readouterr()  # the fixture's own output (building the tiny model)
    rc = main(["run", "logit_lens", "--model", str(d), "--size", "micro", "--out", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1 and str(d) in err[0] and expected in err[0], err
