#!/usr/bin/env bash
# H200 call 5 (2026-12-03 19:15): the compiled quantize tests (test_quantize_kernel.py, with
# the one-launch KV update's test_rows_written_into_existing_arrays, and test_quantize_op.py),
# slow grids, at d0d8950: the 14:25-16:30 refactors had not run compiled.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
ids=$(FP8LAB_GPU_TESTS=1 FP8LAB_SLOW_TESTS=1 python3 -m pytest -q --collect-only fp8lab_tests/test_quantize_kernel.py fp8lab_tests/test_quantize_op.py 2>/dev/null | grep "::")
echo "$(echo "$ids" | wc -l) tests"
rm -f /tmp/shard_*                     # a warm machine keeps the last call's shards
echo "$ids" | split -n r/12 - /tmp/shard_
for f in /tmp/shard_??; do
  mapfile -t arr < $f                  # test ids with spaces in them: one per line
  FP8LAB_GPU_TESTS=1 FP8LAB_SLOW_TESTS=1 timeout 300 python3 -m pytest -q -p no:cacheprovider "${arr[@]}" > $f.log 2>&1 &
done
wait
cat /tmp/shard_*.log > $OUT/test_gpu_quantize.log
echo "tests $(( $(date +%s)-T0 )) s:"; grep -h "passed\|failed\|error" /tmp/shard_*.log | tail -12
grep -h "^FAILED\|^ERROR" /tmp/shard_*.log | head -10
