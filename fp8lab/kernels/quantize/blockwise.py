"""Blockwise FP8 ("e4m3_block" / "e5m2_block", docs/numerics.md section 8b) in the quantize
kernel: which blocks it serves, and the per-block scale rule on float32 bit patterns.

The kernel (kernel.py, _encode_tile) reduces each block's largest FINITE magnitude with
encode.py's block_max / tile_max, derives (scale, 1 / scale) here once per block (the only
divisions), and encodes fl(x * scale) with the per-tensor formats' saturating encoder.
Integer ops only (f32.div_bits), so the bits match on the GPU and in interpret mode; this is
not the golden model (fp8lab/numerics/scales.py block_scales), which the tests compare it to.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fp8lab.formats import ElementFormat
from fp8lab.kernels.quantize import f32

__all__ = ["TILE", "BLOCK_LENGTHS", "TRANSPOSE_MAX_BLOCK", "unserved_block",
           "finite_magnitudes", "block_scale_bits"]

_U = np.uint32
# The 2D tile the kernel serves (DeepSeek-V3's / Float8BlockScaling's weight tiles).
TILE = (128, 128)
# 1D block lengths: a program's tile holds whole blocks and tiles are powers of two; with
# transpose a block spans the tile's rows, so longer ones would make very tall tiles.
BLOCK_LENGTHS = (16, 32, 64, 128, 256)
# "pow2": the scale's mantissa bits cleared (FLT_MAX -> 2^127), the golden model's mask.
_POW2_MASK = _U(0xFF800000)


# With transpose a 1D block spans the tile's rows and its columns: a 256-long block needs a
# 256 x 256 tile, for which Triton asks 256 KiB of shared memory (the H200 gives a program
# 227 KiB: RESOURCE_EXHAUSTED, 2026-12-02).
TRANSPOSE_MAX_BLOCK = 128


def unserved_block(fmt: str, block_shape: tuple[int, ...],
                   transpose: bool = False) -> str | None:
  """Why the kernel cannot serve blockwise format `fmt` with `block_shape` (a sentence), or
  None."""
  block_shape = tuple(block_shape)
  if (transpose and len(block_shape) == 1 and block_shape[0] in BLOCK_LENGTHS
      and block_shape[0] > TRANSPOSE_MAX_BLOCK):
    return (f"the kernel serves {fmt!r} with transpose=True for 1D blocks up to "
            f"{TRANSPOSE_MAX_BLOCK}, not {block_shape[0]}: the tile would need more shared "
            "memory than a GPU program has")
  if block_shape == TILE or (len(block_shape) == 1 and block_shape[0] in BLOCK_LENGTHS):
    return None
  lengths = ", ".join(map(str, BLOCK_LENGTHS))
  return (f"the kernel does not serve {fmt!r} with block_shape {block_shape}: it takes 1D "
          f"blocks of {lengths} or {TILE} tiles")


def finite_magnitudes(mag) -> jax.Array:
  """Magnitude bits with NaN and +-Inf as 0: a block's amax leaves them out (the encode
  handles them: NaN -> the positive NaN code, +-Inf saturates)."""
  return jnp.where(mag < f32.INF_BITS, mag, _U(0))


def block_scale_bits(amax, elem: ElementFormat, mode: str) -> tuple[jax.Array, jax.Array]:
  """(scale, fl(1 / scale)) float32 bits per block from its finite amax bits (uint32, any
  shape): scale = fl(fp8_max / amax), FLT_MAX where that overflows (Inf), 1.0 for amax 0;
  mode "pow2" clears scale's mantissa bits. The quotient is never subnormal (fp8_max /
  FLT_MAX > 2^-119) and never NaN (amax is finite), so the mask cannot make it 0."""
  if mode not in ("exact", "pow2"):
    raise ValueError(f"blockwise scale_mode must be 'exact' or 'pow2', got {mode!r}")
  fmt_max = np.float32(elem.max_finite).view(np.uint32)
  scale = f32.div_bits(jnp.full(amax.shape, fmt_max, jnp.uint32), amax)
  scale = jnp.where(scale == f32.INF_BITS, f32.FLT_MAX_BITS, scale)
  scale = jnp.where(amax == _U(0), f32.ONE_BITS, scale)
  if mode == "pow2":
    scale = scale & _POW2_MASK
  return scale, f32.reciprocal_bits(scale)
