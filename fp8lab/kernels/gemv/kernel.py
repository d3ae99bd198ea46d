"""Pallas GEMV over packed weights: y = x @ dequantize(W).T, W read once, unpacked in registers.

Layout. W is the QuantizedArray's uint32 `data`, (n_out, kw) with kw = ceil(k / per_word);
code i of word j of a row is element per_word * j + i (docs/numerics.md section 3). The weight
array is never copied or padded: row blocks past n_out re-read the last row (clamped indices,
results discarded by a masked store) and the K tail uses masked loads whose missing words read
as 0 (code 0 is +0 in every format and meets zero-padded x, so no NaN leaks in).

One path for every batch: tensor-core dots, one per code plane. A program takes `block_rows`
rows and loops over K in steps of `block_k` words. Per step it loads the (rows, block_k) tile
of words and decodes it into `per_word` planes, each holding one code of each word
(kernels/unpack.py: integer shifts and masks build float16 bit patterns, no conversion
instruction; on sm_89+ GPUs e4m3 / e5m2 codes take the native decode by default instead,
FormatPlan.native_fp8: one inline PTX cvt.rn.f16x2 per two codes; compiled for a CUDA GPU,
e2m1 codes take the same float16 route written as integer inline PTX, FormatPlan.asm_e2m1).
Every plane is an elementwise function of the word tile, so Triton loads the words straight
into the tensor cores' operand layout (no shuffle through shared memory), and

    acc[r, c] += dot(plane_i, x_i)[r, c]           for i = 0 .. per_word - 1, every K step

(in that order with GemvConfig.chain_dots, else a step's dots summed first and added once)

with x_i[j, c] = column c of x at the element whose code plane i holds in its column j:
code i of word j (element per_word * j + i) for the shift-and-mask route; the asm and
native decodes take the two codes of an MMA register pair from one word, so their planes
permute codes within each pair of words (unpack.PAIR_LAYOUTS). x is rearranged outside
the kernel into per-plane slices (pw, kw_pad, N) in the same order, zero padded (XLA's
operands._prep_x, or from 16 rows on for 4 / 8 codes per word a Pallas kernel, xprep._prep_x_pallas:
the same bits, see xprep._use_xprep_kernel), or with GemvConfig.fuse_x cut from x itself in
each K step (_fused_x_tile: the same bits again, no kernel before the GEMV). The N
columns hold the batch (padded to a power of two, Bp) once per x *part*: float32 x is not
a tensor-core operand, so it is cut into parts that sum to it exactly and each part is a
slot of Bp columns; one dot covers all parts and all batch rows, so a batch of 1..Bp costs
the same weight traffic and nearly the same time. A wide batch can go in blocks of x rows
instead (GemvConfig.batch_block; DEFAULT_CONFIGS for batch 64 of some formats): a program per
row block and batch block, the blocks of a row block next to each other in launch order so
that they run together and can find its weight tile in L2; each dot then has the block's
columns, not the batch's. No atomics: each output is reduced by one program in a fixed order
or, where K is split (fewer row blocks than SMs, see configs._k_splits), by one program per split
whose float32 partials are then added in a fixed order, so results are bitwise
deterministic.

Operands (every product is exact in float32; jnp.dot accumulates in float32):
  * per-tensor minifloats and f16 weights: float16 planes. Every float16-route code is
    exactly a float16 (e4m3: value * 2^-8, e5m2: value, e2m1: value * 2^-14); with the
    native decode (FormatPlan.native_fp8, e4m3 / e5m2 codes on sm_89+: fp8 -> float16
    converts) the plane holds the value itself (route 2^0). x in float16:
    float16 x is one exact part; float32 / bfloat16 x is scaled per batch row by a power of
    two so that max|x| is in [2^14, 2^15), then cut into hi (the top 11 significant bits, by
    masking the float32 pattern) and lo = float16(x - hi): |hi + lo - x| <= 2^-22 |x|
    (<= 2^-25 * 2^e absolutely where x is below float16's normal range).
  * NVFP4: float16 code (value * 2^-14) times the E4M3 block scale's value as a float16,
    multiplied in float16: exact (<= 6 significant bits, >= 2^-24); S_dec at the end.
  * MX (E8M0 scales), fast path: per row, m = the largest scale code in the program's K
    range (a first loop reads the scale codes alone); each block gets the float16 factor
    2^(c - m) (times 2^-route; route 0 when native), so that code * factor = value *
    2^(c - m) either way, exact in float16 for drops c - m >= -_MX_SPREAD (23 / 15 / 8
    binades for e2m1 / e4m3 / e5m2 elements); x as the float16 parts above; the
    accumulator is multiplied by 2^(m - 127) (exact in float32) after the K loop.
    A block further below m ("far") gets factor 0; if it holds a nonzero code, or a scale is
    the E8M0 NaN code, the program recomputes its rows in an exact fallback loop. (The
    first loop also finds each row's smallest scale code, which tells whether a row has far
    blocks; a program that has one loads the words of its far blocks again, alone, to look
    for a nonzero code there. All-zero blocks, scale code 0, are far: sparse rows pay that
    second pass, not the fallback.)
  * MX fallback: float32 code * 2^(scale - 127) (exact), converted to bfloat16 (exact:
    <= 4 significant bits; values below 2^-133, only with scale codes < ~10, may lose bits).
    bf16 weights use the same operand: bfloat16 planes as stored. x as bfloat16 parts cut by
    masking that sum to it exactly: 3 for float32 (4 slots, one zero), 2 for float16, 1 for
    bfloat16.
The x parts are cut with integer ops, never by float round trips that XLA may elide
(docs/numerics.md section 9). Epilogue, per output y[b, r]:
    hi = acc[r, slot 0 of b],  lo = sum of the other slots of b
    y = (hi + lo if hi is finite else hi) * 2^(fold - s_b) * tensor_scale
Keeping the hi product apart means an Inf weight times a nonzero x whose low parts are 0
gives Inf, not Inf * 0 = NaN. Against the reference, which rounds each dequantized weight
to float32 and sums in jnp.dot's order, this differs in the order of the float32 additions,
the x split (4u per product) and the place of the single final scale rounding:
|y - y_exact| <= (k + 7) u sum|w x| + u |y| (u = 2^-24) unless an intermediate overflows or
underflows (the MX fast path adds one exact power-of-two scaling per row); the tensor
cores' float32 accumulation truncates instead of rounding, so the tests allow twice the
addition term. The float16 x window: where a float16 lo part falls below float16's normal
range (elements under 2^-17 max|x_b|), the 2^-22 |x| above becomes an absolute 2^-25 * 2^-s_b, and where hi too is a float16 subnormal both
parts round: 2^-24 * 2^-s_b = 2^(e_b - 38) (e_b = floor(log2 max|x_b|)), which adds
2^(e_b - 38) sum_j |w_rj| to the bound; elements under ~2^(e_b - 39) vanish. It matters
only when such small elements carry y (large x elements meeting near-zero weights); float16
x and the bfloat16 operand paths (bf16 weights, the MX fallback) have no such term. Widening
the window (a second pair of slots for the small elements) is the known fix.

NaN: every NaN code (e4m3 0x7F / 0xFF through the float16 route's NaN fix or the native
convert, e5m2's NaN codes, E8M0 scale 0xFF, E4M3 scale NaN codes) decodes to a NaN
operand, which the dot carries into every column of its row (NaN * 0 is NaN), as a NaN
weight makes the reference row NaN for any x. e5m2 Inf codes decode to float16 Inf.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import numpy as np

from fp8lab.kernels import device, unpack
from fp8lab.kernels.gemv.configs import (GemvConfig, _effective_config, _fit_shared_memory,
                                         _k_splits, _min_block_k, _next_pow2, _smem_budget,
                                         gemv_config)
from fp8lab.kernels.gemv.operands import (_combine_slots, _exp2_exact, _mx_exact_planes,
                                          _mx_factors, _n_slots, _prep_x, _weight_planes,
                                          _x_part_list, _x_row_max, _x_shift)
from fp8lab.kernels.gemv.plan import (FormatPlan, _fold_log2, _operand_dtype, _pair_layout,
                                      _route_log2)
from fp8lab.kernels.gemv.xprep import _prep_x_pallas, _use_xprep_kernel

__all__ = ["gemv_launch", "gemv_pallas"]

_U = np.uint32

# Scale codes per K step of the MX kernels' first loop (_mx_scale_range).
_MX_RANGE_TILE = 8192


class _Inputs(NamedTuple):
  """The kernel's inputs by name, in pallas_call order; None where a plan has none. Holds
  arrays in gemv_launch, refs in the kernel, booleans in _inputs_present."""
  words: Any          # uint32 W, flat (n_out * kw,)
  scales: Any         # uint8 block scale codes, flat (block-scaled formats)
  x: Any              # the main loop's x operand (pw, kw_pad, n_slots * batch_pad), or
                      # with GemvConfig.fuse_x x itself, flat (n_b * k,)
  x_max: Any          # float32 row maxima of x (where x's parts are scaled per row)
  x_exact: Any        # the MX exact fallback's bfloat16 x operand (MX formats, unfused)
  tensor_scale: Any   # float32 (1,) (formats with a tensor scale)


def _inputs_present(plan: FormatPlan, x_scaled: bool, fuse_x: bool) -> _Inputs:
  """Which of the _Inputs a launch of `plan` passes."""
  return _Inputs(words=True, scales=plan.block_scaled, x=True, x_max=x_scaled,
                 x_exact=plan.scaling == "mx" and not fuse_x,
                 tensor_scale=plan.has_tensor_scale)


def _name_refs(refs: tuple[Any, ...], present: _Inputs) -> tuple[_Inputs, Any]:
  """The kernel's positional refs (the present inputs, then the output) by name."""
  named, i = [], 0
  for here in present:
    named.append(refs[i] if here else None)
    i += bool(here)
  if i != len(refs) - 1:
    raise ValueError(f"{len(refs)} refs for {i} inputs and an output")
  return _Inputs(*named), refs[-1]


class _Program(NamedTuple):
  """What the loop helpers share within one program: the static launch facts and the
  program's traced row offsets and split."""
  plan: FormatPlan
  cfg: GemvConfig
  refs: _Inputs
  n_out: int
  k: int                # elements per row of W and x
  kw: int               # words per row of W
  scale_cols: int       # scale codes per scale row
  n_b: int              # x rows (the batch)
  block_batch: int      # x rows of this program (one of n_bblocks blocks of the padded batch)
  n_bblocks: int
  b0: Any               # the program's first x row
  row_off: Any          # (block_rows, 1) offsets of the program's (clamped) rows in W
  srow_off: Any         # (block_rows, 1) offsets of their scale rows
  split: Any            # program_id(1), the K split (None without splits)
  steps_per_split: int
  x_shift: Any          # (1, n_slots * block_batch) int32 _x_shift of each column's x row
                        # (fuse_x with scaled parts; else None)


def _groups(p: _Program, s, bk: int):
  """The indices of K step s's bk / wpb scale groups along the row (>= scale_cols past it)."""
  n_groups = bk // p.plan.words_per_block
  return s * n_groups + lax.iota(jnp.int32, n_groups)


def _load(p: _Program, s, masked: bool, bk: int, words: bool = True):
  """The (rows, bk) word tile (None if not `words`) and (rows, bk / wpb) scale codes of K
  step s."""
  cols = s * bk + lax.iota(jnp.int32, bk)
  offs = p.row_off + cols[None, :]
  if not words:
    tile = None
  elif masked:
    tile = plgpu.load(p.refs.words.at[offs],
                      mask=jnp.broadcast_to(cols[None, :] < p.kw, offs.shape), other=0)
  else:
    tile = p.refs.words[offs]
  codes = None
  if p.plan.block_scaled:
    gcols = _groups(p, s, bk)
    soffs = p.srow_off + gcols[None, :]
    if masked:
      codes = plgpu.load(p.refs.scales.at[soffs],
                         mask=jnp.broadcast_to(gcols[None, :] < p.scale_cols, soffs.shape),
                         other=0)
    else:
      codes = p.refs.scales[soffs]
  return tile, codes


def _fused_x_tile(p: _Program, i: int, s, bk: int, operand, slots: int, shift):
  """With GemvConfig.fuse_x: plane i's x operand of K step s, (bk, slots * block_batch) in
  `operand`, the bits _prep_x lays out there, cut from x itself in registers. Column
  slot * bb + j holds part `slot` of x row b0 + j (rows >= n_b and elements >= k read 0);
  row w - s * bk holds the element whose code plane i holds in word w's column (the pair
  layout's offsets: element 2 pw floor(w / 2) + offset[i, w mod 2]). Each column loads its
  own element, so a row's parts load it once per slot (the copies come from L1)."""
  pw, bb = p.plan.per_word, p.block_batch
  off = unpack.pair_offsets(_pair_layout(p.plan), pw)
  w = s * bk + lax.iota(jnp.int32, bk)
  e = 2 * pw * (w >> 1) + jnp.where((w & 1) == 0, int(off[i, 0]), int(off[i, 1]))
  col = lax.iota(jnp.int32, slots * bb)
  rows = p.b0 + col % bb
  ok = (e < p.k)[:, None] & (rows < p.n_b)[None, :]
  offs = jnp.minimum(rows, p.n_b - 1)[None, :] * p.k + jnp.minimum(e, p.k - 1)[:, None]
  xv = plgpu.load(p.refs.x.at[offs], mask=ok, other=0)
  parts = _x_part_list(xv, p.refs.x.dtype, operand, shift)
  xs = parts[0]
  for t in range(1, slots):
    xs = jnp.where((col // bb == t)[None, :], parts[t], xs)
  return xs


def _x_tile(p: _Program, x_ref, i: int, s, bk: int, operand, slots: int, shift):
  """Plane i's x operand of K step s for this program's batch block: (bk, slots * bb)."""
  if p.cfg.fuse_x:
    return _fused_x_tile(p, i, s, bk, operand, slots, shift)
  cols = pl.ds(p.b0 * slots, slots * p.block_batch) if p.n_bblocks > 1 else slice(None)
  return x_ref[i, pl.ds(s * bk, bk), cols]


def _dots(p: _Program, acc, planes, x_ref, s, bk: int, slots: int, operand, shift):
  """acc plus K step s's dots, one per plane (GemvConfig.chain_dots: in turn, or their
  sum), over _x_tile's operands (x_ref: the prepared operand unless fused)."""
  total = None
  for i in range(p.plan.per_word):
    xs = _x_tile(p, x_ref, i, s, bk, operand, slots, shift)
    d = jnp.dot(planes[i], xs, preferred_element_type=jnp.float32)
    if p.cfg.chain_dots:
      acc = acc + d
    else:
      total = d if total is None else total + d
  return acc if p.cfg.chain_dots else acc + total


def _k_loop(p: _Program, step: Callable, init, bk: int):
  """The K steps of size bk of this program's split (all of K without splits): full steps
  unmasked, the tail step (if any) masked; step(s, carry, masked) -> carry. With splits, bk
  must divide a split's steps_per_split * block_k words."""
  n_full, tail = divmod(p.kw, bk)
  carry = init
  if p.split is None:
    if n_full:
      carry = lax.fori_loop(0, n_full, lambda s, c: step(s, c, False), carry)
    if tail:
      carry = step(n_full, carry, True)
    return carry
  per, rem = divmod(p.steps_per_split * p.cfg.block_k, bk)   # this loop's steps per split
  assert not rem, (p.steps_per_split, p.cfg.block_k, bk)
  first = p.split * per
  last = first + per
  carry = lax.fori_loop(first, jnp.minimum(last, n_full),
                        lambda s, c: step(s, c, False), carry)
  if tail:
    mine = (n_full >= first) & (n_full < last)
    carry = lax.cond(mine, lambda c: step(n_full, c, True), lambda c: c, carry)
  return carry


def _mx_range_block_k(p: _Program) -> int:
  """The K step (words) of the MX first loop: for programs of <= 64 rows, up to
  _MX_RANGE_TILE scale codes (rows x codes per row) and 16 main-loop steps that divide a K
  split's steps; for taller programs, the main loop's step (the first loop's tile changes
  Triton's code for the main loop: docs/gemv_kernel.md)."""
  bk = p.cfg.block_k
  bk_r = bk
  while (p.cfg.block_rows <= 64
         and p.cfg.block_rows * (bk_r * 2 // p.plan.words_per_block) <= _MX_RANGE_TILE
         and bk_r < 16 * bk
         and (p.split is None or p.steps_per_split % (2 * bk_r // bk) == 0)):
    bk_r *= 2
  return bk_r


def _mx_range_step(p: _Program, bk_r: int, s, carry, masked: bool):
  """Running (largest, smallest) scale code per row over K step s of the first loop."""
  hi, lo = carry
  c = _load(p, s, masked, bk_r, words=False)[1].astype(jnp.int32)
  if masked:                               # scale codes past the row read as 0: skip them
    c_lo = jnp.where((_groups(p, s, bk_r) < p.scale_cols)[None, :], c, 255)
  else:
    c_lo = c
  return jnp.maximum(hi, jnp.max(c, axis=1)), jnp.minimum(lo, jnp.min(c_lo, axis=1))


def _mx_scale_range(p: _Program):
  """The MX first loop: each row's largest scale code m_row in this program's K range (the
  fast path scales every block by 2^(c - m_row); an E8M0 NaN code, 0xFF, is the largest)
  and its smallest, lo_row, which tells whether the row has far blocks. It reads the scale
  codes alone."""
  bk_r = _mx_range_block_k(p)
  br = p.cfg.block_rows
  return _k_loop(p, functools.partial(_mx_range_step, p, bk_r),
                 (jnp.zeros((br,), jnp.int32), jnp.full((br,), 255, jnp.int32)), bk_r)


def _main_step(p: _Program, interpret: bool, m_row, n_slots: int, s, acc, masked: bool):
  """acc plus main-loop K step s (m_row: the MX rows' largest scale codes, else None)."""
  words, codes = _load(p, s, masked, p.cfg.block_k)
  return _dots(p, acc, _weight_planes(words, codes, p.plan, interpret, m_row), p.refs.x, s,
               p.cfg.block_k, n_slots, _operand_dtype(p.plan), p.x_shift)


def _epilogue(y, f, ts_ref):
  """The tensor scale first, then the power of two f = 2^(fold - s_b) per column: fl(y * ts)
  is the one rounding, and the power of two is exact unless the result itself leaves
  float32's normal range. (2^(fold - s_b) * ts first could be a float32 subnormal, losing
  bits of ts, and XLA:CPU flushes it to zero.)"""
  if ts_ref is not None:
    y = y * ts_ref[0]
  return y * f[None, :]


def _col_factors(p: _Program, b, fold: int, scaled: bool):
  """2^(fold - s_b) per column b (_x_shift of x row b's maximum; s_b = 0 unscaled)."""
  if not scaled:
    return _exp2_exact(jnp.full((p.block_batch,), fold, jnp.int32))
  a = plgpu.load(p.refs.x_max.at[jnp.minimum(b, p.n_b - 1)], mask=b < p.n_b, other=0.0)
  return _exp2_exact(fold - _x_shift(a))        # columns b >= n_b are not stored


def _mx_exact_step(p: _Program, bk_e: int, n_slots_exact: int, s, acc, masked: bool):
  words, codes = _load(p, s, masked, bk_e)
  return _dots(p, acc, _mx_exact_planes(words, codes, p.plan), p.refs.x_exact, s, bk_e,
               n_slots_exact, jnp.bfloat16, None)


def _mx_exact(p: _Program, b, n_slots_exact: int):
  """The MX exact fallback: the whole row block again with bfloat16 operands, in short K
  steps (its registers count for the whole kernel, and it rarely runs)."""
  bk_e = min(p.cfg.block_k, _min_block_k(p.plan))
  acc_e = _k_loop(p, functools.partial(_mx_exact_step, p, bk_e, n_slots_exact),
                  jnp.zeros((p.cfg.block_rows, n_slots_exact * p.block_batch), jnp.float32),
                  bk_e)
  # bfloat16 parts (never scaled); the fold undoes the integer route of the planes
  return _epilogue(_combine_slots(acc_e, n_slots_exact),
                   _col_factors(p, b, -unpack.f16_route_log2(p.plan.elem), False),
                   p.refs.tensor_scale)


def _far_block_offsets(p: _Program):
  """(rows, 1, wpb) offsets of a scale block's words from the start of its row's block."""
  wpb = p.plan.words_per_block
  return p.row_off[:, :, None] + lax.iota(jnp.int32, wpb)[None, None, :]


def _far_check_step(p: _Program, m_row, blk_off, s, bad, masked: bool):
  """bad | the words of K step s's far blocks (loaded alone: a block's words are one masked
  vector load whose mask is constant along the block, the others cost no traffic)."""
  wpb = p.plan.words_per_block
  g = p.cfg.block_k // wpb
  _, far = _mx_factors(_load(p, s, masked, p.cfg.block_k, words=False)[1], p.plan.elem,
                       _route_log2(p.plan), m_row)
  col0 = _groups(p, s, p.cfg.block_k)[None, :, None] * wpb        # first word of each block
  mask = jnp.broadcast_to(far[:, :, None], (p.cfg.block_rows, g, wpb))
  if masked:
    mask = mask & (col0 + lax.iota(jnp.int32, wpb)[None, None, :] < p.kw)
  return bad | plgpu.load(p.refs.words.at[blk_off + col0], mask=mask, other=0)


def _far_codes(p: _Program, m_row, blk_off):
  """Whether a far block of the program holds a nonzero code (a second pass over the far
  blocks' words; all-zero blocks get scale code 0, so sparse rows have far blocks)."""
  wpb = p.plan.words_per_block
  g = p.cfg.block_k // wpb
  bad = _k_loop(p, functools.partial(_far_check_step, p, m_row, blk_off),
                jnp.zeros((p.cfg.block_rows, g, wpb), jnp.uint32), p.cfg.block_k)
  return jnp.max(jnp.max(jnp.max(bad, axis=2), axis=1)) != _U(0)


def _gemv_kernel(*refs, plan: FormatPlan, cfg: GemvConfig, n_out: int, k: int, kw: int,
                 scale_cols: int, n_b: int, n_slots: int, block_batch: int, n_bblocks: int,
                 n_slots_exact: int, x_scaled: bool, n_splits: int, steps_per_split: int,
                 interpret: bool):
  """Kernel body; see the module docstring for the arithmetic. refs: the present _Inputs,
  then y. program_id(0) = row block * n_bblocks + batch block, program_id(1) the K split.
  `interpret`: Pallas interpret mode (the native fp8 and asm e2m1 decodes then use their
  jnp twins instead of inline PTX)."""
  mx = plan.scaling == "mx"
  inputs, o_ref = _name_refs(refs, _inputs_present(plan, x_scaled, cfg.fuse_x))
  br = cfg.block_rows

  pid = pl.program_id(0)
  r0 = (pid // n_bblocks if n_bblocks > 1 else pid) * br
  # This program's x rows: b0 + 0 .. block_batch - 1; their columns of the x operands are
  # contiguous, from b0 * (x parts) on (operands._prep_x's batch-block order; _dots takes them).
  b0 = (pid % n_bblocks) * block_batch if n_bblocks > 1 else 0
  out_rows = r0 + lax.iota(jnp.int32, br)
  # Clamped rows: every load stays inside W; rows past n_out are computed and not stored.
  rows = jnp.minimum(out_rows, n_out - 1)
  # Built once, outside the K loop, with [:, None]: a reshape inside the loop makes Triton
  # convert layouts through shared memory at every step.
  row_off = (rows * kw)[:, None]
  srow_off = ((rows // plan.scale_row_div) * scale_cols)[:, None]
  split = pl.program_id(1) if n_splits > 1 else None
  x_shift = None
  if cfg.fuse_x and x_scaled:        # each column's row shift, as _prep_x scales the row
    xrow = b0 + lax.iota(jnp.int32, n_slots * block_batch) % block_batch
    a = plgpu.load(inputs.x_max.at[jnp.minimum(xrow, n_b - 1)], mask=xrow < n_b, other=0.0)
    x_shift = _x_shift(a)[None, :]
  p = _Program(plan, cfg, inputs, n_out, k, kw, scale_cols, n_b, block_batch, n_bblocks, b0,
               row_off, srow_off, split, steps_per_split, x_shift)

  m_row, lo_row = _mx_scale_range(p) if mx else (None, None)
  acc = _k_loop(p, functools.partial(_main_step, p, interpret, m_row, n_slots),
                jnp.zeros((br, n_slots * block_batch), jnp.float32), cfg.block_k)
  if mx:
    # The dots carry 2^(c - m); 2^(m - 127) per row makes them 2^(c - 127) (exact unless
    # the product leaves float32's range, where the reference's weights do too).
    acc = acc * _exp2_exact(m_row - 127)[:, None]
  b = b0 + lax.iota(jnp.int32, block_batch)     # x rows (and columns of y) of this program
  y = _epilogue(_combine_slots(acc, n_slots), _col_factors(p, b, _fold_log2(plan), x_scaled),
                inputs.tensor_scale)

  if mx:
    # The exact fallback runs where the fast path is not exact: a row with scales more
    # than _MX_SPREAD binades apart in the program's K range whose far block holds a nonzero
    # code, or a NaN scale.
    blk_off = _far_block_offsets(p)
    # A row has far blocks iff its smallest scale code is far (_mx_factors' rule).
    lo_far = _mx_factors(lo_row[:, None], plan.elem, _route_log2(plan), m_row)[1]
    any_far = jnp.max(jnp.max(lo_far.astype(jnp.int32), axis=1)) > 0
    need = (lax.cond(any_far, functools.partial(_far_codes, p, m_row, blk_off),
                     lambda: any_far)                            # any_far: False there
            | (jnp.max(m_row) == 255))                           # an E8M0 NaN scale
    y = lax.cond(need, functools.partial(_mx_exact, p, b, n_slots_exact), lambda: y)

  ok = (b[None, :] < n_b) & (out_rows[:, None] < n_out)
  # Masked-off lanes point past the end of y: on the GPU they store nothing; in interpret
  # mode a masked store rewrites every offset it is given, so no masked-off offset may
  # alias a stored one.
  base = 0 if split is None else split * (n_b * n_out)      # this split's partial result
  offs = jnp.where(ok, base + b[None, :] * n_out + out_rows[:, None], n_splits * n_b * n_out)
  plgpu.store(o_ref.at[offs], y.astype(o_ref.dtype), mask=ok)


def gemv_launch(data: jax.Array, scales: jax.Array | None, tensor_scale: jax.Array | None,
                x: jax.Array, *, plan: FormatPlan, n_out: int, k: int,
                config: GemvConfig | None = None, interpret: bool = False):
  """The kernel's operands and its launch, apart: `launch(*operands)` is (B * n_out,) in
  x's dtype. gemv_pallas runs both; benchmarks/probe_configs.py times the launch alone."""
  n_b = x.shape[0]
  if x.shape[1] != k:
    raise ValueError(f"x has {x.shape[1]} columns for k={k}")
  kw = data.shape[1]
  cfg = config if config is not None else gemv_config(plan.format, n_b, n_out)
  cfg = _effective_config(cfg, plan, n_out, kw)
  if n_out * kw >= 2**31 or n_b * n_out >= 2**31:
    raise ValueError("W or y has more than 2^31 elements; the kernel uses int32 offsets")
  mx = plan.scaling == "mx"
  operand = _operand_dtype(plan)
  n_slots = _n_slots(x.dtype, operand)
  n_slots_exact = _n_slots(x.dtype, jnp.bfloat16) if mx else 0
  # Batch rows padded to a power of two; the dots need N = n_slots * batch_pad >= 8. A
  # program takes block_batch of them (cfg.batch_block), n_bblocks programs per row block.
  min_rows = 8 // min(n_slots, n_slots_exact or n_slots)
  batch_pad = max(_next_pow2(n_b), min_rows)
  block_batch = (batch_pad if not cfg.batch_block
                 else min(batch_pad, max(cfg.batch_block, min_rows)))
  n_bblocks = batch_pad // block_batch
  cfg = _fit_shared_memory(cfg, plan, max(n_slots, n_slots_exact) * block_batch,
                           _smem_budget(interpret),
                           x_bytes=x.dtype.itemsize if cfg.fuse_x else 2)
  kw_pad = pl.cdiv(kw, cfg.block_k) * cfg.block_k
  pw = plan.per_word

  words = data.reshape(-1)
  scale_cols = 0
  scale_codes = None
  if plan.block_scaled:
    scale_cols = scales.shape[-1]
    scale_codes = scales.reshape(-1)
  if cfg.fuse_x:                   # the kernel cuts x's parts itself
    xin, x_max = x.reshape(-1), _x_row_max(x, operand)
  elif _use_xprep_kernel(plan, batch_pad, interpret):
    x_max = _x_row_max(x, operand)
    xin = _prep_x_pallas(x, pw, kw_pad, batch_pad, _pair_layout(plan), block_batch, x_max,
                         tw=32 // pw, num_warps=min(8, batch_pad // 16))
  else:
    xin, x_max = _prep_x(x, pw, kw_pad, operand, batch_pad, _pair_layout(plan), block_batch)
  # the exact fallback's operands: bfloat16 parts (never scaled)
  x_exact = (_prep_x(x, pw, kw_pad, jnp.bfloat16, batch_pad, block_batch=block_batch)[0]
             if mx and not cfg.fuse_x else None)
  ts = (jnp.asarray(tensor_scale, jnp.float32).reshape(1) if plan.has_tensor_scale
        else None)
  inputs = _Inputs(words=words, scales=scale_codes, x=xin, x_max=x_max, x_exact=x_exact,
                   tensor_scale=ts)
  present = _inputs_present(plan, x_max is not None, cfg.fuse_x)
  assert all((v is not None) == here for v, here in zip(inputs, present)), (plan, present)
  operands = [v for v in inputs if v is not None]

  n_prog = pl.cdiv(n_out, cfg.block_rows)
  n_steps = pl.cdiv(kw, cfg.block_k)
  n_splits = _k_splits(cfg, n_prog * n_bblocks, n_steps, device.sm_count(interpret))
  steps_per_split = pl.cdiv(n_steps, n_splits)
  kernel = functools.partial(_gemv_kernel, plan=plan, cfg=cfg, n_out=n_out, k=k, kw=kw,
                             scale_cols=scale_cols, n_b=n_b, n_slots=n_slots,
                             block_batch=block_batch, n_bblocks=n_bblocks,
                             n_slots_exact=n_slots_exact, x_scaled=x_max is not None,
                             n_splits=n_splits, steps_per_split=steps_per_split,
                             interpret=interpret)
  call = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((n_splits * n_b * n_out,),
                                     x.dtype if n_splits == 1 else jnp.float32),
      grid=((n_prog * n_bblocks,) if n_splits == 1 else (n_prog * n_bblocks, n_splits)),
      compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps,
                                           num_stages=cfg.num_stages),
      interpret=interpret,
      name=f"fp8lab_gemv_{plan.format}",
  )
  if n_splits == 1:
    return operands, call

  def launch(*ops):
    parts = call(*ops).reshape(n_splits, n_b * n_out)
    y = parts[0]
    for i in range(1, n_splits):             # a fixed order: deterministic
      y = y + parts[i]
    return y.astype(x.dtype)
  return operands, launch


@functools.partial(jax.jit, static_argnames=("plan", "n_out", "k", "config", "interpret"))
def gemv_pallas(data: jax.Array, scales: jax.Array | None, tensor_scale: jax.Array | None,
                x: jax.Array, *, plan: FormatPlan, n_out: int, k: int,
                config: GemvConfig | None = None, interpret: bool = False) -> jax.Array:
  """y = x @ dequantize(W).T with the Pallas kernel, from W's raw arrays.

  Args:
    data: uint32 (n_out, ceil(k / per_word)) packed codes.
    scales: uint8 block-scale codes ((n_out, ceil(k / block)) or, for 16x16 NVFP4,
      (ceil(n_out / 16), ceil(k / 16))), or None.
    tensor_scale: float32 scalar dequantization factor, or None.
    x: (B, k) float32 / bfloat16 / float16.
    plan: format_plan(...) of W.
    config: launch configuration (default: gemv_config(plan.format, B)).
    interpret: run the kernel in Pallas interpret mode (CPU).

  Returns:
    (B, n_out) in x's dtype. Arguments are assumed checked (fp8lab.ops.gemv_packed does).
  """
  operands, launch = gemv_launch(data, scales, tensor_scale, x, plan=plan, n_out=n_out, k=k,
                                 config=config, interpret=interpret)
  return launch(*operands).reshape(x.shape[0], n_out)
