"""Tests of the op scaffolding (fp8lab/ops/_op.py) and of gemv_packed's "xla" implementation.

The "xla" path must build the weights dequantize gives, bit for bit (its xla_values; XLA
may flush a float32 subnormal product to a zero of its sign), and
with x = the identity each output is one product 1 * w plus exact zeros, so
gemv_packed(w, I) is dequantize(w).T exactly where w is a normal float32 or zero (XLA:CPU's
dot flushes subnormal products, the reference path's too; a NaN or Inf weight makes its
whole column non-finite through 0 * w). Weights are arbitrary raw codes and scales
(fp8lab.testing.quantized_arrays), not outputs of quantize.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fp8lab
from fp8lab.formats import LAYOUTS
from fp8lab.ops import _op
from fp8lab.ops._xla import xla_values
from fp8lab.ops.gemv import PARTS_FORMATS, _bf16_parts, _bf16_weight
from fp8lab.quantized import QuantizedArray
from fp8lab.testing import quantized as fqt

_ON_GPU = jax.default_backend() == "gpu"


def _bits_or_zero(a) -> np.ndarray:
  """float32 bit patterns with both zeros as 0 (sums of products with 0 lose -0's sign)."""
  a = np.asarray(a, np.float32)
  return np.where(a == 0, np.uint32(0), a.view(np.uint32))


def _subnormal(a) -> np.ndarray:
  a = np.abs(np.asarray(a, np.float32))
  return (a < np.float32(2.0**-126)) & (a != 0)


def _block_factor(q) -> np.ndarray:
  """Each weight's block scale factor as float32 (1 without block scales), in numpy: MX
  2^(code - 127), NVFP4 fl(e4m3 value * S_dec), blockwise FP8 the float32 scale itself."""
  n, k = q.shape
  if q.scales is None:
    return np.ones((n, k), np.float32)
  codes = np.asarray(q.scales)
  if codes.dtype == np.float32:                     # e4m3_block / e5m2_block
    f = codes
  elif q.format.startswith("mx"):
    f = np.ldexp(np.float64(1), codes.astype(np.int32) - 127)   # 0xFF: 2^128, a NaN block
  else:
    f = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * np.float32(q.tensor_scale)
  rows, cols = q.block_shape if len(q.block_shape) == 2 else (1, q.block_shape[0])
  return np.repeat(np.repeat(f, rows, axis=0), cols, axis=1)[:n, :k]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_xla_path_multiplies_the_dequantized_weights(layout):
  fmt, block_shape = LAYOUTS[layout]
  k = 48 if block_shape is None or len(block_shape) == 1 else 40

  @settings(max_examples=15)
  @given(q=fqt.quantized_arrays(fmt, (24, k), 1, block_shape=block_shape))
  def check(q):
    # XLA flushes float32 subnormals to zero, operands too: a subnormal tensor scale (the raw
    # strategy draws them; quantize never makes one) would read as 0, so it is made normal; a
    # subnormal weight or block factor (MX code 0 is 2^-127) may give a zero of its sign;
    # everything else is exact.
    if q.tensor_scale is not None and _subnormal(q.tensor_scale):
      ts_bits = np.asarray(q.tensor_scale, np.float32).view(np.uint32) | np.uint32(0x00800000)
      q = QuantizedArray(q.data, q.scales, ts_bits.view(np.float32), format=q.format,
                         element_format=q.element_format, shape=q.shape, axis=q.axis,
                         block_shape=q.block_shape, scale_mode=q.scale_mode, hadamard=None)
    wd = np.asarray(fp8lab.dequantize(q))                          # (n_out, k)
    wx = np.asarray(jax.jit(xla_values)(q)).view(np.uint32)
    want = wd.view(np.uint32)
    sub = _subnormal(wd) | _subnormal(_block_factor(q))
    flushed = sub & (wx == want & np.uint32(0x80000000))
    nan = np.isnan(wd)                     # a NaN is a NaN: its sign and payload carry nothing
    assert np.array_equal(np.isnan(wx.view(np.float32)), nan)
    np.testing.assert_array_equal(np.where(flushed | nan, want, wx), want)
    eye = jnp.eye(k, dtype=jnp.float32)
    y = np.asarray(jax.jit(lambda w, x: fp8lab.gemv_packed(w, x, implementation="xla"))(q, eye))
    wd = wd.T
    bad_col = ~np.all(np.isfinite(wd), axis=0)
    assert not np.any(np.isfinite(y[:, bad_col]))        # Inf on the diagonal, else NaN
    good = ~bad_col[None, :] & ~sub.T
    np.testing.assert_array_equal(_bits_or_zero(y[good]), _bits_or_zero(wd[good]))

  check()


@pytest.mark.parametrize("fmt,block", [("e4m3_block", (64,)), ("e5m2", None), ("mxfp8", None),
                                       ("nvfp4", None), ("mxfp4", None), ("bf16", None)])
def test_xla_values_of_a_kv_cache_are_its_rows_decoded(fmt, block):
  """A 4D array (B, S, H, D) quantized along D (a KV cache): xla_values is, bit for bit, the
  decode of the same words viewed as one 2D array of rows (the layouts tested above), and
  dequantize's values wherever no subnormal is flushed."""
  @settings(max_examples=15)
  @given(q=fqt.quantized_arrays(fmt, (2, 3, 2, 64), 3, block_shape=block))
  def check(q):
    if q.tensor_scale is not None:     # a normal tensor scale (see the test above), so that
      ts = np.asarray(q.tensor_scale, np.float32).view(np.uint32)   # products stay normal
      q = QuantizedArray(q.data, q.scales, (ts | np.uint32(0x3F000000)).view(np.float32),
                         format=q.format, element_format=q.element_format, shape=q.shape,
                         axis=q.axis, block_shape=q.block_shape, scale_mode=q.scale_mode,
                         hadamard=None)
    rows = QuantizedArray(q.data.reshape(12, -1),
                          None if q.scales is None else q.scales.reshape(12, -1),
                          q.tensor_scale, format=q.format, element_format=q.element_format,
                          shape=(12, 64), axis=1, block_shape=q.block_shape,
                          scale_mode=q.scale_mode, hadamard=None)
    got = np.asarray(jax.jit(xla_values)(q)).view(np.uint32)
    np.testing.assert_array_equal(got.reshape(12, 64),
                                  np.asarray(jax.jit(xla_values)(rows)).view(np.uint32))
    want = np.asarray(fp8lab.dequantize(q))
    ok = ~(_subnormal(want) | _subnormal(_block_factor(rows).reshape(want.shape))
           | np.isnan(want))
    np.testing.assert_array_equal(got[ok], want.view(np.uint32)[ok])
  check()
  # and a cache quantize made from normal data: every value normal, all equal
  x = jax.random.normal(jax.random.key(3), (2, 3, 2, 64), jnp.float32)
  q = fp8lab.quantize(x, fmt, block_shape=block)
  np.testing.assert_array_equal(np.asarray(jax.jit(xla_values)(q)).view(np.uint32),
                                np.asarray(fp8lab.dequantize(q)).view(np.uint32))
  with pytest.raises(ValueError, match="quantized along its last axis"):
    xla_values(fp8lab.quantize(jnp.ones((4, 64)), "e4m3", axis=0))


@pytest.mark.parametrize("fmt", ["e4m3", "mxfp4", "nvfp4"])
@pytest.mark.parametrize("xdt", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_xla_path_agrees_with_reference_on_small_integers(fmt, xdt):
  # Small-integer weights and x: every product and partial sum is an integer below 2^24, so
  # any order of float32 additions gives the same bits.
  rng = np.random.default_rng(0)
  w = rng.integers(-3, 4, (20, 64)).astype(np.float32)
  x = rng.integers(-4, 5, (5, 64)).astype(np.float32)
  q = fp8lab.quantize(jnp.asarray(w), fmt)
  xa = jnp.asarray(x, xdt)
  y = fp8lab.gemv_packed(q, xa, implementation="xla")
  ref = fp8lab.gemv_packed(q, xa, implementation="reference")
  assert y.dtype == xdt
  np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(ref, np.float32))


def test_xla_path_with_hadamard_matches_reference():
  rng = np.random.default_rng(1)
  w = jnp.asarray(rng.standard_normal((16, 64)), jnp.float32)
  x = jnp.asarray(rng.standard_normal((3, 64)), jnp.float32)
  q = fp8lab.quantize(w, "mxfp4", hadamard=32)
  y = np.asarray(fp8lab.gemv_packed(q, x, implementation="xla"), np.float64)
  ref = np.asarray(fp8lab.gemv_packed(q, x, implementation="reference"), np.float64)
  # Both are float32 dots over the same float32 weights and rotated x: they differ only in
  # the order of k additions, <= (k - 1) u sum|w x| each.
  wd = np.asarray(q.dequantize(), np.float64)
  xr = np.asarray(fp8lab.hadamard(x, 32, axis=-1), np.float64)
  bound = 2 * 63 * 2.0**-24 * (np.abs(xr) @ np.abs(wd).T)
  assert np.all(np.abs(y - ref) <= bound)


def test_resolve_implementation():
  assert _op.resolve_implementation("op", None, True) == "pallas"
  assert _op.resolve_implementation("op", "xla", False) == "xla"
  assert _op.resolve_implementation("op", "reference", False) == "reference"
  assert _op.resolve_implementation("op", None, False) == ("pallas" if _ON_GPU else "reference")
  with pytest.raises(ValueError, match="implementation must be one of"):
    _op.resolve_implementation("op", "triton", False)
  with pytest.raises(TypeError, match="interpret must be a bool"):
    _op.resolve_implementation("op", None, 1)
  for impl in ("xla", "reference"):
    with pytest.raises(ValueError, match="interpret=True runs the Pallas kernel"):
      _op.resolve_implementation("op", impl, True)
  if not _ON_GPU:
    with pytest.raises(ValueError, match="needs a GPU"):
      _op.resolve_implementation("op", "pallas", False)
  assert "xla" in fp8lab.ops.IMPLEMENTATIONS


def test_gemv_errors_name_the_op():
  w = fp8lab.quantize(jnp.ones((8, 64)), "e4m3")
  with pytest.raises(ValueError, match="gemv_packed: implementation"):
    fp8lab.gemv_packed(w, jnp.ones((64,)), implementation="cuda")
  with pytest.raises(ValueError, match="gemv_packed: interpret=True"):
    fp8lab.gemv_packed(w, jnp.ones((64,)), implementation="xla", interpret=True)


@pytest.mark.parametrize("impl,interpret", [("xla", False), ("pallas", True)])
def test_every_implementation_has_the_reference_gradient(impl, interpret):
  rng = np.random.default_rng(2)
  q = fp8lab.quantize(jnp.asarray(rng.standard_normal((16, 64)), jnp.float32), "nvfp4")
  x = jnp.asarray(rng.standard_normal((2, 64)), jnp.float32)
  cot = jnp.asarray(rng.standard_normal((2, 16)), jnp.float32)

  def loss(impl_, interp):
    return lambda xx: jnp.sum(fp8lab.gemv_packed(q, xx, implementation=impl_,
                                                 interpret=interp) * cot)

  g = jax.grad(loss(impl, interpret))(x)
  g_ref = jax.grad(loss("reference", False))(x)
  np.testing.assert_array_equal(np.asarray(g).view(np.uint32), np.asarray(g_ref).view(np.uint32))


def test_fold_vmap_folds_foldable_operands_and_maps_the_others():
  calls = []

  def call(w, x):                      # (n, k) weight, (b, k) rows -> (b, n)
    calls.append((w.shape, x.shape))
    return x @ w.T

  op = _op.fold_vmap(call, foldable=(False, True))
  w = jnp.arange(12.0).reshape(3, 4)
  xs = jnp.arange(40.0).reshape(5, 2, 4)
  y = jax.vmap(lambda x: op(w, x))(xs)
  np.testing.assert_array_equal(y, jnp.einsum("nbk,ok->nbo", xs, w))
  assert ((3, 4), (10, 4)) in calls              # one call over the folded rows
  calls.clear()
  op = _op.fold_vmap(call, foldable=(False, True))
  ws = jnp.stack([w, 2 * w])
  y2 = jax.vmap(lambda w_, x: op(w_, x))(ws, xs[:2])
  np.testing.assert_array_equal(y2, jnp.einsum("nbk,nok->nbo", xs[:2], ws))
  assert calls and all(c == ((3, 4), (2, 4)) for c in calls)   # per example (lax.map)


def test_gemv_vmap_over_x_and_w_pallas_interpret():
  rng = np.random.default_rng(3)
  ws = [fp8lab.quantize(jnp.asarray(rng.integers(-3, 4, (16, 64)), jnp.float32), "mxfp8")
        for _ in range(2)]
  xs = jnp.asarray(rng.integers(-3, 4, (2, 3, 64)), jnp.float32)
  f = lambda w, x: fp8lab.gemv_packed(w, x, implementation="pallas", interpret=True)
  y = jax.vmap(lambda x: f(ws[0], x))(xs)
  want = np.stack([np.asarray(fp8lab.gemv_packed(ws[0], xs[i], implementation="reference"))
                   for i in range(2)])
  np.testing.assert_array_equal(np.asarray(y), want)
  wstack = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *ws)
  y2 = jax.vmap(f)(wstack, xs)
  want2 = np.stack([np.asarray(fp8lab.gemv_packed(ws[i], xs[i], implementation="reference"))
                    for i in range(2)])
  np.testing.assert_array_equal(np.asarray(y2), want2)


# ----------------------------------------------------------------------------------------
# gemv_packed's "xla_parts" implementation: exact bfloat16 weights and x parts.

_PARTS_LAYOUTS = sorted(n for n, (f, _) in LAYOUTS.items() if f in PARTS_FORMATS)


@pytest.mark.parametrize("layout", _PARTS_LAYOUTS)
def test_parts_weights_are_exact_bfloat16_values(layout):
  """_bf16_weight's values times its factor are the dequantized weights: the values equal the
  element times its block scale computed in float64 (so they are bfloat16 numbers, exactly),
  over raw codes and scales; the factor is the tensor scale (nvfp4: S_dec)."""
  fmt, block_shape = LAYOUTS[layout]
  k = 48 if block_shape is None or len(block_shape) == 1 else 40

  @settings(max_examples=10)
  @given(q=fqt.quantized_arrays(fmt, (24, k), 1, block_shape=block_shape))
  def check(q):
    values, factor = jax.jit(_bf16_weight)(q)
    got = np.asarray(values, np.float64)
    if fmt == "bf16":
      want = np.asarray(fp8lab.dequantize(q), np.float64)
    else:
      want = np.asarray(fp8lab.decode(jnp.asarray(q.codes()), q.element_format), np.float64)
    if q.scales is not None:
      if fmt.startswith("mx"):
        f = np.ldexp(1.0, np.asarray(q.scales).astype(np.int32) - 127)
        f = np.where(np.asarray(q.scales) == 0xFF, np.nan, f)
      else:
        f = np.asarray(q.scales).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
      rows, cols = q.block_shape if len(q.block_shape) == 2 else (1, q.block_shape[0])
      want = want * np.repeat(np.repeat(f, rows, 0), cols, 1)[:24, :k]
    with np.errstate(over="ignore"):     # float32 products as dequantize's: 2^128 is Inf
      want = want.astype(np.float32).astype(np.float64)
    if fmt.startswith("mx"):             # the xla path's float32 products: XLA may flush
      keep = ~((np.abs(want) < 2.0**-126) & (want != 0))
    else:
      keep = np.ones(want.shape, bool)
    both_nan = np.isnan(got) & np.isnan(want)
    np.testing.assert_array_equal(np.where(keep & ~both_nan, got, 0),
                                  np.where(keep & ~both_nan, want, 0))
    assert np.array_equal(np.isnan(got) & keep, np.isnan(want) & keep)
    if q.tensor_scale is None or fmt.startswith("mx"):
      assert factor is None
    else:
      assert np.asarray(factor).view(np.uint32) == np.asarray(q.tensor_scale).view(np.uint32)

  check()


def test_x_parts_sum_to_x():
  """_bf16_parts: bfloat16 x as itself; float32 / float16 x as three parts whose float32
  (and float64) sum is x for |x| >= 2^-103 (raw bit patterns of both signs, and zeros);
  below, where the low parts are float32 subnormals that XLA flushes, the top 8 significant
  bits survive (relative error < 2^-7)."""
  rng = np.random.default_rng(3)
  bits = rng.integers(24 << 23, 0x7F800000, 4000, dtype=np.uint32)      # |x| >= 2^-103
  bits[::2] |= np.uint32(0x80000000)
  x = np.concatenate([bits.view(np.float32), np.float32([0.0, -0.0, 1.0, 3.0e38])])
  parts = [np.asarray(p, np.float64) for p in _bf16_parts(jnp.asarray(x))]
  assert len(parts) == 3
  np.testing.assert_array_equal(parts[0] + parts[1] + parts[2], x.astype(np.float64))
  tiny = rng.integers(0x00800000, 24 << 23, 1000, dtype=np.uint32).view(np.float32)
  s = sum(np.asarray(p, np.float64) for p in _bf16_parts(jnp.asarray(tiny)))
  assert np.all(np.abs(s - tiny) < 2.0**-7 * np.abs(tiny))
  xb = jnp.asarray(x[:10], jnp.bfloat16)
  (only,) = _bf16_parts(xb)
  assert only.dtype == jnp.bfloat16 and np.array_equal(np.asarray(only), np.asarray(xb))
  xh = rng.standard_normal(100).astype(np.float16)
  ph = [np.asarray(p, np.float64) for p in _bf16_parts(jnp.asarray(xh))]
  np.testing.assert_array_equal(sum(ph), xh.astype(np.float64))


@pytest.mark.parametrize("fmt,block_shape,xdt,had", [
    ("e4m3", None, jnp.float32, None), ("e5m2", None, jnp.bfloat16, None),
    ("mxfp4", None, jnp.float32, 32), ("nvfp4", (16, 16), jnp.float16, None),
    ("nvfp4", None, jnp.bfloat16, None), ("mxfp8", None, jnp.float32, None),
    ("bf16", None, jnp.float32, None)])
def test_parts_path_within_its_bound_of_the_reference(fmt, block_shape, xdt, had):
  """y of "xla_parts" against the float64 product of the dequantized weights and x (rotated
  like w): within 2 (k + 8) u sum|w x| + 2 u |y| (gemv_packed's docstring)."""
  rng = np.random.default_rng(4)
  n, k = 24, 128
  w = jnp.asarray(rng.standard_normal((n, k)) * rng.choice([1e-3, 1.0, 50.0], (n, k)),
                  jnp.float32)
  kw = {} if block_shape is None else {"block_shape": block_shape}
  if had is not None:
    kw["hadamard"] = had
  q = fp8lab.quantize(w, fmt, **kw)
  x = jnp.asarray(rng.standard_normal((5, k)) * rng.choice([1e-2, 1.0, 30.0], (5, k)), xdt)
  y = np.asarray(jax.jit(lambda q, x: fp8lab.gemv_packed(q, x, implementation="xla_parts"))(
      q, x), np.float64)
  wd = np.asarray(q.dequantize(), np.float64)
  xr = np.asarray(x, np.float64) if had is None else np.asarray(
      fp8lab.hadamard(jnp.asarray(x, jnp.float32), had, axis=-1), np.float64)
  exact = xr @ wd.T
  u = 2.0**-24
  bound = 2 * (k + 8) * u * (np.abs(xr) @ np.abs(wd).T) + 2 * u * np.abs(exact)
  if xdt != jnp.float32:                 # the final rounding to x's 16-bit dtype
    bound = bound + np.abs(exact) * (2.0**-8 if xdt == jnp.bfloat16 else 2.0**-11)
  assert np.all(np.abs(y - exact) <= bound), np.max(np.abs(y - exact) / bound)


def test_parts_path_refuses_formats_that_are_not_bfloat16_exact():
  q = fp8lab.quantize(jnp.ones((8, 128), jnp.float32), "e4m3_block", block_shape=(128,))
  with pytest.raises(ValueError, match="xla_parts"):
    fp8lab.gemv_packed(q, jnp.ones((128,)), implementation="xla_parts")
  with pytest.raises(ValueError, match="interpret"):
    fp8lab.gemv_packed(fp8lab.quantize(jnp.ones((8, 64)), "e4m3"), jnp.ones((64,)),
                       implementation="xla_parts", interpret=True)
