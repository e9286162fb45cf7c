#!/usr/bin/env bash
# The checks that need a GPU, as one script for one device call of at most 9 minutes (DEADLINE=540 s; 15 minutes of
# device time per session, at most 10 minutes per call; CI has no GPU, so none of this runs there):
#
#   OUT=out/gpu_checks DEADLINE=540 bash benchmarks/gpu_checks.sh          # on the GPU machine
#   MODE=cpu DRY=1 OUT=/tmp/gc bash benchmarks/gpu_checks.sh               # print the steps, run nothing
#   MODE=cpu OUT=/tmp/gc bash benchmarks/gpu_checks.sh                     # the same steps, tiny, on the CPU
#
# First a preflight: the packages the steps import (NEEDS: litgpt, jsonargparse, litdata, boto3, lightning_sparkling),
# imported once; a line "preflight exit <code> <seconds> s" goes into $OUT/status.txt, naming after a ": " each
# package that is missing (carry it as a wheel in .whl/), and the script goes on (the same process writes the
# versions into $OUT/env.txt, its tracebacks into $OUT/preflight.log). Then the steps, one after another (each a
# timing, alone on the device), each under its own timeout (never past DEADLINE - 20 seconds after the start), each
# writing its log and results into $OUT as soon as it ends, before the next one starts, and a line
# "<step> exit <code> <seconds> s" into $OUT/status.txt, with the step's first error line (the cause, not a
# CalledProcessError around it) after a ": " when it failed:
# 1. throughput (at most 190 s): benchmarks/throughput_vs_litgpt.py, `litgpt pretrain` against `sparkling pretrain`
#    with compile on both (--compile true), bf16-mixed, the `gpu` size (12 layers of width 768, 8 x 1024 tokens;
#    fused AdamW is both tools' default on CUDA); it prints a line as each run starts and ends and rewrites its JSON
#    after each ("complete": false until the last: litgpt, sparkling, sparkling + RMS monitor, in that order);
# 2. compile_scope (at most 110 s): benchmarks/compile_cost.py --scopes, the first step after a width and after a
#    depth growth (and the first compile, the steady step), whole-GPT compile against per-block compile, the `gpu`
#    size's model, bf16; a compile_cost.py without --scopes is run as it is (the whole-GPT compile and its recompile
#    at a growth, on the host's CPU: it has no GPU mode);
# 3. growth_cost (at most 80 s): benchmarks/growth_cost.py --sizes 1.4B on the device, the growth time and the peak
#    memory of one growth at about 1B parameters (350M grown to 1.4B, hidden 2x + MLP 2x) against a training step;
# 4. tests (the time that is left): every GPU-marked test (pytest -m gpu: fused AdamW under growth, growth on CUDA,
#    FSDP1 on one GPU, bf16 runs of `sparkling pretrain`, the compile tests), 3 at once, each test's outcome printed
#    as it ends ("[gw0] PASSED tests/...::test_x"), at most 120 s per test, the failures summarized at the end.
# Then $OUT/all.tgz packs the logs and results. STEPS="throughput tests" runs a subset, in the order above (default:
# the four). Two more steps run only when STEPS names them: smoke (first: every example shortened to 12 steps with
# `compile: auto`, benchmarks/gpu_examples.py, all 7 at once, each on its own GPU where the node has 7, then the
# CLI's GPU tests; $OUT/smoke.md is the table of pass / first error line) and campaign (benchmarks/campaign.py
# --deadline <epoch>, side by side with the tests, the deadline 40 s before DEADLINE: 20 s before its step's timeout,
# time to stop its runs and write its cells).
#
# MODE=cpu runs the same steps on the CPU, tiny (throughput --tiny, compile_scope at 2 layers of width 32 with the
# eager backend, growth_cost at 12M, the GPU tests collected only; the smoke's examples shrunk with --tiny); DRY=1
# prints each step's command into $OUT/steps.txt and runs none (no preflight either). Python packages the machine
# lacks come as wheels in .whl/ (installed to /tmp/site): litgpt, jsonargparse, docstring_parser, typeshed_client,
# litdata, boto3, botocore, s3transfer, jmespath (litgpt's TextFiles data module, which the throughput step's litgpt
# runs read, imports litdata, which imports boto3). CAMPAIGN overrides the campaign script's path, EXAMPLES_SCRIPT
# the smoke's, COMPILE_SCRIPT the compile step's, NEEDS the preflight's packages (tests).
set -u
OUT=${OUT:-out/gpu_checks}
DEADLINE=${DEADLINE:-540}
MODE=${MODE:-gpu}
DRY=${DRY:-0}
STEPS=${STEPS:-throughput compile_scope growth_cost tests}
EXAMPLES_SCRIPT=${EXAMPLES_SCRIPT:-benchmarks/gpu_examples.py}
COMPILE_SCRIPT=${COMPILE_SCRIPT:-benchmarks/compile_cost.py}
CAMPAIGN=${CAMPAIGN:-benchmarks/campaign.py}
PY=${PYTHON:-python3}
NEEDS=${NEEDS:-litgpt jsonargparse litdata boto3 lightning_sparkling}
WHEELS=${WHEELS:-.whl}  # the wheels to install first (benchmarks/gpu_wheels.sh downloads them); tests: an empty one
case "$MODE" in gpu|cpu) ;; *) echo "error: MODE=$MODE: use MODE=gpu or MODE=cpu" >&2; exit 2 ;; esac
mkdir -p "$OUT"
: > "$OUT/status.txt"
: > "$OUT/steps.txt"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(elapsed) )); }
wants() { [[ " $STEPS " == *" $1 "* ]]; }

# first_error LOG: the line of LOG that says what went wrong (lightning_sparkling.pretrain.errors.first_error_line)
first_error() {
  $PY -c "import sys; from lightning_sparkling.pretrain.errors import first_error_line as f
print((f(open(sys.argv[1], errors='replace').read()) or 'no error line in the log')[:300])" "$1" 2>/dev/null \
    || grep -m1 -E '^(error: |FAILED |[A-Za-z_.]*(Error|Exception)\b)' "$1" || echo "no error line in the log"
}

# run_step NAME SECONDS CMD...: the command under `timeout min(SECONDS, time left - 20)`, its output in
# $OUT/NAME.log, its exit code and duration in $OUT/status.txt, and its first error line when it failed (124: its
# timeout; "skipped": no time left)
run_step() {
  local name=$1 budget=$2; shift 2
  echo "$name: $*" >> "$OUT/steps.txt"
  if [ "$DRY" = 1 ]; then echo "[dry] $name: $*"; return 0; fi
  local limit=$(( $(left) - 20 )); (( budget < limit )) && limit=$budget
  if (( limit < 10 )); then echo "$name skipped (no time left)" | tee -a "$OUT/status.txt"; return 0; fi
  echo "[$(elapsed) s] $name (at most $limit s)"
  local start=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$? why=""
  if (( rc == 124 )); then why=": timed out after $limit s"; elif (( rc != 0 )); then why=": $(first_error "$OUT/$name.log")"; fi
  echo "$name exit $rc $(( $(date +%s) - start )) s$why" | tee -a "$OUT/status.txt"
  tail -6 "$OUT/$name.log"
  return 0
}

if [ "$DRY" != 1 ]; then
  SITE=${SITE:-/tmp/site}
  rm -rf "$SITE"  # a warm machine keeps /tmp: install exactly what the wheels folder holds
  if compgen -G "$WHEELS/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl \
      || { echo "wheel install failed"; exit 1; }
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  fi
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore

# preflight: import what the steps need once; name each missing package (ModuleNotFoundError's name: boto3 when
# litdata's import of it fails) in status.txt, and go on (the steps that need it fail with their own error line).
# The same process prints the versions into env.txt (torch is started once, not twice).
PREFLIGHT_PY='import importlib, sys
from importlib.metadata import PackageNotFoundError, version
missing = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        by = missing.setdefault(err.name or name, [])
        if err.name and err.name != name:
            by.append(name)
    except Exception as err:
        missing[name + " (" + type(err).__name__ + ": " + str(err)[:150] + ")"] = []
def installed(package):
    try:
        return version(package)
    except PackageNotFoundError:
        return "missing"
try:
    import torch
    cuda = torch.cuda.is_available()
except Exception as err:
    cuda = type(err).__name__
print(sys.version.split()[0], " ".join(p + " " + installed(p) for p in ("torch", "lightning", "litgpt")), "cuda", cuda)
if missing:
    names = [m + (" (imported by " + ", ".join(by) + ")" if by else "") for m, by in missing.items()]
    sys.exit("missing " + ", ".join(names) + ": carry them as wheels in .whl/")'
if [ "$DRY" != 1 ]; then
  pre_start=$(date +%s)
  {
    [ "$MODE" = gpu ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    timeout 120 $PY -c "$PREFLIGHT_PY" $NEEDS 2> "$OUT/preflight.log"; rc=$?
  } > "$OUT/env.txt"
  why=""; (( rc != 0 )) && why=$(tail -1 "$OUT/preflight.log"); (( rc == 124 )) && why="timed out after 120 s"
  echo "preflight exit $rc $(( $(date +%s) - pre_start )) s${why:+: $why}" | tee -a "$OUT/status.txt"
  cat "$OUT/env.txt"
fi

# compile_cost.py --scopes: whole-GPT against per-block compile; an older compile_cost.py has no --scopes (and no
# GPU mode): it measures the whole-GPT compile's recompile at a growth on the host's CPU
if grep -q -- '"--scopes"' "$COMPILE_SCRIPT" 2>/dev/null; then SCOPES=1; else SCOPES=0; fi
COMPILE_ENV=()
if [ "$MODE" = gpu ]; then
  THROUGHPUT=(--size gpu --accelerator gpu --precision bf16-mixed --compile true --steps 30 --warmup 10
              --repeats 1 --threads 4)
  THROUGHPUT_S=190
  if (( SCOPES )); then  # the throughput step's gpu size: 12 layers of width 768, 8 x 1024 tokens, a vocab of 16384
    COMPILE=(--scopes --device cuda --bf16 --n-layer 12 --n-embd 768 --seq 1024 --batch 8 --vocab 16384 --rounds 2
             --window 3 --threads 4)
  else
    COMPILE=(--n-layer 4 --n-embd 64 --seq 64 --batch 4 --vocab 512 --steps 24 --grow-at 10 --every 4 --threads 4)
  fi
  COMPILE_S=110
  COST=(--device cuda --sizes 1.4B --batch 8 --seq 1024 --steps 4)
  COST_S=80
  # the GPU tests start processes: 3 at once on the 16 cores; -v prints each one's outcome as it ends ("[gw0] PASSED
  # tests/...::test_x"), so a step cut short by its timeout still says which passed and which failed
  PYTEST=(-v -rfEs --timeout 120 -m gpu -n 3 tests)
  SMOKE=(--steps 12 --jobs 7 --compile auto --timeout 210)  # all 7 examples at once
  SMOKE_S=210
  SMOKE_TESTS=(-m gpu -rs tests/pretrain/test_cli_gpu.py)
  # Only $OUT comes back from the device: the campaign appends to $OUT/campaign.jsonl, seeded below from the committed
  # benchmarks/results/campaign.jsonl so that no finished run is repeated; commit it back there after the run.
  CAMPAIGN_ARGS=(--results "$OUT/campaign.jsonl" --out /tmp/campaign)
else
  THROUGHPUT=(--tiny --accelerator cpu --precision 32-true --compile false --repeats 1 --threads 1)
  THROUGHPUT_S=240
  if (( SCOPES )); then
    COMPILE=(--scopes --n-layer 2 --n-embd 32 --seq 32 --batch 2 --vocab 256 --rounds 1 --window 2 --backend eager
             --threads 1)
  else  # the arguments only, rehearsed: inductor on this CPU takes minutes even for one tiny layer
    COMPILE=(--n-layer 1 --n-embd 16 --seq 16 --batch 1 --vocab 64 --steps 10 --grow-at 5 --every 2 --threads 1)
    COMPILE_ENV=(env TORCH_COMPILE_DISABLE=1)
  fi
  COMPILE_S=240
  COST=(--device cpu --sizes 12M --steps 2 --batch 1 --seq 64 --threads 1)
  COST_S=100
  PYTEST=(-q -m gpu -rs --collect-only tests/callbacks/test_fused_adamw.py tests/growth/test_grow_model.py)
  SMOKE=(--tiny --steps 6 --jobs 1 --compile auto --timeout 120)
  SMOKE_S=150
  SMOKE_TESTS=(-m gpu -rs --collect-only tests/pretrain/test_cli_gpu.py)
  CAMPAIGN_ARGS=(--tiny --results "$OUT/campaign_tiny.jsonl" --out /tmp/gpu_checks_campaign)
fi

if wants smoke; then
  run_step smoke_examples "$SMOKE_S" $PY "$EXAMPLES_SCRIPT" "${SMOKE[@]}" --work /tmp/gpu_checks_smoke \
    --out "$OUT/smoke_examples_$MODE.json" --table "$OUT/smoke.md"
  run_step smoke_tests 90 $PY -m pytest -q -p no:cacheprovider "${SMOKE_TESTS[@]}"
  if [ "$DRY" != 1 ]; then  # the smoke's verdict, before anything long starts: the examples' table + the tests' line
    [ -s "$OUT/smoke.md" ] || printf '| example | result | first error line |\n|---|---|---|\n| (no example ran) | FAIL | %s |\n' \
      "$(grep '^smoke_examples' "$OUT/status.txt" | tail -1)" > "$OUT/smoke.md"
    printf '| CLI GPU tests | %s | %s |\n' "$(grep -q '^smoke_tests exit 0' "$OUT/status.txt" && echo pass || echo FAIL)" \
      "$(grep '^smoke_tests' "$OUT/status.txt" | tail -1 | sed 's/^[^:]*: *//; t; s/.*/-/')" >> "$OUT/smoke.md"
    cat "$OUT/smoke.md"
  fi
fi
wants throughput && run_step throughput "$THROUGHPUT_S" $PY benchmarks/throughput_vs_litgpt.py "${THROUGHPUT[@]}" \
  --workdir /tmp/gpu_checks_tvl --out "$OUT/throughput_vs_litgpt_$MODE.json"
wants compile_scope && run_step compile_scope "$COMPILE_S" ${COMPILE_ENV[@]+"${COMPILE_ENV[@]}"} $PY "$COMPILE_SCRIPT" \
  "${COMPILE[@]}" --out "$OUT/compile_scope_$MODE.json"
wants growth_cost && run_step growth_cost "$COST_S" $PY benchmarks/growth_cost.py "${COST[@]}" \
  --out "$OUT/growth_cost_$MODE.json"

CAMPAIGN_PID=
if wants campaign; then
  if [ -f "$CAMPAIGN" ]; then
    END=$(( T0 + DEADLINE - 40 ))  # the campaign stops itself by then: 20 s before its step's timeout to stop its
    # runs (SIGKILL 5 s after SIGTERM) and write its cells, then time to pack
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
wants tests && run_step tests "$DEADLINE" $PY -m pytest -p no:cacheprovider "${PYTEST[@]}"  # what is left
[ -n "$CAMPAIGN_PID" ] && wait "$CAMPAIGN_PID"

if [ "$DRY" != 1 ]; then
  tar czf "$OUT/all.tgz" --exclude='*.ckpt' --exclude='*.pth' --exclude='*.bin' --exclude='*.safetensors' \
    -C "$OUT" $(cd "$OUT" && ls *.log *.txt *.json *.md 2>/dev/null) 2>/dev/null
fi
cat "$OUT/status.txt"
echo "[$(elapsed) s] done"
