"""Hypothesis strategies for block-format inputs and QuantizedArrays (needs the "test" extra).

Everything is drawn as raw bit patterns:

- `quantize_shapes(fmt)`: (shape, axis) pairs whose blocked axis holds 1..max_blocks blocks,
  the last one possibly partial (the zero-padding path);
- `block_arrays(fmt, shape, axis)`: float arrays in which every block (or 2D tile) has
  its own magnitude, drawn over the whole float32 exponent range (subnormal blocks
  included), and elements that are raw bit patterns relative to it: random mantissas a few
  binades below the block's top, element-grid values and their ties scaled by the block's
  power of two (exact ties after scaling), the block maximum itself (powers of two, just
  above the element max), zeros of both signs, float32 subnormals, and, when allowed, NaN
  and +-Inf; arrays of more than _DRAWN_ELEMENTS (256) elements (blockwise FP8's 128-long blocks
  and 128x128 tiles) take the same element kinds from a numpy generator seeded by one drawn
  integer, as hypothesis cannot draw that many values one by one;
- `quantize_inputs(...)`: a dict of keyword arguments for `fp8lab.quantize`
  (x, fmt, axis, scale_mode, block_shape): every scale mode of each format, and for the
  blockwise formats (any 1D block length) lengths from FREE_BLOCK_LENGTHS too;
- `quantized_arrays(fmt, ...)`: QuantizedArrays made of arbitrary valid element codes,
  arbitrary scale codes (blockwise formats: raw positive float32 scales) and a raw positive
  tensor scale, NOT outputs of quantize: for testing dequantization and kernels that
  consume packed data.

Example::

    from hypothesis import given
    import fp8lab
    from fp8lab.testing import quantized as fqt

    @given(fqt.quantize_inputs(formats=("mxfp4", "nvfp4")))
    def test_my_kernel(kw):
      q = fp8lab.quantize(**kw)
      ...

Shapes are drawn from small menus by default (each new shape costs a jit compilation).

Like hypothesis.extra.numpy, invalid arguments (an unknown format or dtype, a block_shape or
scale mode the format does not take, a bad shape or axis, an empty menu, a wrong type)
raise hypothesis.errors.InvalidArgument when the strategy is drawn from, not at the call.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fp8lab.formats import QUANTIZED, QuantizedFormat
from fp8lab.numerics.packing import pack
from fp8lab.quantized import QuantizedArray, scales_shape
from fp8lab.testing import _validation as v
from fp8lab.testing.elements import BIT_DTYPES, code_arrays

__all__ = ["BLOCK_FORMATS", "FREE_BLOCK_LENGTHS", "quantize_shapes", "block_arrays",
           "quantize_inputs", "quantized_arrays", "block_size"]

# The quantized formats with block scales, from the registry.
BLOCK_FORMATS = tuple(q.name for q in QUANTIZED.values() if q.block_shapes)
# 1D block lengths quantize_inputs draws for formats that take any (QuantizedFormat.
# any_block_length): odd ones, head dimensions (64, 80, 96, 128, 256) and powers of two.
FREE_BLOCK_LENGTHS = (1, 3, 16, 64, 80, 96, 128, 256)
# Arrays up to this many elements are drawn element by element; larger ones from a seeded
# numpy generator (from about 480 elements hypothesis fails its large_base_example health
# check on a fixed shape, and overruns its buffer at a few thousand).
_DRAWN_ELEMENTS = 256
# Block exponents of block_arrays: float32's, from the smallest subnormal to the top binade.
_MIN_EXPONENT, _MAX_EXPONENT = -149, 127
# The keyword arguments quantize_inputs passes on to block_arrays (it sets the others).
_BLOCK_KWARGS = ("min_exponent", "max_exponent")


def block_size(fmt: str, block_shape=None) -> tuple[int, ...]:
  """The block shape `quantize` uses for `fmt` (per-tensor formats: the whole axis, (0,)).

  Not a strategy: an unknown format or a block_shape `fmt` does not take raises
  hypothesis.errors.InvalidArgument at once.
  """
  return v.block_shape_of(v.quantized_format(fmt), block_shape) or (0,)


def _exponents(min_exponent: Any, max_exponent: Any) -> tuple[int, int]:
  lo = v.check_int(min_exponent, "min_exponent", _MIN_EXPONENT, _MAX_EXPONENT)
  hi = v.check_int(max_exponent, "max_exponent", _MIN_EXPONENT, _MAX_EXPONENT)
  v.check_interval(lo, hi, "min_exponent", "max_exponent")
  return lo, hi


@v.lazy
def quantize_shapes(fmt: str = "mxfp4", *, block_shape=None, max_blocks: int = 3,
                    max_rank: int = 2, max_other: int = 3
                    ) -> st.SearchStrategy[tuple[tuple[int, ...], int]]:
  """(shape, axis) with 1..max_blocks blocks along `axis` (the last possibly partial) and
  1..max_other along each other axis; for a 2D tile shape, blocks along both last axes
  (so max_rank must be at least 2)."""
  qf = v.quantized_format(fmt)
  bs = v.block_shape_of(qf, block_shape) or (0,)
  max_blocks = v.check_int(max_blocks, "max_blocks", 1)
  max_rank = v.check_int(max_rank, "max_rank", len(bs))
  max_other = v.check_int(max_other, "max_other", 1)
  return _quantize_shapes(bs, max_blocks, max_rank, max_other)


@st.composite
def _quantize_shapes(draw, bs: tuple[int, ...], max_blocks: int, max_rank: int,
                     max_other: int) -> tuple[tuple[int, ...], int]:
  (b, *rest) = bs
  b = b or 32
  def length():
    blocks = draw(st.integers(1, max_blocks))
    tail = draw(st.sampled_from([0, 0, 1, b // 2, b - 1]))
    return max(blocks * b - tail, 1)
  if rest:                                              # 2D tiles: the last two axes
    rank = draw(st.integers(2, max_rank))
    shape = tuple(draw(st.integers(1, max_other)) for _ in range(rank - 2))
    shape += (length(), length())
    return shape, draw(st.sampled_from([rank - 2, rank - 1]))
  rank = draw(st.integers(1, max_rank))
  axis = draw(st.integers(0, rank - 1))
  shape = [draw(st.integers(1, max_other)) for _ in range(rank)]
  shape[axis] = length()
  return tuple(shape), axis


@v.lazy
def block_arrays(fmt: str = "mxfp4", shape: tuple[int, ...] = (64,), axis: int = -1,
                 *, block_shape=None, dtype: Any = np.float32, allow_nan: bool = True,
                 allow_inf: bool = True, min_exponent: int = _MIN_EXPONENT,
                 max_exponent: int = _MAX_EXPONENT) -> st.SearchStrategy[np.ndarray]:
  """Arrays of `shape` whose blocks along `axis` each have their own magnitude.

  Args:
    fmt: the quantized format whose blocks (and element grid, for exact ties) are targeted.
    shape, axis: as from `quantize_shapes` (a 2D block_shape: axis one of the last two).
    dtype: float32, bfloat16 or float16 (16-bit arrays are the float32 draws rounded by
      ml_dtypes/numpy, so their blocks are still spread over their own range).
    allow_nan, allow_inf: whether NaN (both signs, several payloads) and +-Inf may occur.
    min_exponent, max_exponent: range of the block exponents (unbiased, float32: within
      -149..127).
  """
  qf = v.quantized_format(fmt)
  shape = v.array_shape(shape, min_dims=1)
  axis = v.axis_of(axis, len(shape))
  bs = v.block_shape_of(qf, block_shape)
  v.check_tiles(qf, bs, len(shape), axis)
  dtype = BIT_DTYPES[v.float_dtype(dtype, BIT_DTYPES)][0]
  v.check_bool(allow_nan, "allow_nan")
  v.check_bool(allow_inf, "allow_inf")
  min_exponent, max_exponent = _exponents(min_exponent, max_exponent)
  return _block_arrays(qf.name, shape, axis, bs or (0,), dtype, allow_nan, allow_inf,
                       min_exponent, max_exponent)


@st.composite
def _block_arrays(draw, fmt: str, shape: tuple[int, ...], axis: int, bs: tuple[int, ...],
                  dtype: np.dtype, allow_nan: bool, allow_inf: bool, min_exponent: int,
                  max_exponent: int) -> np.ndarray:
  # The private strategies take checked arguments, formats by name (short reprs).
  qf = QUANTIZED[fmt]
  ndim = len(shape)
  # One exponent per block: every element's block coordinates, raveled to a block id.
  per_dim = [1] * ndim
  if len(bs) == 2:
    per_dim[-2:] = bs
  else:
    per_dim[axis] = bs[0] or shape[axis]
  grid_shape = tuple(-(-n // b) for n, b in zip(shape, per_dim))
  coords = tuple(i // b for i, b in zip(np.indices(shape), per_dim))
  block_id = np.ravel_multi_index(coords, grid_shape)
  n_blocks = int(np.prod(grid_shape, dtype=np.int64))
  landmarks = [e for e in (-149, -140, -127, -126, -120, 0, 127)
               if min_exponent <= e <= max_exponent]
  size = int(np.prod(shape, dtype=np.int64))
  rng = (np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
         if size > _DRAWN_ELEMENTS else None)
  if rng is None:
    exponent = st.integers(min_exponent, max_exponent)
    if landmarks:
      exponent = st.one_of(exponent, st.sampled_from(landmarks))
    exps = np.array(draw(st.lists(exponent, min_size=n_blocks, max_size=n_blocks)), np.int64)
  else:                                     # half of the blocks at a landmark, like one_of
    exps = rng.integers(min_exponent, max_exponent + 1, n_blocks, dtype=np.int64)
    if landmarks:
      exps = np.where(rng.random(n_blocks) < 0.5, rng.choice(landmarks, n_blocks), exps)

  def ints(lo: int, hi: int) -> np.ndarray:                    # size values in [lo, hi]
    if rng is not None:
      return rng.integers(lo, hi + 1, size, dtype=np.int64)
    return np.array(draw(st.lists(st.integers(lo, hi), min_size=size, max_size=size)),
                    np.int64)

  kinds = ints(0, 9)
  mant = ints(0, (1 << 23) - 1)
  drop = ints(0, 12)
  signs = (rng.random(size) < 0.5 if rng is not None else
           np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)), bool))
  elem = qf.element if qf.element.minifloat else None
  if elem is not None:
    grid = np.unique(np.abs(np.arange(1 << elem.bits, dtype=np.uint8).view(elem.dtype)
                            .astype(np.float64)))
    grid = grid[np.isfinite(grid)]
    points = np.concatenate([grid, (grid[:-1] + grid[1:]) / 2,
                             [elem.max_finite * (1 + 2.0**-20)]])
  else:
    points = np.array([1.0, 1.5, 1.25])
  pick = ints(0, len(points) - 1)
  e = exps[block_id.reshape(-1)]
  # Element kinds, about one in ten each: 0-3 a random mantissa up to 12 binades below the
  # block top; 4-5 a grid value or tie of the element format times 2^(e - emax); 6 the block
  # top 2^e itself (exact power of two); 7 zero; 8 a float32 subnormal; 9 NaN or Inf.
  with np.errstate(over="ignore", under="ignore"):
    rel_e = np.clip(e - drop, -149, 127)
    rand = np.where(rel_e >= -126, ((rel_e + 127) << 23) | mant,
                    (mant | (1 << 23)) >> np.clip(-126 - rel_e, 0, 31))
    emax = elem.emax if elem is not None else 0
    grid_val = np.ldexp(points[pick], e - emax).astype(np.float32).view(np.uint32)
    top = np.ldexp(1.0, e).astype(np.float32).view(np.uint32)
  subnormal = mant >> 3
  special_choices = []
  if allow_inf:
    special_choices.append(0x7F800000)
  if allow_nan:
    special_choices += [0x7FC00000, 0x7F800001, 0x7FFFFFFF]
  special = (np.array(special_choices, np.int64)[mant % len(special_choices)]
             if special_choices else np.zeros(size, np.int64))
  kinds = np.where((kinds == 9) & (len(special_choices) == 0), 7, kinds)
  bits = np.select([kinds <= 3, kinds <= 5, kinds == 6, kinds == 7, kinds == 8],
                   [rand, grid_val.astype(np.int64), top.astype(np.int64), 0, subnormal],
                   special)
  bits = (bits.astype(np.uint32) & np.uint32(0x7FFFFFFF)) | np.where(
      signs, np.uint32(0x80000000), np.uint32(0))
  x = bits.astype(np.uint32).view(np.float32).reshape(shape)
  if dtype != np.float32:
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
      x = x.astype(dtype)
  return x


@v.lazy
def quantize_inputs(formats: Sequence[str] = BLOCK_FORMATS, *,
                    scale_modes: Sequence[str] | None = None, dtypes=(np.float32,),
                    shapes: Sequence[tuple[tuple[int, ...], int]] | None = None,
                    allow_nan: bool = True, allow_inf: bool = True,
                    tiles: bool = True, block_lengths: Sequence[int] = FREE_BLOCK_LENGTHS,
                    **block_kwargs) -> st.SearchStrategy[dict]:
  """Keyword arguments for fp8lab.quantize: x, fmt, axis, scale_mode, block_shape.

  `formats`: a menu of quantized format names (one name: that format); `scale_modes`: None
  (every scale mode of each format that has them) or a menu of modes drawn for those
  formats (each must be a mode of one of them, and each of them must have one in the
  menu); `dtypes`: a menu of input dtypes; `shapes`: a menu of (shape, axis) pairs to choose
  from (default: `quantize_shapes`); `tiles`: whether a format with 2D block shapes (nvfp4:
  (16, 16), blockwise: (128, 128)) may use them; `block_lengths`: the menu of 1D block
  lengths (ints >= 1) drawn, besides the registry's block shapes, for formats that take any
  (the blockwise formats). The other keyword arguments, min_exponent and max_exponent, go
  to `block_arrays`.
  """
  qfs = tuple(v.quantized_format(f, "formats")
              for f in v.menu(formats, "formats", (str, QuantizedFormat)))
  takes_mode = [q for q in qfs if q.scale_modes]
  mode_menus = {q.name: list(q.scale_modes) for q in takes_mode}
  if scale_modes is not None:
    modes = v.menu(scale_modes, "scale_modes")
    valid = {m for q in (takes_mode or QUANTIZED.values()) for m in q.scale_modes}
    for m in modes:
      if not isinstance(m, str) or m not in valid:
        raise v.InvalidArgument(f"scale_modes: {m!r} is not a scale mode of "
                                f"{', '.join(q.name for q in takes_mode or qfs)}; valid: "
                                f"{', '.join(sorted(valid))}")
    for q in takes_mode:
      mode_menus[q.name] = [m for m in modes if m in q.scale_modes]
      if not mode_menus[q.name]:
        raise v.InvalidArgument(f"scale_modes: none of {modes} is a scale mode of "
                                f"{q.name!r} (its modes: {', '.join(q.scale_modes)})")
  lengths = tuple(v.check_int(b, "block_lengths entries", 1)
                  for b in v.menu(block_lengths, "block_lengths", (int, np.integer)))
  dtype_menu = [BIT_DTYPES[v.float_dtype(d, BIT_DTYPES, "dtypes")][0]
                for d in v.menu(dtypes, "dtypes", (str, np.dtype, type))]
  shape_menu = None
  if shapes is not None:
    shape_menu = []
    for pair in v.menu(shapes, "shapes", ()):
      if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
        raise v.InvalidArgument(f"shapes must hold (shape, axis) pairs, got {pair!r}")
      shape = v.array_shape(pair[0], "shapes: shape", min_dims=1)
      v.axis_of(pair[1], len(shape), "shapes: axis")
      shape_menu.append((shape, int(pair[1])))
  v.check_bool(allow_nan, "allow_nan")
  v.check_bool(allow_inf, "allow_inf")
  v.check_bool(tiles, "tiles")
  unknown = sorted(set(block_kwargs) - set(_BLOCK_KWARGS))
  if unknown:
    raise v.InvalidArgument(f"quantize_inputs passes only {', '.join(_BLOCK_KWARGS)} on to "
                            f"block_arrays; got {', '.join(unknown)}")
  exponents = _exponents(block_kwargs.get("min_exponent", _MIN_EXPONENT),
                         block_kwargs.get("max_exponent", _MAX_EXPONENT))
  return _quantize_inputs(tuple(q.name for q in qfs), mode_menus, dtype_menu, shape_menu,
                          allow_nan, allow_inf, tiles, lengths, exponents)


@st.composite
def _quantize_inputs(draw, fmts, mode_menus, dtype_menu, shape_menu, allow_nan, allow_inf,
                     tiles, lengths, exponents) -> dict:
  qf = QUANTIZED[draw(st.sampled_from(fmts))]
  block_shape = None
  tile_shapes = [b for b in qf.block_shapes if len(b) == 2]
  if tile_shapes and tiles and draw(st.booleans()):
    block_shape = draw(st.sampled_from(tile_shapes))
  elif qf.any_block_length:
    # The default (None), the registry's other 1D shapes, or a free length.
    menu = [None] + [b for b in qf.block_shapes[1:] if len(b) == 1] + [(b,) for b in lengths]
    block_shape = draw(st.sampled_from(menu))
  bs = block_shape or qf.block_shape or (0,)
  if shape_menu is not None:
    menu = [(s, a) for s, a in shape_menu if block_shape is None or len(s) >= 2 and
            a % len(s) >= len(s) - 2]
    shape, axis = draw(st.sampled_from(menu)) if menu else draw(
        _quantize_shapes(bs, 3, 2, 3))
  else:
    shape, axis = draw(_quantize_shapes(bs, 3, 2, 3))
  dtype = draw(st.sampled_from(dtype_menu))
  x = draw(_block_arrays(qf.name, shape, axis % len(shape), bs, dtype, allow_nan, allow_inf,
                         *exponents))
  kw = dict(x=x, fmt=qf.name, axis=axis)
  if qf.name in mode_menus:
    kw["scale_mode"] = draw(st.sampled_from(mode_menus[qf.name]))
  if block_shape is not None:
    kw["block_shape"] = block_shape
  return kw


@v.lazy
def quantized_arrays(fmt: str = "mxfp4", shape: tuple[int, ...] | None = None,
                     axis: int | None = None, *, block_shape=None,
                     allow_nan: bool = True) -> st.SearchStrategy[QuantizedArray]:
  """QuantizedArrays of arbitrary valid codes (not outputs of quantize).

  shape, axis: the array's (axis default: the last); shape None draws both from
  `quantize_shapes` (then axis must be None too). Element codes: any code of the element
  format (NaN codes only if allow_nan); scales: any E8M0 code for MX (0xFF only if
  allow_nan), any non-negative E4M3 code for nvfp4 (0x7F only if allow_nan), raw positive
  finite float32 values (nonzero, subnormals included) for the blockwise formats;
  tensor_scale: a raw positive finite float32 (nonzero); scale_mode: any of the format's.
  The packed padding is zero codes, as pack writes it.
  """
  qf = v.quantized_format(fmt)
  bs = v.block_shape_of(qf, block_shape)
  v.check_bool(allow_nan, "allow_nan")
  if shape is None:
    if axis is not None:
      raise v.InvalidArgument(f"axis={axis!r} without a shape: shape=None draws the axis too")
  else:
    shape = v.array_shape(shape, min_dims=1)
    axis = v.axis_of(len(shape) - 1 if axis is None else axis, len(shape))
    v.check_tiles(qf, bs, len(shape), axis)
  return _quantized_arrays(qf.name, shape, axis, bs, allow_nan)


@st.composite
def _quantized_arrays(draw, fmt: str, shape: tuple[int, ...] | None, axis: int | None,
                      bs: tuple[int, ...] | None, allow_nan: bool) -> QuantizedArray:
  qf = QUANTIZED[fmt]
  elem_name = qf.element.name
  if shape is None:
    shape, axis = draw(_quantize_shapes(bs or (0,), 3, 2, 3))
    axis %= len(shape)
  codes = draw(code_arrays(elem_name, shape, allow_nan=allow_nan))
  data = np.asarray(pack(codes, elem_name, axis))
  scales = tensor_scale = None
  sf = qf.scale_format
  if sf is not None:
    sshape = scales_shape(shape, axis, bs)
    top = sf.nan_code if allow_nan else sf.max_code
    scales = draw(hnp.arrays(np.uint8, tuple(sshape), elements=st.integers(0, top)))
  elif qf.block_scaled:                                  # float32 block scales
    sshape = scales_shape(shape, axis, bs)
    scales = draw(hnp.arrays(np.uint32, tuple(sshape), elements=st.integers(1, 0x7F7FFFFF)))
    scales = scales.view(np.float32)
  if qf.tensor_scale:
    tensor_scale = np.array(draw(st.integers(1, 0x7F7FFFFF)), np.uint32).view(np.float32)
  return QuantizedArray(
      data, scales, tensor_scale, format=qf.name, element_format=elem_name, shape=shape,
      axis=axis, block_shape=bs if qf.block_scaled else None,
      scale_mode=draw(st.sampled_from(qf.scale_modes)) if qf.scale_modes else None,
      hadamard=None)
