#!/usr/bin/env bash
# The checks that need a GPU, as one script for one device call (15 minutes of device time per session, at most
# 10 minutes per call; CI has no GPU, so none of this runs there). The compiled, fused-AdamW, bf16 path:
#
#   OUT=out/gpu_checks DEADLINE=540 bash benchmarks/gpu_checks.sh          # on the GPU machine
#   MODE=cpu DRY=1 OUT=/tmp/gc bash benchmarks/gpu_checks.sh               # print the steps, run nothing
#   MODE=cpu OUT=/tmp/gc bash benchmarks/gpu_checks.sh                     # the same steps, tiny, on the CPU
#
# Steps, in order, each under its own timeout (never past DEADLINE seconds after the start), each writing its log
# and results into $OUT as soon as it ends, and a line "<step> exit <code> <seconds> s" into $OUT/status.txt:
# 1. throughput: benchmarks/throughput_vs_litgpt.py, litgpt against sparkling with compile on both (--compile true),
#    bf16-mixed (fused AdamW is both tools' default on CUDA); alone on the device, since it is a timing;
# 2. growth_cost: benchmarks/growth_cost.py on the device (the growth-cost table), alone too;
# 3. tests: every GPU-marked test (pytest -m gpu: fused AdamW under growth, growth on CUDA, FSDP1 on one GPU, bf16
#    runs of `sparkling pretrain`, and the compile tests where they exist), side by side with
# 4. campaign: benchmarks/campaign.py --deadline <epoch> for the time that is left (only if the file exists).
# Then $OUT/all.tgz packs the logs and results. STEPS="throughput tests" runs a subset (default: all four).
#
# MODE=cpu runs the same steps on the CPU, tiny (throughput --tiny, growth_cost at 12M, the GPU tests collected
# only); DRY=1 prints each step's command into $OUT/steps.txt and runs none. Python packages the machine lacks
# (litgpt, jsonargparse) can come as wheels in .whl/ (installed to /tmp/site). CAMPAIGN overrides the campaign
# script's path (tests).
set -u
OUT=${OUT:-out/gpu_checks}
DEADLINE=${DEADLINE:-540}
MODE=${MODE:-gpu}
DRY=${DRY:-0}
STEPS=${STEPS:-throughput growth_cost tests campaign}
CAMPAIGN=${CAMPAIGN:-benchmarks/campaign.py}
PY=${PYTHON:-python3}
case "$MODE" in gpu|cpu) ;; *) echo "error: MODE=$MODE: use MODE=gpu or MODE=cpu" >&2; exit 2 ;; esac
mkdir -p "$OUT"
: > "$OUT/status.txt"
: > "$OUT/steps.txt"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(elapsed) )); }
wants() { [[ " $STEPS " == *" $1 "* ]]; }

# run_step NAME SECONDS CMD...: the command under `timeout min(SECONDS, time left - 20)`, its output in
# $OUT/NAME.log, its exit code and duration in $OUT/status.txt (124: its timeout; "skipped": no time left)
run_step() {
  local name=$1 budget=$2; shift 2
  echo "$name: $*" >> "$OUT/steps.txt"
  if [ "$DRY" = 1 ]; then echo "[dry] $name: $*"; return 0; fi
  local limit=$(( $(left) - 20 )); (( budget < limit )) && limit=$budget
  if (( limit < 10 )); then echo "$name skipped (no time left)" | tee -a "$OUT/status.txt"; return 0; fi
  echo "[$(elapsed) s] $name (at most $limit s)"
  local start=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name exit $rc $(( $(date +%s) - start )) s" | tee -a "$OUT/status.txt"
  tail -6 "$OUT/$name.log"
  return 0
}

if [ "$DRY" != 1 ]; then
  rm -rf /tmp/site  # a warm machine keeps /tmp: install exactly what .whl holds
  if compgen -G ".whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "wheel install failed"; exit 1; }
    export PYTHONPATH=/tmp/site
  fi
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
if [ "$DRY" != 1 ]; then
  {
    [ "$MODE" = gpu ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    $PY -c "import sys, torch, lightning; from importlib.metadata import version; print(sys.version.split()[0],
    'torch', torch.__version__, 'lightning', lightning.__version__, 'litgpt', version('litgpt'), 'cuda',
    torch.cuda.is_available())"
  } > "$OUT/env.txt" 2>&1
  cat "$OUT/env.txt"
fi

if [ "$MODE" = gpu ]; then
  THROUGHPUT=(--size gpu --accelerator gpu --precision bf16-mixed --compile true --steps 30 --warmup 10
              --repeats 1 --threads 4)
  COST=(--device cuda --sizes 91M,350M --batch 8 --seq 1024 --steps 6)
  PYTEST=(-m gpu -rs tests)
  # Only $OUT comes back from the device: the campaign appends to $OUT/campaign.jsonl, seeded below from the committed
  # benchmarks/results/campaign.jsonl so that no finished run is repeated; commit it back there after the run.
  CAMPAIGN_ARGS=(--results "$OUT/campaign.jsonl" --out /tmp/campaign)
else
  THROUGHPUT=(--tiny --accelerator cpu --precision 32-true --compile false --repeats 1 --threads 1)
  COST=(--device cpu --sizes 12M --steps 2 --batch 1 --seq 64 --threads 1)
  PYTEST=(-m gpu -rs --collect-only tests/callbacks/test_fused_adamw.py tests/growth/test_grow_model.py)
  CAMPAIGN_ARGS=(--tiny --results "$OUT/campaign_tiny.jsonl" --out /tmp/gpu_checks_campaign)
fi

wants throughput && run_step throughput 240 $PY benchmarks/throughput_vs_litgpt.py "${THROUGHPUT[@]}" \
  --workdir /tmp/gpu_checks_tvl --out "$OUT/throughput_vs_litgpt_$MODE.json"
wants growth_cost && run_step growth_cost 100 $PY benchmarks/growth_cost.py "${COST[@]}" \
  --out "$OUT/growth_cost_$MODE.json"

CAMPAIGN_PID=
if wants campaign; then
  if [ -f "$CAMPAIGN" ]; then
    END=$(( T0 + DEADLINE - 30 ))  # the campaign stops itself by then, leaving time to pack
    if [ "$MODE" = gpu ] && [ -f benchmarks/results/campaign.jsonl ]; then
      cp benchmarks/results/campaign.jsonl "$OUT/campaign.jsonl"
    fi
    if [ "$DRY" = 1 ]; then
      run_step campaign "$DEADLINE" $PY "$CAMPAIGN" "${CAMPAIGN_ARGS[@]}" --deadline "$END"
    else
      run_step campaign "$DEADLINE" $PY "$CAMPAIGN" "${CAMPAIGN_ARGS[@]}" --deadline "$END" &
      CAMPAIGN_PID=$!
    fi
  else
    echo "campaign skipped ($CAMPAIGN does not exist)" | tee -a "$OUT/status.txt"
  fi
fi
wants tests && run_step tests 180 $PY -m pytest -q -p no:cacheprovider "${PYTEST[@]}"
[ -n "$CAMPAIGN_PID" ] && wait "$CAMPAIGN_PID"

if [ "$DRY" != 1 ]; then
  tar czf "$OUT/all.tgz" --exclude='*.ckpt' --exclude='*.pth' --exclude='*.bin' --exclude='*.safetensors' \
    -C "$OUT" $(cd "$OUT" && ls *.log *.txt *.json 2>/dev/null) 2>/dev/null
fi
cat "$OUT/status.txt"
echo "[$(elapsed) s] done"
