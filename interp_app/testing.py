"""Headless helpers shared by the dashboard tests and the benchmarks (tests/app, bench/dashboard.py).

    done, errors = micro_runs(root, ["logit_lens"], model_for=lambda name: model)
    at = app_test(run=ref(done["logit_lens"])).run()      # with INTERP_OUT=root in the environment
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

APP = Path(__file__).resolve().parent / "main.py"
"""The dashboard's entry point, as `streamlit run` and AppTest take it."""


def ref(path: Path) -> str:
    """"<probe>/<run_id>" of a run directory: what ?run= takes."""
    return f"{path.parent.name}/{path.name}"


def new_run(root: Path, probe: str, before: set[Path]) -> Path:
    """The one run directory of `probe` under `root` that is not in `before`."""
    (new,) = set((root / probe).iterdir()) - before
    return new


def micro_runs(
    root: Path,
    names: Iterable[str],
    overrides: dict[str, Any] | None = None,
    model_for: Callable[[str], Any] = lambda name: None,
) -> tuple[dict[str, Path], dict[str, str]]:
    """Each probe's `micro` run under `root`, made by the real probe. Returns (probe -> run directory,
    probe -> error of a run that failed: its directory, recorded as failed, is still returned).

    `model_for(name)` gives the loaded model to share for the config's model name, or None to load it.
    """
    from interp.runner import execute, prepare

    done: dict[str, Path] = {}
    errors: dict[str, str] = {}
    for name in sorted(names):
        spec, cfg = prepare(name, {"size": "micro", **(overrides or {})})
        before = set((root / name).iterdir()) if (root / name).is_dir() else set()
        try:
            done[name] = execute(spec, cfg, out=root, model=model_for(cfg.model), progress=False)
        except Exception as e:  # noqa: BLE001 - recorded in the run; the caller reports it
            if type(e).__name__ == "_Terminated":  # the runner's SIGTERM: stop, not just this run
                raise
            errors[name] = f"{type(e).__name__}: {e}"
            done[name] = new_run(root, name, before)
    return done, errors


def app_test(run: str | None = None, timeout: float = 60, **query: str):
    """The dashboard as a `streamlit.testing.v1.AppTest`, not yet run, with ?run= and other query
    parameters set. It reads the artifacts root from $INTERP_OUT when it runs."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=timeout)
    if run is not None:
        query["run"] = run
    for key, value in query.items():
        at.query_params[key] = value
    return at
