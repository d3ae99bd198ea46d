"""Hypothesis strategies for raw float bit patterns and element codes.

The strategies draw *bit patterns*, not "nice" floats: every uint32 (uint16) value is a
possible draw, NaN payloads and signalling NaNs included. Four fifths of the draws are
hard cases or next to them, so that a hundred examples hit each kind of edge (and many
thousands, every single one):

- the input dtype's own specials: +-0, +-Inf, NaN with several payloads and both signs
  (quiet and signalling), its subnormal extremes, its smallest normal and largest finite;
- every finite value of each format and every midpoint between two neighbours (the ties of
  round-to-nearest-even, and e8m0's linear midpoints 1.5 * 2^e), including the midpoint
  above the largest finite value (the overflow threshold: 464 for e4m3, 61440 for e5m2);
- the same points +- 1 ulp of the input dtype (largest finite + 1 ulp, tie - 1 ulp, ...),
  with either sign;
- near misses: any of the above moved by up to 8 ulps.

The last fifth is uniform over all patterns. Hard cases are derived from the format
descriptors (fp8lab.formats) and ml_dtypes' value tables, never from fp8lab's codec.

Like hypothesis.extra.numpy, invalid arguments (an unknown dtype or format, a wrong type, a
bad shape) raise hypothesis.errors.InvalidArgument when the strategy is drawn from; calling
the strategy function does not check them. hard_bit_patterns, not a strategy, raises at once.

All strategies compose with `hypothesis.extra.numpy` like its own strategies do::

    from hypothesis import given
    from hypothesis.extra import numpy as hnp
    from fp8lab import testing as fpt

    @given(fpt.bit_pattern_arrays("float32", (4, 32), formats=("e4m3",)))
    def test_encode(x): ...       # x: float32 (4, 32)

    @given(hnp.arrays(np.uint32, hnp.array_shapes(), elements=fpt.float32_bits("e2m1")))
    def test_bits(bits): x = bits.view(np.float32) ...
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
import ml_dtypes
import numpy as np

from fp8lab.formats import FORMAT_NAMES, ElementFormat, get_format
from fp8lab.testing import _validation as v

__all__ = [
    "DEFAULT_FORMATS", "BIT_DTYPES", "hard_bit_patterns", "float32_bits", "bfloat16_bits",
    "float16_bits", "bits_for", "floats_for", "bit_pattern_arrays", "codes", "code_arrays",
]

# The formats whose hard cases the bit strategies favour when none are named: every element
# format of the registry that fp8lab's codec encodes (e4m3, e5m2, e2m1, e8m0).
DEFAULT_FORMATS: tuple[str, ...] = tuple(n for n in FORMAT_NAMES if get_format(n).minifloat)

# Input float dtypes and the unsigned integer dtype holding their bit patterns.
BIT_DTYPES: dict[str, tuple[np.dtype, np.dtype]] = {
    "float32": (np.dtype(np.float32), np.dtype(np.uint32)),
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), np.dtype(np.uint16)),
    "float16": (np.dtype(np.float16), np.dtype(np.uint16)),
}


def _float_dtype(dtype: Any) -> tuple[np.dtype, np.dtype]:
  return BIT_DTYPES[v.float_dtype(dtype, BIT_DTYPES)]


def _formats(formats: str | ElementFormat | Iterable[Any] | None) -> tuple[ElementFormat, ...]:
  if formats is None:
    formats = DEFAULT_FORMATS
  # One format (a name, a descriptor or an ml_dtypes dtype) stands for itself.
  fs = tuple(v.element_format(f, "formats") for f in v.menu(
      formats, "formats", (str, ElementFormat, np.dtype, type)))
  for f in fs:
    if not f.minifloat:
      raise v.InvalidArgument(f"formats: hard cases are defined for the element formats "
                              f"{', '.join(DEFAULT_FORMATS)}, not {f.name!r}")
  return fs


def _shape(shape: Any) -> Any:
  """A shape for hnp.arrays; a strategy of shapes has each drawn shape checked."""
  if isinstance(shape, st.SearchStrategy):
    return shape.map(v.array_shape)
  return v.array_shape(shape)


def _grid(f: ElementFormat) -> np.ndarray:
  """Non-negative finite values of f (from ml_dtypes' own decoding), ascending, float64,
  plus the first value past the largest finite one, where the overflow threshold sits."""
  all_codes = np.arange(1 << f.bits, dtype=np.uint8)
  values = all_codes.view(f.dtype).astype(np.float64)
  values = np.unique(np.abs(values[np.isfinite(values)]))   # abs: -0 is not a magnitude
  # One quantum of the top binade above the largest finite value (e4m3 480, e5m2 65536,
  # e2m1 8, e8m0 2^128): the midpoint below it is the overflow threshold.
  beyond = f.max_finite + 2.0 ** (f.emax - f.mantissa_bits)
  return np.append(values, beyond)


def _special_magnitudes(float_dtype: np.dtype) -> list[int]:
  """Magnitude bit patterns of the input dtype's own specials (sign added later)."""
  bits = float_dtype.itemsize * 8
  mbits = int(ml_dtypes.finfo(float_dtype).nmant)
  exp_all = ((1 << (bits - 1 - mbits)) - 1) << mbits        # the Inf pattern
  quiet = 1 << (mbits - 1)
  return [
      0,                                  # zero
      1, quiet, (1 << mbits) - 1,         # smallest, a middle and the largest subnormal
      1 << mbits,                         # smallest normal
      exp_all - 1,                        # largest finite
      exp_all,                            # Inf
      exp_all | quiet,                    # canonical quiet NaN
      exp_all | 1,                        # signalling NaN, smallest payload
      exp_all | (quiet >> 1),             # signalling NaN, another payload
      exp_all | quiet | 1,                # quiet NaN with payload
      exp_all | ((1 << mbits) - 1),       # all-ones NaN
  ]


def _exact_with_neighbours(points: np.ndarray, float_dtype: np.dtype,
                           uint_dtype: np.dtype) -> np.ndarray:
  """Bit patterns of the points `float_dtype` holds exactly, each +- 1 ulp, both signs."""
  with np.errstate(over="ignore", under="ignore"):
    cast = points.astype(float_dtype)
  # Keep only the points the input dtype holds exactly (float16 cannot hold e8m0's range).
  exact = np.isfinite(cast.astype(np.float64)) & (cast.astype(np.float64) == points)
  mags = cast[exact].view(uint_dtype).astype(np.int64)
  mags = np.concatenate([mags - 1, mags, mags + 1])
  sign = 1 << (uint_dtype.itemsize * 8 - 1)
  mags = mags[(mags >= 0) & (mags < sign)]
  return np.concatenate([mags, mags | sign])


@functools.lru_cache(maxsize=None)
def _edge_bit_patterns(dtype_name: str, format_names: tuple[str, ...]) -> np.ndarray:
  """The few edges of each format: largest finite, overflow threshold, smallest subnormal,
  the tie below it, smallest normal (each +- 1 ulp, both signs)."""
  float_dtype, uint_dtype = BIT_DTYPES[dtype_name]
  points = []
  for name in format_names:
    f = get_format(name)
    beyond = _grid(f)[-1]
    points += [f.max_finite, (f.max_finite + beyond) / 2, f.min_subnormal,
               f.min_subnormal / 2, f.min_normal]
  return np.unique(_exact_with_neighbours(np.array(points), float_dtype, uint_dtype)
                   ).astype(uint_dtype)


@functools.lru_cache(maxsize=None)
def _hard_bit_patterns(dtype_name: str, format_names: tuple[str, ...]) -> np.ndarray:
  float_dtype, uint_dtype = BIT_DTYPES[dtype_name]
  points = []
  for name in format_names:
    grid = _grid(get_format(name))
    # Midpoints of neighbours are exact in float64 (few significant bits, any exponent).
    points.append(grid)
    points.append((grid[:-1] + grid[1:]) / 2)
  mags = _exact_with_neighbours(np.concatenate(points), float_dtype, uint_dtype)
  specials = np.array(_special_magnitudes(float_dtype), np.int64)
  sign = 1 << (uint_dtype.itemsize * 8 - 1)
  return np.unique(np.concatenate([mags, specials, specials | sign])).astype(uint_dtype)


def hard_bit_patterns(dtype: Any = np.float32, formats: Any = None) -> np.ndarray:
  """The hard-case bit patterns of `dtype` (float32, bfloat16 or float16) for `formats`.

  Returns a sorted unsigned integer array (uint32 for float32, uint16 otherwise) holding
  every finite value of each format, every midpoint of two neighbours (ties; the overflow
  threshold), each +- 1 ulp of `dtype`, and `dtype`'s specials (+-0, +-Inf, NaN payloads,
  subnormal and normal extremes), all with both signs. Points that `dtype` cannot represent
  exactly are left out. Invalid arguments raise hypothesis.errors.InvalidArgument.
  """
  name = _float_dtype(dtype)[0].name
  return _hard_bit_patterns(name, tuple(f.name for f in _formats(formats))).copy()


@v.lazy
def bits_for(dtype: Any = np.float32, formats: Any = None) -> st.SearchStrategy[int]:
  """Raw bit patterns (Python ints) of `dtype` weighted toward the hard cases of `formats`.

  Args:
    dtype: float32, bfloat16 or float16; the ints are in [0, 2^32) or [0, 2^16).
    formats: an element format name, or several (default: DEFAULT_FORMATS).

  The draws come in five kinds, about equally likely: `dtype`'s specials (+-0, +-Inf, NaN
  payloads, subnormal and normal extremes, both signs); the few edges of each format
  (largest finite, overflow threshold, smallest subnormal and the tie below it, smallest
  normal, each +- 1 ulp); all hard cases (`hard_bit_patterns`: every value and tie); hard
  cases moved by up to 8 ulps (near misses); uniform bits. The small kinds get their own
  share because hypothesis does not repeat an example: each of their few values is drawn
  soon, where one of ~5000 hard cases would rarely be.
  """
  float_dtype, uint_dtype = _float_dtype(dtype)
  names = tuple(f.name for f in _formats(formats))
  nbits = uint_dtype.itemsize * 8
  top = (1 << nbits) - 1
  sign = 1 << (nbits - 1)
  specials = sorted({m | s for m in _special_magnitudes(float_dtype) for s in (0, sign)})
  edges = [int(b) for b in _edge_bit_patterns(float_dtype.name, names)]
  hard = st.sampled_from([int(b) for b in _hard_bit_patterns(float_dtype.name, names)])
  near = st.tuples(hard, st.integers(-8, 8)).map(lambda t: min(max(t[0] + t[1], 0), top))
  return st.one_of(st.sampled_from(specials), st.sampled_from(edges), hard, near,
                   st.integers(0, top))


_bits_for = bits_for.__wrapped__     # the checking builder, for the strategies below


def float32_bits(formats: Any = None) -> st.SearchStrategy[int]:
  """float32 bit patterns (ints in [0, 2^32)) weighted toward the hard cases of `formats`."""
  return bits_for(np.float32, formats)


def bfloat16_bits(formats: Any = None) -> st.SearchStrategy[int]:
  """bfloat16 bit patterns (ints in [0, 2^16)) weighted toward the hard cases of `formats`."""
  return bits_for(ml_dtypes.bfloat16, formats)


def float16_bits(formats: Any = None) -> st.SearchStrategy[int]:
  """float16 bit patterns (ints in [0, 2^16)) weighted toward the hard cases of `formats`."""
  return bits_for(np.float16, formats)


@v.lazy
def floats_for(fmt: Any, dtype: Any = np.float32) -> st.SearchStrategy[np.generic]:
  """Scalars of `dtype` (numpy scalars, exact bits: NaN payloads survive) weighted toward
  the hard cases of the one format `fmt`."""
  float_dtype, uint_dtype = _float_dtype(dtype)
  if not isinstance(fmt, (str, ElementFormat, np.dtype, type)):
    raise v.InvalidArgument(f"fmt must be one format, got {fmt!r}")
  return _bits_for(float_dtype, (fmt,)).map(
      lambda b: np.array(b, dtype=uint_dtype).view(float_dtype)[()])


@v.lazy
def bit_pattern_arrays(dtype: Any = np.float32, shape: Any = 32, *, formats: Any = None
                       ) -> st.SearchStrategy[np.ndarray]:
  """Arrays of `dtype` (float32, bfloat16, float16) of `shape` built from raw bit patterns.

  `shape` is anything `hypothesis.extra.numpy.arrays` accepts (an int, a tuple or a strategy
  such as `hnp.array_shapes()`). Elements come from `bits_for(dtype, formats)` and are
  reinterpreted, never converted, so every pattern (NaN payloads included) can occur.
  """
  float_dtype, uint_dtype = _float_dtype(dtype)
  return hnp.arrays(uint_dtype, _shape(shape), elements=_bits_for(float_dtype, formats)).map(
      lambda a: a.view(float_dtype))


@v.lazy
def codes(fmt: Any, *, allow_nan: bool = True) -> st.SearchStrategy[int]:
  """Valid codes of an element format as ints: 0..255, or 0..15 for e2m1 (low nibble).

  allow_nan=False leaves out the format's NaN codes (e4m3 0x7F/0xFF, e5m2 s.11111.{01,10,11},
  e8m0 0xFF); Inf codes (e5m2 0x7C/0xFC) stay.
  """
  f = v.element_format(fmt)
  v.check_bool(allow_nan, "allow_nan")
  every = np.arange(1 << f.bits)
  if allow_nan:
    return st.integers(0, (1 << f.bits) - 1)
  if f.minifloat:
    nan = np.isin(every, f.nan_codes)
  else:   # f16 / bf16 patterns: NaN is any all-ones exponent with a nonzero mantissa.
    nan = np.isnan(every.astype(np.uint16).view(f.dtype))
  return st.sampled_from([int(c) for c in every[~nan]])


_codes = codes.__wrapped__


@v.lazy
def code_arrays(fmt: Any, shape: Any = 32, *, allow_nan: bool = True
                ) -> st.SearchStrategy[np.ndarray]:
  """uint8 arrays (uint16 for "f16"/"bf16" patterns) of valid codes of `fmt` of `shape`."""
  f = v.element_format(fmt)
  dtype = np.uint16 if f.bits == 16 else np.uint8
  return hnp.arrays(dtype, _shape(shape), elements=_codes(f, allow_nan=allow_nan))
