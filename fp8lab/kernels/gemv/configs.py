"""GEMV launch configurations: GemvConfig, the tuned tables (data), and the per-launch fitting.

gemv_config picks a table entry for a format and batch; gemv_launch then fits it to the shape
(_effective_config), the device's shared memory (_fit_shared_memory) and SM count (_k_splits).
The measurements behind every number here: docs/gemv_kernel.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fp8lab.formats import get_quantized_format
from fp8lab.kernels import device
from fp8lab.kernels.gemv.plan import FormatPlan

__all__ = ["GemvConfig", "DEFAULT_CONFIGS", "TALL_CONFIGS", "TALL_ROWS", "UNTUNED_CONFIG",
           "gemv_config"]


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
      accumulator. True: one at a time, acc = acc + dot_i, an add Triton folds into the
      MMA's own accumulator, so the tensor cores carry it across planes and K steps. False:
      acc + (dot_0 + dot_1 + ...), whose last add stays a float32 add. True is faster at
      wide batches but less accurate: the tensor cores' float32 accumulation truncates, and
      over all of K it drifts towards zero (both stay inside the documented bound). No
      table entry chains. Where every sum is exact both give the same bits.
    fuse_x: the kernel reads x itself, as it is, and cuts the float16 / bfloat16 parts of
      each K step's x tile in registers (the same bits: kernel.py's module docstring),
      instead of reading a rearranged copy that XLA or a small Pallas kernel prepared
      (operands._prep_x, xprep._prep_x_pallas): one kernel fewer per GEMV, for more work
      inside the K loop. The row maxima that scale float32 / bfloat16 x (one XLA reduce,
      which XLA fuses into x's producer) are computed outside either way.
  """
  block_rows: int
  block_k: int
  num_warps: int = 4
  num_stages: int = 3
  k_splits: int = 0
  batch_block: int = 0
  chain_dots: bool = False
  fuse_x: bool = False

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
    if not isinstance(self.fuse_x, bool):
      raise ValueError(f"GemvConfig.fuse_x must be a bool, got {self.fuse_x!r}")
    if self.block_rows < 16 or self.block_k < 16:
      raise ValueError("GemvConfig needs block_rows >= 16 and block_k >= 16 (tensor-core "
                       f"tiles), got {self.block_rows}, {self.block_k}")


def _cfg(block_rows: int, block_k: int, num_warps: int = 4, num_stages: int = 3,
         batch_block: int = 0) -> dict[str, int]:
  return dict(block_rows=block_rows, block_k=block_k, num_warps=num_warps,
              num_stages=num_stages, batch_block=batch_block)


# Tuned on the H200: format -> {batch bucket: GemvConfig fields}; the smallest bucket >= the
# batch applies, a batch above every bucket takes the largest. Each entry names the file in
# benchmarks/results/ it was chosen from.
DEFAULT_CONFIGS: dict[str, dict[int, dict[str, Any]]] = {
    "e4m3": {16: _cfg(64, 64, 4, 3),                  # gemv_configs_h200_20261130.json
             64: _cfg(64, 32, 4, 2)},                 # gemv_b64_h200_20261130.txt
    "e5m2": {16: _cfg(64, 64, 4, 3),                  # gemv_configs_h200_20261130.json
             64: _cfg(64, 32, 4, 2)},                 # as e4m3: gemv_b64_h200_20261130.txt
    "f16": {16: _cfg(64, 64, 4, 3),                   # as e4m3 (not probed alone)
            64: _cfg(64, 32, 4, 2)},                  # gemv_batch_blocks_h200_20261130.txt
    "mxfp8": {16: _cfg(64, 64, 4, 3),                 # gemv_mx_configs_h200_20261130.txt
              64: _cfg(64, 64, 4, 3, 16)},            # gemv_batch_blocks_h200_20261130.txt
    "mxfp8_e5m2": {16: _cfg(64, 64, 4, 3),            # as mxfp8 (not probed alone)
                   64: _cfg(64, 64, 4, 3, 16)},       # gemv_batch_blocks_h200_20261130.txt
    "bf16": {16: _cfg(64, 64, 4, 3),                  # as e4m3 (not probed alone)
             64: _cfg(64, 64, 4, 3, 32)},             # gemv_batch_blocks_h200_20261130.txt
    "mxfp4": {4: _cfg(64, 64, 4, 3),                  # gemv_configs_h200_20261130.json
              16: _cfg(128, 32, 4, 3),                # gemv_mx_configs_h200_20261130.txt
              64: _cfg(128, 32, 4, 3, 16)},           # gemv_batch_blocks_h200_20261130.txt
    "nvfp4": {16: _cfg(128, 32, 4, 3),                # gemv_batches_h200_20261130.txt
              64: _cfg(64, 16, 4, 3)},                # gemv_b64_h200_20261130.txt
}

# Weights of at least TALL_ROWS rows may take other entries (buckets as above; a batch above
# the largest bucket takes DEFAULT_CONFIGS).
TALL_ROWS = 16384
TALL_CONFIGS: dict[str, dict[int, dict[str, Any]]] = {
    "mxfp4": {4: _cfg(128, 64, 8, 3)},                # gemv_wide_h200_20261130.txt
}

# A registry format without a DEFAULT_CONFIGS entry runs untuned with this configuration
# (the commonest tuned entry up to batch 16), fitted to the shape and device like any other.
UNTUNED_CONFIG: dict[str, Any] = _cfg(64, 64, 4, 3)


def gemv_config(format: str, batch: int, n_out: int | None = None) -> GemvConfig:
  """The launch configuration for a weight format, a number of x rows and (if given) the
  weight's rows: TALL_CONFIGS for n_out >= TALL_ROWS where it has the batch, else
  DEFAULT_CONFIGS, else (a format without tuned entries) UNTUNED_CONFIG.

  Raises ValueError for a name that is not a registry format."""
  get_quantized_format(format)
  if format not in DEFAULT_CONFIGS:
    return GemvConfig(**UNTUNED_CONFIG)

  def bucket(table):
    return next((b for b in sorted(table) if b >= batch), None)

  tall = TALL_CONFIGS.get(format, {}) if n_out is not None and n_out >= TALL_ROWS else {}
  key = bucket(tall)
  if key is not None:
    return GemvConfig(**tall[key])
  table = DEFAULT_CONFIGS[format]
  key = bucket(table)
  return GemvConfig(**table[max(table) if key is None else key])


# ---------------------------------------------------------------------------- per launch

def _next_pow2(n: int) -> int:
  return 1 << max(0, (n - 1).bit_length())


# Split K only while the programs are fewer than the device's SMs (device.sm_count), up to
# about _TARGET_PROGRAMS programs; each split keeps >= _MIN_STEPS_PER_SPLIT K steps.
_TARGET_PROGRAMS = 256
_MIN_STEPS_PER_SPLIT = 4


def _k_splits(cfg: GemvConfig, n_prog: int, n_steps: int, n_sms: int) -> int:
  """Programs per row block along K: cfg.k_splits, or (with fewer than n_sms programs: row
  blocks times batch blocks) the smallest power of two (<= 8) that brings n_prog * splits to
  _TARGET_PROGRAMS while each split keeps >= _MIN_STEPS_PER_SPLIT K steps."""
  if cfg.k_splits:
    return max(1, min(cfg.k_splits, n_steps))
  s = 1
  while (n_prog < n_sms and n_prog * s < _TARGET_PROGRAMS and s < 8
         and n_steps // (2 * s) >= _MIN_STEPS_PER_SPLIT):
    s *= 2
  return s


# Block-scaled K steps span at least this many scale blocks: compiled by Triton 3.6, a
# (16, 2) tile of scale codes (16 rows x 16 words of 8-bit MX weights) gave wrong sums.
_MIN_SCALE_BLOCKS_PER_STEP = 4


def _min_block_k(plan: FormatPlan) -> int:
  """The smallest K step in words: 16 (a tensor-core K) and >= 4 scale blocks."""
  wpb = plan.words_per_block
  return max(16, wpb * _MIN_SCALE_BLOCKS_PER_STEP if plan.block_scaled else 1)


def _effective_config(cfg: GemvConfig, plan: FormatPlan, n_out: int, kw: int) -> GemvConfig:
  """Shrinks blocks that exceed a small problem and raises block_k to _min_block_k (keeps
  powers of two and the block grain)."""
  wpb = plan.words_per_block
  bk = max(_min_block_k(plan), min(cfg.block_k, _next_pow2(kw)))
  br = max(16, min(cfg.block_rows, _next_pow2(n_out)))
  if bk % wpb:
    raise ValueError(f"block_k={bk} is not a multiple of the {wpb} words per scale block")
  return dataclasses.replace(cfg, block_rows=br, block_k=bk)


# Shared memory left out of _fit_shared_memory's budget: its estimate counts the pipelined
# loads only (Triton also stages layout conversions there). 227 KiB (sm_90) - 27 = 200 KiB.
_SMEM_MARGIN = 27 * 1024


def _smem_budget(interpret: bool) -> int:
  """Bytes of shared memory one program's pipelined loads may take on the device."""
  return device.smem_per_block(interpret) - _SMEM_MARGIN


def _fit_shared_memory(cfg: GemvConfig, plan: FormatPlan, n_cols: int, budget: int,
                       x_bytes: int = 2) -> GemvConfig:
  """Halves block_k (then lowers num_stages) until the pipelined loads of one program fit
  in `budget` bytes (_smem_budget).

  Estimate: num_stages * (word tile + x slices of one K step + scale codes); x_bytes per x
  element (2: the prepared operand; fused: x's own itemsize)."""
  pw = plan.per_word

  def need(c):
    step = c.block_rows * c.block_k * 4 + pw * c.block_k * n_cols * x_bytes
    if plan.block_scaled:
      step += c.block_rows * (c.block_k // plan.words_per_block)
    return c.num_stages * step

  floor = max(16, plan.words_per_block)
  while need(cfg) > budget and cfg.block_k > floor:
    cfg = dataclasses.replace(cfg, block_k=cfg.block_k // 2)
  while need(cfg) > budget and cfg.num_stages > 1:
    cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
  return cfg
