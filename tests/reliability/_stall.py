"""Test harness: run logit_lens, but stall forever at one point so the test can SIGKILL it there.

    python _stall.py OUT POINT MARKER      POINT: load | loop | write
Touches MARKER when the point is reached, then sleeps. Used only by test_faults.py.
"""

import sys
import time
from pathlib import Path

out, point, marker = sys.argv[1], sys.argv[2], Path(sys.argv[3])


def stall(*_a, **_k):
    marker.write_text(point)
    time.sleep(600)


if point == "load":
    import interp.embedded as emb

    emb.ensure_cached = stall  # reached inside load_model, after the run directory exists
elif point == "loop":
    import interp._capture as cap

    real = cap.run_with_cache

    def slow(*a, **k):
        stall()
        return real(*a, **k)

    import interp_probes.logit_lens.probe as ll

    ll.run_with_cache = slow
elif point == "write":
    import interp.store as store

    real_replace = store.os.replace

    def replace(src, dst):
        if str(dst).endswith(".safetensors"):
            stall()  # the temporary file is fully written, not yet moved into place
        return real_replace(src, dst)

    store.os.replace = replace

import interp  # noqa: E402

interp.run("logit_lens", out=out, progress=False)
