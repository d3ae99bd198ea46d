"""Split-K decode attention over an FP8 KV cache as a Mosaic GPU kernel (Hopper: TMA and
wgmma): fp8lab.attention's implementation="mosaic".

Grid (B, Hkv, n_splits), one warpgroup per program. Program (b, h, s) takes the query rows
of KV head h of batch row b (the Tq tokens times the GQA group: N columns, a multiple of 8)
and the cache positions [s * split_len, (s + 1) * split_len) of that row, in blocks of
block_s positions, in the transposed arrangement (positions on the wgmma M axis, so no row
of the tensor core's 64 is padding):

  1. TMA copies K's and V's e4m3 / e5m2 codes of the block, (block_s, D) bytes each (the
     packed words viewed as XLA's float8 arrays: the same bytes), into a ring of `stages`
     shared-memory slots, issued `stages` blocks ahead; per-token-head scales come with
     them ((block_s, Hkv) float32 tiles, the program's column picked in registers: Hkv a
     multiple of 8);
  2. K's codes to float16 in registers (the fp8 -> float16 convert; exact), stored to a
     float16 tile; scores^T = K16 @ q16^T (block_s, N) by wgmma, float32 accumulation,
     q16 the query rows scaled per row by a power of two into [2^14, 2^15) and cut into
     float16 parts outside the kernel (one part for bfloat16 q: exact; hi + lo for float32
     q: 2^-22), the scale factors (q's 2^-s, sm_scale, K's tensor scale) per column and K's
     per-position scales per row applied to the float32 scores;
  3. positions past the row's length (or, causal, past the column's query position) masked
     to -inf; the online softmax over the block's positions per column, in float32;
  4. V's codes to float16 likewise, rows past the length zeroed (so NaN / Inf stored there
     cannot reach o through 0 * NaN); p (times V's per-position scales, divided by their
     running power-of-two bound so the product stays <= 1) cut into float16 hi + lo;
     o^T (D, N) += V16^T @ p^T by wgmma.

The program writes (o^T, m, l) of its split, float32; `combine` (kernel.py, the Triton
kernel's merge, transposed=True) merges the splits by their log-sum-exp in a fixed order.
docs/attention_kernel.md section 6 has the design and its measurements."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from fp8lab.kernels import device
from fp8lab.kernels.attention.kernel import _f16_shift, combine
from fp8lab.kernels.attention.kv import NO_LIMIT, KVPlan
from fp8lab.kernels.gemv.operands import _exp2_exact, _f16_parts, _scale_pow2

__all__ = ["MosaicConfig", "mosaic_config", "mosaic_serves", "mosaic_partials", "smem_bytes",
           "attention_mosaic", "MOSAIC_ELEMENTS", "to_f16", "fp8_cache_reason",
           "interpret_params", "q_rows", "cache_spans"]

# The element formats the kernel decodes (the fp8 -> float16 converts take both).
MOSAIC_ELEMENTS = ("e4m3", "e5m2")
# The most query columns of a program (wgmma's N: Tq * group padded to a multiple of 8).
MAX_COLUMNS = 64


@dataclasses.dataclass(frozen=True)
class MosaicConfig:
  """Launch parameters: block_s positions per step (64 or 128: wgmma's M), `stages` TMA
  slots in flight, n_splits programs per (batch row, KV head) along the cache, p_parts
  float16 parts of p for the P V product (2: within 2^-22 of float32 p; 1: float16 p);
  k_regs: K's float16 values go to wgmma from registers (compiled only: the Mosaic
  interpreter takes wgmma operands from shared memory) instead of through a float16 tile."""
  block_s: int = 128
  stages: int = 4
  n_splits: int = 1
  p_parts: int = 2
  k_regs: bool = False

  def __post_init__(self):
    if self.block_s not in (64, 128):
      raise ValueError(f"MosaicConfig.block_s must be 64 or 128, got {self.block_s!r}")
    if not (isinstance(self.stages, int) and 1 <= self.stages <= 8):
      raise ValueError(f"MosaicConfig.stages must be an int in [1, 8], got {self.stages!r}")
    if not (isinstance(self.n_splits, int) and self.n_splits >= 1):
      raise ValueError(f"MosaicConfig.n_splits must be an int >= 1, got {self.n_splits!r}")
    if self.p_parts not in (1, 2):
      raise ValueError(f"MosaicConfig.p_parts must be 1 or 2, got {self.p_parts!r}")


def columns(tq: int, group: int) -> int:
  """A program's query columns: Tq * group padded to a multiple of 8 (wgmma's N)."""
  return max(8, -(-tq * group // 8) * 8)


def fp8_cache_reason(kplan: KVPlan, vplan: KVPlan, *, paged: bool, capacity: int,
                     page_size: int | None = None) -> str | None:
  """Why the Mosaic kernels (decode and prefill) cannot read this cache (a sentence), or
  None: K and V each e4m3 / e5m2 per tensor or per token and head, the capacity a multiple
  of 8 positions; contiguous, or paged (page_size given) with pages of 8 .. 64 positions
  dividing 64, or a multiple of 64 (whole TMA copies per block of 64 or 128)."""
  for name, p in (("K", kplan), ("V", vplan)):
    if p.kind not in ("tensor", "block") or p.elem is None or p.elem.name not in MOSAIC_ELEMENTS:
      return (f"{name} must be e4m3 / e5m2 per tensor or with per-token-head scales (got "
              f"kind {p.kind!r}{'' if p.elem is None else ', element ' + p.elem.name})")
    if p.kind == "block" and p.block_len != p.dim:
      return f"{name}'s block scales must cover the whole head (block {p.block_len} != D {p.dim})"
  if paged and page_size is None:
    raise ValueError("fp8_cache_reason: a paged cache needs its page_size")
  if paged and not (page_size % 64 == 0 or (page_size >= 8 and 64 % page_size == 0)):
    return (f"paged caches need pages of 8, 16, 32 or a multiple of 64 positions (whole "
            f"TMA copies per block), got {page_size}")
  if capacity % 8:                     # the TMA copies' tiled rows (Mosaic's lowering)
    return f"the cache capacity must be a multiple of 8 positions, got {capacity}"
  return None


def interpret_params(interpret: bool):
  """plgpu.kernel's `interpret`: the Mosaic GPU interpreter's parameters, or None."""
  if not interpret:
    return None
  from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams  # pylint: disable=g-import-not-at-top
  return InterpretGPUParams()


def mosaic_serves(kplan: KVPlan, vplan: KVPlan, *, tq: int, group: int, kv_heads: int,
                  paged: bool, capacity: int, page_size: int | None = None) -> str | None:
  """None where the kernel takes the call, else why not (a sentence)."""
  why = fp8_cache_reason(kplan, vplan, paged=paged, capacity=capacity, page_size=page_size)
  if why:
    return why
  for name, p in (("K", kplan), ("V", vplan)):
    if p.kind == "block" and kv_heads % 8:
      return (f"{name}'s per-token-head scales need Hkv a multiple of 8 (their (block_s, Hkv) "
              f"TMA tiles), got {kv_heads}")
  if columns(tq, group) > MAX_COLUMNS:
    return f"Tq * group = {tq * group} query rows per KV head exceed {MAX_COLUMNS}"
  return None


def mosaic_config(batch: int, kv_heads: int, capacity: int, dim: int,
                  interpret: bool = False) -> MosaicConfig:
  """The default launch, from the H100 probe of 2026-12-07 (docs/attention_kernel.md
  section 6): block_s 64, 2 stages (small programs, two resident per SM at D <= 128), K to wgmma from
  registers, p in two float16 parts, and n_splits the power of two that brings the programs
  to about four per SM, no more than the cache has blocks. Interpret mode: the same blocks
  and stages, K through shared memory (the interpreter's wgmma), two splits where the cache
  has the blocks (the CPU tests' small caches)."""
  block_s, stages = 64, 2
  blocks = -(-capacity // block_s)
  if interpret:
    return MosaicConfig(block_s=block_s, stages=stages, n_splits=min(2, blocks))
  want = -(-4 * device.sm_count(False) // max(1, batch * kv_heads))
  n_splits = max(1, min(1 << max(0, (want - 1).bit_length()), blocks))
  return MosaicConfig(block_s=block_s, stages=stages, n_splits=n_splits, k_regs=True)


# Bytes of shared memory Mosaic adds beside the scratch (reduction scratch, barriers,
# alignment), kept free by mosaic_config.
_SMEM_SLACK = 8 * 1024


def smem_bytes(cfg: MosaicConfig, dim: int, kv_heads: int, kv_block: bool,
               n: int = 16, q_parts: int = 2) -> int:
  """The kernel's scratch bytes: per stage K and V codes (and scale tiles), the float16 K /
  V tiles, q's parts, p's parts and the output tiles."""
  bs = cfg.block_s
  stage = 2 * bs * dim + (2 * bs * kv_heads * 4 if kv_block else 0)
  fixed = (1 if cfg.k_regs else 2) * bs * dim * 2 + q_parts * n * dim * 2 + cfg.p_parts * n * bs * 2 + dim * n * 4
  return cfg.stages * stage + fixed + 2 * n * 4


def _fp8_dtype(elem):
  """XLA's float8 dtype of an e4m3 / e5m2 element format."""
  return jnp.float8_e4m3fn if elem.name == "e4m3" else jnp.float8_e5m2


def _fp8_view(words: jax.Array, elem) -> jax.Array:
  """Packed uint32 words (..., D / 4) as XLA's float8 array (..., D): code j of a word is
  its byte j (little-endian: the packing's order), so this is a bitcast of the same bytes."""
  x = lax.bitcast_convert_type(words, _fp8_dtype(elem))
  return x.reshape(words.shape[:-1] + (words.shape[-1] * 4,))


def q_rows(q, group: int, n: int):
  """q (B, Tq, Hq, D) as (B, Hkv, n, D): row r = t * group + g is token t of query head
  h * group + g of KV head h; rows past Tq * group are zero."""
  bsz, tq, hq, dim = q.shape
  hkv = hq // group
  x = q.reshape(bsz, tq, hkv, group, dim).transpose(0, 2, 1, 3, 4)
  x = x.reshape(bsz, hkv, tq * group, dim)
  return jnp.pad(x, ((0, 0), (0, 0), (0, n - tq * group), (0, 0)))


def _q_columns(q, group: int, n: int):
  """q (B, Tq, Hq, D) as the kernel's B operand: (B, Hkv, parts, n, D) float16 (column
  r = t * group + g: token t, query head h * group + g; columns past Tq * group are zero)
  and each column's 2^-s (B, Hkv, n) float32, s putting the column's largest |q| into
  [2^14, 2^15): one part for bfloat16 q (exact), hi + lo for float32 / float16 q."""
  x32 = q_rows(q, group, n).astype(jnp.float32)
  sh = _f16_shift(jnp.max(jnp.abs(x32), axis=-1))                         # (B, Hkv, n)
  xs = _scale_pow2(x32, sh[..., None])
  parts = [xs.astype(jnp.float16)] if q.dtype == jnp.bfloat16 else _f16_parts(xs)
  return jnp.stack(parts, axis=2), _exp2_exact(-sh)


def _q_positions(qpos, group: int, n: int):
  """(B, Tq) query positions as the kernel's (B, n) columns (padding: no limit)."""
  bsz, tq = qpos.shape
  c = jnp.repeat(qpos.astype(jnp.int32), group, axis=1)
  return jnp.pad(c, ((0, 0), (0, n - tq * group)), constant_values=NO_LIMIT)


def _tiles(dtype, cols: int):
  """Tiling and swizzle transforms of a shared-memory tile whose rows are `cols` elements."""
  row_bytes = cols * jnp.dtype(dtype).itemsize
  swizzle = 128 if row_bytes % 128 == 0 else 64 if row_bytes % 64 == 0 else 32
  return (plgpu.TilingTransform((8, swizzle // jnp.dtype(dtype).itemsize)),
          plgpu.SwizzleTransform(swizzle))


def cache_spans(tab_ref, b, start, block: int, page_size: int, n_pages: int):
  """The TMA copies of cache positions [start, start + block) of batch row b, as (row, src,
  dst) per copy: one span of a contiguous cache (page_size 0: row b), or one per page (or
  slice of a page) of a pool, its pool page read from the flattened table (B * n_pages,)
  (clamped: positions past the capacity are masked by the kernels); src slices the cache's
  positions, dst the shared-memory tile's rows."""
  span = min(page_size, block) if page_size else block
  spans = []
  for c in range(block // span):
    p0 = start + c * span
    if page_size:
      row = tab_ref[b * n_pages + jnp.minimum(p0 // page_size, n_pages - 1)]
      src = pl.ds(lax.rem(p0, page_size), span)
    else:
      row, src = b, pl.ds(p0, span)
    spans.append((row, src, pl.ds(c * span, span)))
  return spans


def to_f16(src, dst, keep_rows=None):
  """The fp8 codes of shared-memory tile `src` as float16 (exact) into tile `dst`, rows
  where keep_rows (a WGMMA-layout bool array of dst's shape) is False zeroed whatever they
  hold (a NaN stored past a row's length)."""
  x = plgpu.layout_cast(plgpu.load(src, layout=plgpu.Layout.WGMMA_UPCAST_2X)
                        .astype(jnp.float16), plgpu.Layout.WGMMA)
  if keep_rows is not None:
    x = jnp.where(keep_rows, x, jnp.zeros_like(x))
  dst[...] = x


def _kernel(q_ref, cf_ref, vf_ref, qp_ref, len_ref, tab_ref, k_ref, ks_ref, v_ref, vs_ref, o_ref,
            m_ref, l_ref, q_smem, k_smem, v_smem, ks_smem, vs_smem, k16_smem, v16_smem, p_smem,
            o_smem, ml_smem, q_bar, kv_bar, *, n: int, q_parts: int, dim: int,
            kv_heads: int, capacity: int, split_len: int, block_s: int, stages: int,
            p_parts: int, k_block: bool, v_block: bool, k_regs: bool, page_size: int,
            n_pages: int):
  wg = plgpu.Layout.WGMMA
  col_l, row_l = wg.reduce(0), wg.reduce(1)
  b, h, sp = lax.axis_index("b"), lax.axis_index("h"), lax.axis_index("s")
  length = jnp.clip(len_ref[b], 0, capacity)
  start = sp * split_len
  end = jnp.minimum(start + split_len, length)
  n_iter = (jnp.maximum(end - start, 0) + (block_s - 1)) // block_s

  def issue(i, slot):                  # the TMA copies of block i into `slot`
    for row, src, dst in cache_spans(tab_ref, b, start + i * block_s, block_s, page_size,
                                     n_pages):
      plgpu.copy_gmem_to_smem(k_ref.at[row, src, h], k_smem.at[slot, dst], kv_bar.at[slot])
      plgpu.copy_gmem_to_smem(v_ref.at[row, src, h], v_smem.at[slot, dst], kv_bar.at[slot])
      if k_block:
        plgpu.copy_gmem_to_smem(ks_ref.at[row, src], ks_smem.at[slot, dst], kv_bar.at[slot])
      if v_block:
        plgpu.copy_gmem_to_smem(vs_ref.at[row, src], vs_smem.at[slot, dst], kv_bar.at[slot])

  plgpu.copy_gmem_to_smem(q_ref.at[b, h], q_smem, q_bar.at[0])
  for i in range(stages):
    pl.when(i < n_iter)(functools.partial(issue, i, i))
  cf = plgpu.load(cf_ref.at[b, h], layout=col_l, optimized=False)         # (n,) factor
  qpos = plgpu.load(qp_ref.at[b], layout=col_l, optimized=False)         # (n,) int32
  plgpu.barrier_wait(q_bar.at[0])

  def position_scales(s_smem, slot):
    """The block's per-position scales of head h, (block_s,) in the scores' row layout,
    from the block's (block_s, Hkv) tile (column h picked in registers)."""
    t = plgpu.load(s_smem.at[slot], layout=wg)
    c = plgpu.broadcasted_iota(jnp.int32, (block_s, kv_heads), 1, layout=wg)
    return jnp.where(c == h, t, 0.0).sum(axis=1)

  def step(i, carry):
    o, m, lsum, e = carry
    slot = lax.rem(i, stages)
    p0 = start + i * block_s
    plgpu.barrier_wait(kv_bar.at[slot])
    if k_regs:
      k16 = plgpu.layout_cast(plgpu.load(k_smem.at[slot], layout=plgpu.Layout.WGMMA_UPCAST_2X)
                              .astype(jnp.float16), wg)
    else:
      to_f16(k_smem.at[slot], k16_smem)
      plgpu.commit_smem()
      k16 = k16_smem

    def qk(acc):
      for j in range(q_parts):
        plgpu.wgmma(acc, k16, q_smem.at[j].T)
      plgpu.wgmma_wait(0)
      return acc[...]
    s = pl.run_scoped(qk, plgpu.ACC((block_s, n), jnp.float32))
    s = s * lax.broadcast_in_dim(cf, s.shape, [1])
    if k_block:
      s = s * lax.broadcast_in_dim(position_scales(ks_smem, slot), s.shape, [0])
    pos = p0 + plgpu.broadcasted_iota(jnp.int32, (block_s, n), 0, layout=wg)
    keep = (pos < end) & (pos <= lax.broadcast_in_dim(qpos, s.shape, [1]))
    s = jnp.where(keep, s, -jnp.inf)
    if v_block:
      # V's per-position scales (0 where masked: a NaN stored past the length must not meet
      # p = 0 there); their block maximum comes out of the scores' reduction (one pass
      # across the warpgroup for both)
      vs = jnp.where(keep, lax.broadcast_in_dim(position_scales(vs_smem, slot), s.shape, [0]),
                     0.0)
      mx = jnp.concatenate([s, vs], axis=1).max(axis=0)
      s_max, vs_max = mx[:n], mx[n:]
    else:
      s_max = s.max(axis=0)
    m_new = jnp.maximum(m, s_max)
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
    alpha = jnp.exp(m - m_safe)
    p = jnp.exp(s - lax.broadcast_in_dim(m_safe, s.shape, [1]))
    lsum = lax.broadcast_in_dim(alpha, s.shape, [1]) * lsum + p     # summed after the loop
    if v_block:                        # p * vs / 2^e, e: the running bound's exponent
      bits = lax.bitcast_convert_type(vs_max, jnp.int32)
      e_new = jnp.clip(jnp.maximum(e, lax.shift_right_logical(bits, 23) - 126), -126, 127)
      t = p * vs * lax.broadcast_in_dim(_exp2_exact(-e_new), s.shape, [1])
      alpha = alpha * _exp2_exact(e - e_new)
    else:
      t, e_new = p, e
    vpos = p0 + plgpu.broadcasted_iota(jnp.int32, (block_s, dim), 0, layout=wg)
    to_f16(v_smem.at[slot], v16_smem, keep_rows=vpos < end)
    hi = t.astype(jnp.float16)
    p_smem.at[0].T[...] = hi
    if p_parts == 2:
      p_smem.at[1].T[...] = (t - hi.astype(jnp.float32)).astype(jnp.float16)
    plgpu.commit_smem()

    def pv(acc):
      for j in range(p_parts):
        plgpu.wgmma(acc, v16_smem.T, p_smem.at[j].T)
      plgpu.wgmma_wait(0)
      return acc[...]
    o = o * lax.broadcast_in_dim(alpha, o.shape, [1]) + pl.run_scoped(
        pv, plgpu.ACC((dim, n), jnp.float32))
    pl.when(i + stages < n_iter)(lambda: issue(i + stages, slot))
    return o, m_new, lsum, e_new

  o0 = plgpu.layout_cast(jnp.zeros((dim, n), jnp.float32), wg)
  m0 = plgpu.layout_cast(jnp.full((n,), -jnp.inf, jnp.float32), col_l)
  l0 = plgpu.layout_cast(jnp.zeros((block_s, n), jnp.float32), wg)
  e0 = plgpu.layout_cast(jnp.full((n,), -126, jnp.int32), col_l)
  o, m, lsum, e = lax.fori_loop(0, n_iter, step, (o0, m0, l0, e0))
  l = lsum.sum(axis=0)
  if v_block:
    o = o * lax.broadcast_in_dim(_exp2_exact(e), o.shape, [1])
  else:                                # V's tensor scale
    o = o * vf_ref[0]
  o_smem[...] = o
  ml_smem[0] = m
  ml_smem[1] = l
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(o_smem, o_ref.at[b, h, sp])
  plgpu.copy_smem_to_gmem(ml_smem.at[0], m_ref.at[b, h, sp])
  plgpu.copy_smem_to_gmem(ml_smem.at[1], l_ref.at[b, h, sp])
  plgpu.wait_smem_to_gmem(0)


def mosaic_partials(q, qpos, kv_len, k, v, table=None, *, kplan: KVPlan, vplan: KVPlan,
                    group: int, capacity: int, sm_scale: float, config: MosaicConfig,
                    interpret: bool = False):
  """The kernel's per-split (o^T, m, l): (B, Hkv, n_splits, D, n), (B, Hkv, n_splits, n)
  twice, float32, n = columns(Tq, group) (column t * group + g: token t, query head
  h * group + g of KV head h). q (B, Tq, Hq, D) float; qpos (B, Tq) int32; kv_len (B,)
  int32; k, v QuantizedArrays (B, S, Hkv, D) that mosaic_serves takes, or page pools
  (pages, page_size, Hkv, D) with table (B, n_pages) int32 (capacity n_pages * page_size).
  Arguments are assumed checked."""
  if interpret and config.k_regs:
    raise ValueError("MosaicConfig.k_regs runs compiled only (the Mosaic GPU interpreter takes "
                     "wgmma operands from shared memory)")
  bsz, tq, hq, dim = q.shape
  hkv = hq // group
  n = columns(tq, group)
  bs = config.block_s
  n_splits = config.n_splits
  split_len = -(-(-(-capacity // n_splits)) // bs) * bs
  q16, unscale = _q_columns(q, group, n)
  factor = unscale * jnp.float32(sm_scale)
  if kplan.kind == "tensor":
    factor = factor * jnp.asarray(k.tensor_scale, jnp.float32)
  k_block, v_block = kplan.kind == "block", vplan.kind == "block"
  kd, vd = _fp8_view(k.data, kplan.elem), _fp8_view(v.data, vplan.elem)

  def scales(x, blocked):              # (B or pages, S or page_size, Hkv)
    return (x.scales.reshape(x.shape[0], x.shape[1], hkv) if blocked
            else jnp.zeros((1, 8, 8), jnp.float32))
  page_size = 0 if table is None else k.shape[1]
  # TMA copies of each array per block: one, or one per page the block spans
  copies = max(1, bs // page_size) if page_size else 1
  stages = config.stages
  scratch = [
      plgpu.SMEM((q16.shape[2], n, dim), jnp.float16, transforms=_tiles(jnp.float16, dim)),
      plgpu.SMEM((stages, bs, dim), _fp8_dtype(kplan.elem), transforms=_tiles(jnp.uint8, dim)),
      plgpu.SMEM((stages, bs, dim), _fp8_dtype(vplan.elem), transforms=_tiles(jnp.uint8, dim)),
      plgpu.SMEM((stages, bs, hkv) if k_block else (1, 8, 8), jnp.float32),
      plgpu.SMEM((stages, bs, hkv) if v_block else (1, 8, 8), jnp.float32),
      plgpu.SMEM((8, dim) if config.k_regs else (bs, dim), jnp.float16,
                 transforms=_tiles(jnp.float16, dim)),
      plgpu.SMEM((bs, dim), jnp.float16, transforms=_tiles(jnp.float16, dim)),
      plgpu.SMEM((config.p_parts, n, bs), jnp.float16, transforms=_tiles(jnp.float16, bs)),
      plgpu.SMEM((dim, n), jnp.float32),
      plgpu.SMEM((2, n), jnp.float32),
      plgpu.Barrier(num_barriers=1),
      plgpu.Barrier(num_arrivals=copies * (2 + k_block + v_block),
                    num_barriers=stages),
  ]
  kernel = functools.partial(
      _kernel, n=n, q_parts=q16.shape[2], dim=dim, kv_heads=hkv, capacity=capacity,
      split_len=split_len, block_s=bs, stages=stages, p_parts=config.p_parts,
      k_block=k_block, v_block=v_block, k_regs=config.k_regs, page_size=page_size,
      n_pages=1 if table is None else table.shape[1])
  shape = (bsz, hkv, n_splits)
  call = plgpu.kernel(
      kernel,
      out_type=(jax.ShapeDtypeStruct(shape + (dim, n), jnp.float32),
                jax.ShapeDtypeStruct(shape + (n,), jnp.float32),
                jax.ShapeDtypeStruct(shape + (n,), jnp.float32)),
      scratch_types=scratch, grid=shape, grid_names=("b", "h", "s"),
      interpret=interpret_params(interpret),
      kernel_name=f"fp8lab_attention_mosaic_{kplan.kind}_{vplan.kind}")
  vf = (jnp.asarray(v.tensor_scale, jnp.float32) if vplan.kind == "tensor"
        else jnp.float32(1)).reshape(1)
  tab = jnp.zeros((1,), jnp.int32) if table is None else table.astype(jnp.int32).reshape(-1)
  return call(q16, factor, vf, _q_positions(qpos, group, n), kv_len.astype(jnp.int32), tab,
              kd, scales(k, k_block), vd, scales(v, v_block))


@functools.partial(jax.jit, static_argnames=("kplan", "vplan", "group", "capacity",
                                             "sm_scale", "config", "out_dtype", "interpret"))
def attention_mosaic(q, qpos, kv_len, k, v, table=None, *, kplan: KVPlan, vplan: KVPlan,
                     group: int, capacity: int, sm_scale: float, config: MosaicConfig,
                     out_dtype=None, interpret: bool = False):
  """(o (B, Tq, Hq, D) in out_dtype (default q's), lse (B, Tq, Hq) float32): the kernel's
  partials, then the log-sum-exp combine (kernel.combine over the transposed partials)."""
  out_dtype = q.dtype if out_dtype is None else out_dtype
  o, m, l = mosaic_partials(q, qpos, kv_len, k, v, table, kplan=kplan, vplan=vplan, group=group,
                            capacity=capacity, sm_scale=sm_scale, config=config,
                            interpret=interpret)
  return combine(o, m, l, group=group, tq=q.shape[1], out_dtype=out_dtype, interpret=interpret,
                 transposed=True)
