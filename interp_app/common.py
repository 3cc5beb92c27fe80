"""Shared page helpers: the artifacts root, cached loading through the store, status badges, intros.

Pages read runs only through these helpers (which call `interp.store`), so every page caches the
same way and nothing outside the artifacts root is ever read:

- ``artifacts_root()``: ``$INTERP_OUT`` (default ``./artifacts``), resolved.
- ``runs(root, probe=None)``: `RunInfo`s, newest first; a run is re-checked only when a file in
  its directory changes (cache key: the directory and the names, sizes and mtimes of its files,
  the manifest's among them).
- ``load(path, root)``: a `CachedRun` (a `interp.store.Run` whose tables and tensors load once);
  raises `DamagedRun` like `load_run`.
- ``resolve_ref(root, ref, probe=None)``: a ``?run=<probe>/<run_id>`` value to a run directory
  inside the root, or `InterpError`.
- ``intro(question, method, run)``: the sentence and method link every page starts with;
  ``probe_intro(spec, run)`` draws it from the probe's registration (the question in its config class
  docstring, the method link in its module docstring), as ``generic.render_run`` does above every page.
- ``metric_row(values, *tiles)``: a row of st.metric tiles whose text names metrics (``"{r2} / {q_star}"``).
- ``tabs(run, panels)``: st.tabs, each drawn by its panel(run).
- ``status_badge(status)`` / ``status_label(status)`` / ``show_status(status, error)``.
- ``fmt_value(v)`` / ``fmt_digits(v, digits)`` / ``short_metrics(metrics)`` / ``metric_items(metrics)``: metrics as
  short strings.
- ``attention_view(patterns, tokens, names)``: a CircuitsVis attention view (the viz extra) in an iframe.
- ``BLANK``: the placeholder every page's tables show for a missing value (``st.dataframe(placeholder=BLANK)``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from interp.display import fmt
from interp.errors import DamagedRun, InterpError
from interp.store import MANIFEST, Run, RunInfo, default_root, inspect_run, load_run, resolve_run, sha256_file

RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{8}-[0-9a-f]{4}$")
STATUSES = ("done", "failed", "running", "interrupted", "damaged")
_COLOUR = {"done": "green", "failed": "red", "running": "blue", "interrupted": "orange", "damaged": "red"}
_MARK = {"done": "✓", "failed": "✗", "running": "▶", "interrupted": "⏸", "damaged": "⚠"}
#: What a table shows in a missing cell (None, NaN) instead of Streamlit's "None": pass
#: ``st.dataframe(..., placeholder=BLANK)``.
BLANK = "—"
HINT = (
    "No runs under `{root}` yet. Make one with `interp run logit_lens` (seconds), or every probe's "
    "quick run with `make demo`; point the dashboard elsewhere with `INTERP_OUT=DIR` or `interp app --out DIR`."
)


# ============================================================================= the root and its runs


def artifacts_root() -> Path:
    """The artifacts root the app reads: $INTERP_OUT, default ./artifacts (resolved)."""
    return default_root().resolve()


def inside(path: Path, root: Path) -> bool:
    """Whether `path`, symlinks followed, lies inside `root` (resolved)."""
    path, root = Path(path).resolve(), Path(root).resolve()
    return path == root or root in path.parents


def _entries(run_dir: Path) -> list[os.DirEntry]:
    """The run directory's entries and those one level down (directory artifacts), links not followed.

    Entries that vanish meanwhile (a writer's temporary files) are left out.
    """
    out: list[os.DirEntry] = []
    try:
        with os.scandir(run_dir) as it:
            top = list(it)
    except (FileNotFoundError, NotADirectoryError):
        return out
    for e in top:
        out.append(e)
        if e.is_dir(follow_symlinks=False):
            try:
                with os.scandir(e.path) as sub:
                    out.extend(sub)
            except (FileNotFoundError, NotADirectoryError):
                pass
    return out


def signature(run_dir: Path) -> tuple:
    """The cache key of a run directory: (name, size, mtime) of each file in it, the manifest's included."""
    sig = []
    for e in _entries(run_dir):
        try:
            st_ = e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        sig.append((os.path.relpath(e.path, run_dir), st_.st_size, st_.st_mtime_ns))
    return tuple(sorted(sig))


def outside_links(run_dir: Path, root: Path) -> list[str]:
    """Names of the links in `run_dir` (one level down included) that point outside `root`."""
    return sorted(
        os.path.relpath(e.path, run_dir) for e in _entries(run_dir) if e.is_symlink() and not inside(Path(e.path), root)
    )


def run_dirs(root: Path, probe: str | None = None) -> list[Path]:
    """Directories `<root>/<probe>/<run_id>` that lie inside the root (links out of it are skipped)."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for probe_dir in sorted(root.iterdir()):
        if not probe_dir.is_dir() or (probe and probe_dir.name != probe) or not inside(probe_dir, root):
            continue
        for run_dir in probe_dir.iterdir():
            if RUN_ID.match(run_dir.name) and run_dir.is_dir() and inside(run_dir, root):
                out.append(run_dir)
    return out


@st.cache_data(show_spinner=False, max_entries=4096)
def _inspect(path: str, sig: tuple) -> RunInfo:
    return inspect_run(Path(path))


def inspect(run_dir: Path, root: Path) -> RunInfo:
    """A run's `RunInfo` through the cache; links leaving the root make it damaged, unread."""
    links = outside_links(run_dir, root)
    if links:
        return RunInfo(
            run_dir,
            run_dir.parent.name,
            run_dir.name,
            "damaged",
            error=f"{run_dir}: {', '.join(links)} link(s) outside the artifacts root (not read)",
        )
    info = _inspect(str(run_dir), signature(run_dir))
    if info.status == "running":  # the writer may have died since: re-read the (small) manifest
        info = inspect_run(run_dir, verify=False)
    return info


def runs(root: Path, probe: str | None = None) -> list[RunInfo]:
    """Every run under `root` (of one probe if given), newest first, damaged ones included."""
    infos = [inspect(d, root) for d in run_dirs(root, probe)]
    return sorted(infos, key=lambda r: (r.run_id[:15], r.run_id), reverse=True)


def ref(info: RunInfo | Run) -> str:
    """The ``<probe>/<run_id>`` reference of a run, as in ``?run=``."""
    return f"{info.path.parent.name}/{info.path.name}"


def resolve_ref(root: Path, value: str, probe: str | None = None) -> Path:
    """The run directory a ``?run=`` value names, inside the root (InterpError otherwise)."""
    path = resolve_run(root, value)
    if path.parent.parent != Path(root).resolve() or not RUN_ID.match(path.name):
        raise InterpError(f"run {value!r} is not a run directory <probe>/<run_id> under {root}")
    if probe is not None and path.parent.name != probe:
        raise InterpError(f"run {value!r} belongs to probe {path.parent.name!r}, not {probe!r}")
    return path


# ============================================================================= loading


@st.cache_data(show_spinner=False, max_entries=256)
def _load(path: str, sig: tuple) -> Run:
    return load_run(Path(path))


@st.cache_data(show_spinner=False, max_entries=256)
def _artifact(path: str, sig: tuple, kind: str, name: str) -> Any:
    return getattr(_load(path, sig), kind)(name)


@dataclass
class CachedRun(Run):
    """A `Run` whose artifacts are read once per run-directory signature (st.cache_data)."""

    sig: tuple = ()

    def table(self, name: str):
        return _artifact(str(self.path), self.sig, "table", name)

    def tensor_file(self, name: str) -> dict[str, Any]:
        return _artifact(str(self.path), self.sig, "tensor_file", name)

    def json(self, name: str) -> Any:
        return _artifact(str(self.path), self.sig, "json", name)

    def jsonl(self, name: str) -> list[Any]:
        return _artifact(str(self.path), self.sig, "jsonl", name)


def load(path: Path, root: Path) -> CachedRun:
    """The run at `path` (inside `root`), checked against its manifest; DamagedRun if it does not check out."""
    path = Path(path)
    if not inside(path, root):
        raise InterpError(f"{path} is outside the artifacts root {root}")
    links = outside_links(path, root)
    if links:
        raise DamagedRun(f"{path}: {', '.join(links)} link(s) outside the artifacts root (not read)")
    sig = signature(path)
    run = _load(str(path), sig)
    return CachedRun(run.path, run.manifest, sig)


def file_checks(run_dir: Path, manifest: Mapping[str, Any] | None, root: Path) -> pd.DataFrame:
    """Each file of a run: name, bytes, sha256 (from the manifest) and whether it checks out.

    Links that leave `root` are reported, never read; files the manifest does not list are added.
    """
    listed = dict((manifest or {}).get("files") or {})
    rows = []
    for name, meta in listed.items():
        p = Path(run_dir) / name
        if p.is_symlink() and not inside(p, root):
            check = "link outside the artifacts root (not read)"
        elif not p.is_file():
            check = "missing"
        elif p.stat().st_size != meta.get("bytes"):
            check = f"size {p.stat().st_size} differs"
        elif sha256_file(p) != meta.get("sha256"):
            check = "sha256 differs"
        else:
            check = "ok"
        rows.append({"file": name, "bytes": meta.get("bytes"), "sha256": meta.get("sha256"), "check": check})
    for e in _entries(Path(run_dir)):
        rel = os.path.relpath(e.path, run_dir)
        if rel in listed or rel == MANIFEST or e.is_dir(follow_symlinks=False) or "/." in "/" + rel:
            continue
        try:
            size = e.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue
        rows.append({"file": rel, "bytes": size, "sha256": None, "check": "not in the manifest"})
    return pd.DataFrame(rows, columns=["file", "bytes", "sha256", "check"])


# ============================================================================= display


def status_label(status: str) -> str:
    """Plain text for tables and select boxes: ``"✓ done"``, ``"⚠ damaged"``."""
    return f"{_MARK.get(status, '?')} {status}"


def status_badge(status: str) -> str:
    """Markdown badge for st.markdown / st.caption: ``":green-badge[done]"``."""
    return f":{_COLOUR.get(status, 'gray')}-badge[{status}]"


def show_status(status: str, error: str | None = None) -> None:
    """One coloured box saying what is wrong with a run that is not done (nothing when done)."""
    if status == "done":
        return
    text = {
        "failed": "This run **failed**",
        "damaged": "This run is **damaged**: its manifest or files do not check out",
        "interrupted": "This run was **interrupted**: its process is gone and it never finished",
        "running": "This run is still **running**; its artifacts are incomplete",
    }.get(status, f"Status **{status}**")
    body = f"{text}." + (f"\n\n`{error}`" if error else "")
    box = {"failed": st.error, "damaged": st.error, "interrupted": st.warning}.get(status, st.info)
    box(body)


def optional_table(run: Run, name: str) -> pd.DataFrame | None:
    """The run's table `name`, or None when the run has no such (readable) table."""
    try:
        return run.table(name)
    except InterpError:
        return None


@st.cache_data(show_spinner=False, max_entries=64)
def attention_html(patterns: np.ndarray, tokens: list[str], names: list[str], height: int = 640,
                   max_value: float | None = None) -> str:
    """The view's HTML for an iframe `height` pixels high, built once per arguments (a (heads, 320, 320) view
    takes seconds). CircuitsVis draws the selected head as a square as wide as the page, under its head selector:
    in a wide iframe that square runs far below the fold, so the first screen shows only the top of the pattern
    (for causal attention, the masked grey triangle) and cuts the "Destination Token" axis title. The view is
    held to a width whose square, selector and titles fit `height`."""
    from interp.viz import attention_view as view

    html = view(patterns, tokens, names, max_value=max_value).html
    n = len(names)
    fit = (f".cv-fit {{max-width: {attention_width(height, n, 12)}px}} "  # one selector row of twelfths
           f"@media (max-width: 991.98px) {{.cv-fit {{max-width: {attention_width(height, n, 6)}px}}}} "
           f"@media (max-width: 767.98px) {{.cv-fit {{max-width: {attention_width(height, n, 4)}px}}}}")
    return f'<style>{fit}</style><div class="cv-fit">{html}</div>'


def attention_width(height: int, n_heads: int, per_row: int) -> int:
    """The widest CircuitsVis view of `n_heads` whose head selector (square thumbnails, `per_row` to a row: 12
    in an iframe 992 pixels wide or more, 6 from 768, else 4), zoomed square and titles fit `height` pixels."""
    rows = -(-n_heads // per_row)
    return max(240, int((height - 150 - 6 * rows) / (1 + rows / per_row)))


def attention_view(patterns: Any, tokens: list[str], names: list[str], height: int = 640,
                   max_value: float | None = None) -> None:
    """A CircuitsVis attention-heads view (`interp.viz.attention_view`: (heads, n, n) weights over n tokens,
    coloured from 0 to `max_value`) in an iframe, self-contained (no network), the whole view within `height`
    (`attention_html`); a caption instead when circuitsvis is not installed. The view runs its own script, so
    it goes in an iframe (st.iframe, scrolling) rather than st.html, which drops scripts; the components API's html,
    which drew it before, is deprecated and due for removal."""
    try:
        html = attention_html(np.asarray(patterns, dtype=np.float32), list(tokens), list(names), height, max_value)
    except InterpError as e:
        st.caption(str(e))
        return
    st.iframe(html, height=height)


def fmt_digits(v: Any, digits: int = 3, kind: str = "g") -> str:
    """A number with `digits` significant digits (kind "g") or decimals (kind "f"); None as a dash, non-floats
    as str."""
    return "—" if v is None else (f"{v:.{digits}{kind}}" if isinstance(v, float) else str(v))


def fmt_value(v: Any) -> str:
    """A metric as a short string for a table cell: `interp.display.fmt` with strings (tokens) cut at 24."""
    return fmt(v, width=24)


def metric_items(metrics: Mapping[str, Any]) -> list[str]:
    """Scalar metrics as ``["name=value", ...]`` (a list column: one pill each); lists and dicts left out."""
    return [f"{k}={fmt_value(v)}" for k, v in metrics.items() if not isinstance(v, (list, tuple, Mapping))]


def short_metrics(metrics: Mapping[str, Any], limit: int = 90) -> str:
    """Scalar metrics as ``"name=value, ..."``, cut to about `limit` characters; lists and dicts left out."""
    parts = [f"{k}={fmt_value(v)}" for k, v in metrics.items() if not isinstance(v, (list, tuple, Mapping))]
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def method_link(probe: str) -> str | None:
    """A URL for a probe's method: its registration's (`ProbeSpec.method`, from the docstring of the module that
    registers it), unless its page, once imported, declares a METHOD of its own (a third-party page may)."""
    from interp.registry import probes_available

    spec = probes_available().get(probe)
    if spec is None:
        return None
    page = sys.modules.get(spec.page) if spec.page else None
    return getattr(page, "METHOD", None) or spec.method


def run_caption(run: Run | RunInfo) -> str:
    """``probe/run_id · model · status · 12.3 s · started`` in one line."""
    if isinstance(run, Run):
        m = run.manifest
        model = (m.get("model") or {}).get("name") or run.config.get("model")
        status, seconds, started = run.status, m.get("seconds"), m.get("started")
    else:
        model, status, seconds, started = run.model, run.status, run.seconds, run.started
    parts = [f"`{ref(run)}`", model or "model ?", status_badge(status)]
    if seconds is not None:
        parts.append(f"{seconds:.1f} s")
    if started:
        parts.append(str(started).replace("T", " ")[:19])
    return " · ".join(parts)


def intro(question: str, method: str | None, run: Run | RunInfo | None = None) -> None:
    """What every page starts with: one sentence on what the probe asks, a link to its method, the run."""
    st.markdown(question + (f" [Method]({method})" if method else ""))
    if run is not None:
        st.caption(run_caption(run))


def probe_intro(spec, run: Run | RunInfo | None = None) -> None:
    """`intro` from a probe's registration: its question (its summary where it declares none), its method link."""
    intro(spec.question or spec.summary, method_link(spec.name), run)


class _Field:
    """One ``{name}`` of a tile's text: plain, the value through fmt_value (None as a dash); with a format spec
    (``{name:.2e}``) or a conversion (``{name!r}``), the value formatted as str.format would."""

    def __init__(self, value: Any):
        self.value = value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec) if spec else fmt_value(self.value)

    def __repr__(self) -> str:
        return repr(self.value)

    def __str__(self) -> str:
        return str(self.value)


class _Fields:
    def __init__(self, values: Mapping[str, Any]):
        self.values = values

    def __getitem__(self, name: str) -> _Field:
        return _Field(self.values.get(name))


#: The longest value a metric tile in a row of four shows in full.
TILE_CHARS = 12


def metric_row(values: Mapping[str, Any], *tiles: tuple, delta_color: str = "normal") -> None:
    """One row of st.metric tiles, a column each. A tile is (label, value), (label, value, help) or
    (label, value, help, delta). A str value, help or delta is a template over `values` (metrics, timings, a
    table row): ``"{r2_aip_tsae} / {q_star_tsae}"`` shows each through fmt_value, ``"{density:.2e}"`` and
    ``"{top_token!r}"`` as str.format would, ``{{`` and ``}}`` are braces; other values (numbers) are shown as
    they are."""
    fill = lambda text: text.format_map(_Fields(values)) if isinstance(text, str) else text  # noqa: E731
    for col, (label, value, *more) in zip(st.columns(len(tiles)), tiles):
        help_, delta = (*more, None, None)[:2]
        value, delta, help_, arrow = fill(value), fill(delta), fill(help_), "auto"
        if isinstance(value, str) and len(value) > TILE_CHARS and delta is None:  # a tile cuts it off: "0.6265 (0.0…"
            cut = min((i for i in (value.find(" → "), value.find(" ("), value.find(" / ")) if i > 0), default=-1)
            if cut > 0:  # the first part as the value, the rest as a grey delta, the whole in the help
                help_ = f"{value}. {help_}" if help_ else value
                value, delta, arrow = value[:cut], value[cut:].strip(), "off"
        col.metric(label, value, delta, delta_color="off" if arrow == "off" else delta_color, help=help_,
                   delta_arrow=arrow)


def tabs(run: Run, panels: Mapping[str, Callable[[Run], None]]) -> None:
    """st.tabs labelled with the keys of `panels`, each tab drawn by its panel(run)."""
    for tab, panel in zip(st.tabs(list(panels)), panels.values()):
        with tab:
            panel(run)


def page_module(spec) -> Any | None:
    """The probe's page module (with render(run)), or None when it has none (the generic page serves)."""
    if not spec.page or importlib.util.find_spec(spec.page) is None:
        return None
    return importlib.import_module(spec.page)


# ============================================================================= the probe page frame


def _sync_query(key: str) -> None:
    st.query_params["run"] = st.session_state[key]


def default_run(infos: list[RunInfo]) -> RunInfo:
    """The run a probe's page opens on without ``?run=``: the newest done one (`infos` are newest first), else the
    newest of any status; a failed or interrupted run stays one choice away in the select box."""
    return next((i for i in infos if i.status == "done"), infos[0])


def select_run(name: str, infos: list[RunInfo], chosen: str | None) -> RunInfo:
    """The sidebar select box of a probe's runs (newest first, status shown), kept in ``?run=``; it opens on
    `default_run`."""
    by_ref = {ref(i): i for i in infos}
    key = f"run-select:{name}"
    if chosen in by_ref:
        st.session_state[key] = chosen
    elif st.session_state.get(key) not in by_ref:
        st.session_state[key] = ref(default_run(infos))
    selected = st.sidebar.selectbox(
        f"{name} run",
        list(by_ref),
        key=key,
        format_func=lambda r: f"{_MARK.get(by_ref[r].status, '?')} {r.partition('/')[2]}",
        on_change=_sync_query,
        args=(key,),
        help="Runs of this probe, newest first (✓ done, ✗ failed, ▶ running, ⏸ interrupted, ⚠ damaged). "
        "The choice is kept in the URL (?run=) to share.",
    )
    if "run" not in st.query_params:
        st.query_params["run"] = selected
    return by_ref[selected]
