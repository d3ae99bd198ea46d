"""The counter-based random bits behind stochastic rounding.

Element i (flat, row-major index into the array being rounded) draws the 32-bit word

    bits[i] = threefry2x32(k0, k1; x0 = i mod 2^32, x1 = i >> 32)[0]

where (k0, k1) = jax.random.key_data(key) for a threefry key (the default JAX PRNG) and
threefry2x32 is the 20-round Threefry-2x32 hash of Salmon et al. (SC'11) exactly as JAX
implements it (rotations 13,15,26,6 / 17,29,16,24, key-schedule constant 0x1BD11BDA).
Only the first output word is used. Stochastic rounding takes the top `sr_bits` bits of the
word. Everything here is plain uint32 add/xor/shift, so a Pallas kernel can draw the very
same bits from the element index; `threefry2x32` below is written to run inside one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["threefry2x32", "key_words", "random_bits"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotl(v, r: int):
  return (v << np.uint32(r)) | (v >> np.uint32(32 - r))


def threefry2x32(k0, k1, x0, x1):
  """20-round Threefry-2x32 on uint32 arrays; returns both output words."""
  ks = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
  x0 = x0 + ks[0]
  x1 = x1 + ks[1]
  for block in range(5):
    for r in _ROTATIONS[block % 2]:
      x0 = x0 + x1
      x1 = _rotl(x1, r) ^ x0
    x0 = x0 + ks[(block + 1) % 3]
    x1 = x1 + ks[(block + 2) % 3] + np.uint32(block + 1)
  return x0, x1


def key_words(key) -> tuple[jax.Array, jax.Array]:
  """The two uint32 key words of a threefry key (typed `jax.random.key` or legacy uint32[2])."""
  if key is None:
    raise ValueError("rounding='stochastic' needs a key: pass key=jax.random.key(seed)")
  data = jax.random.key_data(key) if _is_typed_key(key) else jnp.asarray(key)
  if data.dtype != jnp.uint32 or data.shape != (2,):
    raise ValueError(
        f"stochastic rounding needs a single threefry key (key data uint32[2]); got key data "
        f"{data.dtype}{list(data.shape)}")
  return data[0], data[1]


def _is_typed_key(key) -> bool:
  return hasattr(key, "dtype") and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)


def random_bits(key, shape, offset=0) -> jax.Array:
  """uint32 random words for every element of an array of `shape` (see module docstring).

  `offset` is added to the flat index, so a slice of a larger array can draw its own part:
  a Python int in [0, 2^64) (the counter i = offset + index is 64 bits wide, x1 = i >> 32),
  or a traced uint32 scalar (then i < 2^33 and the carry still reaches x1).
  """
  k0, k1 = key_words(key)
  size = int(np.prod(shape, dtype=np.int64))
  if size > 1 << 32:
    raise ValueError(f"random_bits draws at most 2^32 words per call, got shape {shape}")
  if isinstance(offset, (int, np.integer)):
    if not 0 <= offset < 1 << 64:
      raise ValueError(f"offset must be in [0, 2^64), got {offset}")
    offset_lo, offset_hi = jnp.uint32(int(offset) & 0xFFFFFFFF), jnp.uint32(int(offset) >> 32)
  else:
    offset_lo, offset_hi = jnp.asarray(offset, jnp.uint32), jnp.uint32(0)
  x0 = jnp.arange(size, dtype=jnp.uint32) + offset_lo          # wraps modulo 2^32
  x1 = offset_hi + (x0 < offset_lo).astype(jnp.uint32)         # ... and carries into x1
  bits, _ = threefry2x32(k0, k1, x0, jnp.broadcast_to(x1, x0.shape))
  return bits.reshape(shape)
