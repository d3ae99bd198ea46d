"""Flash attention (prefill, Tq * group > 64 rows per KV head) over an FP8 KV cache as a
Mosaic GPU kernel (Hopper: TMA and wgmma): fp8lab.attention's implementation="mosaic" for
prefill-shaped calls, compute="bf16" semantics (below) or compute="fp8" (e4m3 q, K codes, P
and transposed V codes into FP8 wgmma), contiguous caches or page pools.

Grid (n_q_blocks, B, Hkv), one warpgroup per program. The query rows of KV head h are token
t times the GQA group, row r = t * group + g (query head h * group + g), as in the Triton
kernels, so one K / V block serves the whole group; program (i, b, h) takes rows
[j * block_q, (j + 1) * block_q) with j = n_q_blocks - 1 - i (the causally longest blocks
start first), block_q = 64 (wgmma's M), and walks the cache positions [0, end) in blocks of
block_k, end = min(length, the block's largest query position + 1):

  1. TMA copies K's and V's e4m3 / e5m2 codes of the block, (block_k, D) bytes each (the
     packed words viewed as XLA's float8 arrays: the same bytes), into a ring of `stages`
     shared-memory slots, issued `stages` blocks ahead, with their per-token scales
     ((block_k,) float32 slices of (B, Hkv, S) copies made outside the kernel);
  2. K's codes to float16 (exact) in a float16 tile; s = q16 @ K16^T (block_q, block_k) by
     wgmma, float32 accumulation; q16: q rounded to bfloat16 (compute="bf16"), each row
     scaled by a power of two into [2^14, 2^15) (exact in float16) outside the kernel; the
     row factors (2^-s, sm_scale, K's tensor scale) and K's per-position scales applied to
     the float32 scores;
  3. positions at or past the length, or past the row's query position, masked to -inf
     (only in the blocks after the first n_full, those every row of the program sees
     whole: a second loop); the online softmax per row in float32 (a row with no key yet
     keeps m = -inf, no NaN);
  4. V's codes to float16 likewise, rows past the length zeroed in the masked blocks (a NaN
     stored there cannot reach o through 0 * NaN); p times V's per-position scales over 2^E (E fixed per (b, h)
     outside the kernel: the exponent bound of the row's scales, so the product is <= 1)
     rounded to float16; o += p16 @ V16 by wgmma; l sums the float32 p.

At the end o / l (0 for a row that saw no key) times 2^E or V's tensor scale, float32, and
(m, l); the wrapper reorders the rows into (B, Tq, Hq, D) and forms lse = m + log l.
PrefillMosaicConfig(warpgroups=2) runs two 64-row query blocks per program on two compute
warpgroups beside a third that issues the copies (_kernel_ws).
docs/attention_kernel.md section 7 has the design, its semantics and what is measured."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from fp8lab.kernels.attention.kv import NO_LIMIT, KVPlan
from fp8lab.kernels.attention.mosaic import (_fp8_dtype, _fp8_view, _q_columns, _tiles,
                                             cache_spans, fp8_cache_reason, interpret_params,
                                             q_rows, to_f16)
from fp8lab.kernels.attention.prefill import (P_LOG2, Q_LOG2_TOP, exp2_clipped, fp8_serves,
                                              log2_floor)
from fp8lab.kernels.gemv.operands import _exp2_exact

__all__ = ["PrefillMosaicConfig", "prefill_mosaic_config", "prefill_mosaic_serves",
           "prefill_mosaic", "BLOCK_Q"]

# Query rows per program (wgmma's M: one warpgroup).
BLOCK_Q = 64
# Warp specialisation: compute warpgroups per program (64 rows each) beside one that issues
# the TMA copies; the compute and memory warpgroups' registers per thread (JAX's Mosaic GPU
# attention's budget).
COMPUTE_WGS = 2
_COMPUTE_REGS, _MEMORY_REGS = 232, 40
# The kernel's arithmetic (compute=): "bf16" (float16 tiles) or "fp8" (e4m3 dots).
MOSAIC_PREFILL_COMPUTE = ("bf16", "fp8")


@dataclasses.dataclass(frozen=True)
class PrefillMosaicConfig:
  """Launch parameters: block_k positions per step (64 or 128: wgmma's N of the scores),
  `stages` TMA slots in flight; p_regs: p goes to the P V wgmma from registers (compiled
  only: the Mosaic interpreter takes wgmma operands from shared memory) instead of through
  a float16 tile (compute "bf16" only); compute: "bf16" (float16 tiles of the codes, float16
  wgmma) or "fp8" (the e4m3 codes themselves, e4m3 q and P: FP8 wgmma); warpgroups: 1 (one
  warpgroup, 64 query rows per program, issuing its own copies) or 2 (two compute
  warpgroups of 64 rows and a memory warpgroup issuing the copies: _kernel_ws)."""
  block_k: int = 64
  stages: int = 2
  p_regs: bool = False
  compute: str = "bf16"
  warpgroups: int = 1

  def __post_init__(self):
    if self.warpgroups not in (1, COMPUTE_WGS):
      raise ValueError(f"PrefillMosaicConfig.warpgroups must be 1 or {COMPUTE_WGS}, got "
                       f"{self.warpgroups!r}")
    if self.compute not in MOSAIC_PREFILL_COMPUTE:
      raise ValueError(f"PrefillMosaicConfig.compute must be one of {MOSAIC_PREFILL_COMPUTE}, "
                       f"got {self.compute!r}")
    if self.compute == "fp8" and self.p_regs:
      raise ValueError("PrefillMosaicConfig.p_regs goes with compute='bf16' (the fp8 mode's P "
                       "goes through shared memory)")
    if self.block_k not in (64, 128):
      raise ValueError(f"PrefillMosaicConfig.block_k must be 64 or 128, got {self.block_k!r}")
    if not (isinstance(self.stages, int) and 1 <= self.stages <= 8):
      raise ValueError(f"PrefillMosaicConfig.stages must be an int in [1, 8], got "
                       f"{self.stages!r}")


def prefill_mosaic_serves(kplan: KVPlan, vplan: KVPlan, *, paged: bool, capacity: int,
                          page_size: int | None = None,
                          compute: str | None = None) -> str | None:
  """None where the kernel takes the call, else why not (a sentence): mosaic.fp8_cache_reason
  with paged caches allowed (pages of 8 .. 32 positions, 64 or a multiple of 64); any Hkv
  (the scale slices are 1D); compute None / "bf16" / "fp8" (e4m3 K and V: fp8_serves)."""
  if compute not in (None, *MOSAIC_PREFILL_COMPUTE):
    return (f"its prefill kernel computes in bfloat16 semantics or with e4m3 dots (compute "
            f"None, 'bf16' or 'fp8'), got compute={compute!r}")
  if compute == "fp8" and not (fp8_serves(kplan) and fp8_serves(vplan)):
    return "compute='fp8' takes K and V in e4m3 per tensor or per token and head"
  return fp8_cache_reason(kplan, vplan, paged=paged, capacity=capacity, page_size=page_size)


def prefill_mosaic_config(dim: int, interpret: bool = False,
                          compute: str | None = None) -> PrefillMosaicConfig:
  """The default launch (not tuned: no GPU has run this kernel yet): block_k 64, 2 stages
  (smem_bytes 82 KB at D = 128: two programs per SM), p from registers compiled
  (JAX's Mosaic GPU flash attention's operand), through shared memory in interpret mode
  and for compute="fp8"."""
  del dim
  fp8 = compute == "fp8"
  return PrefillMosaicConfig(block_k=64, stages=2, p_regs=not (interpret or fp8),
                             compute="fp8" if fp8 else "bf16")


def smem_bytes(cfg: PrefillMosaicConfig, dim: int) -> int:
  """The kernel's scratch bytes: per stage K's and V's codes and scales; per compute
  warpgroup q's tile and the larger of the loop's tiles (float16 K, V and p; fp8: e4m3 p)
  and the output's (o, m, l), which share their memory."""
  bk = cfg.block_k
  fp8 = cfg.compute == "fp8"
  stage = 2 * bk * dim + 2 * bk * 4
  loop = (BLOCK_Q * bk if fp8 else
          2 * bk * dim * 2 + (8 if cfg.p_regs else BLOCK_Q) * bk * 2)
  out = BLOCK_Q * dim * 4 + 2 * BLOCK_Q * 4
  return cfg.stages * stage + cfg.warpgroups * (BLOCK_Q * dim * (1 if fp8 else 2)
                                                + max(loop, out))


@dataclasses.dataclass(frozen=True)
class _Static:
  """The kernels' static parameters."""
  dim: int
  kv_heads: int
  n_q_blocks: int        # 64-row query blocks
  block_k: int
  stages: int
  k_block: bool
  v_block: bool
  p_regs: bool
  page_size: int         # 0: a contiguous cache
  n_pages: int
  fp8: bool


def _issuer(st: _Static, b, h, tab_ref, k_ref, ks_ref, v_ref, vs_ref, k_smem, v_smem, ks_smem,
            vs_smem, kv_bar):
  """issue(step, slot): the TMA copies of block `step` (K's and V's codes, their scales)
  into ring slot `slot`, all arriving on kv_bar[slot]."""
  bk = st.block_k
  # the (B, S, Hkv, D) caches or pools read through the table (fp8: K only; V^T is a
  # (B, Hkv, D, S') copy made, and gathered, outside the kernel)
  cache = [(k_ref, k_smem)] + ([] if st.fp8 else [(v_ref, v_smem)])

  def issue(step, slot):
    rows = pl.ds(step * bk, bk)
    for row, src, dst in cache_spans(tab_ref, b, step * bk, bk, st.page_size, st.n_pages):
      for ref, smem in cache:
        plgpu.copy_gmem_to_smem(ref.at[row, src, h], smem.at[slot, dst], kv_bar.at[slot])
    if st.fp8:
      plgpu.copy_gmem_to_smem(v_ref.at[b, h, :, rows], v_smem.at[slot], kv_bar.at[slot])
    if st.k_block:
      plgpu.copy_gmem_to_smem(ks_ref.at[b, h, rows], ks_smem.at[slot], kv_bar.at[slot])
    if st.v_block:
      plgpu.copy_gmem_to_smem(vs_ref.at[b, h, rows], vs_smem.at[slot], kv_bar.at[slot])
  return issue


def _block_step(st: _Static, it, carry, *, q_smem, k_smem, v_smem, ks_smem, vs_smem, kv_bar,
                k16_smem, v16_smem, p_smem, cf, qpos, end, masked: bool, release):
  """One block of block_k positions for 64 query rows: wait for the block's copies, scores,
  (mask,) online softmax, P V; release(it, slot) once the slot's data is no longer read.
  carry = (o (64, D), m (64,), l (64,)) float32."""
  wg = plgpu.Layout.WGMMA
  col_l = wg.reduce(0)
  o, m, lsum = carry
  shape = (BLOCK_Q, st.block_k)
  slot = lax.rem(it, st.stages)
  p0 = it * st.block_k
  plgpu.barrier_wait(kv_bar.at[slot])
  if st.fp8:                           # the e4m3 codes are the wgmma operand
    k_op = k_smem.at[slot]
  else:
    to_f16(k_smem.at[slot], k16_smem)
    plgpu.commit_smem()
    k_op = k16_smem

  def qk(acc):
    plgpu.wgmma(acc, q_smem, k_op.T)
    plgpu.wgmma_wait(0)
    return acc[...]
  s = pl.run_scoped(qk, plgpu.ACC(shape, jnp.float32))
  s = s * lax.broadcast_in_dim(cf, shape, [0])
  if st.k_block:
    ks = plgpu.load(ks_smem.at[slot], layout=col_l, optimized=False)
    s = s * lax.broadcast_in_dim(ks, shape, [1])
  if masked:
    pos = p0 + plgpu.broadcasted_iota(jnp.int32, shape, 1, layout=wg)
    keep = (pos < end) & (pos <= lax.broadcast_in_dim(qpos, shape, [0]))
    s = jnp.where(keep, s, -jnp.inf)
  m_new = jnp.maximum(m, s.max(axis=1))
  m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
  alpha = jnp.exp(m - m_safe)
  p = jnp.exp(s - lax.broadcast_in_dim(m_safe, shape, [0]))
  lsum = alpha * lsum + p.sum(axis=1)
  if st.v_block:                       # 0 past the length: a NaN scale there meets p = 0
    vs = plgpu.load(vs_smem.at[slot], layout=col_l, optimized=False)
    if masked:
      in_len = p0 + plgpu.broadcasted_iota(jnp.int32, (st.block_k,), 0, layout=col_l) < end
      vs = jnp.where(in_len, vs, 0.0)
    t = p * lax.broadcast_in_dim(vs, shape, [1])
  else:
    t = p
  if st.fp8:                           # P times 2^8 (< 256) in e4m3; V^T zeroed past the length
    p_smem[...] = (t * jnp.float32(2.0 ** P_LOG2)).astype(jnp.float8_e4m3fn)
    p_op, v_op = p_smem, v_smem.at[slot].T
  else:
    if masked:
      vpos = p0 + plgpu.broadcasted_iota(jnp.int32, (st.block_k, st.dim), 0, layout=wg)
      to_f16(v_smem.at[slot], v16_smem, keep_rows=vpos < end)
    else:
      to_f16(v_smem.at[slot], v16_smem)
    p16 = t.astype(jnp.float16)
    if not st.p_regs:
      p_smem[...] = p16
    p_op, v_op = (p16 if st.p_regs else p_smem), v16_smem
  plgpu.commit_smem()

  def pv(acc):
    plgpu.wgmma(acc, p_op, v_op)
    plgpu.wgmma_wait(0)
    return acc[...]
  o = o * lax.broadcast_in_dim(alpha, o.shape, [0]) + pl.run_scoped(
      pv, plgpu.ACC((BLOCK_Q, st.dim), jnp.float32))
  release(it, slot)
  return o, m_new, lsum


def _row_block(st: _Static, qb, b, h, cf_ref, qp_ref, end_ref, full_ref):
  """Query block qb's (64 rows) row factors and positions, its loop end and its unmasked
  block count."""
  row_l = plgpu.Layout.WGMMA.reduce(1)
  end = end_ref[b * st.n_q_blocks + qb]
  n_full = full_ref[b * st.n_q_blocks + qb]     # blocks every row sees whole: no mask
  cf = plgpu.load(cf_ref.at[b, h, qb], layout=row_l, optimized=False)
  qpos = plgpu.load(qp_ref.at[b, qb], layout=row_l, optimized=False)
  return end, n_full, cf, qpos


def _n_blocks(st: _Static, end):
  return (jnp.maximum(end, 0) + (st.block_k - 1)) // st.block_k


def _attend_rows(st: _Static, n_full, n_iter, step_kw):
  """The block loop of one warpgroup's 64 rows: the unmasked blocks, then the masked ones."""
  wg = plgpu.Layout.WGMMA
  body = functools.partial(_block_step, st, **step_kw)
  o0 = plgpu.layout_cast(jnp.zeros((BLOCK_Q, st.dim), jnp.float32), wg)
  m0 = plgpu.layout_cast(jnp.full((BLOCK_Q,), -jnp.inf, jnp.float32), wg.reduce(1))
  l0 = plgpu.layout_cast(jnp.zeros((BLOCK_Q,), jnp.float32), wg.reduce(1))
  carry = lax.fori_loop(0, n_full, functools.partial(body, masked=False), (o0, m0, l0))
  return lax.fori_loop(n_full, n_iter, functools.partial(body, masked=True), carry)


def _store_rows(o, m, l, factor, o_smem, ml_smem, o_dst, m_dst, l_dst):
  """o / l times the output factor (0 for a row that saw no key), m and l, through shared
  memory to their GMEM slices."""
  inv = jnp.where(l > 0, factor / jnp.where(l > 0, l, 1.0), 0.0)
  o_smem[...] = o * lax.broadcast_in_dim(inv, o.shape, [0])
  ml_smem[0] = m
  ml_smem[1] = l
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(o_smem, o_dst)
  plgpu.copy_smem_to_gmem(ml_smem.at[0], m_dst)
  plgpu.copy_smem_to_gmem(ml_smem.at[1], l_dst)
  plgpu.wait_smem_to_gmem(0)


def _loop_tiles(st: _Static, lead: tuple = ()):
  """The loop's shared-memory tiles (float16 K, V and p; fp8: the e4m3 p tile), with
  leading dims `lead` (one per warpgroup)."""
  bk, dim = st.block_k, st.dim
  if st.fp8:
    return (None, None, plgpu.SMEM(lead + (BLOCK_Q, bk), jnp.float8_e4m3fn,
                                   transforms=_tiles(jnp.uint8, bk)))
  f16 = lambda shape, cols: plgpu.SMEM(lead + shape, jnp.float16,
                                       transforms=_tiles(jnp.float16, cols))
  return (f16((bk, dim), dim), f16((bk, dim), dim),
          f16((8, bk) if st.p_regs else (BLOCK_Q, bk), bk))


def _kernel(q_ref, cf_ref, of_ref, qp_ref, end_ref, full_ref, tab_ref, k_ref, ks_ref, v_ref,
            vs_ref, o_ref, m_ref, l_ref, q_smem, k_smem, v_smem, ks_smem, vs_smem, q_bar,
            kv_bar, *, st: _Static):
  """One warpgroup per program: 64 query rows, the TMA copies issued `stages` blocks ahead
  from the loop itself."""
  i, b, h = lax.axis_index("q"), lax.axis_index("b"), lax.axis_index("h")
  j = st.n_q_blocks - 1 - i
  end, n_full, cf, qpos = _row_block(st, j, b, h, cf_ref, qp_ref, end_ref, full_ref)
  n_iter = _n_blocks(st, end)
  issue = _issuer(st, b, h, tab_ref, k_ref, ks_ref, v_ref, vs_ref, k_smem, v_smem, ks_smem,
                  vs_smem, kv_bar)
  plgpu.copy_gmem_to_smem(q_ref.at[b, h, j], q_smem, q_bar.at[0])
  for s in range(st.stages):
    pl.when(s < n_iter)(functools.partial(issue, s, s))
  plgpu.barrier_wait(q_bar.at[0])

  def reissue(it, slot):
    pl.when(it + st.stages < n_iter)(lambda: issue(it + st.stages, slot))

  def loop(k16_smem, v16_smem, p_smem):
    return _attend_rows(st, n_full, n_iter, dict(
        q_smem=q_smem, k_smem=k_smem, v_smem=v_smem, ks_smem=ks_smem, vs_smem=vs_smem,
        kv_bar=kv_bar, k16_smem=k16_smem, v16_smem=v16_smem, p_smem=p_smem, cf=cf,
        qpos=qpos, end=end, release=reissue))

  # the loop's tiles, then the output's, in the same shared memory
  tiles = _loop_tiles(st)
  o, m, l = pl.run_scoped(lambda *refs: loop(*_fill(tiles, refs)),
                          *[t for t in tiles if t is not None])
  pl.run_scoped(
      lambda o_smem, ml_smem: _store_rows(o, m, l, of_ref[b * st.kv_heads + h], o_smem,
                                          ml_smem, o_ref.at[b, h, j], m_ref.at[b, h, j],
                                          l_ref.at[b, h, j]),
      plgpu.SMEM((BLOCK_Q, st.dim), jnp.float32), plgpu.SMEM((2, BLOCK_Q), jnp.float32))


def _fill(template, refs):
  """refs laid into the non-None places of template (None stays None)."""
  it = iter(refs)
  return [None if t is None else next(it) for t in template]


def _kernel_ws(q_ref, cf_ref, of_ref, qp_ref, end_ref, full_ref, tab_ref, k_ref, ks_ref, v_ref,
               vs_ref, o_ref, m_ref, l_ref, q_smem, k_smem, v_smem, ks_smem, vs_smem, tiles,
               q_bar, kv_bar, consumed, done, *, st: _Static):
  """Two compute warpgroups (query blocks 2j and 2j + 1, 64 rows each) share one ring of K /
  V copies issued by a third, memory warpgroup: it refills a slot once both compute
  warpgroups have released it (`consumed`, two arrivals). A compute warpgroup whose rows
  end sooner (causal) keeps waiting and releasing the remaining blocks unread, so every
  barrier phase is observed by every warpgroup that waits on it (mbarrier parity)."""
  i, b, h = lax.axis_index("q"), lax.axis_index("b"), lax.axis_index("h")
  w = lax.axis_index("wg")
  j = st.n_q_blocks // COMPUTE_WGS - 1 - i
  ends = [end_ref[b * st.n_q_blocks + COMPUTE_WGS * j + c] for c in range(COMPUTE_WGS)]
  n_max = _n_blocks(st, functools.reduce(jnp.maximum, ends))

  @pl.when(w < COMPUTE_WGS)
  def _compute():
    plgpu.set_max_registers(_COMPUTE_REGS, action="increase")
    qb = COMPUTE_WGS * j + w
    end, n_full, cf, qpos = _row_block(st, qb, b, h, cf_ref, qp_ref, end_ref, full_ref)
    n_iter = _n_blocks(st, end)
    plgpu.copy_gmem_to_smem(q_ref.at[b, h, qb], q_smem.at[w], q_bar.at[w])
    plgpu.barrier_wait(q_bar.at[w])
    loop_tiles, out_tiles = tiles
    k16, v16, p_t = ((None, None) if st.fp8 else ()) + tuple(t.at[w] for t in loop_tiles)
    release = lambda it, slot: plgpu.barrier_arrive(consumed.at[slot])
    o, m, l = _attend_rows(st, n_full, n_iter, dict(
        q_smem=q_smem.at[w], k_smem=k_smem, v_smem=v_smem, ks_smem=ks_smem, vs_smem=vs_smem,
        kv_bar=kv_bar, k16_smem=k16, v16_smem=v16, p_smem=p_t, cf=cf, qpos=qpos, end=end,
        release=release))

    @pl.loop(n_iter, n_max)
    def _drain(it):                    # the other warpgroup's remaining blocks
      slot = lax.rem(it, st.stages)
      plgpu.barrier_wait(kv_bar.at[slot])
      plgpu.barrier_arrive(consumed.at[slot])

    # both warpgroups are done with the loop tiles before the output tiles reuse them
    plgpu.barrier_arrive(done)
    plgpu.barrier_wait(done)
    o_smem, ml_smem = out_tiles
    _store_rows(o, m, l, of_ref[b * st.kv_heads + h], o_smem.at[w], ml_smem.at[w],
                o_ref.at[b, h, qb], m_ref.at[b, h, qb], l_ref.at[b, h, qb])

  @pl.when(w == COMPUTE_WGS)
  def _memory():
    plgpu.set_max_registers(_MEMORY_REGS, action="decrease")
    issue = _issuer(st, b, h, tab_ref, k_ref, ks_ref, v_ref, vs_ref, k_smem, v_smem, ks_smem,
                    vs_smem, kv_bar)
    for s in range(st.stages):
      pl.when(s < n_max)(functools.partial(issue, s, s))

    @pl.loop(st.stages, n_max)
    def _refill(it):
      slot = lax.rem(it, st.stages)
      plgpu.barrier_wait(consumed.at[slot])
      issue(it, slot)

    @pl.loop(jnp.maximum(n_max - st.stages, 0), n_max)
    def _last(it):                     # the last releases too: every phase observed
      plgpu.barrier_wait(consumed.at[lax.rem(it, st.stages)])


def _position_scales(x, table, bsz: int, capacity: int, block_k: int):
  """A QuantizedArray's per-token-head scales (B, S, Hkv, 1), or a page pool's (pages,
  page_size, Hkv, 1) gathered through the table (B, n_pages), as (B, Hkv, S') float32, S'
  the capacity rounded up to block_k (zeros there: every TMA slice in bounds)."""
  hkv = x.shape[2]
  s = x.scales.reshape(x.shape[0], x.shape[1], hkv).astype(jnp.float32)
  if table is not None:
    s = s[table].reshape(bsz, capacity, hkv)
  s = s.transpose(0, 2, 1)
  return jnp.pad(s, ((0, 0), (0, 0), (0, -(-capacity // block_k) * block_k - capacity)))


def _q_e4m3(q, group: int, n: int):
  """compute="fp8": q's rows (mosaic.q_rows) times 2^(7 - floor(log2 max|q|)) per row (exact:
  |q| < 256) rounded to e4m3 (nearest even; never saturating), and each row's inverse power
  of two: the Triton prefill kernel's rounding of q, done here by XLA."""
  x = q_rows(q, group, n).astype(jnp.float32)
  e = log2_floor(jnp.max(jnp.abs(x), axis=-1))
  q8 = (x * exp2_clipped(Q_LOG2_TOP - e)[..., None]).astype(jnp.float8_e4m3fn)
  return q8, exp2_clipped(e - Q_LOG2_TOP)


def _v_transposed(v, table, kv_len, bsz: int, capacity: int, block_k: int):
  """compute="fp8": V's e4m3 codes (a cache, or a page pool gathered through the table) as
  (B, Hkv, D, S') float8_e4m3fn, S' the capacity rounded up to block_k, zero at and past
  each row's length: the P V wgmma takes V with the positions contiguous (FP8 wgmma has no
  transposed operands, and Mosaic no 8-bit transposed shared-memory access on Hopper).
  One XLA pass over V's bytes."""
  codes = lax.bitcast_convert_type(v.data, jnp.uint8)          # byte j of a word: code j
  codes = codes.reshape(v.data.shape[:-1] + (v.data.shape[-1] * 4,))
  hkv, dim = codes.shape[2], codes.shape[3]
  if table is not None:
    codes = codes[table].reshape(bsz, capacity, hkv, dim)
  pos = jnp.arange(capacity, dtype=jnp.int32)
  codes = jnp.where(pos[None, :, None, None] < kv_len[:, None, None, None], codes,
                    jnp.uint8(0))
  codes = jnp.pad(codes, ((0, 0), (0, -(-capacity // block_k) * block_k - capacity),
                          (0, 0), (0, 0)))
  return lax.bitcast_convert_type(codes.transpose(0, 2, 3, 1), jnp.float8_e4m3fn)


def _v_bound(vs, kv_len):
  """2^-E per (b, h): E the exponent bound of V's per-token scales below the row's length
  (their max < 2^E), so p * vs / 2^E <= 1; (B, Hkv) float32, and 2^E."""
  pos = jnp.arange(vs.shape[-1], dtype=jnp.int32)
  mx = jnp.max(jnp.where(pos[None, None] < kv_len[:, None, None], vs, 0.0), axis=-1)
  bits = lax.bitcast_convert_type(mx, jnp.int32)
  e = jnp.clip(lax.shift_right_logical(bits, 23) - 126, -126, 127)
  return _exp2_exact(-e), _exp2_exact(e)


@functools.partial(jax.jit, static_argnames=("kplan", "vplan", "group", "capacity",
                                             "sm_scale", "config", "out_dtype", "interpret"))
def prefill_mosaic(q, qpos, kv_len, k, v, table=None, *, kplan: KVPlan, vplan: KVPlan,
                   group: int, capacity: int, sm_scale: float, config: PrefillMosaicConfig,
                   out_dtype=None, interpret: bool = False):
  """(o (B, Tq, Hq, D) in out_dtype (default q's), lse (B, Tq, Hq) float32). q (B, Tq, Hq, D)
  float; qpos (B, Tq) int32 (NO_LIMIT: no causal bound); kv_len (B,) int32; k, v
  QuantizedArrays (B, S, Hkv, D) that prefill_mosaic_serves takes, or page pools (pages,
  page_size, Hkv, D) with table (B, n_pages) int32 (capacity n_pages * page_size: logical
  page j of row b is pool page table[b, j]). Arguments are assumed
  checked."""
  if interpret and config.p_regs:
    raise ValueError("PrefillMosaicConfig.p_regs runs compiled only (the Mosaic GPU interpreter "
                     "takes wgmma operands from shared memory)")
  if interpret and config.warpgroups > 1:
    raise ValueError("PrefillMosaicConfig.warpgroups=2 runs compiled only (the Mosaic GPU "
                     "interpreter of jax 0.11.2 can hang on its three threads: "
                     "docs/attention_kernel.md section 7)")
  out_dtype = q.dtype if out_dtype is None else out_dtype
  bsz, tq, hq, dim = q.shape
  hkv = hq // group
  rows = tq * group
  wgs = config.warpgroups              # query blocks of 64 rows per program
  nqb = -(-rows // (BLOCK_Q * wgs)) * wgs
  bk = config.block_k
  kv_len = jnp.clip(kv_len.astype(jnp.int32), 0, capacity)
  fp8 = config.compute == "fp8"
  if fp8:                              # q in e4m3 per row
    q_op, unscale = _q_e4m3(q, group, nqb * BLOCK_Q)
  else:                                # q rounded to bfloat16, one exact float16 part per row
    q_op, unscale = _q_columns(q.astype(jnp.bfloat16), group, nqb * BLOCK_Q)
    q_op = q_op[:, :, 0]
  q_op = q_op.reshape(bsz, hkv, nqb, BLOCK_Q, dim)
  factor = unscale * jnp.float32(sm_scale)
  if kplan.kind == "tensor":
    factor = factor * jnp.asarray(k.tensor_scale, jnp.float32)
  factor = factor.reshape(bsz, hkv, nqb, BLOCK_Q)
  # each row's query position (padding rows -1: they see nothing), each block's loop end
  qp = jnp.repeat(qpos.astype(jnp.int32), group, axis=1)
  qp = jnp.pad(qp, ((0, 0), (0, nqb * BLOCK_Q - rows)), constant_values=-1)
  qp = qp.reshape(bsz, nqb, BLOCK_Q)
  bound = jnp.where(qp == NO_LIMIT, capacity, jnp.minimum(qp, capacity - 1) + 1).max(axis=-1)
  end = jnp.minimum(kv_len[:, None], bound).reshape(-1)
  # the blocks below every real row's bound and the length: seen whole by every row (none
  # in a block of padding rows only, which the two-warpgroup kernel's even count can add)
  low = jnp.where((qp == NO_LIMIT) | (qp < 0), capacity, jnp.minimum(qp, capacity - 1) + 1)
  full = (jnp.minimum(jnp.minimum(kv_len[:, None], low.min(axis=-1)), bound) // bk).reshape(-1)
  k_block, v_block = kplan.kind == "block", vplan.kind == "block"
  dummy = jnp.zeros((1, 1, 8 * bk), jnp.float32)
  ks = _position_scales(k, table, bsz, capacity, bk) if k_block else dummy
  if v_block:
    vs = _position_scales(v, table, bsz, capacity, bk)
    down, up = _v_bound(vs, kv_len)
    vs = vs * down[..., None]
    out_factor = up.reshape(-1)
  else:
    vs = dummy
    out_factor = jnp.broadcast_to(jnp.asarray(v.tensor_scale, jnp.float32), (bsz * hkv,))
  kd = _fp8_view(k.data, kplan.elem)
  if fp8:
    vd = _v_transposed(v, table, kv_len, bsz, capacity, bk)
    out_factor = out_factor * jnp.float32(2.0 ** -P_LOG2)
  else:
    vd = _fp8_view(v.data, vplan.elem)
  stages = config.stages
  # TMA copies of K (and of V but for fp8's V^T) per block: one, or one per page it spans
  copies = 1 if table is None else max(1, bk // k.shape[1])
  q_type = jnp.float8_e4m3fn if fp8 else jnp.float16
  lead = (wgs,) if wgs > 1 else ()
  scratch = [
      plgpu.SMEM(lead + (BLOCK_Q, dim), q_type, transforms=_tiles(q_type, dim)),
      plgpu.SMEM((stages, bk, dim), _fp8_dtype(kplan.elem), transforms=_tiles(jnp.uint8, dim)),
      plgpu.SMEM((stages, dim, bk), jnp.float8_e4m3fn, transforms=_tiles(jnp.uint8, bk)) if fp8
      else plgpu.SMEM((stages, bk, dim), _fp8_dtype(vplan.elem),
                      transforms=_tiles(jnp.uint8, dim)),
      plgpu.SMEM((stages, bk) if k_block else (1, 8), jnp.float32),
      plgpu.SMEM((stages, bk) if v_block else (1, 8), jnp.float32),
  ]
  st = _Static(dim=dim, kv_heads=hkv, n_q_blocks=nqb, block_k=bk, stages=stages,
               k_block=k_block, v_block=v_block, p_regs=config.p_regs,
               page_size=0 if table is None else k.shape[1],
               n_pages=1 if table is None else table.shape[1], fp8=fp8)
  kv_bar = plgpu.Barrier(num_arrivals=copies + (1 if fp8 else copies) + k_block + v_block,
                         num_barriers=stages)
  if wgs == 1:
    scratch += [plgpu.Barrier(num_barriers=1), kv_bar]
    kernel, threads = functools.partial(_kernel, st=st), {}
  else:                                # the loop's tiles per warpgroup, then the outputs'
    loop_tiles = tuple(t for t in _loop_tiles(st, lead) if t is not None)
    out_tiles = (plgpu.SMEM(lead + (BLOCK_Q, dim), jnp.float32),
                 plgpu.SMEM(lead + (2, BLOCK_Q), jnp.float32))
    scratch += [plgpu.RefUnion(loop_tiles, out_tiles), plgpu.Barrier(num_barriers=wgs), kv_bar,
                plgpu.Barrier(num_arrivals=wgs, num_barriers=stages),
                plgpu.Barrier(num_arrivals=wgs)]
    kernel = functools.partial(_kernel_ws, st=st)
    threads = dict(num_threads=wgs + 1, thread_name="wg")
  grid = (nqb // wgs, bsz, hkv)
  out = (bsz, hkv, nqb, BLOCK_Q)
  o, m, l = plgpu.kernel(
      kernel,
      out_type=(jax.ShapeDtypeStruct(out + (dim,), jnp.float32),
                jax.ShapeDtypeStruct(out, jnp.float32), jax.ShapeDtypeStruct(out, jnp.float32)),
      scratch_types=scratch, grid=grid, grid_names=("q", "b", "h"),
      interpret=interpret_params(interpret),
      kernel_name=f"fp8lab_prefill_mosaic_{config.compute}_{kplan.kind}_{vplan.kind}",
      **threads,
  )(q_op, factor, out_factor, qp, end, full,
    jnp.zeros((1,), jnp.int32) if table is None else table.astype(jnp.int32).reshape(-1),
    kd, ks, vd, vs)
  # rows r = t * group + g of KV head h -> (B, Tq, Hq = h * group + g)
  o = o.reshape(bsz, hkv, nqb * BLOCK_Q, dim)[:, :, :rows]
  o = o.reshape(bsz, hkv, tq, group, dim).transpose(0, 2, 1, 3, 4).reshape(bsz, tq, hq, dim)
  m, l = (x.reshape(bsz, hkv, nqb * BLOCK_Q)[:, :, :rows] for x in (m, l))
  lse = jnp.where(l > 0, m + jnp.log(jnp.where(l > 0, l, 1.0)), -jnp.inf)
  lse = lse.reshape(bsz, hkv, tq, group).transpose(0, 2, 1, 3).reshape(bsz, tq, hq)
  return o.astype(out_dtype), lse
