"""Sweeps: a grid of runs of one probe from a TOML file, resumable, local or on Ray.

    import interp
    record = interp.run_sweep("sweeps/logit_lens_micro.toml", out="artifacts", executor="local")
    spec = interp.sweep.load_sweep(path); points = interp.sweep.expand(spec)

Each point's config hash identifies it: a point whose run is already `done` under the output
root is skipped; a `failed` one is retried only with `retry_failed`; one whose run was interrupted
(its process killed, or stopped by SIGINT or SIGTERM) is run again; Ctrl-C stops a local sweep, whose record
then reads interrupted. The outcome table goes to ``<out>/sweeps/<name>/sweep.json``,
rewritten atomically when the sweep starts and after every point, so a killed driver leaves the
last complete state. With Ray, every worker must reach the same output root (a shared filesystem
on a cluster).

A point runs only under its claim, ``<out>/sweeps/.claims/<probe>-<config hash>.json``, created
with O_EXCL by the process that runs it (a Ray worker, or the driver itself with the local
executor) and removed when the run ends. A claim whose holder is gone (its pid on this host, or no
heartbeat for `claim_ttl` seconds from another host) is taken over. So two drivers of one sweep run
every point once: a driver that finds a point claimed waits until the holder finishes it (then
records it `skipped`) or dies (then runs it).

One job a module:

- `spec`: the TOML file: `SweepSpec`, `Point`, `load_sweep`, `expand` (the grid);
- `resources`: `PointResources`, `point_resources` (a point's device -> what it asks Ray for), `check_resources`;
- `claims`: the claim protocol (`try_claim`, `Claim`, `claim_holder`, `read_claim`, `claim_path`) and
  `done_runs`;
- `planning`: `plan` (each point checked, hashed and matched against existing runs), `stopped_by_signal`;
- `execute`: one point under its claim, the driver loop both executors share, and the local executor
  (`run_local`);
- `ray_executor`: `run_ray`, `check_ray_address`, `point_devices`;
- `driver`: `run_sweep` (also `interp.run_sweep`): arguments checked, points planned and run, sweep.json kept;
- `cli`: `interp sweep FILE ...` (`main`, `format_table`).

Names load on first use from the module that defines them (patch a name there, not here).
"""

from __future__ import annotations

from .._lazy import lazy_exports

_LAZY = {
    "Point": "spec",
    "SweepSpec": "spec",
    "expand": "spec",
    "load_sweep": "spec",
    "PointResources": "resources",
    "check_resources": "resources",
    "point_resources": "resources",
    "CLAIMS": "claims",
    "CLAIM_TTL": "claims",
    "Claim": "claims",
    "claim_holder": "claims",
    "claim_path": "claims",
    "done_runs": "claims",
    "read_claim": "claims",
    "try_claim": "claims",
    "plan": "planning",
    "stopped_by_signal": "planning",
    "POLL": "execute",
    "run_local": "execute",
    "check_ray_address": "ray_executor",
    "point_devices": "ray_executor",
    "run_ray": "ray_executor",
    "run_sweep": "driver",
    "format_table": "cli",
    "main": "cli",
}
"""Public name -> the submodule that defines it."""


__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY)
