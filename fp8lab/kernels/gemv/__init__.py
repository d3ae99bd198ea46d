"""Pallas GEMV over packed weights (fp8lab.gemv_packed's kernel): the public names.

kernel.py is the kernel and its launch (its docstring explains the arithmetic), configs.py the
launch configurations, plan.py the per-format plan and decode choices, operands.py x's exact
parts and the weight planes, xprep.py the Pallas x preparation. docs/gemv_kernel.md has the
measurements behind the choices.
"""

from __future__ import annotations

from fp8lab.kernels.gemv.configs import (DEFAULT_CONFIGS, TALL_CONFIGS, TALL_ROWS, GemvConfig,
                                         gemv_config)
from fp8lab.kernels.gemv.kernel import gemv_launch, gemv_pallas
from fp8lab.kernels.gemv.operands import split_bf16_parts, split_f16_parts
from fp8lab.kernels.gemv.plan import (FP8_DECODES, NATIVE_FP8_ENV, FormatPlan, asm_e2m1_default,
                                      format_plan, native_fp8_requested, serves_format)

__all__ = ["GemvConfig", "FormatPlan", "DEFAULT_CONFIGS", "TALL_CONFIGS", "TALL_ROWS",
           "gemv_config", "format_plan", "serves_format",
           "gemv_pallas", "gemv_launch", "split_bf16_parts", "split_f16_parts",
           "NATIVE_FP8_ENV", "FP8_DECODES", "native_fp8_requested", "asm_e2m1_default"]
