#!/usr/bin/env bash
# Command-buffer probe: same benches under three XLA_FLAGS variants, separate processes.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 FP8LAB_GIT_COMMIT=7095b49
declare -A V
V[default]=""
V[cb]="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN --xla_gpu_graph_min_graph_size=1"
V[off]="--xla_gpu_enable_command_buffer="
T0=$(date +%s)
for v in default cb off; do
  export XLA_FLAGS="${V[$v]}"
  echo "=== $v XLA_FLAGS='$XLA_FLAGS' t=$(( $(date +%s)-T0 ))"
  timeout 60 python3 benchmarks/bench_quantize.py --cases=e4m3_delayed --impls=pallas --xla=copy,xla_delayed --sizes=1024x1024 --reps=20 --out=$OUT/q_$v.json > $OUT/q_$v.log 2>&1; echo "q rc=$?"
  grep -v "^I1\|^W1\|tpu" $OUT/q_$v.log | tail -6
  timeout 80 python3 benchmarks/bench_gemv.py --ops=pallas,xla_e4m3,xla_bf16 --formats=e4m3,nvfp4 --sizes=4096x4096 --batches=1,16 --reps=20 --out=$OUT/g_$v.json > $OUT/g_$v.log 2>&1; echo "g rc=$?"
  grep -v "^I1\|^W1\|tpu" $OUT/g_$v.log | tail -8
  timeout 80 python3 benchmarks/bench_train.py --parts=fixed --recipes=fp8_delayed --fixed_m=32 --out=$OUT/t_$v.json --png=$OUT/t_$v.png > $OUT/t_$v.log 2>&1; echo "t rc=$?"
  grep -v "^I1\|^W1\|tpu" $OUT/t_$v.log | tail -8
  if [ $v != off ]; then
    timeout 110 python3 benchmarks/bench_decode.py --paths=bf16,fp8lab_e4m3,fp8lab_nvfp4 --cases=1x4096,16x4096 --kv_formats=bf16 --reps=10 --time_budget_s=90 --out=$OUT/d_$v.json > $OUT/d_$v.log 2>&1; echo "d rc=$?"
    grep "tok/s" $OUT/d_$v.log | tail -8
  fi
done
unset XLA_FLAGS
EL=$(( $(date +%s)-T0 ))
if [ $EL -lt 430 ]; then
  timeout $(( 570-EL )) python3 benchmarks/bench_train.py --parts=step,fixed --recipes=nvfp4_te --steps=4 --out=$OUT/t_nvfp4te.json --png=$OUT/t_nvfp4te.png > $OUT/t_nvfp4te.log 2>&1; echo "nvfp4_te rc=$?"
  grep -v "^I1\|^W1\|tpu" $OUT/t_nvfp4te.log | tail -12
fi
echo "total $(( $(date +%s)-T0 )) s"
