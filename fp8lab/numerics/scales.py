"""Scale rules of the golden model (docs/numerics.md sections 4, 5, 8 and 8b), and the exact
float32 arithmetic on bit patterns they are computed with.

Why float32 arithmetic on integers: XLA:CPU flushes float32 subnormal inputs and results of
arithmetic to zero (2^-127 * 448 == 0 there), GPUs do not. The scale steps of NVFP4 and
per-tensor scaling are specified as IEEE float32 operations (round to nearest even, gradual
underflow), so they are computed here with integer code that gives the IEEE result on every
backend: `f32_mul`, `f32_div`, `f32_add`, `ldexp_bits`. All of them take and return uint32
float32 bit patterns. NaN results are the canonical quiet NaN 0x7FC00000 (sign clear), which
is the one deviation from the hardware (payloads are not propagated).

MX shared exponents (section 4), for a block whose largest magnitude is amax (float32 bits;
E its biased exponent field, 0 for zero and subnormals) and an element format with emax and
largest finite value elem_max; s is the unbiased exponent, the scale 2^s, the E8M0 code s+127:

    floor: s = (E - 127) - emax
    ceil:  s = (E - 127) + (mantissa(amax) != 0) - emax
    even:  floor applied to (bits(amax) + (1 << (22 - mbits))) & 0xFF800000
    rceil: s = log2 of the smallest power of two >= fl(amax * fl(1 / elem_max))

then s is clamped to [-127, 127]. A zero block gets code 0x00 (every rule gives it, and it
is forced explicitly); a block with NaN or +-Inf gets code 0xFF.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.formats import (BLOCK_SCALE_MODES, E2M1, E4M3, E8M0, MX_SCALE_MODES, ElementFormat,
                            get_format)
from fp8lab.numerics.bits import f32_bits
from fp8lab.numerics.codec import decode, encode_bits

__all__ = [
    "MX_SCALE_MODES", "mx_scale_codes", "nvfp4_tensor_scales", "nvfp4_block_scale_codes",
    "nvfp4_block_encode_factor", "BLOCK_SCALE_MODES", "block_scales", "current_scale",
    "finite_amax_bits", "tensor_amax",
    "DelayedScaling", "f32_mul", "f32_div", "f32_add", "f32_sub", "ldexp_bits",
    "bits_of", "float_of", "f32_const",
]


_U = np.uint32
_SIGN = _U(0x80000000)
_MAG = _U(0x7FFFFFFF)
_INF = _U(0x7F800000)
_QNAN = _U(0x7FC00000)
FLT_MAX_BITS = _U(0x7F7FFFFF)
ONE_BITS = _U(0x3F800000)


def bits_of(x) -> jax.Array:
  """float32 (or bfloat16 / float16) values -> uint32 float32 bit patterns. 16-bit inputs are
  widened on their bit patterns (numerics/bits.py), so the bits are the same on every backend,
  NaN sign and payload included; Python scalars become float32 first."""
  return f32_bits(x)


def float_of(bits) -> jax.Array:
  """uint32 bit patterns -> float32 values."""
  return lax.bitcast_convert_type(jnp.asarray(bits, jnp.uint32), jnp.float32)


def f32_const(value: float) -> np.uint32:
  """The bit pattern of a Python float rounded once to float32 (numpy's IEEE rounding)."""
  return np.float32(value).view(np.uint32)


def _reciprocal_const(value: float) -> np.uint32:
  """Bits of fl(1 / value) for a float32-representable value: numpy's float32 division is
  IEEE, so this is the same correctly rounded quotient f32_div gives."""
  return (np.float32(1.0) / np.float32(value)).view(np.uint32)


# ----------------------------------------------------------------------------------------
# Exact IEEE float32 arithmetic on bit patterns.

def _unpack(bits):
  """Splits finite float32 bits into (sign bit, e, sig): |x| = sig * 2^(e - 23), with sig
  in [2^23, 2^24) for every nonzero value (subnormals are normalized) and sig = 0 for zero."""
  sign = bits & _SIGN
  biased = ((bits >> _U(23)) & _U(0xFF)).astype(jnp.int32)
  frac = bits & _U(0x7FFFFF)
  # A subnormal frac * 2^-149 moves its leading one up to bit 23.
  lead_shift = lax.clz(frac).astype(jnp.int32) - 8                  # 24 for frac == 0
  sub_sig = frac << jnp.minimum(lead_shift, 31).astype(jnp.uint32)
  sub_e = -126 - lead_shift
  is_sub = biased == 0
  sig = jnp.where(is_sub, sub_sig, frac | _U(0x800000))
  e = jnp.where(is_sub, sub_e, biased - 127)
  return sign, e, sig


def _shift_right_sticky(m, shift):
  """m >> shift (uint32, shift >= 0 int32), with every dropped one ORed into bit 0."""
  s = jnp.minimum(shift, 31).astype(jnp.uint32)
  kept = m >> s
  dropped = m & ((_U(1) << s) - _U(1))
  kept = jnp.where(shift > 31, _U(0), kept)
  dropped = jnp.where(shift > 31, m, dropped)
  return kept | (dropped != 0).astype(jnp.uint32)


def _round_pack(sign, e, m):
  """Rounds sign * m * 2^(e - 30) to float32 bits, nearest-even. m: uint32 with its leading
  one at bit 30 (m < 2^31); bit 0 may carry a sticky one. Overflow gives +-Inf."""
  # Bits below the float32 quantum: 7 for normals, more in the subnormal range.
  shift = 7 + jnp.maximum(-126 - e, 0)
  s = jnp.minimum(shift, 31).astype(jnp.uint32)
  q = m >> s
  rem = m & ((_U(1) << s) - _U(1))
  half = _U(1) << (s - _U(1))
  round_up = (rem > half) | ((rem == half) & ((q & _U(1)) == _U(1)))
  q = q + round_up.astype(jnp.uint32)
  q = jnp.where(shift > 31, _U(0), q)              # below half of 2^-149: rounds to zero
  # q holds the implicit one at bit 23 for normals; a carry to bit 24 (or from a subnormal
  # into bit 23) moves the exponent field up by itself.
  exp_field = jnp.clip(e + 126, 0, 255).astype(jnp.uint32)
  mag = jnp.minimum((exp_field << _U(23)) + q, _INF)
  return sign | mag


def _specials(bits):
  mag = bits & _MAG
  return mag > _INF, mag == _INF, mag == 0


def _product_operands(a, b):
  """Both operands of a product or quotient as (nan, inf, zero, e, sig), and the result's sign."""
  a = jnp.asarray(a, jnp.uint32)
  b = jnp.asarray(b, jnp.uint32)
  (sa, ea, ma), (sb, eb, mb) = _unpack(a), _unpack(b)
  return (*_specials(a), ea, ma), (*_specials(b), eb, mb), sa ^ sb


def f32_mul(a, b) -> jax.Array:
  """IEEE float32 a * b on uint32 bit patterns, round to nearest even, subnormals kept."""
  (nan_a, inf_a, zero_a, ea, ma), (nan_b, inf_b, zero_b, eb, mb), sign = _product_operands(a, b)
  # 24 x 24 -> 48-bit product from 12-bit halves, as (hi, lo) 32-bit words.
  a1, a0 = ma >> _U(12), ma & _U(0xFFF)
  b1, b0 = mb >> _U(12), mb & _U(0xFFF)
  p11, p00 = a1 * b1, a0 * b0
  mid = a1 * b0 + a0 * b1                                   # < 2^25
  t1 = p00 + ((mid & _U(0xFFFFF)) << _U(12))
  c1 = (t1 < p00).astype(jnp.uint32)
  t2 = t1 + ((p11 & _U(0xFF)) << _U(24))
  c2 = (t2 < t1).astype(jnp.uint32)
  lo = t2
  hi = (p11 >> _U(8)) + (mid >> _U(20)) + c1 + c2            # product = hi * 2^32 + lo
  top = (hi >> _U(15)) & _U(1)                                # leading one at bit 47 or 46
  m47 = (hi << _U(15)) | (lo >> _U(17)) | ((lo & _U(0x1FFFF)) != 0).astype(jnp.uint32)
  m46 = (hi << _U(16)) | (lo >> _U(16)) | ((lo & _U(0xFFFF)) != 0).astype(jnp.uint32)
  m = jnp.where(top == 1, m47, m46)
  e = ea + eb + top.astype(jnp.int32)
  out = _round_pack(sign, e, m)
  out = jnp.where(zero_a | zero_b, sign, out)
  out = jnp.where(inf_a | inf_b, sign | _INF, out)
  return jnp.where(nan_a | nan_b | (inf_a & zero_b) | (zero_a & inf_b), _QNAN, out)


def f32_div(a, b) -> jax.Array:
  """IEEE float32 a / b on uint32 bit patterns, round to nearest even, subnormals kept."""
  (nan_a, inf_a, zero_a, ea, ma), (nan_b, inf_b, zero_b, eb, mb), sign = _product_operands(a, b)
  smaller = ma < mb
  r = jnp.where(smaller, ma << _U(1), ma)                     # now r / mb is in [1, 2)
  e = ea - eb - smaller.astype(jnp.int32)
  mb = jnp.where(zero_b, _U(1), mb)                           # keeps the loop harmless

  def step(_, carry):                                          # restoring long division
    q, r = carry
    bit = r >= mb
    return (q << _U(1)) | bit.astype(jnp.uint32), jnp.where(bit, r - mb, r) << _U(1)

  # A loop, not 31 unrolled steps: XLA:CPU takes minutes to compile the unrolled chain.
  q, r = lax.fori_loop(0, 31, step, (jnp.zeros_like(r), r))
  m = q | (r != 0).astype(jnp.uint32)                         # q: leading one at bit 30
  out = _round_pack(sign, e, m)
  out = jnp.where(zero_a | inf_b, sign, out)
  out = jnp.where(inf_a | zero_b, sign | _INF, out)
  invalid = nan_a | nan_b | (zero_a & zero_b) | (inf_a & inf_b)
  return jnp.where(invalid, _QNAN, out)


def f32_add(a, b) -> jax.Array:
  """IEEE float32 a + b on uint32 bit patterns, round to nearest even, subnormals kept."""
  a = jnp.asarray(a, jnp.uint32)
  b = jnp.asarray(b, jnp.uint32)
  nan_a, inf_a, zero_a = _specials(a)
  nan_b, inf_b, zero_b = _specials(b)
  # Order by magnitude so that |big| >= |small|.
  swap = (b & _MAG) > (a & _MAG)
  big = jnp.where(swap, b, a)
  small = jnp.where(swap, a, b)
  s1, e1, m1 = _unpack(big)
  s2, e2, m2 = _unpack(small)
  m1 = m1 << _U(7)                                            # leading one at bit 30
  m2 = _shift_right_sticky(m2 << _U(7), e1 - e2)             # sticky jammed into bit 0
  same = s1 == s2
  total = jnp.where(same, m1 + m2, m1 - m2)
  # A carry out of bit 30 (same signs) moves right by one; a cancellation moves left.
  carry = total >= _U(1 << 31)
  total_c = (total >> _U(1)) | (total & _U(1))
  lead = lax.clz(total).astype(jnp.int32) - 1
  total_n = total << jnp.clip(lead, 0, 31).astype(jnp.uint32)
  m = jnp.where(carry, total_c, total_n)
  e = jnp.where(carry, e1 + 1, e1 - lead)
  out = _round_pack(s1, e, m)
  out = jnp.where(total == 0, _U(0), out)                    # exact cancellation: +0
  out = jnp.where(zero_b, a, out)
  out = jnp.where(zero_a, b, out)
  out = jnp.where(zero_a & zero_b, a & b, out)               # -0 only for -0 + -0
  out = jnp.where(inf_a, a, jnp.where(inf_b, b, out))
  invalid = nan_a | nan_b | (inf_a & inf_b & ((a ^ b) == _SIGN))
  return jnp.where(invalid, _QNAN, out)


def f32_sub(a, b) -> jax.Array:
  """IEEE float32 a - b on uint32 bit patterns."""
  return f32_add(a, jnp.asarray(b, jnp.uint32) ^ _SIGN)


def ldexp_bits(bits, k) -> jax.Array:
  """x * 2^k on float32 bit patterns, rounded to nearest even when the result falls into the
  subnormal range (exact otherwise); overflow gives +-Inf. NaN and +-Inf pass through."""
  bits = jnp.asarray(bits, jnp.uint32)
  nan, inf, zero = _specials(bits)
  sign, e, sig = _unpack(bits)
  out = _round_pack(sign, e + jnp.asarray(k, jnp.int32), sig << _U(7))
  return jnp.where(nan | inf | zero, bits, out)


# ----------------------------------------------------------------------------------------
# Amax.

def finite_amax_bits(bits, axis=None) -> jax.Array:
  """Largest |x| over the finite elements, as float32 bits (0 when there are none).

  For non-negative floats the bit patterns order like the values, so this is an integer
  max; NaN and +-Inf are left out (they are handled by the callers' NaN/Inf rules).
  """
  mag = bits & _MAG
  return jnp.max(jnp.where(mag >= _INF, _U(0), mag), axis=axis, initial=_U(0))


def tensor_amax(x) -> jax.Array:
  """max |x| over the finite elements of x, float32 (0.0 for an empty or all non-finite x).
  16-bit inputs are widened on their bit patterns, so the result is the same on every backend.

  This is the amax that per-tensor current scaling and NVFP4 use, and the value to fold into
  a DelayedScaling history."""
  return float_of(finite_amax_bits(bits_of(x)))


# ----------------------------------------------------------------------------------------
# MX (section 4).

def mx_shared_exponent(amax_bits, elem: ElementFormat, mode: str) -> jax.Array:
  """Unbiased shared exponent s (int32, clamped to [-127, 127]) of blocks with finite
  largest magnitude amax (float32 bits, sign clear). See the module docstring."""
  if mode not in MX_SCALE_MODES:
    raise ValueError(f"scale_mode must be one of {MX_SCALE_MODES}, got {mode!r}")
  amax_bits = jnp.asarray(amax_bits, jnp.uint32)
  if mode == "rceil":
    r = f32_mul(amax_bits, _reciprocal_const(elem.max_finite))
    biased = (r >> _U(23)).astype(jnp.int32)
    mant = r & _U(0x7FFFFF)
    # Round up to a power of two: 2^(E-127) if r is one, else the next; for a subnormal r
    # the next power of two is 2^-127 up to and including it, 2^-126 above it.
    s = jnp.where(biased == 0, jnp.where(mant > _U(0x400000), -126, -127),
                  biased - 127 + (mant != 0).astype(jnp.int32))
  else:
    if mode == "even":
      bump = _U(1 << (22 - elem.mantissa_bits))
      amax_bits = (amax_bits + bump) & _U(0xFF800000)
    biased = (amax_bits >> _U(23)).astype(jnp.int32)
    s = biased - 127 - elem.emax
    if mode == "ceil":
      s = s + ((amax_bits & _U(0x7FFFFF)) != 0).astype(jnp.int32)
  return jnp.clip(s, -127, 127)


def mx_scale_codes(amax_bits, elem: ElementFormat, mode: str) -> jax.Array:
  """E8M0 scale codes (uint8) of blocks whose largest magnitude (NaN and Inf included, as
  the max of the magnitude bit patterns) is amax_bits: 0xFF for a NaN/Inf block, 0x00 for a
  zero block, else s + 127 with s from `mx_shared_exponent`."""
  amax_bits = jnp.asarray(amax_bits, jnp.uint32)
  s = mx_shared_exponent(jnp.minimum(amax_bits, FLT_MAX_BITS), elem, mode)
  code = (s + E8M0.bias).astype(jnp.uint32)
  code = jnp.where(amax_bits == 0, _U(0), code)
  code = jnp.where(amax_bits >= _INF, _U(E8M0.nan_code), code)
  return code.astype(jnp.uint8)


# ----------------------------------------------------------------------------------------
# NVFP4 (section 5).

_NVFP4_ENC_NUMERATOR = E4M3.max_finite * E2M1.max_finite        # 448 * 6 = 2688, exact


def nvfp4_tensor_scales(amax_bits) -> tuple[jax.Array, jax.Array]:
  """Steps 2 and 3: (S_enc, S_dec) as float32 bits from the tensor amax (float32 bits of the
  largest finite |x|). S_enc = min(fl(2688 / amax), FLT_MAX), 1 if amax == 0;
  S_dec = fl(1 / S_enc)."""
  amax_bits = jnp.asarray(amax_bits, jnp.uint32)
  s_enc = f32_div(f32_const(_NVFP4_ENC_NUMERATOR), amax_bits)
  s_enc = jnp.minimum(s_enc, FLT_MAX_BITS)                     # both positive: bits order
  s_enc = jnp.where((amax_bits == 0) | (s_enc == 0), ONE_BITS, s_enc)
  s_dec = f32_div(ONE_BITS, s_enc)
  return s_enc, s_dec


def nvfp4_block_scale_codes(block_amax_bits, s_enc_bits) -> jax.Array:
  """Step 4: E4M3 codes of s = fl(block_amax * fl(S_enc * fl(1/6))), RNE, saturating.
  block_amax_bits: largest finite |x| of each block (float32 bits)."""
  inv_elem_max = _reciprocal_const(E2M1.max_finite)
  s = f32_mul(block_amax_bits, f32_mul(s_enc_bits, inv_elem_max))
  return encode_bits(s, E4M3, saturate=True)


def nvfp4_block_decode_factor(scale_codes, s_dec_bits) -> jax.Array:
  """fl(float(s_e4m3) * S_dec) as float32 bits: the factor a block's E2M1 values are
  multiplied by to dequantize (step 7). A NaN scale code gives NaN."""
  return f32_mul(bits_of(decode(scale_codes, E4M3)), s_dec_bits)


def nvfp4_block_encode_factor(scale_codes, s_dec_bits) -> jax.Array:
  """Step 5: enc_b = min(fl(1 / fl(float(s_e4m3) * S_dec)), FLT_MAX) as float32 bits; a zero
  scale (or a product that underflows to zero) gives FLT_MAX."""
  inv = f32_div(ONE_BITS, nvfp4_block_decode_factor(scale_codes, s_dec_bits))
  return jnp.minimum(inv, FLT_MAX_BITS)


# ----------------------------------------------------------------------------------------
# Blockwise FP8 (section 8b).

_POW2_MASK = _U(0xFF800000)


def block_scales(amax_bits, elem: ElementFormat, mode: str) -> tuple[jax.Array, jax.Array]:
  """(scale, scale_inv) as float32 bits of blocks whose largest FINITE magnitude is amax_bits.

  scale = fl(fp8_max / amax) (exact IEEE division), FLT_MAX where it overflows, 1.0 for
  amax == 0; mode "pow2" then clears its mantissa bits (Transformer Engine's
  force_pow_2_scales: FLT_MAX becomes 2^127; the quotient is never subnormal, since
  fp8_max / FLT_MAX >= 448 / FLT_MAX > 2^-119). scale_inv = fl(1 / scale) is the stored
  dequantization factor (exact in "pow2" mode, 2^-127 included)."""
  if mode not in BLOCK_SCALE_MODES:
    raise ValueError(f"scale_mode must be one of {BLOCK_SCALE_MODES}, got {mode!r}")
  scale = _scale_from_amax_bits(amax_bits, elem.max_finite, 0, ONE_BITS)
  if mode == "pow2":
    scale = scale & _POW2_MASK
  return scale, f32_div(ONE_BITS, scale)


# ----------------------------------------------------------------------------------------
# Per-tensor scaling (section 8).

def current_scale(amax, fmt, margin: int = 0) -> jax.Array:
  """Quantization factor of per-tensor current scaling, Transformer Engine's rule:
  scale = fl(fl(fp8_max / amax) / 2^margin) for a finite amax > 0; 1.0 for amax == 0 or a
  non-finite amax; FLT_MAX where the quotient overflows (a tiny amax). float32 scalar.
  A bfloat16 / float16 amax is widened on its bit patterns (the same on every backend)."""
  return _current_scale(float_of(bits_of(amax)), get_format(fmt).name,
                        _check_margin(margin))


@functools.partial(jax.jit, static_argnames=("fmt", "margin"))
def _current_scale(amax, fmt: str, margin: int):
  return float_of(_scale_from_amax_bits(bits_of(amax), get_format(fmt).max_finite, margin,
                                        ONE_BITS))


def _scale_from_amax_bits(amax_bits, numerator: float, margin: int, fallback_bits):
  """fl(fl(numerator / amax) / 2^margin), FLT_MAX where it overflows, fallback_bits when amax
  is 0 or not finite (float32 bits). numerator: the format's max (e4m3 448) or NVFP4's 2688."""
  amax_bits = jnp.asarray(amax_bits, jnp.uint32) & _MAG
  scale = ldexp_bits(f32_div(f32_const(numerator), amax_bits), -int(margin))
  scale = jnp.where(scale == _INF, FLT_MAX_BITS, scale)
  usable = (amax_bits != 0) & (amax_bits < _INF)
  return jnp.where(usable, scale, fallback_bits)


def _check_margin(margin) -> int:
  if isinstance(margin, bool) or not isinstance(margin, (int, np.integer)):
    raise ValueError(f"margin must be an int (a power-of-two headroom), got {margin!r}")
  return int(margin)


AMAX_ALGOS = ("max", "most_recent")

# The numerator of each delayed-scaling format's scale rule: the element max for e4m3 / e5m2
# (scale = max / amax), and for nvfp4 the 2688 of S_enc = 2688 / amax (section 5), so that the
# state's scale is the S_enc to quantize with.
DELAYED_NUMERATORS = {"e4m3": E4M3.max_finite, "e5m2": get_format("e5m2").max_finite,
                      "nvfp4": _NVFP4_ENC_NUMERATOR}


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True, eq=False)
class DelayedScaling:
  """Delayed per-tensor scaling (Transformer Engine semantics) as a pure functional state.

  Leaves: `amax_history` float32[n] (index 0 = the newest amax) and `scale` float32[] (the
  QUANTIZATION factor to use now: codes = encode(x * scale)). Static: `format` ("e4m3",
  "e5m2", or "nvfp4", whose scale is the tensor-level S_enc = 2688 / amax_ref of
  docs/numerics.md section 5), `margin` (int), `amax_compute_algo` ("max" over the history,
  or "most_recent").

  One training step:

      q = fp8lab.quantize(x, "e4m3", scale=state.scale)   # uses the scale from history
      state = state.update(fp8lab.tensor_amax(x))          # folds this step's amax in

  `update` shifts the history by one (dropping the oldest), writes the new amax at index 0,
  takes amax_ref = max(history) (or the newest), and sets
  scale = fp8_max / amax_ref / 2^margin (2688 / amax_ref / 2^margin for nvfp4; computed as
  float32, `current_scale`), keeping the
  previous scale when amax_ref is 0 or not finite, and FLT_MAX when the quotient overflows.
  Transformer Engine writes the amax into slot 0 during the pass and rolls afterwards; the
  window used for the scale (this amax and the n-1 before it) is the same.
  """
  amax_history: jax.Array
  scale: jax.Array
  format: str = "e4m3"
  margin: int = 0
  amax_compute_algo: str = "max"

  @classmethod
  def create(cls, fmt: str = "e4m3", history_length: int = 16, margin: int = 0,
             amax_compute_algo: str = "max") -> "DelayedScaling":
    """A fresh state: an all-zero history and scale 1.0."""
    name = fmt
    if fmt != "nvfp4":
      try:
        name = get_format(fmt).name
      except (ValueError, TypeError):
        name = None
    if name not in DELAYED_NUMERATORS:
      raise ValueError(f"delayed scaling is for {', '.join(map(repr, DELAYED_NUMERATORS))}; "
                       f"got {fmt!r}")
    if not (isinstance(history_length, int) and history_length >= 1):
      raise ValueError(f"history_length must be a positive int, got {history_length!r}")
    if amax_compute_algo not in AMAX_ALGOS:
      raise ValueError(f"amax_compute_algo must be one of {AMAX_ALGOS}, got "
                       f"{amax_compute_algo!r}")
    return cls(jnp.zeros((history_length,), jnp.float32), jnp.ones((), jnp.float32),
               name, _check_margin(margin), amax_compute_algo)

  def update(self, amax) -> "DelayedScaling":
    """Folds a new amax (float32 scalar) in and returns the state with the next scale."""
    amax = float_of(bits_of(amax)).reshape(())          # a 16-bit amax widened on its bits
    history = jnp.concatenate([amax[None], self.amax_history[:-1]])
    if self.amax_compute_algo == "max":
      # The bit patterns of non-negative floats order like the values; NaN (all magnitude
      # bits above Inf) wins, and then the scale is kept.
      ref_bits = jnp.max(bits_of(history) & _MAG)
    else:
      ref_bits = bits_of(history[0]) & _MAG
    scale_bits = _scale_from_amax_bits(ref_bits, DELAYED_NUMERATORS[self.format], self.margin,
                                       bits_of(self.scale))
    return dataclasses.replace(self, amax_history=history, scale=float_of(scale_bits))

  def tree_flatten(self):
    return (self.amax_history, self.scale), (self.format, self.margin, self.amax_compute_algo)

  @classmethod
  def tree_unflatten(cls, aux, children):
    return cls(*children, *aux)
