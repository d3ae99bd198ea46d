"""Blockwise Hadamard rotation in the golden model (docs/numerics.md section 7).

For consecutive blocks of n values (n in 16, 32, 64, 128) along an axis:

    y = H_n diag(s) x / sqrt(n)          (H_n the Sylvester Hadamard matrix, H_2n = [[H, H], [H, -H]])

computed in float32 in this order, which a kernel must follow to agree bit for bit:
  1. signs: x_i -> s_i * x_i (a sign-bit flip, exact);
  2. butterflies, stage h = 1, 2, 4, ..., n/2: for every j with (j & h) == 0,
     (x_j, x_{j+h}) -> (fl(x_j + x_{j+h}), fl(x_j - x_{j+h}))   [IEEE float32, nearest-even];
  3. every value times fl(1/sqrt(n)) (one float32 rounding; for n = 16 and 64 the factor is an
     exact power of two). fl(1/sqrt(n)) = 2^-(k//2) * fl(sqrt(2))^(k odd), n = 2^k.
The inverse (inverse=True) runs the same butterflies and scaling on y, then applies the signs:
x = diag(s) H_n y / sqrt(n) (H_n is symmetric and H_n H_n = n I).

The float32 operations are exact IEEE ones computed on bit patterns (numerics/scales.py), so
subnormals are kept on every backend (XLA:CPU's own float adds flush them). NaN and Inf
spread through their block as IEEE arithmetic says (Inf - Inf = NaN).

Signs: None / "none" (FP-Quant: no signs); "fixed": Transformer Engine's 16-entry vector,
s_i = +1 iff bit i of 0x2817 is set (TE stores the complement 0xD7E8, whose set bits mark the
-1 entries); for n = 32 that vector on each half followed by the final 32-point add/subtract
stage, which is exactly stage h = 16 above with the 16 signs repeated; for 64 and 128 the
16 signs repeat likewise. A key (jax.random.key or uint32[2]): s_i = -1 iff the top bit of
random_bits(key, (n,))[i] is set, the same n signs for every block.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.numerics import random as fp8_random
from fp8lab.numerics.codec import as_float_input
from fp8lab.numerics.scales import bits_of, f32_add, f32_mul, float_of

__all__ = ["hadamard", "HadamardSpec", "hadamard_signs", "inverse_sqrt_bits",
           "HADAMARD_BLOCKS", "FIXED_SIGN_MASK", "TE_SIGN_MASK"]

HADAMARD_BLOCKS = (16, 32, 64, 128)
FIXED_SIGN_MASK = 0x2817      # bit i set: s_i = +1
TE_SIGN_MASK = 0xD7E8         # Transformer Engine's stored form: bit i set: s_i = -1
_SIGN_KINDS = ("none", "fixed", "random")


@dataclasses.dataclass(frozen=True)
class HadamardSpec:
  """A Hadamard rotation as static, hashable metadata.

  Attributes:
    block: 16, 32, 64 or 128.
    signs: "none", "fixed" or "random".
    seed: for "random", the two uint32 key words (jax.random.key_data of a threefry key) as
      Python ints; None otherwise.
  """
  block: int
  signs: str = "none"
  seed: tuple[int, int] | None = None

  def __post_init__(self):
    if self.block not in HADAMARD_BLOCKS:
      raise ValueError(f"Hadamard block must be one of {HADAMARD_BLOCKS}, got {self.block!r}")
    if self.signs not in _SIGN_KINDS:
      raise ValueError(f"Hadamard signs must be one of {_SIGN_KINDS}, got {self.signs!r}")
    if (self.signs == "random") != (self.seed is not None):
      raise ValueError("HadamardSpec: seed is given exactly when signs == 'random'")
    if self.seed is not None:
      if len(self.seed) != 2 or not all(isinstance(w, int) and 0 <= w < 2**32
                                        for w in self.seed):
        raise ValueError(f"HadamardSpec seed must be two uint32 ints, got {self.seed!r}")

  @classmethod
  def from_signs(cls, block: int, signs: Any = None) -> "HadamardSpec":
    """Spec from hadamard()'s `signs` argument; a key must be concrete (not traced)."""
    if signs is None or (isinstance(signs, str) and signs == "none"):
      return cls(block)
    if isinstance(signs, str):
      if signs == "fixed":
        return cls(block, "fixed")
      raise ValueError(f"signs must be None, 'none', 'fixed' or a key, got {signs!r}")
    k0, k1 = fp8_random.key_words(signs)
    try:
      seed = (int(k0), int(k1))
    except jax.errors.ConcretizationTypeError:
      raise ValueError("a Hadamard spec stores its key as static metadata: pass a concrete "
                       "key, not one traced inside jit") from None
    return cls(block, "random", seed)

  def sign_arg(self):
    """The `signs` argument of hadamard() this spec stands for."""
    if self.signs == "random":
      return jnp.asarray(np.array(self.seed, np.uint32))
    return None if self.signs == "none" else "fixed"


def hadamard_signs(block: int, signs: Any = None) -> jax.Array:
  """The n sign flags of a rotation as uint32 sign-bit masks (0 for +1, 0x80000000 for -1)."""
  if block not in HADAMARD_BLOCKS:
    raise ValueError(f"Hadamard block must be one of {HADAMARD_BLOCKS}, got {block!r}")
  if signs is None or (isinstance(signs, str) and signs == "none"):
    return jnp.zeros((block,), jnp.uint32)
  if isinstance(signs, str):
    if signs != "fixed":
      raise ValueError(f"signs must be None, 'none', 'fixed' or a key, got {signs!r}")
    minus = [(FIXED_SIGN_MASK >> (i % 16)) & 1 == 0 for i in range(block)]
    return jnp.asarray(np.where(minus, np.uint32(0x80000000), np.uint32(0)))
  if isinstance(signs, HadamardSpec):
    return hadamard_signs(block, signs.sign_arg())
  bits = fp8_random.random_bits(signs, (block,))
  return bits & jnp.uint32(0x80000000)


def inverse_sqrt_bits(block: int) -> np.uint32:
  """Bits of fl(1/sqrt(block)) (see the module docstring)."""
  k = int(block).bit_length() - 1
  value = np.float32(2.0 ** -(k // 2))
  if k % 2:
    value = value * np.sqrt(np.float32(2.0)) / np.float32(2.0)   # IEEE sqrt; the rest exact
  return np.float32(value).view(np.uint32)


def _butterflies(bits, n: int):
  """Stages h = 1 .. n/2 on the last axis (length n) of uint32 float32 patterns."""
  j = jnp.arange(n, dtype=jnp.int32)

  def stage(i, bits):
    # Position j pairs with j ^ h: the lower one (bit h clear) gets x_j + x_{j+h}, the upper
    # one x_{j-h} - x_j, the same pairs and operand order as the docstring's butterfly.
    h = jnp.left_shift(1, i)
    low = (j & h) == 0
    partner = jnp.take(bits, j ^ h, axis=-1)
    return f32_add(jnp.where(low, bits, partner),
                   jnp.where(low, partner, bits ^ jnp.uint32(0x80000000)))

  # A loop over the stages: unrolled, XLA:CPU needs seconds to compile the add chains.
  return lax.fori_loop(0, n.bit_length() - 1, stage, bits)


def hadamard(x, block: int, *, signs: Any = None, axis: int = -1,
             inverse: bool = False) -> jax.Array:
  """Orthonormal blockwise Hadamard rotation y = H diag(s) x / sqrt(block) (or its inverse).

  Args:
    x: float32, bfloat16 or float16 array; the length along `axis` must be a multiple of
      `block` (a rotation mixes a whole block, so padding could not be undone). 16-bit
      inputs are widened on their bit patterns (numerics/bits.py): the same bits on every
      backend.
    block: 16, 32, 64 or 128.
    signs: None (no signs), "fixed", a threefry key (random signs) or a HadamardSpec's
      sign_arg(). See the module docstring.
    axis: the axis whose consecutive blocks are rotated.
    inverse: undo the rotation: x = diag(s) H y / sqrt(block).

  Returns:
    float32 array of x's shape, computed in the documented order with IEEE float32
    operations (subnormals kept on every backend).
  """
  x = as_float_input(x, "hadamard")
  sign_bits = hadamard_signs(block, signs)
  if x.ndim == 0:
    raise ValueError("hadamard needs an array with at least one axis")
  if not -x.ndim <= axis < x.ndim:
    raise ValueError(f"axis {axis} is out of range for an array with {x.ndim} dimensions")
  axis %= x.ndim
  length = x.shape[axis]
  if length % block:
    raise ValueError(f"the length {length} of axis {axis} is not a multiple of the Hadamard "
                     f"block {block}")
  return _rotate(x, sign_bits, block=block, axis=axis, inverse=bool(inverse))


@functools.partial(jax.jit, static_argnames=("block", "axis", "inverse"))
def _rotate(x, sign_bits, *, block: int, axis: int, inverse: bool):
  bits = jnp.moveaxis(bits_of(x), axis, -1)
  lead = bits.shape[:-1]
  length = bits.shape[-1]
  bits = bits.reshape(lead + (length // block, block))
  scale = inverse_sqrt_bits(block)
  if not inverse:
    bits = bits ^ sign_bits
  bits = f32_mul(_butterflies(bits, block), scale)
  if inverse:
    bits = bits ^ sign_bits
  return jnp.moveaxis(float_of(bits.reshape(lead + (length,))), -1, axis)
