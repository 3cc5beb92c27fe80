"""`load_sae(spec)`: one way for every probe (and a notebook) to name an SAE.

A spec is one of

- a SAELens directory (``cfg.json`` + ``sae_weights.safetensors``, optionally ``sparsity.safetensors``);
- a run directory whose run saved an SAE as a directory artifact (atoms' ``tsae`` and ``sae``, the
  ``sae`` of sae_features): the run must be done and check out against its manifest; with several
  SAEs the one named ``sae`` is taken, and ``<run dir>/<name>`` picks another;
- ``saelens:<release>/<sae_id>`` (or ``saelens:<release>:<sae_id>``), an SAE of SAELens's pretrained
  registry, downloaded only when ``INTERP_ONLINE=1``; offline it is refused in one line naming the
  release.

`resolve_sae_spec` checks a spec without torch (configs call it before any model loads); `load_sae`
loads it as a SAELens SAE in eval mode without grads, with its firing densities attached when known.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, MissingPath

PREFIX = "saelens:"
WHAT = "a SAELens SAE directory (with cfg.json), a run directory holding an SAE, or saelens:<release>/<sae_id>"


@dataclass(frozen=True)
class SAERef:
    """Where a spec points, resolved without loading anything heavy."""

    kind: str
    """"dir" (a SAELens directory, possibly inside a run) or "pretrained" (SAELens's registry)."""
    path: Path | None = None
    """The SAELens directory (kind "dir")."""
    release: str | None = None
    """The SAELens release (kind "pretrained")."""
    sae_id: str | None = None
    """The SAE's id inside the release (kind "pretrained")."""
    run: Path | None = None
    """The run directory the SAE came from, if any."""

    def describe(self) -> str:
        if self.kind == "pretrained":
            return f"{PREFIX}{self.release}/{self.sae_id}"
        return str(self.path)


def _is_sae_dir(p: Path) -> bool:
    return (p / "cfg.json").is_file() and (p / "sae_weights.safetensors").is_file()


def _run_saes(run_dir: Path) -> list[str]:
    """Names of the SAELens directory artifacts listed in a run's manifest."""
    try:
        files = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8")).get("files") or {}
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return []
    dirs = {f.split("/", 1)[0] for f in files if "/" in f}
    return sorted(d for d in dirs if f"{d}/cfg.json" in files and f"{d}/sae_weights.safetensors" in files)


def _check_run(run_dir: Path, spec: str, field: str) -> None:
    from ..store import effective_status, read_manifest

    try:
        status = effective_status(read_manifest(run_dir))
    except Exception as e:  # noqa: BLE001 - a damaged manifest: say so in one line
        raise ConfigError(field, spec, f"a done run directory ({e})") from None
    if status != "done":
        raise ConfigError(field, spec, f"a done run directory (this run is {status})")


def resolve_sae_spec(spec: str, field: str = "sae") -> SAERef:
    """The SAERef of `spec`, or ConfigError (naming `field`) saying what is allowed; imports no torch."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(field, spec, WHAT)
    if spec.startswith(PREFIX):
        rest = spec[len(PREFIX):]
        sep = ":" if ":" in rest else "/"
        release, _, sae_id = rest.partition(sep)
        if not release or not sae_id:
            raise ConfigError(field, spec, "saelens:<release>/<sae_id>, e.g. "
                              "saelens:gpt2-small-res-jb/blocks.8.hook_resid_pre")
        if os.environ.get("INTERP_ONLINE") != "1":
            raise ConfigError(field, spec, f"a local SAE: SAELens release {release!r} downloads its weights, which "
                              "needs the network (set INTERP_ONLINE=1)")
        return SAERef("pretrained", release=release, sae_id=sae_id)
    p = Path(spec).expanduser()
    if _is_sae_dir(p):
        parent = p.parent
        if (parent / "manifest.json").is_file():  # an SAE inside a run directory: the run must check out
            _check_run(parent, spec, field)
            return SAERef("dir", path=p, run=parent)
        return SAERef("dir", path=p)
    if (p / "manifest.json").is_file():
        names = _run_saes(p)
        if not names:
            raise ConfigError(field, spec, "a run directory that saved an SAE (this run has none)")
        _check_run(p, spec, field)
        if len(names) > 1 and "sae" not in names:
            raise ConfigError(field, spec, f"one SAE of the run, as {spec.rstrip('/')}/<name> with name one of "
                              + ", ".join(names))
        name = "sae" if "sae" in names else names[0]
        return SAERef("dir", path=p / name, run=p)
    if p.exists():
        raise ConfigError(field, spec, WHAT + f" ({p} has neither cfg.json + sae_weights.safetensors nor a manifest)")
    raise MissingPath(field, spec, WHAT)


def load_sae(spec: str, device: str = "cpu", field: str = "sae"):
    """The SAE `spec` names (see the module docstring) as a SAELens SAE in eval mode without grads.

    Run directories are verified against their manifest (sha256 of every file) before loading.
    """
    ref = resolve_sae_spec(spec, field)
    if ref.kind == "pretrained":
        return _pretrained(ref, device, field)
    if ref.run is not None:
        from ..errors import DamagedRun
        from ..store import load_run

        try:
            load_run(ref.run, verify=True)
        except DamagedRun as e:
            raise ConfigError(field, spec, f"an intact run ({e})") from None
    from .io import load_sae as load_dir

    return load_dir(ref.path, device=device)


def _pretrained(ref: SAERef, device: str, field: str):
    from sae_lens import SAE
    from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory

    known = get_pretrained_saes_directory()
    if ref.release not in known:
        raise ConfigError(field, ref.describe(),
                          f"a release of SAELens's pretrained registry ({ref.release!r} is not one)")
    ids = getattr(known[ref.release], "saes_map", {}) or {}
    if ids and ref.sae_id not in ids:
        raise ConfigError(field, ref.describe(), f"an sae_id of release {ref.release!r}, e.g. "
                          + ", ".join(sorted(ids)[:3]))
    sae = SAE.from_pretrained(ref.release, ref.sae_id, device=device)
    sae = sae[0] if isinstance(sae, tuple) else sae
    sae.eval()
    for p in sae.parameters():
        p.requires_grad_(False)
    return sae


__all__ = ["SAERef", "load_sae", "resolve_sae_spec"]
