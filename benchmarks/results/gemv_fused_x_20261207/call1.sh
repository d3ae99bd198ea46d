#!/usr/bin/env bash
# Device call 1 (planned 2026-12-04, run 2026-12-07): GemvConfig.fuse_x (the kernel cuts x's parts from x itself: no
# transposed-parts kernel before each GEMV). 1) compiled fused-x tests; 2) default config
# with and without fuse_x at the 8B shapes, bf16 x, B 1 / 16; 3) a 2-layer step's kernels and
# 4) the 8B decode step, each with fuse_x forced on every gemv_config (a patched lookup).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
rm -f /tmp/fshard_*
FP8LAB_GPU_TESTS=1 python3 -m pytest -q --collect-only fp8lab_tests/test_gemv.py -k fused_x \
  2>/dev/null | grep "::" > /tmp/fids
split -n r/4 /tmp/fids /tmp/fshard_
for f in /tmp/fshard_*; do
  mapfile -t ids < $f
  FP8LAB_GPU_TESTS=1 timeout 150 python3 -m pytest -q -p no:cacheprovider "${ids[@]}" > $f.log 2>&1 &
done
wait
cat /tmp/fshard_*.log > $OUT/test_gpu.log
echo "tests $(( $(date +%s)-T0 )) s"; grep -h "passed\|failed" /tmp/fshard_*.log; grep -h "^FAILED" /tmp/fshard_*.log | head
timeout 200 python3 benchmarks/probes/configs.py --formats=e4m3,nvfp4,mxfp4 \
  --sizes=6144x4096,4096x4096,28672x4096,4096x14336 --batches=1,16 \
  --configs= --fuse_x_too --x_dtype=bfloat16 --nokernel_only --copy_gib=0.5 --budget_s=150 \
  --out=$OUT/probe_fuse.json 2>&1 | grep -v "^[IW][0-9]\{4\} " > $OUT/probe_fuse.log
echo "probe $(( $(date +%s)-T0 )) s"; grep "B1\|B16\|copy" $OUT/probe_fuse.log | cut -c1-150
FUSE='import dataclasses, runpy, sys
from fp8lab.kernels.gemv import configs as C, kernel as K
orig = C.gemv_config
K.gemv_config = C.gemv_config = lambda *a, **k: dataclasses.replace(orig(*a, **k), fuse_x=True)
script = sys.argv[1]; sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")'
timeout 60 python3 -c "$FUSE" benchmarks/probes/step_kernels.py --layers=2 \
  fp8lab_e4m3:e4m3_block:1x4096 2>&1 | grep -v "^[IW][0-9]\{4\} " > $OUT/step_kernels.log
echo "steps $(( $(date +%s)-T0 )) s"; head -26 $OUT/step_kernels.log | cut -c1-80
DEC="--paths=bf16,xla_e4m3,fp8lab_e4m3,fp8lab_nvfp4 --cases=1x4096,16x4096 --kv_formats=e4m3_block --reps=10 --time_budget_s=90"
timeout 120 python3 benchmarks/bench_decode.py $DEC --out=$OUT/decode.json > $OUT/decode.log 2>&1
echo "decode rc=$? $(( $(date +%s)-T0 )) s"; sed -n '/^path/,/^NVIDIA/p' $OUT/decode.log
timeout 120 python3 -c "$FUSE" benchmarks/bench_decode.py $DEC --out=$OUT/decode_fused.json > $OUT/decode_fused.log 2>&1
echo "decode fused rc=$? $(( $(date +%s)-T0 )) s"; sed -n '/^path/,/^NVIDIA/p' $OUT/decode_fused.log
