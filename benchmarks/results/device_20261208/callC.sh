#!/usr/bin/env bash
# Device call C (planned 2026-12-07 session 2; 2026-12-08 with the fp8 mode and the
# two-warpgroup launch (_ws) added): the Mosaic
# prefill kernel's first GPU run. Compiled tests (its file and the decode kernel's, after the
# shared to_f16 helper), then bench_attention at issue 22's sizes: cudnn bf16 / fp8, JAX's
# Mosaic flash attention, the cudnn path over packed K / V and the Mosaic prefill rows.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
FP8LAB_GPU_TESTS=1 timeout 260 python3 -m pytest -q -p no:cacheprovider \
  fp8lab_tests/test_attention_mosaic_prefill.py fp8lab_tests/test_attention_mosaic.py \
  > $OUT/test_mosaic_gpu.log 2>&1
echo "mosaic tests rc=$? $(( $(date +%s)-T0 )) s"; grep "passed\|failed" $OUT/test_mosaic_gpu.log | tail -2
grep "^FAILED\|^E  " $OUT/test_mosaic_gpu.log | cut -c1-200 | head -12
LEFT=$(( 560 - ($(date +%s)-T0) ))
timeout $LEFT python3 benchmarks/bench_attention.py \
  --sizes=prefill_h8_s8k,prefill_h8_s8k_causal,gqa_h32_s8k,feather_h1_s8k_d256 \
  --prefill_cases=cu_e4m3_block,cu_e5m2,mp_e4m3_block,mp_e4m3_block_ws,mp_e4m3,mp_e5m2,mp_e4m3_block_fp8,mp_e4m3_block_fp8_ws,mp_e4m3_fp8_ws \
  --prefill_baselines=matmul_bf16,cudnn_bf16,cudnn_fp8,jax_mgpu --time_budget_s=$(( LEFT - 30 )) \
  --out=$OUT/attention_prefill_mosaic_$(date -u +%Y%m%d_%H%M%S).json > $OUT/bench_attention.log 2>&1
echo "bench rc=$? $(( $(date +%s)-T0 )) s"; grep -v '^[IW][0-9]\{4\} ' $OUT/bench_attention.log | tail -30 | cut -c1-160
