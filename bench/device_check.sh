#!/bin/bash
# The GPU check of this project, in two steps (bench/README.md, "Device check"):
#   bash bench/device_check.sh [prepare]   ON THE HOST (the venv, the registry): gpu/ = wheels the bare GPU machine
#                                          lacks + SmolLM2-135M's tokenizer and config + the project's entry points
#   bash bench/device_check.sh run         ON THE DEVICE, in the repo root of a copy of the working tree with gpu/
#                                          carried: install the wheels, build random models, tests/gpu, every probe's
#                                          quick config on the 8B-shaped model, bench/gpu.py; writes
#                                          $OUT/device_check.{json,md} and $OUT/logs.tgz
# `SMALL=1 DEV=cpu bash bench/device_check.sh run` is the dry run at toy sizes on a CPU (PY defaults to the venv's
# python when there is one, then installs nothing unless INSTALL=1).
# Each stage has its own timeout; DEADLINE (seconds, default 330) bounds the whole run: a stage starts only with
# enough time left and is given at most what is left.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/gpu
MODE=${1:-prepare}
if [ "$MODE" = prepare ]; then
  PY=${PY:-$ROOT/.venv/bin/python}
  cd "$ROOT" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 exec "$PY" bench/device_check.py prepare "${@:2}"
fi
[ "$MODE" = run ] || { echo "usage: $0 [prepare|run]" >&2; exit 2; }

: "${OUT:=/tmp/device-check}"; : "${DEV:=cuda}"; : "${SMALL:=0}"
# on a CPU (the dry run) every limit is SCALE times longer
if [ "$DEV" = cpu ]; then : "${SCALE:=8}"; : "${DEADLINE:=2400}"; else : "${SCALE:=1}"; : "${DEADLINE:=340}"; fi
if [ -z "${PY:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ] && [ -z "${INSTALL:-}" ]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
fi
WORK=${WORK:-/tmp/device-check-work}; M=$WORK/models; SITE=$WORK/site
mkdir -p "$OUT/logs" "$OUT/rows" "$M"; rm -f "$OUT"/rows/*.jsonl
T0=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/logs/summary.txt"; }
row() { "$PY" -c 'import json, sys; a = sys.argv[1:]; print(json.dumps({"stage": a[0], "name": a[1], "status": a[2],
          "seconds": float(a[3]), "detail": a[4][-300:]}))' "$1" "$2" "$3" "$4" "${5:-}" >> "$OUT/rows/$1.jsonl"; }
# stage NAME TIMEOUT MIN_LEFT CMD...: runs CMD with min(TIMEOUT, time left - 10) unless under MIN_LEFT seconds are
# left; logs to $OUT/logs/NAME.log; one row (status ok / failed rc=N / timeout / skipped) in rows/stages.jsonl
stage() {
  local name=$1 limit=$(( $2 * SCALE )) need=$3; shift 3
  local l; l=$(left)
  if [ "$l" -lt "$need" ]; then log "$name: skipped (${l}s left, needs $need)"; row stages "$name" skipped 0; return 0; fi
  [ "$limit" -gt $(( l - 10 )) ] && limit=$(( l - 10 ))
  local t=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$OUT/logs/$name.log" 2>&1; local rc=$?
  local s=$(( $(date +%s) - t )) st=ok
  [ $rc -ne 0 ] && st="failed rc=$rc"; [ $rc -eq 124 ] || [ $rc -eq 137 ] && st="timeout after ${limit}s"
  log "$name: $st in ${s}s"; row stages "$name" "$st" "$s" "$(tail -3 "$OUT/logs/$name.log")"
  return $rc
}

export OUT DEV SMALL SCALE DEADLINE T0 PY WORK M ROOT
export -f left log row
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled PYTHONUNBUFFERED=1 \
       TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0 OMP_WAIT_POLICY=PASSIVE INTERP_CACHE=$WORK/icache \
       DEV SMALL
# 1. install: the carried wheels into $SITE (only where this python lacks the project's imports), the project as
#    the working tree with its entry points (gpu/site); then every traced import is tried
if [ "$PY" = python3 ] || [ -n "${INSTALL:-}" ]; then
  rm -rf "$SITE"
  stage install 120 30 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$G"/whl/*.whl
  export PYTHONPATH=$ROOT:$G/site:$SITE${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$ROOT:$G/site${PYTHONPATH:+:$PYTHONPATH}
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
  "$PY" -c "import sys,torch,transformers;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.cuda.is_available(),'transformers',transformers.__version__)"
  echo "DEV=$DEV SMALL=$SMALL DEADLINE=$DEADLINE head $(sed -n 's/.*"head": "\(.*\)".*/\1/p' "$G/prepared.json")"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt" | tee -a "$OUT/logs/summary.txt"
stage imports 90 20 "$PY" bench/device_check.py check "$G/prepared.json"
stage probes_list 30 10 "$PY" -m interp.cli list

# 2. random models: rand-smollm2 (SmolLM2-135M's config) and rand-8b (Llama-3-8B's shape, built on $DEV in bf16)
stage models 120 60 "$PY" bench/device_check.py models "$M" "$G/tok"

# 3. tests/gpu on rand-smollm2 in bf16 and fp32, in SHARDS parallel pytest processes
SHARDS=${SHARDS:-4}; [ "$SMALL" = 1 ] && SHARDS=${SHARDS_SMALL:-2}
tests() {
  trap 'kill $(jobs -p) 2>/dev/null; exit 124' TERM  # a timeout ends the shards too
  local pids=() i
  for i in $(seq 0 $(( SHARDS - 1 ))); do
    INTERP_GPU_TEST_DEVICE=$DEV INTERP_GPU_TEST_MODEL=$M/rand-smollm2 INTERP_GPU_SHARD=$i/$SHARDS OMP_NUM_THREADS=2 \
      "$PY" -m pytest tests/gpu -q -p no:cacheprovider --junitxml="$OUT/logs/tests-$i.xml" \
      > "$OUT/logs/tests-$i.log" 2>&1 &
    pids+=($!)
  done
  local rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
  grep -h -E "^(FAILED|ERROR)|passed|failed" "$OUT"/logs/tests-*.log; return $rc
}
export -f tests; export SHARDS
stage tests_gpu 100 60 bash -c tests
"$PY" - "$OUT" <<'EOF' >> "$OUT/rows/tests_gpu.jsonl" 2>/dev/null
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path
for f in sorted(Path(sys.argv[1], "logs").glob("tests-*.xml")):
    for c in ET.parse(f).getroot().iter("testcase"):
        bad = next((e for e in c if e.tag in ("failure", "error", "skipped")), None)
        msg = (bad.get("message") or "")[:300] if bad is not None else ""
        print(json.dumps({"stage": "tests_gpu", "name": c.get("name"), "seconds": round(float(c.get("time", 0)), 1),
                          "status": "passed" if bad is None else bad.tag, "detail": msg}))
EOF

# 4. bench/gpu.py on rand-8b, alone on the device
stage bench_gpu 80 50 "$PY" bench/device_check.py bench "$M/rand-8b" "$OUT/rows/bench_gpu.jsonl"

# 5. every probe's quick config on rand-8b, BIG_PAR at a time (each process holds its own 15 GiB copy)
BIG_PAR=${BIG_PAR:-5}
quick() {
  trap 'kill $(jobs -p) 2>/dev/null; exit 124' TERM
  local probes; probes=$("$PY" -m interp.cli list | awk '{print $1}')
  local n=0 p waves limit
  waves=$(( ($(echo $probes | wc -w) + BIG_PAR - 1) / BIG_PAR ))
  for p in $probes; do
    if [ $(( n % BIG_PAR )) -eq 0 ]; then  # a wave: an equal share of what is left
      limit=$(( ($(left) - 15) / waves )); waves=$(( waves - 1 ))
      [ "$limit" -lt 20 ] && break
    fi
    ( t=$(date +%s)
      timeout -k 5 "$limit" "$PY" -m interp.cli run "$p" --model "$M/rand-8b" --device "$DEV" \
        --size "$([ "$SMALL" = 1 ] && echo micro || echo quick)" --out "$WORK/quick" -q > "$OUT/logs/quick-$p.log" 2>&1
      echo "$p $? $(( $(date +%s) - t ))" >> "$OUT/logs/quick-rc.txt" ) &
    n=$(( n + 1 )); [ $(( n % BIG_PAR )) -eq 0 ] && wait
  done
  wait
}
export -f quick; export BIG_PAR
rm -f "$OUT/logs/quick-rc.txt"; rm -rf "$WORK/quick"
stage quick_8b 600 40 bash -c quick
[ -f "$OUT/logs/quick-rc.txt" ] && while read -r p rc s; do
  st=done; [ "$rc" != 0 ] && st="exit $rc"; [ "$rc" = 124 ] || [ "$rc" = 137 ] && st=timeout
  row quick_8b_exit "$p" "$st" "$s" "$(grep -v 'it/s\]' "$OUT/logs/quick-$p.log" | tail -2)"
done < "$OUT/logs/quick-rc.txt"
"$PY" bench/device_check.py manifests "$WORK/quick" quick_8b "$OUT/rows/quick_8b.jsonl" > /dev/null 2>&1

# 6. one results file and one log archive
log "end ($(( $(date +%s) - T0 ))s of $DEADLINE)"
"$PY" bench/device_check.py report "$OUT" > /dev/null
(cd "$OUT" && tar czf logs.tgz logs && rm -rf logs)
echo "results: $OUT/device_check.md, $OUT/device_check.json; logs: $OUT/logs.tgz"
