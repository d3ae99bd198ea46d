"""In-kernel unpack helpers: packed uint32 words -> float32 values, with integer ops only.

These run inside Pallas kernels (Triton lowering on the GPU, interpret mode on the CPU), so
they use nothing but shifts, masks, same-width bitcasts and float16 -> float32 converts:
no fp8 / fp4 conversion instructions, which GPUs before sm_89 lack and which the Triton
lowering makes saturate (docs/numerics.md section 9). The one exception:
`decode_planes_native` (fp8 -> float16 converts for sm_89+, which the GEMV uses there by
default for e4m3 / e5m2 codes; see its docstring). They are
NOT the golden model (fp8lab/numerics/codec.py); the tests compare the two over every code.
`decode_planes_e2m1_asm` is the float16 route below for e2m1 codes written as inline PTX
of integer instructions (shl / shr / and / lop3 / prmt), which the GEMV uses when compiled
for a CUDA GPU (FormatPlan.asm_e2m1). The two asm decodes order their planes differently
from decode_planes_16bit (PAIR_LAYOUTS): each output register pairs two codes of one word.

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

from fp8lab.formats import BF16, E4M3, E8M0, F16, FORMAT_NAMES, ElementFormat, get_format

__all__ = ["f16_route_log2", "f16_pair_bits", "decode_planes", "decode_planes_16bit",
           "decode_planes_native", "NATIVE_FORMATS", "decode_planes_e2m1_asm",
           "PAIR_LAYOUTS", "pair_axes", "pair_offsets", "pair_planes", "e8m0_scale_to_f32",
           "e4m3_scale_to_f16", "e4m3_scale_to_f16_native"]

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


# Element formats decode_planes_native takes: those with a PTX fp8 -> f16x2 conversion.
NATIVE_FORMATS = tuple(n for n in FORMAT_NAMES if get_format(n).f16x2_convert)


def _native_plane_asm(fmt: ElementFormat, i: int) -> str:
  """PTX for plane i of two words e, e+1 (pack=2: $1, $2; $0 = two float16): the 16-bit
  half i % 2 of word e + i // 2 holds codes 2 (i % 2) and 2 (i % 2) + 1 side by side, and
  one cvt.rn.f16x2.{e4m3,e5m2}x2 converts both (low half: the lower byte). The `mov`
  only names the halves; no instruction moves a byte."""
  w = "$2" if i >= 2 else "$1"
  return ("{ .reg .b16 lo, hi; "
          f"mov.b32 {{lo, hi}}, {w}; "
          f"cvt.rn.f16x2.{fmt.name}x2 $0, {'hi' if i % 2 else 'lo'}; }}")


def decode_planes_native(words: jax.Array, fmt: ElementFormat, *,
                         interpret: bool = False) -> list[jax.Array]:
  """The codes of each word as float16 holding their TRUE values (no route factor: 2^0),
  by fp8 -> float16 conversion, in planes ordered as PAIR_LAYOUTS["native"] says: with
  words paired (e, e + 1), e even, plane i holds codes 2n and 2n + 1 (n = i % 2) of word
  e + i // 2 in its columns e and e + 1 (pair_offsets). Exact for every code (float16
  holds every e4m3 / e5m2 value, subnormals and -0 included); NaN codes give NaN, e5m2
  Inf codes Inf.

  NOT integer-only, and for Pallas kernels only. Compiled (Triton), each plane is one
  inline-PTX `cvt.rn.f16x2.e4m3x2` (`.e5m2x2`) per two words (elementwise asm, pack=2) on
  a 16-bit half of one of them, which needs sm_89+ (FP8 units); the pair order spares the
  PRMT that pairing code i of words e and e + 1 needs (offline SASS, e4m3 64 x 64 words,
  batch 1: 251 -> 196 instructions per K step; mxfp8 486 -> 423). jax 0.11.2's Pallas
  lowers a plain bitcast-to-fp8 + astype(float16) too (to the same cvt), but Triton then
  extracts and re-pairs the bytes with ~3.5 more integer instructions per word. Inline
  asm has no interpret-mode rule, so with `interpret=True` the planes are the same
  conversion in jnp: the code byte bitcast to the fp8 dtype, astype(float16) (which is
  what the tests check over every code), in the same order. The GEMV uses it when
  FormatPlan.native_fp8 is set (by default on sm_89+ GPUs, fp8lab.gemv_packed's
  fp8_decode); the integer route above is used everywhere else.
  """
  assert fmt.f16x2_convert, fmt
  if interpret:
    return pair_planes([_native_code(words, fmt, i) for i in range(fmt.per_word)],
                       "native")
  out = jax.ShapeDtypeStruct(words.shape, jnp.float16)
  return [plgpu.elementwise_inline_asm(_native_plane_asm(fmt, i), args=[words],
                                       constraints="=r,r,r", pack=2,
                                       result_shape_dtypes=[out])[0]
          for i in range(fmt.per_word)]


def _native_code(words: jax.Array, fmt: ElementFormat, i: int) -> jax.Array:
  """Code i of each word as float16, by the fp8 dtype in jnp (the native decode's twin)."""
  return lax.bitcast_convert_type(_shl(words, -fmt.bits * i).astype(jnp.uint8),
                                  fmt.dtype).astype(jnp.float16)


def e4m3_scale_to_f16_native(codes: jax.Array, *, interpret: bool = False) -> jax.Array:
  """e4m3_scale_to_f16 by the fp8 -> float16 conversion (sm_89+, Pallas kernels only).
  Same values (exact), NaN for the NaN codes.

  Compiled: one inline-PTX `cvt.rn.f16x2.e4m3x2` per two codes (pack=2 on the uint8
  codes: Triton hands the asm both bytes in one 16-bit register, low byte = the first,
  which the convert puts in the low half). The last axis pairs them, so its length must
  be even. (Widening the codes to uint32 first and pairing them with a PRMT cost three
  more PRMTs per pair of codes: offline SASS, nvfp4 128 x 32 words, 24 per K step.)
  With `interpret=True`: the fp8 dtype in jnp."""
  if interpret:
    return _native_code(codes.astype(jnp.uint32), E4M3, 0)
  out = jax.ShapeDtypeStruct(codes.shape, jnp.float16)
  return plgpu.elementwise_inline_asm("cvt.rn.f16x2.e4m3x2 $0, $1;",
                                      args=[codes.astype(jnp.uint8)], constraints="=r,h",
                                      pack=2, result_shape_dtypes=[out])[0]


# Plane orders of the decodes. With words paired (e, e + 1), e even, column e + g (g = 0, 1)
# of plane i holds one code of the pair; its offset among the pair's 2 * per_word codes is
# written in digits (name, size), most significant first. The plane index i is the digits
# other than "g", in order; "g" is the column's parity. "code": code i of words e and e + 1
# (decode_planes_16bit, decode_planes); "native": codes 2n, 2n + 1 of word e + h
# (decode_planes_native); "e2m1_asm": codes n, n + 4 of word e + h (decode_planes_e2m1_asm).
# The GEMV orders x's elements by the same digits.
PAIR_LAYOUTS = {
    "code": lambda pw: (("g", 2), ("i", pw)),
    "native": lambda pw: (("h", 2), ("n", pw // 2), ("g", 2)),
    "e2m1_asm": lambda pw: (("h", 2), ("g", 2), ("n", pw // 2)),
}


def pair_axes(layout: str, per_word: int) -> tuple[list[int], tuple[int, ...]]:
  """For a PAIR_LAYOUTS name: the digit sizes that split a pair of words' 2 * per_word
  codes, and the order of those digits that puts the plane index first and the column
  parity g last (a transpose; then a reshape to (per_word, 2))."""
  digits = PAIR_LAYOUTS[layout](per_word)
  names = [n for n, _ in digits]
  planes = [d for d, n in enumerate(names) if n != "g"]
  return [size for _, size in digits], (*planes, names.index("g"))


def pair_offsets(layout: str, per_word: int) -> np.ndarray:
  """(per_word, 2) int array: the offset within a pair of words (code index + per_word *
  word) of plane i's column parity g, for a PAIR_LAYOUTS name."""
  sizes, order = pair_axes(layout, per_word)
  return np.transpose(np.arange(2 * per_word).reshape(sizes), order).reshape(per_word, 2)


def pair_planes(code_planes: list[jax.Array], layout: str) -> list[jax.Array]:
  """Reorders per-code planes (plane c = code c of each word, last axis even) into a
  PAIR_LAYOUTS order (jnp; the asm decodes' interpret twins and the tests)."""
  pw = len(code_planes)
  lo = [p[..., 0::2] for p in code_planes]      # code c of word e
  hi = [p[..., 1::2] for p in code_planes]      # code c of word e + 1
  src = lambda o: (hi if o >= pw else lo)[o % pw]
  off = pair_offsets(layout, pw)
  return [jnp.stack([src(off[i, 0]), src(off[i, 1])], axis=-1).reshape(code_planes[0].shape)
          for i in range(pw)]


# decode_planes_e2m1_asm: plane i of two words ($1: word e, $2: word e + 1, e even) as one
# f16x2 register, in integer PTX. Each op is (name, dst, *sources); ints are immediates.
_E2M1_SIGN, _E2M1_MAG = 0x80808080, 0x0E0E0E0E        # per byte: float16 bits 15, 9..11
_OR_AND = 0xEA                                        # lop3 table of (a & b) | c


def _e2m1_plane_ops(i: int) -> list[tuple]:
  """The integer program of e2m1 plane i (0 <= i < 8) for a pair of words.

  The register holds codes n and n + 4 (n = i % 4) of one word w (i < 4: $1, else $2):
  nibble n of byte q = n // 2 and of byte q + 2, 16 bits apart, so no bytes of the two
  words need interleaving. (1) In every byte of w at once, the high nibble (odd n; for
  even n, w << 4 first) becomes the high byte of its float16 pattern: sign kept at bit 7,
  magnitude shifted 3 down to bits 1..3, the rest cleared (shr, and, lop3 (w & 0x80808080)
  | m); value * 2^-14, -0 for code 8. (2) PRMT with a zero operand puts byte q in bits
  8..15 and byte q + 2 in bits 24..31, zeros elsewhere. 4 instructions (odd n) or 5 (even
  n), but (1) is common to the two planes of w with the same parity of n, so after ptxas
  merges the repeats a word costs 3 + 4 + 4 = 11 instructions for its 8 codes (the
  previous program, which paired code i of words e and e + 1, needed 12: one more PRMT to
  interleave the words' bytes).
  """
  assert 0 <= i < 8, i
  w = "$2" if i >= 4 else "$1"
  q, odd = divmod(i % 4, 2)
  ops: list[tuple] = []
  src = w
  if not odd:
    ops.append(("shl", "s", w, 4))
    src = "s"
  ops += [("shr", "m", src, 3), ("and", "m", "m", _E2M1_MAG),
          ("lop3", "x", src, _E2M1_SIGN, "m", _OR_AND),
          ("prmt", "$0", "x", 0, ((q + 2) << 12) | (4 << 8) | (q << 4) | 4)]
  return ops


def _e2m1_plane_asm(i: int) -> str:
  """PTX text of _e2m1_plane_ops(i) (elementwise asm, pack=2)."""
  return _e2m1_ptx(_e2m1_plane_ops(i))


def _e2m1_ptx(ops: list[tuple]) -> str:
  """PTX text of an op list in _e2m1_plane_ops' form (registers s, m, x; an op name
  without a type suffix is .b32)."""
  arg = lambda v: (f"{v:#x}" if v > 9 else str(v)) if isinstance(v, int) else v
  body = " ".join(f"{op if '.' in op else op + '.b32'} {', '.join(arg(v) for v in args)};"
                  for op, *args in ops)
  return "{ .reg .b32 s, m, x; " + body + " }"


def _run_e2m1_plane_ops(i: int, lo: jax.Array, hi: jax.Array) -> jax.Array:
  """The same program in jnp on uint32 words ($1 = lo, $2 = hi): the asm's interpret twin."""
  env = {"$1": lo, "$2": hi}
  val = lambda v: _U(v) if isinstance(v, int) else env[v]
  for op, dst, *src in _e2m1_plane_ops(i):
    if op == "prmt":                         # default mode: byte k = byte sel[k] of {$2, $1}
      a, b, sel = val(src[0]), val(src[1]), src[2]
      r = jnp.zeros_like(a)
      for k in range(4):
        n = (sel >> (4 * k)) & 0xF
        assert n < 8, sel                    # no sign-replicate mode
        byte = ((b if n >= 4 else a) >> _U(8 * (n % 4))) & _U(0xFF)
        r = r | (byte << _U(8 * k))
    elif op in ("shl", "shr"):
      r = _shl(val(src[0]), src[1] if op == "shl" else -src[1])
    elif op == "and":
      r = val(src[0]) & val(src[1])
    else:                                    # lop3: table bit (a b c) = 4a + 2b + c
      a, b, c, lut = val(src[0]), val(src[1]), val(src[2]), src[3]
      r = jnp.zeros_like(a)
      for idx in range(8):
        if lut >> idx & 1:
          r = r | ((a if idx & 4 else ~a) & (b if idx & 2 else ~b) & (c if idx & 1 else ~c))
    env[dst] = r
  return env["$0"]


def decode_planes_e2m1_asm(words: jax.Array, *, interpret: bool = False) -> list[jax.Array]:
  """decode_planes_16bit(words, E2M1), permuted within pairs of words, by inline PTX of
  integer instructions only.

  The same float16 bits (value * 2^-14, -0 for code 8) as the shift-and-mask route, in
  another order: with words paired (e, e + 1), e even, plane i holds codes n and n + 4
  (n = i % 4) of word e + i // 4 in its columns e and e + 1 (PAIR_LAYOUTS["e2m1_asm"]),
  where decode_planes_16bit's plane i holds code i of words e and e + 1. A GEMV that uses
  these planes orders x's elements the same way. Each plane is one asm call per two words
  (pack=2) whose output register already holds the two float16 the MMA operand pairs, and
  both come from one word, so no bytes are interleaved; _e2m1_plane_ops has the
  instructions (11 per word once ptxas merges the repeats). No fp4 / fp8 conversion, so
  any CUDA GPU (sm_80 too) runs it. Pallas kernels only: compiled, the asm; with
  `interpret=True` the same op list run by _run_e2m1_plane_ops in jnp on words paired
  along the last axis (even length), which the tests compare with decode_planes_16bit.
  The GEMV uses it when FormatPlan.asm_e2m1 is set (gemv_packed: whenever it compiles for
  a CUDA GPU).
  """
  if interpret:
    assert words.shape[-1] % 2 == 0, words.shape
    lo, hi = words[..., 0::2], words[..., 1::2]

    def plane(i):
      pair = _run_e2m1_plane_ops(i, lo, hi)
      both = jnp.stack([pair & _U(0xFFFF), pair >> _U(16)], axis=-1).reshape(words.shape)
      return lax.bitcast_convert_type(both.astype(jnp.uint16), jnp.float16)
    return [plane(i) for i in range(8)]
  out = jax.ShapeDtypeStruct(words.shape, jnp.float16)
  return [plgpu.elementwise_inline_asm(_e2m1_plane_asm(i), args=[words],
                                       constraints="=r,r,r", pack=2,
                                       result_shape_dtypes=[out])[0]
          for i in range(8)]


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


# ---------------------------------------------------------------------------- one code per lane
# The attention kernel (fp8lab/kernels/attention/) gathers its K / V tiles in their natural
# element order, one code per lane, so that its dots need no reordered query.

def word_codes(words: jax.Array, fmt: ElementFormat, index: jax.Array) -> jax.Array:
  """Code `index` (0 <= index < per_word, broadcast against `words`) of each uint32 word, as
  a uint32 holding the code in its low bits (shift and mask only)."""
  shift = index.astype(jnp.uint32) * _U(fmt.bits)
  return (words >> shift) & _U((1 << fmt.bits) - 1)


def decode_codes(codes: jax.Array, fmt: ElementFormat) -> jax.Array:
  """One code per element (uint32, the code in its low bits) -> its true value as float32.

  Minifloats (e4m3, e5m2, e2m1) take the float16 route of f16_pair_bits (integer ops; NaN
  codes give NaN, e5m2 Inf codes Inf), widened to float32 (exact) and times
  2^-f16_route_log2(fmt) (exact: the results are float32 normals, the smallest e2m1 / e4m3 /
  e5m2 values being 2^-1, 2^-9, 2^-16). f16 / bf16 codes are bitcast as stored."""
  if fmt is BF16 or fmt is F16:
    half = lax.bitcast_convert_type(codes.astype(jnp.uint16),
                                    jnp.bfloat16 if fmt is BF16 else jnp.float16)
    return half.astype(jnp.float32)
  lo, _ = _halves16(f16_pair_bits(codes, fmt, 0), jnp.float16)
  route = f16_route_log2(fmt)
  values = lo.astype(jnp.float32)
  return values if route == 0 else values * jnp.float32(2.0 ** -route)


__all__ += ["word_codes", "decode_codes"]
