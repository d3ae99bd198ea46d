"""Pallas GEMV over packed weights: y = x @ dequantize(W).T, W read once, unpacked in registers.

Layout. W is the QuantizedArray's uint32 `data`, (n_out, kw) with kw = ceil(k / per_word);
code i of word j of a row is element per_word * j + i (NUMERICS.md section 3). The weight
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
_prep_x, or from 16 rows on for 4 / 8 codes per word a Pallas kernel, _prep_x_pallas:
the same bits, see _use_xprep_kernel). The N
columns hold the batch (padded to a power of two, Bp) once per x *part*: float32 x is not
a tensor-core operand, so it is cut into parts that sum to it exactly and each part is a
slot of Bp columns; one dot covers all parts and all batch rows, so a batch of 1..Bp costs
the same weight traffic and nearly the same time. A wide batch can go in blocks of x rows
instead (GemvConfig.batch_block; DEFAULT_CONFIGS for batch 64 of some formats): a program per
row block and batch block, the blocks of a row block next to each other in launch order so
that they run together and can find its weight tile in L2; each dot then has the block's
columns, not the batch's. No atomics: each output is reduced by one program in a fixed order
or, where K is split (fewer row blocks than SMs, see _k_splits), by one program per split
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
(NUMERICS.md section 9). Epilogue, per output y[b, r]:
    hi = acc[r, slot 0 of b],  lo = sum of the other slots of b
    y = (hi + lo if hi is finite else hi) * 2^(fold - s_b) * tensor_scale
Keeping the hi product apart means an Inf weight times a nonzero x whose low parts are 0
gives Inf, not Inf * 0 = NaN. Against the reference, which rounds each dequantized weight
to float32 and sums in jnp.dot's order, this differs in the order of the float32 additions,
the x split (4u per product) and the place of the single final scale rounding:
|y - y_exact| <= (k + 7) u sum|w x| + u |y| (u = 2^-24) unless an intermediate overflows or
underflows (the MX fast path adds one exact power-of-two scaling per row); the tensor
cores' float32 accumulation truncates instead of rounding, so the tests allow twice the
addition term. The float16 x window: where a float16 lo part falls below float16's normal range (elements under 2^-17 max|x_b|), the 2^-22 |x|
above becomes an absolute 2^-25 * 2^-s_b, and where hi too is a float16 subnormal both
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

import dataclasses
import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import numpy as np

from fp8lab.formats import ElementFormat, get_format
from fp8lab.kernels import unpack

__all__ = ["GemvConfig", "FormatPlan", "DEFAULT_CONFIGS", "TALL_CONFIGS", "TALL_ROWS",
           "gemv_config", "format_plan",
           "gemv_pallas", "gemv_launch", "split_bf16_parts", "split_f16_parts",
           "NATIVE_FP8_ENV", "FP8_DECODES", "native_fp8_requested", "asm_e2m1_default"]

_U = np.uint32


@dataclasses.dataclass(frozen=True)
class GemvConfig:
  """Launch configuration of the GEMV kernel.

  Attributes:
    block_rows: output rows per program, the M of the dots (power of two, >= 16).
    block_k: uint32 words of K per loop step, the K of each plane's dot (power of two,
      >= 16, a multiple of the words per scale block for block-scaled formats).
    num_warps, num_stages: Triton compiler parameters (num_stages: software-pipelining
      depth of the loads).
    k_splits: programs per row block along K (power of two; 0: chosen from the shape so
      that small n_out still fills the GPU). Partial results are added in a fixed order
      after the kernel, so results stay deterministic.
    batch_block: x rows per program (power of two; 0: the whole padded batch). A batch
      wider than batch_block takes one program per block of x rows for each row block, next
      to each other in launch order, so they run together and can find the same weight
      tile in L2: each program's dots have batch_block, not batch, columns per x part.
      Raised where the dots would have fewer than 8 columns (x parts times rows).
    chain_dots: how a K step's dots (one per plane of the words) reach the float32
      accumulator. True: one at a time, acc = acc + dot_i, each add of the form that Triton
      folds into the MMA's own accumulator, so the tensor cores carry it across planes and
      K steps. False: acc + (dot_0 + dot_1 + ...), whose planes chain the same way but
      whose last add stays a float32 add per accumulator value and K step (25% of e4m3's
      instructions at batch 64 under Nsight Compute), with more registers live. True is
      1.3-1.5x faster at batch 64 (16384^2; nvfp4 alike), within 1-4% at batches 1-16
      (mxfp4 at batch 16: 12% slower), but less accurate: the tensor cores' float32
      accumulation truncates, and over all of K it drifts towards zero (on the H200 at
      16384^2: worst errors of 12-105 u of |x| @ |W|^T against 0.3-3.8 u unchained,
      u = 2^-24; both inside the documented bound). Measurements beside DEFAULT_CONFIGS,
      which all keep False. Where every sum is exact both give the same bits.
  """
  block_rows: int
  block_k: int
  num_warps: int = 4
  num_stages: int = 3
  k_splits: int = 0
  batch_block: int = 0
  chain_dots: bool = False

  def __post_init__(self):
    for name in ("block_rows", "block_k", "num_warps", "num_stages"):
      v = getattr(self, name)
      if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
        raise ValueError(f"GemvConfig.{name} must be a positive int, got {v!r}")
    for name in ("block_rows", "block_k", "num_warps"):
      v = getattr(self, name)
      if v & (v - 1):
        raise ValueError(f"GemvConfig.{name} must be a power of two, got {v!r}")
    if (not isinstance(self.k_splits, int) or isinstance(self.k_splits, bool)
        or self.k_splits < 0 or self.k_splits & (self.k_splits - 1)):
      raise ValueError(f"GemvConfig.k_splits must be 0 or a power of two, got {self.k_splits!r}")
    if (not isinstance(self.batch_block, int) or isinstance(self.batch_block, bool)
        or self.batch_block < 0 or self.batch_block & (self.batch_block - 1)):
      raise ValueError("GemvConfig.batch_block must be 0 or a power of two, got "
                       f"{self.batch_block!r}")
    if not isinstance(self.chain_dots, bool):
      raise ValueError(f"GemvConfig.chain_dots must be a bool, got {self.chain_dots!r}")
    if self.block_rows < 16 or self.block_k < 16:
      raise ValueError("GemvConfig needs block_rows >= 16 and block_k >= 16 (tensor-core "
                       f"tiles), got {self.block_rows}, {self.block_k}")


def _cfg(br, bk, nw=4, ns=3, bb=0):
  return dict(block_rows=br, block_k=bk, num_warps=nw, num_stages=ns, batch_block=bb)


# Launch configurations per format and batch bucket (the smallest bucket >= the batch
# applies; the largest bucket above it). Data, not code: chosen on the H200 from
# benchmarks/probe_configs.py (benchmarks/results/gemv_configs_h200_20261130.json: three
# candidates per format at 16384^2, batches 1 and 16, end-to-end and kernel-only times).
# 4-bit formats at batch 16 prefer shorter K steps (fewer registers: more programs per SM);
# wide batches make the x tile of a K step large, so batch 64 takes shorter K steps too.
# Batch 64 from six candidates at 16384^2 (benchmarks/results/gemv_b64_h200_20261130.txt;
# host us, older kernels): e4m3 64x32 w4 244.8 us (next 64x16 258.4), nvfp4 64x16 w4 s3 225.5
# (64x32: 355.1), mxfp4 128x32 w8 414.0 (64x32: 539.4); since batch blocks (below) only e4m3,
# e5m2, f16 and nvfp4 keep theirs.
# nvfp4 up to batch 4 (the same 8-column dots as batch 1) with the asm e2m1 decode and native
# scales: 128 rows x 32 words w4 s3, kernel 50.8 us vs 58.9 for 64x32 w4 s4 at 16384^2, 14.0
# vs 17.9 at 4096 x 14336, 16.4 vs 16.7 at 14336 x 4096; nvfp4 16x16 48.7 vs 56.7; batch 16
# keeps 64x32 (73.7 vs 107.6 for 128x32 w8) (benchmarks/results/
# gemv_nvfp4_native_scale_h200_20261130.txt).
# Batch 16 from benchmarks/probe_splits.py (PROBE_WORK=batches / mx; results/
# gemv_batches_h200_20261130.txt, gemv_mx_configs_h200_20261130.txt): nvfp4 128 x 32 w4 s3
# 64.0 us vs 74.0 for 64 x 32 w4 s4 at 16384^2 (19.3 vs 20.8 at 4096 x 14336, 24.0 vs 22.7 at
# 14336 x 4096); mxfp4 (far-block check out of the main loop) 128 x 32 w4 s3 80.1 vs 85.0;
# mxfp8 keeps 64 x 64 (78.4 vs 93.1 for 128 x 64 w8).
# Batch 64 in blocks of x rows (GemvConfig.batch_block; benchmarks/results/
# gemv_batch_blocks_h200_20261130.txt, kernel us at 16384^2 / 4096 x 14336 / 14336 x 4096):
# mxfp8 in blocks of 16 304.3 / 70.8 / 83.0 vs 441.2 / 100.7 / 118.8 unblocked (64 x 32 w4
# s2; blocks of 32: 258.6 / 96.0 / 74.0), mxfp8_e5m2 1071.0 vs 1761.9 at 16384^2; bf16 in
# blocks of 32 405.2 / 95.7 / 112.9 vs 800.1 / 174.1 / 209.0 (blocks of 16: 602.7 / 112.6 /
# 137.1); mxfp4 in blocks of 16 290.1 / 67.4 / 81.6 vs 327.8 / 100.6 / 133.4 (128 x 32 w8
# s2; blocks of 32: 266.6 vs 304.2 at 16384^2 in another call, 69.0 vs 66.8 at 4096 x 14336;
# the blocks' bits may differ from the unblocked kernel's: other dot shapes). e4m3 (266.5
# vs 196.2), nvfp4 (262.7 vs 173.8) and f16 (330.4 vs 290.0) lost at 16384^2, and every
# format tried lost at batch 16 in blocks of 8 or 4 (nvfp4 119.0 vs 64.2).
_B64 = _cfg(64, 32, 4, 2)
DEFAULT_CONFIGS: dict[str, dict[int, dict[str, Any]]] = {
    **{name: {16: _cfg(64, 64, 4, 3), 64: _B64} for name in ("e4m3", "e5m2", "f16")},
    **{name: {16: _cfg(64, 64, 4, 3), 64: _cfg(64, 64, 4, 3, bb=16)}
       for name in ("mxfp8", "mxfp8_e5m2")},
    "bf16": {16: _cfg(64, 64, 4, 3), 64: _cfg(64, 64, 4, 3, bb=32)},
    "mxfp4": {4: _cfg(64, 64, 4, 3), 16: _cfg(128, 32, 4, 3), 64: _cfg(128, 32, 4, 3, bb=16)},
    "nvfp4": {16: _cfg(128, 32, 4, 3), 64: _cfg(64, 16, 4, 3)},
}


# Chained dots (GemvConfig.chain_dots; benchmarks/results/gemv_dot_acc_h200_20261130.txt,
# kernel us at 16384^2 / 4096 x 14336 / 14336 x 4096) are faster at batch 64: e4m3 / e5m2 64
# x 64 chained 145.7 / 50.6 / 47.0 vs 195.6 / 61.4 / 64.1 (64 x 32 s2); f16 64 x 32 s3
# chained 188.8 / 63.6 / 57.6 vs 290.4 / 84.2 / 85.9; bf16 unblocked 64 x 64 chained 283.5 /
# 76.2 / 76.7 vs 396.8 / 97.1 / 115.2 (blocks of 32); mxfp8 unblocked chained 217.0 / 84.0 /
# 63.0 vs 307.5 / 70.6 / 83.1 (blocks of 16: it loses at 4096 x 14336, whose 64 row blocks
# alone are too few programs; blocks of 32 chained 247.1 / 95.4 / 69.4), mxfp8_e5m2 705.6
# vs 1082.4 at 16384^2; mxfp4 in blocks of 32 chained 221.7 / 63.6 / 66.7 vs 303.1 / 67.1 /
# 81.5 (blocks of 16); nvfp4 173.6 / 52.1 / 55.2 vs 173.6 / 54.0 / 55.7. Batch 16: nvfp4
# 61.5 / 18.4 / 23.6 vs 64.0 / 19.1 / 24.3 (16x16 blocks 60.2 vs 63.0), e4m3 68.2 / 18.7 /
# 19.2 vs 68.9 / 18.8 / 19.7; mxfp8 76.6 vs 77.0 unchained; mxfp4 lost (86.6 vs 77.3).
# Batches 1 and 4 gained nothing (e4m3 63.5 both, 63.7 vs 64.2 at batch 4) or lost a little
# (nvfp4 49.1 vs 48.8 at 4, 49.4 vs 49.0 at 1; mxfp4 128 x 64 w8 53.9 vs 53.4 at 4). But the
# chain costs accuracy (benchmarks/results/gemv_chain_accuracy_h200_20261130.txt, 16384^2,
# random weights, against the float64 product, in u = 2^-24 of |x| @ |W|^T): the tensor
# cores' float32 accumulation truncates, and chained over all of K it drifts towards zero,
# worst case 12-105 u (mean drift -1.6 to -12.7 u) against 0.3-3.8 u unchained, at every
# batch. So no default chains its dots: chain_dots stays a choice for a caller who wants
# batch 64's speed at that accuracy (gemv_pallas's config argument).

# Tall weights (n_out >= TALL_ROWS) may take other configurations, per format and batch
# bucket (buckets as above; a batch above the largest bucket takes DEFAULT_CONFIGS). mxfp4 up
# to batch 4: 128 rows x 64 words, 8 warps, kernel 53.1 us vs 58.5 for 64 x 64 w4 at 16384^2
# (batch 4: 53.6 vs 58.6), but 18.3 vs 16.5 at 4096 x 14336 and 17.3 vs 17.0 at 14336 x 4096,
# where fewer row blocks need more K splits; nvfp4, mxfp8, e4m3 gained nothing from it
# (benchmarks/results/gemv_wide_h200_20261130.txt).
TALL_ROWS = 16384
TALL_CONFIGS: dict[str, dict[int, dict[str, Any]]] = {
    "mxfp4": {4: _cfg(128, 64, 8, 3)},
}


def gemv_config(format: str, batch: int, n_out: int | None = None) -> GemvConfig:
  """The tuned launch configuration for a weight format, a number of x rows and (if
  given) the weight's rows: TALL_CONFIGS for n_out >= TALL_ROWS where it has the batch,
  else DEFAULT_CONFIGS."""
  if format not in DEFAULT_CONFIGS:
    raise ValueError(f"no GEMV configuration for format {format!r}; "
                     f"known: {', '.join(DEFAULT_CONFIGS)}")

  def bucket(table):
    return next((b for b in sorted(table) if b >= batch), None)

  tall = TALL_CONFIGS.get(format, {}) if n_out is not None and n_out >= TALL_ROWS else {}
  key = bucket(tall)
  if key is not None:
    return GemvConfig(**tall[key])
  table = DEFAULT_CONFIGS[format]
  key = bucket(table)
  return GemvConfig(**table[max(table) if key is None else key])


@dataclasses.dataclass(frozen=True)
class FormatPlan:
  """What the kernel needs to know about a weight format (static, hashable).

  Attributes:
    format: the QuantizedArray format name.
    elem: the element format of the packed codes.
    scale_kind: None, "e8m0" (MX) or "e4m3" (NVFP4) block scales.
    block_len: elements of K per scale block (None without block scales).
    scale_row_div: rows per scale row (16 for NVFP4's 16x16 tiles, else 1).
    has_tensor_scale: whether a float32 tensor scale multiplies the result.
    native_fp8: decode the main loop's e4m3 / e5m2 codes with fp8 -> float16 converts
      (unpack.decode_planes_native: one inline-PTX cvt.rn.f16x2.e4m3x2 / .e5m2x2 per
      16-bit half of a word, sm_89+ only; planes in the "native" pair order) instead of the
      integer float16 route; the planes then hold true values (route 2^0). False for every
      other element format. The MX exact fallback keeps the integer route. Offline SASS
      (sm_90, 64x64 words, 4 warps): loop instructions per word 19.5 -> 8.2 (e4m3) and
      12.5 -> 8.2 (e5m2) at batch 1 with a PRMT pairing code i of two words, 6.1 with the
      pair order.
    asm_e2m1: decode the main loop's e2m1 codes (nvfp4, mxfp4) with
      unpack.decode_planes_e2m1_asm: the same float16-route bits (route 2^-14 unchanged),
      as integer inline PTX (shifts, and, lop3, prmt; no fp4 / fp8 converts, any CUDA GPU)
      whose output register holds two codes of one word as the MMA operand pairs them
      (the "e2m1_asm" pair order). format_plan's default is False; gemv_packed sets it
      when compiling for a CUDA GPU (asm_e2m1_default). False for other element formats.
      The MX exact fallback keeps the shift-and-mask route. Offline SASS (sm_90, default
      configs, main loop instructions per word, off -> on): nvfp4 40.9 -> 31.9 (batch 1),
      47.3 -> 40.2 (16); mxfp4 41.4 -> 32.4 (1), 56.6 -> 47.9 (16), with the first asm
      program (12 instructions per word); the pair order's program takes 11 (nvfp4 batch
      1: 24.4 -> 22.6 per word). Measured on the H200: see asm_e2m1_default.
    native_scale: decode NVFP4's E4M3 block scales with the fp8 -> float16 convert
      (unpack.e4m3_scale_to_f16_native, sm_89+) instead of the integer route; the same
      values. Set by format_plan's native_fp8 for "e4m3" scale kinds.
  """
  format: str
  elem: ElementFormat
  scale_kind: str | None
  block_len: int | None
  scale_row_div: int
  has_tensor_scale: bool
  native_fp8: bool = False
  asm_e2m1: bool = False
  native_scale: bool = False

  @property
  def per_word(self) -> int:
    return self.elem.per_word

  @property
  def words_per_block(self) -> int:
    return 1 if self.block_len is None else self.block_len // self.per_word


_SCALE_KINDS = {"mxfp8": "e8m0", "mxfp8_e5m2": "e8m0", "mxfp4": "e8m0", "nvfp4": "e4m3"}

# How fp8lab.gemv_packed decodes e4m3 / e5m2 codes (elements of formats e4m3, e5m2, mxfp8,
# mxfp8_e5m2; NVFP4's E4M3 scales) when its fp8_decode argument is None: "1" the native fp8
# decode (FormatPlan.native_fp8 / native_scale; sm_89+ GPUs), "0" the integer route; unset:
# native on a GPU of compute capability >= 8.9 (faster on the H200: BUILD.md), integer in
# interpret mode and on older GPUs. Read at each gemv_packed call (under jax.jit: when the
# caller is traced).
NATIVE_FP8_ENV = "FP8LAB_GEMV_NATIVE_FP8"


def _cuda_capability() -> float | None:
  """The compute capability of JAX's first device if it is a CUDA GPU, else None."""
  dev = jax.devices()[0]
  try:
    return float(dev.compute_capability) if dev.platform == "gpu" else None
  except (AttributeError, TypeError, ValueError):     # no CUDA compute capability (ROCm, ...)
    return None


def _gpu_has_fp8_converts() -> bool:
  """Whether JAX's first device is a CUDA GPU of compute capability >= 8.9."""
  cc = _cuda_capability()
  return cc is not None and cc >= 8.9


def asm_e2m1_default(interpret: bool = False) -> bool:
  """Whether gemv_packed's kernel decodes e2m1 codes with the inline-PTX integer program
  (FormatPlan.asm_e2m1): when compiling for a CUDA GPU (integer instructions only, so any
  compute capability). Interpret mode, and GPUs that take no PTX, use the shift-and-mask
  route; both decode to the same float16 patterns, the asm in another plane order (the
  tests run the asm's jnp twin in interpret mode), so results agree within the GEMV's
  bound, not bit for bit (the float32 sums run in another order). Measured on the H200
  (benchmarks/results/gemv_e2m1_asm_h200_20261130.txt): nvfp4 kernel 69.4 -> 61.2 us,
  mxfp4 79.7 -> 78.1 at 16384^2, batch 1, default configs; the pair order then 51.1 ->
  48.6 and 65.2 -> 61.7 (gemv_pair_decode_h200_20261130.txt)."""
  return not interpret and _cuda_capability() is not None


FP8_DECODES = (None, "native", "integer")


def native_fp8_requested(interpret: bool = False, fp8_decode: str | None = None) -> bool:
  """Whether gemv_packed's kernel decodes e4m3 / e5m2 codes natively: fp8_decode "native" /
  "integer" if given, else NATIVE_FP8_ENV "1" / "0", else native exactly when compiling
  for a CUDA GPU of compute capability >= 8.9.

  Raises ValueError for an unknown fp8_decode or variable value, or for native decoding
  of a compiled kernel on a device without fp8 conversions (the PTX would not assemble)."""
  if fp8_decode not in FP8_DECODES:
    raise ValueError(f"fp8_decode must be one of {FP8_DECODES}, got {fp8_decode!r}")
  v = os.environ.get(NATIVE_FP8_ENV, "")
  if v not in ("", "0", "1"):
    raise ValueError(f"{NATIVE_FP8_ENV} must be 0 or 1 (or unset), got {v!r}")
  forced = {"native": True, "integer": False}.get(fp8_decode, {"1": True, "0": False}.get(v))
  if interpret:
    return bool(forced)      # the interpret-mode twin runs anywhere; integer by default
  if forced and not _gpu_has_fp8_converts():
    raise ValueError("the native fp8 decode needs a CUDA GPU of compute capability >= 8.9 "
                     f"(fp8 -> float16 conversions); this is {jax.devices()[0].device_kind}")
  return _gpu_has_fp8_converts() if forced is None else forced


def format_plan(format: str, element_format: str, block_shape: tuple[int, ...] | None,
                has_tensor_scale: bool, native_fp8: bool = False,
                asm_e2m1: bool = False) -> FormatPlan:
  """Builds the kernel's view of a QuantizedArray's static metadata. `native_fp8` asks for
  the native fp8 decode of every e4m3 / e5m2 code: e4m3 / e5m2 elements (native_fp8) and
  NVFP4's E4M3 block scales (native_scale); ignored for others. `asm_e2m1` asks for the
  inline-PTX integer decode of e2m1 elements (ignored for others)."""
  elem = get_format(element_format)
  native = bool(native_fp8) and elem.name in unpack.NATIVE_FORMATS
  asm = bool(asm_e2m1) and elem.name == "e2m1"
  kind = _SCALE_KINDS.get(format)
  if kind is None:
    return FormatPlan(format, elem, None, None, 1, has_tensor_scale, native, asm)
  if not block_shape:
    raise ValueError(f"format {format!r} needs a block_shape")
  block_len = block_shape[-1]
  row_div = block_shape[0] if len(block_shape) == 2 else 1
  if block_len % elem.per_word:
    raise ValueError(f"block length {block_len} is not a multiple of {elem.per_word} codes")
  if (native or asm) and (block_len // elem.per_word) % 2:
    raise ValueError(f"the {elem.name} decode pairs words: block length {block_len} must "
                     f"be a multiple of {2 * elem.per_word} codes")
  return FormatPlan(format, elem, kind, block_len, row_div, has_tensor_scale, native, asm,
                    native_scale=bool(native_fp8) and kind == "e4m3")


def _next_pow2(n: int) -> int:
  return 1 << max(0, (n - 1).bit_length())


def _operand_dtype(plan: FormatPlan):
  """Tensor-core operand type of the main loop: float16 holds every float16-route code
  exactly, the NVFP4 products code * E4M3 scale, and the MX products code * 2^(scale - m)
  of the fast path; bf16 weights are bfloat16."""
  if plan.elem.name == "bf16":
    return jnp.bfloat16
  return jnp.float16


def _route_log2(plan: FormatPlan) -> int:
  """log2 of the factor between the main loop's decoded planes and the codes' values:
  unpack.f16_route_log2 for the integer float16 route (asm_e2m1 too: the same bits), 0 for
  the native decode."""
  return 0 if plan.native_fp8 else unpack.f16_route_log2(plan.elem)


def _fold_log2(plan: FormatPlan) -> int:
  """log2 of the power of two that turns the main loop's dots into x @ W^T (before the
  tensor scale and x's own per-row scaling). It undoes the route of the decoded planes
  (_route_log2); the NVFP4 block scale enters the dot as its true value; the MX fast path's
  factors already undo the route (see _mx_factors)."""
  if plan.scale_kind == "e8m0":
    return 0
  return -_route_log2(plan)


# MX fast path: the largest drop d = scale - m below the row's largest scale m for which
# code * 2^d stays exact in float16 (its lowest bit >= 2^-24): e2m1's lsb is 2^-1, e4m3's
# 2^-9, e5m2's 2^-16. The largest magnitudes (6, 448, 57344) fit at d = 0.
_MX_SPREAD = {"e2m1": 23, "e4m3": 15, "e5m2": 8}


def _mx_factors(codes: jax.Array, elem: ElementFormat, route_log2: int, m: jax.Array):
  """MX fast path: E8M0 codes (rows, groups) and each row's largest code m (rows,) ->
  (float16 factors, far).

  The factor of a block is 2^(c - m) times 2^-route_log2 (_route_log2: f16_route_log2(elem),
  or 0 for native planes), so that decoded code * factor = value * 2^(c - m), as a float16
  built from bits (normal down to 2^-14, subnormal down to 2^-24). Either way the product
  is value * 2^(c - m), so its exactness does not depend on the route. Blocks further than
  _MX_SPREAD below m ("far") get factor 0: their products would not be exact, so a far
  block holding a nonzero code sends the program to the exact fallback."""
  # t = the factor's biased float16 exponent e + 15, e = c - m - route_log2; the per-row
  # part (15 - route_log2 - m) is loop-invariant, so a block costs an add, a compare, a
  # shift and a select where no factor can be a float16 subnormal (every route but native
  # e4m3, whose smallest factor is 2^-15).
  t = codes.astype(jnp.int32) + (15 - route_log2 - m)[:, None]
  t_far = 15 - route_log2 - _MX_SPREAD[elem.name]     # d < -spread  <=>  t < t_far
  far = t < t_far
  bits = t << 10                                      # normal: e >= -14, t >= 1
  if t_far < 1:                                       # subnormal factors 2^e, e >= -24
    bits = jnp.where(t >= 1, bits, jnp.left_shift(jnp.int32(1), jnp.clip(t + 9, 0, 15)))
  bits = jnp.where(far, 0, bits)
  return lax.bitcast_convert_type(bits.astype(jnp.uint16), jnp.float16), far


def _per_word(t: jax.Array, wpb: int) -> jax.Array:
  """(rows, groups) -> (rows, groups * wpb): each block's value repeated for its words."""
  br, g = t.shape
  return jnp.broadcast_to(t[:, :, None], (br, g, wpb)).reshape(br, g * wpb)


def _decode(words: jax.Array, plan: FormatPlan, interpret: bool) -> list[jax.Array]:
  """The main loop's float16 (bf16 weights: bfloat16) planes, value * 2^_route_log2(plan),
  in the order _pair_layout(plan) names (which _prep_x gives x)."""
  layout = _pair_layout(plan)
  if layout == "native":
    return unpack.decode_planes_native(words, plan.elem, interpret=interpret)
  if layout == "e2m1_asm":
    return unpack.decode_planes_e2m1_asm(words, interpret=interpret)
  return unpack.decode_planes_16bit(words, plan.elem)


def _weight_planes(words: jax.Array, codes: jax.Array | None, plan: FormatPlan,
                   interpret: bool = False, m: jax.Array | None = None) -> list[jax.Array]:
  """The main loop's dot operands of a (rows, block_k) word tile: the planes of _decode
  (unpack.PAIR_LAYOUTS order), times their block scale (NVFP4: the E4M3 value; MX: the
  fast path's factor for the rows' largest scale codes m). The two columns of a word pair
  (e, e + 1), e even, lie in one scale block whatever the order (words_per_block is even),
  so the scale of column j is the scale of word j."""
  if plan.scale_kind is None:
    return _decode(words, plan, interpret)
  wpb = plan.words_per_block
  if plan.scale_kind == "e4m3":
    # The E4M3 scale's true value is exact in float16; so is its product with a
    # float16-route e2m1 code (<= 6 significant bits, >= 2^-24).
    s16 = (unpack.e4m3_scale_to_f16_native(codes, interpret=interpret) if plan.native_scale
           else unpack.e4m3_scale_to_f16(codes))
    s16 = _per_word(s16, wpb)
    return [p * s16 for p in _decode(words, plan, interpret)]
  fac, _ = _mx_factors(codes, plan.elem, _route_log2(plan), m)
  fac = _per_word(fac, wpb)
  return [p * fac for p in _decode(words, plan, interpret)]


def _mx_exact_planes(words: jax.Array, codes: jax.Array, plan: FormatPlan):
  """MX fallback operands: float32 code * 2^(c - 127) (exact), as bfloat16 (exact unless
  below 2^-133). Always the shift-and-mask float16 route (native_fp8 / asm_e2m1 or not),
  undone by the fallback's own fold (gemv_launch)."""
  scale = _per_word(unpack.e8m0_scale_to_f32(codes), plan.words_per_block)
  return [(p * scale).astype(jnp.bfloat16) for p in unpack.decode_planes(words, plan.elem)]


def _combine_slots(acc: jax.Array, n_slots: int) -> jax.Array:
  """(rows, n_slots * bp) dot results -> (rows, bp): slot 0 (hi part) plus the others,
  keeping a non-finite hi as it is (an Inf weight times a nonzero x stays Inf)."""
  slots = [acc]
  while len(slots) < n_slots:
    slots = [half for t in slots for half in jnp.split(t, 2, axis=1)]
  y = slots[0]
  if n_slots > 1:
    lo = slots[1]
    for t in slots[2:]:
      lo = lo + t
    y = jnp.where(jnp.isfinite(y), y + lo, y)
  return y


def _gemv_kernel(*refs, plan: FormatPlan, cfg: GemvConfig, n_out: int, kw: int, nbk: int,
                 n_b: int, n_slots: int, bp: int, n_bblocks: int, n_slots_exact: int,
                 x_scaled: bool, n_splits: int, steps_per_split: int, interpret: bool):
  """Kernel body; see the module docstring for the arithmetic. `bp`: x rows of this
  program (one of n_bblocks blocks of the padded batch; program_id(0) = row block *
  n_bblocks + batch block). `interpret`: Pallas interpret mode (the native fp8 and asm
  e2m1 decodes then use their jnp twins instead of inline PTX)."""
  mx = plan.scale_kind == "e8m0"
  it = iter(refs)
  w_ref = next(it)
  s_ref = next(it) if plan.scale_kind else None
  x_ref = next(it)
  a_ref = next(it) if x_scaled else None
  xe_ref = next(it) if mx else None
  ts_ref = next(it) if plan.has_tensor_scale else None
  o_ref = next(it)

  br, bk = cfg.block_rows, cfg.block_k
  pw = plan.per_word

  pid = pl.program_id(0)
  r0 = (pid // n_bblocks if n_bblocks > 1 else pid) * br
  # This program's x rows: b0 + 0 .. bp - 1; their columns of the x operands are contiguous,
  # from b0 * (x parts) on (_prep_x's batch-block order; dots takes them).
  b0 = (pid % n_bblocks) * bp if n_bblocks > 1 else 0
  out_rows = r0 + lax.iota(jnp.int32, br)
  # Clamped rows: every load stays inside W; rows past n_out are computed and not stored.
  rows = jnp.minimum(out_rows, n_out - 1)
  # Built once, outside the K loop, with [:, None]: a reshape inside the loop makes Triton
  # convert layouts through shared memory at every step.
  row_off = (rows * kw)[:, None]
  srow_off = ((rows // plan.scale_row_div) * nbk)[:, None]

  def groups(s, bk=bk):
    """The indices of K step s's bk / wpb scale groups along the row (>= nbk past it)."""
    n_groups = bk // plan.words_per_block
    return s * n_groups + lax.iota(jnp.int32, n_groups)

  def load(s, masked: bool, bk=bk, words: bool = True):
    """The (rows, bk) word tile (None if not `words`) and (rows, bk / wpb) scale codes of K
    step s."""
    cols = s * bk + lax.iota(jnp.int32, bk)
    offs = row_off + cols[None, :]
    if not words:
      words = None
    elif masked:
      words = plgpu.load(w_ref.at[offs], mask=jnp.broadcast_to(cols[None, :] < kw, offs.shape),
                         other=0)
    else:
      words = w_ref[offs]
    codes = None
    if plan.scale_kind:
      gcols = groups(s, bk)
      soffs = srow_off + gcols[None, :]
      if masked:
        codes = plgpu.load(s_ref.at[soffs],
                           mask=jnp.broadcast_to(gcols[None, :] < nbk, soffs.shape), other=0)
      else:
        codes = s_ref[soffs]
    return words, codes

  def dots(acc, planes, xr, s, bk=bk, slots=n_slots):
    """acc plus K step s's dots, one per plane (GemvConfig.chain_dots: in turn, or their
    sum)."""
    cols = pl.ds(b0 * slots, slots * bp) if n_bblocks > 1 else slice(None)
    total = None
    for i in range(pw):
      xs = xr[i, pl.ds(s * bk, bk), cols]                                # (bk, N)
      d = jnp.dot(planes[i], xs, preferred_element_type=jnp.float32)
      if cfg.chain_dots:
        acc = acc + d
      else:
        total = d if total is None else total + d
    return acc if cfg.chain_dots else acc + total

  split = pl.program_id(1) if n_splits > 1 else None

  def k_loop(step, init, bk=bk):
    """The K steps of size bk of this program's split (all of K without splits): full steps
    unmasked, the tail step (if any) masked. With splits, bk must divide a split's
    steps_per_split * block_k words."""
    n_full, tail = divmod(kw, bk)
    carry = init
    if split is None:
      if n_full:
        carry = lax.fori_loop(0, n_full, lambda s, c: step(s, c, False), carry)
      if tail:
        carry = step(n_full, carry, True)
      return carry
    per, rem = divmod(steps_per_split * cfg.block_k, bk)   # this loop's steps per split
    assert not rem, (steps_per_split, cfg.block_k, bk)
    first = split * per
    last = first + per
    carry = lax.fori_loop(first, jnp.minimum(last, n_full),
                          lambda s, c: step(s, c, False), carry)
    if tail:
      mine = (n_full >= first) & (n_full < last)
      carry = lax.cond(mine, lambda c: step(n_full, c, True), lambda c: c, carry)
    return carry

  if mx:
    # The MX fast path scales every block by 2^(c - m), m = the row's largest scale code in
    # this program's K range: a first loop over the scale codes alone (1/16 of the words'
    # bytes for MXFP4, 1/32 for MXFP8) finds m and the smallest code, which tell whether
    # the row has far blocks (_mx_factors) at all; an E8M0 NaN code (0xFF) is the largest.
    # Its K steps: for programs of <= 64 rows, up to _MX_RANGE_TILE codes (rows x codes
    # per row) and 16 main-loop steps that divide a K split's steps; for taller programs,
    # the main loop's step. Measured on the H200 (benchmarks/results/
    # gemv_mx_first_loop_h200_20261130.txt, default configs): at the main loop's step the
    # loop of small dependent loads costs 64-row programs 2-4 us at 16384^2 (mxfp4 61.5 ->
    # 57.9, mxfp8 76.9 -> 72.5 at batch 1 with 8192-code steps; with 4096-code steps both
    # ran 1.8-2x slower, with 16384 mxfp4 1.6x: Triton's code for the main loop changes
    # with the first loop's tile), while 128-row programs lost with 8192-code steps where
    # they gained little (mxfp4 batch 16: 77.0 -> 75.5 at 16384^2 but 26.2 -> 49.5 at
    # 14336 x 4096; batch 64: 326.2 -> 367.5).
    bk_r = bk
    while (br <= 64 and br * (bk_r * 2 // plan.words_per_block) <= _MX_RANGE_TILE
           and bk_r < 16 * bk and (split is None or steps_per_split % (2 * bk_r // bk) == 0)):
      bk_r *= 2

    def range_step(s, carry, masked: bool):
      hi, lo = carry
      c = load(s, masked, bk_r, words=False)[1].astype(jnp.int32)
      if masked:                           # scale codes past the row read as 0: skip them
        c_lo = jnp.where((groups(s, bk_r) < nbk)[None, :], c, 255)
      else:
        c_lo = c
      return jnp.maximum(hi, jnp.max(c, axis=1)), jnp.minimum(lo, jnp.min(c_lo, axis=1))

    m_row, lo_row = k_loop(range_step, (jnp.zeros((br,), jnp.int32),
                                        jnp.full((br,), 255, jnp.int32)), bk_r)
  else:
    m_row = None

  def main_step(s, acc, masked: bool):
    words, codes = load(s, masked)
    return dots(acc, _weight_planes(words, codes, plan, interpret, m_row), x_ref, s)

  def epilogue(y, f):
    # The tensor scale first, then the power of two 2^(fold - s_b): fl(y * ts) is the one
    # rounding, and the power of two is exact unless the result itself leaves float32's
    # normal range. (2^(fold - s_b) * ts first could be a float32 subnormal, losing bits
    # of ts, and XLA:CPU flushes it to zero.)
    if ts_ref is not None:
      y = y * ts_ref[0]
    return y * f[None, :]

  acc = k_loop(main_step, jnp.zeros((br, n_slots * bp), jnp.float32))
  if mx:
    # The dots carry 2^(c - m); 2^(m - 127) per row makes them 2^(c - 127) (exact unless
    # the product leaves float32's range, where the reference's weights do too).
    acc = acc * _exp2_exact(m_row - 127)[:, None]
  b = b0 + lax.iota(jnp.int32, bp)                 # x rows (and columns of y) of this program

  def col_factors(fold: int, scaled: bool):
    """2^(fold - s_b) per column b (_x_shift of x row b's maximum; s_b = 0 unscaled)."""
    if not scaled:
      return _exp2_exact(jnp.full((bp,), fold, jnp.int32))
    a = plgpu.load(a_ref.at[jnp.minimum(b, n_b - 1)], mask=b < n_b, other=0.0)
    return _exp2_exact(fold - _x_shift(a))        # columns b >= n_b are not stored

  y = epilogue(_combine_slots(acc, n_slots), col_factors(_fold_log2(plan), x_scaled))

  if mx:
    # Exact fallback (rare: scales more than _MX_SPREAD binades apart within a row of the
    # program's K range, or a NaN scale): the whole row block again with bfloat16 operands.
    # Short K steps: its registers count for the whole kernel, and it rarely runs.
    bk_e = min(bk, _min_block_k(plan))

    def exact_step(s, acc, masked: bool):
      words, codes = load(s, masked, bk_e)
      return dots(acc, _mx_exact_planes(words, codes, plan), xe_ref, s, bk_e, n_slots_exact)

    def exact():
      acc_e = k_loop(exact_step, jnp.zeros((br, n_slots_exact * bp), jnp.float32), bk_e)
      # bfloat16 parts (never scaled); the fold undoes the integer route of the planes
      return epilogue(_combine_slots(acc_e, n_slots_exact),
                      col_factors(-unpack.f16_route_log2(plan.elem), False))

    # Far blocks (rare; all-zero blocks get scale code 0, so sparse rows have them): a
    # second pass decides whether one holds a nonzero code. It loads the words of far
    # blocks alone, as (rows, blocks, words of a block) tiles whose mask is constant along
    # the last axis, so each block's words are one masked vector load and the other words
    # cost no memory traffic. Measured on the H200 at 16384^2, batch 1, kernel us (benchmarks/
    # results/gemv_mx_sparse_h200_20261130.txt), dense / 1/64 of the blocks zero at random /
    # 1/4 / the last 1/64 of K zero: mxfp4 (64 x 64 words) 58.7 / 92.0 / 106.8 / 71.4, mxfp8
    # 72.5 / 121.0 / 137.4 / 92.4; a full second read of the words gave 94.5 / 94.4 / 94.8
    # and 144.4 / 144.8 / 144.1 (the pass is bound by its loads' latency, not by bytes: one
    # at a time). mxfp4 with TALL_CONFIGS' 128 x 64: 52.8 / 72.5 / 87.3 / 63.8.
    wpb, g = plan.words_per_block, bk // plan.words_per_block
    blk_off = row_off[:, :, None] + lax.iota(jnp.int32, wpb)[None, None, :]

    def check_step(s, bad, masked: bool):
      _, far = _mx_factors(load(s, masked, words=False)[1], plan.elem, _route_log2(plan),
                           m_row)
      col0 = groups(s)[None, :, None] * wpb                # first word of each block
      mask = jnp.broadcast_to(far[:, :, None], (br, g, wpb))
      if masked:
        mask = mask & (col0 + lax.iota(jnp.int32, wpb)[None, None, :] < kw)
      return bad | plgpu.load(w_ref.at[blk_off + col0], mask=mask, other=0)

    def far_codes():
      bad = k_loop(check_step, jnp.zeros((br, g, wpb), jnp.uint32))
      return jnp.max(jnp.max(jnp.max(bad, axis=2), axis=1)) != _U(0)

    # A row has far blocks iff its smallest scale code is far (_mx_factors' rule).
    lo_far = _mx_factors(lo_row[:, None], plan.elem, _route_log2(plan), m_row)[1]
    any_far = jnp.max(jnp.max(lo_far.astype(jnp.int32), axis=1)) > 0
    need = (lax.cond(any_far, far_codes, lambda: any_far)      # any_far: False there
            | (jnp.max(m_row) == 255))                          # an E8M0 NaN scale
    y = lax.cond(need, exact, lambda: y)

  ok = (b[None, :] < n_b) & (out_rows[:, None] < n_out)
  # Masked-off lanes point past the end of y: on the GPU they store nothing; in interpret
  # mode a masked store rewrites every offset it is given, so no masked-off offset may
  # alias a stored one.
  base = 0 if split is None else split * (n_b * n_out)      # this split's partial result
  offs = jnp.where(ok, base + b[None, :] * n_out + out_rows[:, None], n_splits * n_b * n_out)
  plgpu.store(o_ref.at[offs], y.astype(o_ref.dtype), mask=ok)


# Scale codes per K step of the MX kernels' first loop (see _gemv_kernel).
_MX_RANGE_TILE = 8192


def _exp2_exact(n: jax.Array) -> jax.Array:
  """2^n as float32 for integer n in [-149, 127], built from bits (exact)."""
  n = n.astype(jnp.int32)
  normal = lax.bitcast_convert_type((jnp.clip(n, -126, 127) + 127).astype(jnp.uint32)
                                    << _U(23), jnp.float32)
  sub = lax.bitcast_convert_type(_U(1) << jnp.clip(n + 149, 0, 22).astype(jnp.uint32),
                                 jnp.float32)
  return jnp.where(n >= -126, normal, sub)


def _row_max(x: jax.Array) -> jax.Array:
  """The largest |x| per row of (rows, k) float32: Inf or NaN for a row that holds a
  non-finite element. No select on isfinite (so XLA can fuse |x| into the reduce): such a
  row has only non-finite outputs whatever the scale of its finite elements (every output
  sums that element's product, Inf * w or NaN), and _x_shift maps a = Inf to 2^-114 and
  a = NaN to 2^14 (a > 0 is false), which the finite elements survive or overflow to Inf
  without changing an output that is Inf or NaN anyway."""
  return jnp.max(jnp.abs(x), axis=-1)


def _x_shift(a: jax.Array) -> jax.Array:
  """s = _F16_X_EXP - floor(log2(a)) for row maxima a (_row_max), from the exponent field
  (subnormal maxima count as -127; a = 0 gives e = 0): x * 2^s has its largest |x| in
  [2^14, 2^15). Used by _x_part_list and, on the same a, by the GEMV's epilogue."""
  e = (lax.bitcast_convert_type(a, jnp.uint32) >> _U(23)).astype(jnp.int32) - 127
  return _F16_X_EXP - jnp.where(a > 0, e, 0)


def _scale_pow2(x: jax.Array, s: jax.Array) -> jax.Array:
  """x * 2^s (s broadcast against x), s up to +-252, in two exact steps (no 2^s overflow)."""
  s1 = jnp.clip(s // 2, -126, 126)
  s2 = jnp.clip(s - s1, -126, 126)
  return x * _exp2_exact(s1) * _exp2_exact(s2)


# Target exponent of max|x| for x's float16 parts: max in [2^14, 2^15) < 65504.
_F16_X_EXP = 14


def split_bf16_parts(x: jax.Array, n_parts: int) -> jax.Array:
  """Splits float32 x into n_parts bfloat16 arrays whose float32 sum is x (stacked on axis 0).

  Each part is the top 8 significant bits of what the previous parts left, cut by masking
  the float32 bit pattern (the remainder x - part is exact in float32). Exact for normal
  float32 x with n_parts = 3 (float16 inputs: 2; bfloat16: 1), unless a remainder falls
  below float32's normal range (|x| < 2^-110 or so), where low bits may be lost.
  """
  return jnp.stack(_bf16_parts(x, n_parts))


def _bf16_parts(x: jax.Array, n_parts: int) -> list[jax.Array]:
  """split_bf16_parts as a list (elementwise ops only: _xprep_kernel runs it too)."""
  parts = []
  r = x.astype(jnp.float32)
  for p in range(n_parts):
    if p == n_parts - 1:
      hi = r                                             # what is left fits in 8 bits
    else:
      hi = lax.bitcast_convert_type(
          lax.bitcast_convert_type(r, jnp.uint32) & _U(0xFFFF0000), jnp.float32)
    bits16 = (lax.bitcast_convert_type(hi, jnp.uint32) >> _U(16)).astype(jnp.uint16)
    parts.append(lax.bitcast_convert_type(bits16, jnp.bfloat16))
    r = r - hi
  return parts


def split_f16_parts(x: jax.Array) -> jax.Array:
  """Splits float32 x (|x| < 2^15) into float16 hi + lo (stacked on axis 0).

  hi = x truncated to 11 significant bits (a float16 value when |x| >= 2^-14), lo = the
  float16 rounding of the exact remainder: |hi + lo - x| <= 2^-22 |x|, or <= 2^-25 when
  |x| < 2^-14 (float16 subnormals). Cut by masking bits, not by a float round trip that
  XLA may elide (NUMERICS.md section 9).
  """
  return jnp.stack(_f16_parts(x))


def _f16_parts(x: jax.Array) -> list[jax.Array]:
  """split_f16_parts as a list (elementwise ops only: _xprep_kernel runs it too)."""
  hi = lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.uint32) & _U(0xFFFFE000),
                                jnp.float32)
  return [hi.astype(jnp.float16), (x - hi).astype(jnp.float16)]


# Split K only when the row blocks alone leave SMs idle: fewer programs than the H200's 132
# SMs. Measured there (benchmarks/results/gemv_splitk_h200_20261130.txt): 4096 x 14336 (64 row
# blocks) runs 1.4-1.6x faster with 2-8 splits at batches 1 and 16; 14336 x 4096 (224 row
# blocks) gains nothing from 2 splits and loses with 4-8.
_SPLIT_BELOW_PROGRAMS = 132
_TARGET_PROGRAMS = 256
_MIN_STEPS_PER_SPLIT = 4


def _k_splits(cfg: GemvConfig, n_prog: int, n_steps: int) -> int:
  """Programs per row block along K: cfg.k_splits, or (with fewer than
  _SPLIT_BELOW_PROGRAMS programs: row blocks times batch blocks) the smallest power of two
  (<= 8) that brings n_prog * splits to _TARGET_PROGRAMS while each split keeps >= 4 K
  steps."""
  if cfg.k_splits:
    return max(1, min(cfg.k_splits, n_steps))
  s = 1
  while (n_prog < _SPLIT_BELOW_PROGRAMS and n_prog * s < _TARGET_PROGRAMS and s < 8
         and n_steps // (2 * s) >= _MIN_STEPS_PER_SPLIT):
    s *= 2
  return s


# Block-scaled K steps span at least this many scale blocks. On the H200 (Triton 3.6) a
# (16 rows x 16 words) step of 8-bit MX weights, i.e. a (16, 2) tile of scale codes, gave
# wrong sums (compiled only; interpret mode was right), while 64 x 16, 16 x 32 and every
# step of >= 4 blocks tried were exact; 4 blocks keep clear of such tiny scale tiles.
_MIN_SCALE_BLOCKS_PER_STEP = 4


def _min_block_k(plan: FormatPlan) -> int:
  """The smallest K step in words: 16 (a tensor-core K) and >= 4 scale blocks."""
  wpb = plan.words_per_block
  return max(16, wpb * _MIN_SCALE_BLOCKS_PER_STEP if plan.scale_kind else 1)


def _effective_config(cfg: GemvConfig, plan: FormatPlan, n_out: int, kw: int) -> GemvConfig:
  """Shrinks blocks that exceed a small problem and raises block_k to _min_block_k (keeps
  powers of two and the block grain)."""
  wpb = plan.words_per_block
  bk = max(_min_block_k(plan), min(cfg.block_k, _next_pow2(kw)))
  br = max(16, min(cfg.block_rows, _next_pow2(n_out)))
  if bk % wpb:
    raise ValueError(f"block_k={bk} is not a multiple of the {wpb} words per scale block")
  return dataclasses.replace(cfg, block_rows=br, block_k=bk)


# Shared memory a program may use (the H200 has 227 KiB per block; Triton stages the
# pipelined loads of every step there).
_SMEM_BUDGET = 200 * 1024


def _fit_shared_memory(cfg: GemvConfig, plan: FormatPlan, n_cols: int) -> GemvConfig:
  """Halves block_k (then num_stages) until the pipelined loads of one program fit.

  Estimate: num_stages * (word tile + x slices of one K step + scale codes)."""
  pw = plan.per_word

  def need(c):
    step = c.block_rows * c.block_k * 4 + pw * c.block_k * n_cols * 2
    if plan.scale_kind:
      step += c.block_rows * (c.block_k // plan.words_per_block)
    return c.num_stages * step

  floor = max(16, plan.words_per_block)
  while need(cfg) > _SMEM_BUDGET and cfg.block_k > floor:
    cfg = dataclasses.replace(cfg, block_k=cfg.block_k // 2)
  while need(cfg) > _SMEM_BUDGET and cfg.num_stages > 1:
    cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
  return cfg


_BF16_PARTS = {jnp.dtype(jnp.float32): 3, jnp.dtype(jnp.float16): 2,
               jnp.dtype(jnp.bfloat16): 1}


def _n_slots(xdt, operand) -> int:
  """Column slots of x's exact parts as `operand` (a power of two)."""
  if operand == jnp.bfloat16:
    return _next_pow2(_BF16_PARTS[jnp.dtype(xdt)])
  return 1 if jnp.dtype(xdt) == jnp.float16 else 2


def _x_scaled(x_dtype, operand) -> bool:
  """Whether x's parts as `operand` are taken after a power-of-two scale per row: float32 /
  bfloat16 x as float16 parts (float16's range is narrower). The scale is 2^_x_shift(a)
  for the row maxima a (_row_max), which the GEMV's epilogue undoes (col_factors)."""
  return operand == jnp.float16 and jnp.dtype(x_dtype) != jnp.float16


def _x_row_max(x: jax.Array, operand) -> jax.Array | None:
  """The row maxima a (_row_max) of x (B, k) where _x_scaled, else None."""
  return _row_max(x.astype(jnp.float32)) if _x_scaled(x.dtype, operand) else None


def _x_part_list(x: jax.Array, x_dtype, operand, shift: jax.Array | None) -> list[jax.Array]:
  """x's exact parts as `operand`: a list of _n_slots arrays of x's shape (float32 x: 3
  bfloat16 parts and a zero 4th), of x * 2^shift (shift broadcast against x) where
  _x_scaled. Elementwise ops only: XLA's preparation and _xprep_kernel both run it."""
  if operand == jnp.bfloat16:
    parts = _bf16_parts(x.astype(jnp.float32), _BF16_PARTS[jnp.dtype(x_dtype)])
  elif shift is None:
    parts = [x.astype(jnp.float16)]                        # float16 x: exact, one part
  else:
    parts = _f16_parts(_scale_pow2(x.astype(jnp.float32), shift))
  return parts + [jnp.zeros_like(parts[0])] * (_n_slots(x_dtype, operand) - len(parts))


def _x_parts(x: jax.Array, operand) -> tuple[jax.Array, jax.Array | None]:
  """x (B, k) -> its exact parts (n_slots, B, k) as `operand` (float16 / bfloat16), and
  the row maxima a (_row_max) if x was multiplied by 2^_x_shift(a) per row before the split
  (None where it was not scaled)."""
  a = _x_row_max(x, operand)
  shift = None if a is None else _x_shift(a)[:, None]
  return jnp.stack(_x_part_list(x, x.dtype, operand, shift)), a


def _pair_layout(plan: FormatPlan) -> str:
  """The unpack.PAIR_LAYOUTS order of the main loop's planes: which decode _decode runs."""
  if plan.native_fp8:
    return "native"
  return "e2m1_asm" if plan.asm_e2m1 else "code"


def _prep_x(x: jax.Array, per_word: int, kw_pad: int, operand, bp: int,
            layout: str = "code", bb: int | None = None):
  """x as the dots' right operand (pw, kw_pad, n_slots * bp) and the row maxima a of
  _x_parts (None if x was not scaled), from which the kernel's epilogue takes the
  per-column factor 2^(fold - s_b) (col_factors in _gemv_kernel): computed there, it costs no
  XLA kernel.

  Column slot * bp + b holds part `slot` of x row b (rows >= B are zero); row j of plane
  i's slice holds the element whose code plane i's column j holds (unpack.PAIR_LAYOUTS
  `layout`; "code": element per_word * j + i). Slots are a power of two (a float32 x's 3
  bfloat16 parts get a zero 4th). With batch blocks of bb rows (bb < bp), each block's
  columns are contiguous instead: column c * n_slots * bb + slot * bb + j holds part `slot`
  of x row c * bb + j."""
  n_b, k = x.shape
  parts, a = _x_parts(x, operand)
  n_slots = parts.shape[0]
  parts = jnp.pad(parts, ((0, 0), (0, bp - n_b),
                          (0, kw_pad * per_word - k)))   # (n_slots, bp, kw_pad * pw)
  cols = n_slots * bp
  if bb is not None and bb < bp:                 # (n_slots, blocks, bb, K) -> blocks first
    parts = parts.reshape(n_slots, bp // bb, bb, -1).transpose(1, 0, 2, 3)
  sizes, order = unpack.pair_axes(layout, per_word)
  xp = parts.reshape(cols, kw_pad // 2, *sizes)            # (N, word pair, digits...)
  xin = jnp.transpose(xp, (*[2 + d for d in order[:-1]], 1, 2 + order[-1], 0))
  return xin.reshape(per_word, kw_pad, cols), a


def _xprep_kernel(*refs, n_b: int, k: int, pw: int, kw_pad: int, tw: int, bp: int, bb: int,
                  layout: str, scaled: bool):
  """One program of _prep_x_pallas: words [w0, w0 + tw) of every plane of x's parts, all
  batch blocks. x (flat (n_b * k,)) is read once per element, one (bb, tw / 2) load per
  position o in a pair of words (elements o, o + 2 pw, ...: a stride of 2 pw in the row);
  rows >= n_b and elements >= k read as zero. Each load's parts are stored transposed in
  the rows of the plane and parity unpack.pair_offsets gives position o."""
  x_ref, o_ref = refs[0], refs[-1]
  a_ref = refs[1] if scaled else None
  w0 = pl.program_id(0) * tw
  j = lax.iota(jnp.int32, tw // 2)               # word pairs of the program
  offsets = unpack.pair_offsets(layout, pw)
  n_slots = _n_slots(x_ref.dtype, jnp.float16)
  for c in range(bp // bb):                      # batch blocks of bb rows
    rows = c * bb + lax.iota(jnp.int32, bb)
    safe_rows = jnp.minimum(rows, n_b - 1)
    shift = None
    if scaled:
      a = plgpu.load(a_ref.at[safe_rows], mask=rows < n_b, other=0.0)
      shift = _x_shift(a)[:, None]
    for o in range(2 * pw):                      # position in a pair of words
      kk = w0 * pw + o + 2 * pw * j
      xv = plgpu.load(x_ref.at[safe_rows[:, None] * k + jnp.minimum(kk, k - 1)[None, :]],
                      mask=(rows < n_b)[:, None] & (kk < k)[None, :], other=0)
      plane, g = (int(v[0]) for v in np.nonzero(offsets == o))
      out_rows = (plane * kw_pad + w0 + g + 2 * j) * (n_slots * bp)
      for slot, part in enumerate(_x_part_list(xv, x_ref.dtype, jnp.float16, shift)):
        col = c * n_slots * bb + slot * bb + lax.iota(jnp.int32, bb)
        plgpu.store(o_ref.at[out_rows[:, None] + col[None, :]], part.T)


def _prep_x_pallas(x: jax.Array, per_word: int, kw_pad: int, bp: int, layout: str, bb: int,
                   a: jax.Array | None, tw: int, num_warps: int,
                   interpret: bool = False) -> jax.Array:
  """_prep_x's float16 right operand (pw, kw_pad, n_slots * bp), the same bits, in one Pallas
  kernel (_xprep_kernel) of kw_pad / tw programs; a: x's row maxima where _x_scaled (the
  GEMV takes the same array). XLA's version (_prep_x) gathers x at a stride of k for each
  output row; this reads it along the rows (see _use_xprep_kernel for where it is used)."""
  n_b, k = x.shape
  if kw_pad % tw or tw % 2 or bp % bb or (a is not None) != _x_scaled(x.dtype, jnp.float16):
    raise ValueError(f"x preparation: {tw} words per program for {kw_pad} words, {bb} of "
                     f"{bp} rows, row maxima {'given' if a is not None else 'missing'}")
  kernel = functools.partial(_xprep_kernel, n_b=n_b, k=k, pw=per_word, kw_pad=kw_pad,
                             tw=tw, bp=bp, bb=bb, layout=layout, scaled=a is not None)
  n_cols = _n_slots(x.dtype, jnp.float16) * bp
  out = pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct((per_word * kw_pad * n_cols,), jnp.float16),
      grid=(kw_pad // tw,),
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
      interpret=interpret, name="fp8lab_xprep",
  )(x.reshape(-1), *([] if a is None else [a]))
  return out.reshape(per_word, kw_pad, n_cols)


# _prep_x_pallas against XLA's _prep_x on the H200 (x preparation's device time per GEMV,
# float32 x, benchmarks/results/gemv_xprep_h200_20261130.txt): 16384^2 e4m3 batch 16 2.8 vs
# 3.8 us, batch 64 6.0 vs 12.9, 4096 x 14336 batch 64 5.3 vs 11.7, nvfp4 batch 64 7.8 vs 13.2,
# mxfp8 batch 64 7.3 vs 12.8 (MX: the float16 operand; the exact path's bfloat16 one stays
# XLA's, a tiled transpose there); at batches up to 4 it lost (2.0-2.7 vs 1.9), and for the
# 2-per-word formats (bf16 batch 16 2.9 vs 2.4): those keep XLA's. 32 elements of each row
# per program and bp / 16 warps: 16 elements per thread (fewer per load with batch blocks).
_XPREP_MIN_ROWS = 16


def _use_xprep_kernel(plan: FormatPlan, bp: int, interpret: bool) -> bool:
  """Whether gemv_launch prepares x's float16 operand with _prep_x_pallas (measured faster
  there, above)."""
  return (not interpret and bp >= _XPREP_MIN_ROWS and plan.per_word >= 4
          and _operand_dtype(plan) == jnp.float16)


def gemv_launch(data: jax.Array, scales: jax.Array | None, tensor_scale: jax.Array | None,
                x: jax.Array, *, plan: FormatPlan, n_out: int, k: int,
                config: GemvConfig | None = None, interpret: bool = False):
  """The kernel's operands and its launch, apart: `launch(*operands)` is (B * n_out,) in
  x's dtype. gemv_pallas runs both; benchmarks/probe_configs.py times the launch alone."""
  del k   # implied by data's shape and x's
  n_b = x.shape[0]
  kw = data.shape[1]
  cfg = config if config is not None else gemv_config(plan.format, n_b, n_out)
  cfg = _effective_config(cfg, plan, n_out, kw)
  if n_out * kw >= 2**31 or n_b * n_out >= 2**31:
    raise ValueError("W or y has more than 2^31 elements; the kernel uses int32 offsets")
  mx = plan.scale_kind == "e8m0"
  operand = _operand_dtype(plan)
  n_slots = _n_slots(x.dtype, operand)
  n_slots_exact = _n_slots(x.dtype, jnp.bfloat16) if mx else 0
  # Batch rows padded to a power of two; the dots need N = n_slots * bp >= 8. A program
  # takes bb of them (cfg.batch_block), n_bblocks programs per row block.
  min_rows = 8 // min(n_slots, n_slots_exact or n_slots)
  bp = max(_next_pow2(n_b), min_rows)
  bb = bp if not cfg.batch_block else min(bp, max(cfg.batch_block, min_rows))
  n_bblocks = bp // bb
  cfg = _fit_shared_memory(cfg, plan, max(n_slots, n_slots_exact) * bb)
  kw_pad = pl.cdiv(kw, cfg.block_k) * cfg.block_k
  pw = plan.per_word

  operands = [data.reshape(-1)]
  nbk = 0
  if plan.scale_kind:
    nbk = scales.shape[-1]
    operands.append(scales.reshape(-1))
  if _use_xprep_kernel(plan, bp, interpret):
    x_max = _x_row_max(x, operand)
    xin = _prep_x_pallas(x, pw, kw_pad, bp, _pair_layout(plan), bb, x_max, tw=32 // pw,
                         num_warps=min(8, bp // 16))
  else:
    xin, x_max = _prep_x(x, pw, kw_pad, operand, bp, _pair_layout(plan), bb)
  operands += [xin] + ([] if x_max is None else [x_max])
  if mx:    # the exact fallback's operands: bfloat16 parts (never scaled)
    operands.append(_prep_x(x, pw, kw_pad, jnp.bfloat16, bp, bb=bb)[0])
  if plan.has_tensor_scale:
    operands.append(jnp.asarray(tensor_scale, jnp.float32).reshape(1))

  n_prog = pl.cdiv(n_out, cfg.block_rows)
  n_steps = pl.cdiv(kw, cfg.block_k)
  n_splits = _k_splits(cfg, n_prog * n_bblocks, n_steps)
  steps_per_split = pl.cdiv(n_steps, n_splits)
  kernel = functools.partial(_gemv_kernel, plan=plan, cfg=cfg, n_out=n_out, kw=kw, nbk=nbk,
                             n_b=n_b, n_slots=n_slots, bp=bb, n_bblocks=n_bblocks,
                             n_slots_exact=n_slots_exact,
                             x_scaled=x_max is not None,
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
