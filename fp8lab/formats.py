"""The registry of fp8lab's formats: element formats and the quantized formats built on them.

One descriptor per element format holds every fact about it (layout, bias, extreme values,
special encodings, the matching ml_dtypes dtype), and one record per quantized format says
how an array of that format is made (element format, block shapes, scale format, tensor
scale, packing). quantize / dequantize, the kernels' plans, the hypothesis strategies, the
tests and the benchmarks all read these records instead of repeating literals: adding a
format is one record here, its golden-model rules and its tests. Element formats are looked
up by name ("e4m3", ...) or by dtype, quantized formats by name ("mxfp4", ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["ElementFormat", "get_format", "FORMAT_NAMES", "E4M3", "E5M2", "E2M1", "E8M0",
           "F16", "BF16", "QuantizedFormat", "QUANTIZED", "QUANTIZED_FORMATS",
           "get_quantized_format", "SCALINGS", "LAYOUTS", "MX_SCALE_MODES", "BLOCK_SCALE_MODES"]


@dataclasses.dataclass(frozen=True)
class ElementFormat:
  """Bit layout and special values of one element format.

  Attributes:
    name: canonical name ("e4m3", "e5m2", "e2m1", "e8m0", "f16", "bf16").
    dtype: the matching numpy / ml_dtypes dtype.
    bits: width of one code (4, 8 or 16).
    exponent_bits, mantissa_bits: field widths.
    bias: exponent bias.
    signed: whether the format has a sign bit (e8m0 does not).
    has_inf: whether an infinity encoding exists (e5m2, f16, bf16).
    nan_codes: every code that decodes to NaN (magnitude codes ORed with the sign bit);
      listed for the minifloats only, empty for the storage formats f16/bf16.
    nan_code: the magnitude code a NaN input encodes to (ml_dtypes' quiet NaN); None for
      e2m1, which has no NaN (see numerics/codec.py for what ml_dtypes does instead).
    max_code: magnitude code of the largest finite value.
    max_finite, min_normal, min_subnormal: as floats.
    emax: unbiased exponent of the largest normal (OCP MX spec's emax).
    minifloat: True for the formats fp8lab's own codec encodes (e4m3, e5m2, e2m1, e8m0);
      f16 and bf16 are IEEE-style storage formats that only take part in packing.
    f16x2_convert: whether NVIDIA GPUs of compute capability >= 8.9 convert two codes of
      this format to float16 in one instruction (PTX cvt.rn.f16x2.e4m3x2 / .e5m2x2); the
      kernels' "native" decode exists exactly for these formats.
  """
  name: str
  dtype: np.dtype
  bits: int
  exponent_bits: int
  mantissa_bits: int
  bias: int
  signed: bool
  has_inf: bool
  nan_codes: tuple[int, ...]
  nan_code: int | None
  max_code: int
  max_finite: float
  min_normal: float
  min_subnormal: float
  emax: int
  minifloat: bool
  f16x2_convert: bool = False

  @property
  def sign_bit(self) -> int:
    """Value of the sign bit in a code (0 for unsigned formats)."""
    return 1 << (self.bits - 1) if self.signed else 0

  @property
  def per_word(self) -> int:
    """Number of codes packed into one uint32 word."""
    return 32 // self.bits

  @property
  def overflow_code(self) -> int:
    """Magnitude code of a non-saturating overflow: Inf if the format has one, else NaN,
    else (e2m1) the largest finite value, as ml_dtypes' casts do."""
    if self.has_inf:
      return self.max_code + 1
    if self.nan_codes:
      return self.nan_code
    return self.max_code

  @property
  def emin(self) -> int:
    """Unbiased exponent of the smallest normal.

    With mantissa bits, exponent field 0 holds the subnormals and the smallest normal has
    field 1 (1 - bias); e8m0 has no mantissa and no subnormals, so field 0 is 2^-bias.
    """
    return 1 - self.bias if self.mantissa_bits else -self.bias

  def __repr__(self) -> str:
    return f"ElementFormat({self.name!r})"


E4M3 = ElementFormat(
    name="e4m3", dtype=np.dtype(ml_dtypes.float8_e4m3fn), bits=8, exponent_bits=4,
    mantissa_bits=3, bias=7, signed=True, has_inf=False, nan_codes=(0x7F, 0xFF),
    nan_code=0x7F, max_code=0x7E, max_finite=448.0, min_normal=2.0**-6, min_subnormal=2.0**-9, emax=8,
    minifloat=True, f16x2_convert=True)
E5M2 = ElementFormat(
    name="e5m2", dtype=np.dtype(ml_dtypes.float8_e5m2), bits=8, exponent_bits=5,
    mantissa_bits=2, bias=15, signed=True, has_inf=True,
    nan_codes=(0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF), nan_code=0x7E, max_code=0x7B, max_finite=57344.0,
    min_normal=2.0**-14, min_subnormal=2.0**-16, emax=15, minifloat=True, f16x2_convert=True)
E2M1 = ElementFormat(
    name="e2m1", dtype=np.dtype(ml_dtypes.float4_e2m1fn), bits=4, exponent_bits=2,
    mantissa_bits=1, bias=1, signed=True, has_inf=False, nan_codes=(), nan_code=None, max_code=0x7,
    max_finite=6.0, min_normal=1.0, min_subnormal=0.5, emax=2, minifloat=True)
E8M0 = ElementFormat(
    name="e8m0", dtype=np.dtype(ml_dtypes.float8_e8m0fnu), bits=8, exponent_bits=8,
    mantissa_bits=0, bias=127, signed=False, has_inf=False, nan_codes=(0xFF,),
    nan_code=0xFF, max_code=0xFE, max_finite=2.0**127, min_normal=2.0**-127, min_subnormal=2.0**-127,
    emax=127, minifloat=True)
F16 = ElementFormat(
    name="f16", dtype=np.dtype(np.float16), bits=16, exponent_bits=5, mantissa_bits=10,
    bias=15, signed=True, has_inf=True, nan_codes=(), nan_code=0x7E00, max_code=0x7BFF, max_finite=65504.0,
    min_normal=2.0**-14, min_subnormal=2.0**-24, emax=15, minifloat=False)
BF16 = ElementFormat(
    name="bf16", dtype=np.dtype(ml_dtypes.bfloat16), bits=16, exponent_bits=8,
    mantissa_bits=7, bias=127, signed=True, has_inf=True, nan_codes=(), nan_code=0x7FC0, max_code=0x7F7F,
    max_finite=float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), min_normal=2.0**-126,
    min_subnormal=2.0**-133, emax=127, minifloat=False)

_BY_NAME = {f.name: f for f in (E4M3, E5M2, E2M1, E8M0, F16, BF16)}
_ALIASES = {
    "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "float4_e2m1fn": "e2m1",
    "float8_e8m0fnu": "e8m0", "float16": "f16", "bfloat16": "bf16",
}
FORMAT_NAMES = tuple(_BY_NAME)


def get_format(fmt: Any) -> ElementFormat:
  """Returns the descriptor for a name ("e4m3", "float8_e4m3fn", ...), a dtype or a descriptor.

  Raises:
    ValueError: for an unknown name or dtype; the message lists the valid names.
  """
  if isinstance(fmt, ElementFormat):
    return fmt
  if isinstance(fmt, str):
    key = _ALIASES.get(fmt, fmt)
    if key in _BY_NAME:
      return _BY_NAME[key]
    raise ValueError(f"unknown element format {fmt!r}; valid names: {', '.join(FORMAT_NAMES)}")
  try:
    dt = np.dtype(fmt)
  except TypeError:
    raise ValueError(
        f"unknown element format {fmt!r}; valid names: {', '.join(FORMAT_NAMES)}") from None
  for f in _BY_NAME.values():
    if f.dtype == dt:
      return f
  raise ValueError(f"no element format for dtype {dt}; valid names: {', '.join(FORMAT_NAMES)}")


def get_minifloat(fmt: Any) -> ElementFormat:
  """Like get_format, but only for the formats the codec encodes (not f16/bf16)."""
  f = get_format(fmt)
  if not f.minifloat:
    raise ValueError(f"format {f.name!r} is a storage format; encode/decode take one of "
                     f"{', '.join(get_minifloat_names())}")
  return f


def get_minifloat_names() -> tuple[str, ...]:
  """Names of the formats the codec encodes (every ElementFormat with minifloat=True)."""
  return tuple(n for n, g in _BY_NAME.items() if g.minifloat)


# ----------------------------------------------------------------------------------------
# Quantized formats.

# How a quantized format scales its elements (docs/numerics.md):
#   "tensor": one float32 scale for the whole tensor (current or delayed scaling);
#   "mx":     one E8M0 power-of-two scale per block (OCP MX v1.0), no tensor scale;
#   "nvfp4":  one E4M3 scale per block and a float32 tensor scale (NVIDIA's NVFP4 order);
#   "block":  one float32 scale per block or tile (blockwise FP8, docs/numerics.md section 8b);
#   "none":   no scale: a plain cast of each element (f16 / bf16 storage).
SCALINGS = ("tensor", "mx", "nvfp4", "block", "none")


@dataclasses.dataclass(frozen=True)
class QuantizedFormat:
  """One quantized format: every static fact about the arrays `fp8lab.quantize` makes.

  Attributes:
    name: the `fmt` argument of quantize ("mxfp4", ...).
    element: the ElementFormat of the packed element codes.
    scaling: one of SCALINGS.
    block_shapes: the block shapes quantize accepts, the default first: (n,) blocks n
      consecutive elements along the quantized axis, (r, c) tiles the last two axes. Empty
      for formats without block scales.
    scale_format: the ElementFormat of the block scale codes (E8M0, E4M3); None without
      block scales, and for scaling "block", whose block scales are float32 values.
    tensor_scale: whether a float32 tensor scale (a dequantization factor) is stored.
    scale_modes: the block-scale rules quantize's `scale_mode` selects, the default first
      (numerics/scales.py: MX_SCALE_MODES, BLOCK_SCALE_MODES); empty for formats without a
      choice, which take scale_mode=None only.
    stochastic_rounding: whether rounding="stochastic" applies (not to plain casts).
    any_block_length: whether quantize also takes every 1D block (b,) with b >= 1, beyond
      block_shapes (blockwise FP8: a block can be a head dimension, 64, 80, 96, ...).

  Packing (docs/numerics.md section 3) follows from the element format: `per_word` codes of
  `element.bits` bits per uint32 word, little-endian within the word.
  """
  name: str
  element: ElementFormat
  scaling: str
  block_shapes: tuple[tuple[int, ...], ...] = ()
  scale_format: ElementFormat | None = None
  tensor_scale: bool = False
  scale_modes: tuple[str, ...] = ()
  stochastic_rounding: bool = True
  any_block_length: bool = False

  def __post_init__(self):
    if self.scaling not in SCALINGS:
      raise ValueError(f"scaling must be one of {SCALINGS}, got {self.scaling!r}")
    # Coded block scales need a scale format; float32 block scales ("block") have none.
    coded = bool(self.block_shapes) and self.scaling != "block"
    if coded != (self.scale_format is not None):
      raise ValueError(f"{self.name}: block shapes and a scale format go together (except "
                       "for the float32 scales of scaling 'block')")
    if self.scaling == "block" and not self.block_shapes:
      raise ValueError(f"{self.name}: scaling 'block' needs block shapes")
    if self.any_block_length and not self.block_shapes:
      raise ValueError(f"{self.name}: any_block_length needs block scales")

  @property
  def block_shape(self) -> tuple[int, ...] | None:
    """The default block shape (None without block scales)."""
    return self.block_shapes[0] if self.block_shapes else None

  @property
  def block_scaled(self) -> bool:
    """Whether arrays of this format carry block scales (QuantizedArray.scales)."""
    return bool(self.block_shapes)

  @property
  def scale_dtype(self) -> np.dtype | None:
    """dtype of QuantizedArray.scales: uint8 codes of scale_format, float32 for scaling
    "block", None without block scales."""
    if not self.block_shapes:
      return None
    return np.dtype(np.uint8) if self.scale_format is not None else np.dtype(np.float32)

  def allows_block_shape(self, block_shape: tuple[int, ...]) -> bool:
    """Whether quantize takes `block_shape` (a tuple of ints) for this format."""
    if block_shape in self.block_shapes:
      return True
    return self.any_block_length and len(block_shape) == 1 and block_shape[0] >= 1

  def allowed_block_shapes(self) -> str:
    """The block shapes quantize takes, in words (for error messages)."""
    if not self.block_shapes:
      return "None (no block scales)"
    shown = " or ".join(map(str, self.block_shapes))
    return shown + (" or any (b,) with b >= 1" if self.any_block_length else "")

  @property
  def per_word(self) -> int:
    """Element codes per packed uint32 word."""
    return self.element.per_word

  def __repr__(self) -> str:
    return f"QuantizedFormat({self.name!r})"


# The MX shared-exponent rules (numerics/scales.py implements them; "floor" is the spec's).
MX_SCALE_MODES = ("floor", "ceil", "even", "rceil")
# Blockwise FP8 scale rules (docs/numerics.md section 8b): "exact" fl(fp8_max / amax), "pow2"
# that rounded down to a power of two (Transformer Engine's force_pow_2_scales).
BLOCK_SCALE_MODES = ("exact", "pow2")
_QUANTIZED = (
    QuantizedFormat("e4m3", E4M3, "tensor", tensor_scale=True),
    QuantizedFormat("e5m2", E5M2, "tensor", tensor_scale=True),
    QuantizedFormat("mxfp8", E4M3, "mx", ((32,),), E8M0, scale_modes=MX_SCALE_MODES),
    QuantizedFormat("mxfp8_e5m2", E5M2, "mx", ((32,),), E8M0, scale_modes=MX_SCALE_MODES),
    QuantizedFormat("mxfp4", E2M1, "mx", ((32,),), E8M0, scale_modes=MX_SCALE_MODES),
    QuantizedFormat("nvfp4", E2M1, "nvfp4", ((16,), (16, 16)), E4M3, tensor_scale=True),
    QuantizedFormat("e4m3_block", E4M3, "block", ((128,), (128, 128)),
                    scale_modes=BLOCK_SCALE_MODES, any_block_length=True),
    QuantizedFormat("e5m2_block", E5M2, "block", ((128,), (128, 128)),
                    scale_modes=BLOCK_SCALE_MODES, any_block_length=True),
    QuantizedFormat("f16", F16, "none", stochastic_rounding=False),
    QuantizedFormat("bf16", BF16, "none", stochastic_rounding=False),
)
QUANTIZED: dict[str, QuantizedFormat] = {q.name: q for q in _QUANTIZED}
QUANTIZED_FORMATS = tuple(QUANTIZED)


def get_quantized_format(fmt: Any) -> QuantizedFormat:
  """The record of a quantized format name (or the record itself).

  Raises:
    ValueError: for an unknown name; the message lists the valid names.
  """
  if isinstance(fmt, QuantizedFormat):
    return fmt
  if isinstance(fmt, str) and fmt in QUANTIZED:
    return QUANTIZED[fmt]
  raise ValueError(f"unknown quantized format {fmt!r}; valid names: "
                   f"{', '.join(QUANTIZED_FORMATS)}")


# Named layouts: a quantized format with a non-default block shape, under one name, for the
# tests' and benchmarks' grids ("nvfp4_2d": Transformer Engine's 16x16 weight tiles;
# "e4m3_block_2d": the 128x128 weight tiles of DeepSeek-V3 / Float8BlockScaling).
# name -> (quantized format, block_shape or None for its default).
LAYOUTS: dict[str, tuple[str, tuple[int, ...] | None]] = {
    **{q.name: (q.name, None) for q in _QUANTIZED},
    "nvfp4_2d": ("nvfp4", (16, 16)),
    "e4m3_block_2d": ("e4m3_block", (128, 128)),
}
