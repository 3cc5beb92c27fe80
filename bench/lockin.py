"""Lock-in probes: a 300-step fine-tuning run with the geometric probes on vs the same run without.

Reuses the probe's own measurement (`interp_probes.lockin.probe.overhead_benchmark` -> `measure_overhead`): the
base run (full slice, lr 1e-4) trained by the probe's loop (`train`) twice from theta_0 with the same data
order, the tracker's probes off (`Tracker(probes=False)`: losses only) and then on (drift, update subspace,
harm signal, C_t every `fisher_every` steps, the stiff subspace refreshed every `refresh_every` steps), both
evaluating L_T and L_B on the same log schedule. The config is the probe's default.

It runs on the tiny random Llama of the probe's unit tests: on smollm2-135m one step of the last block's MLP
(a 49k-token unembedding per position) takes about 3 s on this 2-core machine, so 300 steps twice would take
half an hour, twice the whole suite's budget.
"""

from __future__ import annotations

from interp.config import build_config
from interp_probes.lockin import LockinConfig
from interp_probes.lockin.probe import overhead_benchmark

from .common import Row, is_tiny, row, tiny_model

STEPS = 300
SMOKE = {"size": "micro", "fisher_every": 5, "seq_len": 24, "batch_positions": 8}


def lockin_probes(model, smoke: bool = False) -> list[Row]:
    """Probes-on seconds / probes-off seconds for a 300-step run of the default config (<= 1.5)."""
    m = model if is_tiny(model) else tiny_model()
    steps = 10 if smoke else STEPS
    overrides = SMOKE if smoke else {}
    r = overhead_benchmark(m, steps=steps, **overrides)
    cfg = build_config(LockinConfig, {**overrides, "steps": steps})  # what overhead_benchmark ran
    where = f"{m.info.n_layers}-layer d_model {m.info.d_model} random Llama (the probe's unit-test model)"
    return [row("lockin_probes", f"{steps}-step run, geometric probes on / off (time ratio)",
                r["probe_overhead_ratio"], "<= 1.5",
                f"{where}, {'micro' if smoke else 'default'} config: log every {cfg.log_every}, C_t every "
                f"{cfg.fisher_every or 'never'}, stiff refresh every {cfg.refresh_every or 'never'}; "
                f"off {r['overhead_off_s']:.1f}s, on {r['overhead_on_s']:.1f}s, "
                f"stiff subspace once {r['stiff_setup_s']:.1f}s")]
