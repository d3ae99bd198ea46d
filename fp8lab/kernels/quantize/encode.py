"""In-kernel integer arithmetic of the quantize kernel: float32 bits -> element codes, the MX
shared exponents, block reductions and packing (exact float32 products: f32.mul_bits).

Everything here is uint32 / int32 shifts, masks, compares, adds and integer multiplies (plus
count-leading-zeros), so it runs the same inside a Pallas kernel compiled by Triton and in
interpret mode on the CPU: no float division (approximate on the GPU), no fp8 casts (they
saturate), no float multiply (XLA:CPU flushes float32 subnormals). It is NOT the golden model
(fp8lab/numerics/codec.py, scales.py); the tests compare the kernel with it bit for bit.

Values are carried as (sign, e, sig): |v| = sig * 2^(e - 23) with sig a 24-bit significand.
`encode_parts` rounds that to a code of an element format with m mantissa bits, bias b,
emin = 1 - b (docs/numerics.md section 2):

    te = max(e, emin);  shift = (23 - m) + (te - e);  q = round(sig / 2^shift)
    code = ((te + b - 1) << m) + q,   code > max_code saturates to max_code

which is exact for a normalized sig (leading one at bit 23), and for float32's own unpacking
of a subnormal (sig = fraction, e = -126), where te = emin > e. Round to nearest even takes
cheaper paths of the same rule (`_rne_magnitude`, `_e2m1_rne_magnitude`: fewer integer
instructions per element, which is what bounds the kernel); stochastic rounding takes
`encode_parts`, the golden model's steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.formats import E8M0, ElementFormat
from fp8lab.kernels.quantize.f32 import FLT_MAX_BITS as FLT_MAX
from fp8lab.kernels.quantize.f32 import INF_BITS as INF
from fp8lab.kernels.quantize.f32 import MAG_BITS as MAG
from fp8lab.kernels.quantize.f32 import clz, mul_bits

_U = np.uint32
# e of a zero in unpack_normalized: below every format's emin, so te = emin and code 0.
ZERO_E = -200


def u32(x) -> jax.Array:
  return lax.bitcast_convert_type(x, jnp.uint32)


def i32(x) -> jax.Array:
  return lax.bitcast_convert_type(x, jnp.int32)


def to_f32_bits(x) -> jax.Array:
  """float32 bit patterns of a float32 / bfloat16 / float16 tile, widened with integer ops
  (exact; a float16 NaN stays a NaN: quantize never reads a NaN's sign or payload)."""
  if x.dtype == jnp.float32:
    return u32(x)
  h = lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)
  if x.dtype == jnp.bfloat16:
    return h << _U(16)
  sign = (h & _U(0x8000)) << _U(16)
  exp = (h >> _U(10)) & _U(0x1F)
  man = h & _U(0x3FF)
  normal = ((exp + _U(112)) << _U(23)) | (man << _U(13))
  special = INF | (man << _U(13))
  # A float16 subnormal man * 2^-24: move its leading one to bit 10 (clz counts from bit 31).
  lead = i32(lax.clz(i32(man))) - 21                       # 1..10 for man != 0
  lead_u = jnp.clip(lead, 0, 31).astype(jnp.uint32)
  sub = ((_U(113) - lead_u) << _U(23)) | (((man << lead_u) & _U(0x3FF)) << _U(13))
  mag = jnp.where(exp == 0, jnp.where(man == 0, _U(0), sub),
                  jnp.where(exp == _U(31), special, normal))
  return sign | mag


def unpack(bits):
  """(sign, e, sig) of float32 bits as float32 stores them: subnormals not normalized
  (e = -126, sig = fraction), zero sig = 0; +-Inf and NaN have e = 128."""
  sign = bits >> _U(31)
  biased = i32((bits >> _U(23)) & _U(0xFF))
  frac = bits & _U(0x7FFFFF)
  sub = biased == 0
  sig = jnp.where(sub, frac, frac | _U(0x800000))
  e = jnp.where(sub, -126, biased - 127)
  return sign, e, sig


def unpack_normalized(bits):
  """(sign, e, sig) with the leading one of every nonzero sig at bit 23 (subnormals shifted
  up, e below -126); a zero has sig = 0 and e = ZERO_E."""
  sign = bits >> _U(31)
  biased = i32((bits >> _U(23)) & _U(0xFF))
  frac = bits & _U(0x7FFFFF)
  lead = i32(lax.clz(i32(frac))) - 8                       # 24 for frac == 0
  sub = biased == 0
  sig = jnp.where(sub, frac << jnp.clip(lead, 0, 31).astype(jnp.uint32), frac | _U(0x800000))
  e = jnp.where(sub, jnp.where(frac == 0, ZERO_E, -126 - lead), biased - 127)
  return sign, e, sig


def encode_parts(sign, e, sig, elem: ElementFormat, rbits=None, sr_bits: int = 8):
  """Saturating code (uint32, sign included) of sign * sig * 2^(e - 23); see the module
  docstring. rbits: uint32 random words for stochastic rounding (docs/numerics.md section
  6: round up iff floor(f * 2^n) + r >= 2^n, r the top n = sr_bits bits), else RNE.
  +-Inf (e = 128) saturates; NaN is the caller's."""
  m = elem.mantissa_bits
  te = jnp.maximum(e, elem.emin)
  shift = (23 - m) + (te - e)                              # >= 20
  shift_c = jnp.minimum(shift, 31).astype(jnp.uint32)
  q = sig >> shift_c
  dropped = sig & ((_U(1) << shift_c) - _U(1))
  if rbits is None:
    half = _U(1) << (shift_c - _U(1))
    up = (dropped > half) | ((dropped == half) & ((q & _U(1)) == _U(1)))
  else:
    n = sr_bits
    # floor(f * 2^n) with f = dropped / 2^shift (the unclamped shift, as the golden model)
    down = jnp.clip(shift - n, 0, 31).astype(jnp.uint32)
    left = jnp.clip(n - shift, 0, 31).astype(jnp.uint32)
    up = ((dropped >> down) << left) + (rbits >> _U(32 - n)) >= _U(1 << n)
  q = q + up.astype(jnp.uint32)
  code = ((te + (elem.bias - 1)).astype(jnp.uint32) << _U(m)) + q
  code = jnp.minimum(code, _U(elem.max_code))              # satfinite
  return code | (sign << _U(elem.bits - 1))


_FRAC = _U(0x7FFFFF)
_HIDDEN = _U(0x800000)


def _f32(v: float) -> np.uint32:
  return np.float32(v).view(np.uint32)


def _rne_magnitude(biased, sig, elem: ElementFormat):
  """Saturated magnitude code (uint32) of sig * 2^(biased - 150), rounded to nearest even.

  biased: int32, the exponent in float32's bias (any value: <= 0 and > 254 too); sig: uint32
  < 2^24 with its leading one at bit 23 (or any sig where the result is element-subnormal).
  The module docstring's rule with te in float32's bias: te = max(biased, emin + 127), and
  round(sig / 2^shift) as ONE add and shift: sig + (2^(shift-1) - 1) + (the kept lsb)
  carries past bit shift exactly when the dropped part is above half, or half with an odd
  lsb. shift > 31 (clamped to 31) leaves sig < 2^24 < 2^30 below half: 0, as the general
  path. The code's exponent field is te - (emin + 127) (0 for subnormal codes, whose q
  carries into the first normal code by itself)."""
  m = elem.mantissa_bits
  emin_b = elem.emin + 127
  te = jnp.maximum(biased, emin_b)
  shift = jnp.minimum(te - biased + (23 - m), 31).astype(jnp.uint32)      # >= 20
  half_m1 = _U(0xFFFFFFFF) >> (_U(33) - shift)                           # 2^(shift-1) - 1
  q = (sig + half_m1 + ((sig >> shift) & _U(1))) >> shift                 # < 2^31: no wrap
  code = ((te - emin_b).astype(jnp.uint32) << _U(m)) + q
  return jnp.minimum(code, _U(elem.max_code))                             # satfinite


def _e2m1_rne_magnitude(mag):
  """Saturated e2m1 magnitude code (0..7) of float32 magnitude bits, nearest even.

  Non-negative floats order as their bits (as unsigned integers), so comparisons with the
  bits of the midpoints are exact. Below 1.0 the codes are 0, 1, 2 (0, 0.5, 1): midpoint
  0.25 ties to code 0 (a > 0.25), 0.75 ties to code 2 (a >= 0.75). From 1.0 up the codes
  are normal, and round to nearest even is the bits' own: rebias float32's exponent to
  e2m1's (1.0 = 0x3F800000 -> code 2), add 2^21 - 1 plus the kept lsb, shift out 22 bits;
  +-Inf and everything >= 6 saturate to 7 (a NaN gives 7: the callers force NaN blocks)."""
  low = ((mag > _f32(0.25)).astype(jnp.uint32)
         + (mag >= _f32(0.75)).astype(jnp.uint32))
  rebias = _U(((1 << 21) - 1 - (252 << 22)) % (1 << 32))      # mod 2^32: a >= 1.0 only
  high = (mag + rebias + ((mag >> _U(22)) & _U(1))) >> _U(22)
  return jnp.where(mag < _f32(1.0), low, jnp.minimum(high, _U(7)))


def _with_sign(code, bits, elem: ElementFormat):
  return code | ((bits >> _U(31)) << _U(elem.bits - 1))


def encode_bits(bits, elem: ElementFormat, rbits=None, sr_bits: int = 8,
                nan_code: int | None = None):
  """Saturating code of float32 bits; a NaN gives `nan_code` (None: no NaN can occur).

  Nearest even: `_e2m1_rne_magnitude` for e2m1, else `_rne_magnitude` on float32's fields
  with the hidden bit set unconditionally: for a float32 subnormal or zero (biased 0) that
  reads sig as up to 2^24 * 2^-150, far below half of every format's smallest code, and
  the clamped shift rounds it to 0 as the exact value does. Stochastic: `encode_parts`."""
  mag = bits & MAG
  if rbits is not None:
    sign, e, sig = unpack(bits)
    code = encode_parts(sign, e, sig, elem, rbits, sr_bits)
  elif elem.mantissa_bits == 1 and elem.bits == 4:
    code = _with_sign(_e2m1_rne_magnitude(mag), bits, elem)
  else:
    code = _with_sign(_rne_magnitude(i32(mag >> _U(23)), (mag & _FRAC) | _HIDDEN, elem),
                      bits, elem)
  if nan_code is not None:
    code = jnp.where(mag > INF, _U(nan_code), code)
  return code


def encode_shifted(bits, s, elem: ElementFormat, rbits=None, sr_bits: int = 8):
  """Saturating code of x * 2^-s (MX elements: s the int32 shared exponent of each
  element's block), x given by float32 bits; NaN / Inf blocks are the caller's.

  The exponent shift is an integer subtraction from float32's exponent field, exact for
  any result (no float32 range: the encoder takes the exponent as an int32), so it equals
  the golden model's ldexp wherever that is exact; where ldexp rounds (results below
  2^-126) every element format encodes +-0 either way. Subnormal inputs are normalized
  first (clz), as their scaled value may be a normal code (s down to -127)."""
  mag = bits & MAG
  biased = i32(mag >> _U(23))
  frac = mag & _FRAC
  # clz of frac | 1: the leading one of a subnormal's fraction moved to bit 23 (1..23
  # places); a zero keeps sig = 0, whatever its exponent.
  lead = clz(frac | _U(1)) - 8
  sub = biased == 0
  sig = jnp.where(sub, frac << lead.astype(jnp.uint32), frac | _HIDDEN)
  biased = jnp.where(sub, 1 - lead, biased) - s
  if rbits is not None:
    return encode_parts(bits >> _U(31), biased - 127, sig, elem, rbits, sr_bits)
  return _with_sign(_rne_magnitude(biased, sig, elem), bits, elem)


# ----------------------------------------------------------------------------------------
# Float encoders (QuantizeConfig.float_encode): the same codes from float instructions, which
# run on the GPU's float pipe (twice the integer pipe's rate) and, for fp8, in the hardware
# conversion (two codes per instruction on sm_89+).

def shift_bits(bits, s):
  """float32 bits of x * 2^-s (x float32 bits, s the int32 MX exponent of each element) where
  that is a normal float32 or zero, else +-0 (below 2^-126 every element format encodes +-0
  anyway, as in encode_shifted). Integer ops: subnormal x normalized by clz, as their
  scaled value may be a normal code. Valid below 2^128, which the MX exponent keeps every
  element of a finite block under (|x| <= amax and 2^s >= amax / 2^(emax + 1)); NaN / Inf
  blocks are the caller's (garbage here)."""
  mag = bits & MAG
  biased = i32(mag >> _U(23))
  frac = mag & _FRAC
  lead = clz(frac | _U(1)) - 8
  sub = biased == 0
  frac = jnp.where(sub, (frac << lead.astype(jnp.uint32)) & _FRAC, frac)
  be = jnp.where(sub, 1 - lead, biased) - s
  # A zero reads as 2^-149 here (lead 23): scaled by 2^127 at most it stays <= 2^-22, which
  # every element format encodes to +-0 as it does a zero.
  return jnp.where(be >= 1, (be.astype(jnp.uint32) << _U(23)) | frac, _U(0)) | (bits & ~MAG)


_FP8_DTYPES = {"e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}


def fp8_convert_code(v, elem: ElementFormat):
  """Saturating RNE code (uint32, sign included) of float32 values v in an fp8 format, by the
  conversion instruction (Triton: cvt.rn.satfinite.e4m3x2.f32 / e5m2x2, sm_89+; XLA's
  convert in interpret mode). Clipped to +-max first, so both saturate alike: values in
  (max, max + half an ulp) round to max either way, larger ones and +-Inf saturate there.
  Exact for every finite v, float32 subnormals included (they round to +-0, flushed or
  not). A NaN gives some code: the callers fix NaN codes."""
  m = np.float32(elem.max_finite)
  v = jnp.minimum(jnp.maximum(v, -m), m)
  return lax.bitcast_convert_type(v.astype(_FP8_DTYPES[elem.name]), jnp.uint8).astype(
      jnp.uint32)


# Rounding a float32 a >= 0 to nearest even on e2m1's grid with float adds (one rounding
# each, so exact): below 2 the grid's spacing is 1/2, and (a + C) - C with C = 1.5 * 2^22
# rounds to it (C is a multiple of 1: the sum's last place is 1/2 and its evenness the
# grid's). From 1 up the grid is two significant bits, and Veltkamp's split
# c = fl(a * 2^22 + a), h = fl(c - fl(c - a)) rounds to them (to nearest even: every float32
# in [1, 8) checked against the binade's (a + C) - C, 2026-12-02).
_E2M1_HALF = np.float32(1.5 * 2.0**22)
_SPLIT = np.float32(2.0**22)


def e2m1_float_code(vbits):
  """Saturating RNE e2m1 code (uint32, sign included) of float32 bits, from float adds:
  |v| clipped to 6, rounded onto the e2m1 grid (above), then the grid value's code as the
  float min(2r, r + 2, 7) (0, .5, 1, 1.5, 2 -> 0..4; 3, 4 -> 5, 6; 6 -> 7), read from the
  low bits of code + 2^23. The float multiply-adds run on the GPU's FMA pipe; the clip, the
  one select, the two mins and the sign's shift and and-or on its ALU pipe. A float32
  subnormal gives 0 whether flushed or not; a NaN gives some code: the callers force NaN /
  Inf blocks."""
  a = jnp.minimum(lax.bitcast_convert_type(vbits & MAG, jnp.float32), np.float32(6.0))
  low = (a + _E2M1_HALF) - _E2M1_HALF                     # spacing 1/2 (a < 2)
  c = a * _SPLIT + a
  high = c - (c - a)                                      # two significant bits (a >= 1)
  r = jnp.where(a < np.float32(1.0), low, high)
  t = jnp.minimum(jnp.minimum(r + r, r + np.float32(2.0)), np.float32(7.0))
  word = u32(t + np.float32(2.0**23))                     # 2^23 + t: t in the low bits
  return (word & _U(7)) | ((vbits >> _U(28)) & _U(8))


# ----------------------------------------------------------------------------------------
# MX shared exponents (docs/numerics.md section 4).

def mx_exponent(block_max, elem: ElementFormat, mode: str, inv_max_bits: int):
  """Shared exponent s (int32, clamped to [-127, 127]) of blocks whose largest magnitude
  bits are block_max (NaN / Inf blocks get some s; their codes are forced elsewhere).
  inv_max_bits: float32 bits of fl(1 / elem.max_finite) (rceil)."""
  a = jnp.minimum(block_max, FLT_MAX)
  if mode == "rceil":
    r = mul_bits(a, jnp.full(a.shape, inv_max_bits, jnp.uint32))
    biased = i32(r >> _U(23))
    mant = r & _U(0x7FFFFF)
    # the smallest power of two >= r; for a subnormal r: 2^-127 up to it, 2^-126 above
    s = jnp.where(biased == 0, jnp.where(mant > _U(0x400000), -126, -127),
                  biased - 127 + (mant != 0).astype(jnp.int32))
  else:
    if mode == "even":
      a = (a + _U(1 << (22 - elem.mantissa_bits))) & _U(0xFF800000)
    s = i32(a >> _U(23)) - 127 - elem.emax
    if mode == "ceil":
      s = s + ((a & _U(0x7FFFFF)) != 0).astype(jnp.int32)
  return jnp.clip(s, -127, 127)


def mx_scale_code(block_max, s):
  """E8M0 code (uint32) of a block: 0xFF for NaN / Inf, 0 for a zero block, else s + 127."""
  code = (s + E8M0.bias).astype(jnp.uint32)
  code = jnp.where(block_max == 0, _U(0), code)
  return jnp.where(block_max >= INF, _U(E8M0.nan_code), code)


# ----------------------------------------------------------------------------------------
# Tiles: block reductions, broadcasts back to elements, packing (docs/numerics.md section 3).

def block_max(mag, axis: int, b: int):
  """Max over blocks of b consecutive elements along `axis` (0 or 1) of a 2D tile."""
  r, c = mag.shape
  if axis == 1:
    return jnp.max(mag.reshape(r, c // b, b), axis=2)
  return jnp.max(mag.reshape(r // b, b, c), axis=1)


def tile_max(mag, br: int, bc: int):
  """Max over (br, bc) tiles of a 2D tile."""
  r, c = mag.shape
  m = jnp.max(mag.reshape(r, c // bc, bc), axis=2)         # (r, c / bc)
  return jnp.max(m.reshape(r // br, br, c // bc), axis=1)


def expand(v, axis: int, b: int):
  """Each per-block value of `v` repeated over its block's b elements along `axis`."""
  r, c = v.shape
  if axis == 1:
    return jnp.broadcast_to(v[:, :, None], (r, c, b)).reshape(r, c * b)
  return jnp.broadcast_to(v[:, None, :], (r, b, c)).reshape(r * b, c)


def expand_tiles(v, br: int, bc: int):
  return expand(expand(v, 0, br), 1, bc)


def pack(codes, axis: int, elem: ElementFormat):
  """uint32 words of the codes along `axis`: code i of a group of 32 / bits is bits
  [bits * i, bits * (i + 1)) of its word (little-endian)."""
  pw = elem.per_word
  r, c = codes.shape
  shifts = lax.iota(jnp.uint32, pw) * _U(elem.bits)
  if axis == 1:
    g = codes.reshape(r, c // pw, pw) << shifts[None, None, :]
    return jnp.sum(g, axis=2)
  g = codes.reshape(r // pw, pw, c) << shifts[None, :, None]
  return jnp.sum(g, axis=1)
