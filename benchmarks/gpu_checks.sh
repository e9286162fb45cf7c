#!/usr/bin/env bash
# The checks that need a GPU, as one script for one session on one GPU (what produced the GPU figures in
# docs/BENCHMARKS.md; CI has no GPU, so none of this runs there):
#
#   OUT=out/gpu_checks DEADLINE=560 bash benchmarks/gpu_checks.sh
#
# 1. growth_cost.py on the GPU (bf16-mixed steps; 91M, 350M and 1.4B grown parameters), alone on the device so
#    that its timings are clean;
# 2. then, side by side: the GPU-marked tests (FSDP1 on one GPU through Lightning's FSDPStrategy, bf16-mixed and
#    bf16-true runs of `sparkling pretrain`, growth on CUDA matching CPU), the quickstart on the GPU in bf16-mixed,
#    and one equal-loss cell of issue 32 (depth 4 -> 8 layers at 25% at the `cpu` size, 31 tokens per parameter,
#    3 seeds, scratch at four budgets) with every run on the GPU at once;
# 3. whatever finished by DEADLINE seconds after the start is reported (the harness' --report-only) and packed into
#    $OUT/all.tgz; the logs that answer "did it pass" stay beside it.
#
# Python packages the machine lacks (litgpt, jsonargparse) can come as wheels in .whl/ (installed to /tmp/site).
set -u
OUT=${OUT:-out/gpu_checks}
DEADLINE=${DEADLINE:-560}
SCAN=${SCAN:-/tmp/gpu_scan}
mkdir -p "$OUT" "$SCAN"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(elapsed) )); }

rm -rf /tmp/site  # a warm machine keeps /tmp: install exactly what .whl holds
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import sys, torch, lightning, litgpt; print(sys.version.split()[0], 'torch', torch.__version__,
  'lightning', lightning.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0))"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "[$(elapsed) s] growth_cost on cuda"
timeout 170 python3 benchmarks/growth_cost.py --device cuda --sizes 91M,350M,1.4B --batch 8 --seq 1024 --steps 6 \
  --out "$OUT/growth_cost_cuda.json" > "$OUT/growth_cost.log" 2>&1
echo "growth_cost exit $?"; tail -8 "$OUT/growth_cost.log"

echo "[$(elapsed) s] the depth cell (15 runs at once), the quickstart and the GPU tests"
CELL=(--size cpu --scan --scan-ratios 1 --scan-schedules cosine --scan-axes depth --scan-rows "depth stack copy-zero"
      --budgets 0.7,1.4,2 --set accelerator=gpu --set eval.interval=150 --set "rms_monitor={every_n_steps: 30}"
      --out "$SCAN" --results "$SCAN/results" --tag gpu-depth-cpu)
timeout $(( $(left) - 45 )) python3 benchmarks/reproduce.py "${CELL[@]}" --jobs 15 > "$OUT/reproduce.log" 2>&1 &
REPRO=$!
timeout $(( $(left) - 60 )) python3 -m lightning_sparkling.pretrain.cli pretrain --config examples/quickstart.yaml \
  --accelerator gpu --precision bf16-mixed --out_dir /tmp/quickstart_gpu > /tmp/quickstart_gpu.log 2>&1 &
QS=$!
timeout $(( $(left) - 50 )) python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 -rs \
  tests/growth/test_grow_model.py tests/distributed/test_ddp.py tests/pretrain/test_cli_gpu.py \
  > "$OUT/pytest_gpu.log" 2>&1
echo "pytest exit $?"; tail -15 "$OUT/pytest_gpu.log"
wait $QS; echo "quickstart exit $?"; tail -4 /tmp/quickstart_gpu.log
wait $REPRO; echo "reproduce exit $?"
if ! grep -q "^wrote\|reproduce_cpu_scan" "$OUT/reproduce.log"; then
  echo "[$(elapsed) s] the cell did not finish: what finished"
  timeout 40 python3 benchmarks/reproduce.py "${CELL[@]}" --report-only >> "$OUT/reproduce.log" 2>&1
fi
tail -25 "$OUT/reproduce.log"
cp /tmp/quickstart_gpu.log "$OUT/" 2>/dev/null
tar czf "$OUT/all.tgz" --exclude='*.ckpt' --exclude='*.pth' --exclude='*.bin' --exclude='*.safetensors' \
  "$OUT"/*.log "$OUT"/*.txt "$OUT"/*.json /tmp/quickstart_gpu/summary.json /tmp/quickstart_gpu/logs \
  "$SCAN" 2>/dev/null
ls -la "$OUT"
echo "[$(elapsed) s] done"
