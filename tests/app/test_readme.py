"""Every ```python block of the README runs, in order, in one namespace (the API a new user meets first).

Run late in a session on purpose: other tests have imported every interp submodule by then, which is what
once made `interp.capture(...)` fail with "'module' object is not callable"."""

from __future__ import annotations

import re

import pytest
from app_fixtures import ROOT

pytestmark = pytest.mark.slow


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 2, "the README lost its API examples"
    monkeypatch.chdir(tmp_path)  # interp.run writes ./artifacts, interp.list_runs("artifacts") reads it
    monkeypatch.delenv("INTERP_OUT", raising=False)
    ns: dict = {}  # a reader copying the blocks in order: nothing defined but what the README defines
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"README.md python block {i + 1}", "exec"), ns)
        except Exception as e:  # the block, its line and the error
            raise AssertionError(f"README python block {i + 1} fails: {type(e).__name__}: {e}\n{code}") from e
    assert ns["run"].metrics["final_top1"] == " Paris"
    assert callable(ns["interp"].capture) and ns["stats"]
