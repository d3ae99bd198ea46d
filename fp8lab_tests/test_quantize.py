"""quantize / dequantize / QuantizedArray against independent numpy references, and the
properties docs/numerics.md promises.

The references below are written from docs/numerics.md sections 4, 5 and 8 with numpy: MX
shared exponents from np.frexp in float64 (exact for float32 values), elements by ml_dtypes'
casts of exactly scaled values, NVFP4 and per-tensor steps in numpy float32 arithmetic (IEEE,
subnormals kept, on the CPU). They share no code with fp8lab's golden model.
"""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fp8lab
from fp8lab.formats import E4M3, get_format
from fp8lab.testing import quantized as fqt
from fp8lab_tests.switches import SLOW

FLT_MAX = np.float32(np.finfo(np.float32).max)
MX = {"mxfp8": "e4m3", "mxfp8_e5m2": "e5m2", "mxfp4": "e2m1"}
MODES = ("floor", "ceil", "even", "rceil")
# A few (shape, axis) pairs: each new shape costs a jit compilation, so hypothesis picks from
# these. They cover full and partial blocks, 1 to 3 blocks, every axis position, and the
# 16x16 tiles (the last two axes).
SHAPES = [((64,), 0), ((40,), 0), ((3, 33), 1), ((33, 3), 0), ((2, 3, 20), 2),
          ((20, 33), 1), ((20, 33), 0), ((2, 16, 16), 1)]


def _elem(fmt):
  return get_format(MX.get(fmt, "e2m1" if fmt == "nvfp4" else fmt))


def _to_codes(values, f):
  """ml_dtypes' cast of float32 values (already in range) to codes (uint8)."""
  return np.asarray(values, np.float32).astype(f.dtype).view(np.uint8) & np.uint8(
      (1 << f.bits) - 1)


def _decode(codes, f):
  return (codes.astype(np.uint8).view(f.dtype).astype(np.float64) if f.bits == 8 else
          (codes.astype(np.uint8) & 0xF).view(f.dtype).astype(np.float64))


def _blocks_1d(a, axis, b):
  """(moved, padded, (..., nblocks, b)) view of a along axis, zero padded."""
  m = np.moveaxis(a, axis, -1)
  n = m.shape[-1]
  nb = -(-n // b)
  pad = np.zeros(m.shape[:-1] + (nb * b - n,), a.dtype)
  return np.concatenate([m, pad], -1).reshape(m.shape[:-1] + (nb, b))


def _unblock_1d(blocks, axis, n):
  flat = blocks.reshape(blocks.shape[:-2] + (-1,))[..., :n]
  return np.moveaxis(flat, -1, axis)


def ref_mx(x, fmt, axis, mode):
  """Reference MX quantization: (scale codes, element codes, dequantized float32)."""
  f = _elem(fmt)
  x = np.asarray(x).astype(np.float32)
  axis %= x.ndim
  blocks = _blocks_1d(x, axis, 32)
  finite = np.isfinite(blocks).all(-1)
  amax = np.max(np.abs(np.where(np.isfinite(blocks), blocks, 0)).astype(np.float64), -1)
  m, e = np.frexp(amax)                         # amax = m 2^e, m in [0.5, 1)
  log2_floor = e - 1
  sig = 2 * m                                   # significand in [1, 2)
  if mode == "floor":
    s = log2_floor - f.emax
  elif mode == "ceil":
    s = log2_floor + (sig != 1) - f.emax
  elif mode == "even":
    s = log2_floor + (sig >= 2 - 2.0 ** -(f.mantissa_bits + 1)) - f.emax
  else:
    with np.errstate(under="ignore"):
      r = amax.astype(np.float32) * (np.float32(1) / np.float32(f.max_finite))
    mr, er = np.frexp(r.astype(np.float64))
    s = np.where(r > 0, (er - 1) + (mr != 0.5), -127)
  s = np.clip(s, -127, 127)
  scale_codes = np.where(amax == 0, 0, s + 127)
  scale_codes = np.where(finite, scale_codes, 0xFF).astype(np.uint8)
  v = blocks.astype(np.float64) * np.exp2(-s.astype(np.float64))[..., None]
  with np.errstate(invalid="ignore"):
    v = np.clip(np.where(finite[..., None], v, 0), -f.max_finite, f.max_finite)
  codes = _to_codes(v.astype(np.float32), f)
  codes = np.where(finite[..., None], codes, 0).astype(np.uint8)
  deq = _decode(codes, f) * np.exp2(s.astype(np.float64))[..., None]
  with np.errstate(over="ignore"):
    deq = np.where(finite[..., None], deq, np.nan).astype(np.float32)
  n = x.shape[axis]
  return (np.moveaxis(scale_codes, -1, axis), _unblock_1d(codes, axis, n),
          _unblock_1d(deq, axis, n))


def _tile_amax(a, shape2):
  rows, cols = a.shape[-2:]
  nr, nc = -(-rows // shape2[0]), -(-cols // shape2[1])
  pad = np.zeros(a.shape[:-2] + (nr * 16, nc * 16), a.dtype)
  pad[..., :rows, :cols] = a
  return pad.reshape(a.shape[:-2] + (nr, 16, nc, 16))


def ref_nvfp4(x, axis, block_shape=(16,)):
  """Reference NVFP4 (docs/numerics.md section 5 in numpy float32), with fp8lab's documented
  NaN/Inf rule: the tensor amax skips non-finite values; their blocks get scale 0x7F and
  zero codes. Returns (scale codes, element codes, dequantized, S_dec)."""
  f32 = np.float32
  x = np.asarray(x).astype(np.float32)
  axis %= x.ndim
  finite_x = np.where(np.isfinite(x), x, f32(0))
  amax = np.max(np.abs(finite_x)) if x.size else f32(0)
  with np.errstate(divide="ignore", over="ignore"):
    s_enc = f32(2688) / amax
  s_enc = min(s_enc, FLT_MAX)
  if amax == 0 or s_enc == 0:
    s_enc = f32(1)
  s_dec = f32(1) / s_enc
  if len(block_shape) == 2:
    tiles = _tile_amax(np.abs(x), block_shape)
    finite = np.isfinite(tiles).all(axis=(-3, -1))
    bamax = np.max(np.where(np.isfinite(tiles), tiles, 0), axis=(-3, -1))
  else:
    blocks = _blocks_1d(np.abs(x), axis, 16)
    finite = np.moveaxis(np.isfinite(blocks).all(-1), -1, axis)
    bamax = np.moveaxis(np.max(np.where(np.isfinite(blocks), blocks, 0), -1), -1, axis)
  with np.errstate(under="ignore", over="ignore"):
    s = bamax * (s_enc * (f32(1) / f32(6)))
    scale_codes = _to_codes(np.minimum(s, f32(448)), E4M3)
    scale_codes = np.where(finite, scale_codes, 0x7F).astype(np.uint8)
    dec = scale_codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * s_dec
    with np.errstate(divide="ignore", invalid="ignore"):
      enc = np.minimum(f32(1) / dec, FLT_MAX)
  # Per-element factor, in x's layout.
  def expand(per_block):
    if len(block_shape) == 2:
      out = np.repeat(np.repeat(per_block, 16, -2), 16, -1)
      return out[..., :x.shape[-2], :x.shape[-1]]
    moved = np.repeat(np.moveaxis(per_block, axis, -1), 16, -1)[..., :x.shape[axis]]
    return np.moveaxis(moved, -1, axis)
  with np.errstate(over="ignore", under="ignore", invalid="ignore"):
    v = x * expand(enc)
    codes = _to_codes(np.where(np.isfinite(v), v, np.sign(v) * 6), get_format("e2m1"))
    codes = np.where(expand(finite), codes, 0).astype(np.uint8)
    deq = (_decode(codes, get_format("e2m1")).astype(np.float32) * expand(dec)).astype(
        np.float32)
  return scale_codes, codes, deq, s_dec


def ref_per_tensor(x, fmt, margin=0, scale=None):
  """Reference per-tensor scaling: (codes, tensor_scale). NaN becomes the positive NaN code
  (the float32 product gives the canonical NaN, as NVIDIA GPUs do)."""
  f32 = np.float32
  f = get_format(fmt)
  x = np.asarray(x).astype(np.float32)
  if scale is None:
    finite = x[np.isfinite(x)]
    amax = np.max(np.abs(finite)) if finite.size else f32(0)
    with np.errstate(divide="ignore", over="ignore"):
      scale = (f32(f.max_finite) / amax) / f32(2.0**margin)
    if np.isinf(scale):
      scale = FLT_MAX
    if amax == 0:
      scale = f32(1)
  scale = f32(scale)
  with np.errstate(over="ignore", invalid="ignore"):
    v = x * scale
    codes = _to_codes(np.clip(np.where(np.isnan(v), 0, v), -f.max_finite, f.max_finite), f)
  codes = np.where(np.isnan(v), f.nan_code, codes).astype(np.uint8)
  return codes, f32(1) / scale


def _u32(a):
  return np.asarray(a, np.float32).view(np.uint32)


def assert_same_floats(got, want):
  """Bit for bit, except that any NaN matches any NaN."""
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  ok = ~np.isnan(want)
  np.testing.assert_array_equal(_u32(got)[ok], _u32(want)[ok])


# ----------------------------------------------------------------------------------------
# Bit-exact agreement with the references over drawn inputs.

# The four reference comparisons below compile quantize once per drawn shape, axis and mode:
# the default run draws 20 examples each, FP8LAB_SLOW_TESTS=1 (or the heavy profile) the
# profile's number.
_REF_EXAMPLES = settings(max_examples=(settings().max_examples
                                       if SLOW or settings().max_examples > 100 else 20))


@pytest.mark.parametrize("fmt", sorted(MX))
@_REF_EXAMPLES
@given(kw=st.data())
def test_mx_matches_reference(fmt, kw):
  args = kw.draw(fqt.quantize_inputs((fmt,), shapes=SHAPES))
  q = fp8lab.quantize(**args)
  scales, codes, deq = ref_mx(args["x"], fmt, args["axis"], args["scale_mode"])
  np.testing.assert_array_equal(np.asarray(q.scales), scales)
  np.testing.assert_array_equal(np.asarray(q.codes()), codes)
  np.testing.assert_array_equal(
      np.asarray(q.data), np.asarray(fp8lab.pack(codes, MX[fmt], axis=args["axis"])))
  assert_same_floats(q.dequantize(), deq)


@_REF_EXAMPLES
@given(kw=fqt.quantize_inputs(("nvfp4",), shapes=SHAPES))
def test_nvfp4_matches_reference(kw):
  q = fp8lab.quantize(**kw)
  scales, codes, deq, s_dec = ref_nvfp4(kw["x"], kw["axis"], kw.get("block_shape", (16,)))
  assert _u32(q.tensor_scale) == _u32(s_dec)
  np.testing.assert_array_equal(np.asarray(q.scales), scales)
  np.testing.assert_array_equal(np.asarray(q.codes()), codes)
  np.testing.assert_array_equal(
      np.asarray(q.data), np.asarray(fp8lab.pack(codes, "e2m1", axis=kw["axis"])))
  assert_same_floats(q.dequantize(), deq)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@given(data=st.data())
def test_per_tensor_matches_reference(fmt, data):
  shape, axis = data.draw(st.sampled_from(SHAPES[:4]))
  x = data.draw(fqt.block_arrays("mxfp8" if fmt == "e4m3" else "mxfp8_e5m2", shape, axis))
  margin = data.draw(st.sampled_from([0, 0, 1, 4]))
  q = fp8lab.quantize(x, fmt, axis=axis, margin=margin)
  codes, ts = ref_per_tensor(x, fmt, margin)
  np.testing.assert_array_equal(np.asarray(q.codes()), codes)
  assert _u32(q.tensor_scale) == _u32(ts)
  with np.errstate(over="ignore", invalid="ignore"):
    want = (_decode(codes, get_format(fmt)).astype(np.float32) * ts).astype(np.float32)
  assert_same_floats(q.dequantize(), want)


# By default each format with one 16-bit dtype; the other pair with FP8LAB_SLOW_TESTS=1.
@pytest.mark.parametrize("fmt,dtype", [
    ("mxfp4", jnp.float16), ("nvfp4", jnp.bfloat16),
    pytest.param("mxfp4", jnp.bfloat16, marks=pytest.mark.slow),
    pytest.param("nvfp4", jnp.float16, marks=pytest.mark.slow)])
@settings(max_examples=25)
@given(data=st.data())
def test_16bit_inputs_are_widened_exactly(fmt, dtype, data):
  kw = data.draw(fqt.quantize_inputs((fmt,), shapes=SHAPES[:3], dtypes=(dtype,)))
  q = fp8lab.quantize(**kw)
  wide = dict(kw, x=np.asarray(kw["x"]).astype(np.float32))
  if fmt == "nvfp4":
    scales, codes, *_ = ref_nvfp4(wide["x"], kw["axis"], kw.get("block_shape", (16,)))
  else:
    scales, codes, _ = ref_mx(wide["x"], fmt, kw["axis"], kw["scale_mode"])
  np.testing.assert_array_equal(np.asarray(q.scales), scales)
  np.testing.assert_array_equal(np.asarray(q.codes()), codes)


@pytest.mark.parametrize("fmt,np_dtype", [("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
@given(data=st.data())
def test_f16_bf16_are_nearest_even_casts(fmt, np_dtype, data):
  shape, axis = data.draw(st.sampled_from(SHAPES[:4]))
  src = data.draw(st.sampled_from([np.float32, np.float16, ml_dtypes.bfloat16]))
  x = data.draw(fqt.block_arrays("mxfp8", shape, axis, dtype=src))
  q = fp8lab.quantize(x, fmt, axis=axis)
  assert q.scales is None and q.tensor_scale is None
  codes = np.asarray(q.codes())
  with np.errstate(over="ignore"):
    want = np.asarray(x).astype(np_dtype)
  nan = np.isnan(want.astype(np.float32))
  got = codes.view(np_dtype)
  # Non-NaN: numpy / ml_dtypes' nearest-even cast bit for bit; same-dtype input: its exact
  # bits, NaN payloads included. Other NaNs stay NaN with their sign.
  np.testing.assert_array_equal(codes[~nan], want.view(np.uint16)[~nan])
  assert np.isnan(got.astype(np.float32)[nan]).all()
  np.testing.assert_array_equal(np.signbit(got.astype(np.float32))[nan],
                                np.signbit(np.asarray(x).astype(np.float32))[nan])
  if np.dtype(src) == np.dtype(np_dtype):
    np.testing.assert_array_equal(codes, np.asarray(x).view(np.uint16))
  np.testing.assert_array_equal(np.asarray(q.dequantize()).view(np.uint32)[~nan],
                                want.astype(np.float32).view(np.uint32)[~nan])
  assert (q.data.shape[axis] == -(-shape[axis] // 2))


# ----------------------------------------------------------------------------------------
# Properties.

def _half_step(v_abs, f):
  """Half the spacing of f's grid at |v| (the subnormal spacing below the smallest normal)."""
  with np.errstate(divide="ignore"):
    e = np.floor(np.log2(np.where(v_abs > 0, v_abs, 1.0)))
  e = np.maximum(e, f.emin)
  return np.exp2(e - f.mantissa_bits - 1)


@pytest.mark.parametrize("fmt", sorted(MX))
@given(data=st.data())
def test_mx_error_within_half_step(fmt, data):
  kw = data.draw(fqt.quantize_inputs((fmt,), shapes=SHAPES[:5]))
  q = fp8lab.quantize(**kw)
  f = _elem(fmt)
  x = np.asarray(kw["x"], np.float64)
  s = np.asarray(q.scales).astype(np.float64) - 127
  s_el = np.moveaxis(np.repeat(np.moveaxis(s, kw["axis"], -1), 32, -1)[..., :x.shape[kw["axis"]]],
                     -1, kw["axis"])
  d = np.asarray(q.dequantize(), np.float64)
  with np.errstate(invalid="ignore", over="ignore"):
    v = np.abs(x) * np.exp2(-s_el)
    ok = np.isfinite(d) & (v <= f.max_finite)            # unsaturated elements
    bound = _half_step(v, f) * np.exp2(s_el)
  # Scaling by 2^s is exact, so the only error is the element rounding (no slack needed).
  assert np.all(np.abs(d - x)[ok] <= bound[ok])


@pytest.mark.parametrize("fmt", ["nvfp4", "e4m3", "e5m2"])
@given(data=st.data())
def test_scaled_error_within_half_step(fmt, data):
  shape, axis = data.draw(st.sampled_from(SHAPES[:4]))
  x = data.draw(fqt.block_arrays("nvfp4" if fmt == "nvfp4" else "mxfp8", shape, axis,
                                 allow_nan=False, allow_inf=False, min_exponent=-100,
                                 max_exponent=100))
  q = fp8lab.quantize(x, fmt, axis=axis)
  f = _elem(fmt)
  x64 = x.astype(np.float64)
  if fmt == "nvfp4":
    dec = (np.asarray(q.scales).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
           * np.float32(q.tensor_scale)).astype(np.float64)
    dec = np.moveaxis(np.repeat(np.moveaxis(dec, axis, -1), 16, -1)[..., :shape[axis]], -1,
                      axis)
    with np.errstate(divide="ignore", over="ignore"):
      enc = np.minimum(np.float32(1) / dec.astype(np.float32), FLT_MAX)
  else:
    dec = np.full(x.shape, float(q.tensor_scale))
    amax = np.max(np.abs(x))
    with np.errstate(divide="ignore", over="ignore"):
      scale = np.float32(f.max_finite) / amax if amax > 0 else np.float32(1)
    enc = np.full(x.shape, min(scale, FLT_MAX), np.float32)
  with np.errstate(over="ignore", invalid="ignore"):
    y = np.abs(x * enc)                                  # fl(x * enc) as quantize forms it
  d = np.asarray(q.dequantize(), np.float64)
  # Derivation: enc = fl(1/dec), so enc * dec = 1 + d3; y = x enc (1 + d1); the code value
  # c = y + eps with |eps| <= h(y) (half step); deq = c dec (1 + d2); |d_i| <= u = 2^-24.
  # deq - x = x[(1 + d1)(1 + d2)(1 + d3) - 1] + eps dec (1 + d2), so
  # |deq - x| <= gamma_3 |x| + h(y) dec (1 + u), gamma_3 = 3u / (1 - 3u); plus 2^-149 per
  # product for results in float32's subnormal range (absolute, not relative, error).
  u = 2.0**-24
  gamma3 = 3 * u / (1 - 3 * u)
  ok = (dec > 0) & np.isfinite(enc) & (y <= f.max_finite)
  bound = gamma3 * np.abs(x64) + _half_step(y, f) * dec * (1 + u) + 3 * 2.0**-149
  assert np.all(np.abs(d - x64)[ok] <= bound[ok])


@pytest.mark.parametrize("fmt", sorted(MX))
@pytest.mark.parametrize("mode", ["floor", "even"])
@given(data=st.data())
def test_mx_requantize_reproduces_bits(fmt, mode, data):
  # Why floor and even: the scaled block maximum lies in [2^emax, 2^(emax+1)) (floor) or
  # rounds up to 2^emax (even's bump), so the largest code after rounding/saturation has the
  # same binade and the rule picks the same s from the dequantized block; the codes come
  # back exactly because c * 2^s is exact in float32 (even the subnormal results).
  # even is limited to |x| < 2^127: a block maximum within an element rounding of 2^128
  # rounds up to 2^emax * 2^(128 - emax) = 2^128, which float32 dequantizes to Inf.
  # ceil and rceil are excluded (see test_requantize_counterexamples).
  kw = data.draw(fqt.quantize_inputs((fmt,), scale_modes=(mode,), shapes=SHAPES[:5],
                                     max_exponent=126 if mode == "even" else 127))
  q = fp8lab.quantize(**kw)
  q2 = fp8lab.quantize(q.dequantize(), fmt, axis=kw["axis"], scale_mode=mode)
  np.testing.assert_array_equal(np.asarray(q2.scales), np.asarray(q.scales))
  np.testing.assert_array_equal(np.asarray(q2.data), np.asarray(q.data))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "f16", "bf16"])
@given(data=st.data())
def test_requantize_reproduces_bits_with_fixed_scale(fmt, data):
  # e4m3/e5m2 with a given power-of-two scale 2^k: tensor_scale = 2^-k, c * 2^-k * 2^k = c
  # exactly (|k| <= 20 keeps every product normal). f16/bf16: the stored values are exact in
  # float32. NaN inputs are left out: fp8lab's float32 product makes NaN the canonical
  # positive NaN, so a negative NaN code would come back positive.
  shape, axis = data.draw(st.sampled_from(SHAPES[:4]))
  x = data.draw(fqt.block_arrays("mxfp8", shape, axis, allow_nan=False, min_exponent=-40,
                                 max_exponent=40))
  extra = {}
  if fmt in ("e4m3", "e5m2"):
    extra["scale"] = np.float32(2.0 ** data.draw(st.integers(-20, 20)))
  q = fp8lab.quantize(x, fmt, axis=axis, **extra)
  q2 = fp8lab.quantize(q.dequantize(), fmt, axis=axis, **extra)
  np.testing.assert_array_equal(np.asarray(q2.data), np.asarray(q.data))


def test_requantize_counterexamples():
  # ceil, mxfp4: amax 2.4 = 1.2 * 2^1 -> s = 1 + 1 - 2 = 0; 2.4 rounds to 2; requantizing
  # the block (amax now exactly 2 = 2^1) gives s = 1 + 0 - 2 = -1 and codes doubled.
  x = np.zeros(32, np.float32)
  x[0] = 2.4
  q = fp8lab.quantize(x, "mxfp4", scale_mode="ceil")
  q2 = fp8lab.quantize(q.dequantize(), "mxfp4", scale_mode="ceil")
  assert int(q.scales[0]) == 127 and int(q2.scales[0]) == 126
  # rceil, mxfp8: amax 230 -> s = ceil(log2(230/448)) = 0; 230 rounds to 224 (grid 224, 240);
  # 224 / 448 = 2^-1 exactly -> s = -1.
  x[0] = 230.0
  q = fp8lab.quantize(x, "mxfp8", scale_mode="rceil")
  q2 = fp8lab.quantize(q.dequantize(), "mxfp8", scale_mode="rceil")
  assert int(q.scales[0]) == 127 and int(q2.scales[0]) == 126
  # Current scaling, e4m3: amax 11 -> scale fl(448/11); 11 * scale rounds to 448 (0x7E), and
  # 448 * fl(1/scale) = 11.000001 (numpy float32 gives the same), so the requantized tensor
  # has another amax, scale and tensor_scale.
  y = np.array([11.0, 1.0], np.float32)
  q = fp8lab.quantize(y, "e4m3")
  q2 = fp8lab.quantize(q.dequantize(), "e4m3")
  assert int(q.codes()[0]) == 0x7E
  assert float(q.dequantize()[0]) == np.float32(448) * (np.float32(1) / (np.float32(448) /
                                                                         np.float32(11)))
  assert float(q.dequantize()[0]) != 11.0
  assert _u32(q.tensor_scale) != _u32(q2.tensor_scale)
  # nvfp4: the tensor amax of the dequantized values (6 * fl(s * S_dec)) need not be the
  # original amax. amax 7: S_enc = 2688/7 = 384, S_dec = fl(1/384) (above 1/384), block scale
  # 448 (0x7E), element 6; 6 * fl(448 * S_dec) = 7.0000005, so requantizing starts from
  # another amax and S_dec.
  z = np.zeros(16, np.float32)
  z[0] = 7.0
  q = fp8lab.quantize(z, "nvfp4")
  q2 = fp8lab.quantize(q.dequantize(), "nvfp4")
  assert float(q.dequantize()[0]) == np.float32(6) * (np.float32(448) * (np.float32(1) /
                                                                         np.float32(384)))
  assert float(q.dequantize()[0]) != 7.0
  assert _u32(q.tensor_scale) != _u32(q2.tensor_scale)


@pytest.mark.parametrize("fmt", sorted(MX))
@given(data=st.data())
def test_rceil_never_saturates(fmt, data):
  kw = data.draw(fqt.quantize_inputs((fmt,), scale_modes=("rceil",), shapes=SHAPES[:5]))
  q = fp8lab.quantize(**kw)
  f = _elem(fmt)
  x = np.abs(np.asarray(kw["x"], np.float64))
  s = np.asarray(q.scales).astype(np.float64) - 127
  s_el = np.moveaxis(np.repeat(np.moveaxis(s, kw["axis"], -1), 32, -1)[..., :x.shape[kw["axis"]]],
                     -1, kw["axis"])
  finite_block = np.moveaxis(np.repeat(np.moveaxis(np.asarray(q.scales) != 0xFF, kw["axis"], -1),
                                       32, -1)[..., :x.shape[kw["axis"]]], -1, kw["axis"])
  # Exact in float64: every element of a finite block is within the element range.
  assert np.all((x * np.exp2(-s_el))[finite_block] <= f.max_finite)


# The overflow threshold of nearest-even rounding: the midpoint between the largest finite
# value and the next grid point; whether the tie itself overflows depends on the parity of
# the largest finite code's mantissa (e4m3 0x7E: mantissa 110, even -> 464 rounds to 448;
# e5m2 0x7B and e2m1 0x7: odd -> the tie rounds up and overflows).
def _overflows(v_abs, f):
  beyond = f.max_finite + 2.0 ** (f.emax - f.mantissa_bits)
  tie = (f.max_finite + beyond) / 2
  max_mantissa_odd = f.max_code & 1
  return (v_abs > tie) | ((v_abs == tie) & bool(max_mantissa_odd))


@pytest.mark.parametrize("fmt", sorted(MX))
@given(data=st.data())
def test_floor_saturates_exactly_where_the_spec_says(fmt, data):
  kw = data.draw(fqt.quantize_inputs((fmt,), scale_modes=("floor",), shapes=SHAPES[:5],
                                     allow_nan=False, allow_inf=False))
  q = fp8lab.quantize(**kw)
  f = _elem(fmt)
  axis = kw["axis"]
  x = np.asarray(kw["x"], np.float64)
  # The spec's floor exponent, from amax directly: s = floor(log2 amax) - emax, clamped.
  blocks = _blocks_1d(np.abs(x), axis, 32)
  amax = blocks.max(-1)
  with np.errstate(divide="ignore"):
    s = np.clip(np.floor(np.log2(np.where(amax > 0, amax, 1))) - f.emax, -127, 127)
  v = _unblock_1d(blocks * np.exp2(-s)[..., None], axis, x.shape[axis])
  saturated = _overflows(v, f)
  codes = np.asarray(q.codes()) & np.uint8(~f.sign_bit & 0xFF)
  # Saturated elements hold the largest finite code; every other element's magnitude code
  # is the nearest-even one (below max_code unless it rounds to the max itself).
  assert np.all(codes[saturated] == f.max_code)
  want = _to_codes(np.where(saturated, 0, v).astype(np.float32), f)
  np.testing.assert_array_equal(codes[~saturated], want[~saturated])
  # And only blocks whose amax significand exceeds the element max's can saturate.
  sig_max = f.max_finite / 2.0**f.emax
  block_sat = _blocks_1d(saturated, axis, 32).any(-1)
  assert np.all((amax / np.exp2(np.floor(np.log2(np.where(amax > 0, amax, 1)))))[block_sat]
                > sig_max)


# ----------------------------------------------------------------------------------------
# Stochastic rounding.

@pytest.mark.parametrize("fmt,value", [("mxfp4", 2.3), ("mxfp4", -0.6), ("nvfp4", 1.2),
                                       ("e4m3", 0.3), ("mxfp8", 17.3)])
def test_stochastic_rounding_unbiased_in_the_mean(fmt, value):
  # 64 rows of 64: element 0 of every block is the block max (4 or 3.6 * ...), the rest the
  # value under test, so every copy sees the same scale.
  n_rows = 64
  x = np.full((n_rows, 64), value, np.float32)
  x[:, 0] = x[:, 32] = 4.0 if fmt != "mxfp8" else 256.0
  x[:, 16] = x[:, 48] = x[:, 0]
  q = fp8lab.quantize(x, fmt, rounding="stochastic", key=jax.random.key(7))
  d = np.asarray(q.dequantize(), np.float64)
  mask = np.ones_like(x, bool)
  mask[:, [0, 16, 32, 48]] = False
  samples = d[mask]
  lo, hi = samples.min(), samples.max()
  # Only the two neighbours of the scaled value occur.
  assert len(np.unique(samples)) <= 2 and lo <= value <= hi
  step = hi - lo
  # 8 random bits: the expected value is within step/256 of x (docs/numerics.md section 6);
  # each draw has standard deviation <= step/2, so the mean of N has <= step/(2 sqrt N);
  # allow 5 of those.
  n = samples.size
  tol = step / 256 + 5 * step / (2 * np.sqrt(n))
  assert abs(samples.mean() - value) <= tol, (samples.mean(), value, tol)


def test_stochastic_rounding_bits_follow_the_flat_index_of_x():
  # mxfp4 along axis 0 of a (64, 3) array: element (i, j) draws random_bits(key, (64, 3))
  # at flat index 3 i + j. The scaled values x * 2^-s are computed here exactly (amax 4 ->
  # s = 0 for every block), so fp8lab.encode with the same key and shape must agree.
  rng = np.random.default_rng(3)
  x = rng.uniform(-4, 4, size=(64, 3)).astype(np.float32)
  x[0, :] = 4.0
  x[32, :] = 4.0
  key = jax.random.key(11)
  q = fp8lab.quantize(x, "mxfp4", axis=0, rounding="stochastic", key=key)
  assert (np.asarray(q.scales) == 127).all()
  want = np.asarray(fp8lab.encode(x, "e2m1", saturate=True, rounding="stochastic", key=key))
  np.testing.assert_array_equal(np.asarray(q.codes()), want)
  # Exact values never move.
  g = np.array([0.5, 1, 1.5, 2, 3, 4, 6, -6], np.float32)
  x2 = np.zeros(32, np.float32)
  x2[:8] = g
  q2 = fp8lab.quantize(x2, "mxfp4", rounding="stochastic", key=key)
  np.testing.assert_array_equal(np.asarray(q2.dequantize())[:8], g)


# ----------------------------------------------------------------------------------------
# Layout, jit, vmap, tree_map, repr, errors.

def test_layout_for_partial_blocks_and_tiles():
  x = np.arange(3 * 70, dtype=np.float32).reshape(3, 70) / 7
  q = fp8lab.quantize(x, "mxfp4", axis=1)
  assert q.scales.shape == (3, 3) and q.data.shape == (3, 9) and q.axis == 1
  assert q.codes().shape == (3, 70)
  # The last block holds 6 real values (64..69): its amax is x[:, 69], the padding adds none.
  # Row 0: 69/7 = 9.857 = 1.23 * 2^3 -> floor s = 3 - 2 = 1 -> code 128.
  assert int(q.scales[0, 2]) == 128
  q0 = fp8lab.quantize(x.T, "nvfp4", axis=0)
  assert q0.scales.shape == (5, 3) and q0.data.shape == (9, 3) and q0.axis == 0
  t = np.ones((2, 20, 33), np.float32)
  qt = fp8lab.quantize(t, "nvfp4", block_shape=(16, 16))
  assert qt.scales.shape == (2, 2, 3) and qt.data.shape == (2, 20, 5)
  qt = fp8lab.quantize(t, "nvfp4", block_shape=(16, 16), axis=-2)
  assert qt.scales.shape == (2, 2, 3) and qt.data.shape == (2, 3, 33) and qt.axis == 1
  qe = fp8lab.quantize(x, "e4m3", axis=0)
  assert qe.scales is None and qe.tensor_scale.shape == () and qe.data.shape == (1, 70)
  qf = fp8lab.quantize(x, "bf16")
  assert qf.data.shape == (3, 35)


def test_repr_is_readable():
  q = fp8lab.quantize(np.ones((4, 64), np.float32), "mxfp4", scale_mode="rceil")
  assert repr(q) == ("QuantizedArray(format='mxfp4', shape=(4, 64), axis=1, block_shape=(32,), "
                     "scale_mode='rceil', data=uint32[4, 8], scales=uint8[4, 2], "
                     "tensor_scale=None)")
  q = fp8lab.quantize(np.ones(16, np.float32), "nvfp4", hadamard=16)
  assert "hadamard=HadamardSpec(block=16, signs='none', seed=None)" in repr(q)
  assert "tensor_scale=float32[]" in repr(q)


# One format of each kind by default (per tensor, MX 8- and 4-bit, NVFP4, blockwise); the
# e5m2 twins and the 16-bit formats with FP8LAB_SLOW_TESTS=1.
@pytest.mark.parametrize("fmt", [
    f if f in ("e4m3", "mxfp8", "mxfp4", "nvfp4", "e4m3_block")
    else pytest.param(f, marks=pytest.mark.slow) for f in fp8lab.QUANTIZED_FORMATS])
def test_jit_vmap_and_tree_map(fmt):
  rng = np.random.default_rng(0)
  xs = (rng.normal(size=(3, 4, 40)) * 10).astype(np.float32)
  f = jax.jit(functools.partial(fp8lab.quantize, fmt=fmt))
  q = f(xs[0])
  q_eager = fp8lab.quantize(xs[0], fmt)
  for a, b in zip(jax.tree_util.tree_leaves(q), jax.tree_util.tree_leaves(q_eager)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert jax.tree_util.tree_structure(q) == jax.tree_util.tree_structure(q_eager)
  # A QuantizedArray goes through jit as an argument.
  np.testing.assert_array_equal(np.asarray(jax.jit(lambda q: q.dequantize())(q)),
                                np.asarray(q_eager.dequantize()))
  # vmap: leaves gain the batch axis, the metadata describes one example.
  qb = jax.vmap(lambda x: fp8lab.quantize(x, fmt))(xs)
  assert qb.shape == (4, 40)
  for i in range(3):
    qi = fp8lab.quantize(xs[i], fmt)
    for a, b in zip(jax.tree_util.tree_leaves(qb), jax.tree_util.tree_leaves(qi)):
      np.testing.assert_array_equal(np.asarray(a)[i], np.asarray(b))
  db = jax.vmap(fp8lab.dequantize)(qb)
  np.testing.assert_array_equal(np.asarray(db[1]), np.asarray(fp8lab.quantize(xs[1], fmt)
                                                              .dequantize()))
  with pytest.raises(ValueError, match="vmap"):
    fp8lab.dequantize(qb)
  # tree_map rebuilds a QuantizedArray with the same metadata.
  q2 = jax.tree_util.tree_map(lambda a: a, q_eager)
  assert isinstance(q2, fp8lab.QuantizedArray) and q2.format == fmt and q2.shape == (4, 40)


def test_dequantize_dtypes():
  x = np.array([1.0, -2.5, 3e-3, 100.0] * 8, np.float32)
  q = fp8lab.quantize(x, "mxfp8")
  d32 = np.asarray(q.dequantize())
  for dtype, np_dtype in ((jnp.bfloat16, ml_dtypes.bfloat16), (jnp.float16, np.float16)):
    d = np.asarray(q.dequantize(dtype))
    assert d.dtype == np.dtype(np_dtype)
    np.testing.assert_array_equal(d.view(np.uint16), d32.astype(np_dtype).view(np.uint16))


def test_quantized_arrays_strategy_dequantizes():
  # Arbitrary codes and scales (not made by quantize): MX dequantization is the code value
  # times 2^(scale - 127), exact in float64, Inf past float32's range, NaN for scale 0xFF.
  @settings(max_examples=30)
  @given(q=fqt.quantized_arrays("mxfp4", (3, 40), 1))
  def check(q):
    codes = np.asarray(q.codes())
    s = np.asarray(q.scales).astype(np.float64)
    s_el = np.repeat(s, 32, -1)[:, :40]
    with np.errstate(over="ignore"):
      want = (_decode(codes, get_format("e2m1")) * np.exp2(s_el - 127)).astype(np.float32)
    want[np.repeat(np.asarray(q.scales) == 0xFF, 32, -1)[:, :40]] = np.nan
    assert_same_floats(q.dequantize(), want)
  check()


def test_argument_errors():
  x = np.ones((2, 64), np.float32)
  with pytest.raises(TypeError, match="float32"):
    fp8lab.quantize(np.ones(32), "mxfp4")                  # float64
  with pytest.raises(TypeError):
    fp8lab.quantize(np.ones(32, np.int32), "mxfp4")
  with pytest.raises(ValueError, match="mxfp4.*nvfp4|nvfp4.*mxfp4"):
    fp8lab.quantize(x, "mxfp6")
  with pytest.raises(ValueError, match="axis"):
    fp8lab.quantize(x, "mxfp4", axis=2)
  with pytest.raises(ValueError, match="block_shape"):
    fp8lab.quantize(x, "mxfp4", block_shape=(16,))
  with pytest.raises(ValueError, match="block_shape"):
    fp8lab.quantize(x, "e4m3", block_shape=(32,))
  with pytest.raises(ValueError, match="16, 16"):
    fp8lab.quantize(np.ones(32, np.float32), "nvfp4", block_shape=(16, 16))
  with pytest.raises(ValueError, match="scale_mode"):
    fp8lab.quantize(x, "mxfp4", scale_mode="nearest")
  with pytest.raises(ValueError, match="scale_mode"):
    fp8lab.quantize(x, "nvfp4", scale_mode="rceil")
  with pytest.raises(ValueError, match="key"):
    fp8lab.quantize(x, "mxfp4", rounding="stochastic")
  with pytest.raises(ValueError, match="key"):
    fp8lab.quantize(x, "mxfp4", key=jax.random.key(0))
  with pytest.raises(ValueError, match="stochastic"):
    fp8lab.quantize(x, "bf16", rounding="stochastic", key=jax.random.key(0))
  with pytest.raises(ValueError, match="rounding"):
    fp8lab.quantize(x, "mxfp4", rounding="down")
  with pytest.raises(ValueError, match="scale"):
    fp8lab.quantize(x, "mxfp4", scale=1.0)
  with pytest.raises(ValueError, match="margin"):
    fp8lab.quantize(x, "nvfp4", margin=1)
  with pytest.raises(ValueError, match="margin"):
    fp8lab.quantize(x, "e4m3", scale=2.0, margin=1)
  with pytest.raises(ValueError, match="scalar"):
    fp8lab.quantize(x, "e4m3", scale=np.ones(2, np.float32))
  with pytest.raises(ValueError, match="Hadamard"):
    fp8lab.quantize(np.ones((2, 40), np.float32), "mxfp4", hadamard=16)
  with pytest.raises(ValueError, match="Hadamard"):
    fp8lab.quantize(x, "mxfp4", hadamard=8)
  with pytest.raises(ValueError, match="at least one axis"):
    fp8lab.quantize(np.float32(1.0), "mxfp4")
  q = fp8lab.quantize(x, "mxfp4")
  with pytest.raises(TypeError, match="dtype"):
    q.dequantize(jnp.int8)
  with pytest.raises(TypeError, match="QuantizedArray"):
    fp8lab.dequantize(x)
