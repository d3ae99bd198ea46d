"""In-kernel blockwise Hadamard rotation of a tile along its last axis (docs/numerics.md
section 7), bit for bit the golden model's fp8lab.numerics.hadamard.hadamard.

The golden order of IEEE float32 operations, which this reproduces: signs as a sign-bit XOR;
butterfly stages h = 1, 2, 4, ..., n/2, each pairing x_j and x_{j+h} ((j & h) == 0) into
(fl(x_j + x_{j+h}), fl(x_j - x_{j+h})); then every value times fl(1/sqrt(n)). (The inverse:
the same butterflies and factor, then the signs.)

Layout trick: a stage is written self-sorting (Stockham), with the tile reshaped
(..., cols/n, n/2, 2): lax.unstack of the last axis gives the pairs (x_2i, x_2i+1), whose
index differs in bit 0; their sum and difference are written to slots i and i + n/2
(lax.stack on a new last axis, a transpose of the last two axes, a reshape back). That moves
index bit 0 to the top and the other bits down by one, so the next stage again pairs on bit 0,
which is now the original bit 1: the stages meet the original bits in the golden order
(h = 1, 2, 4, ...), each pair with the same operands in the same order, and after log2(n)
stages the bits are back in place. Ops used in a stage: reshape, lax.unstack / lax.stack on
the last axis (Triton split / join), transpose of the last two axes; no gather, no
concatenate, no dot (a matmul would not round like the butterflies).

Arithmetic: by default the integer float32 ops of f32.py (exact everywhere, subnormals
included, interpret mode too). `float_ops=True` uses float32 add / sub / mul instead and
maps NaN results to 0x7FC00000: identical IEEE results, much cheaper, but only where the
hardware keeps float32 subnormals (not XLA:CPU, which flushes them: interpret-mode tests
of that path avoid subnormal values), and only while nothing contracts a multiply into a
following add (the rotation itself has none: the factor is applied last).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.kernels.quantize.f32 import (QNAN_BITS, SIGN_BITS, add_bits, ldexp_bits, mul_bits,
                                         sub_bits)

__all__ = ["ROTATE_BLOCKS", "inv_sqrt_bits", "rotate_bits", "rotate", "sign_mask"]

ROTATE_BLOCKS = (16, 32, 64, 128)
_U = np.uint32


def inv_sqrt_bits(block: int) -> np.uint32:
  """Bits of fl(1/sqrt(block)) for block = 2^k: 2^-(k//2), times fl(sqrt(2)) / 2 for odd k
  (numpy's float32 sqrt is IEEE; the power-of-two scalings are exact)."""
  k = int(block).bit_length() - 1
  v = np.float32(2.0 ** -(k // 2))
  if k % 2:
    v = np.float32(v * (np.sqrt(np.float32(2.0)) / np.float32(2.0)))
  return np.float32(v).view(np.uint32)


def sign_mask(signs) -> jax.Array:
  """uint32 sign-bit masks (0 or 0x80000000) from a sign vector: uint32 masks pass through
  (hadamard_signs' form); float +-1 entries give their sign bits."""
  signs = jnp.asarray(signs)
  if signs.dtype == jnp.uint32:
    return signs & SIGN_BITS
  return lax.bitcast_convert_type(signs.astype(jnp.float32), jnp.uint32) & SIGN_BITS


def _apply_signs(bits, signs, block: int):
  """bits ^ the sign mask repeated per block along the last axis. signs: (block,) or
  (cols,) masks; a (block,) vector is tiled with broadcast_to + reshape."""
  cols = bits.shape[-1]
  mask = sign_mask(signs)
  if mask.shape == (block,) and cols != block:
    mask = jnp.broadcast_to(mask[None, :], (cols // block, block)).reshape(cols)
  if mask.shape != (cols,):
    raise ValueError(f"signs must have shape ({block},) or ({cols},), got {mask.shape}")
  return bits ^ mask


def _stage(v, block: int, add, sub):
  """One self-sorting butterfly stage on the last axis (see the module docstring)."""
  lead, cols = v.shape[:-1], v.shape[-1]
  even, odd = lax.unstack(v.reshape(*lead, cols // block, block // 2, 2), axis=-1)
  out = lax.stack([add(even, odd), sub(even, odd)], axis=-1)      # (..., g, n/2, 2)
  nd = out.ndim
  out = jnp.transpose(out, (*range(nd - 2), nd - 1, nd - 2))      # (..., g, 2, n/2)
  return out.reshape(*lead, cols)


def rotate_bits(bits, block: int, *, signs=None, inverse: bool = False,
                float_ops: bool = False) -> jax.Array:
  """Blockwise Hadamard rotation of float32 bit patterns along the last axis.

  Args:
    bits: uint32 array (..., cols), cols a multiple of `block` (a (rows, cols) tile in a
      kernel; Triton wants power-of-two dims).
    block: 16, 32, 64 or 128 (16 and 32 are what the quantize kernel uses).
    signs: None, or a (block,) / (cols,) sign vector (uint32 masks as from
      numerics.hadamard.hadamard_signs, or float +-1): x_i -> s_i x_i before the rotation
      (after it with inverse=True), as a sign-bit flip.
    inverse: x = diag(s) H y / sqrt(block).
    float_ops: float32 arithmetic instead of integer (see the module docstring).

  Returns:
    uint32 bits of the rotated values, bit for bit numerics.hadamard.hadamard (NaN results
    are 0x7FC00000, with the sign flip of inverse=True applied after).
  """
  if block not in ROTATE_BLOCKS:
    raise ValueError(f"block must be one of {ROTATE_BLOCKS}, got {block!r}")
  bits = jnp.asarray(bits, jnp.uint32)
  if bits.ndim == 0 or bits.shape[-1] % block:
    raise ValueError(f"the last axis of {bits.shape} is not a multiple of {block}")
  if signs is not None and not inverse:
    bits = _apply_signs(bits, signs, block)
  k = block.bit_length() - 1
  if float_ops:
    v = lax.bitcast_convert_type(bits, jnp.float32)
    for _ in range(k):
      v = _stage(v, block, lambda a, b: a + b, lambda a, b: a - b)
    # a Python-side constant: the Triton lowering cannot bitcast a literal
    v = v * np.asarray(inv_sqrt_bits(block)).view(np.float32)
    # NaN-ness spreads in float arithmetic as in the integer ops; only the pattern differs.
    out = jnp.where(jnp.isnan(v), QNAN_BITS, lax.bitcast_convert_type(v, jnp.uint32))
  else:
    v = bits
    for _ in range(k):
      v = _stage(v, block, add_bits, sub_bits)
    if k % 2:
      out = mul_bits(v, jnp.full_like(v, inv_sqrt_bits(block)))
    else:
      # 2^-(k/2): ldexp is the same IEEE product (subnormal results rounded alike); NaNs
      # are already 0x7FC00000 after the add stages, which ldexp passes through.
      out = ldexp_bits(v, -(k // 2))
  if signs is not None and inverse:
    out = _apply_signs(out, signs, block)
  return out


def rotate(x, block: int, *, signs=None, inverse: bool = False,
           float_ops: bool = False) -> jax.Array:
  """rotate_bits on float32 values (bitcasts in and out)."""
  bits = lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.uint32)
  return lax.bitcast_convert_type(
      rotate_bits(bits, block, signs=signs, inverse=inverse, float_ops=float_ops),
      jnp.float32)
