#!/usr/bin/env bash
# H200 call 2, at the working tree with attention_config's MIN_SPLIT_BLOCKS = 8 and
# kv_cache_update's one-launch write (the quantize kernel storing into the cache's rows):
#  1. attention_configs.py: the decode kernel's KV splits at short caches, split multipliers
#     of the new default (x8 at 1 x 4096 / 16 x 4096 and x2 at 1 x 32768 = the old default);
#  2. bench_decode.py with packed e4m3 per token-head KV (B 1, 16);
#  3. test_attention.py and test_quantize_kernel.py compiled (slow grids), 12 processes.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 170 python3 benchmarks/probes/attention_configs.py \
  --sizes=1x4096x32x8x128,16x4096x32x8x128,1x32768x32x8x128 --formats=e4m3_block,nvfp4 \
  --variants=f16:auto:32:1:2,f16:auto:32:1:2:8,f16:auto:32:1:2:4,f16:auto:32:1:2:2,f16:auto:32:1:2:0.5,f16:auto:32:1:1,f16:auto:32:1:1:8 \
  --top=7 --reps=10 --time_budget_s=140 --out=$OUT/attn_splits.json 2>&1 | grep -v "^I1203\|^W1203" > $OUT/attn_splits.log
echo "probe rc=$? $(( $(date +%s)-T0 )) s"; grep " dev " $OUT/attn_splits.log | cut -c1-110
timeout 180 python3 benchmarks/bench_decode.py --paths=bf16,fp8lab_e4m3,fp8lab_nvfp4 \
  --cases=1x4096,16x4096 --kv_formats=e4m3_block --reps=10 --time_budget_s=130 \
  --out=$OUT/decode_splits.json > $OUT/decode_splits.log 2>&1
echo "decode rc=$? $(( $(date +%s)-T0 )) s"; sed -n '/^path/,/^NVIDIA/p' $OUT/decode_splits.log
FP8LAB_GPU_TESTS=1 FP8LAB_SLOW_TESTS=1 python3 -m pytest -q --collect-only \
  fp8lab_tests/test_attention.py fp8lab_tests/test_quantize_kernel.py 2>/dev/null | grep '::' > /tmp/ids
for i in $(seq 0 11); do
  mapfile -t ids < <(awk -v i=$i '(NR - 1) % 12 == i' /tmp/ids)
  timeout -k 5 170 env FP8LAB_GPU_TESTS=1 FP8LAB_SLOW_TESTS=1 XLA_PYTHON_CLIENT_PREALLOCATE=false \
    python3 -m pytest -q -rfE --tb=short -p no:cacheprovider "${ids[@]}" > /tmp/t_$i.log 2>&1 &
done
wait
cat /tmp/t_*.log > $OUT/test_gpu.log
grep -E "passed|failed|^FAILED|^ERROR" $OUT/test_gpu.log | head -30
echo "total $(( $(date +%s)-T0 )) s"
