#!/usr/bin/env bash
# Nsight Compute on the decode-attention kernel (attention_configs.py --ncu_launches): one ncu
# process per format and variant, the third launch, sections as ncu_run.sh's:
#   NCU_FORMATS="e4m3_block nvfp4" NCU_VARIANTS="f16:fast:128:4:2" NCU_SIZE=8x32768x32x8x128 \
#     bash benchmarks/probes/ncu_attention.sh
# writes $OUT/ncu_attn_<format>_<variant>.txt; NCU_SOURCE=1 adds the SASS source page (csv).
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
cd "$(dirname "$0")/../.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" XLA_PYTHON_CLIENT_PREALLOCATE=false
SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats
          --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis
          --section ComputeWorkloadAnalysis --section InstructionStats
          --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active')
for f in ${NCU_FORMATS:-e4m3_block nvfp4}; do
  for v in ${NCU_VARIANTS:-f16:fast:128:4:2}; do
    base="$OUT/ncu_attn_${f}_${v//:/_}"
    extra=()
    [ "${NCU_SOURCE:-0}" = 1 ] && extra=(--section SourceCounters -o "$base" -f)
    echo "ncu_attention: [${SECONDS}s] $f $v"
    timeout -k 5 "${NCU_TIMEOUT_S:-120}" ncu --clock-control none -k regex:fp8lab_attention \
      --launch-skip 2 --launch-count 1 "${SECTIONS[@]}" "${extra[@]}" \
      python3 benchmarks/probes/attention_configs.py --formats="$f" --variants="$v" \
      --sizes="${NCU_SIZE:-8x32768x32x8x128}" --ncu_launches=3 > "$base.txt" 2>&1
    echo "ncu_attention: [${SECONDS}s] rc $?"
    if [ -f "$base.ncu-rep" ]; then
      ncu -i "$base.ncu-rep" --page source --print-source sass --csv > "${base}_sass.csv" 2>&1
      rm -f "$base.ncu-rep"
    fi
    grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Issued Warp|No Eligible|Warp Cycles Per Issued|Shared Memory Configuration Size|Dynamic Shared|Block Limit|Local|stalled|pipe_" "$base.txt" | grep -v " 0$" | head -70
  done
done
