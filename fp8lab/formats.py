"""Descriptors of the element formats fp8lab emulates.

One descriptor per format holds every fact about it (layout, bias, extreme values,
special encodings, the matching ml_dtypes dtype); code elsewhere reads these fields
instead of repeating literals. Formats are looked up by name ("e4m3", ...) or by dtype.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["ElementFormat", "get_format", "FORMAT_NAMES", "E4M3", "E5M2", "E2M1", "E8M0",
           "F16", "BF16"]


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
    minifloat=True)
E5M2 = ElementFormat(
    name="e5m2", dtype=np.dtype(ml_dtypes.float8_e5m2), bits=8, exponent_bits=5,
    mantissa_bits=2, bias=15, signed=True, has_inf=True,
    nan_codes=(0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF), nan_code=0x7E, max_code=0x7B, max_finite=57344.0,
    min_normal=2.0**-14, min_subnormal=2.0**-16, emax=15, minifloat=True)
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
                     f"{', '.join(n for n, g in _BY_NAME.items() if g.minifloat)}")
  return f
