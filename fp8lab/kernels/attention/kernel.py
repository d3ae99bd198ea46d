"""Split-K flash-decoding attention over a packed KV cache (fp8lab.attention's kernel).

Grid (B, Hkv, n_splits). Program (b, h, s) takes every query row of KV head h of batch row b
(the GQA group times the query tokens, padded to a power of two >= 16 rows for tl.dot) and
the cache positions [s * split_len, (s + 1) * split_len) of that row, in blocks of block_s
positions. Per block:

  1. the row of each position: b * S + pos (contiguous) or table[b, pos // page] * page +
     pos % page (paged: the block table is an input, read with a masked gather);
  2. K's packed words for the block. The "planes" layout (AttentionConfig.layout, default
     where planes_serve): one contiguous (block_s, D / per_word) uint32 tile (vector loads,
     each word once), decoded a code plane at a time (plane j = code j of every word =
     elements w * per_word + j; unpack.decode_planes_16bit, integer ops, two codes per op),
     block scales (MX, NVFP4, float32 blocks of whole words) multiplied into the planes,
     per-token-head scales into the scores' / p's columns, the tensor scale and the float16
     route's power of two into the scores (K) or o after the loop (V). The "elements"
     layout: a (block_s, D) gather in natural element order (each lane loads the word of its
     element), a shift and mask per element (unpack.decode_codes), times its scale (the
     golden dequantize's own float32 products);
  3. scores = q @ K^T (planes: sum_j q_j K_j^T, q_j q's columns j, j + per_word, ...), in
     float32 accumulation: "bf16x3" dots (default) on exact bfloat16 parts (q: three, or
     one when it is bfloat16; K exact, see split_serves), or "f32" dots (precision
     HIGHEST: IEEE float32, no tf32); times sm_scale, masked with where to -inf at positions
     >= kv_length (and, causal, > the query's position); loads past the length are masked
     (never read) and V rows past it are zeroed, so NaN / Inf / garbage stored there cannot
     reach the result through 0 * NaN;
  4. online softmax in float32 (running max m, sum l; a row with no key yet keeps m = -inf
     and contributes nothing, without NaN); o = alpha o + p @ V (p in three bfloat16 parts
     on the bf16x3 dots; planes: one accumulator per V plane, stored in natural order).
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

from fp8lab.kernels import device, unpack
from fp8lab.kernels.attention.kv import (KVPlan, cache_row_offsets, kv_leaves, kv_plan,
                                         kv_refs, load_kv, load_kv_split, serves,
                                         softmax_step, split_serves)

__all__ = ["KVPlan", "kv_plan", "serves", "AttentionConfig", "attention_config",
           "attention_partials", "combine", "attention_pallas", "MIN_ROWS", "DOTS",
           "LAYOUTS", "MIN_DOT_K", "split_serves", "split_bf16", "planes_serve"]

# tl.dot needs M >= 16: the query rows of a program are padded to a power of two >= 16.
MIN_ROWS = 16
DOTS = ("f32", "bf16x3")
# K / V tile layouts (AttentionConfig.layout): "planes" (whole words loaded contiguously,
# code j of every word decoded as plane j) or "elements" (one code per lane, natural order).
LAYOUTS = ("planes", "elements")
# tl.dot's smallest contraction (K) dimension: a plane's D / per_word columns.
MIN_DOT_K = 16


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
  """Launch parameters: block_s positions per step (a power of two), n_splits programs per
  (batch row, KV head) along the cache, num_warps, num_stages; `dots`: "bf16x3" (exact
  bfloat16 parts on the tensor cores for the operands split_serves takes, IEEE float32 dots
  for the others) or "f32" (IEEE float32 dots throughout); `layout`: "planes" (K / V words
  loaded as contiguous (block_s, D / per_word) tiles and decoded a code plane at a time,
  for the operands planes_serve takes; the others "elements") or "elements" (one code per
  lane in natural order, every operand)."""
  block_s: int = 64
  n_splits: int = 1
  num_warps: int = 4
  num_stages: int = 2
  dots: str = "bf16x3"
  layout: str = "planes"

  def __post_init__(self):
    if self.dots not in DOTS:
      raise ValueError(f"dots must be one of {DOTS}, got {self.dots!r}")
    if self.layout not in LAYOUTS:
      raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
    if self.block_s < 16 or self.block_s & (self.block_s - 1):
      raise ValueError(f"block_s must be a power of two >= 16, got {self.block_s}")
    if self.n_splits < 1:
      raise ValueError(f"n_splits must be >= 1, got {self.n_splits}")


def _next_pow2(n: int) -> int:
  return 1 << max(0, (int(n) - 1).bit_length())


def attention_config(batch: int, kv_heads: int, capacity: int, dim: int,
                     interpret: bool = False) -> AttentionConfig:
  """The default launch (bf16x3 dots, planes layout): block_s 64 (32 for D = 256: the K / V
  tiles live in registers), and enough KV splits that B * Hkv * n_splits fills two waves of
  the device's SMs, no more than the cache has blocks (a power of two)."""
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
  ops so that no float round trip can be elided (docs/numerics.md section 9). Exact for
  |x| >= 2^-103 (or 0); below, the low parts are float32 subnormals, which XLA and the GPU
  may flush (the top 8 significant bits survive)."""
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


def planes_serve(plan: KVPlan) -> bool:
  """Whether the "planes" layout takes this operand: packed words (per_word > 1) with
  D / per_word >= MIN_DOT_K columns per plane (tl.dot's contraction; e2m1 at D = 64 has 8)
  and block scales whose blocks hold whole words (the block of element w * per_word + j
  then depends on w only). Plain float arrays (one element per load already) and the
  others take the "elements" layout."""
  if plan.kind == "float" or plan.per_word == 1:
    return False
  if plan.dim // plan.per_word < MIN_DOT_K:
    return False
  return not plan.has_scales or plan.block_len % plan.per_word == 0


def _route_factor(plan: KVPlan) -> float:
  """The power of two between a plane's float16-route values and the true ones (exact)."""
  return 2.0 ** -unpack.f16_route_log2(plan.elem)


def _load_kv_planes(plan: KVPlan, refs, rows_off, valid, block_s: int, bf16: bool):
  """The "planes" layout: (planes, per-position float32 factor (block_s,) or None).

  The block's words load as one contiguous (block_s, D / per_word) uint32 tile (word w of
  row r at r * (D / per_word) + w: plain offsets, vector loads, each word loaded once);
  plane j (code j of every word, two codes per integer op: unpack.decode_planes_16bit)
  holds element w * per_word + j in column w, as its float16-route value (true value *
  2^f16_route_log2) times its block factor: E8M0 2^(c - 127) (MX, exact), NVFP4's E4M3
  scale (exact: <= 6 significant bits), a shorter-than-D float32 block scale (f32 dots
  only: not exact in bfloat16). Left out, for the caller to apply: per-token-head scales
  (the position factor, on the scores' / p's columns), the tensor scale / S_dec and the
  route factor (constants: on the scores, or on o once after the loop). `bf16`: the planes
  as bfloat16 (exact where split_serves), else float32. Rows past the length are masked in
  every load, their words zeroed (so their planes are zeros) and their position factors 0."""
  words_ref, scales_ref, _ = refs
  pw = plan.per_word
  dw = plan.dim // pw
  w = lax.iota(jnp.int32, dw)
  mask = jnp.broadcast_to(valid[:, None], (block_s, dw))
  words = plgpu.load(words_ref.at[(rows_off * dw)[:, None] + w[None, :]], mask=mask, other=0)
  # Zeroed words past the length (one select per word, not per code): every code there is
  # +0, and every factor is finite (masked scale loads read 0), so the planes hold zeros.
  words = jnp.where(mask, words, jnp.uint32(0))
  planes16 = unpack.decode_planes_16bit(words, plan.elem)
  factor = pos_f = None
  if plan.kind == "block" and plan.block_len == plan.dim:
    pos_f = jnp.where(valid, plgpu.load(scales_ref.at[rows_off], mask=valid, other=0), 0.0)
  elif plan.has_scales:                # whole words per block: the block of column w
    nb = plan.dim // plan.block_len
    soffs = (rows_off * nb)[:, None] + (w // (plan.block_len // pw))[None, :]
    c = plgpu.load(scales_ref.at[soffs], mask=mask, other=0)
    if plan.kind == "mx":
      factor = unpack.e8m0_scale_to_f32(c)
    elif plan.kind == "nvfp4":
      factor = unpack.e4m3_scale_to_f16(c).astype(jnp.float32)
    else:
      factor = c
  out = []
  for h in planes16:
    if factor is None and bf16 and h.dtype == jnp.bfloat16:
      out.append(h)
      continue
    x = h.astype(jnp.float32)
    if factor is not None:
      x = x * factor
    out.append(x.astype(jnp.bfloat16) if bf16 else x)
  return out, pos_f


def _tensor_scale(plan: KVPlan, refs):
  """The operand's scalar float32 factor (tensor scale, NVFP4's S_dec) or None."""
  return refs[2][0] if plan.has_tensor_scale else None


def _kernel(*refs, kplan: KVPlan, vplan: KVPlan, paged: bool, kv_heads: int, rows: int,
            capacity: int, page_size: int, pages: int, split_len: int, n_splits: int,
            sm_scale: float, block_s: int, k_split: bool, v_split: bool, pool_pages: int,
            k_planes: bool = False, v_planes: bool = False, q_parts: int = 3):
  it = iter(refs)
  q_ref, qpos_ref, len_ref = next(it), next(it), next(it)
  table_ref = next(it) if paged else None

  k_refs, v_refs = kv_refs(it, kplan), kv_refs(it, vplan)
  o_ref, m_ref, l_ref = next(it), next(it), next(it)
  dim = kplan.dim
  # Plane layouts: the element index of plane j's column w is w * kpw + j (K) / w * vpw + j
  # (V); one plane of D columns in natural order for the "elements" layout.
  kpw = kplan.per_word if k_planes else 1
  vpw = vplan.per_word if v_planes else 1
  kdw, vdw = dim // kpw, dim // vpw

  b, h, sp = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  r = lax.iota(jnp.int32, rows)
  prog = b * kv_heads + h
  # q's columns of each K plane, gathered once per program (outside the loop).
  kw_ = lax.iota(jnp.int32, kdw)
  if k_split:                          # (q_parts, rows, D) bfloat16 parts of q
    q_in = [[q_ref[(((prog * q_parts + i) * rows + r) * dim)[:, None]
                   + (kw_ * kpw + j)[None, :]] for i in range(q_parts)] for j in range(kpw)]
  else:                                # (rows, D) float32
    q_in = [q_ref[((prog * rows + r) * dim)[:, None] + (kw_ * kpw + j)[None, :]]
            for j in range(kpw)]
  qpos = qpos_ref[b * rows + r]                                          # (rows,) int32
  length = jnp.clip(plgpu.load(len_ref.at[b]), 0, capacity)
  start = sp * split_len
  end = jnp.minimum(start + split_len, length)
  n_iter = (jnp.maximum(end - start, 0) + (block_s - 1)) // block_s
  # Constants of the plane layouts, exact powers of two: the float16-route factor of K on
  # the scores (with sm_scale), of V on o after the loop.
  k_sm = sm_scale * (_route_factor(kplan) if k_planes else 1.0)
  k_scalar = _tensor_scale(kplan, k_refs) if (k_planes or k_split) else None
  v_scalar = _tensor_scale(vplan, v_refs) if (v_planes or v_split) else None

  def dot32(a, bb):
    return jnp.dot(a, bb, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)

  def body(i, carry):
    o, m, l = carry
    pos = start + i * block_s + lax.iota(jnp.int32, block_s)
    valid = pos < end
    rows_off = cache_row_offsets(pos, valid, b, h, kv_heads=kv_heads, capacity=capacity,
                                 paged=paged, table_ref=table_ref, pages=pages,
                                 page_size=page_size, pool_pages=pool_pages)
    if k_planes:
      kb, k_pos = _load_kv_planes(kplan, k_refs, rows_off, valid, block_s, k_split)
      s = None
      for j in range(kpw):             # scores = sum_j q_j K_j^T
        d = _split_dot(q_in[j], kb[j].T) if k_split else dot32(q_in[j], kb[j].T)
        s = d if s is None else s + d
    elif k_split:
      kb, k_pos, _ = load_kv_split(kplan, k_refs, rows_off, valid, block_s)
      s = _split_dot(q_in[0], kb.T)
    else:
      k_pos = None
      s = dot32(q_in[0], load_kv(kplan, k_refs, rows_off, valid, block_s).T)
    if k_pos is not None:
      s = s * k_pos[None, :]
    s = s * (jnp.float32(k_sm) if k_scalar is None else k_scalar * jnp.float32(k_sm))
    m_new, alpha, p, l = softmax_step(s, valid, pos, qpos, m, l)
    if v_planes:
      vb, v_pos = _load_kv_planes(vplan, v_refs, rows_off, valid, block_s, v_split)
    elif v_split:
      vb, v_pos, vs = load_kv_split(vplan, v_refs, rows_off, valid, block_s)
      vb = [vb]
    else:
      vb, v_pos = [load_kv(vplan, v_refs, rows_off, valid, block_s)], None
    pv_in = p if v_pos is None else p * v_pos[None, :]
    if v_split:
      parts = split_bf16(pv_in)
      pv = [_split_dot(parts, x) for x in vb]
      if not v_planes and vs is not None:                 # the elements path: per block
        pv = [x * vs for x in pv]
    else:
      pv = [dot32(pv_in, x) for x in vb]
    return tuple(alpha[:, None] * oj + x for oj, x in zip(o, pv)), m_new, l

  o = tuple(jnp.zeros((rows, vdw), jnp.float32) for _ in range(vpw))
  m = jnp.full((rows,), -jnp.inf, jnp.float32)
  l = jnp.zeros((rows,), jnp.float32)
  o, m, l = lax.fori_loop(0, n_iter, body, (o, m, l))
  part = prog * n_splits + sp
  vw = lax.iota(jnp.int32, vdw)
  for j, oj in enumerate(o):
    if v_planes:                       # V's constants, once: the route factor, then S_dec
      oj = oj * jnp.float32(_route_factor(vplan))
      if v_scalar is not None:
        oj = oj * v_scalar
    # plane j's column w is element w * vpw + j: stored in natural order (once per program)
    plgpu.store(o_ref.at[((part * rows + r) * dim)[:, None] + (vw * vpw + j)[None, :]], oj)
  plgpu.store(m_ref.at[part * rows + r], m)
  plgpu.store(l_ref.at[part * rows + r], l)


def attention_partials(q_rows, qpos, kv_len, table, k, v, *, kplan: KVPlan, vplan: KVPlan,
                       capacity: int, page_size: int, sm_scale: float,
                       config: AttentionConfig, interpret: bool = False):
  """The kernel's per-split (o, m, l): (B, Hkv, n_splits, rows, D), (B, Hkv, n_splits,
  rows) twice, float32. q_rows (B, Hkv, rows, D) float32 or bfloat16 (one exact part on the
  bf16x3 dots instead of three); qpos (B, rows) int32 (a key at a
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
  k_planes = config.layout == "planes" and planes_serve(kplan)
  v_planes = config.layout == "planes" and planes_serve(vplan)
  # bf16x3: a bfloat16 q is its own single exact part (K's values are exact in bfloat16,
  # so the products are exact either way); other q three parts (B, Hkv, parts, rows, D).
  if not k_split:
    q_in = q_rows.astype(jnp.float32)
  elif q_rows.dtype == jnp.bfloat16:
    q_in = q_rows[:, :, None]
  else:
    q_in = jnp.stack(split_bf16(q_rows.astype(jnp.float32)), axis=2)
  q_parts = q_in.shape[2] if k_split else 1
  operands = [q_in.reshape(-1), qpos.reshape(-1), kv_len.astype(jnp.int32)]
  if paged:
    operands.append(table.astype(jnp.int32).reshape(-1))
  operands += kv_leaves(k, kplan) + kv_leaves(v, vplan)
  n_parts = bsz * kv_heads * n_splits
  kernel = functools.partial(
      _kernel, kplan=kplan, vplan=vplan, paged=paged, kv_heads=kv_heads, rows=rows,
      capacity=capacity, page_size=page_size, pages=pages, split_len=split_len,
      n_splits=n_splits, sm_scale=float(sm_scale), block_s=config.block_s, k_split=k_split,
      v_split=v_split, pool_pages=k.shape[0] if paged else 1, k_planes=k_planes,
      v_planes=v_planes, q_parts=q_parts)
  o, m, l = pl.pallas_call(
      kernel,
      out_shape=(jax.ShapeDtypeStruct((n_parts * rows * dim,), jnp.float32),
                 jax.ShapeDtypeStruct((n_parts * rows,), jnp.float32),
                 jax.ShapeDtypeStruct((n_parts * rows,), jnp.float32)),
      grid=(bsz, kv_heads, n_splits),
      compiler_params=plgpu.CompilerParams(num_warps=config.num_warps,
                                           num_stages=config.num_stages),
      interpret=interpret,
      name=f"fp8lab_attention_{kplan.kind}_{vplan.kind}_{config.dots}_{config.layout}",
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

