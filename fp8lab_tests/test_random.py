"""The counter-based random bits against JAX's own threefry2x32 primitive and the Random123
known-answer vectors."""

import jax
from jax.extend.random import threefry2x32_p
import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from fp8lab.numerics import random as fp8_random


def reference_bits(key_data, n: int, offset: int = 0) -> np.ndarray:
  """First output word of jax's threefry2x32 primitive (a separate implementation: a C++
  custom call on CPU) on (k0, k1; i mod 2^32, i >> 32) with the 64-bit counter
  i = offset + index, split with numpy's uint64 arithmetic."""
  i = np.arange(n, dtype=np.uint64) + np.uint64(offset)
  x0 = jnp.asarray((i & np.uint64(0xFFFFFFFF)).astype(np.uint32))
  x1 = jnp.asarray((i >> np.uint64(32)).astype(np.uint32))
  k0 = jnp.full_like(x0, key_data[0])
  k1 = jnp.full_like(x0, key_data[1])
  return np.asarray(threefry2x32_p.bind(k0, k1, x0, x1)[0])


# Threefry-2x32, 20 rounds: known-answer tests of Random123 (Salmon et al.), also in JAX's
# random tests: (key, counter) -> output.
KAT = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key,count,want", KAT)
def test_threefry_known_answers(key, count, want):
  u = lambda v: jnp.asarray([v], jnp.uint32)
  got = fp8_random.threefry2x32(u(key[0]), u(key[1]), u(count[0]), u(count[1]))
  assert (int(got[0][0]), int(got[1][0])) == want
  ref = threefry2x32_p.bind(u(key[0]), u(key[1]), u(count[0]), u(count[1]))
  assert (int(ref[0][0]), int(ref[1][0])) == want


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("shape,offset", [((1000,), 0), ((7, 13, 5), 0), ((64, 33), 12345),
                                          ((5,), 2**32 - 2), ((4, 2), 2**40 + 3),
                                          ((2,), 2**64 - 2), ((0,), 0), ((), 0)])
@pytest.mark.parametrize("seed", [0, 42, 2**31 + 5])
def test_random_bits_equal_threefry_primitive(seed, shape, offset, jit):
  key = jax.random.key(seed)
  fn = jax.jit(fp8lab.random_bits, static_argnums=(1, 2)) if jit else fp8lab.random_bits
  got = np.asarray(fn(key, shape, offset))
  size = int(np.prod(shape))
  assert got.dtype == np.uint32 and got.shape == shape
  # The counter is 64 bits wide: (5,) at 2^32 - 2 carries into the second counter word.
  want = reference_bits(jax.random.key_data(key), size, offset).reshape(shape)
  np.testing.assert_array_equal(got, want)


def test_legacy_and_typed_keys_draw_the_same_bits():
  typed = np.asarray(fp8lab.random_bits(jax.random.key(7), (100,)))
  legacy = np.asarray(fp8lab.random_bits(jax.random.PRNGKey(7), (100,)))
  np.testing.assert_array_equal(typed, legacy)
  other = np.asarray(fp8lab.random_bits(jax.random.key(8), (100,)))
  assert np.count_nonzero(typed != other) > 90


def test_bits_look_uniform():
  # A coarse sanity check of the generator's use (not of threefry): each of the top 8 bits
  # is set in about half of 2^16 words (6 sigma of a binomial: 6 * sqrt(N / 4) = 768).
  bits = np.asarray(fp8lab.random_bits(jax.random.key(3), (1 << 16,)))
  for b in range(24, 32):
    ones = np.count_nonzero((bits >> np.uint32(b)) & np.uint32(1))
    assert abs(ones - (1 << 15)) < 768, (b, ones)


@pytest.mark.parametrize("key", [None, jnp.zeros(3, jnp.uint32), jnp.zeros(2, jnp.int32),
                                 jnp.zeros((2, 2), jnp.uint32)],
                         ids=["none", "three-words", "int32", "two-keys"])
def test_bad_keys(key):
  with pytest.raises(ValueError, match="key"):
    fp8lab.random_bits(key, (4,))


def test_non_threefry_key_is_rejected():
  with pytest.raises(ValueError, match="threefry"):
    fp8lab.random_bits(jax.random.key(0, impl="rbg"), (4,))


def test_traced_offset():
  key = jax.random.key(11)
  fn = jax.jit(lambda off: fp8lab.random_bits(key, (6,), off))
  for offset in (0, 1000, 2**32 - 3):
    got = np.asarray(fn(jnp.uint32(offset)))
    np.testing.assert_array_equal(got, reference_bits(jax.random.key_data(key), 6, offset))


@pytest.mark.parametrize("offset", [-1, 2**64])
def test_offset_out_of_range(offset):
  with pytest.raises(ValueError, match="offset"):
    fp8lab.random_bits(jax.random.key(0), (4,), offset)
