"""The public strategies of fp8lab.testing: the hard cases occur, the types are right.

Hard cases are recognised here with ml_dtypes' tables, not with the strategies' own lists.
Frequencies are measured by running a @given function for a fixed, derandomized number of
examples and counting what it saw.
"""

import collections

from hypothesis import given, settings
from hypothesis.extra import numpy as hnp
import ml_dtypes
import numpy as np
import pytest

from fp8lab import formats
from fp8lab import testing as fpt

MINIFLOATS = [formats.E4M3, formats.E5M2, formats.E2M1, formats.E8M0]
_name = lambda f: f.name
_COUNTING = settings(max_examples=1000, derandomize=True, database=None, deadline=None)


def draws(strategy, n=None) -> list:
  """Values a @given test receives from `strategy` (deterministic)."""
  seen = []

  @(settings(_COUNTING, max_examples=n) if n else _COUNTING)
  @given(strategy)
  def collect(value):
    seen.append(value)

  collect()
  return seen


def magnitude_grid(f) -> np.ndarray:
  values = np.arange(1 << f.bits, dtype=np.uint8).view(f.dtype).astype(np.float64)
  return np.unique(np.abs(values[np.isfinite(values)]))


def classify_float32(bits: int, f) -> set[str]:
  """The kinds of hard case that the float32 pattern `bits` is, for format f."""
  kinds = set()
  x = np.array([bits], np.uint32).view(np.float32)[0]
  a = abs(float(x))
  sign = bits >> 31
  g = magnitude_grid(f)
  top = f.max_finite + 2.0**(f.emax - f.mantissa_bits)
  ties = np.append((g[:-1] + g[1:]) / 2, (f.max_finite + top) / 2)
  max_bits = int(np.array([f.max_finite], np.float32).view(np.uint32)[0])
  if np.isnan(x):
    kinds.add("nan-neg" if sign else "nan-pos")
    if bits & 0x7FFFFF != 0x400000:
      kinds.add("nan-payload")
  elif np.isinf(x):
    kinds.add("inf")
  elif a == 0:
    kinds.add("zero-neg" if sign else "zero-pos")
  else:
    if a in ties:
      kinds.add("tie")
    if a == (f.max_finite + top) / 2:
      kinds.add("overflow-threshold")
    if bits & 0x7FFFFFFF == max_bits + 1:
      kinds.add("max+ulp")
    if bits & 0x7FFFFFFF == max_bits - 1:
      kinds.add("max-ulp")
    if a in (f.min_subnormal, f.min_subnormal / 2):
      kinds.add("subnormal-edge")
    if a in g:
      kinds.add("exact")
    if not kinds:
      kinds.add("other")
  return kinds


@pytest.mark.parametrize("f", MINIFLOATS, ids=_name)
def test_float32_bits_hit_every_kind_of_hard_case(f):
  seen = draws(fpt.float32_bits(f.name))
  assert all(isinstance(b, int) and 0 <= b < 1 << 32 for b in seen)
  counts = collections.Counter(k for b in seen for k in classify_float32(b, f))
  wanted = ["nan-pos", "nan-neg", "nan-payload", "inf", "zero-pos", "zero-neg", "tie",
            "overflow-threshold", "max+ulp", "max-ulp", "subnormal-edge", "exact", "other"]
  missing = [k for k in wanted if counts[k] == 0]
  assert not missing, (missing, counts)
  # Both signs of finite hard cases.
  assert any(b >> 31 and "tie" in classify_float32(b, f) for b in seen)


@pytest.mark.parametrize("strategy,dtype", [(fpt.bfloat16_bits, ml_dtypes.bfloat16),
                                            (fpt.float16_bits, np.float16)],
                         ids=["bf16", "f16"])
def test_16bit_bits_hit_ties_and_specials(strategy, dtype):
  f = formats.E4M3
  seen = draws(strategy("e4m3"), 500)
  assert all(isinstance(b, int) and 0 <= b < 1 << 16 for b in seen)
  with np.errstate(invalid="ignore"):
    x = np.array(seen, np.uint16).view(dtype).astype(np.float64)
  g = magnitude_grid(f)
  ties = (g[:-1] + g[1:]) / 2
  assert np.isin(np.abs(x), ties).any()
  assert np.isnan(x).any() and np.isinf(x).any() and (x == 0).any()
  assert (np.abs(x) == 464.0).any()                      # e4m3's overflow threshold


def test_hard_bit_patterns_contain_the_documented_edges():
  hard = set(int(b) for b in fpt.hard_bit_patterns(np.float32))
  as_bits = lambda v: int(np.array([v], np.float32).view(np.uint32)[0])
  for v in [464.0, 448.0, 61440.0, 57344.0, 7.0, 6.0, 0.25, 1.75, 2.0**-10, 2.0**-17,
            1.5 * 2.0**127, 1.5, 0.0, np.inf]:
    assert as_bits(v) in hard and as_bits(-v) in hard, v
  for b in [as_bits(448.0) + 1, as_bits(464.0) - 1, as_bits(464.0) + 1, 0x7FC00000,
            0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x00000001, 0x807FFFFF]:
    assert b in hard, hex(b)
  assert fpt.hard_bit_patterns(np.float32).dtype == np.uint32
  assert fpt.hard_bit_patterns(ml_dtypes.bfloat16).dtype == np.uint16
  # float16 cannot hold e8m0's range; what it keeps is exact.
  h16 = fpt.hard_bit_patterns(np.float16, "e8m0").view(np.float16)
  assert np.isfinite(h16).sum() > 0


@pytest.mark.parametrize("dtype,shape", [(np.float32, (3, 4)), (ml_dtypes.bfloat16, (7,)),
                                         (np.float16, (2, 1, 5))])
def test_bit_pattern_arrays_dtype_and_shape(dtype, shape):
  for x in draws(fpt.bit_pattern_arrays(dtype, shape), 30):
    assert x.dtype == np.dtype(dtype) and x.shape == shape


def test_bit_pattern_arrays_compose_with_shape_strategies():
  shapes = set()
  for x in draws(fpt.bit_pattern_arrays(np.float32, hnp.array_shapes(max_dims=3),
                                        formats=("e5m2", "e2m1")), 50):
    assert x.dtype == np.float32
    shapes.add(x.shape)
  assert len(shapes) > 3
  # NaN payloads survive: arrays are reinterpreted bits, not converted floats.
  payloads = {int(b) for x in draws(fpt.bit_pattern_arrays(np.float32, 16), 100)
              for b in x.view(np.uint32).ravel() if np.isnan(x.view(np.float32)).any()}
  assert any(b & 0x7FFFFFFF not in (0x7FC00000,) and (b & 0x7F800000) == 0x7F800000
             and b & 0x7FFFFF for b in payloads)


def test_floats_for():
  seen = draws(fpt.floats_for("e4m3", ml_dtypes.bfloat16), 200)
  assert all(v.dtype == np.dtype(ml_dtypes.bfloat16) and v.shape == () for v in seen)
  assert any(abs(float(v)) == 464.0 for v in seen)


@pytest.mark.parametrize("f", MINIFLOATS + [formats.F16], ids=_name)
def test_codes(f):
  seen = draws(fpt.codes(f.name), 300)
  assert all(0 <= c < 1 << f.bits for c in seen)
  dtype = np.uint16 if f.bits == 16 else np.uint8
  no_nan = draws(fpt.codes(f.name, allow_nan=False), 300)
  values = np.array(no_nan, dtype).view(f.dtype).astype(np.float32)
  assert not np.isnan(values).any()
  assert len(set(no_nan)) > min(50, (1 << f.bits) // 2)


def test_codes_include_nan_by_default():
  seen = draws(fpt.codes("e4m3"), 1000)
  assert {0x7F, 0xFF} & set(seen)
  assert set(range(16)) == set(draws(fpt.codes("e2m1"), 300))


@pytest.mark.parametrize("fmt,dtype", [("e4m3", np.uint8), ("e2m1", np.uint8),
                                       ("bf16", np.uint16)])
def test_code_arrays(fmt, dtype):
  f = formats.get_format(fmt)
  for a in draws(fpt.code_arrays(fmt, (4, 9), allow_nan=False), 30):
    assert a.dtype == dtype and a.shape == (4, 9)
    assert int(a.max(initial=0)) < 1 << f.bits
    assert not np.isnan(a.view(f.dtype).astype(np.float32)).any()


@pytest.mark.parametrize("call", [
    lambda: fpt.bits_for(np.float64), lambda: fpt.float32_bits("e9m9"),
    lambda: fpt.float32_bits(("e4m3", "f16")), lambda: fpt.bit_pattern_arrays(np.int32, 3),
    lambda: fpt.codes("e4m4"),
], ids=["float64", "unknown-format", "storage-format", "int32-array", "codes-unknown"])
def test_bad_arguments(call):
  with pytest.raises(ValueError):
    call()


def test_public_names():
  import fp8lab.testing
  for name in fp8lab.testing.__all__:
    assert hasattr(fp8lab.testing, name), name
  assert "Example" in fp8lab.testing.__doc__ or "example" in fp8lab.testing.__doc__
