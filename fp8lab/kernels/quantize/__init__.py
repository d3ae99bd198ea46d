"""Pallas quantize kernel (Triton lowering): x -> fp8lab.quantize's packed codes, scale codes,
tensor scale and amax in one pass (kernel.py's docstring has the layout).

encode.py holds its integer-op element encoder, MX scale rules and packing, configs.py the
tile table; f32.py (exact float32 arithmetic on bit patterns), scalars.py (the tensor-scale
rules on bits) and rotate.py (the in-kernel Hadamard rotation) are shared helpers.
"""

from __future__ import annotations

from fp8lab.kernels.quantize.configs import (DEFAULT_CONFIGS, TRANSPOSE_CONFIGS,
                                             QuantizeConfig, quantize_config)
from fp8lab.kernels.quantize.kernel import KernelResult, quantize_2d

__all__ = ["quantize_2d", "KernelResult", "QuantizeConfig", "DEFAULT_CONFIGS",
           "TRANSPOSE_CONFIGS", "quantize_config"]
