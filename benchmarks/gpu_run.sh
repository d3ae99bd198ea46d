#!/usr/bin/env bash
# The one command for a call on the lent GPU machine (run from the repository root, $OUT set):
#   1. the GPU tests compiled (FP8LAB_GPU_TESTS=1, and FP8LAB_SLOW_TESTS=1 for the whole
#      grids that CI thins): GPU_RUN_TEST_FILES, default the GEMV kernel, the ops and the
#      golden model (with GPU_RUN_BENCH=quantize: the quantize kernel, its op and its
#      in-kernel scalars); GPU_RUN_TEST_SHARDS parallel pytest processes, default 3; log in
#      $OUT/test_<bench>_gpu.log;
#   2. the benchmark (GPU_RUN_BENCH: "gemv", the default, "quantize", "attention" or
#      "decode"), JSON in $OUT/<bench>_h200_<date>.json, log in $OUT/bench_<bench>.log;
#   3. a short table last (gemv: 16384x16384, batches 1 and 16; quantize: every row).
# It ends within GPU_RUN_LIMIT_S (default 560 s; a device call may run 600 s): the tests get at
# most GPU_RUN_TEST_TIMEOUT_S, the benchmark gets what is left, stops starting new work when its
# budget is spent (work is ordered by priority, see PLAN) and rewrites its JSON after every row,
# so a cut-short run still returns what it finished.
#
# Knobs (environment):
#   GPU_RUN_TESTS=0            skip step 1
#   GPU_RUN_BENCH=quantize     benchmarks/bench_quantize.py instead of bench_gemv.py (its
#                              default grid; GPU_RUN_PLAN does not apply); likewise
#                              attention (bench_attention.py, tests: test_attention.py) and
#                              decode (bench_decode.py; no test files of its own: set
#                              GPU_RUN_TESTS=0 or GPU_RUN_TEST_FILES)
#   GPU_RUN_TEST_FILES="..."   the test files of step 1 (default above)
#   PYTEST_ARGS="-k e4m3"      extra pytest arguments
#   GPU_RUN_PLAN="..."         the benchmark's --plan (grids in priority order; default below)
#   BENCH_FLAGS="--reps=20"    extra benchmark flags (after the defaults, so they win),
#                              e.g. --formats=e4m3,e5m2 or --ops=pallas,xla_e4m3
#   GPU_RUN_TAG=h200           the tag in the JSON file name
#   FP8LAB_GIT_COMMIT=<sha>    recorded in the JSON when the copy of the tree has no .git
#   FP8LAB_BENCH_SMOKE=1       tiny sizes (a dry run on a CPU: checks this script and the flags)
# Example (device call):  bash benchmarks/gpu_run.sh
# Dry run here:           OUT=/tmp/out FP8LAB_BENCH_SMOKE=1 GPU_RUN_TESTS=0 GPU_RUN_TAG=cpu_dry bash benchmarks/gpu_run.sh
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
LIMIT_S=${GPU_RUN_LIMIT_S:-560}
TEST_TIMEOUT_S=${GPU_RUN_TEST_TIMEOUT_S:-240}
TAG=${GPU_RUN_TAG:-h200}
DATE=$(date -u +%Y%m%d_%H%M%S)
BENCH=${GPU_RUN_BENCH:-gemv}
case "$BENCH" in gemv|quantize|attention|decode) ;;
  *) echo "GPU_RUN_BENCH must be gemv, quantize, attention or decode" >&2; exit 2 ;; esac
JSON="$OUT/${BENCH}_${TAG}_${DATE}.json"
# Priority order: the headline shape first (batches 1 and 16: the targets), then the LLM
# shapes, then the other batches, then the square shapes; what the budget cuts comes last.
PLAN=${GPU_RUN_PLAN:-"sizes=16384x16384 batches=1,16 ops=pallas,pallas_int,reference,xla_packed,xla_f32,xla_bf16,xla_e4m3; \
sizes=4096x14336,14336x4096 formats=e4m3,mxfp4,nvfp4 batches=1,16 ops=pallas,xla_e4m3; \
sizes=16384x16384 batches=4,64 ops=pallas,xla_e4m3; \
sizes=8192x8192,4096x4096 formats=e4m3,mxfp4,nvfp4 batches=1,16 ops=pallas,xla_e4m3"}

echo "gpu_run: $(date -u +%FT%TZ) limit ${LIMIT_S}s, results in $JSON"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,memory.used,memory.total --format=csv 2>&1 || true; } | tee "$OUT/nvidia_smi.txt"
"$PY" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())' 2>&1 | tail -1

test_rc=skipped
if [ "${GPU_RUN_TESTS:-1}" != 0 ]; then
  # The tests' time is mostly compilation (CPU): GPU_RUN_TEST_SHARDS pytest processes share
  # the test ids round-robin and the GPU (no memory preallocation), one log each; -v names
  # each test as it ends, so a shard cut by the timeout still says what passed and failed.
  shards=${GPU_RUN_TEST_SHARDS:-3}
  echo "gpu_run: [${SECONDS}s] tests (${shards} shards, at most ${TEST_TIMEOUT_S}s)"
  default_files="fp8lab_tests/test_gemv.py fp8lab_tests/test_ops.py fp8lab_tests/test_golden_gpu.py"
  if [ "$BENCH" = quantize ]; then
    default_files="fp8lab_tests/test_quantize_kernel.py fp8lab_tests/test_quantize_op.py \
      fp8lab_tests/test_quantize_scalars.py fp8lab_tests/test_quantize_kernel_blockwise.py \
      fp8lab_tests/test_quantize_encoders.py"
  elif [ "$BENCH" = attention ]; then
    default_files="fp8lab_tests/test_attention.py"
  elif [ "$BENCH" = decode ]; then
    default_files="fp8lab_tests/test_bench_decode_smoke.py"
  fi
  test_files=${GPU_RUN_TEST_FILES:-$default_files}
  # shellcheck disable=SC2086  # word lists on purpose
  FP8LAB_GPU_TESTS=1 FP8LAB_SLOW_TESTS=1 "$PY" -m pytest -q --collect-only $test_files \
    ${PYTEST_ARGS:-} 2>/dev/null \
    | grep '::' > "$OUT/.test_ids"
  pids=()
  for ((i = 0; i < shards; i++)); do
    awk -v n="$shards" -v i="$i" '(NR - 1) % n == i' "$OUT/.test_ids" > "$OUT/.shard_$i"
    # one test id per line (ids may hold spaces: parametrized strings)
    mapfile -t shard_ids < "$OUT/.shard_$i"
    timeout -k 10 "$TEST_TIMEOUT_S" env FP8LAB_GPU_TESTS=1 FP8LAB_SLOW_TESTS=1 \
      XLA_PYTHON_CLIENT_PREALLOCATE=false \
      "$PY" -m pytest -v -rfE --tb=short -p no:cacheprovider "${shard_ids[@]}" \
      > "$OUT/.tests_$i.log" 2>&1 &
    pids+=($!)
  done
  test_rc=0
  for pid in "${pids[@]}"; do wait "$pid" || test_rc=$?; done
  for ((i = 0; i < shards; i++)); do
    echo "== shard $i of $shards"; cat "$OUT/.tests_$i.log"
  done > "$OUT/test_${BENCH}_gpu.log"
  rm -f "$OUT"/.test_ids "$OUT"/.shard_* "$OUT"/.tests_*.log
  grep -E '^(FAILED|ERROR)|passed|failed' "$OUT/test_${BENCH}_gpu.log" | grep -v ' PASSED'
  echo "gpu_run: $(grep -c ' PASSED' "$OUT/test_${BENCH}_gpu.log") PASSED, $(grep -c ' FAILED' \
    "$OUT/test_${BENCH}_gpu.log") FAILED lines"
  echo "gpu_run: [${SECONDS}s] tests rc=$test_rc (124: cut at ${TEST_TIMEOUT_S}s)"
fi

# The benchmark's own budget stops it starting new work 45 s before the hard limit: the row in
# flight (a compile plus its timing) and the summary need that much.
left=$((LIMIT_S - SECONDS))
budget=$((left - 45))
if [ "$budget" -lt 30 ]; then budget=30; fi
echo "gpu_run: [${SECONDS}s] benchmark (budget ${budget}s, hard stop $((left - 10))s)"
# shellcheck disable=SC2086  # BENCH_FLAGS is a word list on purpose
if [ "$BENCH" = gemv ]; then
  timeout -k 10 "$((left - 10))" "$PY" benchmarks/bench_gemv.py --out="$JSON" --plan="$PLAN" \
    --reps=30 --max_copies=64 --time_budget_s="$budget" ${BENCH_FLAGS:-} 2>&1 \
    | tee "$OUT/bench_gemv.log"
else
  timeout -k 10 "$((left - 10))" "$PY" "benchmarks/bench_$BENCH.py" --out="$JSON" \
    --time_budget_s="$budget" ${BENCH_FLAGS:-} 2>&1 | tee "$OUT/bench_$BENCH.log"
fi
bench_rc=$?

echo
echo "gpu_run: [${SECONDS}s] tests rc=$test_rc, benchmark rc=$bench_rc (124: cut at the hard stop; 1: an op failed or disagreed, see the log)"
if [ -f "$JSON" ] && { [ "$BENCH" = quantize ] || [ "$BENCH" = attention ]; }; then
  "$PY" "benchmarks/bench_$BENCH.py" --summarize="$JSON" 2>&1 | grep -v '^[IW][0-9]' \
    | tee "$OUT/summary.txt"
elif [ -f "$JSON" ] && [ "$BENCH" = decode ]; then
  echo "gpu_run: decode rows in $JSON (the benchmark printed its table above)"
elif [ -f "$JSON" ]; then
  summary_sizes=16384x16384
  if [ "${FP8LAB_BENCH_SMOKE:-0}" = 1 ]; then summary_sizes=""; fi
  "$PY" benchmarks/bench_gemv.py --summarize="$JSON" ${summary_sizes:+--sizes=$summary_sizes} \
    --batches=1,16 2>&1 | grep -v '^[IW][0-9]' | tee "$OUT/summary.txt"
else
  echo "gpu_run: no results file $JSON"
fi
[ "$test_rc" = 0 ] || [ "$test_rc" = skipped ] || exit 1
[ "$bench_rc" = 0 ] || exit 1
