"""Ops over quantized arrays: one module per op, on the shared scaffolding of _op.py."""

from fp8lab.ops._op import IMPLEMENTATIONS
from fp8lab.ops.gemv import gemv_packed
from fp8lab.ops.quantize import QuantizeResult, quantize, quantize_with_amax
from fp8lab.ops.attention import attention, kv_cache_update

__all__ = ["gemv_packed", "quantize", "quantize_with_amax", "QuantizeResult", "IMPLEMENTATIONS"]
__all__ += ["attention", "kv_cache_update"]
