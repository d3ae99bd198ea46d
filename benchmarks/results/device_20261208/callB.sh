#!/usr/bin/env bash
# Device call B of 2026-12-07 session 2 (planned), 2026-12-08: the kernels of issue 24's fixed cost (one 2048^2
# linear at m = 32, forward + backward, and its quantize calls alone), then the GEMV `llama`
# plan for the 4-bit formats on this GPU (the second half of its dispatch table).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 150 python3 benchmarks/probes/train_fixed_kernels.py --m=32 --d=2048 \
  > $OUT/train_fixed_kernels.log 2>&1
echo "train probe rc=$? $(( $(date +%s)-T0 )) s"
grep -v '^[IW][0-9]\{4\} \|Warning\|warn' $OUT/train_fixed_kernels.log | cut -c1-150 | head -120
LEFT=$(( 560 - ($(date +%s)-T0) ))
timeout $LEFT python3 benchmarks/bench_gemv.py --plan=llama --formats=nvfp4,mxfp4 \
  --reps=20 --max_copies=32 --time_budget_s=$(( LEFT - 40 )) \
  --out=$OUT/gemv_h100_llama_b_$(date -u +%Y%m%d_%H%M%S).json > $OUT/bench_gemv.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 )) s"; tail -5 $OUT/bench_gemv.log | cut -c1-200
