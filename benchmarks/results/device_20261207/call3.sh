#!/usr/bin/env bash
# Device call 3 of 2026-12-07: the Mosaic decode kernel's launch around call 2's best
# (64:2 with twice the splits, K from registers), at the sizes and the 8B step's.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 170 python3 benchmarks/probes/attention_configs.py \
  --sizes=8x131072x32x8x128,1x131072x32x8x128,8x32768x32x8x128,1x4096x32x8x128,16x4096x32x8x128 \
  --formats=e4m3_block,e4m3 --top=3 --reps=10 --time_budget_s=150 \
  --variants=default,mosaic:64:2:2:1:1,mosaic:64:2:4:1:1,mosaic:64:3:2:1:1,mosaic:64:2:2:2:1,mosaic:128:2:2:1:1 \
  --out=$OUT/probe.json 2>&1 | grep -v '^[IW][0-9]\{4\} ' > $OUT/probe.log
grep "\]\|BEST" $OUT/probe.log | cut -c1-150
