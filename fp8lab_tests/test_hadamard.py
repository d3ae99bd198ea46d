"""Blockwise Hadamard rotation (numerics/hadamard.py, docs/numerics.md section 7).

References: scipy.linalg.hadamard (Sylvester order) in float64 with derived tolerances, and
a numpy float32 re-implementation of the documented butterfly order for bit-exact checks
(numpy float32 arithmetic is IEEE with subnormals on the CPU).
"""

import decimal

import jax
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import fp8lab
from fp8lab.numerics import hadamard as had
from fp8lab.testing import float32_bits

BLOCKS = (16, 32, 64, 128)
U = 2.0**-24                    # float32 unit roundoff
# The sign vector as docs/numerics.md section 7 writes it.
TE_SIGNS = np.array([+1, +1, +1, -1, +1, -1, -1, -1, -1, -1, -1, +1, -1, +1, -1, -1])


def inv_sqrt_f32(n: int) -> np.float32:
  """The float32 nearest to 1/sqrt(n), chosen with 40-digit decimal arithmetic."""
  with decimal.localcontext() as ctx:
    ctx.prec = 40
    exact = 1 / decimal.Decimal(n).sqrt()
    guess = np.float32(float(exact))
    candidates = [np.nextafter(guess, np.float32(0)), guess, np.nextafter(guess, np.float32(1))]
    return min(candidates, key=lambda c: abs(decimal.Decimal(float(c)) - exact))


def np_rotate(x, n, signs=None, inverse=False):
  """The documented order in numpy float32: signs, stages h = 1 .. n/2, scale (inverse:
  stages, scale, signs), on the last axis."""
  y = np.array(x, np.float32).reshape(-1, n).copy()
  s = np.ones(n, np.float32) if signs is None else np.asarray(signs, np.float32)
  if not inverse:
    y = y * s
  with np.errstate(over="ignore", invalid="ignore"):
    y = np_butterflies(y, n) * inv_sqrt_f32(n)
  if inverse:
    y = y * s
  return y.reshape(np.shape(x))


def np_butterflies(x, n):
  """Stages h = 1 .. n/2 on the last axis, no scaling."""
  y = np.array(x, np.float32).reshape(-1, n).copy()
  h = 1
  with np.errstate(over="ignore", invalid="ignore"):
    while h < n:
      v = y.reshape(-1, n // (2 * h), 2, h)
      a, b = v[:, :, 0, :].copy(), v[:, :, 1, :].copy()
      v[:, :, 0, :] = a + b
      v[:, :, 1, :] = a - b
      h *= 2
  return y.reshape(np.shape(x))


def assert_same_floats(got, want):
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  ok = ~np.isnan(want)
  np.testing.assert_array_equal(got.view(np.uint32)[ok], want.view(np.uint32)[ok])


def test_inverse_sqrt_constant_is_correctly_rounded():
  for n in BLOCKS:
    assert had.inverse_sqrt_bits(n) == inv_sqrt_f32(n).view(np.uint32), n
  # 16 and 64: exact powers of two, so their scaling is exact.
  assert float(inv_sqrt_f32(16)) == 0.25 and float(inv_sqrt_f32(64)) == 0.125


@pytest.mark.parametrize("n", BLOCKS)
@given(bits=st.data())
def test_butterflies_bit_exact_against_numpy_float32(n, bits):
  x = bits.draw(hnp.arrays(np.uint32, (2, 128), elements=float32_bits())).view(np.float32)
  signs = bits.draw(st.sampled_from([None, "fixed"]))
  sign_vec = None if signs is None else np.where(
      np.asarray(had.hadamard_signs(n, "fixed")) != 0, -1, 1)
  y = fp8lab.hadamard(x, n, signs=signs)
  assert_same_floats(y, np_rotate(x, n, sign_vec))
  back = fp8lab.hadamard(np.asarray(y), n, signs=signs, inverse=True)
  assert_same_floats(back, np_rotate(np.asarray(y), n, sign_vec, inverse=True))


@pytest.mark.parametrize("n", BLOCKS)
@given(data=st.data())
def test_matches_explicit_sylvester_matrix(n, data):
  # Finite inputs small enough that no partial sum overflows (|x| <= FLT_MAX / (2n)).
  lim = float(np.finfo(np.float32).max) / (2 * n)
  x = data.draw(hnp.arrays(np.float32, (3, n * 2), elements=st.floats(
      -lim, lim, width=32, allow_subnormal=True)))
  signs = data.draw(st.sampled_from([None, "fixed", "key"]))
  key = jax.random.key(data.draw(st.integers(0, 2**16)))
  sign_arg = key if signs == "key" else signs
  s = np.where(np.asarray(had.hadamard_signs(n, sign_arg)) != 0, -1.0, 1.0)
  y = np.asarray(fp8lab.hadamard(x, n, signs=sign_arg), np.float64)
  blocks = x.astype(np.float64).reshape(3, 2, n) * s
  H = scipy.linalg.hadamard(n).astype(np.float64)
  exact = (blocks @ H.T / np.sqrt(n)).reshape(3, 2 * n)
  # Each output is a depth-k (k = log2 n) tree of float32 additions of +-x_j, then one
  # multiplication by fl(1/sqrt n) (itself within u of 1/sqrt n): the classic bound is
  # gamma_{k+2} * sum_j |x_j| / sqrt(n), gamma_m = m u / (1 - m u). Results in float32's
  # subnormal range carry an absolute error of up to 2^-150 per operation instead:
  # (k + 2) * 2^-149 covers them.
  k = int(np.log2(n))
  gamma = (k + 2) * U / (1 - (k + 2) * U)
  mass = np.repeat(np.abs(blocks).sum(-1) / np.sqrt(n), n, -1).reshape(3, 2 * n)
  assert np.all(np.abs(y - exact) <= gamma * mass + (k + 2) * 2.0**-149)


@pytest.mark.parametrize("n", BLOCKS)
@pytest.mark.parametrize("signs", [None, "fixed", "key"])
def test_orthonormal(n, signs):
  sign_arg = jax.random.key(5) if signs == "key" else signs
  # Row i is the rotation of the unit vector e_i: s_i H[:, i] / sqrt(n), every entry
  # +-fl(1/sqrt n) exactly (one nonzero input, so no rounding in the butterflies).
  m = np.asarray(fp8lab.hadamard(np.eye(n, dtype=np.float32), n, signs=sign_arg), np.float64)
  c = float(inv_sqrt_f32(n))
  s = np.where(np.asarray(had.hadamard_signs(n, sign_arg)) != 0, -1.0, 1.0)
  np.testing.assert_array_equal(m, (scipy.linalg.hadamard(n) * s).T * c)
  gram = m @ m.T
  # Off the diagonal the +-c^2 cancel exactly; on it, n c^2 = (1 + d)^2 with |d| <= u.
  np.testing.assert_array_equal(gram - np.diag(np.diag(gram)), 0)
  assert np.all(np.abs(np.diag(gram) - 1) <= 2 * U + U * U)


@pytest.mark.parametrize("n", BLOCKS)
@given(data=st.data())
def test_inverse_undoes_the_rotation(n, data):
  lim = float(np.finfo(np.float32).max) / (4 * n)
  x = data.draw(hnp.arrays(np.float32, (2, n), elements=st.floats(-lim, lim, width=32)))
  sign_arg = data.draw(st.sampled_from([None, "fixed", jax.random.key(9)]))
  y = fp8lab.hadamard(x, n, signs=sign_arg)
  back = np.asarray(fp8lab.hadamard(y, n, signs=sign_arg, inverse=True), np.float64)
  # x' - x = Q^T e1 + e2, where e1 is the forward error (|e1_i| <= g sum|x| / sqrt n, so
  # |Q^T e1|_i <= g sum|x|) and e2 the inverse's (|e2_i| <= g sum|y| / sqrt n); g =
  # gamma_{k+2} as in test_matches_explicit_sylvester_matrix, plus subnormal slack.
  k = int(np.log2(n))
  g = (k + 2) * U / (1 - (k + 2) * U)
  ax = np.abs(x.astype(np.float64)).sum(-1, keepdims=True)
  ay = np.abs(np.asarray(y, np.float64)).sum(-1, keepdims=True)
  bound = g * ax * (1 + g) + g * ay / np.sqrt(n) + 4 * (k + 2) * 2.0**-149
  assert np.all(np.abs(back - x) <= bound)


def test_inverse_is_exact_for_small_integers_at_16():
  # Integers below 2^19 add exactly and 1/sqrt(16) = 1/4 scales exactly: both directions
  # are exact, so the inverse gives the input back bit for bit.
  x = np.random.default_rng(0).integers(-1000, 1000, (4, 64)).astype(np.float32)
  y = fp8lab.hadamard(x, 16, signs="fixed")
  np.testing.assert_array_equal(np.asarray(fp8lab.hadamard(y, 16, signs="fixed", inverse=True)),
                                x)


@pytest.mark.parametrize("n", BLOCKS)
@settings(max_examples=40)
@given(data=st.data())
def test_product_of_two_rotated_operands_is_unchanged(n, data):
  elems = st.floats(-1e6, 1e6, width=32)
  a = data.draw(hnp.arrays(np.float32, (3, 2 * n), elements=elems))
  b = data.draw(hnp.arrays(np.float32, (4, 2 * n), elements=elems))
  sign_arg = data.draw(st.sampled_from([None, "fixed", jax.random.key(3)]))
  ra = np.asarray(fp8lab.hadamard(a, n, signs=sign_arg), np.float64)
  rb = np.asarray(fp8lab.hadamard(b, n, signs=sign_arg), np.float64)
  got = ra @ rb.T
  want = a.astype(np.float64) @ b.astype(np.float64).T
  # Q a . Q b = a . b exactly (Q orthogonal, blockwise). With a' = Q a + ea, |ea_i| <=
  # g sum_blk|a| / sqrt n (g = gamma_{k+2}), and likewise for b:
  # |a'.b' - a.b| <= sum |ea||b'| + sum (|a'| + |ea|)|eb|; the float64 dot products add at
  # most 2 * 2n * 2^-53 * sum|a_i b_i| (and as much for the primed ones). Rotated values in
  # float32's subnormal range have an absolute error instead: (k + 2) * 2^-149 each.
  k = int(np.log2(n))
  g = (k + 2) * U / (1 - (k + 2) * U)
  def err(v):
    mass = np.abs(v.astype(np.float64)).reshape(v.shape[0], 2, n).sum(-1) / np.sqrt(n)
    return g * np.repeat(mass, n, -1) + (k + 2) * 2.0**-149
  ea, eb = err(a), err(b)
  bound = ea @ np.abs(rb).T + (np.abs(ra) + ea) @ eb.T
  f64 = 4 * (2 * n) * 2.0**-53 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T
                                  + np.abs(ra) @ np.abs(rb).T)
  assert np.all(np.abs(got - want) <= bound + f64)


def test_fixed_signs_come_from_0x2817_and_te_stores_the_complement():
  plus = [(0x2817 >> i) & 1 == 1 for i in range(16)]
  np.testing.assert_array_equal(np.where(plus, 1, -1), TE_SIGNS)
  assert had.FIXED_SIGN_MASK == 0x2817 and had.TE_SIGN_MASK == 0xD7E8
  assert (~0x2817) & 0xFFFF == 0xD7E8
  minus_te = [(0xD7E8 >> i) & 1 == 1 for i in range(16)]
  np.testing.assert_array_equal(minus_te, TE_SIGNS == -1)
  # The rotation applies them: hadamard(e_i) = s_i H[:, i] / 4.
  m = np.asarray(fp8lab.hadamard(np.eye(16, dtype=np.float32), 16, signs="fixed"))
  np.testing.assert_array_equal(m, (scipy.linalg.hadamard(16) * TE_SIGNS).T / 4)


@given(x=hnp.arrays(np.float32, (2, 32), elements=st.floats(-2.0**100, 2.0**100, width=32)))
def test_fixed_32_variant(x):
  # docs/numerics.md: the 16 signs on each half, a signed 16-point Hadamard of each half, then a
  # final 32-point add/subtract stage. Written here stage by stage and scaled two ways: once
  # at the end by fl(1/sqrt 32), and once per half by 1/4 then by fl(1/sqrt 2) after the
  # last stage; in float32 both are the same numbers wherever scaling by 1/4 is exact (the
  # unnormalized half-sums are zero or at least 2^-124: no subnormal loses bits).
  lo = np_butterflies(x[:, :16] * np.float32(TE_SIGNS), 16)     # unnormalized halves
  hi = np_butterflies(x[:, 16:] * np.float32(TE_SIGNS), 16)
  with np.errstate(over="ignore", invalid="ignore"):
    end_scaled = np.concatenate([lo + hi, lo - hi], -1) * inv_sqrt_f32(32)
    q_lo, q_hi = lo / np.float32(4), hi / np.float32(4)
    step_scaled = np.concatenate([q_lo + q_hi, q_lo - q_hi], -1) * inv_sqrt_f32(2)
  got = fp8lab.hadamard(x, 32, signs="fixed")
  assert_same_floats(got, end_scaled)
  exact_quarter = lambda v: (v == 0) | (np.abs(v) >= 2.0**-124) | ~np.isfinite(v)
  ok = np.tile(exact_quarter(lo) & exact_quarter(hi), 2)
  assert_same_floats(np.asarray(got)[ok], step_scaled[ok])


def test_random_signs_deterministic_per_key():
  x = np.random.default_rng(1).normal(size=(2, 64)).astype(np.float32)
  k = jax.random.key(42)
  a = np.asarray(fp8lab.hadamard(x, 64, signs=k))
  np.testing.assert_array_equal(a, np.asarray(fp8lab.hadamard(x, 64, signs=jax.random.key(42))))
  # A legacy uint32[2] key with the same words gives the same signs.
  raw = jax.random.key_data(k)
  np.testing.assert_array_equal(a, np.asarray(fp8lab.hadamard(x, 64, signs=raw)))
  # The signs are the top bits of random_bits(key, (n,)).
  top = np.asarray(fp8lab.random_bits(k, (64,))) >> np.uint32(31)
  np.testing.assert_array_equal(np.asarray(had.hadamard_signs(64, k)) >> np.uint32(31), top)
  assert 0 < top.sum() < 64
  other = np.asarray(had.hadamard_signs(64, jax.random.key(43)))
  assert (other != np.asarray(had.hadamard_signs(64, k))).any()
  # Under jit with a traced key the result is the same.
  jitted = jax.jit(lambda x, k: fp8lab.hadamard(x, 64, signs=k))(x, k)
  np.testing.assert_array_equal(np.asarray(jitted), a)


def test_nan_and_inf_spread_through_their_block_only():
  x = np.ones((1, 48), np.float32)
  x[0, 3] = np.inf
  x[0, 20] = np.nan
  y = np.asarray(fp8lab.hadamard(x, 16))
  assert np.isinf(y[0, :16]).all()                  # Inf +- finite: every output infinite
  assert np.isnan(y[0, 16:32]).all()
  assert np.isfinite(y[0, 32:]).all()


def test_quantize_with_hadamard():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(4, 64)).astype(np.float32)
  x[0, 5] = 40.0                                    # an outlier the rotation spreads
  spec = fp8lab.HadamardSpec.from_signs(32, jax.random.key(8))
  assert spec.signs == "random" and len(spec.seed) == 2
  for hadamard_arg, signs in ((16, None), (fp8lab.HadamardSpec(32, "fixed"), "fixed"),
                              (spec, jax.random.key(8))):
    block = hadamard_arg if isinstance(hadamard_arg, int) else hadamard_arg.block
    q = fp8lab.quantize(x, "mxfp4", hadamard=hadamard_arg)
    assert q.hadamard.block == block
    rotated = fp8lab.hadamard(x, block, signs=signs)
    q_ref = fp8lab.quantize(rotated, "mxfp4")       # rotate first, then quantize
    np.testing.assert_array_equal(np.asarray(q.data), np.asarray(q_ref.data))
    np.testing.assert_array_equal(np.asarray(q.scales), np.asarray(q_ref.scales))
    d = q.dequantize()                              # the rotated values
    np.testing.assert_array_equal(np.asarray(d), np.asarray(q_ref.dequantize()))
    np.testing.assert_array_equal(
        np.asarray(q.dequantize(unrotate=True)),
        np.asarray(fp8lab.hadamard(d, block, signs=signs, inverse=True)))
  # jit with the spec as static metadata.
  qj = jax.jit(lambda x: fp8lab.quantize(x, "nvfp4", hadamard=spec))(x)
  np.testing.assert_array_equal(np.asarray(qj.data),
                                np.asarray(fp8lab.quantize(x, "nvfp4", hadamard=spec).data))
  # A rotated quantization spreads the outlier: the row's error is smaller than without.
  err_plain = np.abs(np.asarray(fp8lab.quantize(x, "mxfp4").dequantize())[0] - x[0]).sum()
  err_rot = np.abs(np.asarray(fp8lab.quantize(x, "mxfp4", hadamard=32)
                              .dequantize(unrotate=True))[0] - x[0]).sum()
  assert err_rot < err_plain


def test_argument_errors():
  x = np.ones((2, 64), np.float32)
  with pytest.raises(ValueError, match="block"):
    fp8lab.hadamard(x, 8)
  with pytest.raises(ValueError, match="multiple"):
    fp8lab.hadamard(np.ones((2, 40), np.float32), 16)
  with pytest.raises(ValueError, match="signs"):
    fp8lab.hadamard(x, 16, signs="random")
  with pytest.raises(ValueError, match="axis"):
    fp8lab.hadamard(x, 16, axis=2)
  with pytest.raises(TypeError, match="float32"):
    fp8lab.hadamard(np.ones(16), 16)
  with pytest.raises(ValueError, match="seed"):
    fp8lab.HadamardSpec(16, "fixed", seed=(1, 2))
  with pytest.raises(ValueError, match="seed"):
    fp8lab.HadamardSpec(16, "random")
  with pytest.raises(ValueError, match="signs"):
    fp8lab.HadamardSpec(16, "sometimes")
  with pytest.raises(ValueError, match="concrete"):
    jax.jit(lambda k: fp8lab.HadamardSpec.from_signs(16, k).block)(jax.random.key(0))
  # hadamard along axis 0 is the transpose of hadamard along axis 1.
  y = np.random.default_rng(4).normal(size=(32, 3)).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(fp8lab.hadamard(y, 32, axis=0)),
                                np.asarray(fp8lab.hadamard(y.T, 32)).T)
