#!/usr/bin/env bash
# H200 call 1 (2026-12-03 evening): every kernel of a 3-layer 8B-wide decode step in launch
# order (benchmarks/probes/step_kernels.py), then the decode kernel's launch variants at the
# 8B step's own sizes (B 1 and 16, L 4096, 32 / 8 heads, D 128).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
timeout 240 python3 benchmarks/probes/step_kernels.py --layers=3 \
  fp8lab_e4m3:e4m3_block:1x4096 fp8lab_e4m3:e4m3_block:16x4096 fp8lab_nvfp4:e4m3_block:1x4096 \
  xla_e4m3:bf16:1x4096 bf16:bf16:1x4096 2>&1 | grep -v "^I1203\|^W1203" > $OUT/step_kernels.log
echo "steps rc=$? $(( $(date +%s)-T0 )) s"; grep "^==" $OUT/step_kernels.log
timeout 200 python3 benchmarks/probes/attention_configs.py \
  --sizes=1x4096x32x8x128,16x4096x32x8x128 --formats=e4m3_block,nvfp4 \
  --variants=f16:auto:32:1:2,f16:auto:32:1:2:2,f16:auto:32:1:2:0.5,f16:auto:32:1:1,f16:auto:64:2:2,f16:auto:64:1:2,f16:auto:128:4:1,f16:auto:128:4:2:0.5,f16:auto:32:2:2,f16:auto:16:1:2:2,f16:auto:64:4:2 \
  --top=4 --reps=10 --time_budget_s=180 --out=$OUT/attn_8b.json 2>&1 | grep -v "^I1203\|^W1203" > $OUT/attn_8b.log
echo "probe rc=$? $(( $(date +%s)-T0 )) s"; grep " dev \|BEST" $OUT/attn_8b.log | cut -c1-120
