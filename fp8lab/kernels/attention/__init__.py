"""Pallas attention over a packed KV cache (fp8lab.attention's kernels): kernel.py has the
split-K decode kernel, its launch and the log-sum-exp combine; mosaic.py the same decode as a
Mosaic GPU kernel (Hopper: TMA, wgmma) for FP8 caches, mosaic_prefill.py its flash-attention
prefill twin; prefill.py the flash-attention
prefill kernel (Tq > 1); kv.py the K / V loads and decode both share;
docs/attention_kernel.md how they work and what they serve."""

from __future__ import annotations

from fp8lab.kernels.attention.kernel import (DECODES, DOTS, LAYOUTS, MIN_DOT_K, MIN_ROWS,
                                             AttentionConfig, KVPlan, attention_config,
                                             attention_pallas, attention_partials, combine,
                                             f16_serves, kv_plan, plane_decode, planes_serve,
                                             serves, split_bf16, split_serves)
from fp8lab.kernels.attention.kv import NO_LIMIT
from fp8lab.kernels.attention.mosaic import (MosaicConfig, attention_mosaic, mosaic_config,
                                             mosaic_partials, mosaic_serves)
from fp8lab.kernels.attention.mosaic_prefill import (PrefillMosaicConfig, prefill_mosaic,
                                                     prefill_mosaic_config,
                                                     prefill_mosaic_serves)
from fp8lab.kernels.attention.prefill import (PREFILL_COMPUTE, PrefillConfig, fp8_serves,
                                              prefill_config, prefill_pallas)

__all__ = ["AttentionConfig", "KVPlan", "NO_LIMIT", "MosaicConfig", "attention_mosaic",
           "mosaic_config", "mosaic_partials", "mosaic_serves", "PrefillMosaicConfig",
           "prefill_mosaic", "prefill_mosaic_config", "prefill_mosaic_serves",
           "MIN_ROWS", "MIN_DOT_K", "DOTS", "DECODES", "LAYOUTS",
           "f16_serves", "plane_decode",
           "attention_config", "attention_pallas", "attention_partials", "combine", "kv_plan",
           "planes_serve", "serves", "split_bf16", "split_serves", "PREFILL_COMPUTE",
           "PrefillConfig", "prefill_config", "prefill_pallas", "fp8_serves"]
