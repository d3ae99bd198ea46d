#!/usr/bin/env bash
# Device call 1 (2026-12-07): the Mosaic GPU decode kernel (implementation="mosaic").
# 1) its compiled tests; 2) the launch probe (Triton default vs mosaic variants) at the
# issue's sizes and the 8B step's; 3) the benchmark grid rows against cudnn bf16.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
FP8LAB_GPU_TESTS=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -x \
  fp8lab_tests/test_attention_mosaic.py > $OUT/test_gpu.log 2>&1
echo "tests rc=$? $(( $(date +%s)-T0 )) s"; tail -3 $OUT/test_gpu.log; grep -m3 -A30 "^E " $OUT/test_gpu.log | head -40
timeout 260 python3 benchmarks/probes/attention_configs.py \
  --sizes=8x131072x32x8x128,8x32768x32x8x128,1x131072x32x8x128,1x4096x32x8x128,16x4096x32x8x128 \
  --formats=e4m3_block,e4m3 --top=3 --reps=10 --time_budget_s=240 \
  --variants=default,mosaic,mosaic:128:2,mosaic:128:3:0.5,mosaic:128:3:2,mosaic:64:4,mosaic:64:2,mosaic:128:3:1:1 \
  --out=$OUT/probe.json 2>&1 | grep -v "^[IW][0-9]\{4\} " > $OUT/probe.log
echo "probe $(( $(date +%s)-T0 )) s"; grep "\]" $OUT/probe.log | cut -c1-170; grep BEST $OUT/probe.log
timeout 150 python3 benchmarks/bench_attention.py --sizes=b8_s128k,b8_s32k,b1_s128k,b1_s4k,b16_s4k \
  --cases=e4m3_block_f16,e4m3_f16,mg_e4m3_block,mg_e4m3 --baselines=copy,cudnn_bf16 \
  --time_budget_s=130 --out=$OUT/attention.json > $OUT/attention.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 )) s"; grep -v "^[IW][0-9]\{4\} " $OUT/attention.log | tail -30
