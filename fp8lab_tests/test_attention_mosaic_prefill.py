"""Tests of fp8lab.attention's implementation="mosaic" for prefill-shaped calls
(fp8lab/kernels/attention/mosaic_prefill.py, the Mosaic GPU flash-attention kernel): in the
Mosaic GPU interpreter on the CPU (default), compiled on a Hopper GPU with
FP8LAB_GPU_TESTS=1. Expected values are float64 numpy attention over K / V dequantized by the
golden model with test_attention_prefill.py's compute="bf16" bound (ref_prefill): the
kernel's q is rounded to bfloat16 and fed as one exact float16 part (each row scaled by a
power of two), K / V are exact float16 codes with their factors applied to the float32
scores / p, and P is rounded to float16 (relative 2^-11, inside the bound's 2^-8 for
bfloat16 P; p times V's per-token scales over a power of two >= their maximum is <= 1, so
float16's underflow loses at most 2^-25 max|v| per position, 2^-14 max|v| at the S of these
tests, also inside it)."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from fp8lab.kernels import attention as AK
from fp8lab.kernels.attention import mosaic_prefill as MP
from fp8lab_tests.switches import ON_GPU, gpu
from fp8lab_tests.test_attention import (_kv, _normal, _paged, _u_out, assert_close,
                                         spoil_words)
from fp8lab_tests.test_attention_prefill import check_prefill, ref_fp8, ref_prefill

INTERPRET = not ON_GPU
# (B, S, Hkv): S a multiple of 8 (the TMA copies' rows) and of no block; larger compiled.
SHAPE = (2, 1000, 2) if ON_GPU else (2, 136, 2)


def _lengths(bsz, cap):
  """Lengths one position into a new block of 64 (an off-by-one loop bound drops it), a
  full row, and a short one."""
  base = [cap - 7, 65, cap, 3]
  return np.array([base[i % len(base)] for i in range(bsz)], np.int32)


def _attend(q, k, v, lengths, **kw):
  return fp8lab.attention(q, k, v, kv_lengths=jnp.asarray(lengths, jnp.int32),
                          implementation="mosaic", interpret=INTERPRET, return_lse=True, **kw)


def check(q, k, v, lengths, q_positions=None, causal=False, **kw):
  """The kernel's (o, lse) against ref_prefill's bound (check_prefill); returns them."""
  return check_prefill(q, k, v, lengths, q_positions, causal, implementation="mosaic", **kw)


def _chunk(lengths, tq):
  """q_positions of the last tq tokens of each row (clipped at 0: rows shorter than the
  chunk have queries at position 0 that see one key)."""
  return jnp.asarray(np.clip(np.asarray(lengths)[:, None] - tq + np.arange(tq)[None], 0, None),
                     jnp.int32)


@pytest.mark.parametrize("kfmt,vfmt,group,dim,tq,causal,qdt", [
    ("e4m3_block", "e4m3_block", 1, 128, 70, True, jnp.bfloat16),
    ("e4m3", "e5m2_block", 4, 64, 33, False, jnp.float32),
    ("e5m2_block", "e4m3", 8, 256, 12, True, jnp.float16),
    ("e5m2", "e5m2", 2, 128, 40, True, jnp.float32),
])
def test_matches_reference(kfmt, vfmt, group, dim, tq, causal, qdt):
  """Every K / V kind, GQA 1-8, D 64-256, q in three dtypes; two query blocks with padding
  rows (70 rows of group 1, 132 of group 4), chunks ending at each row's length."""
  bsz, cap, hkv = SHAPE
  k = _kv(kfmt, _normal(1, (bsz, cap, hkv, dim), 2.0))
  v = _kv(vfmt, _normal(2, (bsz, cap, hkv, dim)))
  q = _normal(3, (bsz, tq, hkv * group, dim)).astype(qdt)
  lengths = _lengths(bsz, cap)
  check(q, k, v, lengths, _chunk(lengths, tq) if causal else None, causal=causal)


def test_self_attention_causal_without_positions():
  """Tq == S, causal=True without q_positions: query i at position i, every block of
  queries a different loop length (the longest first)."""
  bsz, cap, hkv = (1, 200, 2) if not ON_GPU else (1, 2048, 2)
  dim = 64
  k = _kv("e4m3_block", _normal(4, (bsz, cap, hkv, dim)))
  v = _kv("e4m3", _normal(5, (bsz, cap, hkv, dim)))
  q = _normal(6, (bsz, cap, hkv, dim))
  check(q, k, v, np.array([cap - 9], np.int32), causal=True)


def test_v_scales_over_many_binades():
  """V's per-token scales over 2^-40 .. 2^40 and q's rows over 2^-20 .. 2^20: p * vs / 2^E
  stays <= 1 in float16, and what underflows is inside the bound."""
  bsz, cap, hkv = SHAPE
  dim = 128
  e = jax.random.randint(jax.random.key(7), (bsz, cap, hkv, 1), -40, 41).astype(jnp.float32)
  v = _kv("e4m3_block", _normal(8, (bsz, cap, hkv, dim)) * jnp.exp2(e))
  k = _kv("e4m3_block", _normal(9, (bsz, cap, hkv, dim)))
  qe = jax.random.randint(jax.random.key(10), (bsz, 70, hkv, 1), -20, 21).astype(jnp.float32)
  q = _normal(11, (bsz, 70, hkv, dim)) * jnp.exp2(qe) * 0.05
  check(q, k, v, _lengths(bsz, cap))


def test_garbage_past_length_never_read():
  """All-ones codes (NaN in e4m3) and NaN scales past each row's length: the output is bit
  for bit the one over a cache holding zeros there."""
  bsz, cap, hkv = SHAPE
  dim = 64
  lengths = _lengths(bsz, cap)
  past = np.arange(cap)[None, :] >= lengths[:, None]
  xk, xv = _normal(12, (bsz, cap, hkv, dim)), _normal(13, (bsz, cap, hkv, dim))
  clean = [jnp.where(past[:, :, None, None], 0.0, x) for x in (xk, xv)]
  q = _normal(14, (bsz, 70, hkv, dim))
  for fmt, kw in (("e4m3_block", {}), ("e4m3", dict(scale=jnp.float32(30.0)))):
    ops = [_kv(fmt, x, **kw) for x in clean]
    dirty = [spoil_words(x, past) for x in ops]
    a, _ = _attend(q, *ops, lengths)
    b, _ = _attend(q, *dirty, lengths)
    assert np.all(np.isfinite(np.asarray(b))), fmt
    np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def test_rows_that_see_nothing_and_determinism():
  """A row of length 0: o = 0 and lse = -inf; two calls give the same bits."""
  bsz, cap, hkv = SHAPE
  dim = 64
  k = _kv("e4m3_block", _normal(15, (bsz, cap, hkv, dim)))
  q = _normal(16, (bsz, 70, hkv, dim))
  lengths = np.array([0] + [cap - 3] * (bsz - 1), np.int32)
  o, lse = check(q, k, k, lengths)
  np.testing.assert_array_equal(np.asarray(o[0]), 0.0)
  assert np.all(np.asarray(lse[0]) == -np.inf)
  again, _ = _attend(q, k, k, lengths)
  np.testing.assert_array_equal(np.asarray(again).view(np.uint32), np.asarray(o).view(np.uint32))


def test_jit_and_vmap_over_q():
  """jit and vmap over q (folded into the query tokens: one launch) against the bound."""
  bsz, cap, hkv = SHAPE
  dim = 64
  k = _kv("e4m3", _normal(17, (bsz, cap, hkv, dim)))
  qs = _normal(18, (2, bsz, 40, hkv * 2, dim))
  lengths = _lengths(bsz, cap)
  f = jax.jit(jax.vmap(lambda q: _attend(q, k, k, lengths)[0]))
  o = np.asarray(f(qs))
  for i in range(2):
    want, _, tol, _ = ref_prefill(qs[i], k, k, lengths, None, "bf16")
    assert_close(o[i], want, tol + _u_out(jnp.float32) * np.abs(want), f"vmap {i}")


@pytest.mark.parametrize("page_size", [16, 64])
def test_paged_equals_contiguous(page_size):
  """A shuffled page pool and its table give the contiguous cache's output bit for bit
  (pages of 16: four TMA copies per block of 64; of 64: one), causal chunks and full rows."""
  bsz, hkv, dim = 2, 2, 64
  cap = 1024 if ON_GPU else 128
  k = _kv("e4m3_block", _normal(26, (bsz, cap, hkv, dim)))
  v = _kv("e5m2_block", _normal(27, (bsz, cap, hkv, dim)))
  lengths = _lengths(bsz, cap)
  q = _normal(28, (bsz, 70, hkv * 2, dim))
  pk, table = _paged(k, page_size, 29)
  pv, _ = _paged(v, page_size, 29)
  for qpos in (_chunk(lengths, 70), None):
    a, la = _attend(q, k, v, lengths, causal=qpos is not None, q_positions=qpos)
    b, lb = _attend(q, pk, pv, lengths, causal=qpos is not None, q_positions=qpos,
                    block_tables=table)
    np.testing.assert_array_equal(np.asarray(b).view(np.uint32), np.asarray(a).view(np.uint32))
    np.testing.assert_array_equal(np.asarray(lb), np.asarray(la))
  check(q, k, v, lengths)              # and the contiguous one against the reference


# ---------------------------------------------------------------------------- compute="fp8"

@pytest.mark.parametrize("kfmt,vfmt,group,dim,tq,causal", [
    ("e4m3", "e4m3_block", 4, 64, 33, True),
    ("e4m3_block", "e4m3", 1, 128, 70, False),
    ("e4m3_block", "e4m3_block", 8, 256, 12, True),
])
def test_fp8_matches_reference(kfmt, vfmt, group, dim, tq, causal):
  """compute="fp8" (e4m3 q, K, P, V into FP8 wgmma) against test_attention_prefill.py's
  ref_fp8 bound: q rounded to e4m3 as the Triton kernel rounds it, P's e4m3 rounding (V's
  per-token factors over one power of two per row and head here: what underflows stays
  inside the bound's 2^-17 n max|v| term), the tensor cores' short accumulation."""
  bsz, cap, hkv = SHAPE
  k = _kv(kfmt, _normal(31, (bsz, cap, hkv, dim), 2.0))
  v = _kv(vfmt, _normal(32, (bsz, cap, hkv, dim)))
  q = _normal(33, (bsz, tq, hkv * group, dim))
  lengths = _lengths(bsz, cap)
  qpos = _chunk(lengths, tq) if causal else None
  o, lse = _attend(q, k, v, lengths, causal=causal, q_positions=qpos, compute="fp8")
  want, want_lse, tol, lse_tol = ref_fp8(q, k, v, lengths, qpos)
  assert_close(o, want, tol, "o")
  seen = np.isfinite(want_lse)
  np.testing.assert_array_equal(np.isfinite(np.asarray(lse)), seen)
  assert_close(np.where(seen, lse, 0.0), np.where(seen, want_lse, 0.0), lse_tol, "lse")


def test_fp8_paged_and_garbage_past_length():
  """compute="fp8": NaN codes and scales past the lengths give the clean cache's bits (V^T
  is zeroed there before the kernel, K's scores masked), and a shuffled page pool (pages
  of 16) gives the contiguous cache's bits."""
  bsz, hkv, dim = 2, 2, 64
  cap = 1024 if ON_GPU else 128
  lengths = _lengths(bsz, cap)
  past = np.arange(cap)[None, :] >= lengths[:, None]
  xk, xv = (jnp.where(past[:, :, None, None], 0.0, _normal(s, (bsz, cap, hkv, dim)))
            for s in (34, 35))
  k, v = _kv("e4m3_block", xk), _kv("e4m3", xv, scale=jnp.float32(30.0))
  q = _normal(36, (bsz, 70, hkv * 2, dim))
  qpos = _chunk(lengths, 70)
  run = lambda k, v, **kw: _attend(q, k, v, lengths, causal=True, q_positions=qpos,
                                   compute="fp8", **kw)
  a, la = run(k, v)
  b, lb = run(spoil_words(k, past), spoil_words(v, past))
  assert np.all(np.isfinite(np.asarray(b)))
  np.testing.assert_array_equal(np.asarray(b).view(np.uint32), np.asarray(a).view(np.uint32))
  (pk, table), (pv, _) = _paged(k, 16, 37), _paged(v, 16, 37)
  c, lc = run(pk, pv, block_tables=table)
  np.testing.assert_array_equal(np.asarray(c).view(np.uint32), np.asarray(a).view(np.uint32))
  np.testing.assert_array_equal(np.asarray(lc), np.asarray(la))


def _meta(fmt, shape, **kw):
  return _kv(fmt, jnp.zeros(shape, jnp.float32), **kw)


def test_errors():
  bsz, cap, hkv = SHAPE
  q = jnp.zeros((bsz, 70, hkv, 64), jnp.float32)
  e4 = _meta("e4m3_block", (bsz, cap, hkv, 64))
  with pytest.raises(ValueError, match="e4m3 / e5m2 per tensor"):
    _attend(q, _meta("mxfp4", (bsz, cap, hkv, 64)), e4, np.full(bsz, cap))
  with pytest.raises(ValueError, match="e4m3 / e5m2 per tensor"):
    _attend(q, e4, jnp.zeros((bsz, cap, hkv, 64), jnp.bfloat16), np.full(bsz, cap))
  with pytest.raises(ValueError, match="cover the whole head"):
    x = fp8lab.quantize(jnp.zeros((bsz, cap, hkv, 64)), "e4m3_block", block_shape=(32,))
    _attend(q, x, x, np.full(bsz, cap))
  with pytest.raises(ValueError, match="computes in bfloat16 semantics or with e4m3"):
    _attend(q, e4, e4, np.full(bsz, cap), compute="f32")
  with pytest.raises(ValueError, match="compute='fp8' takes K and V in e4m3"):
    _attend(q, e4, _meta("e5m2_block", (bsz, cap, hkv, 64)), np.full(bsz, cap), compute="fp8")
  with pytest.raises(ValueError, match="p_regs goes with compute='bf16'"):
    MP.PrefillMosaicConfig(p_regs=True, compute="fp8")
  with pytest.raises(ValueError, match="compute must be one of"):
    MP.PrefillMosaicConfig(compute="f32")
  with pytest.raises(ValueError, match="warpgroups must be 1 or 2"):
    MP.PrefillMosaicConfig(warpgroups=3)
  env = sys.modules["fp8lab.ops.attention"].MOSAIC_PREFILL_CONFIG_ENV
  with pytest.MonkeyPatch.context() as mp:
    for bad in ("64", "64:2:1.5"):     # read when the op is traced: a shape of its own
      mp.setenv(env, bad)
      with pytest.raises(ValueError, match="block_k:stages"):
        _attend(jnp.zeros((bsz, 71, hkv, 64), jnp.float32), e4, e4, np.full(bsz, cap))
  with pytest.raises(ValueError, match="multiple of 8 positions"):
    x = _meta("e4m3", (bsz, cap - 3, hkv, 64))
    _attend(q, x, x, np.full(bsz, cap - 3))
  with pytest.raises(ValueError, match="pages of 8, 16, 32"):
    pool = _meta("e4m3_block", (4, 24, hkv, 64))
    fp8lab.attention(q, pool, pool, block_tables=jnp.zeros((bsz, 2), jnp.int32),
                     implementation="mosaic", interpret=INTERPRET)
  with pytest.raises(ValueError, match="block_k"):
    MP.PrefillMosaicConfig(block_k=32)
  with pytest.raises(ValueError, match="stages"):
    MP.PrefillMosaicConfig(stages=0)
  for cfg in (MP.PrefillMosaicConfig(p_regs=True), MP.PrefillMosaicConfig(warpgroups=2)):
    with pytest.raises(ValueError, match="compiled only"):
      MP.prefill_mosaic(q, jnp.zeros((bsz, 70), jnp.int32), jnp.full((bsz,), cap, jnp.int32),
                        e4, e4, kplan=AK.kv_plan(e4, 64), vplan=AK.kv_plan(e4, 64), group=1,
                        capacity=cap, sm_scale=0.125, config=cfg, interpret=True)


@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("compute", ["bf16", "fp8"])
def test_default_launch_fits_shared_memory(dim, compute):
  """The compiled default's scratch (smem_bytes: Mosaic's own count at these shapes was
  within 2.1 KB above it) leaves room for two programs per SM up to D = 128, one at 256,
  in the H200's / H100's 228 KB; p from registers in the bf16 mode."""
  cfg = MP.prefill_mosaic_config(dim, compute=compute)
  assert cfg.compute == compute and cfg.p_regs == (compute == "bf16") and cfg.stages >= 2
  per_sm = 2 if dim <= 128 else 1
  assert per_sm * (MP.smem_bytes(cfg, dim) + 8 * 1024) <= 228 * 1024


@gpu
@pytest.mark.parametrize("block_k,stages,p_regs,compute,wgs", [
    (64, 2, False, "bf16", 1), (64, 3, True, "bf16", 1), (128, 2, True, "bf16", 1),
    (64, 2, True, "bf16", 2), (64, 3, False, "bf16", 2), (64, 2, False, "fp8", 1),
    (64, 2, False, "fp8", 2), (128, 2, False, "fp8", 2)])
@pytest.mark.parametrize("causal", [True, False])
def test_compiled_variants_match_reference(block_k, stages, p_regs, compute, wgs, causal):
  """Launch variants compiled (p from registers and the two-warpgroup kernel, which the
  interpreter does not run, and wider blocks), against the bound of their compute mode;
  400 rows per KV head: 7 blocks of 64, so the two-warpgroup kernel gets a block of
  padding rows only."""
  bsz, cap, hkv = SHAPE
  dim, group, tq = 128, 4, 100
  k = _kv("e4m3_block", _normal(21, (bsz, cap, hkv, dim)))
  v = _kv("e4m3" if compute == "fp8" else "e5m2_block", _normal(22, (bsz, cap, hkv, dim)))
  q = _normal(23, (bsz, tq, hkv * group, dim)).astype(jnp.bfloat16)
  lengths = _lengths(bsz, cap)
  qpos = _chunk(lengths, tq) if causal else None
  if compute == "fp8":
    want, _, tol, _ = ref_fp8(q, k, v, lengths, qpos)
  else:
    want, _, tol, _ = ref_prefill(q, k, v, lengths, qpos, "bf16")
  cfg = MP.PrefillMosaicConfig(block_k=block_k, stages=stages, p_regs=p_regs, compute=compute,
                               warpgroups=wgs)
  o, _ = MP.prefill_mosaic(q, jnp.full((bsz, tq), AK.NO_LIMIT, jnp.int32) if qpos is None
                           else qpos, jnp.asarray(lengths), k, v, kplan=AK.kv_plan(k, dim),
                           vplan=AK.kv_plan(v, dim), group=group, capacity=cap,
                           sm_scale=dim ** -0.5, config=cfg, out_dtype=jnp.float32)
  assert_close(o, want, tol, f"{cfg}")
