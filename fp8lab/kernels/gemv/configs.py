"""GEMV launch configurations: GemvConfig, the tuned tables, and the per-launch fitting."""

from __future__ import annotations

import dataclasses
from typing import Any

from fp8lab.kernels.gemv.plan import FormatPlan


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


def _next_pow2(n: int) -> int:
  return 1 << max(0, (n - 1).bit_length())


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

