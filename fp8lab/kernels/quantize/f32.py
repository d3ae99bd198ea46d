"""Exact IEEE float32 arithmetic on uint32 bit patterns, for use INSIDE Pallas kernels.

Why integers: on the GPU, Triton lowers float32 division to an approximate div.full.f32, and
the GPU may flush float32 subnormals in some instructions; in interpret mode XLA:CPU flushes
subnormal inputs and results of float32 arithmetic to zero. The scale rules (docs/numerics.md
sections 5 and 8) and the Hadamard rotation (section 7) are specified as IEEE float32
operations with round to nearest even and gradual underflow, so these functions give the IEEE
result with 32-bit integer ops only: shifts by amounts in [0, 31] (Triton leaves larger
shifts undefined), masks, compares, selects, clz, 32-bit integer multiply and unsigned
division (never by zero: that is undefined on the GPU). No 64-bit types (x64 is off), no float
arithmetic. Everything is elementwise, on uint32 arrays of any shape (0-d included), so a
kernel can apply it to a scalar or to a per-block vector.

NaN results are the canonical quiet NaN 0x7FC00000 (sign clear, no payload), bit for bit the
golden model's choice (fp8lab/numerics/scales.py f32_*): the tests compare the two. This file
does not call the golden model; it is a separate implementation of the same IEEE rules.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

__all__ = ["div_bits", "reciprocal_bits", "mul_bits", "add_bits", "sub_bits", "ldexp_bits",
           "QNAN_BITS", "INF_BITS", "FLT_MAX_BITS", "ONE_BITS", "SIGN_BITS", "MAG_BITS"]

_U = np.uint32
SIGN_BITS = _U(0x80000000)
MAG_BITS = _U(0x7FFFFFFF)
INF_BITS = _U(0x7F800000)
QNAN_BITS = _U(0x7FC00000)
FLT_MAX_BITS = _U(0x7F7FFFFF)
ONE_BITS = _U(0x3F800000)
_HIDDEN = _U(0x800000)
_FRAC = _U(0x7FFFFF)


def _u32(x) -> jax.Array:
  return jnp.asarray(x, jnp.uint32)


def _shr(x, s):
  """x >> s for uint32 x and int32 s in [0, 31] (the caller clamps)."""
  return x >> s.astype(jnp.uint32)


def _shl(x, s):
  return x << s.astype(jnp.uint32)


def _classify(bits):
  """(nan, inf, zero) flags of float32 bit patterns."""
  mag = bits & MAG_BITS
  return mag > INF_BITS, mag == INF_BITS, mag == _U(0)


def clz(v) -> jax.Array:
  """Leading zeros of uint32 v as int32, counted on its int32 bitcast: the Triton lowering
  has clz (__nv_clz) for int32 only; on uint32 it emits math.ctlz, which Triton cannot
  compile."""
  return lax.clz(lax.bitcast_convert_type(jnp.asarray(v, jnp.uint32), jnp.int32))


def _unpack(bits):
  """Finite float32 bits -> (sign bit, e int32, sig uint32) with |x| = sig * 2^(e - 23) and
  sig in [2^23, 2^24) for every nonzero x (subnormals normalized; sig, e are junk for 0)."""
  sign = bits & SIGN_BITS
  biased = ((bits >> _U(23)) & _U(0xFF)).astype(jnp.int32)
  frac = bits & _FRAC
  # clz of frac | 1: the same as clz(frac) for frac >= 1, and never clz(0).
  lead = clz(frac | _U(1)) - 8                                    # 1..23 for a subnormal
  is_sub = biased == 0
  sig = jnp.where(is_sub, _shl(frac, jnp.minimum(lead, 31)), frac | _HIDDEN)
  e = jnp.where(is_sub, -126 - lead, biased - 127)
  return sign, e, sig


def _round_pack(sign, e, m):
  """sign * m * 2^(e - 30) rounded to float32 bits, nearest even. m: uint32 with its leading
  one at bit 30; a sticky one may sit anywhere below bit 6. Overflow gives +-Inf."""
  # Bits below the float32 quantum: 7 for normal results, more in the subnormal range.
  shift = 7 + jnp.maximum(-126 - e, 0)
  s = jnp.minimum(shift, 31)
  q = _shr(m, s)
  rem = m & (_shl(_U(1), s) - _U(1))
  half = _shl(_U(1), s - 1)
  up = (rem > half) | ((rem == half) & ((q & _U(1)) == _U(1)))
  q = q + up.astype(jnp.uint32)
  q = jnp.where(shift > 31, _U(0), q)              # below half of 2^-149: rounds to zero
  # q carries the hidden one at bit 23 for normal results, so the field is biased e - 1; a
  # rounding carry (or a subnormal rounding up to 2^-126) moves the exponent up by itself.
  field = jnp.clip(e + 126, 0, 255).astype(jnp.uint32)
  return sign | jnp.minimum((field << _U(23)) + q, INF_BITS)


def _with_specials(out, sign, *, zero_out, inf_out, invalid):
  out = jnp.where(zero_out, sign, out)
  out = jnp.where(inf_out, sign | INF_BITS, out)
  return jnp.where(invalid, QNAN_BITS, out)


def div_bits(a, b) -> jax.Array:
  """Bits of the correctly rounded IEEE float32 a / b (nearest even, subnormals kept).

  x / +-0 = +-Inf (x finite nonzero), x / +-Inf = +-0, 0 / 0, Inf / Inf and any NaN operand
  give 0x7FC00000. Long division of the 24-bit significands, 8 quotient bits per step
  (three 32-bit divisions: the remainder < 2^24 shifted by 8 fits a uint32)."""
  a, b = _u32(a), _u32(b)
  nan_a, inf_a, zero_a = _classify(a)
  nan_b, inf_b, zero_b = _classify(b)
  sa, ea, ma = _unpack(a)
  sb, eb, mb = _unpack(b)
  mb = jnp.where(zero_b, _HIDDEN, mb)             # never divide by 0 (undefined on the GPU)
  smaller = ma < mb
  # r / mb = the quotient's significand in [1, 2): its leading 1, then the remainder.
  r = jnp.where(smaller, ma << _U(1), ma) - mb
  r = jnp.where(zero_a, _U(0), r)                  # keeps r < mb for a zero dividend
  e = ea - eb - smaller.astype(jnp.int32)
  q = jnp.ones_like(r)
  for _ in range(3):                               # 24 fraction bits: 23 kept + guard
    r8 = r << _U(8)
    d = lax.div(r8, mb)
    r = r8 - d * mb
    q = (q << _U(8)) | d
  m = (q << _U(6)) | (r != _U(0)).astype(jnp.uint32)   # leading one at bit 30, sticky bit 0
  out = _round_pack(sa ^ sb, e, m)
  return _with_specials(out, sa ^ sb, zero_out=zero_a | inf_b, inf_out=inf_a | zero_b,
                        invalid=nan_a | nan_b | (zero_a & zero_b) | (inf_a & inf_b))


def reciprocal_bits(b) -> jax.Array:
  """Bits of fl(1 / b): div_bits(1.0, b)."""
  b = _u32(b)
  return div_bits(jnp.full_like(b, ONE_BITS), b)


def mul_bits(a, b) -> jax.Array:
  """Bits of the IEEE float32 a * b (nearest even, subnormal operands and results kept).

  Integer-only because XLA:CPU (interpret mode) flushes float32 subnormals in a float
  multiply, and a GPU instruction may too; the golden model's f32_mul is integer code for
  the same reason. 0 * Inf and NaN operands give 0x7FC00000."""
  a, b = _u32(a), _u32(b)
  nan_a, inf_a, zero_a = _classify(a)
  nan_b, inf_b, zero_b = _classify(b)
  sa, ea, ma = _unpack(a)
  sb, eb, mb = _unpack(b)
  # P = ma * mb in [2^46, 2^48) from 12-bit halves: P = top * 2^24 + low24.
  a1, a0 = ma >> _U(12), ma & _U(0xFFF)
  b1, b0 = mb >> _U(12), mb & _U(0xFFF)
  mid = a1 * b0 + a0 * b1                                      # < 2^25
  lo = a0 * b0 + ((mid & _U(0xFFF)) << _U(12))                 # < 2^25
  top = a1 * b1 + (mid >> _U(12)) + (lo >> _U(24))             # P >> 24, < 2^24
  low24 = lo & _U(0xFFFFFF)
  hi_bit = top >= _U(1 << 23)                                  # P's leading one at bit 47
  m47 = (top << _U(7)) | (low24 >> _U(17)) | ((low24 & _U(0x1FFFF)) != 0).astype(jnp.uint32)
  m46 = (top << _U(8)) | (low24 >> _U(16)) | ((low24 & _U(0xFFFF)) != 0).astype(jnp.uint32)
  m = jnp.where(hi_bit, m47, m46)
  e = ea + eb + hi_bit.astype(jnp.int32)
  out = _round_pack(sa ^ sb, e, m)
  return _with_specials(out, sa ^ sb, zero_out=zero_a | zero_b, inf_out=inf_a | inf_b,
                        invalid=nan_a | nan_b | (inf_a & zero_b) | (zero_a & inf_b))


def add_bits(a, b) -> jax.Array:
  """Bits of the IEEE float32 a + b (nearest even, subnormals kept). Exact cancellation
  gives +0 (-0 only for -0 + -0); Inf - Inf and NaN operands give 0x7FC00000."""
  a, b = _u32(a), _u32(b)
  nan_a, inf_a, zero_a = _classify(a)
  nan_b, inf_b, zero_b = _classify(b)
  swap = (b & MAG_BITS) > (a & MAG_BITS)                       # |big| >= |small|
  big = jnp.where(swap, b, a)
  small = jnp.where(swap, a, b)
  s1, e1, m1 = _unpack(big)
  s2, e2, m2 = _unpack(small)
  m1 = m1 << _U(7)                                             # leading one at bit 30
  m2 = m2 << _U(7)
  d = e1 - e2                                                  # >= 0
  ds = jnp.minimum(d, 31)
  dropped = m2 & (_shl(_U(1), ds) - _U(1))
  m2s = jnp.where(d > 31, _U(0), _shr(m2, ds))
  m2s = m2s | ((jnp.where(d > 31, m2, dropped)) != _U(0)).astype(jnp.uint32)   # sticky
  total = jnp.where(s1 == s2, m1 + m2s, m1 - m2s)              # < 2^32
  carry = total >= _U(1 << 31)
  lead = clz(total | _U(1)) - 1                                # > 0 after a cancellation
  norm = _shl(total, jnp.clip(lead, 0, 31))
  m = jnp.where(carry, (total >> _U(1)) | (total & _U(1)), norm)
  e = jnp.where(carry, e1 + 1, e1 - lead)
  out = _round_pack(s1, e, m)
  out = jnp.where(total == _U(0), _U(0), out)
  out = jnp.where(zero_b, a, out)
  out = jnp.where(zero_a, b, out)
  out = jnp.where(zero_a & zero_b, a & b, out)
  out = jnp.where(inf_a, a, jnp.where(inf_b, b, out))
  invalid = nan_a | nan_b | (inf_a & inf_b & ((a ^ b) == SIGN_BITS))
  return jnp.where(invalid, QNAN_BITS, out)


def sub_bits(a, b) -> jax.Array:
  """Bits of the IEEE float32 a - b: a + (-b)."""
  return add_bits(a, _u32(b) ^ SIGN_BITS)


def ldexp_bits(bits, k) -> jax.Array:
  """x * 2^k on float32 bits (k an int or int32 array): exact, except rounded to nearest even
  where the result is subnormal; overflow gives +-Inf. NaN, +-Inf and +-0 pass through
  unchanged (a NaN keeps its payload, like the golden model's ldexp_bits)."""
  bits = _u32(bits)
  nan, inf, zero = _classify(bits)
  sign, e, sig = _unpack(bits)
  out = _round_pack(sign, e + jnp.asarray(k, jnp.int32), sig << _U(7))
  return jnp.where(nan | inf | zero, bits, out)
