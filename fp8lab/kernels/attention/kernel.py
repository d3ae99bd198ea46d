"""Split-K flash-decoding attention over a packed KV cache (fp8lab.attention's kernel).

Grid (B, Hkv, n_splits). Program (b, h, s) takes every query row of KV head h of batch row b
(the GQA group times the query tokens, padded to a power of two >= 16 rows for tl.dot) and
the cache positions [s * split_len, (s + 1) * split_len) of that row, in blocks of block_s
positions. Per block:

  1. the row of each position: b * S + pos (contiguous) or table[b, pos // page] * page +
     pos % page (paged: the block table is an input, read with a masked gather);
  2. K's packed words for the block, gathered as a (block_s, D) tile in the natural element
     order (each lane loads the word of its element: word d // per_word; the lanes of one
     word hit one cache line), its code cut out with a shift and a mask and decoded with
     integer ops (unpack.decode_codes: the float16 route, no fp8 conversion), times its
     scale (tensor, per-token-head float32, E8M0 per 32, NVFP4 E4M3 per 16 times S_dec):
     the very float32 products the golden dequantize makes, so the kernel's K / V values
     equal the golden model's (up to the GPU's treatment of float32 subnormals);
  3. scores = q @ K^T in float32 (precision HIGHEST: IEEE float32, no tf32), times sm_scale,
     masked with where to -inf at positions >= kv_length (and, causal, > the query's
     position); loads past the length are masked (never read) and V rows past it are
     zeroed, so NaN / Inf / garbage stored there cannot reach the result through 0 * NaN;
  4. online softmax in float32 (running max m, sum l; a row with no key yet keeps m = -inf
     and contributes nothing, without NaN); o = alpha o + p @ V in float32.
The program writes its unnormalized (o, m, l); `combine` merges the splits by their
log-sum-exp in a fixed order (no atomics: bitwise deterministic).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from fp8lab.kernels import device
from fp8lab.kernels.attention.kv import (KVPlan, cache_row_offsets, kv_leaves, kv_plan,
                                         kv_refs, load_kv, load_kv_split, serves,
                                         split_serves)

__all__ = ["KVPlan", "kv_plan", "serves", "AttentionConfig", "attention_config",
           "attention_partials", "combine", "attention_pallas", "MIN_ROWS", "DOTS",
           "split_serves", "split_bf16"]

# tl.dot needs M >= 16: the query rows of a program are padded to a power of two >= 16.
MIN_ROWS = 16
DOTS = ("f32", "bf16x3")


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
  """Launch parameters: block_s positions per step (a power of two), n_splits programs per
  (batch row, KV head) along the cache, num_warps, num_stages, and `dots`: "f32" (IEEE
  float32 dots) or "bf16x3" (exact bfloat16 parts on the tensor cores, see split_serves)."""
  block_s: int = 64
  n_splits: int = 1
  num_warps: int = 4
  num_stages: int = 2
  dots: str = "f32"

  def __post_init__(self):
    if self.dots not in DOTS:
      raise ValueError(f"dots must be one of {DOTS}, got {self.dots!r}")
    if self.block_s < 16 or self.block_s & (self.block_s - 1):
      raise ValueError(f"block_s must be a power of two >= 16, got {self.block_s}")
    if self.n_splits < 1:
      raise ValueError(f"n_splits must be >= 1, got {self.n_splits}")


def _next_pow2(n: int) -> int:
  return 1 << max(0, (int(n) - 1).bit_length())


def attention_config(batch: int, kv_heads: int, capacity: int, dim: int,
                     interpret: bool = False) -> AttentionConfig:
  """The default launch: block_s 64 (32 for D = 256: the float32 K / V tiles live in
  registers), and enough KV splits that B * Hkv * n_splits fills two waves of the device's
  SMs, no more than the cache has blocks (a power of two)."""
  block_s = 64 if dim <= 128 else 32
  blocks = -(-capacity // block_s)
  want = -(-2 * device.sm_count(interpret) // max(1, batch * kv_heads))
  n_splits = min(_next_pow2(want), _next_pow2(blocks))
  return AttentionConfig(block_s=block_s, n_splits=max(1, n_splits))


def _trunc_bf16(x):
  """x (float32) with its low 16 bits cleared: exact as a bfloat16 (integer ops only)."""
  bits = lax.bitcast_convert_type(x, jnp.uint32) & jnp.uint32(0xFFFF0000)
  return lax.bitcast_convert_type(bits, jnp.float32)


def split_bf16(x):
  """Three bfloat16 parts of float32 x whose float32 sum is x exactly (hi, mid: truncated
  top 8 significant bits of x and of the rest; lo: the last <= 8 bits), cut with integer
  ops so that no float round trip can be elided (docs/numerics.md section 9). Parts below
  float32's normal range (|x| < ~2^-110) may lose bits."""
  hi = _trunc_bf16(x)
  r = x - hi                                       # exact: the low 16 bits of x
  mid = _trunc_bf16(r)
  lo = r - mid                                     # exact, <= 8 significant bits
  return [a.astype(jnp.bfloat16) for a in (hi, mid, lo)]


def _split_dot(parts, b):
  """sum_i dot(parts[i], b) in float32 (tensor cores on bfloat16), smallest parts first."""
  acc = None
  for a in reversed(parts):
    d = jnp.dot(a, b, preferred_element_type=jnp.float32)
    acc = d if acc is None else acc + d
  return acc


def _kernel(*refs, kplan: KVPlan, vplan: KVPlan, paged: bool, kv_heads: int, rows: int,
            capacity: int, page_size: int, pages: int, split_len: int, n_splits: int,
            sm_scale: float, block_s: int, k_split: bool, v_split: bool, pool_pages: int):
  it = iter(refs)
  q_ref, qpos_ref, len_ref = next(it), next(it), next(it)
  table_ref = next(it) if paged else None

  k_refs, v_refs = kv_refs(it, kplan), kv_refs(it, vplan)
  o_ref, m_ref, l_ref = next(it), next(it), next(it)
  dim = kplan.dim

  b, h, sp = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  r = lax.iota(jnp.int32, rows)
  d = lax.iota(jnp.int32, dim)
  prog = b * kv_heads + h
  if k_split:                                    # (3, rows, D) bfloat16 parts of q
    q_parts = [q_ref[(((prog * 3 + i) * rows + r) * dim)[:, None] + d[None, :]]
               for i in range(3)]
  else:
    q = q_ref[((prog * rows + r) * dim)[:, None] + d[None, :]]           # (rows, D) float32
  qpos = qpos_ref[b * rows + r]                                          # (rows,) int32
  length = jnp.clip(plgpu.load(len_ref.at[b]), 0, capacity)
  start = sp * split_len
  end = jnp.minimum(start + split_len, length)
  n_iter = (jnp.maximum(end - start, 0) + (block_s - 1)) // block_s

  def body(i, carry):
    o, m, l = carry
    pos = start + i * block_s + lax.iota(jnp.int32, block_s)
    valid = pos < end
    rows_off = cache_row_offsets(pos, valid, b, h, kv_heads=kv_heads, capacity=capacity,
                                 paged=paged, table_ref=table_ref, pages=pages,
                                 page_size=page_size, pool_pages=pool_pages)
    if k_split:
      kb, k_pos, k_scalar = load_kv_split(kplan, k_refs, rows_off, valid, block_s)
      s = _split_dot(q_parts, kb.T)
      if k_pos is not None:
        s = s * k_pos[None, :]
      s = s * (jnp.float32(sm_scale) if k_scalar is None else k_scalar * jnp.float32(sm_scale))
    else:
      k = load_kv(kplan, k_refs, rows_off, valid, block_s)
      s = jnp.dot(q, k.T, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
      s = s * jnp.float32(sm_scale)
    keep = valid[None, :] & (pos[None, :] <= qpos[:, None])
    s = jnp.where(keep, s, -jnp.inf)
    m_new = jnp.maximum(m, jnp.max(s, axis=1))
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)     # no key yet: no -inf - -inf
    alpha = jnp.exp(m - m_safe)
    p = jnp.exp(s - m_safe[:, None])
    l = alpha * l + jnp.sum(p, axis=1)
    if v_split:
      vb, v_pos, v_scalar = load_kv_split(vplan, v_refs, rows_off, valid, block_s)
      pv = _split_dot(split_bf16(p if v_pos is None else p * v_pos[None, :]), vb)
      if v_scalar is not None:
        pv = pv * v_scalar
    else:
      v = load_kv(vplan, v_refs, rows_off, valid, block_s)
      pv = jnp.dot(p, v, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    return alpha[:, None] * o + pv, m_new, l

  o = jnp.zeros((rows, dim), jnp.float32)
  m = jnp.full((rows,), -jnp.inf, jnp.float32)
  l = jnp.zeros((rows,), jnp.float32)
  o, m, l = lax.fori_loop(0, n_iter, body, (o, m, l))
  part = prog * n_splits + sp
  plgpu.store(o_ref.at[((part * rows + r) * dim)[:, None] + d[None, :]], o)
  plgpu.store(m_ref.at[part * rows + r], m)
  plgpu.store(l_ref.at[part * rows + r], l)


def attention_partials(q_rows, qpos, kv_len, table, k, v, *, kplan: KVPlan, vplan: KVPlan,
                       capacity: int, page_size: int, sm_scale: float,
                       config: AttentionConfig, interpret: bool = False):
  """The kernel's per-split (o, m, l): (B, Hkv, n_splits, rows, D), (B, Hkv, n_splits,
  rows) twice, float32. q_rows (B, Hkv, rows, D) float32; qpos (B, rows) int32 (a key at a
  position > its row's qpos is masked); kv_len (B,) int32; table (B, pages) int32 or None
  (contiguous: k / v rows b * capacity + pos); k, v the KV operands (QuantizedArrays with
  leaves (..., Hkv, D / per_word), or float arrays). Arguments are assumed checked."""
  bsz, kv_heads, rows, dim = q_rows.shape
  n_splits = config.n_splits
  split_len = pl.cdiv(pl.cdiv(capacity, n_splits), config.block_s) * config.block_s
  paged = table is not None
  pages = table.shape[1] if paged else 1
  k_split = config.dots == "bf16x3" and split_serves(kplan)
  v_split = config.dots == "bf16x3" and split_serves(vplan)
  q_in = (jnp.stack(split_bf16(q_rows.astype(jnp.float32)), axis=2) if k_split
          else q_rows)                                       # (B, Hkv, 3, rows, D) parts
  operands = [q_in.reshape(-1), qpos.reshape(-1), kv_len.astype(jnp.int32)]
  if paged:
    operands.append(table.astype(jnp.int32).reshape(-1))
  operands += kv_leaves(k, kplan) + kv_leaves(v, vplan)
  n_parts = bsz * kv_heads * n_splits
  kernel = functools.partial(
      _kernel, kplan=kplan, vplan=vplan, paged=paged, kv_heads=kv_heads, rows=rows,
      capacity=capacity, page_size=page_size, pages=pages, split_len=split_len,
      n_splits=n_splits, sm_scale=float(sm_scale), block_s=config.block_s, k_split=k_split,
      v_split=v_split, pool_pages=k.shape[0] if paged else 1)
  o, m, l = pl.pallas_call(
      kernel,
      out_shape=(jax.ShapeDtypeStruct((n_parts * rows * dim,), jnp.float32),
                 jax.ShapeDtypeStruct((n_parts * rows,), jnp.float32),
                 jax.ShapeDtypeStruct((n_parts * rows,), jnp.float32)),
      grid=(bsz, kv_heads, n_splits),
      compiler_params=plgpu.CompilerParams(num_warps=config.num_warps,
                                           num_stages=config.num_stages),
      interpret=interpret,
      name=f"fp8lab_attention_{kplan.kind}_{vplan.kind}_{config.dots}",
  )(*operands)
  shape = (bsz, kv_heads, n_splits, rows)
  return o.reshape(shape + (dim,)), m.reshape(shape), l.reshape(shape)


def combine(o, m, l):
  """Merges the splits (axis 2) by their log-sum-exp, in float32, a fixed order of adds:
  (o / L, lse) with L = sum_s exp(m_s - M) l_s, lse = M + log L; a row with no key gets
  o = 0 and lse = -inf."""
  mx = jnp.max(m, axis=2)
  m_safe = jnp.where(mx == -jnp.inf, 0.0, mx)
  w = jnp.exp(m - m_safe[:, :, None])                         # (B, Hkv, n_splits, rows)
  n_splits = m.shape[2]
  num, den = o[:, :, 0] * w[:, :, 0, :, None], l[:, :, 0] * w[:, :, 0]
  for i in range(1, n_splits):                                # fixed order: deterministic
    num = num + o[:, :, i] * w[:, :, i, :, None]
    den = den + l[:, :, i] * w[:, :, i]
  out = jnp.where(den[..., None] > 0, num / jnp.where(den > 0, den, 1.0)[..., None], 0.0)
  lse = jnp.where(den > 0, m_safe + jnp.log(jnp.where(den > 0, den, 1.0)), -jnp.inf)
  return out, lse


@functools.partial(jax.jit, static_argnames=("kplan", "vplan", "capacity", "page_size",
                                             "sm_scale", "config", "interpret"))
def attention_pallas(q_rows, qpos, kv_len, table, k, v, *, kplan: KVPlan, vplan: KVPlan,
                     capacity: int, page_size: int, sm_scale: float,
                     config: AttentionConfig, interpret: bool = False):
  """(o (B, Hkv, rows, D), lse (B, Hkv, rows)) float32: attention_partials, then combine."""
  return combine(*attention_partials(q_rows, qpos, kv_len, table, k, v, kplan=kplan,
                                     vplan=vplan, capacity=capacity, page_size=page_size,
                                     sm_scale=sm_scale, config=config, interpret=interpret))

