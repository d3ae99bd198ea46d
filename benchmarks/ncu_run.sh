#!/usr/bin/env bash
# Nsight Compute on the GEMV kernel, one format per ncu process (see benchmarks/ncu_gemv.py):
#   NCU_RUN_FORMATS="nvfp4 mxfp4 e4m3" NCU_RUN_TIMEOUT_S=170 bash benchmarks/ncu_run.sh
# writes $OUT/ncu_<format>_b<B>.txt (ncu's details page) for each format; a format whose ncu
# process passes its timeout leaves what ncu printed (often nothing: ncu prints at exit).
# ncu reads hardware counters only on the Firecracker runtime (device KINDS.md): the kernel
# release is printed first so the log says which runtime ran.
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
cd "$(dirname "$0")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" XLA_PYTHON_CLIENT_PREALLOCATE=false
echo "ncu_run: kernel $(uname -r); $(ncu --version 2>&1 | tail -1)"
B=${NCU_B:-1}
for f in ${NCU_RUN_FORMATS:-nvfp4 mxfp4 e4m3}; do
  echo "ncu_run: [${SECONDS}s] $f batch $B"
  NCU_FORMATS=$f NCU_B=$B timeout -k 5 "${NCU_RUN_TIMEOUT_S:-170}" ncu --clock-control none \
    -k regex:fp8lab_gemv --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis ${NCU_EXTRA:-} \
    python3 benchmarks/ncu_gemv.py > "$OUT/ncu_${f}_b${B}.txt" 2>&1
  echo "ncu_run: [${SECONDS}s] $f rc $?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Warp|No Eligible|Warp Cycles Per Issued|Block Limit" "$OUT/ncu_${f}_b${B}.txt" | head -20
done
