"""Pallas decode attention over a packed KV cache (fp8lab.attention's kernel): kernel.py has
the split-K kernel, its launch and the log-sum-exp combine; docs/attention_kernel.md how it
works and what it serves."""

from __future__ import annotations

from fp8lab.kernels.attention.kernel import (DOTS, LAYOUTS, MIN_DOT_K, MIN_ROWS,
                                             AttentionConfig, KVPlan, attention_config,
                                             attention_pallas, attention_partials, combine,
                                             kv_plan, planes_serve, serves, split_bf16,
                                             split_serves)

__all__ = ["AttentionConfig", "KVPlan", "MIN_ROWS", "MIN_DOT_K", "DOTS", "LAYOUTS",
           "attention_config", "attention_pallas", "attention_partials", "combine", "kv_plan",
           "planes_serve", "serves", "split_bf16", "split_serves"]
