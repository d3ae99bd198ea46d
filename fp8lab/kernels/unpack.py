"""In-kernel unpack helpers: packed uint32 words -> float32 values, with integer ops only.

These run inside Pallas kernels (Triton lowering on the GPU, interpret mode on the CPU), so
they use nothing but shifts, masks, same-width bitcasts and float16 -> float32 converts:
no fp8 / fp4 conversion instructions, which GPUs before sm_89 lack and which the Triton
lowering makes saturate (NUMERICS.md section 9). The one exception:
`decode_planes_native` (fp8 -> float16 converts for sm_89+, which the GEMV uses there by
default for e4m3 / e5m2 codes; see its docstring). They are
NOT the golden model (fp8lab/numerics/codec.py); the tests compare the two over every code.

The float16 route. A minifloat code with e <= 5 exponent bits, m mantissa bits and bias b,
whose magnitude bits are moved to float16 bits [10 - m, 10 - m + e + m) and whose sign bit
is moved to bit 15, is a float16 bit pattern whose value is exactly

    value(code) * 2^(b - 15)                     (15 = float16's bias)

for every finite code, subnormals included: float16 has at least as many exponent and
mantissa bits, so the exponent field keeps its meaning relative to the bias and a
subnormal code stays subnormal in float16 with the same mantissa. This factor,
`f16_route_log2(fmt)` (e4m3: -8, e5m2: 0, e2m1: -14), is folded into one final scale per
output instead of a multiply per element. Specials: e5m2 has float16's exponent width, so
its Inf / NaN codes land on float16 Inf / NaN as they are. e4m3's NaN codes (magnitude
0x7F) would land on the finite float16 480 * 2^-8: adding 1 at the magnitude's lowest bit
carries into float16 bit 14 exactly for an all-ones magnitude, and OR-ing that carry bit in
sets the exponent field to all ones (mantissa 0x380): a float16 NaN (two integer ops per
pair). e2m1 has no specials.

Pairs. Codes i and i + per_word/2 of a word are 16 bits apart, so one shift and one mask
move both into float16 position at once (low half: code i, high half: code i + per_word/2),
halving the integer work per element against a per-code decode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental.pallas import triton as plgpu
import numpy as np

from fp8lab.formats import BF16, E4M3, E8M0, F16, ElementFormat

__all__ = ["f16_route_log2", "f16_pair_bits", "decode_planes", "decode_planes_16bit",
           "decode_planes_native", "NATIVE_FORMATS", "e8m0_scale_to_f32", "e4m3_scale_to_f16"]

_U = np.uint32


def _shl(words: jax.Array, shift: int) -> jax.Array:
  """Logical shift left by `shift` (right for negative shifts); 0 is a no-op."""
  if shift > 0:
    return words << _U(shift)
  if shift < 0:
    return words >> _U(-shift)
  return words


def f16_route_log2(fmt: ElementFormat) -> int:
  """log2 of the factor between a code's float16-route value and its true value.

  The float16 pattern built by `f16_pair_bits` equals value * 2^f16_route_log2(fmt);
  0 for the storage formats f16 / bf16, whose halves are the values themselves.
  """
  if not fmt.minifloat:
    return 0
  return fmt.bias - F16.bias


def f16_pair_bits(words: jax.Array, fmt: ElementFormat, pair: int) -> jax.Array:
  """Float16 bit patterns of codes `pair` (low half) and `pair + per_word/2` (high half).

  Args:
    words: uint32 words of packed `fmt` codes (any shape).
    fmt: a minifloat element format with at most 5 exponent bits (e4m3, e5m2, e2m1).
    pair: 0 <= pair < per_word / 2.

  Returns:
    uint32 words holding two float16 patterns, each value * 2^f16_route_log2(fmt)
    (NaN codes: a float16 NaN).
  """
  assert fmt.minifloat and fmt.exponent_bits <= F16.exponent_bits, fmt
  bits = fmt.bits
  mag_bits = bits - 1
  target = F16.mantissa_bits - fmt.mantissa_bits       # where the magnitude's lsb goes
  shift_mag = target - bits * pair
  shift_sign = (F16.bits - 1) - (bits * pair + mag_bits)
  mag_mask = ((1 << mag_bits) - 1) << target
  mag_mask = _U(mag_mask | (mag_mask << 16))
  sign_mask = _U(0x80008000)
  if shift_mag == shift_sign:                          # e5m2: the byte is already in place
    return _shl(words, shift_mag) & _U(mag_mask | sign_mask)
  mag = _shl(words, shift_mag) & mag_mask
  bits_ = mag | (_shl(words, shift_sign) & sign_mask)
  if _nan_is_all_ones(fmt):
    # +1 at the magnitude's lsb carries into bit 14 (30) only for an all-ones magnitude.
    lsb = _U((1 << target) | (1 << (target + 16)))
    bits_ = bits_ | ((mag + lsb) & _U(0x40004000))
  return bits_


def _halves16(bits: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
  """The low and high 16-bit halves of uint32 words, bitcast to `dtype` (float16 /
  bfloat16): no float arithmetic."""
  to16 = lambda h: lax.bitcast_convert_type(h.astype(jnp.uint16), dtype)
  return to16(bits & _U(0xFFFF)), to16(bits >> _U(16))


def decode_planes_16bit(words: jax.Array, fmt: ElementFormat) -> list[jax.Array]:
  """Plane i = code i of each word as float16 (minifloats: value * 2^f16_route_log2(fmt),
  NaN codes as NaN) or, for "bf16" words, as bfloat16; no float arithmetic at all.
  For tensor-core operands."""
  if fmt is BF16 or fmt is F16:
    return list(_halves16(words, jnp.bfloat16 if fmt is BF16 else jnp.float16))
  half = fmt.per_word // 2
  planes: list[jax.Array | None] = [None] * fmt.per_word
  for pair in range(half):
    planes[pair], planes[pair + half] = _halves16(f16_pair_bits(words, fmt, pair),
                                                  jnp.float16)
  return planes  # type: ignore[return-value]


def decode_planes(words: jax.Array, fmt: ElementFormat) -> list[jax.Array]:
  """decode_planes_16bit as float32 (an exact convert: Inf and NaN kept; on the GPU a
  half-to-single instruction, not an fp8 conversion)."""
  return [p.astype(jnp.float32) for p in decode_planes_16bit(words, fmt)]


# Element formats decode_planes_native takes (8-bit codes with a PTX fp8 conversion).
NATIVE_FORMATS = ("e4m3", "e5m2")


def _native_plane_asm(fmt: ElementFormat, i: int) -> str:
  """PTX for plane i of two words e, e+1 (pack=2: $1, $2; $0 = their two float16): PRMT
  puts byte i of each word side by side in 16 bits (selector nibbles i, 4 + i), and one
  cvt.rn.f16x2.{e4m3,e5m2}x2 converts both (low half: word e)."""
  sel = ((4 + i) << 4) | i
  return ("{ .reg .b32 t; .reg .b16 lo, hi; "
          f"prmt.b32 t, $1, $2, {sel:#x}; mov.b32 {{lo, hi}}, t; "
          f"cvt.rn.f16x2.{fmt.name}x2 $0, lo; }}")


def decode_planes_native(words: jax.Array, fmt: ElementFormat, *,
                         interpret: bool = False) -> list[jax.Array]:
  """Plane i = code i of each word as float16 holding the code's TRUE value (no route
  factor: 2^0), by fp8 -> float16 conversion. Exact for every code (float16 holds every
  e4m3 / e5m2 value, subnormals and -0 included); NaN codes give NaN, e5m2 Inf codes Inf.

  NOT integer-only, and for Pallas kernels only. Compiled (Triton), each plane is one
  inline-PTX `prmt` + `cvt.rn.f16x2.e4m3x2` (`.e5m2x2`) per two words (elementwise asm,
  pack=2), which needs sm_89+ (FP8 units). jax 0.11.2's Pallas lowers a plain
  bitcast-to-fp8 + astype(float16) too (to the same cvt), but Triton then extracts and
  re-pairs the bytes with ~3.5 more integer instructions per word; the asm lets one PRMT
  pair them. Inline asm has no interpret-mode rule, so with `interpret=True` the planes
  are the same conversion in jnp: the code byte bitcast to the fp8 dtype, astype(float16)
  (which is what the tests check over every code). The GEMV uses it when
  FormatPlan.native_fp8 is set (by default on sm_89+ GPUs, fp8lab.gemv_packed's
  fp8_decode); the integer route above is used everywhere else.
  """
  assert fmt.name in NATIVE_FORMATS, fmt
  if interpret:
    return [lax.bitcast_convert_type(_shl(words, -fmt.bits * i).astype(jnp.uint8),
                                     fmt.dtype).astype(jnp.float16)
            for i in range(fmt.per_word)]
  out = jax.ShapeDtypeStruct(words.shape, jnp.float16)
  return [plgpu.elementwise_inline_asm(_native_plane_asm(fmt, i), args=[words],
                                       constraints="=r,r,r", pack=2,
                                       result_shape_dtypes=[out])[0]
          for i in range(fmt.per_word)]


def _nan_is_all_ones(fmt: ElementFormat) -> bool:
  """Whether `fmt`'s NaN codes are exactly its all-ones magnitudes and its exponent is
  narrower than float16's (e4m3), so the float16 route needs the NaN carry fix."""
  mag_max = (1 << (fmt.bits - 1)) - 1
  return (bool(fmt.nan_codes) and fmt.exponent_bits < F16.exponent_bits
          and {c & mag_max for c in fmt.nan_codes} == {mag_max})


def e8m0_scale_to_f32(codes: jax.Array) -> jax.Array:
  """E8M0 scale codes (uint8 or wider) -> float32 2^(code - 127); 0xFF -> NaN.

  Code 0 is 2^-127, a float32 subnormal (bit 22); codes 1..254 are the exponent field.
  0xFF shifted into the exponent field would read as Inf: setting bit 22 as well makes it
  a quiet NaN, so one OR handles both ends.
  """
  c = codes.astype(jnp.uint32)
  ends = ((c + _U(1)) & _U(0xFE)) == _U(0)          # c == 0 or c == E8M0.nan_code
  bits = (c << _U(23)) | jnp.where(ends, _U(1 << 22), _U(0))
  return lax.bitcast_convert_type(bits, jnp.float32)


def e4m3_scale_to_f16(codes: jax.Array) -> jax.Array:
  """E4M3 scale codes (uint8 or wider) -> their true values as float16 (exact: every E4M3
  value is a float16); NaN codes -> NaN. The float16-route pattern (value * 2^-8, a float16
  subnormal for the smallest codes) times 2^8 in float16, which is exact."""
  c = codes.astype(jnp.uint32)
  # Place the byte as code 1 of a pair so that its float16 pattern is the low half.
  lo, _ = _halves16(f16_pair_bits(c << _U(8), E4M3, 1), jnp.float16)
  return lo * jnp.float16(2.0 ** -f16_route_log2(E4M3))


assert E8M0.nan_code == 0xFF and E4M3.nan_code == 0x7F
