"""Hypothesis strategies for block-format inputs and QuantizedArrays (needs the "test" extra).

Everything is drawn as raw bit patterns:

- `quantize_shapes(fmt)`: (shape, axis) pairs whose blocked axis holds 1..max_blocks blocks,
  the last one possibly partial (the zero-padding path);
- `block_arrays(fmt, shape, axis)`: float arrays in which every block (or 16x16 tile) has
  its own magnitude, drawn over the whole float32 exponent range (subnormal blocks
  included), and elements that are raw bit patterns relative to it: random mantissas a few
  binades below the block's top, element-grid values and their ties scaled by the block's
  power of two (exact ties after scaling), the block maximum itself (powers of two, just
  above the element max), zeros of both signs, float32 subnormals, and, when allowed, NaN
  and +-Inf;
- `quantize_inputs(...)`: a dict of keyword arguments for `fp8lab.quantize`
  (x, fmt, axis, scale_mode, block_shape);
- `quantized_arrays(fmt, ...)`: QuantizedArrays made of arbitrary valid element codes,
  arbitrary scale codes and a raw positive tensor scale, NOT outputs of quantize: for
  testing dequantization and kernels that consume packed data.

Example::

    from hypothesis import given
    import fp8lab
    from fp8lab.testing import quantized as fqt

    @given(fqt.quantize_inputs(formats=("mxfp4", "nvfp4")))
    def test_my_kernel(kw):
      q = fp8lab.quantize(**kw)
      ...

Shapes are drawn from small menus by default (each new shape costs a jit compilation).
"""

from __future__ import annotations

from typing import Any, Sequence

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fp8lab.formats import MX_SCALE_MODES, QUANTIZED, get_quantized_format
from fp8lab.numerics.packing import pack
from fp8lab.quantized import QuantizedArray, scales_shape
from fp8lab.testing.elements import code_arrays

__all__ = ["BLOCK_FORMATS", "quantize_shapes", "block_arrays", "quantize_inputs",
           "quantized_arrays", "block_size"]

# The quantized formats with block scales, from the registry.
BLOCK_FORMATS = tuple(q.name for q in QUANTIZED.values() if q.block_shapes)
_INPUT_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def block_size(fmt: str, block_shape=None) -> tuple[int, ...]:
  """The block shape `quantize` uses for `fmt` (per-tensor formats: the whole axis, (0,))."""
  if block_shape is not None:
    return tuple(block_shape)
  return get_quantized_format(fmt).block_shape or (0,)


@st.composite
def quantize_shapes(draw, fmt: str = "mxfp4", *, block_shape=None, max_blocks: int = 3,
                    max_rank: int = 2, max_other: int = 3) -> tuple[tuple[int, ...], int]:
  """(shape, axis) with 1..max_blocks blocks along `axis` (the last possibly partial) and
  1..max_other along each other axis; for a 16x16 tile shape, blocks along both last axes."""
  (b, *rest) = block_size(fmt, block_shape)
  b = b or 32
  def length():
    blocks = draw(st.integers(1, max_blocks))
    tail = draw(st.sampled_from([0, 0, 1, b // 2, b - 1]))
    return max(blocks * b - tail, 1)
  if rest:                                              # (16, 16) tiles: the last two axes
    rank = draw(st.integers(2, max(2, max_rank)))
    shape = tuple(draw(st.integers(1, max_other)) for _ in range(rank - 2))
    shape += (length(), length())
    return shape, draw(st.sampled_from([rank - 2, rank - 1]))
  rank = draw(st.integers(1, max_rank))
  axis = draw(st.integers(0, rank - 1))
  shape = [draw(st.integers(1, max_other)) for _ in range(rank)]
  shape[axis] = length()
  return tuple(shape), axis


def _element_format(fmt: str):
  qf = get_quantized_format(fmt)
  return qf.element if qf.element.minifloat else None


@st.composite
def block_arrays(draw, fmt: str = "mxfp4", shape: tuple[int, ...] = (64,), axis: int = -1,
                 *, block_shape=None, dtype: Any = np.float32, allow_nan: bool = True,
                 allow_inf: bool = True, min_exponent: int = -149,
                 max_exponent: int = 127) -> np.ndarray:
  """An array of `shape` whose blocks along `axis` each have their own magnitude.

  Args:
    fmt: the quantized format whose blocks (and element grid, for exact ties) are targeted.
    shape, axis: as from `quantize_shapes`.
    dtype: float32, bfloat16 or float16 (16-bit arrays are the float32 draws rounded by
      ml_dtypes/numpy, so their blocks are still spread over their own range).
    allow_nan, allow_inf: whether NaN (both signs, several payloads) and +-Inf may occur.
    min_exponent, max_exponent: range of the block exponents (unbiased, float32).
  """
  shape = tuple(shape)
  ndim = len(shape)
  axis %= ndim
  bs = block_size(fmt, block_shape)
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
  exponent = st.integers(min_exponent, max_exponent)
  if landmarks:
    exponent = st.one_of(exponent, st.sampled_from(landmarks))
  exps = np.array(draw(st.lists(exponent, min_size=n_blocks, max_size=n_blocks)), np.int64)
  size = int(np.prod(shape, dtype=np.int64))
  kinds = np.array(draw(st.lists(st.integers(0, 9), min_size=size, max_size=size)), np.int64)
  mant = np.array(draw(st.lists(st.integers(0, (1 << 23) - 1), min_size=size,
                                max_size=size)), np.int64)
  drop = np.array(draw(st.lists(st.integers(0, 12), min_size=size, max_size=size)), np.int64)
  signs = np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)), bool)
  elem = _element_format(fmt)
  if elem is not None:
    grid = np.unique(np.abs(np.arange(1 << elem.bits, dtype=np.uint8).view(elem.dtype)
                            .astype(np.float64)))
    grid = grid[np.isfinite(grid)]
    points = np.concatenate([grid, (grid[:-1] + grid[1:]) / 2,
                             [elem.max_finite * (1 + 2.0**-20)]])
  else:
    points = np.array([1.0, 1.5, 1.25])
  pick = np.array(draw(st.lists(st.integers(0, len(points) - 1), min_size=size,
                                max_size=size)), np.int64)
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
  want = np.dtype(_INPUT_DTYPES.get(np.dtype(dtype).name, dtype))
  if want != np.float32:
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
      x = x.astype(want)
  return x


@st.composite
def quantize_inputs(draw, formats: Sequence[str] = BLOCK_FORMATS, *,
                    scale_modes: Sequence[str] = MX_SCALE_MODES, dtypes=(np.float32,),
                    shapes: Sequence[tuple[tuple[int, ...], int]] | None = None,
                    allow_nan: bool = True, allow_inf: bool = True,
                    tiles: bool = True, **block_kwargs) -> dict:
  """Keyword arguments for fp8lab.quantize: x, fmt, axis, scale_mode, block_shape.

  `shapes`: a menu of (shape, axis) pairs to choose from (default: `quantize_shapes`);
  `tiles`: whether nvfp4 may use block_shape (16, 16). Other keyword arguments go to
  `block_arrays`.
  """
  fmt = draw(st.sampled_from(list(formats)))
  block_shape = None
  tile_shapes = [b for b in get_quantized_format(fmt).block_shapes if len(b) == 2]
  if tile_shapes and tiles and draw(st.booleans()):
    block_shape = draw(st.sampled_from(tile_shapes))
  if shapes is not None:
    menu = [(s, a) for s, a in shapes if block_shape is None or len(s) >= 2 and
            a % len(s) >= len(s) - 2]
    shape, axis = draw(st.sampled_from(menu)) if menu else draw(
        quantize_shapes(fmt, block_shape=block_shape))
  else:
    shape, axis = draw(quantize_shapes(fmt, block_shape=block_shape))
  dtype = draw(st.sampled_from(list(dtypes)))
  x = draw(block_arrays(fmt, shape, axis, block_shape=block_shape, dtype=dtype,
                        allow_nan=allow_nan, allow_inf=allow_inf, **block_kwargs))
  kw = dict(x=x, fmt=fmt, axis=axis)
  if len(get_quantized_format(fmt).scale_modes) > 1:
    kw["scale_mode"] = draw(st.sampled_from(list(scale_modes)))
  if block_shape is not None:
    kw["block_shape"] = block_shape
  return kw


@st.composite
def quantized_arrays(draw, fmt: str = "mxfp4", shape: tuple[int, ...] | None = None,
                     axis: int | None = None, *, block_shape=None,
                     allow_nan: bool = True) -> QuantizedArray:
  """A QuantizedArray of arbitrary valid codes (not an output of quantize).

  Element codes: any code of the element format (NaN codes only if allow_nan); scales: any
  E8M0 code for MX (0xFF only if allow_nan), any non-negative E4M3 code for nvfp4 (0x7F
  only if allow_nan); tensor_scale: a raw positive finite float32 (nonzero). The packed
  padding is zero codes, as pack writes it.
  """
  qf = get_quantized_format(fmt)
  elem_name, default_block = qf.element.name, qf.block_shape
  if shape is None:
    shape, axis = draw(quantize_shapes(fmt, block_shape=block_shape))
  shape = tuple(shape)
  axis = (len(shape) - 1 if axis is None else axis) % len(shape)
  codes = draw(code_arrays(elem_name, shape, allow_nan=allow_nan))
  data = np.asarray(pack(codes, elem_name, axis))
  scales = tensor_scale = None
  bs = tuple(block_shape) if block_shape is not None else default_block
  sf = qf.scale_format
  if sf is not None:
    sshape = scales_shape(shape, axis, bs)
    top = sf.nan_code if allow_nan else sf.max_code
    scales = draw(hnp.arrays(np.uint8, tuple(sshape), elements=st.integers(0, top)))
  if qf.tensor_scale:
    tensor_scale = np.array(draw(st.integers(1, 0x7F7FFFFF)), np.uint32).view(np.float32)
  return QuantizedArray(
      data, scales, tensor_scale, format=fmt, element_format=elem_name, shape=shape,
      axis=axis, block_shape=bs if sf is not None else None,
      scale_mode=draw(st.sampled_from(qf.scale_modes)) if len(qf.scale_modes) > 1 else None,
      hadamard=None)
