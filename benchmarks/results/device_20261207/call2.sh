#!/usr/bin/env bash
# Device call 2 of 2026-12-07: the Mosaic decode kernel after call 1 (capacity a multiple of 8
# for its TMA rows; the k_regs variant): compiled tests, then launch variants at 8 x 128K and
# the best three at 1 x 128K and 8 x 32K, the Triton default beside them.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
FP8LAB_GPU_TESTS=1 timeout 150 python3 -m pytest -q -p no:cacheprovider \
  fp8lab_tests/test_attention_mosaic.py > $OUT/test_mosaic_gpu.log 2>&1
echo "mosaic tests rc=$? $(( $(date +%s)-T0 )) s"; grep "passed\|failed" $OUT/test_mosaic_gpu.log | tail -3
grep "^FAILED\|^E  " $OUT/test_mosaic_gpu.log | head -12
timeout 150 python3 benchmarks/probes/attention_configs.py \
  --sizes=8x131072x32x8x128,1x131072x32x8x128,8x32768x32x8x128 --formats=e4m3_block --top=3 \
  --reps=10 --time_budget_s=135 --variants=default,mosaic:64:2:1:1,mosaic:64:2:1:1:1,mosaic:64:3:1:1:1,mosaic:128:3:1:1:1,mosaic:128:4:1:2:1,mosaic:64:2:2:1:1,mosaic:64:2:0.5:1:1 \
  --out=$OUT/probe.json 2>&1 | grep -v '^[IW][0-9]\{4\} ' > $OUT/probe.log
echo "probe $(( $(date +%s)-T0 )) s"; grep "\]\|BEST" $OUT/probe.log | cut -c1-170
