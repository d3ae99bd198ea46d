#!/usr/bin/env bash
# H200 call 2 (2026-12-03 evening): the decode kernel reads q in place and a Pallas kernel
# combines its splits (two XLA kernels fewer around it, the combine one instead of three);
# FEW_WAVES launch for short caches. 1) compiled tests of test_attention.py (slow grids);
# 2) the launch at small sizes: default against the one-warp launch; 3) one 3-layer step's
# kernels; 4) the 8B decode step.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
ids=$(FP8LAB_GPU_TESTS=1 FP8LAB_SLOW_TESTS=1 python3 -m pytest -q --collect-only fp8lab_tests/test_attention.py 2>/dev/null | grep "::")
echo "$ids" | split -n r/8 - /tmp/shard_
for f in /tmp/shard_*; do
  FP8LAB_GPU_TESTS=1 FP8LAB_SLOW_TESTS=1 timeout 200 python3 -m pytest -q -p no:cacheprovider $(cat $f) > $f.log 2>&1 &
done
wait
cat /tmp/shard_*.log > $OUT/test_gpu.log
echo "tests $(( $(date +%s)-T0 )) s:"; grep -h "passed\|failed\|error" /tmp/shard_*.log | tail -8
grep -h "^FAILED\|^ERROR" /tmp/shard_*.log | head -10
timeout 150 python3 benchmarks/probes/attention_configs.py \
  --sizes=1x4096x32x8x128,1x1024x32x8x128,1x8192x32x8x128,2x4096x32x8x128,4x4096x32x8x128,1x16384x32x8x128,16x4096x32x8x128 \
  --formats=e4m3_block,nvfp4 --variants=default,f16:auto:32:1:2,f16:auto:32:1:1,f16:auto:128:4:1 \
  --top=4 --reps=10 --time_budget_s=130 --out=$OUT/attn_small.json 2>&1 | grep -v "^I1203\|^W1203" > $OUT/attn_small.log
echo "probe $(( $(date +%s)-T0 )) s"; grep " dev " $OUT/attn_small.log | cut -c10-100
timeout 60 python3 benchmarks/probes/step_kernels.py --layers=2 fp8lab_e4m3:e4m3_block:1x4096 \
  2>&1 | grep -v "^I1203\|^W1203" > $OUT/step_kernels.log
echo "steps $(( $(date +%s)-T0 )) s"; head -30 $OUT/step_kernels.log | cut -c1-80
timeout 200 python3 benchmarks/bench_decode.py --paths=bf16,xla_e4m3,fp8lab_e4m3,fp8lab_nvfp4 \
  --cases=1x4096,16x4096 --kv_formats=e4m3_block --reps=10 --time_budget_s=170 \
  --out=$OUT/decode.json > $OUT/decode.log 2>&1
echo "decode rc=$? $(( $(date +%s)-T0 )) s"; sed -n '/^path/,/^NVIDIA/p' $OUT/decode.log
