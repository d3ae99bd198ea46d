"""Tests of fp8lab.attention's implementation="mosaic" (fp8lab/kernels/attention/mosaic.py,
the Mosaic GPU decode kernel): in the Mosaic GPU interpreter on the CPU (default), compiled
on a Hopper GPU with FP8LAB_GPU_TESTS=1. Expected values are float64 numpy attention over K /
V dequantized by the golden model, with test_attention.py's bound for the float16 dots
(ref64(..., tensor_cores=True, f16=True)): the kernel's K / V are exact float16 codes, q is
one exact float16 part (bfloat16 q) or hi + lo (float32 / float16 q), p hi + lo (2^-22), the
scale factors applied to the float32 scores / p as the Triton kernel's f16 dots apply them,
and V's per-position scales divided by a running power of two (exact) before p is cut into
parts."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from fp8lab.kernels import attention as AK
from fp8lab.kernels.attention import mosaic as M
from fp8lab_tests.switches import ON_GPU, gpu
from fp8lab_tests.test_attention import (_kv, _lengths, _normal, _paged, _values64,
                                         assert_close, check_attention, ref64, spoil_words)

INTERPRET = not ON_GPU
# (B, S, Hkv): Hkv 8 (the per-token-head scale tiles need a multiple of 8); S a multiple of 8
# (the TMA copies' rows) and of no block; larger compiled.
SHAPE = (3, 1496, 8) if ON_GPU else (2, 152, 8)


def _attend(q, k, v, lengths=None, **kw):
  return fp8lab.attention(q, k, v, kv_lengths=None if lengths is None else jnp.asarray(lengths),
                          implementation="mosaic", interpret=INTERPRET, **kw)


@pytest.mark.parametrize("kfmt,vfmt,group,dim,qdt", [
    ("e4m3_block", "e4m3_block", 4, 128, jnp.bfloat16),
    ("e4m3", "e5m2_block", 1, 64, jnp.float32),
    ("e5m2", "e4m3", 8, 256, jnp.bfloat16),
    ("e5m2_block", "e4m3", 2, 128, jnp.float16),
])
def test_matches_reference(kfmt, vfmt, group, dim, qdt):
  bsz, cap, hkv = SHAPE
  k = _kv(kfmt, _normal(1, (bsz, cap, hkv, dim)))
  v = _kv(vfmt, _normal(2, (bsz, cap, hkv, dim), 3.0))
  q = _normal(3, (bsz, 1, hkv * group, dim)).astype(qdt)
  check_attention(q, k, v, _lengths(bsz, cap), impl="mosaic")


def test_v_scales_over_many_binades():
  """V's per-token scales spread over 2^-40 .. 2^40 (and q's rows over 2^-20 .. 2^20): the
  running power-of-two bound of p * vs keeps every product within float16's range."""
  bsz, cap, hkv = SHAPE
  dim = 128
  e = jax.random.randint(jax.random.key(4), (bsz, cap, hkv, 1), -40, 41).astype(jnp.float32)
  v = _kv("e4m3_block", _normal(5, (bsz, cap, hkv, dim)) * jnp.exp2(e))
  k = _kv("e4m3_block", _normal(6, (bsz, cap, hkv, dim)))
  qe = jax.random.randint(jax.random.key(7), (bsz, 1, hkv * 4, 1), -20, 21).astype(jnp.float32)
  q = _normal(8, (bsz, 1, hkv * 4, dim)) * jnp.exp2(qe) * 0.05
  check_attention(q, k, v, _lengths(bsz, cap), impl="mosaic")


def test_causal_multi_token():
  bsz, cap, hkv = SHAPE
  dim, tq = 64, 3
  k = _kv("e4m3_block", _normal(9, (bsz, cap, hkv, dim)))
  v = _kv("e4m3", _normal(10, (bsz, cap, hkv, dim)))
  lengths = _lengths(bsz, cap)
  qpos = np.stack([np.clip(l - 1 - 7 * np.arange(tq)[::-1], 0, None) for l in lengths])
  q = _normal(11, (bsz, tq, hkv * 2, dim))
  check_attention(q, k, v, lengths, impl="mosaic", q_positions=jnp.asarray(qpos, jnp.int32))


def test_garbage_past_length_never_read():
  """NaN codes and NaN scales past each row's length: the output is bit for bit the one
  over a cache holding zeros there."""
  bsz, cap, hkv = SHAPE
  dim = 128
  lengths = _lengths(bsz, cap)
  past = np.arange(cap)[None, :] >= lengths[:, None]
  xk, xv = _normal(12, (bsz, cap, hkv, dim)), _normal(13, (bsz, cap, hkv, dim))
  clean = [jnp.where(past[:, :, None, None], 0.0, x) for x in (xk, xv)]
  for fmt, kw in (("e4m3_block", {}), ("e4m3", dict(scale=jnp.float32(30.0)))):
    ops = [_kv(fmt, x, **kw) for x in clean]
    dirty = [spoil_words(x, past) for x in ops]
    q = _normal(14, (bsz, 1, hkv * 4, dim))
    a, b = _attend(q, *ops, lengths), _attend(q, *dirty, lengths)
    assert np.all(np.isfinite(np.asarray(b))), fmt
    np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def test_zero_length_rows_and_determinism():
  bsz, cap, hkv = SHAPE
  dim = 64
  k = _kv("e4m3_block", _normal(15, (bsz, cap, hkv, dim)))
  q = _normal(16, (bsz, 1, hkv * 4, dim))
  lengths = np.zeros(bsz, np.int32)
  lengths[0] = 5
  o, lse = check_attention(q, k, k, lengths, impl="mosaic")
  np.testing.assert_array_equal(np.asarray(o[1:]), 0.0)
  assert np.all(np.asarray(lse[1:]) == -np.inf)
  f = jax.jit(functools.partial(_attend, lengths=_lengths(bsz, cap)))
  a = np.asarray(f(q, k, k)).view(np.uint32)
  np.testing.assert_array_equal(np.asarray(f(q, k, k)).view(np.uint32), a)


def test_same_result_as_the_pallas_kernel_within_bounds():
  """jit and vmap over q (folded into the query tokens: one launch), against the bound."""
  bsz, cap, hkv = SHAPE
  dim = 128
  k = _kv("e4m3_block", _normal(17, (bsz, cap, hkv, dim)))
  qs = _normal(18, (3, bsz, 1, hkv * 2, dim))
  f = jax.jit(jax.vmap(lambda q: _attend(q, k, k)))
  o = np.asarray(f(qs))
  for i in range(3):
    want = np.asarray(fp8lab.attention(qs[i], k, k, implementation="reference"))
    np.testing.assert_allclose(o[i], want, atol=2e-5 * np.abs(want).max())


def _meta(fmt, shape, **kw):
  return _kv(fmt, jnp.zeros(shape, jnp.float32), **kw)


@pytest.mark.parametrize("page_size", [16, pytest.param(64, marks=pytest.mark.slow)])
def test_paged_equals_contiguous(page_size):
  """A shuffled page pool and its table give the contiguous cache's output bit for bit
  (pages of 16: four TMA copies of each array per block of 64; of 64, slow: one),
  per-token-head K / V scales through the table, a causal multi-token step and a one-token
  one."""
  bsz, hkv, dim = 2, 8, 64
  cap = 1024 if ON_GPU else 128
  k = _kv("e4m3_block", _normal(40, (bsz, cap, hkv, dim)))
  v = _kv("e5m2_block", _normal(41, (bsz, cap, hkv, dim)))
  lengths = _lengths(bsz, cap)
  pk, table = _paged(k, page_size, 42)
  pv, _ = _paged(v, page_size, 42)
  for tq in (1, 3):
    q = _normal(43 + tq, (bsz, tq, hkv * 2, dim))
    qpos = jnp.asarray(np.asarray(lengths)[:, None] - tq + np.arange(tq)[None], jnp.int32)
    kw = dict(causal=True, q_positions=qpos, return_lse=True)
    a, la = _attend(q, k, v, lengths, **kw)
    b, lb = _attend(q, pk, pv, lengths, block_tables=table, **kw)
    np.testing.assert_array_equal(np.asarray(b).view(np.uint32), np.asarray(a).view(np.uint32))
    np.testing.assert_array_equal(np.asarray(lb), np.asarray(la))
  check_attention(q, k, v, lengths, impl="mosaic")


def test_errors():
  bsz, cap, hkv = SHAPE
  q = jnp.zeros((bsz, 1, hkv * 4, 128), jnp.float32)
  e4 = _meta("e4m3_block", (bsz, cap, hkv, 128))
  with pytest.raises(ValueError, match="e4m3 / e5m2 per tensor"):
    _attend(q, _meta("nvfp4", (bsz, cap, hkv, 128)), e4)
  with pytest.raises(ValueError, match="multiple of 8"):
    q4 = jnp.zeros((bsz, 1, 16, 128), jnp.float32)
    x = _meta("e4m3_block", (bsz, cap, 4, 128))
    _attend(q4, x, x)
  with pytest.raises(ValueError, match="cover the whole head"):
    x = fp8lab.quantize(jnp.zeros((bsz, cap, hkv, 128)), "e4m3_block", block_shape=(64,))
    _attend(q, x, x)
  with pytest.raises(ValueError, match="prefill kernel computes in bfloat16"):
    qp = jnp.zeros((bsz, 20, hkv * 4, 128), jnp.float32)
    _attend(qp, e4, e4, compute="f32")
  with pytest.raises(ValueError, match="multiple of 8 positions"):
    x = _meta("e4m3", (bsz, cap - 3, hkv, 128))
    _attend(q, x, x)
  with pytest.raises(ValueError, match="pages of 8, 16, 32"):
    pool = _meta("e4m3_block", (4, 24, hkv, 128))
    fp8lab.attention(q, pool, pool, block_tables=jnp.zeros((bsz, 2), jnp.int32),
                     implementation="mosaic", interpret=INTERPRET)
  if not ON_GPU:
    with pytest.raises(ValueError, match="Hopper"):
      fp8lab.attention(q, e4, e4, implementation="mosaic")


@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("kv_block", [True, False])
def test_default_launch_fits_shared_memory(monkeypatch, dim, kv_block):
  """The compiled default's scratch fits half the H200's shared memory (two programs per
  SM; one at D = 256) with the slack left, takes at least two stages, and fills four waves."""
  monkeypatch.setattr(AK.mosaic.device, "smem_per_block", lambda interpret=False: 227 * 1024)
  monkeypatch.setattr(AK.mosaic.device, "sm_count", lambda interpret=False: 132)
  cfg = M.mosaic_config(8, 8, 131072, dim)
  assert cfg.stages >= 2
  per_sm = 2 if dim <= 128 else 1
  assert per_sm * (M.smem_bytes(cfg, dim, 8, kv_block) + M._SMEM_SLACK) <= 228 * 1024
  assert 8 * 8 * cfg.n_splits >= 4 * 132


@gpu
@pytest.mark.parametrize("block_s,stages,p_parts", [(128, 3, 2), (64, 2, 1)])
def test_compiled_variants_match_reference(block_s, stages, p_parts):
  """Launch variants the interpreter cannot run (k_regs: K to wgmma from registers), and
  other block sizes, compiled, against the bound (p_parts 1: float16 p, 2^-11 per P V
  product, added to the bound)."""
  bsz, cap, hkv = SHAPE
  dim, group = 128, 4
  k = _kv("e4m3_block", _normal(21, (bsz, cap, hkv, dim)))
  v = _kv("e4m3_block", _normal(22, (bsz, cap, hkv, dim)))
  q = _normal(23, (bsz, 1, hkv * group, dim)).astype(jnp.bfloat16)
  lengths = _lengths(bsz, cap)
  want, _, tol, _ = ref64(q, _values64(k), _values64(v), lengths, tensor_cores=True, f16=True)
  if p_parts == 1:
    tol = tol + 2.0**-11 * np.abs(_values64(v)).max()
  for k_regs in (False, True):
    cfg = M.MosaicConfig(block_s=block_s, stages=stages, n_splits=4, p_parts=p_parts,
                         k_regs=k_regs)
    o, _ = AK.attention_mosaic(
        q, jnp.full((bsz, 1), 2**31 - 1, jnp.int32), jnp.asarray(lengths), k, v,
        kplan=AK.kv_plan(k, dim), vplan=AK.kv_plan(v, dim), group=group, capacity=cap,
        sm_scale=dim ** -0.5, config=cfg, out_dtype=jnp.float32)
    assert_close(o, want, tol, f"k_regs={k_regs}")


def test_k_regs_refused_in_interpret_mode():
  bsz, cap, hkv = SHAPE
  k = _kv("e4m3", _normal(24, (bsz, cap, hkv, 64)))
  q = _normal(25, (bsz, 1, hkv, 64))
  with pytest.raises(ValueError, match="compiled only"):
    AK.attention_mosaic(q, jnp.zeros((bsz, 1), jnp.int32), jnp.full((bsz,), cap, jnp.int32),
                        k, k, kplan=AK.kv_plan(k, 64), vplan=AK.kv_plan(k, 64), group=1,
                        capacity=cap, sm_scale=0.125,
                        config=M.MosaicConfig(block_s=64, stages=2, k_regs=True),
                        interpret=True)


def test_launch_env(monkeypatch):
  """FP8LAB_ATTENTION_MOSAIC_CONFIG overrides the launch (one split, float16 p: within the
  bound plus p's 2^-11 per product); a malformed value is a ValueError."""
  bsz, cap, hkv = SHAPE
  k = _kv("e4m3", _normal(26, (bsz, cap, hkv, 64)))
  q = _normal(27, (bsz, 1, hkv * 2, 64))
  monkeypatch.setenv("FP8LAB_ATTENTION_MOSAIC_CONFIG", "64:2:0.5:1")
  o = np.asarray(_attend(q, k, k), np.float64)
  want = np.asarray(fp8lab.attention(q, k, k, implementation="reference"), np.float64)
  np.testing.assert_allclose(o, want, atol=2.0**-10 * np.abs(_values64(k)).max())
  monkeypatch.setenv("FP8LAB_ATTENTION_MOSAIC_CONFIG", "64")   # read when traced: a new shape
  with pytest.raises(ValueError, match="block_s:stages"):
    _attend(q[:, :, :hkv], k, k)
