"""Security: no unpickling anywhere in the packages; the dashboard binds 127.0.0.1 by default."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["interp", "interp_probes", "interp_app"]
BAD = [
    (re.compile(r"\bpickle\.loads?\("), "pickle.load"),
    (re.compile(r"\bcloudpickle\.loads?\("), "cloudpickle.load"),
    (re.compile(r"\bdill\.loads?\("), "dill.load"),
    (re.compile(r"allow_pickle\s*=\s*True"), "numpy allow_pickle=True"),
    (re.compile(r"\bjoblib\.load\("), "joblib.load"),
    (re.compile(r"\bpd\.read_pickle\(|\bread_pickle\("), "pandas read_pickle"),
]


def test_no_file_is_unpickled():
    offenders = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for pattern, what in BAD:
                if pattern.search(text):
                    offenders.append(f"{path.relative_to(ROOT)}: {what}")
            for m in re.finditer(r"torch\.load\(([^)]*)\)", text):
                if "weights_only=True" not in m.group(1):
                    offenders.append(f"{path.relative_to(ROOT)}: torch.load without weights_only=True")
    assert not offenders, offenders


def test_dashboard_binds_loopback_by_default():
    from interp.cli import build_parser

    args = build_parser().parse_args(["app"])
    assert args.host == "127.0.0.1"
    args = build_parser().parse_args(["demo"])
    assert args.host == "127.0.0.1"
