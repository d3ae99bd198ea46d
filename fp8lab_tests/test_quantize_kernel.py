"""Tests of the Pallas quantize kernel (fp8lab/kernels/quantize/: quantize_2d).

Every expected value comes from the golden model (fp8lab.quantize, fp8lab.tensor_amax) and
is compared bit for bit: uint32 words, uint8 scale codes, the float32 bits of tensor_scale and
amax. Inputs are raw bit patterns (fp8lab.testing strategies, and hand-made arrays with NaN,
Inf, float32 subnormals, zero and saturating blocks) in odd shapes, with tiles small enough
that several programs meet at partial edges in both directions.

Default (CPU): the kernel runs in Pallas interpret mode on 16 cases, each a fresh compile
(the time goes there); the other cases of each grid are marked slow (_pick), and
FP8LAB_SLOW_TESTS=1 runs them all. FP8LAB_GPU_TESTS=1 runs the same tests compiled.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings

import jax
import jax.numpy as jnp
from hypothesis import HealthCheck, given, settings, strategies as st
import numpy as np
import pytest

import fp8lab
from fp8lab import testing as fpt
from fp8lab.formats import E2M1, MX_SCALE_MODES, QUANTIZED
from fp8lab.kernels.quantize import QuantizeConfig, quantize_2d, quantize_config
from fp8lab.kernels.quantize import configs as QC
from fp8lab.kernels.quantize import kernel as K
from fp8lab.numerics import random as fp8_random
from fp8lab.numerics import scales as sc
from fp8lab.numerics.codec import encode_bits
from fp8lab_tests.lowering import triton_irs
from fp8lab_tests.switches import ON_GPU

warnings.filterwarnings("ignore", message=".*Triton.*deprecated.*")
warnings.filterwarnings("ignore", message=".*Pallas Triton backend is deprecated.*")

INTERPRET = not ON_GPU
MX = tuple(n for n, q in QUANTIZED.items() if q.scaling == "mx")
PER_TENSOR = tuple(n for n, q in QUANTIZED.items() if q.scaling == "tensor")
# (format, block_shape) of every layout the kernel takes; per-tensor formats get a scale.
LAYOUTS = ([(n, None) for n in MX] + [("nvfp4", (16,)), ("nvfp4", (16, 16))]
           + [(n, None) for n in PER_TENSOR])
X_DTYPES = (np.float32, jnp.bfloat16, np.float16)
# Small tiles: several programs along both axes of the small shapes below.
SMALL = QuantizeConfig(16, 32)
SHAPE = (45, 100)                        # neither a multiple of 16 / 32 nor of the tiles


def _pick(cases, default):
  """pytest params of `cases` (tuples): those at the indices in `default` run by default,
  the others are marked slow (interpret-mode compiles dominate this file's time)."""
  return [pytest.param(*c, marks=() if i in default else pytest.mark.slow)
          for i, c in enumerate(cases)]


def _u(a):
  """Bit patterns of an array (float32 -> uint32; integer arrays as they are)."""
  a = np.asarray(a)
  return a.view(np.uint32) if a.dtype == np.float32 else a


def _golden_kwargs(fmt, block_shape, scale, sr):
  """fp8lab.quantize's keyword arguments for the same quantization."""
  kw = {} if block_shape is None or QUANTIZED[fmt].scaling == "tensor" else dict(
      block_shape=block_shape)
  if scale is not None:
    kw["scale"] = scale
  if sr is not None:
    kw.update(rounding="stochastic", key=sr[0], sr_bits=sr[1])
  return kw


def _check(x, fmt, *, block_shape=None, scale_mode="floor", scale=None, amax=None,
           transpose=False, sr=None, config=SMALL):
  """quantize_2d against fp8lab.quantize(x) (and of x.T), bit for bit. sr: (key, sr_bits)."""
  key_words = None if sr is None else fp8_random.key_words(sr[0])
  got = quantize_2d(x, fmt=fmt, scale_mode=scale_mode, block_shape=block_shape, scale=scale,
                    amax=amax, transpose=transpose, key_words=key_words,
                    sr_bits=8 if sr is None else sr[1], interpret=INTERPRET, config=config)
  kw = _golden_kwargs(fmt, block_shape, scale, sr)
  if QUANTIZED[fmt].scaling == "mx":
    kw["scale_mode"] = scale_mode
  want = fp8lab.quantize(x, fmt, **kw)
  np.testing.assert_array_equal(np.asarray(got.data), np.asarray(want.data), "data")
  if want.scales is None:
    assert got.scales is None
  else:
    np.testing.assert_array_equal(np.asarray(got.scales), np.asarray(want.scales), "scales")
  if want.tensor_scale is None:
    assert got.tensor_scale is None
  else:
    assert _u(got.tensor_scale) == _u(want.tensor_scale), "tensor_scale"
  assert _u(got.amax) == _u(fp8lab.tensor_amax(x)), "amax"
  if transpose:
    want_t = fp8lab.quantize(jnp.asarray(x).T, fmt, **kw)
    np.testing.assert_array_equal(np.asarray(got.data_t), np.asarray(want_t.data), "data_t")
    if want_t.scales is not None:
      np.testing.assert_array_equal(np.asarray(got.scales_t), np.asarray(want_t.scales),
                                    "scales_t")
  else:
    assert got.data_t is None and got.scales_t is None
  return got


def _ties(elem):
  """The element grid's midpoints (ties) and values, with max_finite leading every 16:
  blocks whose MX floor scale and per-tensor scale 1 leave them ties."""
  vals = np.arange(1 << elem.bits, dtype=np.uint8).view(elem.dtype).astype(np.float64)
  grid = np.unique(np.abs(vals[np.isfinite(vals)]))
  pts = np.concatenate([(grid[:-1] + grid[1:]) / 2, grid])
  pts[::16] = elem.max_finite
  return pts.astype(np.float32)


def _specials(shape, dtype=np.float32, seed=0, fmt=None):
  """Wide-range values with the hard cases placed by hand: NaN (both signs) and +-Inf
  blocks, float32 subnormal blocks, zero blocks (-0 included), saturating blocks, and (with
  fmt) rows of ties of its element grid."""
  rng = np.random.default_rng(seed)
  r, c = shape
  x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-30, 30, shape)).astype(np.float32)
  x[0, 3] = np.nan
  x[1, 40] = -np.nan
  x[2, 70] = np.inf
  x[r - 1, c - 1] = -np.inf
  x[3, :] = 0.0
  x[4, 32:64] = -0.0
  x[5, :] = (rng.integers(1, 1 << 23, c, dtype=np.uint32)).view(np.float32)   # subnormals
  x[6, :] = np.float32(3.4e38) * np.sign(rng.standard_normal(c)).astype(np.float32)
  x[7, :] = rng.choice(np.float32([0.25, 0.75, 1.25, 2.5, 464.0, 5.0, 1.75, 3.5]), c)
  x[8, :16] = np.float32(2.0**-149)
  x[9:, 17] = np.float32(448.0 * 1.0625)                    # a saturating column
  if fmt is not None:
    t = _ties(QUANTIZED[fmt].element)
    for row in (10, 11):
      x[row] = np.resize(t, c) * np.where(rng.random(c) < 0.5, -1, 1).astype(np.float32)
      t = np.roll(t, 5)
  with np.errstate(over="ignore", invalid="ignore"):
    return x.astype(dtype)


# ----------------------------------------------------------------------------------------
# Configurations.

def test_configs_are_powers_of_two_and_cover_the_formats():
  for name, q in QUANTIZED.items():
    if q.scaling in ("mx", "nvfp4", "tensor"):
      for t in (False, True):
        cfg = quantize_config(name, t)
        assert cfg.block_rows & (cfg.block_rows - 1) == 0
        assert cfg.block_cols & (cfg.block_cols - 1) == 0
  with pytest.raises(ValueError):
    QuantizeConfig(24, 32)
  with pytest.raises(ValueError):
    QuantizeConfig(16, 32, num_warps=0)
  for bad in (0, 3, True, 2.0):
    with pytest.raises(ValueError, match="tiles_per_program"):
      QuantizeConfig(16, 32, tiles_per_program=bad)
  # fitting never goes below the grain nor above the padded problem
  assert QC.fit_config(QuantizeConfig(64, 512), 3, 40, 32, 32) == QuantizeConfig(32, 64)


def test_rejects_what_the_kernel_cannot_do():
  x = np.ones((4, 8), np.float32)
  with pytest.raises(ValueError, match="no 'bf16'"):
    quantize_2d(x, fmt="bf16", interpret=True)
  with pytest.raises(ValueError, match="without transpose"):
    quantize_2d(np.ones((4, 32), np.float32), fmt="mxfp4", transpose=True, interpret=True,
                hadamard=(32, np.zeros(32, np.uint32)))
  with pytest.raises(ValueError, match="given scale or S_enc"):
    quantize_2d(np.ones((4, 32), np.float32), fmt="e4m3", interpret=True,
                hadamard=(16, np.zeros(16, np.uint32)))
  with pytest.raises(ValueError, match="multiple of the block"):
    quantize_2d(np.ones((4, 24), np.float32), fmt="mxfp4", interpret=True,
                hadamard=(16, np.zeros(16, np.uint32)))
  with pytest.raises(ValueError, match="2D"):
    quantize_2d(x[0], fmt="mxfp8", interpret=True)
  # writing into existing arrays (dest / into)
  data, scales = np.zeros((9, 4), np.uint32), np.zeros((9, 1), np.uint8)
  x32, dest = np.ones((4, 32), np.float32), np.arange(4, dtype=np.int32)
  with pytest.raises(ValueError, match="go together"):
    quantize_2d(x32, fmt="mxfp4", dest=dest, interpret=True)
  with pytest.raises(ValueError, match="without transpose"):
    quantize_2d(x32, fmt="mxfp4", dest=dest, into=(data, scales), transpose=True,
                interpret=True)
  with pytest.raises(ValueError, match=r"dest must be \(4,\) int32"):
    quantize_2d(x32, fmt="mxfp4", dest=dest[:3], into=(data, scales), interpret=True)
  with pytest.raises(ValueError, match="into's data"):
    quantize_2d(x32, fmt="mxfp4", dest=dest, into=(data[:, :3], scales), interpret=True)
  with pytest.raises(ValueError, match="into's scales"):
    quantize_2d(x32, fmt="mxfp4", dest=dest, into=(data, None), interpret=True)
  with pytest.raises(ValueError, match="no block scales"):
    quantize_2d(x32, fmt="e4m3", scale=1.0, dest=dest, into=(np.zeros((9, 8), np.uint32),
                                                              scales), interpret=True)


# Rows written into existing arrays at given destinations (kv_cache_update's launch).
@pytest.mark.parametrize("fmt,block_shape,scale", _pick(
    [("nvfp4", (16,), 900.0), ("e4m3_block", (32,), None), ("mxfp4", None, None),
     ("e4m3", None, 3.0)], (0,)))
def test_rows_written_into_existing_arrays(fmt, block_shape, scale):
  """quantize_2d(dest=, into=) against the golden model's quantize of x scattered into the
  golden arrays of another tensor: hard bit patterns, several programs per axis, rows sent
  before the start, past the end (both dropped) and in any order."""
  n = 70
  x = _specials(SHAPE, fmt=None if fmt == "e4m3_block" else fmt)
  kw = _golden_kwargs(fmt, block_shape, scale, None)
  old = fp8lab.quantize(_specials((n, SHAPE[1]), seed=3), fmt, **kw)
  new = fp8lab.quantize(x, fmt, **kw)
  rng = np.random.default_rng(1)
  dest = rng.permutation(n + 20)[:SHAPE[0]].astype(np.int32) - 10    # some < 0, some >= n
  got = quantize_2d(x, fmt=fmt, block_shape=block_shape, scale=scale, dest=dest,
                    into=(old.data, old.scales), interpret=INTERPRET, config=SMALL)
  keep = (dest >= 0) & (dest < n)
  assert 0 < keep.sum() < len(dest)
  for name in ("data", "scales"):
    want = getattr(old, name)
    if want is None:
      assert got.scales is None
      continue
    want = np.array(want)
    want[dest[keep]] = np.asarray(getattr(new, name))[keep]
    np.testing.assert_array_equal(_u(getattr(got, name)), _u(want), name)
  if new.tensor_scale is not None:
    assert _u(got.tensor_scale) == _u(new.tensor_scale)
  assert _u(got.amax) == _u(fp8lab.tensor_amax(x))


# ----------------------------------------------------------------------------------------
# Every layout on the hand-made specials, both orientations, several programs each way.

# The default run: mxfp8, nvfp4 (16,) and e5m2 here, the rest in the stochastic test.
@pytest.mark.parametrize("fmt,block_shape", _pick(LAYOUTS, (0, 3, 6)))
def test_specials_both_orientations(fmt, block_shape):
  x = _specials(SHAPE, fmt=fmt)
  scale = jnp.float32(1.0) if fmt in PER_TENSOR else None
  _check(x, fmt, block_shape=block_shape, scale=scale, transpose=True)


@pytest.mark.parametrize("fmt,mode", _pick(
    [(f, m) for m in MX_SCALE_MODES for f in MX], (8,)))
def test_mx_scale_modes_on_specials(fmt, mode):
  _check(_specials(SHAPE, seed=1, fmt=fmt), fmt, scale_mode=mode)


# ----------------------------------------------------------------------------------------
# Hypothesis over raw bit patterns.

HYP = settings(max_examples=15 if INTERPRET else 100,
               suppress_health_check=[HealthCheck.large_base_example, HealthCheck.too_slow,
                                      HealthCheck.data_too_large])
# block_arrays draws every element: a (4, 64) patch, placed at a drawn offset into the
# specials of SHAPE (hypothesis cannot draw SHAPE's 4500 elements one by one).
PATCH = (4, 64)


def _draw_x(data, fmt, dtype=np.float32, block_shape=None):
  x = _specials(SHAPE, seed=4)
  patch = data.draw(fpt.block_arrays(fmt, PATCH, block_shape=block_shape))
  r0 = data.draw(st.integers(0, SHAPE[0] - PATCH[0]))
  c0 = data.draw(st.integers(0, SHAPE[1] - PATCH[1]))
  x[r0:r0 + PATCH[0], c0:c0 + PATCH[1]] = patch
  with np.errstate(over="ignore", invalid="ignore"):
    return x.astype(dtype)


@HYP
@pytest.mark.parametrize("fmt,mode,dtype", _pick(
    [(f, m, X_DTYPES[i % 3]) for i, (m, f) in enumerate(
        (m, f) for m in MX_SCALE_MODES for f in MX)], (5, 10)))
@given(data=st.data())
def test_mx_block_arrays(fmt, mode, dtype, data):
  x = _draw_x(data, fmt, dtype)
  _check(x, fmt, scale_mode=mode, transpose=True)


@HYP
@pytest.mark.parametrize("block_shape", _pick([((16,),), ((16, 16),)], ()))
@given(data=st.data())
def test_nvfp4_block_arrays(block_shape, data):
  """amax=None: the first pass; the tensor scales follow the drawn tensor (slow only: the
  default run has nvfp4's first pass in the specials and stochastic tests)."""
  x = _draw_x(data, "nvfp4", block_shape=block_shape)
  _check(x, "nvfp4", block_shape=block_shape)


@jax.jit
def _nvfp4_with_amax(x, a):
  """The golden model's nvfp4 steps (docs/numerics.md section 5; blocks of 16 along rows)
  with the tensor amax a instead of x's own: (data, scale codes, S_dec bits)."""
  bits = sc.bits_of(x)
  s_enc, s_dec = sc.nvfp4_tensor_scales(sc.bits_of(a))
  mag = jnp.pad(bits & np.uint32(0x7FFFFFFF), ((0, 0), (0, -x.shape[1] % 16)))
  bm = jnp.max(mag.reshape(x.shape[0], -1, 16), axis=2)
  nonfinite = bm >= np.uint32(0x7F800000)
  codes = jnp.where(nonfinite, jnp.uint8(0x7F), sc.nvfp4_block_scale_codes(bm, s_enc))
  grow = lambda v: jnp.repeat(v, 16, axis=1)[:, :x.shape[1]]
  enc_b = sc.nvfp4_block_encode_factor(codes, s_dec)
  elems = encode_bits(sc.f32_mul(bits, grow(enc_b)), E2M1, saturate=True)
  elems = jnp.where(grow(nonfinite), jnp.uint8(0), elems)
  return fp8lab.pack(elems, "e2m1"), codes, s_dec


@HYP
@given(data=st.data())
def test_nvfp4_given_amax(data):
  """A given amax (any finite bit pattern, also one smaller than the tensor's: saturating
  block scales) sets S_enc; the amax output is still the tensor's."""
  x = _draw_x(data, "nvfp4")
  a = np.uint32(data.draw(st.one_of(fpt.float32_bits("e4m3"), st.integers(0, 0x7F7FFFFF))))
  a = np.array(a & np.uint32(0x7FFFFFFF)).view(np.float32)
  if not np.isfinite(a):
    a = np.float32(fp8lab.tensor_amax(x))
  got = quantize_2d(x, fmt="nvfp4", amax=a, interpret=INTERPRET, config=SMALL)
  words, codes, s_dec = _nvfp4_with_amax(jnp.asarray(x), jnp.asarray(a))
  np.testing.assert_array_equal(np.asarray(got.data), np.asarray(words))
  np.testing.assert_array_equal(np.asarray(got.scales), np.asarray(codes))
  assert _u(got.tensor_scale) == np.asarray(s_dec)
  assert _u(got.amax) == _u(fp8lab.tensor_amax(x))


@HYP
@pytest.mark.parametrize("fmt", _pick([(f,) for f in PER_TENSOR], (0,)))
@given(data=st.data())
def test_per_tensor_any_scale(fmt, data):
  """Raw bit patterns times any scale bit pattern (NaN, Inf, 0, subnormal included)."""
  x = data.draw(fpt.bit_pattern_arrays(np.float32, (9, 70), formats=QUANTIZED[fmt].element))
  scale = np.array(np.uint32(data.draw(st.one_of(
      st.integers(-30, 30).map(lambda k: int(np.float32(2.0**k).view(np.uint32))),
      fpt.float32_bits())))).view(np.float32)
  _check(x, fmt, scale=jnp.asarray(scale), transpose=True)


# ----------------------------------------------------------------------------------------
# Stochastic rounding: the element at flat index i of x (of x.T for the transposed output)
# draws threefry2x32(key; i, 0)[0].

@pytest.mark.parametrize("fmt,block_shape,sr_bits", _pick(
    [(f, b, (8, 1, 24)[i % 3]) for i, (f, b) in enumerate(LAYOUTS)], (0, 4, 5)))
def test_stochastic_rounding(fmt, block_shape, sr_bits):
  x = _specials(SHAPE, jnp.bfloat16, seed=2, fmt=fmt)
  scale = jnp.float32(0.75) if fmt in PER_TENSOR else None
  _check(x, fmt, block_shape=block_shape, scale=scale, transpose=True,
         sr=(jax.random.key(7), sr_bits))


# ----------------------------------------------------------------------------------------
# Shapes: edges of one element, single rows / columns, the default tiles.

@pytest.mark.parametrize("fmt,shape,dtype", _pick([
    ("mxfp4", (1, 1), np.float32), ("nvfp4", (3, 17), jnp.bfloat16),
    ("mxfp8", (1, 33), np.float16), ("e5m2", (65, 3), np.float32),
    ("mxfp8_e5m2", (64, 96), jnp.bfloat16)], (0,)))
def test_odd_shapes_default_tiles(fmt, shape, dtype):
  x = _specials((max(shape[0], 10), max(shape[1], 71)), seed=3)[:shape[0], :shape[1]]
  with np.errstate(over="ignore"):
    x = x.astype(dtype) if dtype is not np.float32 else x
  scale = jnp.float32(1.5) if fmt in PER_TENSOR else None
  _check(x, fmt, scale=scale, transpose=True, config=None)


def test_amax_ignores_nonfinite_and_is_zero_without_finite_values():
  x = np.full((5, 40), np.nan, np.float32)
  x[1, 3] = np.inf
  got = quantize_2d(x, fmt="mxfp8", interpret=INTERPRET, config=SMALL)
  assert _u(got.amax) == 0
  x[2, 39] = -3.0
  got = quantize_2d(x, fmt="mxfp8", interpret=INTERPRET, config=SMALL)
  assert _u(got.amax) == _u(np.float32(3.0))


# Many programs with the table's tiles (slow in interpret mode; the GPU runs set SLOW).
LARGE = (1000, 4100) if ON_GPU else (130, 300)


@pytest.mark.slow
@pytest.mark.parametrize("fmt,block_shape", LAYOUTS)
def test_default_tiles_large(fmt, block_shape):
  x = _specials(LARGE, jnp.bfloat16, seed=5, fmt=fmt)
  scale = jnp.float32(0.5) if fmt in PER_TENSOR else None
  _check(x, fmt, block_shape=block_shape, scale=scale, transpose=True, config=None)
  _check(x, fmt, block_shape=block_shape, scale=scale, config=None,
         sr=(jax.random.key(11), 8))


@pytest.mark.parametrize("fmt,block_shape,float_encode,shape", _pick(
    [(f, b, fe, sh) for i, (f, b) in enumerate(LAYOUTS) for fe in (False, True)
     for sh in ((64, 128), SHAPE)], (3, 10, 14, 22, 24)))
def test_both_encoders_on_exact_and_ragged_tiles(fmt, block_shape, float_encode, shape):
  """QuantizeConfig.float_encode off (integer encoder) and on (float adds for e2m1, the fp8
  conversion), on a shape the tiles cover exactly (plain offsets, no masks) and a ragged
  one, both orientations."""
  x = _specials(shape, jnp.bfloat16, seed=8, fmt=fmt)
  scale = jnp.float32(0.75) if fmt in PER_TENSOR else None
  _check(x, fmt, block_shape=block_shape, scale=scale, transpose=True,
         config=QuantizeConfig(16, 32, float_encode=float_encode))


@pytest.mark.parametrize("fmt,block_shape,fp", _pick(
    [(f, b, fp) for f, b in [("nvfp4", (16,)), ("nvfp4", (16, 16))]
     + [(f, None) for f in PER_TENSOR] + [(f, None) for f in MX] for fp in (True, False)],
    (0, 8, 11)))
def test_float_and_integer_products(fmt, block_shape, fp):
  """QuantizeConfig.float_products True (the float32 multiply instruction for the products,
  the default compiled) and False (integer ops, the default in interpret mode), each mode
  where the other is the default. With the float multiply on the CPU (XLA flushes float32
  subnormals) only inputs whose operands and products stay normal (NaN and Inf included);
  compiled on the GPU, the specials with subnormals too."""
  rng = np.random.default_rng(6)
  x = (rng.standard_normal(SHAPE) * 2.0 ** rng.integers(-20, 20, SHAPE)).astype(np.float32)
  x[0, 3], x[1, 40], x[2, 70] = np.nan, -np.nan, -np.inf
  x[7] = np.resize(_ties(QUANTIZED[fmt].element), SHAPE[1])
  if ON_GPU or not fp:
    x = _specials(SHAPE, fmt=fmt)
  cfg = QuantizeConfig(16, 32, float_products=fp)
  scale = jnp.float32(0.75) if fmt in PER_TENSOR else None
  _check(x, fmt, block_shape=block_shape, scale=scale, transpose=True, config=cfg)


@pytest.mark.parametrize("fmt,block_shape,shape,tpp", _pick(
    [("mxfp4", None, SHAPE, 4), ("nvfp4", (16, 16), (64, 96), 2), ("e4m3", None, SHAPE, 8),
     ("mxfp8", None, (64, 96), 4)], (0, 2)))
def test_programs_looping_over_tiles(fmt, block_shape, shape, tpp):
  """QuantizeConfig.tiles_per_program > 1 (a program loops over consecutive tiles, keeping a
  running amax), both orientations, ragged and exact shapes (12 tiles of 16 x 32 each)."""
  x = _specials(shape, jnp.bfloat16, seed=9, fmt=fmt)
  scale = jnp.float32(0.75) if fmt in PER_TENSOR else None
  _check(x, fmt, block_shape=block_shape, scale=scale, transpose=True,
         config=QuantizeConfig(16, 32, tiles_per_program=tpp))


def test_tiles_per_program_resolution():
  """None: 1 without delayed scaling, about 1024 programs with it; always a power of two
  that divides the tile count."""
  tpp = K._tiles_per_program
  assert tpp(None, 65536, False) == 1 and tpp(None, 65536, True) == 64
  assert tpp(None, 256, True) == 1 and tpp(None, 3 * 4096, True) == 8
  assert tpp(8, 12, False) == 4 and tpp(4, 7, True) == 1 and tpp(16, 64, False) == 16


@pytest.mark.parametrize("fmt,tpp,shape", [("e4m3", 4, SHAPE), ("nvfp4", None, (64, 96))])
def test_delayed_fold_over_looping_programs(fmt, tpp, shape):
  """The in-launch fold with programs looping over tiles: the same amax, history and next
  scale as DelayedScaling.update, the codes of quantize with the old scale."""
  x = _specials(shape, np.float32, seed=12)
  hist = np.array([3.0, 250.0, 0.0, 7.0, 1e-3], np.float32)
  scale = np.float32(0.375)
  got = quantize_2d(x, fmt=fmt, scale=scale, history=hist, interpret=INTERPRET,
                    config=QuantizeConfig(16, 32, tiles_per_program=tpp))
  state = dataclasses.replace(sc.DelayedScaling.create(fmt, 5), amax_history=jnp.asarray(hist),
                              scale=jnp.float32(scale))
  new = state.update(fp8lab.tensor_amax(x))
  np.testing.assert_array_equal(_u(got.history), _u(new.amax_history))
  assert _u(got.next_scale) == _u(new.scale)
  assert _u(got.amax) == _u(fp8lab.tensor_amax(x))
  want = fp8lab.quantize_with_amax(x, fmt, scaling=state, implementation="reference").q
  np.testing.assert_array_equal(np.asarray(got.data), np.asarray(want.data))
  if want.scales is not None:
    np.testing.assert_array_equal(np.asarray(got.scales), np.asarray(want.scales))


_FP8_CVT = re.compile(r"tt\.fp_to_fp %\w+, rounding = rtne : tensor<[0-9x]+xf32> -> "
                      r"tensor<[0-9x]+xf8E(4M3FN|5M2)>")


def _fp8_lines_are_conversions(ir: str) -> bool:
  """Every line of ir that names an fp8 type is a float32 -> fp8 conversion rounding to
  nearest even (cvt.rn.satfinite) or the bitcast of its result to i8."""
  for line in ir.splitlines():
    if "f8E" in line and not (_FP8_CVT.search(line) or (
        "tt.bitcast" in line and re.search(r"xf8E\w+> -> tensor<[0-9x]+xi8>", line))):
      return False
  return True


@pytest.mark.parametrize("fmt,margin,algo,tpp", [("e4m3", 0, "max", 1), ("nvfp4", -1, "max", 4),
                                                 ("e5m2", 2, "most_recent", 2)])
def test_delayed_fold_lowers_for_cuda(fmt, margin, algo, tpp):
  """The in-launch delayed-scaling fold lowers to Triton IR for an H200 (the H200 run of
  2026-12-02 failed there: a negated constant margin): an atomic unsigned max for the amax,
  an atomic add for the done count, no float division; with programs looping over tiles, a
  loop (scf.for) and still one pair of atomics."""
  f = functools.partial(quantize_2d, fmt=fmt, scale=1.0, margin=margin,
                        history=np.ones(24, np.float32), history_algo=algo,
                        config=QuantizeConfig(16, 256, 8, tiles_per_program=tpp))
  ir = triton_irs(f, jax.ShapeDtypeStruct((96, 512), jnp.bfloat16))[-1]
  assert ir.count("tt.atomic_rmw umax") >= 1 and "tt.atomic_rmw add" in ir
  assert ("scf.for" in ir) == (tpp > 1)
  assert "divf" not in ir


def test_lowers_for_cuda_without_float_division_or_fp8():
  """Every layout, both orientations (stochastic rounding: its code is a superset) lower to
  Triton IR for an H200 from this host (an abstract GPU device): no float division
  (approximate there); fp8 types only in the float32 -> fp8 conversion of
  QuantizeConfig.float_encode (to nearest even; the default) and none without it; float
  multiplies only with QuantizeConfig.float_products (tried on the layouts that multiply,
  MX included)."""
  runs = [(fmt, b, (1, 2), False, None, fe) for fmt, b in LAYOUTS for fe in (False, True)]
  runs += [(fmt, b, None, True, None, True) for fmt, b in LAYOUTS]
  # The fused Hadamard rotation (rows only), integer and float arithmetic.
  runs += [(fmt, b, (1, 2), fp, h, True)
           for fmt, b, h in (("mxfp4", (32,), 32), ("nvfp4", (16,), 16), ("e4m3", None, 16))
           for fp in (False, True)]
  for fmt, block_shape, sr, fp, had, fe in runs:
    f = functools.partial(quantize_2d, fmt=fmt, block_shape=block_shape,
                          transpose=had is None,
                          scale=1.0 if fmt in PER_TENSOR or had else None, key_words=sr,
                          hadamard=None if had is None else (had, np.zeros(had, np.uint32)),
                          config=QuantizeConfig(16, 256, 8, float_products=fp,
                                                float_encode=fe))
    irs = triton_irs(f, jax.ShapeDtypeStruct((96, 320), jnp.bfloat16))
    # nvfp4's first pass (amax) unless S_enc is given
    assert len(irs) == (2 if fmt == "nvfp4" and had is None else 1)
    for ir in irs:
      assert "tt.func" in ir
      assert "divf" not in ir
      assert _fp8_lines_are_conversions(ir) if fe else "f8E" not in ir
      # math.ctlz (clz of a uint32) lowers here but Triton cannot compile it (H200 run of
      # 2026-12-01): clz must go through int32 (__nv_clz)
      assert "math.ctlz" not in ir
    # fp8 elements rounded to nearest even with float_encode, and nvfp4's E4M3 scale codes
    # (nearest even whatever the elements' rounding): the conversion instruction
    assert (_FP8_CVT.search(irs[-1]) is not None) == (fe and (
        (sr is None and QUANTIZED[fmt].element.bits == 8) or fmt == "nvfp4"))
    assert ("arith.mulf" in irs[-1]) == fp
