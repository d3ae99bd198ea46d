"""Launch configurations of the quantize kernel: QuantizeConfig, the table (data), the fitting.

The table: 16 x 256 tiles and 8 warps (4096 elements per program, 16 per thread: each row
segment loads whole 128-byte lines and stores whole lines of words), except mxfp8 /
mxfp8_e5m2 at 32 x 256 x 8, measured faster for mxfp8 on the H200 at bf16 16384^2 (257.1
against 275.4 us, 2026-12-02), where the same tile was slower for e4m3, mxfp4 and nvfp4.
Measurements: docs/quantize_kernel.md section 3.
"""

from __future__ import annotations

import dataclasses

from fp8lab.formats import get_quantized_format

__all__ = ["QuantizeConfig", "DEFAULT_CONFIGS", "TRANSPOSE_CONFIGS", "quantize_config",
           "fit_config"]


@dataclasses.dataclass(frozen=True)
class QuantizeConfig:
  """Tile of x one program reads (block_rows x block_cols, powers of two), the Triton
  compiler parameters, and the arithmetic.

  float_products: how the products x * scale (per-tensor, blockwise), x * enc_b (nvfp4),
  x * 2^-s (MX, with float_encode) and the Hadamard butterflies are computed. True: the
  float32 multiply / add instructions, IEEE exact where they keep subnormal operands and
  results, as the GPU's mul.rn.f32 does (every layout byte-equal to the golden model on the
  H200 with subnormal inputs, 2026-12-02) and XLA:CPU does not (it flushes them). False:
  integer ops on bit patterns (f32.mul_bits, exact everywhere, several times the
  instructions). None (default): True compiled for a GPU, False in interpret mode.

  float_encode: round to nearest even with float instructions (the GPU's float pipe runs
  twice the integer pipe's rate): e2m1 codes by float32 adds (a + C - C), e4m3 / e5m2 codes
  by the conversion instruction where the GPU has one (sm_89+; integer ops below), both
  exact for every input (encode.e2m1_float_code, encode.fp8_convert_code). Stochastic
  rounding keeps the integer encoder.

  tiles_per_program: how many consecutive tiles one program loops over (a power of two;
  clamped to one that divides the tile count). None (default): 1, but with delayed scaling
  enough that about 1024 programs remain, so that the in-launch fold takes ~2048 same-
  address atomics rather than two per tile."""
  block_rows: int
  block_cols: int
  num_warps: int = 4
  num_stages: int = 1
  float_products: bool | None = None
  float_encode: bool = True
  tiles_per_program: int | None = None

  def __post_init__(self):
    for name in ("block_rows", "block_cols", "num_warps", "num_stages"):
      v = getattr(self, name)
      if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
        raise ValueError(f"QuantizeConfig.{name} must be a positive int, got {v!r}")
    for name in ("block_rows", "block_cols", "num_warps"):
      v = getattr(self, name)
      if v & (v - 1):
        raise ValueError(f"QuantizeConfig.{name} must be a power of two, got {v!r}")
    if self.float_products is not None and not isinstance(self.float_products, bool):
      raise ValueError(f"QuantizeConfig.float_products must be None or a bool, got "
                       f"{self.float_products!r}")
    t = self.tiles_per_program
    if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1 or t & (t - 1)):
      raise ValueError(f"QuantizeConfig.tiles_per_program must be None or a power of two, "
                       f"got {t!r}")
    for name in ("float_encode",):
      if not isinstance(getattr(self, name), bool):
        raise ValueError(f"QuantizeConfig.{name} must be a bool, got "
                         f"{getattr(self, name)!r}")


# format -> tile; rows-only outputs read wide row strips (contiguous stores of words).
DEFAULT_CONFIGS: dict[str, QuantizeConfig] = {
    **{name: QuantizeConfig(16, 256, 8)
       for name in ("e4m3", "e5m2", "mxfp4", "nvfp4", "e4m3_block", "e5m2_block")},
    **{name: QuantizeConfig(32, 256, 8) for name in ("mxfp8", "mxfp8_e5m2")},
}
# With transpose=True both orientations are written: squarer tiles (32 rows: whole MX
# blocks along x's first axis). fit_config raises the rows to the block where one is longer:
# blockwise FP8's transposed 1D blocks (b rows) and 128 x 128 tiles (128 rows, also without
# transpose), so those programs are larger (not measured yet).
TRANSPOSE_CONFIGS: dict[str, QuantizeConfig] = {
    name: QuantizeConfig(32, 128, 8) for name in DEFAULT_CONFIGS
}
UNTUNED_CONFIG = QuantizeConfig(16, 256, 8)


def quantize_config(fmt: str, transpose: bool = False) -> QuantizeConfig:
  """The table's configuration for a quantized format name."""
  name = get_quantized_format(fmt).name
  table = TRANSPOSE_CONFIGS if transpose else DEFAULT_CONFIGS
  return table.get(name, UNTUNED_CONFIG)


def _next_pow2(n: int) -> int:
  return 1 << max(0, (n - 1).bit_length())


def fit_config(cfg: QuantizeConfig, rows: int, cols: int, min_rows: int,
               min_cols: int) -> QuantizeConfig:
  """cfg with tiles no larger than the (power-of-two padded) problem and no smaller than
  the block grain (min_rows x min_cols, powers of two)."""
  br = max(min_rows, min(cfg.block_rows, _next_pow2(rows)))
  bc = max(min_cols, min(cfg.block_cols, _next_pow2(cols)))
  return dataclasses.replace(cfg, block_rows=br, block_cols=bc)
