"""Per-tensor scale rules on float32 bit patterns, for use INSIDE Pallas kernels.

The in-kernel twins of the golden model's rules (fp8lab/numerics/scales.py; docs/numerics.md
sections 5 and 8), written with the integer float32 arithmetic of f32.py so that every bit
matches on the GPU (Triton) and in interpret mode; the tests compare them with the golden
functions, which this file does not call. Everything is elementwise on uint32 arrays of any
shape unless a docstring says otherwise; formats and margins are static Python values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.formats import E2M1, E4M3, ElementFormat, get_format
from fp8lab.kernels.quantize.f32 import (FLT_MAX_BITS, INF_BITS, MAG_BITS, ONE_BITS, QNAN_BITS,
                                         clz, div_bits, ldexp_bits, mul_bits)

__all__ = ["format_max_bits", "current_scale_bits", "delayed_update_bits",
           "nvfp4_tensor_scales_bits", "e4m3_code_bits", "nvfp4_block_decode_factor_bits",
           "nvfp4_block_encode_factor_bits", "AMAX_ALGOS"]

_U = np.uint32
AMAX_ALGOS = ("max", "most_recent")
# 448 * 6 = 2688 (exact): S_enc's numerator (section 5, step 2).
NVFP4_ENC_NUMERATOR_BITS = np.float32(E4M3.max_finite * E2M1.max_finite).view(np.uint32)


def format_max_bits(fmt: str | ElementFormat) -> np.uint32:
  """float32 bits of a format's largest finite value (from the registry, fp8lab/formats.py)."""
  return np.float32(get_format(fmt).max_finite).view(np.uint32)


def current_scale_bits(amax_bits, fmt_max_bits, margin, fallback_bits) -> jax.Array:
  """Per-tensor current scaling (section 8): fl(fl(fmt_max / |amax|) / 2^margin) as float32
  bits; FLT_MAX where that overflows (a tiny amax); `fallback_bits` where amax is 0 or not
  finite. The sign of amax_bits is ignored. margin: an int (or int32 array)."""
  amax = jnp.asarray(amax_bits, jnp.uint32) & MAG_BITS
  q = div_bits(jnp.broadcast_to(jnp.asarray(fmt_max_bits, jnp.uint32), amax.shape), amax)
  # a Python int margin negated here: the Triton lowering cannot negate a constant array
  shift = -int(margin) if isinstance(margin, (int, np.integer)) else -jnp.asarray(margin,
                                                                                  jnp.int32)
  scale = ldexp_bits(q, jnp.int32(shift) if isinstance(shift, int) else shift)
  scale = jnp.where(scale == INF_BITS, FLT_MAX_BITS, scale)
  usable = (amax != _U(0)) & (amax < INF_BITS)
  return jnp.where(usable, scale, jnp.asarray(fallback_bits, jnp.uint32))


def delayed_update_bits(shifted_bits, amax_bits, scale_bits, *, fmt_max_bits, margin: int,
                        algo: str = "max", length: int | None = None
                        ) -> tuple[jax.Array, jax.Array]:
  """DelayedScaling.update on bits: returns (new_history_bits, new_scale_bits).

  shifted_bits: (N,) uint32, the old history moved up one slot: entry i holds the old
  entry i - 1 (index 0 the newest amax) for 1 <= i < n, n = length (default N); entry 0 and
  entries >= n are ignored. The caller shifts (a kernel by loading at offset i - 1: a roll
  by reshapes and stacks crashes Triton's compiler on the H200). N must be a power of two
  (the Triton lowering's tensors are).
  amax_bits: this step's amax as raw float32 bits (0-d or (1,)); stored in slot 0 as given.
  scale_bits: the current scale's bits, kept when amax_ref is 0 or not finite.
  New history: amax at 0, the old entry i-1 at i for 1 <= i < n (the oldest dropped), 0 at
  i >= n. amax_ref: the max of the new history's magnitude bits ("max": NaN wins, then the
  old scale is kept) or the newest's ("most_recent"); then current_scale_bits(amax_ref,
  fmt_max_bits, margin, scale_bits). The new scale has scale_bits' shape."""
  if algo not in AMAX_ALGOS:
    raise ValueError(f"algo must be one of {AMAX_ALGOS}, got {algo!r}")
  shifted = jnp.asarray(shifted_bits, jnp.uint32)
  (size,) = shifted.shape
  if size & (size - 1):
    raise ValueError(f"the history needs a power-of-two length, got {size}")
  n = size if length is None else int(length)
  if not 1 <= n <= size:
    raise ValueError(f"length must be in [1, {size}], got {length!r}")
  amax = jnp.asarray(amax_bits, jnp.uint32).reshape(())
  idx = lax.iota(jnp.int32, size)
  kept = (idx >= 1) & (idx < n)                         # the old entries 0 .. n-2
  new_history = jnp.where(idx == 0, amax, jnp.where(kept, shifted, _U(0)))
  if algo == "max":
    # Non-negative float bits order like the values, NaN above Inf: an integer max.
    ref = jnp.maximum(jnp.max(jnp.where(kept, shifted & MAG_BITS, _U(0))), amax & MAG_BITS)
  else:
    ref = amax & MAG_BITS
  scale_bits = jnp.asarray(scale_bits, jnp.uint32)
  new_scale = current_scale_bits(jnp.broadcast_to(ref, scale_bits.shape), fmt_max_bits,
                                 margin, scale_bits)
  return new_history, new_scale


def nvfp4_tensor_scales_bits(amax_bits) -> tuple[jax.Array, jax.Array]:
  """NVFP4 steps 2-3 (section 5) from the tensor amax's bits: (S_enc, S_dec) bits with
  S_enc = min(fl(2688 / amax), FLT_MAX), 1.0 if amax == 0 or the quotient is 0 (as unsigned
  bits, so a NaN quotient clamps to FLT_MAX, as in the golden model); S_dec = fl(1 / S_enc)."""
  amax = jnp.asarray(amax_bits, jnp.uint32)
  s_enc = div_bits(jnp.full_like(amax, NVFP4_ENC_NUMERATOR_BITS), amax)
  s_enc = jnp.minimum(s_enc, FLT_MAX_BITS)
  s_enc = jnp.where((amax == _U(0)) | (s_enc == _U(0)), ONE_BITS, s_enc)
  return s_enc, div_bits(jnp.full_like(s_enc, ONE_BITS), s_enc)


def e4m3_code_bits(codes) -> jax.Array:
  """float32 bits of E4M3 codes (the low 8 bits of uint8 / uint32 codes), integer ops only:
  normals re-biased (7 -> 127), subnormals m * 2^-9 normalized, +-0 kept, the NaN codes
  0x7F / 0xFF as 0x7FC00000 with the code's sign."""
  c = jnp.asarray(codes).astype(jnp.uint32) & _U(0xFF)
  sign = (c & _U(0x80)) << _U(24)
  e = (c >> _U(3)) & _U(0xF)
  m = c & _U(7)
  normal = ((e + _U(127 - 7)) << _U(23)) | (m << _U(20))
  # Subnormal m * 2^-9, m in 1..7: the leading one at bit p = 31 - clz(m) becomes the hidden
  # bit; exponent -9 + p.
  p = 31 - clz(m | _U(1))
  sub = (((p + (127 - 9)).astype(jnp.uint32)) << _U(23)) | \
      ((m << (23 - p).astype(jnp.uint32)) & _U(0x7FFFFF))
  mag = jnp.where(e == _U(0), jnp.where(m == _U(0), _U(0), sub), normal)
  mag = jnp.where((c & _U(0x7F)) == _U(0x7F), QNAN_BITS, mag)
  return sign | mag


def nvfp4_block_decode_factor_bits(scale_codes, s_dec_bits) -> jax.Array:
  """fl(float(s_e4m3) * S_dec) bits (step 7's factor); a NaN scale code gives 0x7FC00000."""
  return mul_bits(e4m3_code_bits(scale_codes), s_dec_bits)


def nvfp4_block_encode_factor_bits(scale_codes, s_dec_bits) -> jax.Array:
  """NVFP4 step 5: enc_b = min(fl(1 / fl(float(s_e4m3) * S_dec)), FLT_MAX) bits, the min on
  unsigned bits (as the golden model): a zero scale or a product that underflows to zero
  gives FLT_MAX, and so does a NaN scale code (its NaN quotient clamps)."""
  dec = nvfp4_block_decode_factor_bits(scale_codes, s_dec_bits)
  return jnp.minimum(div_bits(jnp.full_like(dec, ONE_BITS), dec), FLT_MAX_BITS)
