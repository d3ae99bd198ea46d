#!/usr/bin/env bash
# H200 call 3: attention_config's splits as at most eight waves of programs (a power of two
# rounded down) and at least MIN_SPLIT_BLOCKS = 4 blocks each, at the long caches (x2 = the
# rule before, next power of two up); then the 8B decode step with packed e4m3 KV.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 150 python3 benchmarks/probes/attention_configs.py \
  --sizes=8x131072x32x8x128,1x131072x32x8x128,8x32768x32x8x128 --formats=e4m3_block,nvfp4 \
  --variants=f16:auto:32:1:2,f16:auto:32:1:2:2,f16:auto:32:1:1,f16:auto:32:1:1:2 \
  --top=4 --reps=10 --time_budget_s=120 --out=$OUT/attn_splits_long.json 2>&1 | grep -v "^I1203\|^W1203" > $OUT/attn_splits_long.log
echo "probe rc=$? $(( $(date +%s)-T0 )) s"; grep " dev " $OUT/attn_splits_long.log | cut -c1-110
timeout 150 python3 benchmarks/bench_decode.py --paths=bf16,fp8lab_e4m3 \
  --cases=1x4096,16x4096 --kv_formats=e4m3_block --reps=10 --time_budget_s=100 \
  --out=$OUT/decode_splits4.json > $OUT/decode_splits4.log 2>&1
echo "decode rc=$? $(( $(date +%s)-T0 )) s"; sed -n '/^path/,/^NVIDIA/p' $OUT/decode_splits4.log
