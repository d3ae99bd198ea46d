#!/usr/bin/env bash
# Nsight Compute on the GEMV kernel, one format per ncu process (see ncu_gemv.py beside it):
#   NCU_RUN_FORMATS="nvfp4 mxfp4 e4m3" NCU_RUN_TIMEOUT_S=170 bash benchmarks/probes/ncu_run.sh
# writes $OUT/ncu_<format>_b<B><NCU_TAG>.txt (ncu's details page) for each format; a format
# whose ncu process passes its timeout leaves what ncu printed (often nothing: ncu prints at
# exit). NCU_SOURCE=1 also collects SourceCounters (sampled warp stalls per SASS instruction)
# and writes the source page, SASS with per-instruction counters, as
# $OUT/ncu_<format>_b<B><NCU_TAG>_sass.csv (ncu_sass_mix.py --csv=... summarizes it).
# NCU_CONFIG="block_rows,block_k,num_warps,num_stages[,...]" (ncu_gemv.py's --config) sets the
# launch config, NCU_N (default 16384) the size.
# ncu reads hardware counters only on the Firecracker runtime (device KINDS.md): the kernel
# release is printed first so the log says which runtime ran.
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
cd "$(dirname "$0")/../.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" XLA_PYTHON_CLIENT_PREALLOCATE=false
echo "ncu_run: kernel $(uname -r); $(ncu --version 2>&1 | tail -1)"
B=${NCU_B:-1}
SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats
          --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis
          --section ComputeWorkloadAnalysis --section InstructionStats
          --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active')
for f in ${NCU_RUN_FORMATS:-nvfp4 mxfp4 e4m3}; do
  base="$OUT/ncu_${f}_b${B}${NCU_TAG:-}"
  extra=()
  [ "${NCU_SOURCE:-0}" = 1 ] && extra=(--section SourceCounters -o "$base" -f)
  echo "ncu_run: [${SECONDS}s] $f batch $B ${NCU_CONFIG:-default config}"
  timeout -k 5 "${NCU_RUN_TIMEOUT_S:-170}" ncu --clock-control none \
    -k regex:fp8lab_gemv --launch-skip 2 --launch-count 1 "${SECTIONS[@]}" "${extra[@]}" \
    python3 benchmarks/probes/ncu_gemv.py --formats="$f" --batch="$B" --size="${NCU_N:-16384}" \
    ${NCU_CONFIG:+--config="$NCU_CONFIG"} > "$base.txt" 2>&1
  echo "ncu_run: [${SECONDS}s] $f rc $?"
  if [ -f "$base.ncu-rep" ]; then
    ncu -i "$base.ncu-rep" --page details >> "$base.txt" 2>&1
    ncu -i "$base.ncu-rep" --page source --print-source sass --csv > "${base}_sass.csv" 2>&1
    rm -f "$base.ncu-rep"
  fi
  grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Warp Cycles Per Issued|stalled|pipe_" "$base.txt" | grep -v " 0$" | head -80
done
