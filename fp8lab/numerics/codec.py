"""The golden element codec: float32/bfloat16/float16 <-> minifloat codes, on bit patterns.

Everything here is integer arithmetic on the float32 bit pattern of the input (and table
look-ups on codes), never a float -> fp8 -> float astype round trip: XLA on GPU may elide
such round trips (docs/numerics.md section 9), and integer code has no rounding mode to get wrong.
16-bit inputs are widened to that pattern with integer ops too (numerics/bits.py): XLA's
float16 -> float32 convert drops a NaN's sign on the GPU.

Rounding of a finite magnitude |x| = sig * 2^(e - 23) (sig the 24-bit significand, e the
unbiased exponent) to a format with m mantissa bits, bias b, emin = 1 - b:

    te    = max(e, emin)                       # exponent of the target quantum's binade
    shift = (23 - m) + (te - e)                # significand bits that drop off
    q     = round(sig / 2^shift)               # nearest-even, or stochastic (below)
    code  = ((te + b - 1) << m) + q            # a carry out of the mantissa bumps the exponent

and `code > max_code` is an overflow. This covers normals and subnormals alike.

Stochastic rounding (docs/numerics.md section 6): with f the dropped fraction of one target
quantum and r the top `sr_bits` bits of a counter-based random word (numerics/random.py),
round up iff floor(f * 2^sr_bits) + r >= 2^sr_bits; exact values never move.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.formats import E2M1, E8M0, ElementFormat, get_minifloat
from fp8lab.numerics import random as fp8_random
from fp8lab.numerics.bits import f32_bits

__all__ = ["encode", "decode", "encode_bits", "decode_table", "INPUT_DTYPES", "OUTPUT_DTYPES",
           "as_float_input", "check_rounding"]

INPUT_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
OUTPUT_DTYPES = INPUT_DTYPES
ROUNDING_MODES = ("nearest", "stochastic")
MAX_SR_BITS = 24

_U = np.uint32


def as_float_input(x, what: str) -> jax.Array:
  """x as a JAX array, after checking that it is float32, bfloat16 or float16.

  The dtype is read before jnp.asarray, which with x64 off would silently narrow a float64
  (or int64) numpy array to 32 bits, i.e. round twice. Raises TypeError naming `what`.
  """
  dtype = jnp.dtype(x.dtype) if hasattr(x, "dtype") else jnp.asarray(x).dtype
  if dtype not in INPUT_DTYPES:
    raise TypeError(f"{what} takes float32, bfloat16 or float16 input, got {dtype}")
  return jnp.asarray(x)


def check_rounding(rounding: str, key, sr_bits: int) -> None:
  """Validates a rounding mode with its key and sr_bits, before anything is traced."""
  if rounding not in ROUNDING_MODES:
    raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {rounding!r}")
  if rounding == "stochastic":
    if not (isinstance(sr_bits, int) and 1 <= sr_bits <= MAX_SR_BITS):
      raise ValueError(f"sr_bits must be an int in [1, {MAX_SR_BITS}], got {sr_bits!r}")
    fp8_random.key_words(key)            # a missing or malformed key raises here
  elif key is not None:
    raise ValueError("key is only used with rounding='stochastic'")


def encode(x, fmt, *, saturate: bool = False, rounding: str = "nearest", key=None,
           sr_bits: int = 8, index_offset: int = 0) -> jax.Array:
  """Encodes float values as uint8 codes of an element format.

  Args:
    x: float32, bfloat16 or float16 array of any shape; 16-bit inputs are widened to float32
      on their bit patterns (numerics/bits.py), so a NaN keeps its sign on every backend.
      Any other array dtype (float64 included, whatever the x64 setting) raises TypeError.
      Python scalars and lists go through jnp.asarray (float32 with x64 off, float64 ->
      TypeError with x64 on). Under jax.jit, jit converts a float64 numpy argument to
      float32 itself (x64 off) before encode sees it; pass float32 to avoid rounding twice.
    fmt: "e4m3", "e5m2", "e2m1" or "e8m0" (or the ml_dtypes dtype / an ElementFormat).
    saturate: False reproduces ml_dtypes' `x.astype(T).view(uint8)` bit for bit for every
      input: e4m3 overflow (|x| > 464 after rounding) and +-Inf -> NaN 0x7F/0xFF with the
      sign kept; e5m2 overflow -> +-Inf; e2m1 overflow and +-Inf -> +-6; e8m0 overflow,
      zero, negatives and NaN -> 0xFF. True is the OCP MX / NVIDIA "satfinite" conversion:
      finite overflow and +-Inf become the largest finite value with the input's sign
      (e8m0: 0xFE for positive overflow and +Inf), NaN keeps its non-saturating code.
      NaN codes: e4m3 0x7F|sign, e5m2 0x7E|sign, e8m0 0xFF. e2m1 has no NaN and follows
      ml_dtypes' quirk: a NaN with the sign bit clear becomes 0x8 (-0), with it set 0x0 (+0).
      -0 keeps its sign (0x80, 0x8 for e2m1); values that round to zero keep their sign.
    rounding: "nearest" (ties to even) or "stochastic" (needs `key`; not for e8m0).
    key: a threefry `jax.random.key` (or legacy uint32[2] key) for stochastic rounding.
    sr_bits: random bits per element for stochastic rounding, 1..24.
    index_offset: added to each element's flat index before drawing its random bits.

  Returns:
    uint8 array of codes, x's shape. e2m1 codes sit in the low nibble.

  e8m0 follows ml_dtypes' cast (round to the nearest power of two, ties up; a float32
  subnormal in (0, 2^-127] gives 2^-127 and one above it 2^-126, as ml_dtypes does). MX block scales
  do NOT use this cast: they follow the scale rules of numerics/scales.py.
  """
  f = get_minifloat(fmt)
  x = as_float_input(x, "encode")
  if rounding == "stochastic" and f is E8M0:
    raise ValueError("stochastic rounding is not defined for e8m0")
  check_rounding(rounding, key, sr_bits)
  rbits = None
  if rounding == "stochastic":
    rbits = fp8_random.random_bits(key, x.shape, index_offset)
  bits = f32_bits(x)                   # 16-bit inputs widened on their bits, see numerics/bits.py
  return encode_bits(bits, f, saturate=saturate, random_bits=rbits, sr_bits=sr_bits)


def encode_bits(bits, f: ElementFormat, *, saturate: bool, random_bits=None,
                sr_bits: int = 8) -> jax.Array:
  """encode() on float32 bit patterns (uint32) with an ElementFormat; no argument checks."""
  if f is E8M0:
    return _encode_e8m0(bits, saturate)
  m = f.mantissa_bits
  sign = bits >> _U(31)
  mag = bits & _U(0x7FFFFFFF)
  is_nan = mag > _U(0x7F800000)
  biased = (mag >> _U(23)).astype(jnp.int32)
  frac = mag & _U(0x7FFFFF)
  is_sub32 = biased == 0
  sig = jnp.where(is_sub32, frac, frac | _U(0x800000))
  e = jnp.where(is_sub32, -126, biased - 127)
  te = jnp.maximum(e, f.emin)
  shift = (23 - m) + (te - e)                      # >= 20; > 31 means everything drops
  shift_c = jnp.minimum(shift, 31).astype(jnp.uint32)
  q = sig >> shift_c
  dropped = sig & ((_U(1) << shift_c) - _U(1))
  if random_bits is None:
    half = _U(1) << (shift_c - _U(1))
    round_up = (dropped > half) | ((dropped == half) & ((q & _U(1)) == _U(1)))
  else:
    n = sr_bits
    # floor(f * 2^n) with f = dropped / 2^shift; shift - n < 0 only when n > 20.
    down = jnp.clip(shift - n, 0, 31).astype(jnp.uint32)
    up = jnp.clip(n - shift, 0, 31).astype(jnp.uint32)
    frac_n = (dropped >> down) << up
    r = random_bits >> _U(32 - n)
    round_up = (frac_n + r) >= _U(1 << n)
  q = q + round_up.astype(jnp.uint32)
  code = ((te + (f.bias - 1)).astype(jnp.uint32) << _U(m)) + q
  overflow = code > _U(f.max_code)                 # +-Inf lands here too (te = 128)
  code = jnp.where(overflow, _U(f.max_code if saturate else f.overflow_code), code)
  code = code | (sign << _U(f.bits - 1))
  if f is E2M1:
    nan_code = jnp.where(sign == 1, _U(0x0), _U(0x8))   # ml_dtypes' quirk, see docstring
  else:
    nan_code = (sign << _U(f.bits - 1)) | _U(f.nan_code)
  return jnp.where(is_nan, nan_code, code).astype(jnp.uint8)


def _encode_e8m0(bits, saturate: bool) -> jax.Array:
  """ml_dtypes' float -> e8m0 cast: nearest power of two in the linear domain, ties up."""
  sign = bits >> _U(31)
  mag = bits & _U(0x7FFFFFFF)
  biased = mag >> _U(23)
  frac = mag & _U(0x7FFFFF)
  # Mantissa >= 0.5 rounds the power of two up (1.5 * 2^e is the linear midpoint).
  normal_code = biased + (frac >= _U(0x400000)).astype(jnp.uint32)
  # float32 subnormals follow ml_dtypes, which is not nearest here: (0, 2^-127] -> code 0
  # (2^-127), anything above 2^-127 -> code 1 (2^-126).
  subnormal_code = (frac > _U(0x400000)).astype(jnp.uint32)
  code = jnp.where(biased == 0, subnormal_code, normal_code)
  overflow = code >= _U(0xFF)                       # also +Inf (biased == 255)
  code = jnp.where(overflow, _U(E8M0.max_code if saturate else E8M0.nan_code), code)
  invalid = (sign == 1) | (mag == 0) | (mag > _U(0x7F800000))
  return jnp.where(invalid, _U(E8M0.nan_code), code).astype(jnp.uint8)


@functools.lru_cache(maxsize=None)
def decode_table(fmt: str, dtype_name: str) -> np.ndarray:
  """Bit patterns (uint32 for float32, uint16 for 16-bit dtypes) of every code's value.

  Built from the format's definition with exact Python arithmetic, not from ml_dtypes.
  """
  f = get_minifloat(fmt)
  m = f.mantissa_bits
  values = []
  for code in range(1 << f.bits):
    negative = bool(code & f.sign_bit)
    mag = code & ~f.sign_bit
    if code in f.nan_codes:
      values.append(np.float32(-np.nan if negative else np.nan))
      continue
    exp_field, mant = mag >> m, mag & ((1 << m) - 1)
    if f.has_inf and mag == f.max_code + 1:
      v = float("inf")
    elif exp_field == 0 and m > 0:                  # subnormal (e8m0 has none)
      v = mant * 2.0 ** (f.emin - m)
    else:
      v = (1 + mant / 2**m) * 2.0 ** (exp_field - f.bias)
    values.append(np.float32(-v if negative else v))
  f32 = np.array(values, np.float32)
  f32_bits = f32.view(np.uint32)
  # Canonical quiet NaN with the code's sign, as ml_dtypes produces.
  nan = np.isnan(f32)
  f32_bits = np.where(nan, (f32_bits & np.uint32(0x80000000)) | np.uint32(0x7FC00000), f32_bits)
  if dtype_name == "float32":
    return f32_bits.astype(np.uint32)
  if dtype_name == "bfloat16":
    # Every minifloat value fits bfloat16 exactly: its pattern is the top half of float32's.
    return (f32_bits >> np.uint32(16)).astype(np.uint16)
  if dtype_name == "float16":
    # IEEE round-to-nearest-even narrowing (only e8m0's extremes are inexact: 2^127 -> inf).
    with np.errstate(over="ignore"):
      f16_bits = f32_bits.view(np.float32).astype(np.float16).view(np.uint16)
    return np.where(nan, (f16_bits & np.uint16(0x8000)) | np.uint16(0x7E00), f16_bits
                    ).astype(np.uint16)
  raise TypeError(f"decode output dtype must be float32, bfloat16 or float16, got {dtype_name}")


def decode(codes, fmt, dtype=jnp.float32) -> jax.Array:
  """Decodes codes of an element format to floats; equals ml_dtypes'
  `codes.view(T).astype(dtype)` for every code, NaN included.

  Args:
    codes: uint8 codes (e2m1: only the low nibble is read), or an array of the format's own
      ml_dtypes dtype (its bits are used).
    fmt: "e4m3", "e5m2", "e2m1" or "e8m0".
    dtype: float32, bfloat16 or float16.
  """
  f = get_minifloat(fmt)
  dtype = jnp.dtype(dtype)
  if dtype not in OUTPUT_DTYPES:
    raise TypeError(f"decode output dtype must be float32, bfloat16 or float16, got {dtype}")
  codes = jnp.asarray(codes)
  if codes.dtype == f.dtype and f.bits == 8:
    codes = lax.bitcast_convert_type(codes, jnp.uint8)
  elif codes.dtype == f.dtype:
    # A 4-bit array cannot be bitcast to uint8; every e2m1 value (and -0) is exact in
    # float32 and encodes back to its own code (e2m1 has no NaN).
    codes = encode(codes.astype(jnp.float32), f)
  if codes.dtype != jnp.uint8:
    raise TypeError(f"decode takes uint8 codes (or {f.dtype} values), got {codes.dtype}")
  table = jnp.asarray(decode_table(f.name, dtype.name))
  index = (codes & jnp.uint8((1 << f.bits) - 1)).astype(jnp.int32)
  return lax.bitcast_convert_type(jnp.take(table, index, axis=0), dtype)
