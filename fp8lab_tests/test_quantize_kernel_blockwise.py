"""The Pallas quantize kernel on blockwise FP8 ("e4m3_block" / "e5m2_block", docs/numerics.md
section 8b): 1D blocks of 16 .. 256 and 128 x 128 tiles, scale modes "exact" / "pow2".

Every expected value comes from the golden model (fp8lab.quantize, implementation
"reference") and is compared bit for bit: uint32 words, the float32 scales' uint32 bits, the
amax's bits. Inputs: hand-made arrays (NaN of both signs, +-Inf, -0, float32 subnormals, zero
blocks, NaN / Inf-only blocks, amaxes at the FLT_MAX overflow of fp8_max / amax, saturating
values, ties of the element grid) in shapes that are multiples of neither the blocks nor the
tiles, and hypothesis patches of raw bit patterns (fp8lab.testing.block_arrays).

Default (CPU): Pallas interpret mode on a few cases, each a fresh compile (the time goes
there); the other cases are marked slow (FP8LAB_SLOW_TESTS=1). FP8LAB_GPU_TESTS=1 runs them
compiled.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import jax
import jax.numpy as jnp
from hypothesis import HealthCheck, given, settings, strategies as st
import numpy as np
import pytest

import fp8lab
from fp8lab import testing as fpt
from fp8lab.formats import BLOCK_SCALE_MODES, QUANTIZED
from fp8lab.kernels.quantize import QuantizeConfig, quantize_2d
from fp8lab.kernels.quantize import blockwise
from fp8lab.kernels.quantize.blockwise import TRANSPOSE_MAX_BLOCK
from fp8lab.numerics import random as fp8_random
from fp8lab.ops.quantize import kernel_serves
from fp8lab.quantized import quantize as golden_quantize
from fp8lab_tests.lowering import triton_irs
from fp8lab_tests.switches import ON_GPU

warnings.filterwarnings("ignore", message=".*Triton.*deprecated.*")
warnings.filterwarnings("ignore", message=".*Pallas Triton backend is deprecated.*")

INTERPRET = not ON_GPU
BLOCKWISE = tuple(n for n, q in QUANTIZED.items() if q.scaling == "block")
BLOCKS = tuple((b,) for b in blockwise.BLOCK_LENGTHS) + (blockwise.TILE,)
X_DTYPES = (np.float32, jnp.bfloat16, np.float16)
# Small tiles (the grain raises them to whole blocks): several programs along both axes.
SMALL = QuantizeConfig(16, 32)
# Neither a multiple of any block nor of the tiles; 2 x 3 tiles of 128 x 128, the last ones
# partial in both directions.
SHAPE = (200, 300)


def _cases(cases, default):
  """pytest params of `cases` (tuples): the indices in `default` run by default, the others
  are marked slow (interpret-mode compiles dominate this file's time)."""
  return [pytest.param(*c, marks=() if i in default else pytest.mark.slow)
          for i, c in enumerate(cases)]


def _u(a):
  """Bit patterns (float32 -> uint32; integer arrays as they are)."""
  a = np.asarray(a)
  return a.view(np.uint32) if a.dtype == np.float32 else a


def _ties(elem):
  """The element grid's values and midpoints (ties), max_finite leading every 16: blocks
  whose scale is a power of two keep them values and ties after scaling."""
  vals = np.arange(1 << elem.bits, dtype=np.uint8).view(elem.dtype).astype(np.float64)
  grid = np.unique(np.abs(vals[np.isfinite(vals)]))
  pts = np.concatenate([(grid[:-1] + grid[1:]) / 2, grid])
  pts[::16] = elem.max_finite
  return pts.astype(np.float32)


def _specials(shape, dtype=np.float32, seed=0, fmt="e4m3_block"):
  """Wide-range values with the hard cases placed by hand, in rows (1D blocks see each row's
  kind in every block) and, below row 128, in whole 128 x 128 tiles (the tile layout sees
  each kind as a tile): see the module docstring."""
  rng = np.random.default_rng(seed)
  r, c = shape
  elem = QUANTIZED[fmt].element
  fmax = np.float32(elem.max_finite)
  x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-30, 30, shape)).astype(np.float32)
  sub = lambda n: rng.integers(1, 1 << 23, n, dtype=np.uint32).view(np.float32)
  sgn = lambda n: np.where(rng.random(n) < 0.5, -1, 1).astype(np.float32)
  # fp8_max / amax overflows float32 below this amax (scale FLT_MAX, 2^127 in "pow2")
  edge = np.float32(fmax / np.float32(3.4028235e38))
  x[0, 3], x[1, 40], x[2, 70], x[r - 1, c - 1] = np.nan, -np.nan, np.inf, -np.inf
  x[3, :] = 0.0
  x[4, :] = -0.0
  x[4, 32:64] = np.nan * sgn(32)                           # NaN-only / Inf-only blocks
  x[4, 64:128:2] = np.inf
  x[5, :] = sub(c) * sgn(c)                                # subnormal blocks: FLT_MAX
  x[6, :] = np.float32(3.4e38) * sgn(c)                    # huge blocks, +-Inf saturating
  x[6, 5::37] = np.inf * sgn(len(range(5, c, 37)))
  x[7, :] = rng.choice(np.float32([0.25, 0.75, 1.25, 2.5, 464.0, 5.0, 1.75, 3.5]), c)
  x[8, :] = (edge * np.float32(1 + 2.0**-22) ** rng.integers(-8, 8, c)).astype(np.float32)
  x[9, :16] = np.float32(2.0**-149)
  x[9, 16:] = -0.0
  for row, k in ((10, 0), (11, -40), (12, 60)):            # ties at a power-of-two scale
    x[row] = np.resize(np.roll(_ties(elem), row), c) * sgn(c) * np.float32(2.0**k)
  x[13, :] = (fmax * np.float32(1 + 2.0**-5) ** rng.integers(-3, 4, c)) * sgn(c)
  x[13, ::16] = fmax * np.float32(1.1)                     # others round at / to the max
  x[14:, 17] = np.float32(448.0 * 1.0625)
  if r > 128:                                              # second tile row: one kind a tile
    t = slice(128, r)
    n = (r - 128, min(c, 128))
    x[t, :128] = (np.resize(_ties(elem), n) * np.float32(2.0**-20))
    x[t, 128:256] = 0.0
    x[t, 128:256:3] = -0.0
    x[t, 256:] = sub(x[t, 256:].size).reshape(x[t, 256:].shape)
    if r > 150 and c > 260:
      x[150, 260] = np.nan
  with np.errstate(over="ignore", invalid="ignore"):
    return x.astype(dtype)


def _golden(x, fmt, block_shape, mode, sr=None):
  kw = dict(block_shape=block_shape, scale_mode=mode)
  if sr is not None:
    kw.update(rounding="stochastic", key=sr[0], sr_bits=sr[1])
  return fp8lab.quantize(x, fmt, implementation="reference", **kw)


def _check(x, fmt, block_shape, mode, *, transpose=None, sr=None, config=SMALL):
  """quantize_2d against the golden model (of x and of x.T), bit for bit. transpose None:
  wherever the kernel serves it (1D blocks up to TRANSPOSE_MAX_BLOCK, 128 x 128 tiles)."""
  if transpose is None:
    transpose = len(block_shape) == 2 or block_shape[0] <= TRANSPOSE_MAX_BLOCK
  key_words = None if sr is None else fp8_random.key_words(sr[0])
  got = quantize_2d(x, fmt=fmt, scale_mode=mode, block_shape=block_shape,
                    transpose=transpose, key_words=key_words,
                    sr_bits=8 if sr is None else sr[1], interpret=INTERPRET, config=config)
  want = _golden(x, fmt, block_shape, mode, sr)
  np.testing.assert_array_equal(np.asarray(got.data), np.asarray(want.data), "data")
  assert got.scales.dtype == np.float32 and got.scales.shape == want.scales.shape
  np.testing.assert_array_equal(_u(got.scales), _u(want.scales), "scales")
  assert got.tensor_scale is None
  assert _u(got.amax) == _u(fp8lab.tensor_amax(x)), "amax"
  if transpose:
    want_t = _golden(jnp.asarray(x).T, fmt, block_shape, mode, sr)
    np.testing.assert_array_equal(np.asarray(got.data_t), np.asarray(want_t.data), "data_t")
    assert got.scales_t.shape == want_t.scales.shape
    np.testing.assert_array_equal(_u(got.scales_t), _u(want_t.scales), "scales_t")
  else:
    assert got.data_t is None and got.scales_t is None
  return got


# ----------------------------------------------------------------------------------------
# What is served.

def test_kernel_serves_power_of_two_blocks_and_the_tile_only():
  def why(fmt, block_shape, shape=(8, 512), **kw):
    meta = jax.eval_shape(functools.partial(golden_quantize, fmt=fmt, block_shape=block_shape,
                                            **kw),
                          jax.ShapeDtypeStruct(shape, jnp.float32))
    return kernel_serves(meta, ndim=len(shape), transpose=False, has_scale=False)

  for (fmt, b), mode in zip(itertools.product(BLOCKWISE, BLOCKS),
                           itertools.cycle(BLOCK_SCALE_MODES)):
    assert why(fmt, b, scale_mode=mode) is None, (fmt, b)
  assert why("e4m3_block", None, shape=(2, 3, 130)) is None           # leading axes folded
  for b in ((80,), (8,), (1,), (512,), (96,)):
    assert "does not serve 'e4m3_block' with block_shape" in why("e4m3_block", b)
  assert "2D x only" in why("e5m2_block", (128, 128), shape=(2, 128, 128))
  assert "last axis" in why("e4m3_block", None, axis=0)
  assert "Hadamard" in why("e4m3_block", None, hadamard=16)


def test_unserved_blocks_raise_for_pallas_and_take_the_golden_model_by_default():
  x = _specials((16, 200), seed=9)
  with pytest.raises(ValueError, match=r"cannot serve this call: the kernel does not serve "
                     r"'e4m3_block' with block_shape \(80,\)"):
    fp8lab.quantize(x, "e4m3_block", block_shape=(80,), implementation="pallas",
                    interpret=True)
  with pytest.raises(ValueError, match=r"block_shape \(80,\)"):
    quantize_2d(x, fmt="e4m3_block", block_shape=(80,), interpret=True)
  with pytest.raises(ValueError, match="scale_mode"):
    quantize_2d(x, fmt="e4m3_block", scale_mode="floor", interpret=True)
  with pytest.raises(ValueError, match="Hadamard"):
    quantize_2d(x[:, :128], fmt="e4m3_block", interpret=True,
                hadamard=(16, np.zeros(16, np.uint32)))
  got = fp8lab.quantize(x, "e4m3_block", block_shape=(80,), scale_mode="pow2")
  want = _golden(x, "e4m3_block", (80,), "pow2")
  np.testing.assert_array_equal(np.asarray(got.data), np.asarray(want.data))
  np.testing.assert_array_equal(_u(got.scales), _u(want.scales))


# ----------------------------------------------------------------------------------------
# The kernel (quantize_2d) on the specials, both orientations.

_SPECIAL_CASES = [(f, b, m, X_DTYPES[i % 3]) for i, (b, f, m) in enumerate(
    itertools.product(BLOCKS, BLOCKWISE, BLOCK_SCALE_MODES))]
# The default run (each case is a compile) has every format, mode and dtype: e4m3 16 pow2
# bf16, e5m2 256 exact f32, e4m3 tile exact f16; the other tests' defaults have 32, 64, 128.
_SPECIAL_DEFAULT = (1, 18, 20)


@pytest.mark.parametrize("fmt,block_shape,mode,dtype",
                         _cases(_SPECIAL_CASES, _SPECIAL_DEFAULT))
def test_specials_both_orientations(fmt, block_shape, mode, dtype):
  _check(_specials(SHAPE, dtype, seed=1, fmt=fmt), fmt, block_shape, mode)


# ----------------------------------------------------------------------------------------
# Hypothesis: raw bit patterns, each block with its own magnitude, patched into the
# specials (hypothesis cannot draw SHAPE's elements one by one).

HYP = settings(max_examples=12 if INTERPRET else 100,
               suppress_health_check=[HealthCheck.large_base_example, HealthCheck.too_slow,
                                      HealthCheck.data_too_large])
_HYP_SHAPE = (40, 300)


@HYP
@pytest.mark.parametrize("fmt,block_shape,mode,dtype", _cases(
    [("e4m3_block", (16,), "exact", np.float32), ("e5m2_block", (32,), "pow2", jnp.bfloat16),
     ("e4m3_block", (128,), "pow2", np.float16), ("e5m2_block", (256,), "exact", np.float32),
     ("e4m3_block", (128, 128), "exact", jnp.bfloat16)], (1,)))
@given(data=st.data())
def test_block_arrays(fmt, block_shape, mode, dtype, data):
  tiles = len(block_shape) == 2
  base = _specials(SHAPE if tiles else _HYP_SHAPE, seed=4, fmt=fmt)
  patch_shape = (128, 128) if tiles else (4, 64)
  patch = data.draw(fpt.block_arrays(fmt, patch_shape, block_shape=block_shape))
  r0 = data.draw(st.integers(0, base.shape[0] - patch_shape[0]))
  c0 = data.draw(st.integers(0, base.shape[1] - patch_shape[1]))
  base[r0:r0 + patch_shape[0], c0:c0 + patch_shape[1]] = patch
  with np.errstate(over="ignore", invalid="ignore"):
    x = base.astype(dtype)
  _check(x, fmt, block_shape, mode)


# ----------------------------------------------------------------------------------------
# Stochastic rounding: element (r, c) draws threefry2x32(key; r * C + c, 0)[0] (x.T's own
# flat index for the transposed output; the tile layout encodes x.T's codes anew). Slow
# only: the op's default cases round stochastically (folded rows; the tile, transposed).

@pytest.mark.parametrize("fmt,block_shape,mode,sr_bits", _cases(
    [(f, b, BLOCK_SCALE_MODES[i % 2], (8, 1, 24)[i % 3])
     for i, (b, f) in enumerate(itertools.product(BLOCKS, BLOCKWISE))], ()))
def test_stochastic_rounding(fmt, block_shape, mode, sr_bits):
  x = _specials(SHAPE, jnp.bfloat16, seed=2, fmt=fmt)
  _check(x, fmt, block_shape, mode, sr=(jax.random.key(7), sr_bits))


# ----------------------------------------------------------------------------------------
# The op: fp8lab.quantize_with_amax(..., implementation="pallas") against "reference",
# every leaf byte for byte (folded leading axes, transpose, stochastic rounding).

_OP_CASES = {
    "e4m3_default_3d_bf16_sr": ("e4m3_block", dict(shape=(3, 7, 200), dtype=jnp.bfloat16,
                                                   rounding="stochastic")),
    "e5m2_tile_pow2_t_sr": ("e5m2_block", dict(block_shape=(128, 128), scale_mode="pow2",
                                               transpose=True, rounding="stochastic")),
    "e4m3_16_pow2_t_sr_f16": ("e4m3_block", dict(block_shape=(16,), scale_mode="pow2",
                                                 transpose=True, rounding="stochastic",
                                                 sr_bits=3, dtype=np.float16)),
    "e5m2_64_f32": ("e5m2_block", dict(block_shape=(64,), shape=(33, 150))),
    "e4m3_tile_f16": ("e4m3_block", dict(block_shape=(128, 128), dtype=np.float16,
                                         shape=(129, 257))),
}


_OP_DEFAULT = ("e4m3_default_3d_bf16_sr", "e5m2_tile_pow2_t_sr")


@pytest.mark.parametrize("case", [pytest.param(k, marks=() if k in _OP_DEFAULT else
                                               pytest.mark.slow) for k in sorted(_OP_CASES)])
def test_op_matches_reference(case):
  fmt, kw = _OP_CASES[case]
  kw = dict(kw)
  shape = kw.pop("shape", SHAPE)
  dtype = kw.pop("dtype", np.float32)
  x2 = _specials((int(np.prod(shape[:-1])), shape[-1]), dtype, seed=len(case), fmt=fmt)
  x = jnp.asarray(x2).reshape(shape)
  if kw.get("rounding") == "stochastic":
    kw["key"] = jax.random.key(3)
  want = fp8lab.quantize_with_amax(x, fmt, implementation="reference", **kw)
  got = fp8lab.quantize_with_amax(x, fmt, implementation="pallas", interpret=INTERPRET, **kw)
  assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
  for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    g, w = np.asarray(g), np.asarray(w)
    assert g.dtype == w.dtype and g.shape == w.shape
    np.testing.assert_array_equal(g.reshape(-1).view(np.uint8), w.reshape(-1).view(np.uint8))
  assert got.q.scale_mode == want.q.scale_mode == kw.get("scale_mode", "exact")


# ----------------------------------------------------------------------------------------
# Shapes: single elements, rows and columns, the table's tiles.

@pytest.mark.parametrize("fmt,block_shape,mode,shape,dtype", _cases([
    ("e4m3_block", (128,), "exact", (1, 1), np.float32),
    ("e5m2_block", (128, 128), "pow2", (3, 17), jnp.bfloat16),
    ("e4m3_block", (256,), "pow2", (70, 3), np.float16),       # rows only (see below)
    ("e5m2_block", (64,), "exact", (1, 333), np.float32),
    ("e4m3_block", (128, 128), "exact", (260, 140), np.float32)], (3,)))
def test_odd_shapes_default_tiles(fmt, block_shape, mode, shape, dtype):
  x = _specials((max(shape[0], 16), max(shape[1], 140)), seed=3, fmt=fmt)[:shape[0], :shape[1]]
  with np.errstate(over="ignore"):
    x = x.astype(dtype)
  _check(x, fmt, block_shape, mode, config=None)
  if len(block_shape) == 1 and block_shape[0] > TRANSPOSE_MAX_BLOCK:
    with pytest.raises(ValueError, match="transpose=True for 1D blocks up to 128"):
      quantize_2d(x, fmt=fmt, scale_mode=mode, block_shape=block_shape, transpose=True,
                  interpret=INTERPRET)


@pytest.mark.slow
@pytest.mark.parametrize("block_shape", [(128,), (128, 128)])
def test_float_products(block_shape):
  """QuantizeConfig.float_products: fl(x * scale) by the float32 multiply. On the CPU
  (XLA flushes float32 subnormals) only inputs whose products stay normal; compiled, the
  specials with subnormals (and FLT_MAX scales) too."""
  rng = np.random.default_rng(6)
  x = (rng.standard_normal(SHAPE) * 2.0 ** rng.integers(-20, 20, SHAPE)).astype(np.float32)
  x[0, 3], x[1, 40], x[2, 70], x[3, :] = np.nan, -np.nan, -np.inf, 0.0
  if ON_GPU:
    x = _specials(SHAPE, seed=6)
  _check(x, "e4m3_block", block_shape, "exact",
         config=QuantizeConfig(16, 32, float_products=True))


# ----------------------------------------------------------------------------------------
# Triton lowering for the GPU, from this host.

def test_lowers_for_cuda_without_float_division_or_fp8():
  """The blockwise layouts lower to Triton IR for an H200 (an abstract GPU device), both
  orientations with stochastic rounding (the largest code): no float division (approximate
  there: the per-block fl(fp8_max / amax) and fl(1 / scale) are integer long divisions), no
  fp8 types (saturating casts), no math.ctlz (Triton cannot compile it); a float multiply
  only with QuantizeConfig.float_products."""
  runs = [("e4m3_block", (16,), "exact", False), ("e5m2_block", (128,), "pow2", False),
          ("e4m3_block", (256,), "exact", False), ("e5m2_block", (128, 128), "pow2", False),
          ("e4m3_block", (128, 128), "exact", True), ("e5m2_block", (64,), "pow2", True)]
  for fmt, block_shape, mode, fp in runs:
    f = functools.partial(quantize_2d, fmt=fmt, block_shape=block_shape, scale_mode=mode,
                          transpose=len(block_shape) == 2 or block_shape[0] <= 128,
                          key_words=(1, 2),
                          config=QuantizeConfig(16, 256, 8, float_products=fp))
    (ir,) = triton_irs(f, jax.ShapeDtypeStruct((160, 320), jnp.bfloat16))  # no first pass
    assert "tt.func" in ir
    assert "divf" not in ir and "f8E" not in ir and "math.ctlz" not in ir
    assert "arith.divui" in ir                             # the integer long division
    assert ("arith.mulf" in ir) == fp
