"""Flash-attention prefill over a packed KV cache (fp8lab.attention's kernel for Tq > 1).

Grid (n_q_blocks, B, Hkv). The query rows of KV head h of batch row b are the Tq tokens
times the GQA group, row t * group + g = token t, query head h * group + g; program (i, b,
h) takes block_q consecutive rows (block n_q_blocks - 1 - i: the causally longest blocks
start first) and loops over the cache in blocks of block_k positions, up to the last
position any of its rows can see: min(length, max q_position + 1), so fully masked causal
blocks are never visited. Per K / V block:

  1. the row offsets of the positions (kv.cache_row_offsets: contiguous or paged);
  2. K's packed words gathered as a (block_k, D) tile in the natural element order and
     decoded with integer ops (kv.load_kv_split / kv.load_kv, the decode kernel's loads):
     compute="bf16": bfloat16 values, exact where kv.split_serves says so (codes times
     power-of-two / E4M3 block scales), with the float32 per-tensor / per-token-head factor
     applied to the score columns or P columns instead; rounded to bfloat16 otherwise
     (f16 / float32 values, float32 scales on blocks shorter than D). compute="f32": the
     golden float32 values;
  3. scores = q @ K^T (bf16 x bf16 -> float32 on the tensor cores; or IEEE float32), times
     the factors and sm_scale, where(keep, s, -inf) with keep = position < kv_length and
     position <= the row's q_position (INT32_MAX for non-causal rows); loads past the length
     are masked and the tiles zeroed there, so NaN / Inf stored there never enter a product;
  4. online softmax in float32 (running max m, sum l; a row with no key yet keeps m = -inf,
     no NaN), P (times V's per-position factor) rounded to bfloat16 for the P @ V dot
     (compute="bf16"), float32 accumulation.
At the end each row is normalized in-kernel (o / l: Triton's approximate float32 division,
within the tests' bound), written in the output dtype straight into (B, Tq, Hq, D), and its
log-sum-exp m + log l into (B, Tq, Hq). No split of the cache, no atomics: deterministic.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from fp8lab.formats import E4M3
from fp8lab.kernels.attention.kv import (KVPlan, cache_row_offsets, kv_leaves, kv_refs,
                                         load_kv, load_kv_split, query_row, softmax_step,
                                         split_serves)

__all__ = ["PrefillConfig", "prefill_config", "prefill_pallas", "PREFILL_COMPUTE",
           "fp8_serves"]

# The kernel's arithmetic: "bf16" (bfloat16 dots, float32 softmax and accumulation), "f32"
# (IEEE float32 dots, as the decode kernel's default) or "fp8" (e4m3 dots, fp8_serves).
PREFILL_COMPUTE = ("bf16", "f32", "fp8")
# compute="fp8": q scaled per row by a power of two into [128, 256), P (in [0, 1]) by 2^8:
# both well inside e4m3's range (max 448), so the saturating fp8 casts never saturate.
Q_LOG2_TOP = 7
P_LOG2 = 8
# tl.dot's smallest M / N.
_MIN_BLOCK = 16


@dataclasses.dataclass(frozen=True)
class PrefillConfig:
  """Launch parameters: block_q query rows (tokens x GQA group) per program, block_k cache
  positions per step (powers of two >= 16), num_warps, num_stages, and `compute`."""
  block_q: int = 64
  block_k: int = 64
  num_warps: int = 4
  num_stages: int = 2
  compute: str = "bf16"

  def __post_init__(self):
    if self.compute not in PREFILL_COMPUTE:
      raise ValueError(f"compute must be one of {PREFILL_COMPUTE}, got {self.compute!r}")
    for name in ("block_q", "block_k"):
      n = getattr(self, name)
      if n < _MIN_BLOCK or n & (n - 1):
        raise ValueError(f"{name} must be a power of two >= {_MIN_BLOCK}, got {n}")


def fp8_serves(plan: KVPlan) -> bool:
  """Whether compute="fp8" takes this K / V operand: e4m3 codes whose factor does not vary
  along D (per tensor, or per token and head: blocks of D), so that the codes themselves
  are the fp8 dot's operand and the factor multiplies the score / P columns."""
  return plan.elem is E4M3 and (plan.kind == "tensor"
                                or (plan.kind == "block" and plan.block_len == plan.dim))


def log2_floor(x):
  """floor(log2(x)) of float32 x > 0 (normals; -127 for 0 and subnormals), integer ops."""
  bits = lax.bitcast_convert_type(x, jnp.uint32)
  return ((bits >> jnp.uint32(23)) & jnp.uint32(0xFF)).astype(jnp.int32) - 127


def exp2_clipped(e):
  """float32 2^e for int32 e, clipped to the normal range (integer ops: exact)."""
  field = (jnp.clip(e, -126, 127) + 127).astype(jnp.uint32) << jnp.uint32(23)
  return lax.bitcast_convert_type(field, jnp.float32)


def _load_e4m3(plan: KVPlan, refs, rows_off, valid, block: int):
  """compute="fp8": the (block, D) e4m3 codes of the block's rows as float8_e4m3fn (0 past
  the length: masked loads read 0), the per-position float32 factor (block,) or None (0
  past the length) and the scalar factor or None. The words come as their bytes (code d
  of a row is byte d: prefill_pallas bitcasts them), so a lane loads its code directly
  (contiguous, vectorizable loads; no shift or mask)."""
  bytes_ref, scales_ref, ts_ref = refs
  dim = plan.dim
  d = lax.iota(jnp.int32, dim)
  mask = jnp.broadcast_to(valid[:, None], (block, dim))
  codes = plgpu.load(bytes_ref.at[(rows_off * dim)[:, None] + d[None, :]], mask=mask, other=0)
  x = lax.bitcast_convert_type(codes, jnp.float8_e4m3fn)
  if plan.kind == "tensor":
    return x, None, ts_ref[0]
  pos_f = jnp.where(valid, plgpu.load(scales_ref.at[rows_off], mask=valid, other=0), 0.0)
  return x, pos_f, None


def _next_pow2(n: int) -> int:
  return 1 << max(0, (int(n) - 1).bit_length())


def prefill_config(rows: int, dim: int, compute: str = "bf16") -> PrefillConfig:
  """The default launch (not tuned on a GPU yet): block_q 128 query rows and block_k 64
  positions with 8 warps for D <= 128 on the bf16 dots (JAX's Triton flash attention uses
  128 x 128, 4-8 warps); halved for D = 256 and for the float32 dots, whose tiles live in
  registers; block_q no larger than the rows (>= 16)."""
  big = dim <= 128 and compute != "f32"
  block_q = min(128 if big else 64, max(_MIN_BLOCK, _next_pow2(rows)))
  block_k = 64 if dim <= 128 else 32
  return PrefillConfig(block_q=block_q, block_k=block_k,
                       num_warps=8 if block_q >= 128 else 4, compute=compute)


def _kernel(*refs, kplan: KVPlan, vplan: KVPlan, paged: bool, kv_heads: int, group: int,
            tq: int, capacity: int, page_size: int, pages: int, pool_pages: int,
            sm_scale: float, block_q: int, block_k: int, compute: str, k_split: bool,
            v_split: bool, spare: int):
  it = iter(refs)
  q_ref, qpos_ref, len_ref = next(it), next(it), next(it)
  table_ref = next(it) if paged else None
  k_refs, v_refs = kv_refs(it, kplan), kv_refs(it, vplan)
  o_ref, lse_ref = next(it), next(it)
  dim = kplan.dim

  qb = pl.num_programs(0) - 1 - pl.program_id(0)
  b, h = pl.program_id(1), pl.program_id(2)
  r = qb * block_q + lax.iota(jnp.int32, block_q)
  # Row r of this program is (token t, query head h * group + r % group) of (B, Tq, Hq).
  # Padding rows (t >= Tq) are masked; compiled, a masked lane touches no memory, but
  # interpret mode stores every lane (the old value where masked), so there they point at
  # spare rows past the outputs' end (`spare`), never at a real row.
  q_row, t, row_ok = query_row(b, h, r, group=group, tq=tq, kv_heads=kv_heads)
  q_row = jnp.where(row_ok, q_row, spare + r % block_q if spare else 0)
  d = lax.iota(jnp.int32, dim)
  q_off = (q_row * dim)[:, None] + d[None, :]
  q_mask = jnp.broadcast_to(row_ok[:, None], (block_q, dim))
  q = plgpu.load(q_ref.at[q_off], mask=q_mask, other=0)
  if compute == "fp8":
    # q per row (token, head) times 2^(7 - floor(log2 amax)): |q| < 256, exact; then e4m3
    # (round to nearest even); the scores are multiplied back by the inverse power of two.
    qf = q.astype(jnp.float32)
    e_q = log2_floor(jnp.max(jnp.abs(qf), axis=1))
    q = (qf * exp2_clipped(Q_LOG2_TOP - e_q)[:, None]).astype(jnp.float8_e4m3fn)
    q_inv = exp2_clipped(e_q - Q_LOG2_TOP)
  else:
    q = q.astype(jnp.bfloat16 if compute == "bf16" else jnp.float32)
  # Padding rows see nothing (position -1), so they never extend the loop.
  qpos = plgpu.load(qpos_ref.at[jnp.where(row_ok, b * tq + t, 0)], mask=row_ok, other=-1)
  length = jnp.clip(plgpu.load(len_ref.at[b]), 0, capacity)
  # The last position any row sees, + 1 (no overflow: qpos may be INT32_MAX).
  end = jnp.maximum(jnp.minimum(length - 1, jnp.max(qpos)) + 1, 0)
  n_iter = (end + (block_k - 1)) // block_k

  def body(i, carry):
    o, m, l = carry
    pos = i * block_k + lax.iota(jnp.int32, block_k)
    valid = pos < length
    rows_off = cache_row_offsets(pos, valid, b, h, kv_heads=kv_heads, capacity=capacity,
                                 paged=paged, table_ref=table_ref, pages=pages,
                                 page_size=page_size, pool_pages=pool_pages)
    scale = jnp.float32(sm_scale)
    if compute == "fp8":
      kb, k_pos, k_scalar = _load_e4m3(kplan, k_refs, rows_off, valid, block_k)
      s = jnp.dot(q, kb.T, preferred_element_type=jnp.float32) * q_inv[:, None]
      if k_pos is not None:
        s = s * k_pos[None, :]
      if k_scalar is not None:
        scale = k_scalar * scale
    elif k_split:
      kb, k_pos, k_scalar = load_kv_split(kplan, k_refs, rows_off, valid, block_k)
      s = jnp.dot(q, kb.T, preferred_element_type=jnp.float32)
      if k_pos is not None:
        s = s * k_pos[None, :]
      if k_scalar is not None:
        scale = k_scalar * scale
    elif compute == "bf16":
      kb = load_kv(kplan, k_refs, rows_off, valid, block_k).astype(jnp.bfloat16)
      s = jnp.dot(q, kb.T, preferred_element_type=jnp.float32)
    else:
      kf = load_kv(kplan, k_refs, rows_off, valid, block_k)
      s = jnp.dot(q, kf.T, precision=lax.Precision.HIGHEST,
                  preferred_element_type=jnp.float32)
    s = s * scale
    m_new, alpha, p, l = softmax_step(s, valid, pos, qpos, m, l)
    if compute == "fp8":
      vb, v_pos, v_scalar = _load_e4m3(vplan, v_refs, rows_off, valid, block_k)
      back = jnp.float32(2.0 ** -P_LOG2)
      pp = p
      if v_pos is not None:
        # V's per-position factors into P, over a power of two >= their block max: < 1
        e_v = log2_floor(jnp.max(v_pos)) + 1
        pp = p * (v_pos * exp2_clipped(-e_v))[None, :]
        back = back * exp2_clipped(e_v)
      p8 = (pp * jnp.float32(2.0 ** P_LOG2)).astype(jnp.float8_e4m3fn)
      pv = jnp.dot(p8, vb, preferred_element_type=jnp.float32) * back
      if v_scalar is not None:
        pv = pv * v_scalar
    elif v_split:
      vb, v_pos, v_scalar = load_kv_split(vplan, v_refs, rows_off, valid, block_k)
      pp = p if v_pos is None else p * v_pos[None, :]
      pv = jnp.dot(pp.astype(jnp.bfloat16), vb, preferred_element_type=jnp.float32)
      if v_scalar is not None:
        pv = pv * v_scalar
    elif compute == "bf16":
      vb = load_kv(vplan, v_refs, rows_off, valid, block_k).astype(jnp.bfloat16)
      pv = jnp.dot(p.astype(jnp.bfloat16), vb, preferred_element_type=jnp.float32)
    else:
      vf = load_kv(vplan, v_refs, rows_off, valid, block_k)
      pv = jnp.dot(p, vf, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    return alpha[:, None] * o + pv, m_new, l

  o = jnp.zeros((block_q, dim), jnp.float32)
  m = jnp.full((block_q,), -jnp.inf, jnp.float32)
  l = jnp.zeros((block_q,), jnp.float32)
  o, m, l = lax.fori_loop(0, n_iter, body, (o, m, l))
  has = l > 0.0
  l_safe = jnp.where(has, l, 1.0)
  o = jnp.where(has[:, None], o / l_safe[:, None], 0.0)
  lse = jnp.where(has, m + jnp.log(l_safe), -jnp.inf)
  plgpu.store(o_ref.at[q_off], o.astype(o_ref.dtype), mask=q_mask)
  plgpu.store(lse_ref.at[q_row], lse, mask=row_ok)


@functools.partial(jax.jit, static_argnames=("kplan", "vplan", "group", "capacity",
                                             "page_size", "sm_scale", "config", "out_dtype",
                                             "interpret"))
def prefill_pallas(q, qpos, kv_len, table, k, v, *, kplan: KVPlan, vplan: KVPlan, group: int,
                   capacity: int, page_size: int, sm_scale: float, config: PrefillConfig,
                   out_dtype=None, interpret: bool = False):
  """(o (B, Tq, Hq, D) in out_dtype (default q's), lse (B, Tq, Hq) float32).

  q (B, Tq, Hq, D) float32 / bfloat16 / float16 (query head i reads KV head i // group);
  qpos (B, Tq) int32 (a key at a position > its token's qpos is masked: INT32_MAX for
  non-causal attention); kv_len (B,) int32; table (B, pages) int32 or None (contiguous:
  K / V rows b * capacity + pos); k, v the KV operands (QuantizedArrays with leaves (...,
  Hkv, D / per_word), or float arrays). A row that sees no key gets o = 0, lse = -inf.
  Arguments are assumed checked (fp8lab.attention checks them)."""
  bsz, tq, hq, dim = q.shape
  kv_heads = hq // group
  nqb = pl.cdiv(tq * group, config.block_q)
  paged = table is not None
  pages = table.shape[1] if paged else 1
  bf16 = config.compute == "bf16"
  if config.compute == "fp8" and not (fp8_serves(kplan) and fp8_serves(vplan)):
    raise ValueError(f"compute='fp8' takes e4m3 K / V per tensor or per token and head, got "
                     f"{kplan.kind} / {vplan.kind}")
  operands = [q.reshape(-1), qpos.astype(jnp.int32).reshape(-1), kv_len.astype(jnp.int32)]
  if paged:
    operands.append(table.astype(jnp.int32).reshape(-1))
  for x, plan in ((k, kplan), (v, vplan)):
    leaves = kv_leaves(x, plan)
    if config.compute == "fp8":
      # uint32 words -> their bytes, little-endian: byte i of word w is code i (a free
      # bitcast in XLA), so flat byte index = element index.
      leaves[0] = lax.bitcast_convert_type(x.data, jnp.uint8).reshape(-1)
    operands += leaves
  kernel = functools.partial(
      _kernel, kplan=kplan, vplan=vplan, paged=paged, kv_heads=kv_heads, group=group, tq=tq,
      capacity=capacity, page_size=page_size, pages=pages,
      pool_pages=k.shape[0] if paged else 1, sm_scale=float(sm_scale),
      block_q=config.block_q, block_k=config.block_k, compute=config.compute,
      k_split=bf16 and split_serves(kplan), v_split=bf16 and split_serves(vplan))
  out_dtype = q.dtype if out_dtype is None else out_dtype
  n_rows = bsz * tq * hq
  spare = n_rows if interpret else 0
  kernel = functools.partial(kernel, spare=spare)
  o, lse = pl.pallas_call(
      kernel,
      out_shape=(jax.ShapeDtypeStruct(((n_rows + (config.block_q if spare else 0)) * dim,),
                                      out_dtype),
                 jax.ShapeDtypeStruct((n_rows + (config.block_q if spare else 0),),
                                      jnp.float32)),
      grid=(nqb, bsz, kv_heads),
      compiler_params=plgpu.CompilerParams(num_warps=config.num_warps,
                                           num_stages=config.num_stages),
      interpret=interpret,
      name=f"fp8lab_prefill_{kplan.kind}_{vplan.kind}_{config.compute}",
  )(*operands)
  return o[:n_rows * dim].reshape(q.shape), lse[:n_rows].reshape(bsz, tq, hq)
