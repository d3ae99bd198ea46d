#!/usr/bin/env bash
# Device call A of 2026-12-07 session 2 (planned), 2026-12-08: the Mosaic decode tests compiled after the
# 3ac3da6 review (not compiled since), then the GEMV `llama` plan for the 8-bit formats on
# this GPU, the first half of a dispatch table for a device kind other than the H200.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
FP8LAB_GPU_TESTS=1 timeout 120 python3 -m pytest -q -p no:cacheprovider \
  fp8lab_tests/test_attention_mosaic.py > $OUT/test_mosaic_gpu.log 2>&1
echo "mosaic tests rc=$? $(( $(date +%s)-T0 )) s"; grep "passed\|failed" $OUT/test_mosaic_gpu.log | tail -2
grep "^FAILED\|^E  " $OUT/test_mosaic_gpu.log | head -8
LEFT=$(( 560 - ($(date +%s)-T0) ))
timeout $LEFT python3 benchmarks/bench_gemv.py --plan=llama --formats=e4m3,e5m2,mxfp8 \
  --reps=20 --max_copies=32 --time_budget_s=$(( LEFT - 40 )) \
  --out=$OUT/gemv_h100_llama_a_$(date -u +%Y%m%d_%H%M%S).json > $OUT/bench_gemv.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 )) s"; tail -5 $OUT/bench_gemv.log | cut -c1-200
