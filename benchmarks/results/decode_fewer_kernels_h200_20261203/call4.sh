#!/usr/bin/env bash
# H200 call 4 (2026-12-03 evening): the decode-attention grid with cuDNN bf16 and the copy
# in the same run, at the commit of call 3's kernels (b77f342) plus the two 8B-step sizes.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
timeout 420 python3 benchmarks/bench_attention.py \
  --sizes=b1_s4k,b16_s4k,b8_s128k,b1_s128k,b8_s32k --cases=e4m3_block_f16,nvfp4_f16,mxfp4_f16,e4m3_f16 \
  --baselines=copy,cudnn_bf16 --reps=10 --time_budget_s=380 \
  --out=$OUT/attention.json > $OUT/attention.log 2>&1
echo "attention rc=$? $(( $(date +%s)-T0 )) s"; grep -v "^I1203\|^W1203" $OUT/attention.log | tail -40
