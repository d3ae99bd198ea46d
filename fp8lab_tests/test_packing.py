"""pack / unpack: round trips and the exact word layout of docs/numerics.md section 3."""

from hypothesis import given
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fp8lab
from fp8lab import formats
from fp8lab import testing as fpt

ALL = [formats.E4M3, formats.E5M2, formats.E8M0, formats.E2M1, formats.F16, formats.BF16]
_name = lambda f: f.name

_pack_jit = jax.jit(fp8lab.pack, static_argnames=("fmt", "axis"))
_unpack_jit = jax.jit(fp8lab.unpack, static_argnames=("fmt", "length", "axis"))


def code_dtype(f):
  return np.uint16 if f.bits == 16 else np.uint8


def random_codes(f, shape, seed=0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  return rng.integers(0, 1 << f.bits, size=shape, dtype=np.uint32).astype(code_dtype(f))


def words_by_hand(codes_1d, bits: int) -> list[int]:
  """docs/numerics.md section 3 with Python ints: element k sits at bits (k % per) * bits of
  word k // per; missing elements of the last word are zero."""
  per = 32 // bits
  n_words = -(-len(codes_1d) // per)
  words = [0] * n_words
  for k, c in enumerate(codes_1d):
    words[k // per] |= (int(c) & ((1 << bits) - 1)) << ((k % per) * bits)
  return words


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("f", ALL, ids=_name)
def test_word_layout_by_hand(f, jit):
  pack = _pack_jit if jit else fp8lab.pack
  for length in range(0, 3 * f.per_word + 2):
    codes = random_codes(f, (length,), seed=length)
    got = np.asarray(pack(codes, f.name))
    assert got.dtype == np.uint32 and got.shape == (fp8lab.packed_length(length, f.name),)
    assert [int(w) for w in got] == words_by_hand(codes, f.bits), length


def test_word_layout_literals():
  # Byte i of word j is element 4j+i; nibble i is element 8j+i; half i is element 2j+i.
  e4 = np.array([0x01, 0x23, 0x45, 0x67, 0x89], np.uint8)
  assert [int(w) for w in fp8lab.pack(e4, "e4m3")] == [0x67452301, 0x00000089]
  e2 = np.array([0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0xF], np.uint8)
  assert [int(w) for w in fp8lab.pack(e2, "e2m1")] == [0x87654321, 0x0000000F]
  h = np.array([0x3C00, 0xBC00, 0x7E00], np.uint16)
  assert [int(w) for w in fp8lab.pack(h, "f16")] == [0xBC003C00, 0x00007E00]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("f", ALL, ids=_name)
def test_round_trip_every_axis(f, jit):
  pack = _pack_jit if jit else fp8lab.pack
  unpack = _unpack_jit if jit else fp8lab.unpack
  shape = (3, 2 * f.per_word + 1, 5, f.per_word)
  codes = random_codes(f, shape, seed=f.bits)
  for axis in range(-4, 4):
    words = np.asarray(pack(codes, f.name, axis=axis))
    expected_shape = list(shape)
    expected_shape[axis] = fp8lab.packed_length(shape[axis], f.name)
    assert words.shape == tuple(expected_shape)
    back = np.asarray(unpack(words, f.name, shape[axis], axis=axis))
    assert back.dtype == code_dtype(f)
    np.testing.assert_array_equal(back, codes)
    # Along any axis the layout is the 1-D layout of each lane.
    lanes = np.moveaxis(codes, axis, -1).reshape(-1, shape[axis])
    by_hand = np.array([words_by_hand(lane, f.bits) for lane in lanes], np.uint32)
    np.testing.assert_array_equal(np.moveaxis(words, axis, -1).reshape(by_hand.shape), by_hand)


@pytest.mark.parametrize("f", ALL, ids=_name)
def test_padding_is_zero(f):
  length = 2 * f.per_word + 1
  codes = random_codes(f, (4, length), seed=3) | code_dtype(f)(1)   # no zero codes
  words = np.asarray(fp8lab.pack(codes, f.name))
  last = words[:, -1]
  # Only the first field of the last word is used; every other field is zero.
  np.testing.assert_array_equal(last >> np.uint32(f.bits), 0)
  padded = np.concatenate([codes, np.zeros((4, f.per_word - 1), code_dtype(f))], axis=1)
  np.testing.assert_array_equal(np.asarray(fp8lab.pack(padded, f.name)), words)


def test_e2m1_packs_only_the_low_nibble():
  codes = random_codes(formats.E2M1, (37,), seed=5)
  noisy = codes | np.uint8(0xA0)
  np.testing.assert_array_equal(np.asarray(fp8lab.pack(noisy, "e2m1")),
                                np.asarray(fp8lab.pack(codes, "e2m1")))
  back = np.asarray(fp8lab.unpack(fp8lab.pack(noisy, "e2m1"), "e2m1", 37))
  np.testing.assert_array_equal(back, codes)


@pytest.mark.parametrize("fmt,dtype", [("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
def test_16bit_values_pack_as_their_bit_patterns(fmt, dtype):
  bits = random_codes(formats.get_format(fmt), (3, 11), seed=9)
  np.testing.assert_array_equal(np.asarray(fp8lab.pack(bits.view(dtype), fmt)),
                                np.asarray(fp8lab.pack(bits, fmt)))
  np.testing.assert_array_equal(np.asarray(fp8lab.pack(jnp.asarray(bits.view(dtype)), fmt)),
                                np.asarray(fp8lab.pack(bits, fmt)))


def test_packed_length():
  assert [fp8lab.packed_length(n, "e4m3") for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
  assert [fp8lab.packed_length(n, "e2m1") for n in (0, 1, 8, 9, 16)] == [0, 1, 1, 2, 2]
  assert [fp8lab.packed_length(n, "bf16") for n in (0, 1, 2, 3)] == [0, 1, 1, 2]


def test_empty_axis():
  words = np.asarray(fp8lab.pack(np.zeros((3, 0), np.uint8), "e4m3"))
  assert words.shape == (3, 0) and words.dtype == np.uint32
  assert np.asarray(fp8lab.unpack(words, "e4m3", 0)).shape == (3, 0)


# A few fixed shapes (each new shape recompiles every eager op); contents and axis vary.
_SHAPES = st.sampled_from([(1,), (9,), (17,), (3, 7), (8, 5), (2, 3, 11)])


@given(st.sampled_from([f.name for f in ALL]).flatmap(
    lambda name: st.tuples(st.just(name), fpt.code_arrays(name, _SHAPES))),
       st.integers(-3, 2))
def test_round_trip_hypothesis(name_codes, axis):
  name, codes = name_codes
  axis = axis % codes.ndim
  words = fp8lab.pack(codes, name, axis=axis)
  back = np.asarray(fp8lab.unpack(words, name, codes.shape[axis], axis=axis))
  np.testing.assert_array_equal(back, codes)


# --- Errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt,codes", [
    ("e4m3", np.zeros(4, np.uint16)), ("e4m3", np.zeros(4, np.int8)),
    ("e4m3", np.zeros(4, np.float32)), ("e4m3", np.zeros(4, ml_dtypes.float8_e4m3fn)),
    ("e2m1", np.zeros(4, np.uint32)), ("f16", np.zeros(4, np.uint8)),
    ("f16", np.zeros(4, ml_dtypes.bfloat16)), ("bf16", np.zeros(4, np.float32)),
])
def test_pack_rejects_wrong_dtype(fmt, codes):
  with pytest.raises(TypeError):
    fp8lab.pack(codes, fmt)


@pytest.mark.parametrize("words", [np.zeros(4, np.int32), np.zeros(4, np.uint8),
                                   np.zeros(4, np.float32)])
def test_unpack_rejects_wrong_dtype(words):
  with pytest.raises(TypeError, match="uint32"):
    fp8lab.unpack(words, "e4m3", 4)


@pytest.mark.parametrize("length", [-1, 0, 8, 12, 17, 16.0, None])
def test_unpack_rejects_lengths_that_do_not_fit(length):
  # 4 words of e4m3 hold 13..16 codes.
  with pytest.raises(ValueError, match="length"):
    fp8lab.unpack(np.zeros(4, np.uint32), "e4m3", length)


@pytest.mark.parametrize("axis", [2, -3, 5])
def test_bad_axis(axis):
  with pytest.raises(ValueError, match="axis"):
    fp8lab.pack(np.zeros((2, 4), np.uint8), "e4m3", axis=axis)
  with pytest.raises(ValueError, match="axis"):
    fp8lab.unpack(np.zeros((2, 4), np.uint32), "e4m3", 4, axis=axis)


def test_scalars_and_unknown_formats():
  with pytest.raises(ValueError):
    fp8lab.pack(np.uint8(3), "e4m3")
  with pytest.raises(ValueError):
    fp8lab.unpack(np.uint32(3), "e4m3", 1)
  with pytest.raises(ValueError, match="e4m3"):
    fp8lab.pack(np.zeros(4, np.uint8), "e4m4")
  with pytest.raises(ValueError, match="e4m3"):
    fp8lab.unpack(np.zeros(4, np.uint32), "fp8", 4)
