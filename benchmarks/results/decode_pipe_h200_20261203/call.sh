#!/usr/bin/env bash
# H200 call: the 8B-shaped decode step timed three ways (synced per step, 16 steps enqueued
# back to back, 8 steps inside one jitted fori_loop), with the GPU's busy / idle time and top
# kernels over the back-to-back steps; default XLA flags, then command buffers off.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 330 python3 benchmarks/bench_decode.py \
  --paths=bf16,xla_e4m3,fp8lab_e4m3,fp8lab_nvfp4 --cases=1x4096,16x4096 --kv_formats=bf16,e4m3_block \
  --reps=10 --loop_steps=8 --time_budget_s=270 --out=$OUT/decode_default.json > $OUT/decode_default.log 2>&1
echo "default rc=$?"; sed -n '/^path/,$p' $OUT/decode_default.log
EL=$(( $(date +%s)-T0 ))
XLA_FLAGS="--xla_gpu_enable_command_buffer=" timeout $(( 560-EL )) python3 benchmarks/bench_decode.py \
  --paths=bf16,xla_e4m3,fp8lab_e4m3,fp8lab_nvfp4 --cases=1x4096 --kv_formats=bf16,e4m3_block \
  --reps=10 --loop_steps=8 --time_budget_s=$(( 500-EL )) --out=$OUT/decode_off.json > $OUT/decode_off.log 2>&1
echo "off rc=$?"; sed -n '/^path/,$p' $OUT/decode_off.log
echo "total $(( $(date +%s)-T0 )) s"
