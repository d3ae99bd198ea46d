"""The format descriptors against ml_dtypes' own description of each type."""

import ml_dtypes
import numpy as np
import pytest

import fp8lab
from fp8lab import formats

ALL = [formats.E4M3, formats.E5M2, formats.E2M1, formats.E8M0, formats.F16, formats.BF16]
MINIFLOATS = [f for f in ALL if f.minifloat]


def _values(f):
  """float64 value of every code of f, decoded by ml_dtypes."""
  codes = np.arange(1 << f.bits, dtype=np.uint16 if f.bits == 16 else np.uint8)
  return codes.view(f.dtype).astype(np.float64)


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
def test_descriptor_matches_finfo(f):
  fi = ml_dtypes.finfo(f.dtype)
  assert f.bits == fi.bits
  assert f.mantissa_bits == fi.nmant
  assert f.exponent_bits == fi.nexp
  assert f.max_finite == float(fi.max)
  assert f.min_normal == float(fi.smallest_normal)
  assert f.min_subnormal == float(fi.smallest_subnormal)
  assert f.emax == fi.maxexp - 1
  # ml_dtypes' minexp is the exponent of the smallest normal; e8m0 has no subnormals, so its
  # all-zero exponent field is already a normal value, 2^-bias.
  assert f.bias == (-fi.minexp if f.name == "e8m0" else 1 - fi.minexp)


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
def test_emin_is_exponent_of_smallest_normal(f):
  assert 2.0 ** f.emin == f.min_normal


@pytest.mark.parametrize("f", MINIFLOATS, ids=lambda f: f.name)
def test_special_codes_match_ml_dtypes(f):
  values = _values(f)
  codes = np.arange(1 << f.bits)
  assert tuple(codes[np.isnan(values)]) == tuple(sorted(f.nan_codes))
  assert f.has_inf == bool(np.isinf(values).any())
  assert values[f.max_code] == f.max_finite
  assert f.sign_bit == (0x80 if f.bits == 8 and f.signed else 0x8 if f.signed else 0)
  if f.signed:
    assert values[f.max_code | f.sign_bit] == -f.max_finite
  if f.nan_code is not None:
    nan_cast = np.array([np.nan], np.float32).astype(f.dtype).view(np.uint8)
    assert nan_cast[0] == f.nan_code
  # Non-saturating overflow: what ml_dtypes gives for twice the largest finite value.
  with np.errstate(over="ignore", invalid="ignore"):
    over = np.array([2 * f.max_finite], np.float32).astype(f.dtype).view(np.uint8)[0]
  assert over == f.overflow_code
  assert f.per_word * f.bits == 32


def test_16bit_storage_formats():
  assert formats.F16.max_code == np.float16(65504).view(np.uint16)
  assert formats.BF16.max_code == np.array(
      ml_dtypes.finfo(ml_dtypes.bfloat16).max, ml_dtypes.bfloat16).view(np.uint16)
  assert formats.F16.per_word == formats.BF16.per_word == 2
  assert not formats.F16.minifloat and not formats.BF16.minifloat


@pytest.mark.parametrize("name,alias,dtype", [
    ("e4m3", "float8_e4m3fn", ml_dtypes.float8_e4m3fn),
    ("e5m2", "float8_e5m2", ml_dtypes.float8_e5m2),
    ("e2m1", "float4_e2m1fn", ml_dtypes.float4_e2m1fn),
    ("e8m0", "float8_e8m0fnu", ml_dtypes.float8_e8m0fnu),
    ("f16", "float16", np.float16),
    ("bf16", "bfloat16", ml_dtypes.bfloat16),
])
def test_lookup(name, alias, dtype):
  f = fp8lab.get_format(name)
  assert f.name == name
  assert fp8lab.get_format(alias) is f
  assert fp8lab.get_format(dtype) is f
  assert fp8lab.get_format(np.dtype(dtype)) is f
  assert fp8lab.get_format(f) is f
  assert f.dtype == np.dtype(dtype)
  assert name in fp8lab.FORMAT_NAMES


def test_format_names():
  assert set(fp8lab.FORMAT_NAMES) == {"e4m3", "e5m2", "e2m1", "e8m0", "f16", "bf16"}


@pytest.mark.parametrize("bad", ["e3m4", "E4M3", "", "float8_e4m3fnuz", np.int32, np.float32,
                                 ml_dtypes.float8_e4m3fnuz, 3.5, object()])
def test_unknown_format_lists_valid_names(bad):
  with pytest.raises(ValueError) as info:
    fp8lab.get_format(bad)
  for name in fp8lab.FORMAT_NAMES:
    assert name in str(info.value)


def test_storage_formats_are_not_minifloats():
  with pytest.raises(ValueError, match="e4m3"):
    formats.get_minifloat("f16")
  assert formats.get_minifloat("e2m1") is formats.E2M1
