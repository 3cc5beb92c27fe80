"""Errors that help: a typo in a probe, field (dotted --set keys too), size, model or data name gets a "did you mean"
(difflib), and a path-valued field that names nothing says the path does not exist before the forms it accepts.
Still one line on stderr, exit 2, before torch is imported, and no run directory."""

from __future__ import annotations

import subprocess
import sys

import pytest

# each case: the command's arguments, then what its one line must hold (in order)
CASES = {
    "probe": (["run", "circut"], ["probe='circut' is invalid: did you mean circuits? one of atoms,"]),
    "probe in ls": (["ls", "--probe", "logit_len"], ["did you mean logit_lens?"]),
    "field": (["run", "circuits", "--set", "transcoder=x"], ["transcoder='x'", "did you mean transcoders?"]),
    "nested field": (["run", "sae_features", "--set", "sae.hok=x"], ["sae.hok='x'", "did you mean sae.hook?"]),
    "nested parent": (["run", "sae_features", "--set", "sea.hook=x"], ["sea.hook='x'", "did you mean sae.hook?"]),
    "nested field alone": (["run", "sae_features", "--set", "hook=x"], ["hook='x'", "did you mean sae.hook?"]),
    "size": (["run", "logit_lens", "--set", "size=quik"], ["size='quik'", "did you mean quick?"]),
    "choice": (["run", "circuits", "--set", "kind=pll"], ["kind='pll'", "did you mean plt?"]),
    "model": (["run", "logit_lens", "--model", "smolm2-135m"], ["unknown model 'smolm2-135m'",
                                                                 "did you mean smollm2-135m?"]),
    "transcoders path": (["run", "circuits", "--set", "transcoders=/nonexistent"],
                         ["transcoders: /nonexistent does not exist; accepted: \"train\", a directory"]),
    "transcoders typo": (["run", "circuits", "--set", "transcoders=trian"], ["did you mean train?"]),
    "data path": (["run", "circuits", "--set", "data=/nonexistent/corpus"],
                  ["data: /nonexistent/corpus does not exist; accepted: builtin,"]),
    "data file": (["run", "circuits", "--set", "data=missing.txt"], ["data: missing.txt does not exist"]),
    "data typo": (["run", "circuits", "--set", "data=bultin"], ["did you mean builtin?"]),
    "sae path": (["run", "sae_features", "--set", "sae.source=/nonexistent/sae"],
                 ["sae.source: /nonexistent/sae does not exist; accepted: a SAELens SAE directory"]),
    "jsonl path": (["run", "patching", "--set", "data=/nonexistent/pairs.jsonl"],
                   ["data: /nonexistent/pairs.jsonl does not exist; accepted: a JSONL file"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_typos_get_a_suggestion_in_one_line_before_torch(name, tmp_path):
    args, needles = CASES[name]
    code = ("import sys; from interp.cli import main\n"
            f"rc = main({[*args, '--out', str(tmp_path / 'out')]!r})\n"
            "heavy = [m for m in ('torch', 'transformers', 'transformer_lens') if m in sys.modules]\n"
            "print(rc, heavy)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.stdout.strip() == "2 []", r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    at = 0
    for needle in needles:
        found = line.find(needle, at)
        assert found >= 0, f"{needle!r} not in (or out of order in) {line!r}"
        at = found + len(needle)
    assert not (tmp_path / "out").exists(), "a run directory for bad input"


def test_no_suggestion_where_nothing_is_close():
    from interp.errors import ConfigError
    from interp.registry import get_probe

    with pytest.raises(ConfigError) as e:
        get_probe("zzzzzz")
    assert "did you mean" not in str(e.value) and "one of atoms" in str(e.value)
