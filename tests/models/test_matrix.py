"""The coverage matrix (tests/models/matrix.py) in the suite: every probe's micro config with its defaults on a
tiny random model of every family is `ok` or a named refusal before the model loads, never a crash; at least
90 % of the cells are ok, and docs/architectures.md says what this run found."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from interp.registry import probes_available
from interp.testing import FAMILIES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matrix import run_matrix  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """The whole matrix, run once over two worker processes (qwen2 and gpt2 through `interp run` itself)."""
    return run_matrix(list(FAMILIES), sorted(probes_available()), tmp_path_factory.mktemp("matrix"))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_probe_runs_or_is_refused_by_name(family, matrix):
    row = matrix[family]
    crashes = {p: c for p, c in row.items() if c["status"] == "crash"}
    assert not crashes, f"{family}: {crashes}"
    for p, c in row.items():
        if c["status"] == "refused":  # one line naming the probe or its field, the architecture and the capability
            assert "\n" not in c["why"] and (p in c["why"] or "=" in c["why"]), (p, c["why"])


def test_coverage_and_the_architectures_page(matrix):
    cells = [(f, p, c) for f, row in matrix.items() for p, c in row.items()]
    ok = sum(c["status"] == "ok" for _, _, c in cells)
    assert ok >= 0.9 * len(cells), f"{ok} of {len(cells)} cells ok"
    page = (ROOT / "docs" / "architectures.md").read_text()
    assert f"**{ok} of {len(cells)} cells ok**" in page, "regenerate: python tests/models/matrix.py --out " \
                                                          "docs/architectures.md"
    for fam, row in matrix.items():
        line = next(ln for ln in page.splitlines() if ln.startswith(f"| {fam} |"))
        shown = [re.sub(r" \[\d+\]$", "", x.strip()) for x in line.strip("|").split("|")[1:]]
        assert shown == [row[p]["status"] for p in sorted(row)], f"docs/architectures.md is stale for {fam}"
