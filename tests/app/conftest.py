"""Fixtures of the dashboard tests: the fixture root of real runs, and an AppTest factory."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from app_fixtures import (
    DAMAGE,
    Runs,
    copy_run,
    damage,
    dead_pid,
    edit_manifest,
    new_run,
    ref,
    selected_probes,
)

from interp.registry import get_probe
from interp.runner import execute
from interp_app.testing import app_test as new_app_test
from interp_app.testing import micro_runs


@pytest.fixture(scope="session")
def runs(tmp_path_factory, request) -> Runs:
    """The fixture root described in app_fixtures.py; built once per session."""
    base = tmp_path_factory.mktemp("dashboard")
    root, outside = base / "artifacts", base / "outside"
    root.mkdir()
    outside.mkdir()
    out = Runs(root)
    model_for = lambda name: request.getfixturevalue("model") if name == "smollm2-135m" else None
    done, out.errors = micro_runs(root, selected_probes(), model_for=model_for)
    out.done = {name: ref(path) for name, path in done.items()}

    src = root / out.done["logit_lens"]
    # built without prepare(): its pre-load check would refuse the prompt; the probe's own check fails the run
    spec = get_probe("logit_lens")
    cfg = spec.config({"size": "micro", "max_tokens": 1})
    before = set(src.parent.iterdir())
    with pytest.raises(Exception, match="max_tokens"):
        execute(spec, cfg, out=root, model=request.getfixturevalue("model"), progress=False)
    out.failed = ref(new_run(root, "logit_lens", before))

    host = socket.gethostname()
    interrupted = copy_run(src, 0xA001)
    edit_manifest(interrupted, status="running", finished=None, pid=dead_pid(), host=host)
    out.interrupted = ref(interrupted)
    running = copy_run(src, 0xA002)
    edit_manifest(running, status="running", finished=None, pid=os.getpid(), host=host)
    out.running = ref(running)
    for i, kind in enumerate(DAMAGE):
        d = copy_run(src, 0xD000 + i)
        damage(d, kind, outside)
        out.damaged[kind] = ref(d)

    far = copy_run(src, 0xE001, parent=outside)
    (root / "logit_lens" / far.name).symlink_to(far, target_is_directory=True)
    out.outside = ref(root / "logit_lens" / far.name)
    (root / "unregistered_probe").mkdir()
    foreign = copy_run(src, 0xF001, parent=root / "unregistered_probe")
    edit_manifest(foreign, probe="unregistered_probe")
    out.foreign = ref(foreign)
    return out


@pytest.fixture
def app_test(monkeypatch):
    """app_test(root, run=None, **query): the dashboard run once under AppTest with INTERP_OUT=root (and
    ?run=, or other query parameters such as sweep=)."""
    def make(root: Path, run: str | None = None, **query: str):
        monkeypatch.setenv("INTERP_OUT", str(root))
        return new_app_test(run, **query).run()

    return make
