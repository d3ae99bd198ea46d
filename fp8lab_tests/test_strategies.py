"""The public strategies of fp8lab.testing: the hard cases occur, the types are right.

Hard cases are recognised here with ml_dtypes' tables, not with the strategies' own lists.
Frequencies are measured by running a @given function for a fixed, derandomized number of
examples and counting what it saw.
"""

import collections
import re

from hypothesis import given, settings, strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.extra import numpy as hnp
import ml_dtypes
import numpy as np
import pytest

from fp8lab import formats
from fp8lab import testing as fpt
from fp8lab.testing import quantized as fqt

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


# Bad arguments of every public strategy, one or more of each kind: (id, call, message).
# The message (a regex) names what is wrong, so that the case fails if some other check, or
# none, raises.
_BAD = [
    # elements: bits_for and its three dtype shorthands
    ("float64", lambda: fpt.bits_for(np.float64), "dtype"),
    ("bits-dtype-name", lambda: fpt.bits_for("float8"), "dtype"),
    ("bits-dtype-type", lambda: fpt.bits_for(3.5), "dtype"),
    ("unknown-format", lambda: fpt.float32_bits("e9m9"), "unknown element format 'e9m9'"),
    ("storage-format", lambda: fpt.float32_bits(("e4m3", "f16")), "not 'f16'"),
    ("bits-formats-empty", lambda: fpt.bits_for(np.float32, ()), "formats is empty"),
    ("bits-formats-type", lambda: fpt.bits_for(np.float32, 5), "formats must be"),
    ("bits-formats-entry", lambda: fpt.bits_for(np.float32, ("e4m3", 2.5)), "formats"),
    ("bf16-unknown", lambda: fpt.bfloat16_bits("e4m4"), "unknown element format"),
    ("bf16-empty", lambda: fpt.bfloat16_bits([]), "formats is empty"),
    ("f16-storage", lambda: fpt.float16_bits("bf16"), "not 'bf16'"),
    ("f16-type", lambda: fpt.float16_bits(7), "formats must be"),
    # floats_for
    ("floats-unknown", lambda: fpt.floats_for("e3m3"), "unknown element format"),
    ("floats-several", lambda: fpt.floats_for(("e4m3", "e5m2")), "one format"),
    ("floats-storage", lambda: fpt.floats_for("f16"), "not 'f16'"),
    ("floats-dtype", lambda: fpt.floats_for("e4m3", np.int16), "dtype"),
    # bit_pattern_arrays
    ("int32-array", lambda: fpt.bit_pattern_arrays(np.int32, 3), "dtype"),
    ("arrays-negative", lambda: fpt.bit_pattern_arrays(np.float32, -1), "shape"),
    ("arrays-shape-entry", lambda: fpt.bit_pattern_arrays(np.float32, (2, -3)), "shape"),
    ("arrays-shape-type", lambda: fpt.bit_pattern_arrays(np.float32, "ab"), "shape"),
    ("arrays-shape-float", lambda: fpt.bit_pattern_arrays(np.float32, (2.0, 3)), "shape"),
    ("arrays-drawn-shape", lambda: fpt.bit_pattern_arrays(np.float32, st.just((2, -1))),
     "shape"),
    ("arrays-format", lambda: fpt.bit_pattern_arrays(formats="e4m4"), "unknown element"),
    ("arrays-formats-empty", lambda: fpt.bit_pattern_arrays(formats=()), "formats is empty"),
    # codes, code_arrays
    ("codes-unknown", lambda: fpt.codes("e4m4"), "unknown element format"),
    ("codes-type", lambda: fpt.codes(4.5), "unknown element format"),
    ("codes-allow-nan", lambda: fpt.codes("e4m3", allow_nan=1), "allow_nan"),
    ("code-arrays-unknown", lambda: fpt.code_arrays("mxfp4", 4), "unknown element format"),
    ("code-arrays-shape", lambda: fpt.code_arrays("e4m3", (4, -1)), "shape"),
    ("code-arrays-shape-type", lambda: fpt.code_arrays("e4m3", None), "shape"),
    ("code-arrays-allow-nan", lambda: fpt.code_arrays("e2m1", 4, allow_nan="no"),
     "allow_nan"),
    # quantize_shapes
    ("shapes-unknown", lambda: fqt.quantize_shapes("mxfp5"), "unknown quantized format"),
    ("shapes-format-type", lambda: fqt.quantize_shapes(4), "unknown quantized format"),
    ("shapes-element-name", lambda: fqt.quantize_shapes("e2m1"), "unknown quantized format"),
    ("max-blocks-0", lambda: fqt.quantize_shapes(max_blocks=0), "max_blocks"),
    ("max-blocks-float", lambda: fqt.quantize_shapes(max_blocks=2.0), "max_blocks"),
    ("max-blocks-bool", lambda: fqt.quantize_shapes(max_blocks=True), "max_blocks"),
    ("max-rank-0", lambda: fqt.quantize_shapes(max_rank=0), "max_rank"),
    ("max-rank-tiles", lambda: fqt.quantize_shapes("nvfp4", block_shape=(16, 16),
                                                   max_rank=1), "max_rank"),
    ("max-other-0", lambda: fqt.quantize_shapes(max_other=0), "max_other"),
    ("shapes-block-shape", lambda: fqt.quantize_shapes("mxfp4", block_shape=(16,)),
     r"block_shape=\(16,\) is not valid for 'mxfp4'"),
    ("shapes-block-per-tensor", lambda: fqt.quantize_shapes("e4m3", block_shape=(32,)),
     "no block scales"),
    ("shapes-block-type", lambda: fqt.quantize_shapes("nvfp4", block_shape="16"),
     "block_shape"),
    # block_arrays
    ("blocks-unknown", lambda: fqt.block_arrays("fp4"), "unknown quantized format"),
    ("blocks-dtype", lambda: fqt.block_arrays(dtype=np.float64), "dtype"),
    ("blocks-dtype-name", lambda: fqt.block_arrays(dtype="float8_e4m3fn"), "dtype"),
    ("blocks-shape-empty", lambda: fqt.block_arrays(shape=()), "shape"),
    ("blocks-shape-negative", lambda: fqt.block_arrays(shape=(4, -1)), "shape"),
    ("blocks-shape-type", lambda: fqt.block_arrays(shape="64"), "shape"),
    ("blocks-axis", lambda: fqt.block_arrays("mxfp4", (4, 64), 2), "axis=2"),
    ("blocks-axis-negative", lambda: fqt.block_arrays("mxfp4", (4, 64), -3), "axis=-3"),
    ("blocks-axis-type", lambda: fqt.block_arrays("mxfp4", (4, 64), 1.0), "axis"),
    ("blocks-block-shape", lambda: fqt.block_arrays("nvfp4", block_shape=(32,)),
     "not valid for 'nvfp4'"),
    ("blocks-tiles-rank", lambda: fqt.block_arrays("nvfp4", (64,), block_shape=(16, 16)),
     "tiles the last two axes"),
    ("blocks-tiles-axis", lambda: fqt.block_arrays("nvfp4", (2, 16, 16), 0,
                                                   block_shape=(16, 16)), "last two axes"),
    ("blocks-allow-nan", lambda: fqt.block_arrays(allow_nan=None), "allow_nan"),
    ("blocks-allow-inf", lambda: fqt.block_arrays(allow_inf=0), "allow_inf"),
    ("blocks-exponents", lambda: fqt.block_arrays(min_exponent=5, max_exponent=4),
     "max_exponent=4 < min_exponent=5"),
    ("blocks-min-exponent", lambda: fqt.block_arrays(min_exponent=-150), "min_exponent"),
    ("blocks-max-exponent", lambda: fqt.block_arrays(max_exponent=128), "max_exponent"),
    ("blocks-exponent-type", lambda: fqt.block_arrays(min_exponent=-1.5), "min_exponent"),
    # quantize_inputs
    ("inputs-unknown", lambda: fqt.quantize_inputs(("mxfp4", "nvfp8")),
     "unknown quantized format 'nvfp8'"),
    ("inputs-layout", lambda: fqt.quantize_inputs(("nvfp4_2d",)), "unknown quantized"),
    ("inputs-formats-empty", lambda: fqt.quantize_inputs(()), "formats is empty"),
    ("inputs-formats-type", lambda: fqt.quantize_inputs(3), "formats must be"),
    ("inputs-mode", lambda: fqt.quantize_inputs(scale_modes=("floor", "up")), "'up'"),
    ("inputs-mode-unknown", lambda: fqt.quantize_inputs(("nvfp4",), scale_modes=("up",)),
     "'up'"),
    ("inputs-modes-empty", lambda: fqt.quantize_inputs(scale_modes=[]), "scale_modes is empty"),
    ("inputs-mode-type", lambda: fqt.quantize_inputs(scale_modes=(1,)), "scale_modes"),
    ("inputs-dtypes", lambda: fqt.quantize_inputs(dtypes=(np.float32, np.int8)), "dtypes"),
    ("inputs-dtypes-empty", lambda: fqt.quantize_inputs(dtypes=()), "dtypes is empty"),
    ("inputs-shapes-empty", lambda: fqt.quantize_inputs(shapes=[]), "shapes is empty"),
    ("inputs-shapes-pair", lambda: fqt.quantize_inputs(shapes=[((4, 64),)]), "pairs"),
    ("inputs-shapes-axis", lambda: fqt.quantize_inputs(shapes=[((4, 64), 2)]), "axis=2"),
    ("inputs-shapes-shape", lambda: fqt.quantize_inputs(shapes=[((-4,), 0)]), "shape"),
    ("inputs-allow-nan", lambda: fqt.quantize_inputs(allow_nan="yes"), "allow_nan"),
    ("inputs-allow-inf", lambda: fqt.quantize_inputs(allow_inf=None), "allow_inf"),
    ("inputs-tiles", lambda: fqt.quantize_inputs(tiles=1), "tiles"),
    ("inputs-kwargs", lambda: fqt.quantize_inputs(block_shape=(16,)), "block_shape"),
    ("inputs-exponents", lambda: fqt.quantize_inputs(min_exponent=10, max_exponent=0),
     "max_exponent=0 < min_exponent=10"),
    ("inputs-max-exponent", lambda: fqt.quantize_inputs(max_exponent=200), "max_exponent"),
    # quantized_arrays
    ("qarrays-unknown", lambda: fqt.quantized_arrays("mxfp16"), "unknown quantized format"),
    ("qarrays-block-shape", lambda: fqt.quantized_arrays("mxfp8", block_shape=(16,)),
     "not valid for 'mxfp8'"),
    ("qarrays-block-per-tensor", lambda: fqt.quantized_arrays("f16", block_shape=(32,)),
     "no block scales"),
    ("qarrays-axis-alone", lambda: fqt.quantized_arrays("mxfp4", axis=0), "without a shape"),
    ("qarrays-axis", lambda: fqt.quantized_arrays("mxfp4", (3, 40), 2), "axis=2"),
    ("qarrays-axis-type", lambda: fqt.quantized_arrays("mxfp4", (3, 40), "1"), "axis"),
    ("qarrays-shape", lambda: fqt.quantized_arrays("mxfp4", (3, -40), 1), "shape"),
    ("qarrays-shape-empty", lambda: fqt.quantized_arrays("e4m3", ()), "shape"),
    ("qarrays-tiles", lambda: fqt.quantized_arrays("nvfp4", (2, 16, 16), 0,
                                                   block_shape=(16, 16)), "last two axes"),
    ("qarrays-allow-nan", lambda: fqt.quantized_arrays(allow_nan=0), "allow_nan"),
]


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
@pytest.mark.parametrize("call,message", [c[1:] for c in _BAD], ids=[c[0] for c in _BAD])
def test_bad_arguments_raise_invalid_argument_when_drawn(call, message):
  # Like hypothesis.extra.numpy: building the strategy does not check its arguments ...
  strategy = call()
  assert isinstance(strategy, st.SearchStrategy)
  # ... drawing from it does, both in .example() and under @given. The message itself is
  # matched: pytest's match= also searches the notes, where hypothesis puts the call.
  with pytest.raises(InvalidArgument) as drawn:
    strategy.example()
  assert re.search(message, str(drawn.value)), str(drawn.value)

  @settings(database=None, deadline=None, max_examples=5)
  @given(strategy)
  def run(value):
    pass

  with pytest.raises(InvalidArgument) as given_run:
    run()
  assert re.search(message, str(given_run.value)), str(given_run.value)


def test_every_public_strategy_has_a_bad_argument_case():
  names = {c[0] for c in _BAD}
  calls = " ".join(repr(c[1].__code__.co_names) for c in _BAD)
  for name in set(fpt.__all__) - {"BIT_DTYPES", "DEFAULT_FORMATS", "BLOCK_FORMATS",
                                  "hard_bit_patterns"}:
    assert f"'{name}'" in calls, name
  assert len(names) == len(_BAD)


@pytest.mark.parametrize("call", [
    lambda: fpt.hard_bit_patterns(np.float64), lambda: fpt.hard_bit_patterns(formats="e9m9"),
    lambda: fpt.hard_bit_patterns(formats=()), lambda: fqt.block_size("mxfp4", (16,)),
    lambda: fqt.block_size("fp4"),
], ids=["hard-dtype", "hard-format", "hard-empty", "block-size-shape", "block-size-format"])
def test_helpers_that_are_not_strategies_raise_at_once(call):
  with pytest.raises(InvalidArgument):
    call()


def test_a_wrong_call_is_a_type_error_at_once():
  # As for hypothesis's own strategies: only argument values are checked late.
  with pytest.raises(TypeError):
    fpt.codes("e4m3", allowed_nan=False)
  with pytest.raises(TypeError):
    fqt.quantize_shapes("mxfp4", 32)


def test_single_names_and_registry_records_are_menus_of_one():
  for kw in draws(fqt.quantize_inputs("nvfp4", dtypes=ml_dtypes.bfloat16,
                                      shapes=[((2, 32), 1)], tiles=False), 5):
    assert kw["fmt"] == "nvfp4" and kw["x"].dtype == ml_dtypes.bfloat16
    assert kw["x"].shape == (2, 32) and kw["axis"] == 1 and "block_shape" not in kw
  seen = draws(fpt.float32_bits(formats.E2M1), 20)
  assert all(0 <= b < 1 << 32 for b in seen)
  for q in draws(fqt.quantized_arrays(formats.QUANTIZED["nvfp4"], (32, 16), 0,
                                      block_shape=(16, 16)), 5):
    assert q.format == "nvfp4" and q.block_shape == (16, 16) and q.axis == 0


def test_public_names():
  import fp8lab.testing
  for name in fp8lab.testing.__all__:
    assert hasattr(fp8lab.testing, name), name
  assert "Example" in fp8lab.testing.__doc__ or "example" in fp8lab.testing.__doc__
