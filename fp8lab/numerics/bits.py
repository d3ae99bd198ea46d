"""Bit-exact conversions between float32, bfloat16 and float16, with integer ops only.

XLA's float converts are not bit-defined across backends for NaN: on the H200 the float16 ->
float32 convert canonicalises NaN (a negative float16 NaN becomes 0x7FFFFFFF), and XLA:CPU
quiets signalling NaNs (docs/numerics.md section 9). The golden model therefore widens and narrows
on bit patterns, so that every backend gives the same bits:

  widening to float32 (exact, `f32_bits`):
    float32   the bits themselves;
    bfloat16  the 16 bits shifted left by 16;
    float16   exponent re-biased (15 -> 127), subnormals normalised (exact), +-Inf kept, NaN
              keeps its sign and its payload shifted left by 13 (no quieting): numpy's
              `astype(np.float32)` on the CPU, bit for bit.
  narrowing float32 -> float16 / bfloat16 (`narrow_f32_bits`): round to nearest even,
    subnormals included, overflow -> +-Inf. NaN keeps its sign; its payload follows the CPU
    reference casts:
    float16   numpy's `astype(np.float16)`: the top 10 payload bits (bits 22..13), or 1 where
              those are all zero (so that it stays a NaN); no quieting;
    bfloat16  ml_dtypes' `astype(bfloat16)`: the canonical quiet NaN 0x7FC0 with the sign.
  `convert` between any two of the three: an input of the target dtype keeps its exact bits;
  otherwise widen, then narrow (bfloat16 <-> float16 equals numpy's
  `x.astype(np.float32).astype(target)`; ml_dtypes' direct bfloat16 -> float16 cast differs
  only in NaN payloads, which it sets to the canonical 0x7E00).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

__all__ = ["f32_bits", "narrow_f32_bits", "convert", "FLOAT_DTYPES"]

FLOAT_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))

_U = np.uint32
_F16 = jnp.dtype(jnp.float16)
_BF16 = jnp.dtype(jnp.bfloat16)
_F32 = jnp.dtype(jnp.float32)


def f32_bits(x) -> jax.Array:
  """float32 bit patterns (uint32) of x widened exactly to float32, on integer ops.

  x: a float32, bfloat16 or float16 array; anything else (Python scalars, lists, integer
  arrays) goes through jnp.asarray(x, float32) first. See the module docstring for NaN.
  """
  dtype = jnp.dtype(x.dtype) if hasattr(x, "dtype") else None
  if dtype not in FLOAT_DTYPES:
    return lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.uint32)
  x = jnp.asarray(x)
  if dtype == _F32:
    return lax.bitcast_convert_type(x, jnp.uint32)
  h = lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)
  if dtype == _BF16:
    return h << _U(16)                     # bfloat16 is the top half of float32
  sign = (h & _U(0x8000)) << _U(16)
  exp = (h >> _U(10)) & _U(0x1F)
  man = h & _U(0x3FF)
  normal = ((exp + _U(127 - 15)) << _U(23)) | (man << _U(13))
  special = _U(0x7F800000) | (man << _U(13))                      # +-Inf, NaN with payload
  # A subnormal man * 2^-24 with its leading one at bit p (0..9) is 2^(p-24) * (man / 2^p):
  # float32 exponent field p - 24 + 127, the bits below the leading one moved up to bit 22.
  p = _U(31) - lax.clz(jnp.maximum(man, _U(1)))
  sub = ((p + _U(127 - 24)) << _U(23)) | ((man << (_U(23) - p)) & _U(0x7FFFFF))
  mag = jnp.where(exp == _U(0x1F), special, normal)
  mag = jnp.where(exp == 0, jnp.where(man == 0, _U(0), sub), mag)
  return sign | mag


def narrow_f32_bits(bits, dtype) -> jax.Array:
  """float32 bit patterns (uint32) -> uint16 bit patterns of float16 or bfloat16: nearest
  even, subnormals included, overflow -> +-Inf, NaN as the module docstring says."""
  dtype = jnp.dtype(dtype)
  if dtype not in (_F16, _BF16):
    raise TypeError(f"narrow_f32_bits narrows to float16 or bfloat16, got {dtype}")
  ebits, mbits = (5, 10) if dtype == _F16 else (8, 7)
  bias = (1 << (ebits - 1)) - 1
  emin = 1 - bias
  bits = jnp.asarray(bits, jnp.uint32)
  sign = (bits >> _U(16)) & _U(0x8000)
  mag = bits & _U(0x7FFFFFFF)
  biased = (mag >> _U(23)).astype(jnp.int32)
  frac = mag & _U(0x7FFFFF)
  is_sub32 = biased == 0
  sig = jnp.where(is_sub32, frac, frac | _U(0x800000))           # |x| = sig * 2^(e - 23)
  e = jnp.where(is_sub32, -126, biased - 127)
  # The same rounding as codec.encode_bits: te is the binade of the target quantum.
  te = jnp.maximum(e, emin)
  shift = jnp.minimum((23 - mbits) + (te - e), 31).astype(jnp.uint32)   # >= 13; 31 drops all
  q = sig >> shift
  dropped = sig & ((_U(1) << shift) - _U(1))
  half = _U(1) << (shift - _U(1))
  q = q + ((dropped > half) | ((dropped == half) & ((q & _U(1)) == _U(1)))).astype(jnp.uint32)
  # A carry out of the mantissa bumps the exponent; past the largest finite it reaches Inf
  # (+-Inf inputs land there too, te = 128).
  inf = _U(((1 << ebits) - 1) << mbits)
  code = jnp.minimum(((te + (bias - 1)).astype(jnp.uint32) << _U(mbits)) + q, inf)
  if dtype == _F16:
    nan = inf | jnp.maximum(frac >> _U(13), _U(1))               # numpy's payload rule
  else:
    nan = _U(0x7FC0)                                             # ml_dtypes' canonical NaN
  code = jnp.where(mag > _U(0x7F800000), nan, code)
  return (sign | code).astype(jnp.uint16)


def convert(x, dtype) -> jax.Array:
  """x (float32, bfloat16 or float16) converted to `dtype` (one of the three) on bit
  patterns: the same bits on every backend (see the module docstring)."""
  dtype = jnp.dtype(dtype)
  if dtype not in FLOAT_DTYPES:
    raise TypeError(f"convert targets float32, bfloat16 or float16, got {dtype}")
  x = jnp.asarray(x)
  if x.dtype == dtype:
    return x
  if dtype == _F32:
    return lax.bitcast_convert_type(f32_bits(x), jnp.float32)
  return lax.bitcast_convert_type(narrow_f32_bits(f32_bits(x), dtype), dtype)
