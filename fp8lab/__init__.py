"""fp8lab: bit-exact low-precision numerics for JAX, with Pallas kernels checked against them.

The public API; everything is re-exported from the modules that define it.
"""

from fp8lab.formats import (ElementFormat, FORMAT_NAMES, QUANTIZED_FORMATS, QuantizedFormat,
                            get_format, get_quantized_format)
from fp8lab.numerics.codec import decode, encode
from fp8lab.numerics.packing import pack, packed_length, unpack
from fp8lab.numerics.random import random_bits
from fp8lab.numerics.hadamard import HadamardSpec, hadamard
from fp8lab.numerics.scales import DelayedScaling, current_scale, tensor_amax
from fp8lab.quantized import QuantizedArray, dequantize
from fp8lab.ops import QuantizeResult, gemv_packed, quantize, quantize_with_amax
from fp8lab.ops import attention, kv_cache_update
from fp8lab.training import (RECIPES, MatmulState, OperandRecipe, Recipe, get_recipe, init_state,
                             quantized_matmul)
from fp8lab import nn

__version__ = "0.1.0"

__all__ = [
    "ElementFormat", "FORMAT_NAMES", "get_format", "QuantizedFormat", "get_quantized_format",
    "encode", "decode", "pack", "unpack", "packed_length", "random_bits",
    "quantize", "dequantize", "QuantizedArray", "QUANTIZED_FORMATS", "hadamard", "HadamardSpec",
    "DelayedScaling", "current_scale", "tensor_amax",
    "gemv_packed", "quantize_with_amax", "QuantizeResult",
]
__all__ += ["attention", "kv_cache_update"]
__all__ += ["quantized_matmul", "RECIPES", "Recipe", "OperandRecipe", "get_recipe", "init_state",
            "MatmulState", "nn"]
from fp8lab.sharding import *  # noqa: E402,F401,F403  (docs/sharding.md)
__all__ += sharding.__all__  # noqa: F405
