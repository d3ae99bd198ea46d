#!/usr/bin/env bash
# Second call: does the host cost per launch depend on the step's buffers changing between
# calls (command-buffer updates)? And the decode step with command buffers off.
set -u
T0=$(date +%s)
export PYTHONPATH=. PYTHONUNBUFFERED=1 PROBE_N=64 PROBE_REPS=30 PROBE_KINDS=xla,triton,triton_xla
for cfg in "0|" "1|" "1|--xla_gpu_enable_command_buffer="; do
  vary=${cfg%%|*}; fl=${cfg#*|}
  PROBE_VARY=$vary XLA_FLAGS="$fl" PROBE_OUT=$OUT/launch2_vary${vary}_${fl:+off}.json timeout 100 \
    python3 benchmarks/probes/launch_cost.py 2>&1 | grep -v "^I1\|^W1\|eprecat\|warn" | tail -4
done
timeout 100 python3 benchmarks/probes/kv_step_kernels.py e4m3_block,bf16 1 4096 pallas > $OUT/kv_step2_B1.txt 2>&1
echo "kv_step rc=$?"; grep "==\|host per call" $OUT/kv_step2_B1.txt
for fl in "" "--xla_gpu_enable_command_buffer="; do
  EL=$(( $(date +%s)-T0 )); [ $EL -gt 400 ] && { echo "skip decode '$fl' at ${EL}s"; continue; }
  XLA_FLAGS="$fl" timeout $(( 590-EL )) python3 benchmarks/bench_decode.py --paths=bf16,fp8lab_e4m3 --cases=1x4096 \
    --reps=10 --time_budget_s=60 --out=$OUT/decode2_${fl:+off}.json > $OUT/decode2_${fl:+off}.log 2>&1
  echo "decode XLA_FLAGS='$fl' rc=$?"; grep "tok/s" $OUT/decode2_${fl:+off}.log | tail -3
done
echo "total $(( $(date +%s)-T0 )) s"
