"""The `interp` command. Validates probe, config and model before importing torch.

Exit status 0 on success; 2 with one line on stderr for bad input.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import DataWarning, InterpError, Interrupted


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        sys.stderr.write(f"interp: {message}\n")
        raise SystemExit(2)


def _out(args) -> Path:
    return Path(args.out) if args.out else Path(os.environ.get("INTERP_OUT", "artifacts"))


def _overrides(args) -> dict[str, Any]:
    from .config import parse_value

    over: dict[str, Any] = {}
    for item in args.set or []:
        key, eq, value = item.partition("=")
        if not eq:
            raise InterpError(f"--set {item!r}: expected key=value")
        over[key.strip()] = parse_value(value)
    for name in ("model", "device", "seed", "size", "backend"):
        if getattr(args, name, None) is not None:
            over[name] = getattr(args, name)
    return over


# ----------------------------------------------------------------------------- commands


def cmd_list(args) -> int:
    from .registry import probes_available

    for name, spec in probes_available().items():
        print(f"{name:24s} {spec.summary}")
    return 0


def cmd_models(args) -> int:
    from . import embedded

    for name, e in embedded.EMBEDDED.items():
        state = (
            "cached"
            if embedded.is_cached(name)
            else ("installed" if embedded.is_installed(name) else f"not installed (extra: {e.extra})")
        )
        print(f"{name:16s} embedded  {e.hf_id:40s} {state}")
    models_dir = embedded.cache_root() / "models"
    if models_dir.is_dir():
        for d in sorted(models_dir.iterdir()):
            if d.is_dir() and d.name not in embedded.EMBEDDED and (d / "config.json").is_file():
                print(f"{d.name:16s} cached    {str(d)}")
    return 0


def _run_help(probe: str) -> int:
    from .config import describe
    from .registry import get_probe

    spec = get_probe(probe)
    print(f"interp run {probe} [--model M] [--device D] [--seed N] [--size S] [--out DIR] [--set key=value ...]\n")
    print(spec.summary + "\n")
    presets = {s: _dotted(p) for s, p in spec.config_cls.SIZE_PRESETS.items()}
    for name, default, allowed, doc in describe(spec.config_cls):  # a nested config's row ("sft.*") has no default
        print(f"  {name}" + (f" = {default}" if default else "") + (f"  ({allowed})" if allowed else ""))
        if doc:
            print("      " + doc.replace("\n", "\n      "))
        sized = {s: presets[s][name] for s in presets if name in presets[s]}
        if sized:
            print("      sizes: " + ", ".join(f"{s}={json.dumps(v)}" for s, v in sized.items()))
    return 0


def _dotted(preset: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A size preset with nested overrides ({"sae": {"cache": false}}) as dotted keys ("sae.cache")."""
    out: dict[str, Any] = {}
    for k, v in preset.items():
        out.update(_dotted(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


def cmd_run(args) -> int:
    if args.help:
        return _run_help(args.probe)
    from .runner import prepare

    spec, cfg = prepare(args.probe, _overrides(args))  # validated; torch not imported yet
    from .runner import execute

    path = execute(spec, cfg, out=_out(args), progress=not args.quiet)
    print(path)
    return 0


def cmd_ls(args) -> int:
    from .store import list_runs

    if args.probe and not (_out(args) / args.probe).is_dir():
        from .registry import get_probe

        get_probe(args.probe)  # ConfigError naming the known probes (runs of an uninstalled probe still list)
    runs = list_runs(_out(args), probe=args.probe)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "path": str(r.path),
                        "probe": r.probe,
                        "run_id": r.run_id,
                        "status": r.status,
                        "model": r.model,
                        "started": r.started,
                        "seconds": r.seconds,
                        "metrics": r.metrics,
                        "error": r.error,
                    }
                    for r in runs
                ],
                indent=1,
            )
        )
        return 0
    if not runs:
        print(f"no runs under {_out(args)}")
        return 0
    row = "{:24s} {:34s} {:11s} {:14s} {}".format
    print(row("PROBE", "RUN", "STATUS", "MODEL", "METRICS").rstrip())
    for r in runs:
        head = ", ".join(f"{k}={_short(v)}" for k, v in list(r.metrics.items())[:4])
        note = f"  [{r.error}]" if r.status in ("failed", "damaged") and r.error else ""
        print(row(r.probe, r.run_id, r.status, r.model or "-", head + note))
    return 0


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    s = json.dumps(v) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 24 else s[:21] + "..."


def cmd_demo(args) -> int:
    from . import demo
    from .registry import probes_available

    names = args.probes or list(probes_available())
    app = None if args.no_app else (*_dashboard_command(args), f"http://{args.host}:{args.port}")
    return demo.main(names, args.size, args.model, _out(args).resolve(), app, quiet=args.quiet)


def _dashboard_main() -> Path:
    """interp_app/main.py, found without importing the dashboard (the core imports no dashboard module)."""
    import importlib.util

    spec = importlib.util.find_spec("interp_app")
    if spec is None or not spec.submodule_search_locations:
        raise InterpError("the dashboard package interp_app is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "main.py"


def _dashboard_command(args) -> tuple[list[str], dict[str, str]]:
    """The `streamlit run` command line of the dashboard on args.host:args.port over the artifacts root, and its
    environment."""
    env = dict(os.environ, INTERP_OUT=str(_out(args).resolve()))
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(_dashboard_main()),
        "--server.address",
        args.host,
        "--server.port",
        str(args.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]
    return cmd, env


def cmd_app(args) -> int:
    cmd, env = _dashboard_command(args)
    url = f"http://{args.host}:{args.port}"
    print(f"dashboard: {url}  (artifacts: {env['INTERP_OUT']})", flush=True)
    if os.name == "posix":  # the server takes this process's place: SIGTERM, SIGINT, SIGKILL reach it, no orphan
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, cmd, env)
    import subprocess

    return subprocess.call(cmd, env=env)


def cmd_export(args) -> int:
    from .neuronpedia import export_run
    from .store import resolve_run

    run = Path(args.run)
    if not (run / "manifest.json").is_file():
        run = resolve_run(_out(args), args.run)
    src = export_run(run, args.dest, model_id=args.model_id, source_set=args.source_set, creator_id=args.creator_id)
    print(src)
    return 0


def cmd_sweep(args) -> int:
    try:
        from .sweep.cli import main as sweep_main
    except ImportError:
        raise InterpError("interp sweep is not available in this version") from None
    return sweep_main(args)


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="interp", description="Hook-based interpretability probes.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sub.add_parser("list", help="probes, one per line").set_defaults(fn=cmd_list)
    sub.add_parser("models", help="embedded and cached models").set_defaults(fn=cmd_models)

    r = sub.add_parser("run", help="run a probe", add_help=False)
    r.add_argument("probe")
    r.add_argument("-h", "--help", action="store_true", help="list the probe's config fields")
    r.add_argument("--model")
    r.add_argument("--device")
    r.add_argument("--backend")
    r.add_argument("--seed", type=int)
    r.add_argument("--size", choices=("micro", "quick", "default"))
    r.add_argument("--out")
    r.add_argument("--set", action="append", metavar="KEY=VALUE")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    r.set_defaults(fn=cmd_run)

    d = sub.add_parser("demo", help="every probe's quick run behind the dashboard, served from the start")
    d.add_argument("probes", nargs="*", help="only these probes")
    d.add_argument("--out")
    d.add_argument("--model")
    d.add_argument("--size", choices=("micro", "quick", "default"), default="quick",
                   help="the runs' size (default quick; micro for a check in seconds)")
    d.add_argument("--no-app", action="store_true", help="run and return: no dashboard")
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--port", type=int, default=8501)
    d.add_argument("-q", "--quiet", action="store_true")
    d.set_defaults(fn=cmd_demo)

    ls = sub.add_parser("ls", help="runs with status and headline metrics")
    ls.add_argument("--out")
    ls.add_argument("--probe")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=cmd_ls)

    a = sub.add_parser("app", help="the dashboard on 127.0.0.1")
    a.add_argument("--out")
    a.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    a.add_argument("--port", type=int, default=8501)
    a.set_defaults(fn=cmd_app)

    e = sub.add_parser("export", help="export a run for another tool")
    esub = e.add_subparsers(dest="format", required=True, parser_class=_Parser)
    n = esub.add_parser("neuronpedia", help="a sae_features run as Neuronpedia's feature and activation JSONL")
    n.add_argument("run", help="the run directory, or <probe>/<run_id> under --out")
    n.add_argument("dest", metavar="OUT", help="directory to write <model_id>/<source_id>/ under")
    n.add_argument("--out", help="artifacts root for a <probe>/<run_id> reference")
    n.add_argument("--model-id", help="Neuronpedia model id (default: the run's model)")
    n.add_argument("--source-set", help="Neuronpedia source set (default: interp-<hook point>-<d_sae>)")
    n.add_argument("--creator-id", default="interp", help="Neuronpedia creator id written on every row")
    n.set_defaults(fn=cmd_export)

    s = sub.add_parser("sweep", help="a grid of runs from a sweep file")
    s.add_argument("file")
    s.add_argument("--executor", choices=("local", "ray"), default="local")
    s.add_argument("--ray-address")
    s.add_argument("--max-parallel", type=int)
    s.add_argument("--cpus-per-point", type=float, default=1.0, help="CPUs each point asks Ray for (default 1)")
    s.add_argument("--gpus-per-point", type=float, default=1.0,
                   help="GPUs each CUDA point asks Ray for (default 1; a fraction shares a GPU)")
    s.add_argument("--retry-failed", action="store_true")
    s.add_argument("--out")
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(fn=cmd_sweep)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            if sys.stdout is not None:
                sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except BrokenPipeError:
        return _stdout_closed()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.error(_unrecognized(args, extra))
    show = warnings.showwarning
    warnings.showwarning = _data_warnings_in_one_line(show)
    try:
        return args.fn(args)
    except InterpError as e:
        sys.stderr.write(f"interp: {_one_line(str(e))}\n")
        return 2
    except KeyboardInterrupt:  # SIGINT (Ctrl-C): the run, if any, reads interrupted
        sys.stderr.write("interp: interrupted\n")
        return 130
    except Interrupted as e:  # SIGTERM during a run: recorded interrupted; the shell's 128 + signal number
        sys.stderr.write(f"interp: interrupted ({_one_line(str(e))})\n")
        return 143
    except BrokenPipeError:
        raise
    except Exception as e:  # noqa: BLE001 - a failed run: one line (the manifest keeps the error)
        if os.environ.get("INTERP_DEBUG"):
            raise
        sys.stderr.write(f"interp: failed: {type(e).__name__}: {_one_line(str(e))} (INTERP_DEBUG=1 for a traceback)\n")
        return 1
    finally:
        warnings.showwarning = show


def _stdout_closed() -> int:
    """The reader of stdout went away (`interp ls | head -2`): no traceback, the rest of the output to /dev/null
    (so the interpreter's last flush succeeds), and 141 as if SIGPIPE had ended us, like `cat` and `ls`."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a descriptor (a test's capture): nothing to redirect
        pass
    finally:
        os.close(devnull)
    return 141


def _unrecognized(args, extra: list[str]) -> str:
    """argparse's "unrecognized arguments" message; for `run`, flags named like a config field of the probe
    (`--prompt X`, `--top-k=3`) get the `--set` that means them."""
    message = f"unrecognized arguments: {' '.join(extra)}"
    if getattr(args, "command", None) != "run":
        return message
    from .config import describe
    from .registry import get_probe

    try:
        spec = get_probe(args.probe)
    except InterpError:
        return message
    names = {row[0] for row in describe(spec.config_cls) if not row[0].endswith(".*")}
    hints = []
    for i, item in enumerate(extra):
        if not item.startswith("--"):
            continue
        flag, eq, value = item[2:].partition("=")
        name = flag.replace("-", "_")
        if name not in names:
            continue
        if not eq:
            words = list(itertools.takewhile(lambda w: not w.startswith("-"), extra[i + 1:]))
            value = " ".join(words) if words else "VALUE"
        hints.append("--set " + shlex.quote(f"{name}={value}"))
    if not hints:
        return message
    return f"{message} (config fields are set with --set: {' '.join(hints)})"


def _data_warnings_in_one_line(show):
    """A `warnings.showwarning` printing each distinct DataWarning once as one line ("interp: warning: ...")
    (the pre-load check and the run read the same file); other warnings go to `show`."""
    seen: set[str] = set()

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, DataWarning):
            return show(message, category, filename, lineno, file, line)
        text = _one_line(str(message))
        if text not in seen:
            seen.add(text)
            sys.stderr.write(f"interp: warning: {text}\n")

    return showwarning


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
