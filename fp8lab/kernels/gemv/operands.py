"""The GEMV's operands: x's exact parts and their layout (XLA), and the weight planes.

x side (outside the kernel): the row maxima and power-of-two shifts, the exact float16 /
bfloat16 parts (cut by masking bit patterns, never by float round trips that XLA may elide:
docs/numerics.md section 9), and _prep_x, which lays them out as the dots' right operand.
W side (traced inside the kernel, no refs): the decoded planes times their block scales, the
MX fast path's factors and the MX exact fallback's operands.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.formats import F16, QUANTIZED, ElementFormat
from fp8lab.kernels import unpack
from fp8lab.kernels.gemv.configs import _next_pow2
from fp8lab.kernels.gemv.plan import FormatPlan, _pair_layout, _route_log2

_U = np.uint32


def _log2_pow2(v: float) -> int:
  """log2 of a power of two (exact: from the float's exponent)."""
  mant, e = math.frexp(v)
  if mant != 0.5:
    raise ValueError(f"{v} is not a power of two")
  return e - 1


def _mx_spread(elem: ElementFormat) -> int:
  """The MX fast path's largest drop d = scale - m below the row's largest scale m for which
  every code * 2^d stays exact in float16: its lowest bit, elem.min_subnormal * 2^d, must
  not fall below float16's (2^-24). The largest magnitude must fit at d = 0."""
  if not elem.max_finite < F16.max_finite:
    raise ValueError(f"{elem.name} values do not fit in float16")
  return _log2_pow2(elem.min_subnormal) - _log2_pow2(F16.min_subnormal)


# Per element format of the MX formats: e2m1 23, e4m3 15, e5m2 8 binades.
_MX_SPREAD = {q.element.name: _mx_spread(q.element) for q in QUANTIZED.values()
              if q.scaling == "mx"}


def _mx_factors(codes: jax.Array, elem: ElementFormat, route_log2: int, m: jax.Array):
  """MX fast path: E8M0 codes (rows, groups) and each row's largest code m (rows,) ->
  (float16 factors, far).

  The factor of a block is 2^(c - m) times 2^-route_log2 (_route_log2: f16_route_log2(elem),
  or 0 for native planes), so that decoded code * factor = value * 2^(c - m), as a float16
  built from bits (normal down to 2^-14, subnormal down to 2^-24). Either way the product
  is value * 2^(c - m), so its exactness does not depend on the route. Blocks further than
  _MX_SPREAD below m ("far") get factor 0: their products would not be exact, so a far
  block holding a nonzero code sends the program to the exact fallback."""
  # t = the factor's biased float16 exponent e + 15, e = c - m - route_log2; the per-row
  # part (15 - route_log2 - m) is loop-invariant, so a block costs an add, a compare, a
  # shift and a select where no factor can be a float16 subnormal (every route but native
  # e4m3, whose smallest factor is 2^-15).
  t = codes.astype(jnp.int32) + (15 - route_log2 - m)[:, None]
  t_far = 15 - route_log2 - _MX_SPREAD[elem.name]     # d < -spread  <=>  t < t_far
  far = t < t_far
  bits = t << 10                                      # normal: e >= -14, t >= 1
  if t_far < 1:                                       # subnormal factors 2^e, e >= -24
    bits = jnp.where(t >= 1, bits, jnp.left_shift(jnp.int32(1), jnp.clip(t + 9, 0, 15)))
  bits = jnp.where(far, 0, bits)
  return lax.bitcast_convert_type(bits.astype(jnp.uint16), jnp.float16), far


def _per_word(t: jax.Array, wpb: int) -> jax.Array:
  """(rows, groups) -> (rows, groups * wpb): each block's value repeated for its words."""
  br, g = t.shape
  return jnp.broadcast_to(t[:, :, None], (br, g, wpb)).reshape(br, g * wpb)


def _decode(words: jax.Array, plan: FormatPlan, interpret: bool) -> list[jax.Array]:
  """The main loop's float16 (bf16 weights: bfloat16) planes, value * 2^_route_log2(plan),
  in the order _pair_layout(plan) names (which _prep_x gives x)."""
  layout = _pair_layout(plan)
  if layout == "native":
    return unpack.decode_planes_native(words, plan.elem, interpret=interpret)
  if layout == "e2m1_asm":
    return unpack.decode_planes_e2m1_asm(words, interpret=interpret)
  return unpack.decode_planes_16bit(words, plan.elem)


def _weight_planes(words: jax.Array, codes: jax.Array | None, plan: FormatPlan,
                   interpret: bool = False, m: jax.Array | None = None) -> list[jax.Array]:
  """The main loop's dot operands of a (rows, block_k) word tile: the planes of _decode
  (unpack.PAIR_LAYOUTS order), times their block scale (NVFP4: the E4M3 value; MX: the
  fast path's factor for the rows' largest scale codes m). The two columns of a word pair
  (e, e + 1), e even, lie in one scale block whatever the order (words_per_block is even),
  so the scale of column j is the scale of word j."""
  if not plan.block_scaled:
    return _decode(words, plan, interpret)
  wpb = plan.words_per_block
  if plan.scaling == "nvfp4":
    # The E4M3 scale's true value is exact in float16; so is its product with a
    # float16-route e2m1 code (<= 6 significant bits, >= 2^-24).
    s16 = (unpack.e4m3_scale_to_f16_native(codes, interpret=interpret) if plan.native_scale
           else unpack.e4m3_scale_to_f16(codes))
    s16 = _per_word(s16, wpb)
    return [p * s16 for p in _decode(words, plan, interpret)]
  fac, _ = _mx_factors(codes, plan.elem, _route_log2(plan), m)
  fac = _per_word(fac, wpb)
  return [p * fac for p in _decode(words, plan, interpret)]


def _mx_exact_planes(words: jax.Array, codes: jax.Array, plan: FormatPlan):
  """MX fallback operands: float32 code * 2^(c - 127) (exact), as bfloat16 (exact unless
  below 2^-133). Always the shift-and-mask float16 route (native_fp8 / asm_e2m1 or not),
  undone by the fallback's own fold (gemv_launch)."""
  scale = _per_word(unpack.e8m0_scale_to_f32(codes), plan.words_per_block)
  return [(p * scale).astype(jnp.bfloat16) for p in unpack.decode_planes(words, plan.elem)]


def _combine_slots(acc: jax.Array, n_slots: int) -> jax.Array:
  """(rows, n_slots * cols) dot results -> (rows, cols): slot 0 (hi part) plus the others,
  keeping a non-finite hi as it is (an Inf weight times a nonzero x stays Inf)."""
  slots = [acc]
  while len(slots) < n_slots:
    slots = [half for t in slots for half in jnp.split(t, 2, axis=1)]
  y = slots[0]
  if n_slots > 1:
    lo = slots[1]
    for t in slots[2:]:
      lo = lo + t
    y = jnp.where(jnp.isfinite(y), y + lo, y)
  return y



def _exp2_exact(n: jax.Array) -> jax.Array:
  """2^n as float32 for integer n in [-149, 127], built from bits (exact)."""
  n = n.astype(jnp.int32)
  normal = lax.bitcast_convert_type((jnp.clip(n, -126, 127) + 127).astype(jnp.uint32)
                                    << _U(23), jnp.float32)
  sub = lax.bitcast_convert_type(_U(1) << jnp.clip(n + 149, 0, 22).astype(jnp.uint32),
                                 jnp.float32)
  return jnp.where(n >= -126, normal, sub)


def _row_max(x: jax.Array) -> jax.Array:
  """The largest |x| per row of (rows, k) float32: Inf or NaN for a row that holds a
  non-finite element. No select on isfinite (so XLA can fuse |x| into the reduce): such a
  row has only non-finite outputs whatever the scale of its finite elements (every output
  sums that element's product, Inf * w or NaN), and _x_shift maps a = Inf to 2^-114 and
  a = NaN to 2^14 (a > 0 is false), which the finite elements survive or overflow to Inf
  without changing an output that is Inf or NaN anyway."""
  return jnp.max(jnp.abs(x), axis=-1)


def _x_shift(a: jax.Array) -> jax.Array:
  """s = _F16_X_EXP - floor(log2(a)) for row maxima a (_row_max), from the exponent field
  (subnormal maxima count as -127; a = 0 gives e = 0): x * 2^s has its largest |x| in
  [2^14, 2^15). Used by _x_part_list and, on the same a, by the GEMV's epilogue."""
  e = (lax.bitcast_convert_type(a, jnp.uint32) >> _U(23)).astype(jnp.int32) - 127
  return _F16_X_EXP - jnp.where(a > 0, e, 0)


def _scale_pow2(x: jax.Array, s: jax.Array) -> jax.Array:
  """x * 2^s (s broadcast against x), s up to +-252, in two exact steps (no 2^s overflow)."""
  s1 = jnp.clip(s // 2, -126, 126)
  s2 = jnp.clip(s - s1, -126, 126)
  return x * _exp2_exact(s1) * _exp2_exact(s2)


# Target exponent of max|x| for x's float16 parts: max in [2^14, 2^15) < 65504.
_F16_X_EXP = 14


def split_bf16_parts(x: jax.Array, n_parts: int) -> jax.Array:
  """Splits float32 x into n_parts bfloat16 arrays whose float32 sum is x (stacked on axis 0).

  Each part is the top 8 significant bits of what the previous parts left, cut by masking
  the float32 bit pattern (the remainder x - part is exact in float32). Exact for normal
  float32 x with n_parts = 3 (float16 inputs: 2; bfloat16: 1), unless a remainder falls
  below float32's normal range (|x| < 2^-110 or so), where low bits may be lost.
  """
  return jnp.stack(_bf16_parts(x, n_parts))


def _bf16_parts(x: jax.Array, n_parts: int) -> list[jax.Array]:
  """split_bf16_parts as a list (elementwise ops only: _xprep_kernel runs it too)."""
  parts = []
  r = x.astype(jnp.float32)
  for p in range(n_parts):
    if p == n_parts - 1:
      hi = r                                             # what is left fits in 8 bits
    else:
      hi = lax.bitcast_convert_type(
          lax.bitcast_convert_type(r, jnp.uint32) & _U(0xFFFF0000), jnp.float32)
    bits16 = (lax.bitcast_convert_type(hi, jnp.uint32) >> _U(16)).astype(jnp.uint16)
    parts.append(lax.bitcast_convert_type(bits16, jnp.bfloat16))
    r = r - hi
  return parts


def split_f16_parts(x: jax.Array) -> jax.Array:
  """Splits float32 x (|x| < 2^15) into float16 hi + lo (stacked on axis 0).

  hi = x truncated to 11 significant bits (a float16 value when |x| >= 2^-14), lo = the
  float16 rounding of the exact remainder: |hi + lo - x| <= 2^-22 |x|, or <= 2^-25 when
  |x| < 2^-14 (float16 subnormals). Cut by masking bits, not by a float round trip that
  XLA may elide (docs/numerics.md section 9).
  """
  return jnp.stack(_f16_parts(x))


def _f16_parts(x: jax.Array) -> list[jax.Array]:
  """split_f16_parts as a list (elementwise ops only: _xprep_kernel runs it too)."""
  hi = lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.uint32) & _U(0xFFFFE000),
                                jnp.float32)
  return [hi.astype(jnp.float16), (x - hi).astype(jnp.float16)]


_BF16_PARTS = {jnp.dtype(jnp.float32): 3, jnp.dtype(jnp.float16): 2,
               jnp.dtype(jnp.bfloat16): 1}


def _n_slots(xdt, operand) -> int:
  """Column slots of x's exact parts as `operand` (a power of two)."""
  if operand == jnp.bfloat16:
    return _next_pow2(_BF16_PARTS[jnp.dtype(xdt)])
  return 1 if jnp.dtype(xdt) == jnp.float16 else 2


def _x_scaled(x_dtype, operand) -> bool:
  """Whether x's parts as `operand` are taken after a power-of-two scale per row: float32 /
  bfloat16 x as float16 parts (float16's range is narrower). The scale is 2^_x_shift(a)
  for the row maxima a (_row_max), which the GEMV's epilogue undoes (col_factors)."""
  return operand == jnp.float16 and jnp.dtype(x_dtype) != jnp.float16


def _x_row_max(x: jax.Array, operand) -> jax.Array | None:
  """The row maxima a (_row_max) of x (B, k) where _x_scaled, else None."""
  return _row_max(x.astype(jnp.float32)) if _x_scaled(x.dtype, operand) else None


def _x_part_list(x: jax.Array, x_dtype, operand, shift: jax.Array | None) -> list[jax.Array]:
  """x's exact parts as `operand`: a list of _n_slots arrays of x's shape (float32 x: 3
  bfloat16 parts and a zero 4th), of x * 2^shift (shift broadcast against x) where
  _x_scaled. Elementwise ops only: XLA's preparation and _xprep_kernel both run it."""
  if operand == jnp.bfloat16:
    parts = _bf16_parts(x.astype(jnp.float32), _BF16_PARTS[jnp.dtype(x_dtype)])
  elif shift is None:
    parts = [x.astype(jnp.float16)]                        # float16 x: exact, one part
  else:
    parts = _f16_parts(_scale_pow2(x.astype(jnp.float32), shift))
  return parts + [jnp.zeros_like(parts[0])] * (_n_slots(x_dtype, operand) - len(parts))


def _x_parts(x: jax.Array, operand) -> tuple[jax.Array, jax.Array | None]:
  """x (B, k) -> its exact parts (n_slots, B, k) as `operand` (float16 / bfloat16), and
  the row maxima a (_row_max) if x was multiplied by 2^_x_shift(a) per row before the split
  (None where it was not scaled)."""
  a = _x_row_max(x, operand)
  shift = None if a is None else _x_shift(a)[:, None]
  return jnp.stack(_x_part_list(x, x.dtype, operand, shift)), a



def _prep_x(x: jax.Array, per_word: int, kw_pad: int, operand, batch_pad: int,
            layout: str = "code", block_batch: int | None = None):
  """x as the dots' right operand (pw, kw_pad, n_slots * batch_pad) and the row maxima a of
  _x_parts (None if x was not scaled), from which the kernel's epilogue takes the
  per-column factor 2^(fold - s_b) (col_factors in _gemv_kernel): computed there, it costs no
  XLA kernel.

  Column slot * batch_pad + b holds part `slot` of x row b (rows >= B are zero); row j of plane
  i's slice holds the element whose code plane i's column j holds (unpack.PAIR_LAYOUTS
  `layout`; "code": element per_word * j + i). Slots are a power of two (a float32 x's 3
  bfloat16 parts get a zero 4th). With batch blocks of block_batch = bb rows (bb <
  batch_pad), each block's columns are contiguous instead: column c * n_slots * bb + slot *
  bb + j holds part `slot` of x row c * bb + j."""
  n_b, k = x.shape
  parts, a = _x_parts(x, operand)
  n_slots = parts.shape[0]
  parts = jnp.pad(parts, ((0, 0), (0, batch_pad - n_b),
                          (0, kw_pad * per_word - k)))   # (n_slots, batch_pad, kw_pad * pw)
  cols = n_slots * batch_pad
  bb = block_batch
  if bb is not None and bb < batch_pad:          # (n_slots, blocks, bb, K) -> blocks first
    parts = parts.reshape(n_slots, batch_pad // bb, bb, -1).transpose(1, 0, 2, 3)
  sizes, order = unpack.pair_axes(layout, per_word)
  xp = parts.reshape(cols, kw_pad // 2, *sizes)            # (N, word pair, digits...)
  xin = jnp.transpose(xp, (*[2 + d for d in order[:-1]], 1, 2 + order[-1], 0))
  return xin.reshape(per_word, kw_pad, cols), a


