#!/usr/bin/env bash
# Third call: the 8B-shaped decode step with XLA's command buffers off (every path), and the
# XLA bf16 baseline with the default flags, same call.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
T0=$(date +%s)
XLA_FLAGS="--xla_gpu_enable_command_buffer=" timeout 250 python3 benchmarks/bench_decode.py \
  --paths=bf16,xla_e4m3,fp8lab_e4m3,fp8lab_nvfp4 --cases=1x4096,16x4096 --kv_formats=bf16,e4m3_block \
  --reps=10 --time_budget_s=200 --out=$OUT/decode3_off.json > $OUT/decode3_off.log 2>&1
echo "off rc=$?"; grep "tok/s\|ERROR" $OUT/decode3_off.log | tail -14
EL=$(( $(date +%s)-T0 ))
timeout $(( 320-EL )) python3 benchmarks/bench_decode.py --paths=bf16 --cases=1x4096,16x4096 --reps=10 \
  --out=$OUT/decode3_default.json > $OUT/decode3_default.log 2>&1
echo "default rc=$?"; grep "tok/s" $OUT/decode3_default.log | tail -3
echo "total $(( $(date +%s)-T0 )) s"
