#!/usr/bin/env bash
# Launch-cost probe (benchmarks/probes/launch_cost.py) under three XLA_FLAGS settings.
set -u
T0=$(date +%s)
export PYTHONPATH=. PYTHONUNBUFFERED=1 PROBE_N=64 PROBE_REPS=30
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)"
declare -A V
V[default]=""
V[cb]="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN --xla_gpu_graph_min_graph_size=1"
V[off]="--xla_gpu_enable_command_buffer="
for v in default cb off; do
  XLA_FLAGS="${V[$v]}" PROBE_OUT=$OUT/launch_$v.json timeout 120 python3 benchmarks/probes/launch_cost.py 2>&1 \
    | grep -v "^I1\|^W1\|DeprecationWarning\|warnings.warn\|deprecations.warn" | tail -8
done
# Which thunks XLA wraps in command buffers (small chains, default flags, dump read here).
rm -rf /tmp/xdump; PROBE_N=6 PROBE_REPS=3 PROBE_DEVICE=0 XLA_FLAGS="--xla_dump_to=/tmp/xdump" \
  timeout 120 python3 benchmarks/probes/launch_cost.py > /dev/null 2>&1
for f in /tmp/xdump/*jit_f*thunk_sequence_after_thunk_passes.txt; do
  echo "--- $(basename $f)"; head -c 600 $f | cut -c1-140; echo
done
# The kernels of one layer's packed-KV attention part (kv_cache_update x2 + attention).
for bl in "1 4096" "16 4096"; do
  set -- $bl
  timeout 100 python3 benchmarks/probes/kv_step_kernels.py e4m3_block,nvfp4,bf16 $1 $2 pallas,reference \
    > $OUT/kv_step_B$1.txt 2>&1
  echo "kv_step B=$1 rc=$?"; grep "==\|host per call\|device .* us over" $OUT/kv_step_B$1.txt
done
# The 8B-shaped step with packed KV caches: kv_cache_update through the kernel against the
# default (the reference for a step's tokens), separate processes, same call.
for u in pallas auto; do
  EL=$(( $(date +%s)-T0 )); [ $EL -gt 420 ] && { echo "skip decode $u at ${EL}s"; continue; }
  timeout $(( 590-EL )) python3 benchmarks/bench_decode.py --paths=fp8lab_e4m3 --cases=1x4096,16x4096 \
    --kv_formats=e4m3_block,nvfp4 --kv_update=$u --reps=10 --time_budget_s=60 --out=$OUT/decode_$u.json \
    > $OUT/decode_$u.log 2>&1; echo "decode kv_update=$u rc=$?"; grep "tok/s" $OUT/decode_$u.log | tail -6
done
echo "total $(( $(date +%s)-T0 )) s"
