"""Tests of fp8lab.attention's prefill kernel (fp8lab/kernels/attention/prefill.py, Tq > 1).

Default (CPU): the kernel runs in Pallas interpret mode on small shapes whose lengths are
multiples of no block; half of each grid is marked `slow` (switches.grid). With
FP8LAB_GPU_TESTS=1 on a GPU the same tests run compiled on larger shapes. Expected values
are float64 numpy attention over K / V dequantized by the golden model
(test_attention.ref64), never the code under test.

Bounds. compute="f32": test_attention.py's derived float32 bound as it stands. compute="bf16"
(the semantics of docs/attention_kernel.md section 5): the reference takes q rounded to
bfloat16 (round to nearest even), and K / V as the kernel feeds the tensor cores: the golden
values where kv.split_serves says the kernel's bfloat16 operand is exact (codes times a power
of two or an E4M3 scale, its float32 per-tensor / per-token-head factor applied to the
products: one more rounding per score and per P V product), the golden values rounded to
bfloat16 otherwise. The products of bfloat16 operands are exact and accumulate in float32 on
the tensor cores, so ref64's tensor-core bound (doubled accumulation terms, (D + 3) u per
score) holds, plus P rounded to bfloat16 before the P V dot while l sums the float32 p: a
relative 2^-8 per term, |sum_j (p~_j - p_j) v_j| / l <= 2^-8 max_j |v_j| over the positions
the row sees.
"""

from __future__ import annotations

import functools
import re
import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fp8lab
from fp8lab.kernels import attention as AK
from fp8lab.quantized import QuantizedArray
from fp8lab_tests.lowering import triton_irs
from fp8lab_tests.switches import ON_GPU, gpu, grid
from fp8lab_tests.test_attention import (INTERPRET, KV_FORMATS, _kv, _normal, _paged, _u_out,
                                         _values64, assert_close, ref64, spoil_words)

warnings.filterwarnings("ignore", message=".*Triton.*deprecated.*")
warnings.filterwarnings("ignore", message=".*Pallas Triton backend is deprecated.*")

# (B, S, Hkv): S a multiple of no block (16 .. 128); larger compiled.
SHAPE = (2, 600, 2) if ON_GPU else (2, 70, 2)
_ALL = KV_FORMATS + (None,)
# Every KV operand once as K and once as V, two at a time, GQA ratios cycled over 1, 4, 8.
_PAIRS = [(_ALL[i], _ALL[(i + 1) % len(_ALL)], (1, 4, 8)[i // 2 % 3])
          for i in range(0, len(_ALL), 2)]
_P_BF16 = 2.0**-8      # relative rounding of P to bfloat16 (8 significant bits: u = 2^-8)


def _bf16(x: np.ndarray) -> np.ndarray:
  return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def _fed(x, dim: int) -> np.ndarray:
  """K or V as the bf16 kernel multiplies them (module docstring), float64."""
  vals = _values64(x)
  return vals if AK.split_serves(AK.kv_plan(x, dim)) else _bf16(vals)


def ref_prefill(q, k, v, lengths, q_positions=None, compute="bf16", sm_scale=None, fed=_fed):
  """(o, lse, o_tol, lse_tol) of the float64 reference with the bound of `compute`; `fed`
  gives K / V as the bf16 dots take them (float64)."""
  lengths = np.asarray(lengths)
  qpos = None if q_positions is None else np.asarray(q_positions)
  if compute == "f32":
    return ref64(q, _values64(k), _values64(v), lengths, sm_scale, qpos)
  dim = q.shape[-1]
  qb = jnp.asarray(_bf16(np.asarray(q.astype(jnp.float32))), jnp.float32)
  kd, vd = fed(k, dim), fed(v, dim)
  o, lse, o_tol, lse_tol = ref64(qb, kd, vd, lengths, sm_scale, qpos, tensor_cores=True)
  # max |v| over the positions each row sees: a running max along S, read at n - 1
  bsz, tq, hq, _ = q.shape
  g = hq // kd.shape[2]
  run = np.maximum.accumulate(np.abs(vd).max(-1), axis=1)              # (B, S, Hkv)
  n = np.broadcast_to(lengths[:, None], (bsz, tq))
  if qpos is not None:
    n = np.minimum(n, qpos + 1)
  for b in range(bsz):
    for t in range(tq):
      if n[b, t] > 0:
        o_tol[b, t] += _P_BF16 * run[b, n[b, t] - 1, np.arange(hq) // g][:, None]
  return o, lse, o_tol, lse_tol


def _slow(*cases):
  return [pytest.param(*c, marks=pytest.mark.slow) for c in cases]


def check_prefill(q, k, v, lengths, q_positions=None, causal=None, compute="bf16",
                  implementation="pallas", **kw):
  """fp8lab.attention through a prefill kernel (default the Triton one; compute "bf16" or
  "f32": both take it for these row counts), o and lse against ref_prefill; returns
  (o, lse)."""
  lengths = jnp.asarray(lengths, jnp.int32)
  causal = q_positions is not None if causal is None else causal
  o, lse = fp8lab.attention(q, k, v, kv_lengths=lengths, return_lse=True, causal=causal,
                            q_positions=q_positions, compute=compute,
                            implementation=implementation, interpret=INTERPRET, **kw)
  if causal and q_positions is None:
    q_positions = np.broadcast_to(np.arange(q.shape[1]), q.shape[:2])
  want, want_lse, tol, lse_tol = ref_prefill(q, k, v, lengths, q_positions,
                                             compute, kw.get("sm_scale"))
  assert o.dtype == q.dtype and o.shape == q.shape
  assert_close(o, want, tol + _u_out(q.dtype) * np.abs(want), "o")
  seen = np.isfinite(want_lse)
  np.testing.assert_array_equal(np.isfinite(np.asarray(lse)), seen)
  assert_close(np.where(seen, lse, 0.0), np.where(seen, want_lse, 0.0), lse_tol, "lse")
  return o, lse


def _lengths(bsz, cap):
  """Per-row lengths: 65 and 33 (for S = 70) end one position into a new K block of 16, 32
  and 64 (an off-by-one loop bound drops it)."""
  base = [cap - 5, 33, cap, 1]
  return np.array([base[i % len(base)] for i in range(bsz)], np.int32)


def _chunk(bsz, tq, lengths):
  """q_positions of the last tq tokens of each row (a chunk at the cache's end)."""
  return jnp.asarray(np.asarray(lengths)[:, None] - tq + np.arange(tq)[None, :], jnp.int32)


def _cache(seed, kfmt, vfmt, dim=64, shape=SHAPE):
  bsz, cap, hkv = shape
  k = _kv(kfmt, _normal(seed, (bsz, cap, hkv, dim), 2.0))
  v = _kv(vfmt, _normal(seed + 1, (bsz, cap, hkv, dim)))
  return k, v


# ---------------------------------------------------------------------------- formats

# Interpret mode: compiling the kernel dominates a test's time, so the tests below reuse the
# launches of test_every_format where they can (same shapes and formats: one compile).
_TQ = 24


def _queries(seed, group, causal, lengths, dim=64, dtype=jnp.float32):
  """q (B, Tq, Hq, D) and q_positions: Tq = S over the whole cache for causal group 1 (query
  i at position i, no q_positions), else a chunk of _TQ queries at the end of each row
  (causal) or seeing all of it."""
  bsz, cap, hkv = SHAPE
  self_attn = causal and group == 1
  tq = cap if self_attn else _TQ
  q = _normal(seed, (bsz, tq, hkv * group, dim)).astype(dtype)
  return q, (_chunk(bsz, tq, lengths) if causal and not self_attn else None)


@pytest.mark.parametrize("kfmt,vfmt,group,causal", grid(_PAIRS, [True, False]))
def test_every_format(kfmt, vfmt, group, causal):
  """Every KV format (and plain float32) as K and as V, GQA 1 / 4 / 8, per-row lengths
  (_lengths), causal and not; self-attention Tq = S (causal, no q_positions) for GQA 1."""
  lengths = _lengths(SHAPE[0], SHAPE[1])
  k, v = _cache(1, kfmt, vfmt)
  q, qpos = _queries(3, group, causal, lengths)
  check_prefill(q, k, v, lengths, q_positions=qpos, causal=causal)


@pytest.mark.parametrize("dim,fmt,dtype", [(256, None, jnp.float16)] + _slow(
    (128, "nvfp4", jnp.bfloat16), (128, "e4m3_block", jnp.float16),
    (256, "nvfp4", jnp.bfloat16), (256, "mxfp4", jnp.float32)))
def test_head_dims_and_q_dtypes(dim, fmt, dtype):
  """D = 128 / 256, bfloat16 / float16 q and output (float16 q is rounded to bfloat16);
  by default plain float32 K / V (rounded to bfloat16 in the kernel), the packed formats
  with FP8LAB_SLOW_TESTS=1."""
  bsz, cap, hkv = SHAPE
  tq = 20
  k, v = _cache(5, fmt, fmt, dim)
  q = _normal(7, (bsz, tq, hkv * 4, dim)).astype(dtype)
  lengths = _lengths(bsz, cap)
  check_prefill(q, k, v, lengths, q_positions=_chunk(bsz, tq, lengths))


@pytest.mark.parametrize("kfmt,vfmt,causal", [("e4m3_block", None, True)] + _slow(
    ("e4m3_block", "mxfp4", False), ("nvfp4", None, False), ("f16", "e5m2_block", True)))
def test_f32_compute(kfmt, vfmt, causal):
  """compute="f32": IEEE float32 dots, test_attention.py's float32 bound, for many rows
  (the prefill kernel, not the decode one)."""
  bsz, cap, hkv = SHAPE
  tq = 24
  k, v = _cache(9, kfmt, vfmt)
  q = _normal(11, (bsz, tq, hkv * 4, 64))
  lengths = _lengths(bsz, cap)
  check_prefill(q, k, v, lengths, q_positions=_chunk(bsz, tq, lengths) if causal else None,
                compute="f32")


def _q_e4m3(q) -> np.ndarray:
  """q as compute="fp8" rounds it (float64, exact): per (token, head) times 2^(7 -
  floor(log2 max|q|)), rounded to e4m3 (nearest even), times the inverse power of two."""
  qf = np.asarray(q.astype(jnp.float32), np.float32)
  amax = np.abs(qf).max(-1, keepdims=True)
  _, ex = np.frexp(amax)
  e = np.where(amax > 0, ex - 1, -127)
  scaled = qf * np.exp2(np.clip(7 - e, -126, 127)).astype(np.float32)
  return scaled.astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * np.exp2(
      np.clip(e - 7, -126, 127))


def ref_fp8(q, k, v, lengths, q_positions=None):
  """(o, lse, o_tol, lse_tol) for compute="fp8": ref64's tensor-core bound over the e4m3 q
  (_q_e4m3) and the golden K / V (e4m3 codes times their float32 factor, which the kernel
  applies to the products), plus: the FP8 tensor cores' accumulation, taken as keeping only
  ~13 bits (eta_a = 2 * 2^-13 sm max_j sum_d |q_d k_jd|, as eta in the o and lse bounds); P
  rounded to e4m3 (times 2^8, and over V's per-token factors divided by a power of two
  >= their block max: < 1): a relative 2^-4 where normal, 2^-18 absolute below (2^-17
  relative to the largest factor), so |sum_j (p~_j - p_j) v_j| / l <= 2^-4 sum_j p_j |v_j|
  / l + 2^-17 n max |v| (l >= 1; max over the row's length)."""
  lengths = np.asarray(lengths)
  q8 = _q_e4m3(q)
  kd, vd = _values64(k), _values64(v)
  qpos = None if q_positions is None else np.asarray(q_positions)
  o, lse, o_tol, lse_tol = ref64(jnp.asarray(q8, jnp.float32), kd, vd, lengths, None, qpos,
                                 tensor_cores=True)
  bsz, tq, hq, dim = q8.shape
  g = hq // kd.shape[2]
  sm = dim ** -0.5
  for b in range(bsz):
    vmax_len = np.abs(vd[b, :lengths[b]]).max() if lengths[b] else 0.0
    for t in range(tq):
      n = int(lengths[b]) if qpos is None else min(int(lengths[b]), int(qpos[b, t]) + 1)
      if n <= 0:
        continue
      for h in range(hq):
        kk, vv = kd[b, :n, h // g], vd[b, :n, h // g]
        sc = (kk @ q8[b, t, h]) * sm
        p = np.exp(sc - sc.max())
        w = p @ np.abs(vv).max(-1) / p.sum()
        eta_a = 2 * 2.0**-13 * sm * (np.abs(kk) @ np.abs(q8[b, t, h])).max()
        o_tol[b, t, h] += (2.5 * eta_a * np.abs(vv).max() + 2.0**-4 * w
                           + 2.0**-17 * n * vmax_len)
        lse_tol[b, t, h] += eta_a
  return o, lse, o_tol, lse_tol


@pytest.mark.parametrize("kfmt,vfmt,group,causal,dim", [("e4m3", "e4m3_block", 4, True, 64)] +
                         _slow(("e4m3_block", "e4m3", 1, False, 128),
                               ("e4m3_block", "e4m3_block", 8, True, 256)))
def test_fp8_compute(kfmt, vfmt, group, causal, dim):
  """compute="fp8" (e4m3 q / P / K / V dots) against ref_fp8's bound."""
  bsz, cap, hkv = SHAPE
  lengths = _lengths(bsz, cap)
  k, v = _cache(41, kfmt, vfmt, dim)
  q, qpos = _queries(43, group, causal, lengths, dim)
  o, lse = fp8lab.attention(q, k, v, kv_lengths=jnp.asarray(lengths), causal=causal,
                            q_positions=qpos, return_lse=True, compute="fp8",
                            implementation="pallas", interpret=INTERPRET)
  if causal and qpos is None:
    qpos = np.broadcast_to(np.arange(q.shape[1]), q.shape[:2])
  want, want_lse, tol, lse_tol = ref_fp8(q, k, v, lengths, qpos)
  assert_close(o, want, tol, "o")
  seen = np.isfinite(want_lse)
  np.testing.assert_array_equal(np.isfinite(np.asarray(lse)), seen)
  assert_close(np.where(seen, lse, 0.0), np.where(seen, want_lse, 0.0), lse_tol, "lse")


# ---------------------------------------------------------------------------- masks

@pytest.mark.parametrize("block_q,block_k,fmt", [(16, 16, "e4m3")] + _slow(
    (32, 64, "e4m3"), (16, 16, "mxfp8"), (32, 16, "mxfp8")))
def test_blocks_and_q_offsets(block_q, block_k, fmt):
  """Chunked prefill through the launch directly, with other block sizes: a chunk of Tq
  queries at different offsets per row (the last chunk of row 0, a middle chunk of row 1
  whose first queries sit past its length), some queries at negative positions (they see no
  key: zeros, lse -inf), GQA 4 (query blocks cut through token groups)."""
  bsz, cap, hkv = SHAPE
  dim, group, tq = 64, 4, 23
  k, v = _cache(13, fmt, fmt)
  q = _normal(15, (bsz, tq, hkv * group, dim))
  lengths = np.array([cap - 5, 30], np.int32)
  qpos = np.stack([np.arange(tq) + cap - 5 - tq, np.arange(tq) + 20]).astype(np.int32)
  qpos[1, :3] = [-5, -1, -1]
  cfg = AK.PrefillConfig(block_q=block_q, block_k=block_k)
  o, lse = AK.prefill_pallas(q, jnp.asarray(qpos), jnp.asarray(lengths), None, k, v,
                             kplan=AK.kv_plan(k, dim), vplan=AK.kv_plan(v, dim), group=group,
                             capacity=cap, page_size=cap, sm_scale=0.2, config=cfg,
                             interpret=INTERPRET)
  want, want_lse, tol, lse_tol = ref_prefill(q, k, v, lengths, qpos, "bf16", 0.2)
  assert_close(o, want, tol, "o")
  np.testing.assert_array_equal(np.asarray(o[1, :3]), 0.0)
  assert np.all(np.asarray(lse[1, :3]) == -np.inf)
  seen = np.isfinite(want_lse)
  np.testing.assert_array_equal(np.isfinite(np.asarray(lse)), seen)
  assert_close(np.where(seen, lse, 0.0), np.where(seen, want_lse, 0.0), lse_tol, "lse")


def _spoil(x, past):
  """All-ones words and NaN / 0xFF scales at the positions `past` (B, S); NaN in a plain
  array."""
  if not isinstance(x, QuantizedArray):
    return jnp.where(jnp.asarray(past)[:, :, None, None], jnp.nan, x)
  return spoil_words(x, past)


def clean_and_spoiled(kfmt, vfmt, lengths):
  """([K, V] with zeros past each row's length, the same with all-ones words and NaN / 0xFF
  scales there (NaN in a plain array)); fixed scales keep the valid codes equal."""
  bsz, cap, hkv = SHAPE
  past = np.arange(cap)[None, :] >= np.asarray(lengths)[:, None]

  def kv(fmt, seed):
    kw = dict(scale=jnp.float32(30.0)) if fmt in ("e4m3", "e5m2") else (
        dict(scale=jnp.float32(500.0)) if fmt == "nvfp4" else {})
    x = jnp.where(past[:, :, None, None], 0.0, _normal(seed, (bsz, cap, hkv, 64)))
    return _kv(fmt, x, **kw)

  clean = [kv(kfmt, 17), kv(vfmt, 18)]
  return clean, [_spoil(x, past) for x in clean]


@pytest.mark.parametrize("kfmt,vfmt,group,causal,compute", [
    ("mxfp4", "nvfp4", 8, True, "bf16"), ("e4m3", "e4m3_block", 4, True, "fp8")] + _slow(
        (None, "e4m3", 8, False, "bf16"), ("e4m3_block", "e5m2_block", 1, True, "bf16"),
        ("e4m3", "e5m2", 1, False, "bf16"), ("mxfp8", "mxfp8_e5m2", 4, True, "bf16"),
        ("e4m3_block", "e4m3", 1, False, "fp8"), (None, "bf16", 4, True, "f32")))
def test_nan_past_lengths_never_read(kfmt, vfmt, group, causal, compute):
  """NaN codes / scales (all-ones bytes; NaN in a plain array) past each row's length: the
  output and lse are bit for bit those over a cache with zeros there, and finite (each
  compute mode)."""
  lengths = _lengths(SHAPE[0], SHAPE[1])
  clean, dirty = clean_and_spoiled(kfmt, vfmt, lengths)
  q, qpos = _queries(19, group, causal, lengths)
  run = functools.partial(fp8lab.attention, q, kv_lengths=jnp.asarray(lengths), causal=causal,
                          q_positions=qpos, return_lse=True, compute=compute,
                          implementation="pallas", interpret=INTERPRET)
  (a, la), (b, lb) = run(*clean), run(*dirty)
  assert np.all(np.isfinite(np.asarray(b)))
  np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))
  np.testing.assert_array_equal(np.asarray(la).view(np.uint32), np.asarray(lb).view(np.uint32))


# ---------------------------------------------------------------------------- paths

def test_paged_equals_contiguous():
  """The cache as a shuffled page pool (page size 10, not a power of two): bit for bit the
  contiguous result."""
  bsz, cap, hkv = SHAPE
  lengths = _lengths(bsz, cap)
  k, v = _cache(21, "mxfp4", "nvfp4")
  kp, table = _paged(k, 10, 0)
  vp, _ = _paged(v, 10, 0)
  q, qpos = _queries(23, 8, True, lengths)
  run = functools.partial(fp8lab.attention, q, kv_lengths=jnp.asarray(lengths), causal=True,
                          q_positions=qpos, compute="bf16", implementation="pallas",
                          interpret=INTERPRET)
  a, b = np.asarray(run(k, v)), np.asarray(run(kp, vp, block_tables=table))
  np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_deterministic_and_dispatch():
  """Two calls give the same bits; "pallas" picks the prefill kernel for Tq * group >
  DECODE_ROWS or compute="bf16", the decode kernel otherwise; compute is checked."""
  import sys
  A = sys.modules["fp8lab.ops.attention"]
  bsz, cap, hkv = SHAPE
  k, v = _cache(25, "mxfp8", "mxfp8_e5m2")
  q, _ = _queries(27, 4, False, None)
  f = functools.partial(fp8lab.attention, implementation="pallas", interpret=INTERPRET)
  a = np.asarray(f(q, k, v))
  np.testing.assert_array_equal(np.asarray(f(q, k, v)).view(np.uint32), a.view(np.uint32))
  q = _normal(27, (bsz, _TQ, hkv * 8, 64))

  def kernels(qq, **kw):
    text = str(jax.make_jaxpr(lambda x: fp8lab.attention(
        x, k, v, implementation="pallas", interpret=True, **kw))(qq))
    return set(re.findall(r"fp8lab_(prefill|attention)_", text))
  assert kernels(q) == {"prefill"}
  assert kernels(q[:, :1]) == {"attention"}                 # 8 rows: decode
  assert kernels(q[:, :1], compute="f32") == {"attention"}
  assert kernels(q[:, :1], compute="bf16") == {"prefill"}
  assert kernels(q[:, :A.DECODE_ROWS // 8 + 1], compute="f32") == {"prefill"}
  with pytest.raises(ValueError, match="compute='fp8' takes K and V in e4m3"):
    fp8lab.attention(q, k, v, compute="fp8")
  with pytest.raises(ValueError, match="compute must be"):
    fp8lab.attention(q, k, v, compute="fp16")
  with pytest.raises(ValueError, match="needs q_positions"):
    fp8lab.attention(q[:, :5], k, v, causal=True)
  with pytest.raises(ValueError, match="compute must be"):
    AK.PrefillConfig(compute="fp16")


@pytest.mark.slow
def test_hadamard_and_grad():
  """A Hadamard-rotated K and V (q rotated, the float32 output rotated back), and grad with
  respect to q equal to the reference's."""
  bsz, cap, hkv = SHAPE
  kr = fp8lab.quantize(_normal(29, (bsz, cap, hkv, 64)), "mxfp4", hadamard=32)
  vr = fp8lab.quantize(_normal(30, (bsz, cap, hkv, 64)), "mxfp4", hadamard=32)
  q = _normal(31, (bsz, cap, hkv * 4, 64))
  lengths = _lengths(bsz, cap)
  kd = np.asarray(fp8lab.dequantize(kr, unrotate=True), np.float64)
  vd = np.asarray(fp8lab.dequantize(vr, unrotate=True), np.float64)
  # q rotated in float32 then rounded to bfloat16: its rounding is that of the rotated q,
  # so the f32 compute keeps the derived bound (plus the rotations' roundings)
  want, _, tol, _ = ref64(q, kd, vd, lengths)
  o = fp8lab.attention(q, kr, vr, kv_lengths=jnp.asarray(lengths), compute="f32",
                       implementation="pallas", interpret=INTERPRET)
  assert_close(o, want, tol + 64 * 2.0**-24 * np.abs(vd).max(), "rotated")
  w = _normal(32, q.shape)
  loss = lambda impl: lambda x: jnp.sum(fp8lab.attention(
      x, kr, vr, kv_lengths=jnp.asarray(lengths), causal=True, implementation=impl,
      interpret=INTERPRET and impl == "pallas") * w)
  np.testing.assert_array_equal(np.asarray(jax.grad(loss("pallas"))(q)),
                                np.asarray(jax.grad(loss("reference"))(q)))


@pytest.mark.parametrize("fmt,compute", grid(list(_ALL), ["bf16", "f32"]) + [
    ("e4m3", "fp8"), ("e4m3_block", "fp8")])
def test_triton_lowering(fmt, compute):
  """The kernel lowers to Triton IR for the H200 from any host, paged, for every format and
  each arithmetic: two dots per K block; bf16 operands on the bf16 path, IEEE float32 (no
  tf32) on the f32 path, no fp8 / fp4 types on either (the integer decode); e4m3 operands
  on the fp8 path, the codes bitcast (no conversion of K / V)."""
  bsz, cap, hkv, dim, group = 2, 256, 2, 128, 4
  x = jnp.zeros((bsz, cap, hkv, dim), jnp.bfloat16)
  kv = x if fmt is None else jax.eval_shape(lambda a: _kv(fmt, a), x)
  plan = AK.kv_plan(kv, dim)
  cfg = AK.prefill_config(512, dim, compute)
  f = lambda q, qpos, n, table, k, v: AK.prefill_pallas(
      q, qpos, n, table, k, v, kplan=plan, vplan=plan, group=group, capacity=cap,
      page_size=32, sm_scale=0.1, config=cfg)
  aval = jax.ShapeDtypeStruct
  (ir,) = triton_irs(f, aval((bsz, 128, hkv * group, dim), jnp.bfloat16),
                     aval((bsz, 128), jnp.int32), aval((bsz,), jnp.int32),
                     aval((bsz, cap // 32), jnp.int32), kv, kv)
  assert "tt.func" in ir
  dots = re.findall(r"tt\.dot [^\n]*", ir)
  assert len(dots) == 2, dots
  if compute == "fp8":
    assert all("xf8E4M3FN> * tensor" in d for d in dots), dots
    # fp_to_fp into e4m3 for q and P only; K / V codes are loaded as bytes and bitcast
    assert len(re.findall(r"tt\.fp_to_fp [^\n]*-> tensor<\w+xf8E4M3FN>", ir)) == 2
    assert len(re.findall(r"tt\.load [^\n]*x!tt\.ptr<i8>>", ir)) == 2
    return
  assert not re.search(r"\bf8E|\bf4E", ir), re.search(r"\bf8E\w*|\bf4E\w*", ir).group(0)
  if compute == "bf16":
    assert all("bf16>" in d for d in dots), dots
  else:
    assert "inputPrecision = tf32" not in ir


@gpu
@pytest.mark.parametrize("fmt", ["e4m3", "e4m3_block", "nvfp4", "mxfp4", "e5m2", None])
@pytest.mark.parametrize("causal", [True, False])
def test_compiled_target_shape(fmt, causal):
  """Compiled, near the issue's shapes (Hq 32, Hkv 8, D 128, S 2048 with lengths 2045 and
  1001, the default launch), against the float64 reference for a slice of the queries
  (ref64 loops in Python)."""
  bsz, cap, hkv, dim, group = 2, 2048, 8, 128, 4
  k, v = _cache(33, fmt, fmt, dim, (bsz, cap, hkv))
  if fmt is None:
    k, v = k.astype(jnp.bfloat16), v.astype(jnp.bfloat16)
  q = _normal(35, (bsz, cap, hkv * group, dim)).astype(jnp.bfloat16)
  lengths = np.array([cap - 3, 1001], np.int32)
  o, lse = fp8lab.attention(q, k, v, kv_lengths=jnp.asarray(lengths), causal=causal,
                            return_lse=True, implementation="pallas")
  sl = np.r_[0:40, 990:1010, cap - 40:cap]
  qpos = np.broadcast_to(sl, (bsz, len(sl))) if causal else None
  want, want_lse, tol, _ = ref_prefill(q[:, sl], k, v, lengths, qpos)
  assert_close(np.asarray(o, np.float32)[:, sl], want, tol + 2.0**-8 * np.abs(want), "o")
