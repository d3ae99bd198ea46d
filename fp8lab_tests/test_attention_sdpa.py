"""Tests of fp8lab.attention's "xla" and "cudnn" implementations (fp8lab/ops/attention.py
_sdpa): K / V decoded to bfloat16 by XLA from the packed words, then flash attention by
jax.nn.dot_product_attention's XLA path or cuDNN's fused kernel.

On the CPU "xla" runs; with FP8LAB_GPU_TESTS=1 on a GPU "cudnn" runs too, on larger shapes.
Expected values are float64 numpy attention over the golden dequantized K / V
(test_attention.ref64), never the code under test.

Bound: test_attention_prefill.py's bf16 bound with every K / V value rounded to bfloat16 (the
pre-pass rounds the float32 value, the factors included), q rounded to bfloat16, P's
rounding (2^-8 max|v|), and the bfloat16 output of the library call rounded once more:
2^-8 |o| (then q's dtype: _u_out).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from fp8lab.numerics.hadamard import hadamard
from fp8lab_tests.switches import ON_GPU, SLOW, gpu, grid
from fp8lab_tests.test_attention import (KV_FORMATS, _kv, _normal, _paged, _u_out, _values64,
                                         assert_close)
from fp8lab_tests.test_attention_prefill import (_PAIRS, _TQ, SHAPE, _bf16, _cache, _chunk,
                                                 _lengths, clean_and_spoiled, ref_prefill)

IMPLS = ("xla", "cudnn") if ON_GPU else ("xla",)
_U_BF16 = 2.0**-8


def _all_bf16(x, dim):
  del dim
  return _bf16(_values64(x))


def check_sdpa(impl, q, k, v, lengths, q_positions=None, causal=None, **kw):
  """fp8lab.attention(implementation=impl) against ref_prefill with every K / V value
  rounded to bfloat16; returns (o, lse)."""
  lengths = jnp.asarray(lengths, jnp.int32)
  causal = q_positions is not None if causal is None else causal
  o, lse = fp8lab.attention(q, k, v, kv_lengths=lengths, return_lse=True, causal=causal,
                            q_positions=q_positions, implementation=impl, **kw)
  if causal and q_positions is None:
    q_positions = np.broadcast_to(np.arange(q.shape[1]), q.shape[:2])
  want, want_lse, tol, lse_tol = ref_prefill(q, k, v, lengths, q_positions, "bf16",
                                             kw.get("sm_scale"), fed=_all_bf16)
  assert o.dtype == q.dtype and o.shape == q.shape
  assert_close(o, want, tol + (_U_BF16 + _u_out(q.dtype)) * np.abs(want), "o")
  seen = np.isfinite(want_lse)
  np.testing.assert_array_equal(np.isfinite(np.asarray(lse)), seen)
  assert_close(np.where(seen, lse, 0.0), np.where(seen, want_lse, 0.0), lse_tol, "lse")
  return o, lse


def _queries(seed, group, masking, lengths, dim=64, dtype=jnp.float32):
  """q and q_positions: masking "causal" is self-attention over the whole cache (Tq = S,
  no q_positions), "positions" a chunk of _TQ queries at each row's end, "none" _TQ queries
  seeing every valid position."""
  bsz, cap, hkv = SHAPE
  tq = cap if masking == "causal" else _TQ
  q = _normal(seed, (bsz, tq, hkv * group, dim)).astype(dtype)
  return q, (_chunk(bsz, tq, lengths) if masking == "positions" else None)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kfmt,vfmt,group,masking",
                         grid(_PAIRS, ["none", "causal", "positions"]))
def test_every_format(impl, kfmt, vfmt, group, masking):
  """Every KV format (and plain float32) as K and as V, GQA 1 / 4 / 8, per-row lengths ending
  one position into a new block, the three masks."""
  lengths = _lengths(SHAPE[0], SHAPE[1])
  k, v = _cache(1, kfmt, vfmt)
  q, qpos = _queries(3, group, masking, lengths)
  check_sdpa(impl, q, k, v, lengths, q_positions=qpos, causal=masking != "none")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dim,fmt,dtype", [(256, "nvfp4", jnp.float16),
                                           (128, "e4m3_block", jnp.bfloat16)])
def test_head_dims_and_q_dtypes(impl, dim, fmt, dtype):
  lengths = _lengths(SHAPE[0], SHAPE[1])
  k, v = _cache(5, fmt, "e5m2", dim=dim)
  q, qpos = _queries(7, 4, "positions", lengths, dim=dim, dtype=dtype)
  check_sdpa(impl, q, k, v, lengths, q_positions=qpos)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kfmt,vfmt,causal,paged", [(None, None, True, False),
                                                    ("nvfp4", "e4m3", False, False),
                                                    ("e4m3_block", "mxfp4", True, True)])
def test_full_rows_without_kv_lengths(impl, kfmt, vfmt, causal, paged):
  """kv_lengths=None (every row full: no padding mask, no zeroing pre-pass; plain bfloat16
  K / V go to the library as they are): against the reference at full lengths, causal
  self-attention or not, contiguous or paged."""
  bsz, cap, hkv = SHAPE
  k = _kv(kfmt, _normal(61, (bsz, cap, hkv, 64), 2.0))
  v = _kv(vfmt, _normal(62, (bsz, cap, hkv, 64)))
  if kfmt is None:
    k, v = k.astype(jnp.bfloat16), v.astype(jnp.bfloat16)
  q = _normal(63, (bsz, cap, hkv * 2, 64)).astype(jnp.bfloat16)
  o, lse = fp8lab.attention(q, k, v, causal=causal, return_lse=True, implementation=impl)
  lengths = np.full((bsz,), cap, np.int32)
  qpos = np.broadcast_to(np.arange(cap), (bsz, cap)) if causal else None
  want, want_lse, tol, lse_tol = ref_prefill(q, k, v, lengths, qpos, "bf16", fed=_all_bf16)
  assert_close(o, want, tol + (_U_BF16 + _u_out(q.dtype)) * np.abs(want), "o")
  assert_close(lse, want_lse, lse_tol, "lse")
  if paged:
    (kp, table), (vp, _) = _paged(k, 10, 0), _paged(v, 10, 0)
    op = fp8lab.attention(q, kp, vp, block_tables=table, causal=causal, implementation=impl)
    np.testing.assert_array_equal(np.asarray(op).view(np.uint16), np.asarray(o).view(np.uint16))


@pytest.mark.parametrize("impl", IMPLS)
def test_rows_that_see_nothing(impl):
  """A row of length 0 and queries at negative positions get o = 0 and lse = -inf; the
  others are unaffected."""
  bsz, cap, hkv = SHAPE
  lengths = np.array([0, 40], np.int32)
  k, v = _cache(9, "e4m3_block", "mxfp4")
  q = _normal(11, (bsz, 8, hkv * 2, 64))
  qpos = jnp.asarray(np.array([[0, 1, 2, 3, 4, 5, 6, 7], [-3, -1, 0, 5, 20, 39, 60, 69]]),
                     jnp.int32)
  o, lse = check_sdpa(impl, q, k, v, lengths, q_positions=qpos)
  np.testing.assert_array_equal(np.asarray(o[0]), 0.0)
  np.testing.assert_array_equal(np.asarray(lse[0]), -np.inf)
  np.testing.assert_array_equal(np.asarray(o[1, :2]), 0.0)
  np.testing.assert_array_equal(np.asarray(lse[1, :2]), -np.inf)
  assert np.all(np.isfinite(np.asarray(lse[1, 2:])))
  # without kv_lengths (full rows) the negative positions still see nothing
  o, lse = fp8lab.attention(q, k, v, causal=True, q_positions=qpos, return_lse=True,
                            implementation=impl)
  np.testing.assert_array_equal(np.asarray(o[1, :2]), 0.0)
  np.testing.assert_array_equal(np.asarray(lse[1, :2]), -np.inf)
  assert np.all(np.isfinite(np.asarray(lse[0])))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kfmt,vfmt,masking", [("mxfp4", "nvfp4", "positions"),
                                               ("e4m3", "e4m3_block", "none"),
                                               (None, "mxfp8", "causal")])
def test_nan_past_lengths_never_read(impl, kfmt, vfmt, masking):
  """All-ones words and NaN / 0xFF scales (NaN in a plain array) past each row's length: o
  and lse bit for bit those over a cache with zeros there, and finite."""
  lengths = _lengths(SHAPE[0], SHAPE[1])
  clean, dirty = clean_and_spoiled(kfmt, vfmt, lengths)
  q, qpos = _queries(19, 4, masking, lengths)
  run = functools.partial(fp8lab.attention, q, kv_lengths=jnp.asarray(lengths),
                          causal=masking != "none", q_positions=qpos, return_lse=True,
                          implementation=impl)
  (a, la), (b, lb) = run(*clean), run(*dirty)
  assert np.all(np.isfinite(np.asarray(b)))
  np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))
  np.testing.assert_array_equal(np.asarray(la).view(np.uint32), np.asarray(lb).view(np.uint32))


@pytest.mark.parametrize("impl", IMPLS)
def test_paged_equals_contiguous(impl):
  """The cache as a shuffled page pool (page size 10): bit for bit the contiguous result."""
  bsz, cap, hkv = SHAPE
  lengths = _lengths(bsz, cap)
  k, v = _cache(21, "mxfp4", "e5m2_block")
  kp, table = _paged(k, 10, 0)
  vp, _ = _paged(v, 10, 0)
  q, qpos = _queries(23, 8, "positions", lengths)
  run = functools.partial(fp8lab.attention, q, kv_lengths=jnp.asarray(lengths), causal=True,
                          q_positions=qpos, implementation=impl)
  a, b = np.asarray(run(k, v)), np.asarray(run(kp, vp, block_tables=table))
  np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("impl", IMPLS)
def test_hadamard_jit_vmap_grad(impl):
  """Hadamard-rotated K (q rotated in float32) and V (the output rotated back in float32):
  against the reference in the rotated domain (q rotated by fp8lab.hadamard, K / V's rotated
  values), rotated back in float64 by V's 16-point matrix (entries +-1/4, exact); then jit,
  vmap over q (equal to the unbatched calls) and the gradient with respect to q (the
  reference's: finite and close)."""
  lengths = _lengths(SHAPE[0], SHAPE[1])
  bsz, cap, hkv = SHAPE
  k = _kv("mxfp4", _normal(31, (bsz, cap, hkv, 64), 2.0), hadamard=32)
  v = _kv("nvfp4", _normal(32, (bsz, cap, hkv, 64)), hadamard=16)
  q, qpos = _queries(33, 4, "positions", lengths)
  run = functools.partial(fp8lab.attention, k=k, v=v, kv_lengths=jnp.asarray(lengths),
                          causal=True, q_positions=qpos, implementation=impl)
  hk, hv = k.hadamard, v.hadamard
  back = np.asarray(hadamard(jnp.eye(16, dtype=jnp.float32), 16, signs=hv.sign_arg(),
                             inverse=True), np.float64)  # x -> x @ back, per 16 lanes
  assert set(np.unique(np.abs(back))) == {0.25}

  def per16(x, m):
    return (x.reshape(x.shape[:-1] + (-1, 16)) @ m).reshape(x.shape)

  def check(o, qq):
    q_rot = hadamard(qq, hk.block, signs=hk.sign_arg(), axis=-1)
    want, _, tol, _ = ref_prefill(q_rot, k, v, lengths, qpos, "bf16", fed=_all_bf16)
    tol = tol + _U_BF16 * np.abs(want)                   # the library's bf16 output
    # the rotated-domain bound through |back|, and the float32 rotation (4 stages, exact
    # scaling by 1/4): 4 u per element of the 16-lane sums
    tol_o = per16(tol, np.abs(back)) + 4 * 2.0**-24 * per16(np.abs(want), np.abs(back))
    assert_close(o, per16(want, back), tol_o, "rotated")

  check(run(q), q)
  # jit, and vmap over q (folded into the query tokens: one call), each example in bound
  qs = jnp.stack([q, q * 0.5])
  got = jax.vmap(jax.jit(run))(qs)
  check(got[0], q)
  check(got[1], q * 0.5)

  def loss(impl_, qq):
    return jnp.sum(fp8lab.attention(qq, k, v, kv_lengths=jnp.asarray(lengths), causal=True,
                                    q_positions=qpos, implementation=impl_) ** 2)
  g = np.asarray(jax.grad(functools.partial(loss, impl))(q))
  g_ref = np.asarray(jax.grad(functools.partial(loss, "reference"))(q))
  # both through the reference's vjp, at cotangents 2 o: the bf16 forward's o differs from
  # the reference's by the bound above, so the gradients agree to a few percent, not bits
  assert np.all(np.isfinite(g))
  np.testing.assert_allclose(g, g_ref, rtol=0.05, atol=0.02 * float(np.abs(g_ref).max()))


def test_checks():
  k, v = _cache(41, "e4m3_block", "e4m3")
  q = _normal(43, (SHAPE[0], _TQ, SHAPE[2] * 2, 64))
  with pytest.raises(ValueError, match="computes in bfloat16"):
    fp8lab.attention(q, k, v, implementation="xla", compute="f32")
  with pytest.raises(ValueError, match="computes in bfloat16"):
    fp8lab.attention(q, k, v, implementation="xla", compute="fp8")
  with pytest.raises(ValueError, match="interpret=True runs the Pallas kernel"):
    fp8lab.attention(q, k, v, implementation="xla", interpret=True)
  with pytest.raises(ValueError, match="implementation must be one of"):
    fp8lab.attention(q, k, v, implementation="flash")
  if not ON_GPU:
    with pytest.raises(ValueError, match="'cudnn' needs an NVIDIA GPU"):
      fp8lab.attention(q, k, v, implementation="cudnn")


@gpu
def test_gpu_default_for_prefill_is_cudnn():
  """On a GPU, implementation=None takes cuDNN for prefill-sized queries (compute None or
  "bf16") and the decode kernel for one query token."""
  k, v = _cache(45, "e4m3_block", "nvfp4")
  q = _normal(47, (SHAPE[0], _TQ, SHAPE[2] * 8, 64))
  text = jax.jit(lambda qq: fp8lab.attention(qq, k, v)).lower(q).as_text()
  assert "cudnn" in text
  text = jax.jit(lambda qq: fp8lab.attention(qq, k, v)).lower(q[:, :1]).as_text()
  assert "cudnn" not in text and "fp8lab_attention" in text


@gpu
@pytest.mark.parametrize("fmt", KV_FORMATS)
def test_cudnn_large(fmt):
  """B=1, 8 heads, S=2048 (a multiple of 128 plus lengths that are not), D=128: cuDNN
  against the float64 reference, causal self-attention."""
  shape = (1, 2048, 8)
  k, v = _cache(51, fmt, fmt, dim=128, shape=shape)
  q = _normal(53, (1, 2048, 8, 128))
  check_sdpa("cudnn", q, k, v, np.array([2000], np.int32), causal=True)
