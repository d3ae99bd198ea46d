#!/usr/bin/env bash
# Device call 1 of 2026-12-07 (one call for the session's little device time): the Mosaic GPU
# decode kernel (compiled tests, its launch variants at 8 x 128K, the benchmark rows against
# cudnn) and GemvConfig.fuse_x (compiled tests, the 8B step with and without it).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
F='^[IW][0-9]\{4\} '
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
rm -f /tmp/fshard_*
FP8LAB_GPU_TESTS=1 python3 -m pytest -q --collect-only fp8lab_tests/test_gemv.py -k fused_x \
  2>/dev/null | grep "::" > /tmp/fids
split -n r/3 /tmp/fids /tmp/fshard_
for f in /tmp/fshard_*; do
  mapfile -t ids < $f
  FP8LAB_GPU_TESTS=1 timeout 150 python3 -m pytest -q -p no:cacheprovider "${ids[@]}" > $f.log 2>&1 &
done
FP8LAB_GPU_TESTS=1 timeout 150 python3 -m pytest -q -p no:cacheprovider \
  fp8lab_tests/test_attention_mosaic.py > $OUT/test_mosaic_gpu.log 2>&1
echo "mosaic tests rc=$? $(( $(date +%s)-T0 )) s"; tail -2 $OUT/test_mosaic_gpu.log
grep -m2 -B5 -A25 "^E " $OUT/test_mosaic_gpu.log | head -60
wait
cat /tmp/fshard_*.log > $OUT/test_fused_x_gpu.log
echo "fused_x tests $(( $(date +%s)-T0 )) s"; grep -h "passed\|failed" /tmp/fshard_*.log; grep -h "^FAILED" /tmp/fshard_*.log | head
timeout 110 python3 benchmarks/probes/attention_configs.py --sizes=8x131072x32x8x128 \
  --formats=e4m3_block --top=0 --reps=10 --time_budget_s=95 \
  --variants=default,mosaic,mosaic:128:2,mosaic:64:4,mosaic:64:2,mosaic:128:3:2,mosaic:128:3:1:1 \
  --out=$OUT/probe.json 2>&1 | grep -v "$F" > $OUT/probe.log
echo "probe $(( $(date +%s)-T0 )) s"; grep "\]" $OUT/probe.log | cut -c1-200
timeout 110 python3 benchmarks/bench_attention.py --sizes=b8_s128k,b1_s128k,b1_s4k \
  --cases=e4m3_block_f16,mg_e4m3_block,mg_e4m3 --baselines=copy,cudnn_bf16 \
  --time_budget_s=90 --out=$OUT/attention.json > $OUT/attention.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 )) s"; grep -v "$F" $OUT/attention.log | grep -v "^\[" | tail -16
FUSE='import dataclasses, runpy, sys
from fp8lab.kernels.gemv import configs as C, kernel as K
orig = C.gemv_config
K.gemv_config = C.gemv_config = lambda *a, **k: dataclasses.replace(orig(*a, **k), fuse_x=True)
script = sys.argv[1]; sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")'
DEC="--paths=bf16,xla_e4m3,fp8lab_e4m3 --cases=1x4096,16x4096 --kv_formats=e4m3_block --reps=10 --time_budget_s=70"
timeout 95 python3 benchmarks/bench_decode.py $DEC --out=$OUT/decode.json > $OUT/decode.log 2>&1
echo "decode rc=$? $(( $(date +%s)-T0 )) s"; sed -n '/^path/,/^NVIDIA/p' $OUT/decode.log
timeout 95 python3 -c "$FUSE" benchmarks/bench_decode.py $DEC --out=$OUT/decode_fused.json > $OUT/decode_fused.log 2>&1
echo "decode fused rc=$? $(( $(date +%s)-T0 )) s"; sed -n '/^path/,/^NVIDIA/p' $OUT/decode_fused.log
