#!/usr/bin/env bash
# H200 call 2: the decode kernel's KV splits at short caches (the 8B step's L = 4096, where
# 128 one-block splits write 8 MB of partials per layer): attention_configs.py, split
# multipliers of the default launch, e4m3 per token-head and nvfp4.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
timeout 420 python3 benchmarks/probes/attention_configs.py \
  --sizes=1x4096x32x8x128,16x4096x32x8x128,1x32768x32x8x128 --formats=e4m3_block,nvfp4 \
  --variants=f16:auto:32:1:2,f16:auto:32:1:2:0.5,f16:auto:32:1:2:0.25,f16:auto:32:1:2:0.125,f16:auto:32:1:2:0.0625,f16:auto:32:1:1:0.125 \
  --top=6 --reps=10 --time_budget_s=380 --out=$OUT/attn_splits.json 2>&1 | grep -v "^I1203\|^W1203" > $OUT/attn_splits.log
echo "rc=$?"; grep "dev\|BEST" $OUT/attn_splits.log
