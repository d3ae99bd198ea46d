"""Tests of fp8lab.attention, fp8lab.kv_cache_update and the attention kernel
(fp8lab/kernels/attention/, unpack.decode_codes).

Default (CPU): the kernel runs in Pallas interpret mode on small odd shapes (lengths that are
multiples of no block); the larger grids are marked `slow` (switches.grid). With
FP8LAB_GPU_TESTS=1 on a GPU the same tests run the compiled kernel on larger shapes, plus the
tests marked `gpu`. Expected values never come from the code under test: they are float64
numpy computations over K / V dequantized by the golden model (fp8lab.dequantize).

Error bound (float32 arithmetic, u = 2^-24), per query row, against the float64 attention of
the same dequantized K / V (the kernel's K / V values equal the golden ones: it makes the
same float32 scale products):
  * scores: a float32 dot of length D, then one multiply by sm_scale:
      |s_j - s64_j| <= (D + 1) u sm_scale sum_d |q_d k_jd|  =: Delta_j;
  * softmax: p_j = exp(s_j - m); the subtraction rounds (u |s_j - m| <= 2u max|s|), and the
    exponential is accurate to a relative 2^-21 (the GPU's ex2.approx after a multiply by
    log2(e), whose rounding is another u |s_j - m| log2(e) in the exponent). So
    p_j = p64_j e^{delta_j}, |delta_j| <= eta := 2 max_j Delta_j + 8u max|s| + 2^-21
    (the factor 2: m itself moves with the scores, which cancels between numerator and
    denominator but not between positions);
  * o = sum_j p_j v_j / sum_j p_j: perturbing each weight by e^{delta_j} moves a convex
    combination by at most (e^{2 eta} - 1) max|v| ~ 2 eta max|v| (to first order);
  * float32 sums of S terms in P V and in l, the rescalings by alpha per block, the split
    combine and the final division: at most (2S + 16) u sum_j p_j |v_j| / l <= (2S + 16) u max|v|.
So |o - o64| <= (2.5 eta + (2S + 16) u) max_j |v_j| (2.5 for the second-order term, eta
being tiny), max over the positions the row sees, plus the unit roundoff of q's dtype
times |o64| when the output is rounded to bfloat16 / float16. The log-sum-exp:
|lse - lse64| <= eta + (S + 8) u (|lse| + 1).
The "bf16x3" dots (AttentionConfig.dots, the default): q (one part when bfloat16) and p as
three exact bfloat16 parts, K / V values exact in bfloat16 with their float32 per-tensor /
per-token factor applied to the products (two more roundings per score: (D + 3) u above; one
per P V product: 4 more u max|v|), and the tensor cores' float32 accumulation, which
truncates: the addition terms double. The "planes" layout (AttentionConfig.layout, the
default) factors the same way on both dot paths (its tensor scale and float16-route power of
two multiply o once after the loop: one rounding, within the same 4 u), and sums the score of
each position over per_word plane dots: a float32 sum of D products in another order, within
the same (D + 3) u. The kernel tests through fp8lab.attention take the bf16x3 bound.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from fp8lab.formats import QUANTIZED, get_format
from fp8lab.kernels import attention as AK
from fp8lab.kernels import unpack as U
from fp8lab.quantized import QuantizedArray

warnings.filterwarnings("ignore", message=".*Triton.*deprecated.*")
warnings.filterwarnings("ignore", message=".*Pallas Triton backend is deprecated.*")

from fp8lab_tests.lowering import triton_irs
from fp8lab_tests.switches import ON_GPU, gpu, grid
INTERPRET = not ON_GPU
U32 = 2.0**-24
# (B, S, Hkv): S a multiple of no block; larger compiled.
SHAPE = (3, 1500, 4) if ON_GPU else (2, 100, 2)

# Every registry format the kernel serves along D (1D blocks), with its KV block shape:
# blockwise FP8 with one float32 scale per token and head (block = D), the others' defaults.
KV_FORMATS = tuple(name for name, q in QUANTIZED.items() if AK.serves(name, q.block_shape))


def _block(fmt: str, dim: int):
  q = QUANTIZED[fmt]
  if q.scaling == "block":
    return (dim,)
  return q.block_shape if q.block_shapes else None



def spoil_words(x, past):
  """A QuantizedArray with all-ones words and NaN / 0xFF scales at the positions `past`
  (B, S) bool; a plain array as it is."""
  if not isinstance(x, QuantizedArray):
    return x
  m = jnp.asarray(past)[:, :, None, None]
  data = jnp.where(m, jnp.uint32(0xFFFFFFFF), x.data)
  scales = x.scales
  if scales is not None:
    bad = jnp.asarray(np.nan if scales.dtype == jnp.float32 else 0xFF, scales.dtype)
    scales = jnp.where(m, bad, scales)
  return QuantizedArray(data, scales, x.tensor_scale, format=x.format,
                        element_format=x.element_format, shape=x.shape, axis=x.axis,
                        block_shape=x.block_shape, scale_mode=x.scale_mode,
                        hadamard=x.hadamard)


def _kv(fmt, x, **kw):
  """x (B, S, Hkv, D) as a KV operand of `fmt` (None: the plain array)."""
  if fmt is None:
    return x
  return fp8lab.quantize(x, fmt, block_shape=_block(fmt, x.shape[-1]), **kw)


def _normal(seed, shape, scale=1.0):
  return jax.random.normal(jax.random.key(seed), shape, jnp.float32) * scale


def _values64(x) -> np.ndarray:
  if isinstance(x, QuantizedArray):
    return np.asarray(fp8lab.dequantize(x, jnp.float32), np.float64)
  return np.asarray(x.astype(jnp.float32), np.float64)


def ref64(q, kd, vd, lengths, sm_scale=None, q_positions=None, tensor_cores=False,
          f16=False):
  """float64 attention over dequantized K / V (numpy): (o, lse, o_tol, lse_tol), the
  tolerances of the module docstring for float32 arithmetic; `tensor_cores`: for the
  "bf16x3" dots (module docstring, last paragraph); `f16`: the "f16" dots' float16 parts
  of q and p on top (4 u per score product, 4 u per P V product)."""
  q = np.asarray(q.astype(jnp.float32), np.float64)
  bsz, tq, hq, dim = q.shape
  cap, hkv = kd.shape[1], kd.shape[2]
  g = hq // hkv
  sm = 1.0 / np.sqrt(dim) if sm_scale is None else sm_scale
  o = np.zeros(q.shape)
  lse = np.full((bsz, tq, hq), -np.inf)
  o_tol = np.zeros(q.shape)
  lse_tol = np.zeros((bsz, tq, hq))
  for b in range(bsz):
    for t in range(tq):
      n = int(lengths[b])
      if q_positions is not None:
        n = min(n, int(q_positions[b, t]) + 1)
      if n <= 0:
        continue
      for h in range(hq):
        k = kd[b, :n, h // g]
        v = vd[b, :n, h // g]
        s = (k @ q[b, t, h]) * sm
        m = s.max()
        p = np.exp(s - m)
        o[b, t, h] = p @ v / p.sum()
        lse[b, t, h] = m + np.log(p.sum())
        tc = 2 if tensor_cores else 1
        split = 4 if f16 else 0
        delta = (tc * (dim + 3) + split) * U32 * sm * (np.abs(k) @ np.abs(q[b, t, h])).max()
        eta = 2 * delta + 8 * U32 * np.abs(s).max() + 2.0**-21
        o_tol[b, t, h] = (2.5 * eta + (tc * (2 * n + 20) + split) * U32) * np.abs(v).max()
        lse_tol[b, t, h] = eta + (n + 8) * U32 * (abs(lse[b, t, h]) + 1)
  return o, lse, o_tol, lse_tol


def _u_out(dtype) -> float:
  return {jnp.dtype(jnp.float32): 0.0, jnp.dtype(jnp.bfloat16): 2.0**-8,
          jnp.dtype(jnp.float16): 2.0**-11}[jnp.dtype(dtype)]


def assert_close(got, want, tol, what=""):
  got = np.asarray(got, np.float64)
  assert got.shape == want.shape, (got.shape, want.shape)
  assert np.all(np.isfinite(got)), f"{what}: non-finite output"
  err = np.abs(got - want)
  bad = err > tol
  assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} outside the bound; worst "
                         f"err {err.max():.3g} where tol {tol.reshape(-1)[err.argmax()]:.3g}")


def check_attention(q, k, v, lengths, impl="pallas", q_positions=None, **kw):
  """Runs fp8lab.attention and checks o and lse against ref64; returns (o, lse)."""
  lengths = jnp.asarray(lengths, jnp.int32)
  kernel = impl in ("pallas", "mosaic")
  interpret = INTERPRET and kernel
  o, lse = fp8lab.attention(q, k, v, kv_lengths=lengths, return_lse=True, implementation=impl,
                            interpret=interpret, causal=q_positions is not None,
                            q_positions=q_positions, **kw)
  want, want_lse, tol, lse_tol = ref64(q, _values64(k), _values64(v), np.asarray(lengths),
                                       kw.get("sm_scale"),
                                       None if q_positions is None else np.asarray(q_positions),
                                       tensor_cores=kernel, f16=kernel)
  assert o.dtype == q.dtype and o.shape == q.shape
  assert_close(o, want, tol + _u_out(q.dtype) * np.abs(want), f"{impl} o")
  seen = np.isfinite(want_lse)
  np.testing.assert_array_equal(np.isfinite(np.asarray(lse)), seen)
  assert_close(np.where(seen, lse, 0.0), np.where(seen, want_lse, 0.0), lse_tol, f"{impl} lse")
  return o, lse


def _lengths(bsz, cap):
  """Lengths that are multiples of no block: a short row, the full cache, odd ones."""
  base = [cap - 3, 37, cap, 1, 65]
  return np.array([base[i % len(base)] for i in range(bsz)], np.int32)


# ---------------------------------------------------------------------------- decode helpers

@pytest.mark.parametrize("elem", ["e4m3", "e5m2", "e2m1", "f16", "bf16"])
def test_decode_codes_matches_golden(elem):
  """unpack.decode_codes against the golden decode over every code (f16 / bf16: their bit
  patterns), bit for bit, NaN included; word_codes cuts each code out of packed words."""
  f = get_format(elem)
  n = 1 << f.bits
  codes = np.arange(n, dtype=np.uint32)
  got = np.asarray(jax.jit(lambda c: U.decode_codes(c, f))(codes))
  if f.minifloat:
    want = np.asarray(fp8lab.decode(codes.astype(np.uint8), elem), np.float32)
  else:
    want = codes.astype(np.uint16).view(f.dtype).astype(np.float32)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  fin = ~np.isnan(want)
  np.testing.assert_array_equal(got[fin].view(np.uint32), want[fin].view(np.uint32))
  # word_codes: every code of packed words, in element order
  rng = np.random.default_rng(0)
  cw = rng.integers(0, n, (8, 32 // f.bits * 4), dtype=np.uint32)
  words = np.asarray(fp8lab.pack(jnp.asarray(cw.astype(np.uint16 if f.bits == 16 else np.uint8)),
                                 elem))
  d = np.arange(cw.shape[1])
  cut = U.word_codes(jnp.asarray(words)[:, d // f.per_word], f, jnp.asarray(d % f.per_word))
  np.testing.assert_array_equal(np.asarray(cut), cw)


def test_split_bf16_parts_sum_exactly():
  """split_bf16 (q and p of the "bf16x3" dots): three bfloat16 parts whose float32 sum is x
  bit for bit, for random float32 bit patterns of normal magnitude (2^-100 .. 2^100, both
  signs) and for zeros; which operands take the exact bfloat16 path."""
  rng = np.random.default_rng(1)
  n = 4096
  exp = rng.integers(127 - 100, 127 + 100, n, dtype=np.uint32)
  bits = (rng.integers(0, 2, n, dtype=np.uint32) << 31) | (exp << 23) | rng.integers(
      0, 1 << 23, n, dtype=np.uint32)
  x = np.concatenate([bits.view(np.float32), np.array([0.0, -0.0, 1.0], np.float32)])
  parts = jax.jit(AK.split_bf16)(jnp.asarray(x))
  total = (np.asarray(parts[2], np.float32) + np.asarray(parts[1], np.float32)
           ) + np.asarray(parts[0], np.float32)
  np.testing.assert_array_equal(np.abs(total).view(np.uint32), np.abs(x).view(np.uint32))
  plan = lambda f, block=None: AK.KVPlan(QUANTIZED[f].scaling, QUANTIZED[f].element, 64,
                                         block or (_block(f, 64) or (None,))[0])
  assert all(AK.split_serves(plan(f))
             for f in ("e4m3", "e5m2", "e4m3_block", "mxfp8", "mxfp4", "nvfp4", "bf16"))
  assert not any(AK.split_serves(p) for p in (
      plan("f16"), plan("e4m3_block", 32), AK.kv_plan(jnp.zeros((1, 4, 1, 64)), 64)))


def _random_f32(rng, n, lo=-100, hi=100):
  """n float32 of random bit patterns with exponents 2^lo .. 2^hi, both signs."""
  exp = rng.integers(127 + lo, 127 + hi, n, dtype=np.uint32)
  bits = (rng.integers(0, 2, n, dtype=np.uint32) << 31) | (exp << 23) | rng.integers(
      0, 1 << 23, n, dtype=np.uint32)
  return bits.view(np.float32)


def test_f16_operands():
  """The "f16" dots' operands. q (rows of random float32 patterns, 2^-60 .. 2^60 within a
  row, given as the columns of two K planes, as the kernel loads them): parts of q * 2^s
  with s from the row's largest |q| over both planes (into [2^14, 2^15)), the factor 2^-s
  returned; float32 q as hi (<= 11 significant bits) + lo within 2^-22 |q 2^s| of it per
  element (elements >= 2^-14 after the scaling), 2^-24 absolutely below; bfloat16 q as one
  float16 part equal to q * 2^s exactly (its elements >= 2^-14 after the scaling). p's
  parts (t >= 0: rows of p times a factor): the same split of t * 2^s, [lo, hi]."""
  from fp8lab.kernels.attention import kernel as K
  rng = np.random.default_rng(7)
  rows, dim = 8, 64
  x = _random_f32(rng, rows * dim, -60, 60).reshape(rows, dim)
  x[0, :5] = 0.0                                     # zeros; a row of zeros
  x[1] = 0.0
  x[2, 1::2] *= 2.0**-30                             # the row's largest |q| in plane 0
  x[3, 0::2] *= 2.0**-30                             # ... in plane 1
  for dtype in (jnp.float32, jnp.bfloat16):
    q = jnp.asarray(x).astype(dtype)
    planes, unscale = jax.jit(lambda a: K._q_parts([a[:, 0::2], a[:, 1::2]], "f16"))(q)
    q64 = np.asarray(q.astype(jnp.float32), np.float64)
    scale = 1.0 / np.asarray(unscale, np.float64)[:, None]
    amax = np.abs(q64).max(-1, keepdims=True)
    nz = amax[:, 0] > 0
    assert np.all((amax * scale)[nz] >= 2.0**14) and np.all((amax * scale)[nz] < 2.0**15)
    got = np.zeros((rows, dim))
    for j, parts in enumerate(planes):                # plane j: columns j, j + 2, ...
      assert len(parts) == (1 if dtype == jnp.bfloat16 else 2)
      assert all(p.dtype == jnp.float16 for p in parts)
      got[:, j::2] = sum(np.asarray(p, np.float64) for p in parts)
    err = np.abs(got - q64 * scale)
    if dtype == jnp.bfloat16:
      normal = np.abs(q64 * scale) >= 2.0**-14
      np.testing.assert_array_equal(got[normal], (q64 * scale)[normal])
    else:
      assert np.all(err <= np.maximum(2.0**-22 * np.abs(q64 * scale), 2.0**-24))
    assert np.all(err[~nz] == 0)
  t = np.abs(_random_f32(rng, rows * 128, -40, 0)).reshape(rows, 128)
  t[3] = 0.0
  (lo, hi), unscale = jax.jit(K._f16_p_parts)(jnp.asarray(t))
  scale = 1.0 / np.asarray(unscale, np.float64)[:, None]
  ts = t.astype(np.float64) * scale
  got = np.asarray(hi, np.float64) + np.asarray(lo, np.float64)
  assert np.all(np.asarray(hi, np.float64)[ts >= 2.0**-14] <= ts[ts >= 2.0**-14])   # truncated
  assert np.all(np.abs(got - ts) <= np.maximum(2.0**-22 * ts, 2.0**-24))
  assert np.all(got[3] == 0)


# ---------------------------------------------------------------------------- every format

_DIMS = (64, 128, 256)


def _slow(*cases):
  return [pytest.param(*c, marks=pytest.mark.slow) for c in cases]


_GROUPS = (1, 4, 8)
_ALL = KV_FORMATS + (None,)
# Default: K and V in two formats at once (K / V share one decode), so that every format
# is checked with half the launches, GQA ratios cycled over 1, 4, 8, D = 64; D = 128 and 256
# once. FP8LAB_SLOW_TESTS=1: every format for K and V alike with every ratio, more D.
_PAIRS = [(_ALL[i], _ALL[(i + 1) % len(_ALL)], _GROUPS[i // 2 % 3], 64)
          for i in range(0, len(_ALL), 2)]
_PAIRS += [("mxfp4", "e4m3_block", 4, 256), ("e4m3_block", "nvfp4", 8, 128)] + _slow(
    *[(f, f, g, 64) for f in _ALL for g in _GROUPS],
    ("nvfp4", "nvfp4", 8, 128), ("e4m3", "e4m3", 1, 256), (None, None, 8, 256),
    ("e5m2_block", "mxfp8", 4, 128))


@pytest.mark.parametrize("kfmt,vfmt,group,dim", _PAIRS)
def test_kernel_every_format(kfmt, vfmt, group, dim):
  bsz, cap, hkv = SHAPE
  kf = _normal(1, (bsz, cap, hkv, dim), 2.0)
  vf = _normal(2, (bsz, cap, hkv, dim))
  q = _normal(3, (bsz, 1, hkv * group, dim))
  check_attention(q, _kv(kfmt, kf), _kv(vfmt, vf), _lengths(bsz, cap))


@pytest.mark.parametrize("fmt", ["nvfp4"] + _slow(("e4m3_block",), ("e4m3",), ("mxfp4",), (None,)))
def test_reference_every_format(fmt):
  """The reference path within the same bound (it is float32 arithmetic too)."""
  bsz, cap, hkv = SHAPE
  dim = 64
  kf, vf = _normal(4, (bsz, cap, hkv, dim), 3.0), _normal(5, (bsz, cap, hkv, dim))
  q = _normal(6, (bsz, 1, hkv * 4, dim))
  check_attention(q, _kv(fmt, kf), _kv(fmt, vf), _lengths(bsz, cap), impl="reference")


def test_kernel_mixed_formats_and_dtypes():
  """K and V in different formats and layouts: nvfp4 K (D = 64: the elements fallback; its
  bf16x3 dots take the bfloat16 q as one part), e5m2 V with float32 scales per 32 elements
  (planes, the scale tile multiplied in float32, f32 dots: not exact in bfloat16); bfloat16
  q and output, and a given sm_scale."""
  bsz, cap, hkv = SHAPE
  dim = 64
  k = _kv("nvfp4", _normal(7, (bsz, cap, hkv, dim)))
  v = fp8lab.quantize(_normal(8, (bsz, cap, hkv, dim)), "e5m2_block", block_shape=(32,))
  q = _normal(9, (bsz, 1, hkv * 4, dim)).astype(jnp.bfloat16)
  check_attention(q, k, v, _lengths(bsz, cap), sm_scale=0.3)


@pytest.mark.parametrize("impl", ["pallas"] + _slow(("reference",)))
def test_causal_multi_token(impl):
  """Tq > 1 with causal=True and q_positions: each token sees keys <= its position; a token
  whose position is below 0 sees none (zeros, lse -inf)."""
  bsz, cap, hkv = SHAPE
  dim, tq = 64, 3
  k = _kv("e4m3_block", _normal(10, (bsz, cap, hkv, dim)))
  v = _kv("mxfp8", _normal(11, (bsz, cap, hkv, dim)))
  q = _normal(12, (bsz, tq, hkv * 2, dim))
  lengths = _lengths(bsz, cap)
  qpos = np.stack([np.array([n - 3, n - 2, n - 1]) for n in lengths]).astype(np.int32)
  qpos[1, 0] = -1
  o, lse = check_attention(q, k, v, lengths, impl=impl, q_positions=jnp.asarray(qpos))
  np.testing.assert_array_equal(np.asarray(o[1, 0]), 0.0)
  assert np.all(np.asarray(lse[1, 0]) == -np.inf)


@pytest.mark.slow
def test_hadamard_rotated_k_and_v():
  """A Hadamard-rotated K (q rotated the same way) and V (the output rotated back): the
  attention of the unrotated dequantized values, within the bound plus the rotations'
  float32 roundings (log2(block) butterfly stages, a few u max|v| more)."""
  bsz, cap, hkv = SHAPE
  dim = 64
  kr = fp8lab.quantize(_normal(13, (bsz, cap, hkv, dim)), "mxfp4", hadamard=32)
  vr = fp8lab.quantize(_normal(14, (bsz, cap, hkv, dim)), "mxfp4", hadamard=32)
  q = _normal(15, (bsz, 1, hkv * 4, dim))
  lengths = _lengths(bsz, cap)
  kd = np.asarray(fp8lab.dequantize(kr, unrotate=True), np.float64)
  vd = np.asarray(fp8lab.dequantize(vr, unrotate=True), np.float64)
  want, _, tol, _ = ref64(q, kd, vd, lengths)
  # the reference path rotates with the same code (ops/attention._rotate_q / _unrotate_o)
  o = fp8lab.attention(q, kr, vr, kv_lengths=jnp.asarray(lengths), implementation="pallas",
                       interpret=INTERPRET)
  assert_close(o, want, tol + 64 * U32 * np.abs(vd).max(), "pallas")


# ---------------------------------------------------------------------------- masking

@pytest.mark.parametrize("fmt,dim", [("e4m3", 64), ("e4m3_block", 64), ("nvfp4", 64),
                                     ("mxfp4", 64)] + _slow(
    ("mxfp8", 64), ("bf16", 64), (None, 64), ("nvfp4", 128), ("mxfp4", 256)))
def test_garbage_past_length_never_read(fmt, dim):
  """NaN / Inf quantized into the positions past each row's length, then every word and
  scale there overwritten with all-ones bytes (NaN codes and scales): the kernel's output is
  bit for bit the one over a cache holding zeros there, and finite; the reference too. (The
  planes layout: fp8 at D = 64, fp4 at D >= 128; fp4 at D = 64 is the elements fallback.)"""
  bsz, cap, hkv = SHAPE
  lengths = _lengths(bsz, cap)
  past = np.arange(cap)[None, :] >= lengths[:, None]                    # (B, S)
  xk, xv = _normal(16, (bsz, cap, hkv, dim)), _normal(17, (bsz, cap, hkv, dim))
  clean = [jnp.where(past[:, :, None, None], 0.0, x) for x in (xk, xv)]
  dirty = [jnp.where(past[:, :, None, None], jnp.float32(v), x)
           for x, v in ((xk, np.nan), (xv, np.inf))]
  # per-tensor scales come from the finite values; give both caches the clean ones
  kw = {}
  if fmt in ("e4m3", "e5m2"):
    kw = dict(scale=jnp.float32(30.0))
  elif fmt == "nvfp4":
    kw = dict(scale=jnp.float32(500.0))
  clean = [_kv(fmt, x, **kw) for x in clean]
  dirty = [_kv(fmt, x, **kw) for x in dirty]

  dirty = [spoil_words(x, past) for x in dirty]
  q = _normal(18, (bsz, 1, hkv * 4, dim))
  for impl in ("pallas", "reference"):
    run = functools.partial(fp8lab.attention, q, kv_lengths=jnp.asarray(lengths),
                            implementation=impl, interpret=INTERPRET and impl == "pallas")
    a, b = run(*clean), run(*dirty)
    assert np.all(np.isfinite(np.asarray(b))), impl
    np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def test_zero_length_rows():
  bsz, cap, hkv = SHAPE
  dim = 64
  k = _kv("e4m3_block", _normal(19, (bsz, cap, hkv, dim)))
  q = _normal(20, (bsz, 1, hkv, dim))
  lengths = np.zeros(bsz, np.int32)
  lengths[0] = 5
  for impl in ("pallas", "reference"):
    o, lse = check_attention(q, k, k, lengths, impl=impl)
    np.testing.assert_array_equal(np.asarray(o[1:]), 0.0)
    assert np.all(np.asarray(lse[1:]) == -np.inf)


# ---------------------------------------------------------------------------- paged

def _paged(x, page_size, seed):
  """A contiguous cache (B, S, ...) as a shuffled page pool (with one spare page) and its
  table (B, S / page_size)."""
  if isinstance(x, QuantizedArray):
    leaves = [x.data, x.scales]
  else:
    leaves = [x, None]
  bsz, cap = leaves[0].shape[:2]
  pages = cap // page_size
  perm = np.random.default_rng(seed).permutation(bsz * pages + 1)
  table = perm[:bsz * pages].reshape(bsz, pages).astype(np.int32)

  def pool(a):
    if a is None:
      return None
    p = jnp.zeros((bsz * pages + 1, page_size) + a.shape[2:], a.dtype)
    return p.at[jnp.asarray(table.reshape(-1))].set(
        a.reshape((bsz * pages, page_size) + a.shape[2:]))

  if not isinstance(x, QuantizedArray):
    return pool(x), jnp.asarray(table)
  shape = (bsz * pages + 1, page_size) + tuple(x.shape[2:])
  return QuantizedArray(pool(x.data), pool(x.scales), x.tensor_scale, format=x.format,
                        element_format=x.element_format, shape=shape, axis=x.axis,
                        block_shape=x.block_shape, scale_mode=x.scale_mode,
                        hadamard=x.hadamard), jnp.asarray(table)


@pytest.mark.parametrize("fmt,page_size,dim", [("e4m3_block", 16, 64), ("nvfp4", 10, 64)]
                         + _slow(("mxfp4", 25, 64), (None, 20, 64), ("nvfp4", 10, 128)))
def test_paged_equals_contiguous(fmt, page_size, dim):
  """The same cache as a shuffled page pool: bit for bit the contiguous results (kernel
  and reference), page sizes that are and are not powers of two (planes layout at these
  D but fp4 at D = 64)."""
  bsz, cap, hkv = SHAPE
  cap = cap // page_size * page_size
  k = _kv(fmt, _normal(21, (bsz, cap, hkv, dim)))
  v = _kv(fmt, _normal(22, (bsz, cap, hkv, dim)))
  kp, table = _paged(k, page_size, 0)
  vp, _ = _paged(v, page_size, 0)
  q = _normal(23, (bsz, 1, hkv * 4, dim))
  lengths = jnp.asarray(_lengths(bsz, cap))
  for impl in ("pallas", "reference"):
    run = functools.partial(fp8lab.attention, q, kv_lengths=lengths, implementation=impl,
                            interpret=INTERPRET and impl == "pallas")
    a = np.asarray(run(k, v))
    b = np.asarray(run(kp, vp, block_tables=table))
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


# ---------------------------------------------------------------------------- splits

def _kv_spec(spec, x):
  """_kv with an optional block length: "e5m2_block:2" (None, "bfloat16": plain arrays)."""
  if spec == "bfloat16":
    return x.astype(jnp.bfloat16)
  if spec is None or ":" not in spec:
    return _kv(spec, x)
  name, block = spec.split(":")
  return fp8lab.quantize(x, name, block_shape=(int(block),))


@pytest.mark.parametrize("n_splits,block_s,dots,layout,kfmt,vfmt,dim", [
    (1, 16, "f32", "elements", "e4m3_block", "mxfp4", 64),
    (8, 32, "f32", "planes", "e4m3_block", "mxfp4", 64),
    # bfloat16 q (one part) on planes; V scaled per 2 elements: the elements fallback
    (2, 32, "bf16x3:bf16q", "planes", "e4m3_block", "e5m2_block:2", 64),
    # float16 dots, the fast decodes' twins (native e4m3 / e5m2, the e2m1 asm program)
    (2, 32, "f16:bf16q", "planes", "e4m3_block", "nvfp4", 128),
    (4, 16, "f16", "planes", "nvfp4", "e5m2", 128)] + _slow(
    (2, 16, "f16", "planes", "mxfp4", "e4m3_block", 128),
    (2, 32, "f16:bf16q", "planes", "e5m2_block", "mxfp8", 64),
    (1, 16, "f16", "planes", "f16", "e4m3", 64),
    (2, 16, "f16", "elements", "e4m3_block", "nvfp4", 64),
    (2, 16, "f16:bf16q", "planes", "e4m3", "e4m3_block:4", 64),
    (2, 16, "bf16x3", "elements", "mxfp8", "nvfp4", 64),
    (2, 16, "bf16x3:bf16q", "planes", "mxfp8", "nvfp4", 128),
    (8, 32, "f32", "planes", "mxfp4", "e4m3", 128),
    (2, 16, "bf16x3:bf16q", "elements", "e4m3", "mxfp4", 64),
    (4, 16, "f32", "elements", "e4m3_block", "mxfp4", 64),
    (2, 16, "bf16x3", "elements", "bf16", "f16", 64),
    (2, 16, "bf16x3", "planes", "bf16", "f16", 64),
    (2, 16, "bf16x3", "elements", "nvfp4", "e4m3_block", 64),
    (4, 32, "bf16x3", "elements", "mxfp4", "bf16", 64),
    (4, 32, "bf16x3", "planes", "mxfp4", "bf16", 128),
    (2, 16, "bf16x3", "elements", "e5m2", None, 64),
    (2, 16, "f32", "planes", "e5m2", "e4m3_block", 64),
    (2, 16, "bf16x3", "elements", "e4m3_block", "bfloat16", 64),
    (2, 16, "f32", "planes", "nvfp4", "mxfp8_e5m2", 256),
    (1, 16, "bf16x3", "planes", "e4m3_block", "mxfp4", 256)))
def test_splits_and_blocks(n_splits, block_s, dots, layout, kfmt, vfmt, dim):
  """Other launch configurations (splits past the length included), both layouts and every
  dot path (":bf16q": q given to the kernel as bfloat16; the f16 dots with the fast
  decodes, their jnp twins in interpret mode), within the bound; combine is a fixed-order
  merge."""
  bsz, cap, hkv = SHAPE
  group = 4
  dots, _, bf16q = dots.partition(":")
  k = _kv_spec(kfmt, _normal(24, (bsz, cap, hkv, dim), 2.0))
  v = _kv_spec(vfmt, _normal(25, (bsz, cap, hkv, dim)))
  q = _normal(26, (bsz, 1, hkv * group, dim))
  if bf16q:
    q = q.astype(jnp.bfloat16)
  lengths = _lengths(bsz, cap)
  qpos = jnp.full((bsz, 1), np.iinfo(np.int32).max, jnp.int32)
  cfg = AK.AttentionConfig(block_s=block_s, n_splits=n_splits, dots=dots, layout=layout,
                           decode="fast" if dots == "f16" else "integer")
  o, lse = AK.attention_pallas(q, qpos, jnp.asarray(lengths), None, k, v,
                               kplan=AK.kv_plan(k, dim), vplan=AK.kv_plan(v, dim), group=group,
                               capacity=cap, page_size=cap, sm_scale=dim ** -0.5, config=cfg,
                               out_dtype=jnp.float32, interpret=INTERPRET)
  want, want_lse, tol, lse_tol = ref64(q, _values64(k), _values64(v), lengths,
                                       tensor_cores=dots != "f32", f16=dots == "f16")
  assert o.shape == q.shape and lse.shape == q.shape[:3]
  assert_close(np.asarray(o), want, tol, "o")
  assert_close(np.asarray(lse), want_lse, lse_tol, "lse")


def test_planes_serve():
  """Which operands the planes layout takes: packed words with >= 16 words per row (fp4 at
  D = 64 has 8: the elements fallback) and block scales over whole words; never plain
  float arrays (already one element per load)."""
  plan = lambda f, dim, block=None: AK.KVPlan(
      QUANTIZED[f].scaling, QUANTIZED[f].element, dim, block or (_block(f, dim) or (None,))[0])
  for f in ("e4m3", "e5m2", "e4m3_block", "mxfp8", "mxfp8_e5m2", "f16", "bf16"):
    assert all(AK.planes_serve(plan(f, d)) for d in _DIMS), f
  for f in ("mxfp4", "nvfp4"):
    assert [AK.planes_serve(plan(f, d)) for d in _DIMS] == [False, True, True], f
  assert AK.planes_serve(plan("e4m3_block", 64, 32)) and AK.planes_serve(plan("e4m3_block",
                                                                              64, 4))
  assert not AK.planes_serve(plan("e4m3_block", 64, 2))      # a scale per half word
  assert not AK.planes_serve(AK.kv_plan(jnp.zeros((1, 4, 1, 128)), 128))
  assert AK.AttentionConfig().dots == "f16" and AK.AttentionConfig().layout == "planes"
  with pytest.raises(ValueError, match="layout must be"):
    AK.AttentionConfig(layout="rows")


def test_deterministic_interpret():
  bsz, cap, hkv = SHAPE
  k = _kv("nvfp4", _normal(27, (bsz, cap, hkv, 64)))
  q = _normal(28, (bsz, 1, hkv * 8, 64))
  f = jax.jit(functools.partial(fp8lab.attention, implementation="pallas", interpret=INTERPRET))
  a = np.asarray(f(q, k, k))
  np.testing.assert_array_equal(np.asarray(f(q, k, k)).view(np.uint32), a.view(np.uint32))


@gpu
@pytest.mark.parametrize("fmt", ["e4m3_block", "e4m3", "nvfp4", "mxfp4"])
def test_deterministic_bits_across_runs(fmt):
  k = _kv(fmt, _normal(29, (2, 8192, 8, 128)))
  q = _normal(30, (2, 1, 32, 128))
  f = jax.jit(functools.partial(fp8lab.attention, implementation="pallas"))
  first = np.asarray(f(q, k, k)).view(np.uint32)
  for _ in range(3):
    np.testing.assert_array_equal(np.asarray(f(q, k, k)).view(np.uint32), first)


def _ssa(ir: str) -> dict[str, str]:
  """Triton IR text: value name -> the text of its defining op."""
  defs = {}
  for line in ir.splitlines():
    m = re.match(r"\s*(%[\w]+)(?::\d+)? = (.*)", line)
    if m:
      defs[m.group(1)] = m.group(2)
  return defs


def _args(op: str) -> list[str]:
  return re.findall(r"%[\w#]+", op.split(" : ")[0])


def _row_plus_range(defs, v: str, n: int) -> bool:
  """Whether offsets v (a 2D i32 tensor) are r[:, None] + iota(n)[None, :] plus uniform
  terms: an arith.addi tree whose leaves other than splats (scalars) and muls by a splat 1
  (Pallas' unit stride) are one broadcast of a (rows, 1) tensor and one broadcast of
  make_range(0, n) along axis 0; so consecutive lanes read consecutive words."""
  leaves = []

  def walk(x):
    op = defs.get(x, "")
    name = op.split(" ")[0]
    if name == "arith.addi":
      for y in _args(op):
        walk(y)
    elif name == "arith.muli" and any(
        defs.get(y, "").startswith("tt.splat") and re.search(
            r"^arith\.constant 1 : i32", defs.get(_args(defs[y])[0], "")) for y in _args(op)):
      walk(next(y for y in _args(op) if not defs.get(y, "").startswith("tt.splat")))
    elif name != "tt.splat":
      leaves.append(op)

  walk(v)
  cols = [op for op in leaves if re.search(r"tensor<1x\d+xi32> ->", op)]
  rows_ = [op for op in leaves if re.search(r"tensor<\d+x1xi32> ->", op)]
  if len(leaves) != 2 or len(cols) != 1 or len(rows_) != 1:
    return False
  exp = defs.get(_args(cols[0])[0], "")
  rng = defs.get(_args(exp)[0], "") if "axis = 0" in exp else ""
  return f"tt.make_range {{end = {n} : i32, start = 0 : i32}}" in rng


@pytest.mark.parametrize("fmt,dots,layout", grid(list(KV_FORMATS + (None,)), list(AK.DOTS),
                                                  ["planes"])
                         + [("e4m3_block", "bf16x3", "elements")]
                         + _slow(("nvfp4", "f32", "elements")))
def test_triton_lowering(fmt, dots, layout):
  """The kernel lowers to Triton IR for the H200 from any host (fp8lab_tests/lowering.py),
  paged, for every format and every dot path in the planes layout (and two in the elements
  layout): no float division, no fp8 / fp4 types (the integer decode), IEEE float32 dots on
  the f32 path (no tf32); bf16 x bf16 dots on the bf16x3 path where split_serves takes the
  operand, one per plane for q @ K^T (q bfloat16 for every other format: one part; else
  three) and three per plane for p @ V; f16 x f16 dots on the f16 path where f16_serves
  takes it (q: one part or two; p: two), the bf16x3 dots where it falls back; where planes_serve takes the operand, its words
  load as (block_s, D / per_word) i32 tiles at offsets row + iota (contiguous: vector
  loads, each word once) and no (block_s, D) gather of words remains; the elements layout
  keeps that gather."""
  bsz, cap, hkv, dim, block_s = 2, 256, 2, 128, 64
  x = jnp.zeros((bsz, cap, hkv, dim), jnp.bfloat16)
  kv = x if fmt is None else jax.eval_shape(lambda a: _kv(fmt, a), x)
  plan = AK.kv_plan(kv, dim)
  cfg = AK.AttentionConfig(block_s=block_s, n_splits=4, dots=dots, layout=layout)
  q_bf16 = (KV_FORMATS + (None,)).index(fmt) % 2 == 0
  f = lambda q, qpos, n, table, k, v: AK.attention_partials(
      q, qpos, n, table, k, v, kplan=plan, vplan=plan, group=4, capacity=cap, page_size=32,
      sm_scale=0.1, config=cfg)
  aval = jax.ShapeDtypeStruct
  (ir,) = triton_irs(f, aval((bsz, 1, 4 * hkv, dim), jnp.bfloat16 if q_bf16 else jnp.float32),
                     aval((bsz, 1), jnp.int32), aval((bsz,), jnp.int32),
                     aval((bsz, cap // 32), jnp.int32), kv, kv)
  assert "tt.func" in ir and "arith.divf" not in ir
  assert not re.search(r"\bf8E|\bf4E", ir), re.search(r"\bf8E\w*|\bf4E\w*", ir).group(0)
  planes = layout == "planes" and AK.planes_serve(plan)
  f16 = dots == "f16" and planes and AK.f16_serves(plan)
  split = dots in ("bf16x3", "f16") and AK.split_serves(plan) and not f16
  pw = plan.per_word if planes else 1
  dots_ = re.findall(r"tt\.dot .*", ir)
  if f16:                              # q: one part (bfloat16) or two; p: two, per plane
    assert len(dots_) == pw * ((1 if q_bf16 else 2) + 2), len(dots_)
    assert all(re.search(r": tensor<\d+x\d+xf16> \* tensor<\d+x\d+xf16>", d) for d in dots_)
  elif split:
    assert len(dots_) == pw * ((1 if q_bf16 else 3) + 3), len(dots_)
    assert all(re.search(r": tensor<\d+x\d+xbf16> \* tensor<\d+x\d+xbf16>", d) for d in dots_)
  else:
    assert len(dots_) == pw * 2, len(dots_)
    assert "inputPrecision = tf32" not in ir
    assert all(re.search(r": tensor<\d+x\d+xf32> \* tensor<\d+x\d+xf32>", d) for d in dots_)
  if plan.kind == "float":
    return
  defs = _ssa(ir)
  words = [(v, op) for v, op in defs.items()
           if re.match(rf"tt\.load .*: tensor<{block_s}x\d+x!tt\.ptr<i32>>$", op)]
  widths = sorted(int(re.search(rf"tensor<{block_s}x(\d+)x", op).group(1)) for _, op in words)
  assert widths == [dim // pw] * 2, widths                   # K's words and V's words
  if planes:
    for _, op in words:
      ptr = defs[_args(op)[0]]                              # tt.addptr %base, %offsets
      assert ptr.startswith("tt.addptr"), ptr
      assert _row_plus_range(defs, _args(ptr)[1], dim // pw), ptr


@pytest.mark.parametrize("fmt,want", [("e4m3_block", "cvt.rn.f16x2.e4m3x2"),
                                      ("e5m2", "cvt.rn.f16x2.e5m2x2"), ("nvfp4", "lop3.b32"),
                                      ("mxfp4", "lop3.b32")])
def test_triton_lowering_fast_decode(fmt, want):
  """decode="fast" (the compiled default on the H200) lowers the planes' decode to inline
  PTX: fp8 -> float16 converts for e4m3 / e5m2, the e2m1 integer program for fp4 (MX
  included, whose bf16x3 planes take the same decode), one asm call per plane of K and V;
  still no fp8 / fp4 types in the IR."""
  bsz, cap, hkv, dim = 2, 256, 2, 128
  x = jnp.zeros((bsz, cap, hkv, dim), jnp.bfloat16)
  kv = jax.eval_shape(lambda a: _kv(fmt, a), x)
  plan = AK.kv_plan(kv, dim)
  assert AK.plane_decode(plan, "fast", False) == ("e2m1_asm" if "fp4" in fmt else "native")
  cfg = AK.AttentionConfig(block_s=64, n_splits=2, dots="f16", decode="fast")
  f = lambda q, qpos, n, k, v: AK.attention_partials(
      q, qpos, n, None, k, v, kplan=plan, vplan=plan, group=4, capacity=cap, page_size=cap,
      sm_scale=0.1, config=cfg)
  aval = jax.ShapeDtypeStruct
  (ir,) = triton_irs(f, aval((bsz, 1, 4 * hkv, dim), jnp.bfloat16), aval((bsz, 1), jnp.int32),
                     aval((bsz,), jnp.int32), kv, kv)
  asm = re.findall(r"tt\.elementwise_inline_asm .*", ir)
  assert len(asm) == 2 * plan.per_word and all(want in a for a in asm), len(asm)
  assert not re.search(r"\bf8E|\bf4E", ir)


@gpu
@pytest.mark.parametrize("fmt", ["e4m3_block", "e4m3", "nvfp4", "mxfp4", None])
@pytest.mark.parametrize("dots", AK.DOTS)
def test_compiled_target_shape(fmt, dots):
  """Compiled, near the issue's target shape (Hq 32, Hkv 8, D 128, 8K positions, the default
  launch with its KV splits), both dot paths, against the float64 reference."""
  bsz, cap, hkv, dim, group = 2, 8192, 8, 128, 4
  k = _kv(fmt, _normal(45, (bsz, cap, hkv, dim), 2.0).astype(jnp.bfloat16).astype(jnp.float32))
  v = _kv(fmt, _normal(46, (bsz, cap, hkv, dim)))
  if fmt is None:
    k, v = k.astype(jnp.bfloat16), v.astype(jnp.bfloat16)
  q = _normal(47, (bsz, 1, hkv * group, dim)).astype(jnp.bfloat16)
  lengths = np.array([cap - 5, 3001], np.int32)
  cfg = dataclasses.replace(AK.attention_config(bsz, hkv, cap, dim), dots=dots)
  qpos = jnp.full((bsz, 1), np.iinfo(np.int32).max, jnp.int32)
  o, _ = AK.attention_pallas(q.astype(jnp.float32), qpos, jnp.asarray(lengths), None, k, v,
                             kplan=AK.kv_plan(k, dim), vplan=AK.kv_plan(v, dim), group=group,
                             capacity=cap, page_size=cap, sm_scale=dim ** -0.5, config=cfg)
  want, _, tol, _ = ref64(q, _values64(k), _values64(v), lengths, tensor_cores=dots != "f32",
                          f16=dots == "f16")
  assert_close(np.asarray(o), want, tol, f"{fmt} {dots}")


# ---------------------------------------------------------------------------- transforms

def test_jit_vmap_grad():
  bsz, cap, hkv = SHAPE
  dim = 64
  k = _kv("e4m3_block", _normal(31, (bsz, cap, hkv, dim)))
  v = _kv("mxfp8", _normal(32, (bsz, cap, hkv, dim)))
  lengths = jnp.asarray(_lengths(bsz, cap))
  qs = _normal(33, (2, bsz, 1, hkv * 2, dim))
  f = functools.partial(fp8lab.attention, kv_lengths=lengths, implementation="pallas",
                        interpret=INTERPRET)
  got = jax.jit(jax.vmap(lambda q: f(q, k, v)))(qs)
  for i in range(2):
    want, _, tol, _ = ref64(qs[i], _values64(k), _values64(v), np.asarray(lengths))
    assert_close(got[i], want, tol, f"vmap {i}")
  # grad wrt q: the reference's gradient, whichever implementation runs forward (a linear
  # loss, so that the cotangent does not depend on the forward's output)
  w = np.asarray(_normal(44, qs[0].shape), np.float64)
  loss = lambda impl: (lambda q: jnp.sum(fp8lab.attention(
      q, k, v, kv_lengths=lengths, implementation=impl,
      interpret=INTERPRET and impl == "pallas") * w))
  g_kernel = jax.grad(loss("pallas"))(qs[0])
  g_ref = jax.grad(loss("reference"))(qs[0])
  np.testing.assert_array_equal(np.asarray(g_kernel), np.asarray(g_ref))
  # against central differences of the float64 reference, one coordinate
  e = np.zeros(qs[0].shape)
  e[0, 0, 1, 3] = 1e-3

  def f64(qq):
    o, *_ = ref64(jnp.asarray(qq, jnp.float32), _values64(k), _values64(v), np.asarray(lengths))
    return np.sum(o * w)
  fd = (f64(np.asarray(qs[0]) + e) - f64(np.asarray(qs[0]) - e)) / 2e-3
  assert abs(float(g_ref[0, 0, 1, 3]) - fd) < 1e-2 * max(1.0, abs(fd))


# ---------------------------------------------------------------------------- kv_cache_update

@pytest.mark.parametrize("fmt,paged", [("e4m3_block", False), ("mxfp4", True), ("nvfp4", False),
                                       ("e4m3", False)] + _slow(
    ("e4m3_block", True), ("mxfp8", False), ("bf16", False), (None, True)))
def test_kv_cache_update_bytes(fmt, paged):
  """Writing tokens into a cache gives the bytes of quantizing the whole cache at once
  (per-tensor formats with the cache's quantization scale given), for (B,) and (B, T)
  positions, contiguous and paged, under jit with the cache donated."""
  bsz, cap, hkv = SHAPE
  dim, t = 64, 3
  x = _normal(34, (bsz, cap, hkv, dim))
  start = np.array([5, cap - t] + [7] * (bsz - 2), np.int32)[:bsz]
  pos = start[:, None] + np.arange(t)[None, :]
  upto = np.arange(cap)[None, :] < start[:, None]
  after = upto | ((np.arange(cap)[None, :] >= start[:, None])
                  & (np.arange(cap)[None, :] < start[:, None] + t))
  kw = {}
  if fmt in ("e4m3",):
    kw = dict(scale=jnp.float32(100.0))
  elif fmt == "nvfp4":
    kw = dict(scale=jnp.float32(900.0))
  before = _kv(fmt, jnp.where(upto[:, :, None, None], x, 0.0), **kw)
  whole = _kv(fmt, jnp.where(after[:, :, None, None], x, 0.0), **kw)
  new = jnp.asarray(x[np.arange(bsz)[:, None], pos])
  page_size = 20
  table = None
  if paged:
    cap2 = cap // page_size * page_size
    assert start.max() + t <= cap2
    before, table = _paged(_trim(before, cap2), page_size, 1)
    whole, _ = _paged(_trim(whole, cap2), page_size, 1)
  # the golden model's quantize + scatter, and the kernel writing into the cache (packed
  # caches; interpret mode on a CPU)
  impls = [{"implementation": "reference"}]
  if fmt not in ("bf16", None):
    impls.append({"implementation": "pallas", "interpret": not ON_GPU})
  for impl in impls:
    upd = jax.jit(functools.partial(fp8lab.kv_cache_update, block_tables=table,
                                    scale=kw.get("scale"), **impl), donate_argnums=0)
    for positions in (jnp.asarray(start), jnp.asarray(pos, jnp.int32)):
      got = upd(jax.tree_util.tree_map(jnp.copy, before), new, positions)
      for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(whole)):
        np.testing.assert_array_equal(np.asarray(a).reshape(-1).view(np.uint8),
                                      np.asarray(b).reshape(-1).view(np.uint8))


def _trim(x, cap):
  if not isinstance(x, QuantizedArray):
    return x[:, :cap]
  return QuantizedArray(x.data[:, :cap], None if x.scales is None else x.scales[:, :cap],
                        x.tensor_scale, format=x.format, element_format=x.element_format,
                        shape=(x.shape[0], cap) + tuple(x.shape[2:]), axis=x.axis,
                        block_shape=x.block_shape, scale_mode=x.scale_mode, hadamard=x.hadamard)


def test_kv_cache_update_then_attend():
  """Decode loop: update the cache with one token, attend with length + 1 (kernel)."""
  bsz, cap, hkv = SHAPE
  dim = 64
  x = _normal(35, (bsz, cap, hkv, dim))
  lengths = _lengths(bsz, cap) - 1
  cache = _kv("e4m3_block", jnp.where((np.arange(cap)[None, :] < lengths[:, None])[
      :, :, None, None], x, 0.0))
  cache = fp8lab.kv_cache_update(cache, x[np.arange(bsz), lengths][:, None],
                                 jnp.asarray(lengths))
  q = _normal(36, (bsz, 1, hkv * 4, dim))
  check_attention(q, cache, cache, lengths + 1)


# ---------------------------------------------------------------------------- errors

def _meta(x, **changes):
  """x with other metadata (the same leaves)."""
  aux = dict(format=x.format, element_format=x.element_format, shape=x.shape, axis=x.axis,
             block_shape=x.block_shape, scale_mode=x.scale_mode, hadamard=x.hadamard)
  aux.update(changes)
  return QuantizedArray(x.data, x.scales, x.tensor_scale, **aux)


def test_errors_before_tracing(monkeypatch):
  bsz, cap, hkv = 2, 40, 2
  k = _kv("e4m3_block", jnp.ones((bsz, cap, hkv, 64)))
  q = jnp.ones((bsz, 1, 4, 64))
  att = fp8lab.attention
  with pytest.raises(ValueError, match="D must be one of"):
    att(jnp.zeros((bsz, 1, 4, 32)), jnp.zeros((bsz, cap, hkv, 32)),
        jnp.zeros((bsz, cap, hkv, 32)))
  with pytest.raises(ValueError, match="multiple of Hkv"):
    att(jnp.zeros((bsz, 1, 3, 64)), k, k)
  with pytest.raises(TypeError, match="q must be float32"):
    att(q.astype(jnp.int32), k, k)
  with pytest.raises(ValueError, match=r"\(B, Tq, Hq, D\)"):
    att(q[0], k, k)
  with pytest.raises(ValueError, match="batch"):
    att(q[:1], k, k)
  # metadata only: the checks read no leaf
  with pytest.raises(ValueError, match="axis -1"):
    att(q, k, _meta(k, format="mxfp8", axis=1))
  with pytest.raises(ValueError, match="1D blocks"):
    att(q, k, _meta(k, format="nvfp4", block_shape=(16, 16)))
  with pytest.raises(ValueError, match="does not divide"):
    att(q, k, _meta(k, block_shape=(48,)))
  with pytest.raises(TypeError, match="QuantizedArray or a float"):
    att(q, k, "v")
  with pytest.raises(ValueError, match="one shape"):
    att(q, k, jnp.zeros((bsz, cap - 1, hkv, 64)))
  with pytest.raises(TypeError, match="kv_lengths must be int32"):
    att(q, k, k, kv_lengths=jnp.ones((bsz,), jnp.float32))
  with pytest.raises(ValueError, match="kv_lengths must have shape"):
    att(q, k, k, kv_lengths=jnp.ones((bsz + 1,), jnp.int32))
  with pytest.raises(ValueError, match=r"kv_lengths must lie in \[0, 40\]"):
    att(q, k, k, kv_lengths=jnp.array([3, 41], jnp.int32))
  with pytest.raises(ValueError, match="needs q_positions"):
    att(q, k, k, causal=True)
  with pytest.raises(ValueError, match="goes with causal"):
    att(q, k, k, q_positions=jnp.zeros((bsz, 1), jnp.int32))
  with pytest.raises(ValueError, match="pool pages"):
    att(q, k, k, block_tables=jnp.array([[0, 2], [1, 0]], jnp.int32))
  with pytest.raises(ValueError, match="block_tables must have shape"):
    att(q, k, k, block_tables=jnp.zeros((bsz + 1, 1), jnp.int32))
  with pytest.raises(ValueError, match="implementation must be"):
    att(q, k, k, implementation="xla_parts")
  with pytest.raises(ValueError, match="sm_scale"):
    att(q, k, k, sm_scale=float("nan"))
  if not ON_GPU:
    with pytest.raises(ValueError, match="needs a GPU"):
      att(q, k, k, implementation="pallas")
  with pytest.raises(ValueError, match="interpret=True runs the Pallas kernel"):
    att(q, k, k, implementation="reference", interpret=True)
  for env in ("FP8LAB_ATTENTION_LAYOUT", "FP8LAB_ATTENTION_DOTS"):
    with monkeypatch.context() as mp:
      mp.setenv(env, "rows")
      with pytest.raises(ValueError, match=env):
        att(q, k, k)
  for bad in ("64:4", "64:4:2:x", "a:b:c"):
    with monkeypatch.context() as mp:
      mp.setenv("FP8LAB_ATTENTION_CONFIG", bad)
      with pytest.raises(ValueError, match="FP8LAB_ATTENTION_CONFIG must be"):
        att(q, k, k, implementation="pallas", interpret=INTERPRET)
  # kv_cache_update
  upd = fp8lab.kv_cache_update
  with pytest.raises(ValueError, match=r"positions must lie in \[0, 40\)"):
    upd(k, jnp.zeros((bsz, 2, hkv, 64)), jnp.array([0, 39], jnp.int32))
  with pytest.raises(TypeError, match="positions must be int32"):
    upd(k, jnp.zeros((bsz, 1, hkv, 64)), jnp.array([0, 1], jnp.float32))
  with pytest.raises(ValueError, match="k_new must be"):
    upd(k, jnp.zeros((bsz, 1, hkv + 1, 64)), jnp.array([0, 1], jnp.int32))
  with pytest.raises(ValueError, match="scale is for the per-tensor"):
    upd(k, jnp.zeros((bsz, 1, hkv, 64)), jnp.array([0, 1], jnp.int32), scale=1.0)


def test_default_launch_per_format():
  """attention_config: one pipeline stage when K and V are both NVFP4 (D <= 128, compiled),
  two otherwise (mxfp4, a mixed pair, 8-bit codes, D = 256, interpret mode); the rest of the
  launch does not depend on the format."""
  plan = lambda f: AK.kv_plan(_kv(f, jnp.zeros((1, 64, 1, 128))), 128)
  fp4, fp8 = (plan("nvfp4"), plan("nvfp4")), (plan("e4m3_block"), plan("e4m3"))
  cfg = lambda plans, dim=128, interpret=False: AK.attention_config(8, 8, 131072, dim,
                                                                    interpret, plans)
  assert cfg(fp4).num_stages == 1 and cfg(fp4[:1]).num_stages == 1
  assert cfg(fp8).num_stages == 2 and cfg((fp4[0], fp8[0])).num_stages == 2
  assert cfg(()).num_stages == 2 and cfg((plan("mxfp4"),) * 2).num_stages == 2
  assert cfg(fp4, dim=256).num_stages == 2 and cfg(fp4, interpret=True).num_stages == 2
  assert dataclasses.replace(cfg(fp4), num_stages=2) == cfg(fp8) == cfg(())


@pytest.mark.parametrize("batch,capacity,splits,few", [
    (1, 4096, 32, True),     # eight waves: 1056 / 8 programs -> 128; 128 blocks of 32 allow
                             # 32; 256 programs are under four waves (528)
    (16, 4096, 8, False),    # 1056 / 128 = 8.25 -> 8 splits of 16 blocks: the waves bind
    (1, 32768, 128, False),  # 128 splits of 8 blocks, 1024 programs
    (8, 131072, 16, False),  # 1056 / 64 -> 16
    (4, 4096, 32, False),    # 1056 / 32 = 33 -> 32 splits, 1024 programs
    (2, 4096, 32, True),     # 512 programs
    (1, 200, 1, True),       # 7 blocks: one split
    (1, 512, 4, True)])      # 16 blocks: four splits of 4
def test_default_launch_splits(monkeypatch, batch, capacity, splits, few):
  """attention_config's KV splits on a 132-SM device (Hkv 8, D 128): the largest power of
  two that keeps B * Hkv * n_splits within eight waves of one-warp programs and each split
  at least MIN_SPLIT_BLOCKS blocks of 32 positions; under FEW_WAVES waves of programs the
  same splits in 4-warp programs of 128-position blocks, 1 stage; interpret mode keeps its
  two waves of block_s 128 (rounded up) down to one-block splits."""
  monkeypatch.setattr(AK.kernel.device, "sm_count", lambda interpret=False: 132)
  assert AK.kernel.MIN_SPLIT_BLOCKS == 4 and AK.kernel.FEW_WAVES == 4
  cfg = AK.attention_config(batch, 8, capacity, 128)
  assert (cfg.block_s, cfg.n_splits, cfg.num_warps, cfg.num_stages) == (
      (128, splits, 4, 1) if few else (32, splits, 1, 2))
  # interpret: 2 * 132 / (8 B) programs wanted, at most one split per 128-position block
  want = -(-2 * 132 // (8 * batch))
  blocks = -(-capacity // 128)
  expect = min(1 << (want - 1).bit_length(), 1 << (blocks - 1).bit_length())
  assert AK.attention_config(batch, 8, capacity, 128, interpret=True).n_splits == expect
  # 4-bit K or V: under FEW_WAVES_FP4 = 2 waves only (256 programs, not 512)
  assert AK.kernel.FEW_WAVES_FP4 == 2
  fp4 = (AK.kv_plan(_kv("nvfp4", jnp.zeros((1, 64, 1, 128))), 128),)
  cfg = AK.attention_config(batch, 8, capacity, 128, plans=fp4)
  assert (cfg.block_s, cfg.n_splits) == ((128 if few and batch * splits < 64 else 32), splits)


@pytest.mark.parametrize("cfg", ["32:1:1:2", "16:2:1:0.5"])
def test_launch_config_env(monkeypatch, cfg):
  """FP8LAB_ATTENTION_CONFIG (the tuning runs' launch) gives results within the bound."""
  bsz, cap, hkv = SHAPE
  monkeypatch.setenv("FP8LAB_ATTENTION_CONFIG", cfg)
  k = _kv("e4m3_block", _normal(51, (bsz, cap, hkv, 128)))
  v = _kv("nvfp4", _normal(52, (bsz, cap, hkv, 128)))
  q = _normal(53, (bsz, 1, hkv * 4, 128))
  check_attention(q, k, v, _lengths(bsz, cap))


def test_default_implementation():
  """implementation=None: the decode kernel on a GPU for the packed KV kinds verified
  there, never for plain float arrays (cudnn is faster over them); the reference on a CPU
  (same bits as asking for it)."""
  import sys
  A = sys.modules["fp8lab.ops.attention"]
  assert A._KERNEL_DEFAULT == frozenset({"tensor", "block", "mx", "nvfp4"})
  bsz, cap, hkv = SHAPE
  k = _kv("e4m3_block", _normal(39, (bsz, cap, hkv, 64)))
  q = _normal(40, (bsz, 1, hkv, 64))
  a = np.asarray(fp8lab.attention(q, k, k))
  b = np.asarray(fp8lab.attention(q, k, k, implementation="pallas" if ON_GPU else "reference"))
  np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
  kf = _normal(41, (bsz, cap, hkv, 64)).astype(jnp.bfloat16)
  a = np.asarray(fp8lab.attention(q, kf, kf), np.float32)
  b = np.asarray(fp8lab.attention(q, kf, kf, implementation="reference"), np.float32)
  np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["e4m3_block", "nvfp4", None])
def test_kernel_long_cache(fmt):
  """A longer cache with several splits and GQA 8 (slow in interpret mode)."""
  bsz, cap, hkv, dim = 2, 1000, 2, 128
  k = _kv(fmt, _normal(41, (bsz, cap, hkv, dim), 2.0))
  v = _kv(fmt, _normal(42, (bsz, cap, hkv, dim)))
  q = _normal(43, (bsz, 1, hkv * 8, dim))
  check_attention(q, k, v, np.array([cap - 7, 333], np.int32))
