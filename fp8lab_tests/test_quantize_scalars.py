"""In-kernel float32 arithmetic, scale rules and Hadamard rotation of the quantize kernel
(fp8lab/kernels/quantize/f32.py, scalars.py, rotate.py) against the golden model
(numerics/scales.py, numerics/hadamard.py) and numpy's IEEE float32 arithmetic, bit for bit.

Each function runs plain (jit) and inside a pallas_call (interpret mode on the CPU, compiled
with FP8LAB_GPU_TESTS=1), on edge lists and hypothesis raw bit patterns. A structural check
walks each function's jaxpr: every primitive has a Pallas Triton lowering rule, no 64-bit
types, no float arithmetic in the integer paths, split/join only as Triton has them. Expected
values come from the golden model or numpy, never from the code under test.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from fp8lab.formats import E4M3, E5M2, get_format
from fp8lab.kernels.quantize import f32, rotate as kr, scalars as ks
from fp8lab.numerics import hadamard as gh
from fp8lab.numerics import scales as sc
from fp8lab.numerics.codec import decode
from fp8lab.testing import float32_bits
from fp8lab_tests import switches

_U = np.uint32
QNAN = 0x7FC00000
INTERPRET = not switches.ON_GPU


# ----------------------------------------------------------------------------------------
# Harness.

def _in_kernel_impl(fn, *arrays):
  """fn(*arrays) computed inside one pallas_call (whole arrays as the block, no grid)."""
  outs = jax.eval_shape(fn, *arrays)
  flat, tree = jax.tree.flatten(outs)
  n_in = len(arrays)

  def kernel(*refs):
    res = jax.tree.leaves(fn(*[r[...] for r in refs[:n_in]]))
    for ref, val in zip(refs[n_in:], res):
      ref[...] = val

  res = pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct(o.shape, o.dtype) for o in flat],
                       interpret=INTERPRET)(*arrays)
  return jax.tree.unflatten(tree, res)


_in_kernel = jax.jit(_in_kernel_impl, static_argnums=0)
# One partial per distinct binding: jit caches on the function object, and functools.partial
# compares by identity, so a fresh partial per hypothesis example would recompile each time.
_bind = functools.lru_cache(maxsize=None)(functools.partial)
_plain = jax.jit(lambda fn, *a: fn(*a), static_argnums=0)


def _np(tree):
  return jax.tree.map(np.asarray, tree)


def _run_both(fn, *arrays):
  """(plain result, in-kernel result) as numpy."""
  arrays = [jnp.asarray(a) for a in arrays]
  return _np(_plain(fn, *arrays)), _np(_in_kernel(fn, *arrays))


def _pow2_pad(a, fill=0):
  a = np.asarray(a, np.uint32).ravel()
  n = 1 << max(int(len(a) - 1).bit_length(), 0)
  return np.concatenate([a, np.full(n - len(a), fill, np.uint32)])


def _canonical(x32: np.ndarray) -> np.ndarray:
  """numpy float32 results as bits with every NaN as 0x7FC00000 (the golden model's)."""
  bits = x32.view(np.uint32)
  return np.where(np.isnan(x32), _U(QNAN), bits)


def _bits(v) -> int:
  return int(np.float32(v).view(np.uint32))


# Edge magnitudes: zeros, subnormal extremes, the normal boundary, max, Inf, NaNs, ties.
_EDGE_MAGS = [0, 1, 2, 3, 5, 0x400000, 0x7FFFFE, 0x7FFFFF, 0x800000, 0x800001, 0x1000000,
              0x7F7FFFFF, 0x7F7FFFFE, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF,
              _bits(1.0), _bits(1.0) + 1, _bits(1.0) - 1, _bits(1.5), _bits(2.0), _bits(3.0),
              _bits(0.5), _bits(448.0), _bits(57344.0), _bits(2688.0), _bits(6.0),
              _bits(2.0 ** -126 * 3), _bits(2.0 ** 127), _bits(2.0 ** -100), _bits(2.0 ** 100),
              _bits(1.0 / 3.0), _bits(2.0 ** 64), _bits(2.0 ** -64)]
EDGES = np.array(sorted({m | s for m in _EDGE_MAGS for s in (0, 0x80000000)}), np.uint32)


def _edge_pairs():
  a, b = np.array(list(itertools.product(EDGES, EDGES)), np.uint32).T
  return a, b


# Pairs whose results sit at the subnormal / normal boundary or are ties (numpy says which).
_BOUNDARY = [
    (0x00800000, _bits(1.0) + 1),    # 2^-126 / (1 + ulp): rounds to the largest subnormal
    (0x007FFFFF, _bits(1.0) - 1),    # just above the largest subnormal: up to 2^-126
    (0x00000003, _bits(2.0)),        # 1.5 * 2^-149: a tie, to even (2)
    (0x00000001, _bits(2.0)),        # 0.5 * 2^-149: a tie, to 0
    (0x00000005, _bits(2.0)),        # 2.5 * 2^-149: a tie, to 2
    (0x00000007, _bits(4.0)),        # 1.75 * 2^-149: up to 2
    (0x00FFFFFF, _bits(2.0)),        # 2^-126 * (2 - 2^-23) / 2: a tie at the boundary
    (_bits(1.0), _bits(3.0)), (_bits(2.0), _bits(3.0)),
    (0x7F7FFFFF, _bits(0.5)),        # overflow to Inf
    (0x7F7FFFFF, _bits(1.0) - 1),
]


def _boundary_pairs():
  a, b = np.array(_BOUNDARY, np.uint32).T
  # Both signs, and each swapped for the commutative ops' other operand order.
  a = np.concatenate([a, a ^ _U(0x80000000), b, b])
  b = np.concatenate([b, b, a[:len(b)], a[:len(b)] ^ _U(0x80000000)])
  return a, b


_OPS = {
    "div": (f32.div_bits, sc.f32_div, np.divide),
    "mul": (f32.mul_bits, sc.f32_mul, np.multiply),
    "add": (f32.add_bits, sc.f32_add, np.add),
    "sub": (f32.sub_bits, sc.f32_sub, np.subtract),
}
_GOLD = {name: jax.jit(g) for name, (_, g, _) in _OPS.items()}


_OP_SIZE = 8192      # every check runs at this one shape: one compile per op


def _fit(a, size, fill=0x3F800000):
  a = np.asarray(a, np.uint32).ravel()
  assert len(a) <= size, len(a)
  return np.concatenate([a, np.full(size - len(a), fill, np.uint32)])


def _check_op(name, a, b):
  ours, _, ref = _OPS[name]
  a, b = _fit(a, _OP_SIZE), _fit(b, _OP_SIZE)
  plain, kern = _run_both(ours, a, b)
  gold = np.asarray(_GOLD[name](a, b))
  with np.errstate(all="ignore"):
    want = _canonical(ref(a.view(np.float32), b.view(np.float32)))
  np.testing.assert_array_equal(gold, want)           # the two references agree
  for got in (plain, kern):
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(a[i]), hex(b[i]), hex(got[i]), hex(want[i])) for i in bad[:8]]


# ----------------------------------------------------------------------------------------
# f32.py

@pytest.mark.parametrize("name", list(_OPS))
def test_f32_op_edges(name):
  (a, b), (c, d) = _edge_pairs(), _boundary_pairs()
  _check_op(name, np.concatenate([a, c]), np.concatenate([b, d]))


@pytest.mark.parametrize("name", list(_OPS))
@given(data=st.data())
@settings(max_examples=40)
def test_f32_op_raw_bits(name, data):
  arrays = hnp.arrays(np.uint32, 64, elements=float32_bits())
  _check_op(name, data.draw(arrays), data.draw(arrays))


def _random_bits(rng, n, *, exp_lo=0, exp_hi=255):
  """Random float32 bits with the exponent field uniform in [exp_lo, exp_hi]."""
  frac = rng.integers(0, 1 << 23, n).astype(np.uint32)
  exp = rng.integers(exp_lo, exp_hi + 1, n).astype(np.uint32)
  sign = rng.integers(0, 2, n).astype(np.uint32)
  return (sign << _U(31)) | (exp << _U(23)) | frac


@pytest.mark.parametrize("name", list(_OPS))
def test_f32_op_random_ranges(name):
  """Uniform bits, and operands whose quotients / products land in the subnormal range."""
  rng = np.random.default_rng(18)
  n = 2048
  cases = [(_random_bits(rng, n), _random_bits(rng, n)),
           (_random_bits(rng, n, exp_hi=40), _random_bits(rng, n, exp_lo=100, exp_hi=150)),
           (_random_bits(rng, n, exp_hi=3), _random_bits(rng, n, exp_hi=3)),
           (_random_bits(rng, n, exp_lo=120, exp_hi=130), _random_bits(rng, n, exp_hi=2))]
  _check_op(name, np.concatenate([a for a, _ in cases]), np.concatenate([b for _, b in cases]))


def test_reciprocal_and_ldexp():
  rng = np.random.default_rng(5)
  b = np.concatenate([EDGES, _random_bits(rng, 1024 - len(EDGES))])
  plain, kern = _run_both(f32.reciprocal_bits, b)
  with np.errstate(all="ignore"):
    want = _canonical(np.float32(1.0) / b.view(np.float32))
  np.testing.assert_array_equal(plain, want)
  np.testing.assert_array_equal(kern, want)
  # ldexp with an int32 exponent per element: every b against each k, in one call.
  k = np.array([-160, -30, -3, -1, 0, 1, 7, 200], np.int32)
  bb, kk = np.tile(b, len(k)), np.repeat(k, len(b))
  gold = np.asarray(jax.jit(sc.ldexp_bits)(bb, kk))
  for got in _run_both(f32.ldexp_bits, bb, kk):
    np.testing.assert_array_equal(got, gold)


# ----------------------------------------------------------------------------------------
# scalars.py: current scaling.

_SCALE_FMTS = [E4M3, E5M2]


def _check_current_scale(fmt, margin, amax, fallback):
  fn = _bind(_current_scale_fn, fmt.name, margin)
  plain, kern = _run_both(fn, amax, fallback)
  want = np.asarray(_gold_scale(amax, fmt.max_finite, margin, fallback))
  np.testing.assert_array_equal(plain, want)
  np.testing.assert_array_equal(kern, want)


_gold_scale = jax.jit(sc._scale_from_amax_bits, static_argnums=(1, 2))


def _current_scale_fn(fmt_name, margin, amax, fallback):
  return ks.current_scale_bits(amax, ks.format_max_bits(fmt_name), margin, fallback)


_SCALE_CONFIGS = [(E4M3, 0), (E5M2, 0), (E4M3, 5), (E5M2, -2)]
_SCALE_SIZE = 512


def _scale_inputs(seed, drawn=()):
  """(amax, fallback) of _SCALE_SIZE: the drawn amaxes, edges, tiny and uniform bits."""
  rng = np.random.default_rng(seed)
  amax = np.concatenate([np.asarray(drawn, np.uint32), EDGES])
  amax = np.concatenate([amax, _random_bits(rng, (_SCALE_SIZE - len(amax)) // 2, exp_hi=20)])
  amax = np.concatenate([amax, _random_bits(rng, _SCALE_SIZE - len(amax))])
  return amax, _random_bits(rng, _SCALE_SIZE)


@pytest.mark.parametrize("fmt,margin", _SCALE_CONFIGS, ids=str)
def test_current_scale_edges(fmt, margin):
  _check_current_scale(fmt, margin, *_scale_inputs(margin + 10))


@pytest.mark.parametrize("fmt,margin", _SCALE_CONFIGS, ids=str)
@given(amax=hnp.arrays(np.uint32, 32, elements=float32_bits()))
@settings(max_examples=15)
def test_current_scale_raw_bits(fmt, margin, amax):
  _check_current_scale(fmt, margin, *_scale_inputs(1, amax))


def test_current_scale_scalar():
  """0-d operands, as a kernel holds a per-tensor scalar; and the public golden rule."""
  fn = _bind(_current_scale_fn, "e4m3", 0)
  for amax in (0.0, 1e-38, 3.5, float("inf"), 2.0 ** -149):
    got = _plain(fn, np.float32(amax).view(np.uint32), f32.ONE_BITS)
    assert got.shape == ()
    assert int(got) == int(np.asarray(sc.current_scale(np.float32(amax), "e4m3")).view(_U))


# ----------------------------------------------------------------------------------------
# scalars.py: delayed scaling.

def _delayed_fn(fmt_name, margin, algo, n, history, amax, scale):
  return ks.delayed_update_bits(history, amax, scale, fmt_max_bits=ks.format_max_bits(fmt_name),
                                margin=margin, algo=algo, length=n)


_gold_update = jax.jit(lambda state, amax: state.update(amax))


def _check_delayed(fmt, margin, algo, hist, amax, scale, pad_fill=0):
  n = len(hist)
  # the history moved up one slot, as the kernel loads it; slot 0 holds garbage (ignored)
  padded = _pow2_pad(np.concatenate([[0xFFFFFFFF], np.asarray(hist, np.uint32)[:-1]]
                                    ).astype(np.uint32), pad_fill)
  fn = _bind(_delayed_fn, fmt.name, margin, algo, n)
  args = (padded, np.array([amax], np.uint32), np.array([scale], np.uint32))
  state = sc.DelayedScaling(jnp.asarray(np.asarray(hist, np.uint32).view(np.float32)),
                            jnp.asarray(np.uint32(scale).view(np.float32)), fmt.name, margin, algo)
  new = _gold_update(state, np.uint32(amax).view(np.float32))
  want_hist = _pow2_pad(np.asarray(new.amax_history).view(np.uint32))
  want_hist = np.concatenate([want_hist, np.zeros(len(padded) - len(want_hist), np.uint32)])
  want_scale = np.asarray(new.scale).view(np.uint32).reshape(1)
  for h, s in _run_both(fn, *args):
    np.testing.assert_array_equal(h, want_hist)
    np.testing.assert_array_equal(s, want_scale)


# (format, margin, algo, history length): each binding compiles once; hypothesis draws bits.
_DELAYED_CONFIGS = [(E5M2, 2, "max", 5), (E4M3, -1, "most_recent", 3),
                    (E5M2, 0, "most_recent", 1), (E4M3, 3, "max", 24)]


@pytest.mark.parametrize("fmt,margin,algo,n", _DELAYED_CONFIGS,
                         ids=lambda v: getattr(v, "name", str(v)))
@given(data=st.data())
@settings(max_examples=20)
def test_delayed_update_raw_bits(data, fmt, margin, algo, n):
  # Histories of amaxes: non-negative mostly, with the raw patterns (NaN, Inf, signs) too.
  hist = data.draw(hnp.arrays(np.uint32, n, elements=float32_bits()))
  amax = data.draw(float32_bits())
  scale = data.draw(float32_bits())
  _check_delayed(fmt, margin, algo, hist, amax, scale)


@pytest.mark.parametrize("algo", ks.AMAX_ALGOS)
def test_delayed_update_cases(algo):
  """NaN in the history wins the max (old scale kept); the oldest entry drops out; zero
  amax keeps the scale; a tiny amax saturates to FLT_MAX; a 1024-long history."""
  one = _bits(1.0)
  cases = [
      ([_bits(2.0), QNAN, _bits(3.0)], _bits(4.0), one),             # NaN inside the window
      ([_bits(2.0), _bits(3.0), QNAN], _bits(4.0), one),             # NaN is the dropped one
      ([0, 0, 0], 0, _bits(7.0)),                                    # zero: scale kept
      ([1, 0, 0], 1, one),                                           # 2^-149: overflow
      ([0x7F800000, 0, 0], _bits(1.0), one),                         # Inf inside the window
      ([_bits(500.0), _bits(2.0), 0], _bits(-600.0), one),           # a negative amax's bits
  ]
  fmt = E4M3 if algo == "max" else E5M2
  for hist, amax, scale in cases:
    # Padded 3 -> 4 with NaN: the padding must be ignored and come back as 0.
    _check_delayed(fmt, 0, algo, np.array(hist, np.uint32), amax, scale, pad_fill=QNAN)
  rng = np.random.default_rng(7)
  long = _random_bits(rng, 1024, exp_lo=100, exp_hi=140) & _U(0x7FFFFFFF)
  _check_delayed(E4M3, 1, algo, long, _bits(3.0), one)


# ----------------------------------------------------------------------------------------
# scalars.py: NVFP4.

_gold_tensor_scales = jax.jit(sc.nvfp4_tensor_scales)
_gold_enc = jax.jit(sc.nvfp4_block_encode_factor)
_gold_dec = jax.jit(sc.nvfp4_block_decode_factor)


def _tensor_amaxes(drawn=()):
  """1024 amax bit patterns: the drawn ones, the edges, tiny and uniform magnitudes."""
  rng = np.random.default_rng(3)
  return _fit(np.concatenate([np.asarray(drawn, np.uint32), EDGES,
                              _random_bits(rng, 300, exp_hi=30),
                              _random_bits(rng, 300) & _U(0x7FFFFFFF)]), 1024)


def _check_nvfp4_tensor(amax):
  want = _np(_gold_tensor_scales(amax))
  for got in _run_both(ks.nvfp4_tensor_scales_bits, amax):
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_nvfp4_tensor_scales_edges():
  _check_nvfp4_tensor(_tensor_amaxes())


@given(amax=hnp.arrays(np.uint32, 32, elements=float32_bits(("e4m3", "e2m1"))))
@settings(max_examples=30)
def test_nvfp4_tensor_scales_raw_bits(amax):
  _check_nvfp4_tensor(_tensor_amaxes(amax))


def test_e4m3_code_bits_every_code():
  codes = np.arange(256, dtype=np.uint8)
  want = np.asarray(decode(codes, "e4m3")).view(np.uint32)
  for got in _run_both(ks.e4m3_code_bits, codes.astype(np.uint32)):
    np.testing.assert_array_equal(got, want)


def _check_block_factors(s_dec):
  """Every scale code against each S_dec (the rows of a (len(s_dec), 256) grid)."""
  codes = np.broadcast_to(np.arange(256, dtype=np.uint32), (len(s_dec), 256)).ravel()
  sd = np.repeat(np.asarray(s_dec, np.uint32), 256)
  want_enc = np.asarray(_gold_enc(codes.astype(np.uint8), sd))
  want_dec = np.asarray(_gold_dec(codes.astype(np.uint8), sd))
  for got in _run_both(ks.nvfp4_block_encode_factor_bits, codes, sd):
    np.testing.assert_array_equal(got, want_enc)
  for got in _run_both(ks.nvfp4_block_decode_factor_bits, codes, sd):
    np.testing.assert_array_equal(got, want_dec)


def _s_decs(drawn=()):
  """32 S_dec patterns: the drawn ones, then S_dec of edge / tiny / uniform amaxes, and
  patterns no tensor amax gives (0, subnormals, FLT_MAX, Inf, NaN)."""
  rng = np.random.default_rng(4)
  amax = np.concatenate([EDGES[:4], _random_bits(rng, 6, exp_hi=20),
                         _random_bits(rng, 6) & _U(0x7FFFFFFF)])
  s_dec = np.asarray(_gold_tensor_scales(amax)[1])
  extra = np.array([0, 1, 0x7FFFFF, 0x800000, _bits(1.0), 0x7F7FFFFF, 0x7F800000, QNAN,
                    0x80800000, _bits(2.0 ** -120), _bits(2.0 ** 100), _bits(1.0 / 3.0)],
                   np.uint32)
  return _fit(np.concatenate([np.asarray(drawn, np.uint32), s_dec, extra]), 32)


def test_nvfp4_block_encode_factor_edges():
  _check_block_factors(_s_decs())


@given(s_dec=hnp.arrays(np.uint32, 4, elements=float32_bits()))
@settings(max_examples=15)
def test_nvfp4_block_encode_factor_raw_bits(s_dec):
  _check_block_factors(_s_decs(s_dec))


# ----------------------------------------------------------------------------------------
# rotate.py

_ROT_SIGNS = ["none", "fixed", "random"]


def _sign_arg(kind):
  if kind == "none":
    return None
  if kind == "fixed":
    return "fixed"
  return jax.random.key_data(jax.random.key(18))


def _rotate_fn(block, inverse, float_ops, bits, sign_bits):
  return kr.rotate_bits(bits, block, signs=sign_bits, inverse=inverse, float_ops=float_ops)


def _rotate_nosign_fn(block, inverse, float_ops, bits):
  return kr.rotate_bits(bits, block, inverse=inverse, float_ops=float_ops)


def _check_rotate(x_bits, block, kind, inverse, float_ops=False):
  signs = _sign_arg(kind)
  want = np.asarray(gh.hadamard(x_bits.view(np.float32), block, signs=signs,
                                inverse=inverse)).view(np.uint32)
  if signs is None:
    fn = _bind(_rotate_nosign_fn, block, inverse, float_ops)
    args = (x_bits,)
  else:
    fn = _bind(_rotate_fn, block, inverse, float_ops)
    args = (x_bits, np.asarray(gh.hadamard_signs(block, signs)))
  # In a kernel only (the plain function is the same code; test_rotate_float_signs_and_errors
  # runs it): each variant compiles once.
  got = np.asarray(_in_kernel(fn, *map(jnp.asarray, args)))
  bad = np.argwhere(got != want)
  assert bad.size == 0, [(tuple(i), hex(got[tuple(i)]), hex(want[tuple(i)])) for i in bad[:6]]


def _tile(rng, rows, cols):
  """Bits of a tile: per-row binades over the whole range, subnormal rows, specials."""
  scale = np.exp2(rng.integers(-150, 120, (rows, 1)).astype(np.float64))
  x = (rng.standard_normal((rows, cols)) * scale).astype(np.float32).view(np.uint32)
  x[0] = _random_bits(rng, cols, exp_hi=1)                     # subnormal and tiny normals
  x[1] = _random_bits(rng, cols)                               # uniform bits
  specials = np.array([0x7F800000, 0xFF800000, QNAN, 0xFFC00001, 0x80000000, 1, 0x7F7FFFFF],
                      np.uint32)
  pos = rng.integers(0, rows * cols, 12)
  x.ravel()[pos] = specials[rng.integers(0, len(specials), 12)]
  return x


# Default run: each block, sign kind and direction at least once (each case compiles the
# rotation twice, plain and in a kernel); the rest of the product, 64 and 128, are `slow`.
_ROT_DEFAULT = [(16, "none", False), (32, "fixed", True), (16, "random", True),
                (32, "random", False)]
_ROT_CASES = [c if c in _ROT_DEFAULT else pytest.param(*c, marks=pytest.mark.slow)
              for c in itertools.product([16, 32, 64, 128], _ROT_SIGNS, [False, True])]


@pytest.mark.parametrize("block,kind,inverse", _ROT_CASES)
def test_rotate_matches_golden(block, kind, inverse):
  rng = np.random.default_rng(block + len(kind) + inverse)
  _check_rotate(_tile(rng, 8, max(64, block)), block, kind, inverse)


@pytest.mark.parametrize("block,kind,inverse", _ROT_CASES[:12])
@given(x=hnp.arrays(np.uint32, (8, 64), elements=float32_bits()))
@settings(max_examples=10)
def test_rotate_raw_bits(block, kind, inverse, x):
  _check_rotate(x, block, kind, inverse)


@pytest.mark.parametrize("block,kind", [(16, "fixed"), (32, "random"),
                                        pytest.param(16, "none", marks=pytest.mark.slow),
                                        pytest.param(32, "none", marks=pytest.mark.slow)])
def test_rotate_float_ops(block, kind):
  """The float-arithmetic path on magnitudes in [2^-60, 2^60] (every intermediate stays
  normal, so XLA:CPU's subnormal flushing cannot apply), with zeros, Inf and NaN."""
  rng = np.random.default_rng(block)
  x = (rng.uniform(1, 2, (8, 64)) * np.exp2(rng.integers(-60, 60, (8, 64)))
       * rng.choice([-1, 1], (8, 64))).astype(np.float32).view(np.uint32)
  x.ravel()[rng.integers(0, x.size, 6)] = [0, 0x80000000, 0x7F800000, 0xFF800000, QNAN,
                                           0xFFC00001]
  for inverse in (False, True):
    _check_rotate(x, block, kind, inverse, float_ops=True)


@switches.gpu
@pytest.mark.parametrize("block", [16, 32])
def test_rotate_float_ops_subnormals_gpu(block):
  """Compiled only: does the float path keep subnormals in Triton's float32 add / mul?
  (If this fails, the GPU flushes them and only the integer path is exact.)"""
  rng = np.random.default_rng(block + 1)
  x = _tile(rng, 8, 64)
  x[2] = _random_bits(rng, 64, exp_hi=2)
  want = np.asarray(gh.hadamard(x.view(np.float32), block)).view(np.uint32)
  got = np.asarray(_in_kernel(_bind(_rotate_nosign_fn, block, False, True), jnp.asarray(x)))
  np.testing.assert_array_equal(got, want)


def test_rotate_float_signs_and_errors():
  """Float +-1 sign vectors equal masks; a (cols,) mask equals a (block,) one tiled."""
  rng = np.random.default_rng(1)
  x = _tile(rng, 8, 64)
  masks = np.asarray(gh.hadamard_signs(16, "fixed"))
  pm1 = np.where(masks != 0, np.float32(-1), np.float32(1))
  np.testing.assert_array_equal(np.asarray(kr.sign_mask(pm1)), masks)
  np.testing.assert_array_equal(np.asarray(kr._apply_signs(x, np.tile(masks, 4), 16)),
                                np.asarray(kr._apply_signs(x, masks, 16)))
  a = np.asarray(_plain(_bind(_rotate_fn, 16, False, False), x, masks))
  np.testing.assert_array_equal(np.asarray(
      jax.jit(lambda v, m: kr.rotate(v, 16, signs=m))(x.view(np.float32), masks)).view(_U), a)
  assert kr.inv_sqrt_bits(32) == gh.inverse_sqrt_bits(32)
  with pytest.raises(ValueError):
    kr.rotate_bits(x, 8)
  with pytest.raises(ValueError):
    kr.rotate_bits(x[:, :40], 32)


# ----------------------------------------------------------------------------------------
# Structure: what the Triton lowering needs (compiling is only possible on a GPU).

def _eqns(jaxpr):
  for eqn in jaxpr.eqns:
    yield eqn
    for p in eqn.params.values():
      for sub in (p if isinstance(p, (tuple, list)) else [p]):
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          yield from _eqns(inner)


_FLOAT_ARITH = {"add", "sub", "mul", "div", "max", "min", "rem"}


def _check_triton_structure(fn, *avals, integer_only=True):
  from jax._src.pallas.triton import lowering as tl
  rules = {p.name for p in tl.triton_lowering_rules}
  jaxpr = jax.make_jaxpr(fn)(*avals).jaxpr
  for eqn in _eqns(jaxpr):
    name = eqn.primitive.name
    assert name in rules, f"{name} has no Pallas Triton lowering rule"
    for v in list(eqn.invars) + list(eqn.outvars):
      dtype = getattr(v.aval, "dtype", None)
      assert dtype is None or np.dtype(dtype).itemsize <= 4, (name, dtype)
    in_dtypes = [np.dtype(v.aval.dtype) for v in eqn.invars if hasattr(v.aval, "dtype")]
    if name == "div":
      assert all(np.issubdtype(d, np.integer) for d in in_dtypes), "float division"
    if name == "clz":
      # Triton compiles clz of int32 only (__nv_clz); uint32 becomes math.ctlz, which fails
      # in Triton's compile (the H200 run of 2026-12-01)
      assert in_dtypes == [np.dtype(np.int32)], ("clz", in_dtypes)
    if integer_only and name in _FLOAT_ARITH:
      assert not any(np.issubdtype(d, np.floating) for d in in_dtypes), (name, in_dtypes)
    if name in ("stack", "unstack"):
      nd = eqn.outvars[0].aval.ndim if name == "stack" else eqn.invars[0].aval.ndim
      assert eqn.params["axis"] == nd - 1 and len(eqn.invars if name == "stack"
                                                  else eqn.outvars) == 2, eqn
    if name == "concatenate":
      pytest.fail("concatenate (Triton lowers it only for [..., 1] operands)")


def _u32(*shape):
  return jax.ShapeDtypeStruct(shape, jnp.uint32)


def test_triton_structure():
  for name, (fn, _, _) in _OPS.items():
    _check_triton_structure(fn, _u32(64), _u32(64))
    _check_triton_structure(fn, _u32(), _u32())
  _check_triton_structure(f32.reciprocal_bits, _u32(8))
  _check_triton_structure(_bind(_current_scale_fn, "e4m3", 2), _u32(), _u32())
  for algo in ks.AMAX_ALGOS:
    _check_triton_structure(_bind(_delayed_fn, "e5m2", 1, algo, 1000),
                            _u32(1024), _u32(1), _u32(1))
  _check_triton_structure(ks.nvfp4_tensor_scales_bits, _u32())
  _check_triton_structure(ks.nvfp4_block_encode_factor_bits, _u32(32, 4), _u32())
  for block in (16, 32):
    _check_triton_structure(_bind(_rotate_fn, block, False, False),
                            _u32(16, 128), _u32(block))
    _check_triton_structure(_bind(_rotate_fn, block, True, True),
                            _u32(16, 128), _u32(block), integer_only=False)
