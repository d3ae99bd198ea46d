"""QuantizedArray and the golden quantize / dequantize of every fp8lab format.

Formats (the `fmt` argument of `quantize`) are the records of `fp8lab.formats.QUANTIZED`:
element format, block shapes, scale format and tensor scale of each; docs/numerics.md gives
their rules.

Element codes are packed with `fp8lab.pack(codes, element_format, axis=axis)`; a length that
is not a multiple of the block is padded with zeros for the scale computation only (zeros
change no amax), and the packed data holds exactly the logical length.

Every float32 step is an exact IEEE float32 operation on bit patterns (numerics/scales.py),
so the results are the same on every backend, float32 subnormals included. Conversions
between float32, bfloat16 and float16 (16-bit inputs, the f16/bf16 storage, dequantize's
output) are integer ops on bit patterns too (numerics/bits.py), NaN sign and payload included.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.formats import (E8M0, QUANTIZED_FORMATS, QuantizedFormat, get_format,
                            get_quantized_format)
from fp8lab.numerics import random as fp8_random
from fp8lab.numerics import scales as sc
from fp8lab.numerics.bits import convert
from fp8lab.numerics.codec import (INPUT_DTYPES, as_float_input, check_rounding, decode,
                                   encode_bits)
from fp8lab.numerics.hadamard import HadamardSpec, hadamard
from fp8lab.numerics.packing import pack, unpack

__all__ = ["QuantizedArray", "quantize", "dequantize", "QUANTIZED_FORMATS"]

_U = np.uint32



@jax.tree_util.register_pytree_node_class
class QuantizedArray:
  """A quantized array: packed element codes, their scales, and static metadata.

  Leaves (pytree children): `data` (uint32 words, `fp8lab.pack(codes, element_format,
  axis=axis)`), `scales` (uint8 scale codes: E8M0 for MX, E4M3 for nvfp4; float32
  DEQUANTIZATION factors for the blockwise formats "e4m3_block" / "e5m2_block"; None
  otherwise), `tensor_scale` (float32 scalar DEQUANTIZATION factor, or None).
  Static metadata (pytree aux data): `format`, `element_format`, `shape` (logical shape of
  x), `axis` (non-negative), `block_shape`, `scale_mode` (the formats that have scale modes:
  MX and blockwise; None otherwise), `hadamard` (HadamardSpec or None).

  `scales` has x's shape with the blocked axis replaced by ceil(length / block); for a 2D
  block_shape (tiles: (16, 16), (128, 128)) the last two axes are replaced by their tile
  counts.

  Under jax.vmap the metadata describes ONE example: a QuantizedArray returned by
  jax.vmap(quantize) must be consumed inside jax.vmap too (dequantize checks the leaves
  against the metadata and raises ValueError otherwise).
  """

  def __init__(self, data, scales, tensor_scale, *, format: str, element_format: str,
               shape: tuple[int, ...], axis: int, block_shape: tuple[int, ...] | None,
               scale_mode: str | None, hadamard: HadamardSpec | None):
    self.data = data
    self.scales = scales
    self.tensor_scale = tensor_scale
    self.format = format
    self.element_format = element_format
    self.shape = tuple(shape)
    self.axis = axis
    self.block_shape = block_shape
    self.scale_mode = scale_mode
    self.hadamard = hadamard

  @property
  def ndim(self) -> int:
    return len(self.shape)

  def _aux(self):
    return (self.format, self.element_format, self.shape, self.axis, self.block_shape,
            self.scale_mode, self.hadamard)

  def tree_flatten(self):
    return (self.data, self.scales, self.tensor_scale), self._aux()

  @classmethod
  def tree_unflatten(cls, aux, children):
    fmt, elem, shape, axis, block_shape, scale_mode, had = aux
    return cls(*children, format=fmt, element_format=elem, shape=shape, axis=axis,
               block_shape=block_shape, scale_mode=scale_mode, hadamard=had)

  def dequantize(self, dtype=jnp.float32, *, unrotate: bool = False) -> jax.Array:
    """See `fp8lab.dequantize`."""
    return dequantize(self, dtype, unrotate=unrotate)

  def codes(self) -> jax.Array:
    """The unpacked element codes (uint8; uint16 bit patterns for f16/bf16), x's shape."""
    return unpack(self.data, self.element_format, self.shape[self.axis], self.axis)

  def __repr__(self) -> str:
    def leaf(a):
      if a is None:
        return "None"
      return f"{jnp.dtype(a.dtype).name}{list(a.shape)}"
    parts = [f"format={self.format!r}", f"shape={self.shape}", f"axis={self.axis}"]
    if self.block_shape is not None:
      parts.append(f"block_shape={self.block_shape}")
    if self.scale_mode is not None:
      parts.append(f"scale_mode={self.scale_mode!r}")
    if self.hadamard is not None:
      parts.append(f"hadamard={self.hadamard}")
    parts += [f"data={leaf(self.data)}", f"scales={leaf(self.scales)}",
              f"tensor_scale={leaf(self.tensor_scale)}"]
    return f"QuantizedArray({', '.join(parts)})"


# ----------------------------------------------------------------------------------------
# Argument checks (before any tracing).

def _normalize_axis(axis, ndim: int) -> int:
  if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
    raise ValueError(f"axis must be an int, got {axis!r}")
  if not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis} is out of range for an array with {ndim} dimensions")
  return int(axis) % ndim


def _check_block_shape(qf: QuantizedFormat, block_shape, ndim: int, axis: int):
  if block_shape is None:
    return qf.block_shape
  try:
    block_shape = tuple(int(b) for b in block_shape)
  except (TypeError, ValueError):
    raise ValueError(f"block_shape must be a tuple of ints, got {block_shape!r}") from None
  if not qf.allows_block_shape(block_shape):
    raise ValueError(f"block_shape {block_shape} is not valid for {qf.name!r}; allowed: "
                     f"{qf.allowed_block_shapes()}")
  if len(block_shape) == 2:
    if ndim < 2:
      raise ValueError(f"{qf.name} block_shape {block_shape} tiles the last two axes; x "
                       "needs >= 2")
    if axis < ndim - 2:
      raise ValueError(f"{qf.name} with block_shape {block_shape} packs one of the last two "
                       f"axes; got axis {axis} of {ndim}")
  return block_shape


def _check_hadamard(hadamard_arg) -> HadamardSpec | None:
  if hadamard_arg is None or isinstance(hadamard_arg, HadamardSpec):
    return hadamard_arg
  if isinstance(hadamard_arg, (int, np.integer)) and not isinstance(hadamard_arg, bool):
    return HadamardSpec(int(hadamard_arg))
  raise ValueError(f"hadamard must be None, a block size or a HadamardSpec, got "
                   f"{hadamard_arg!r}")


def quantize(x, fmt: str, *, axis: int = -1, scale_mode: str | None = None,
             block_shape: tuple[int, ...] | None = None, rounding: str = "nearest",
             key=None, hadamard: int | HadamardSpec | None = None, scale=None,
             margin: int = 0, sr_bits: int = 8) -> QuantizedArray:
  """Quantizes x to one of fp8lab's formats (the golden model).

  Args:
    x: float32, bfloat16 or float16 array with at least one axis (16-bit inputs are widened
      to float32 exactly, on their bit patterns: the same bits on every backend).
    fmt: "e4m3", "e5m2", "mxfp8", "mxfp8_e5m2", "mxfp4", "nvfp4", "e4m3_block",
      "e5m2_block", "f16" or "bf16" (the records of fp8lab.formats.QUANTIZED).
    axis: the blocked and packed axis.
    scale_mode: None for the format's default (its registry record's scale_modes[0]).
      MX formats: "floor" (the OCP spec, the default), "ceil", "even" or "rceil"
      (docs/numerics.md section 4); blockwise formats: "exact" (the default) or "pow2"
      (section 8b). Other formats have no scale rule and take None only; the result's
      scale_mode is the mode used (None for them).
    block_shape: None for the format's default; nvfp4 also takes (16, 16) (16x16 tiles of
      the last two axes, Transformer Engine's weight scaling; `axis` must be one of them);
      e4m3_block / e5m2_block take (128,) (the default), any (b,) with b >= 1 (a head
      dimension, say) and (128, 128) (tiles of the last two axes).
    rounding: "nearest" (ties to even) or "stochastic" (needs `key`). Stochastic rounding
      applies to the element conversion only (scales stay deterministic): element at flat
      row-major index i of x's logical shape draws
      `fp8lab.random_bits(key, x.shape)[i]` and rounds with its top `sr_bits` bits
      (docs/numerics.md section 6) the same scaled float32 value that nearest-even rounding
      would round (MX: x * 2^-s; nvfp4: fl(x * enc_b); e4m3/e5m2 and blockwise:
      fl(x * scale)), then saturates. With a Hadamard rotation the index is that of the
      rotated element (same shape). Not available for "f16"/"bf16".
    key: threefry key for stochastic rounding.
    hadamard: None, a block size (16/32/64/128, no signs) or a HadamardSpec. x is rotated
      along `axis` (numerics/hadamard.py) before any amax is taken; the result records the
      spec and dequantizes to the ROTATED values unless `unrotate=True`.
    scale: "e4m3"/"e5m2": the QUANTIZATION factor to use as is (float32 scalar, e.g.
      `DelayedScaling.scale`); "nvfp4": its tensor-level S_enc, used as is (S_dec =
      fl(1 / S_enc); e.g. the scale of a `DelayedScaling.create("nvfp4")` state); None means
      current scaling from this tensor's amax. Other formats take None.
    margin: "e4m3"/"e5m2" current scaling only: scale = fp8_max / amax / 2^margin.
    sr_bits: random bits per element for stochastic rounding (1..24, default 8).

  Semantics per format (all float32 steps exact IEEE float32):
    MX: per block of 32, amax = max |x|, E8M0 code from `scales.mx_scale_codes`; element
      codes = saturating RNE (or stochastic) encoding of x * 2^-s. A zero block has scale
      code 0x00 and zero codes (-0 keeps its sign code). A block with any NaN or +-Inf has
      scale code 0xFF and all element codes 0: it dequantizes to NaN entirely.
    nvfp4: docs/numerics.md section 5 step by step: amax is the largest FINITE |x| of the whole
      tensor (an all-zero tensor has S_enc = 1, scales 0, zero codes), unless `scale` gives
      S_enc; a block (or tile)
      that holds a NaN or +-Inf gets scale code 0x7F (E4M3 NaN) and zero element codes, so
      it dequantizes to NaN, like MX; the other blocks are unaffected. A block whose scale
      rounds to 0 has enc_b = FLT_MAX and dequantizes to zeros.
    e4m3_block/e5m2_block (docs/numerics.md section 8b): per block (or tile), amax over its
      FINITE elements, scale = `scales.block_scales` (fl(fp8_max / amax), FLT_MAX where
      that overflows, 1.0 for a block without a finite nonzero element; "pow2" clears its
      mantissa bits); codes = saturating encoding of fl(x * scale) with the e4m3/e5m2 rules
      below (NaN -> the positive NaN code, +-Inf -> +-max); scales = float32 fl(1 / scale).
    e4m3/e5m2: scale = `scales.current_scale(tensor_amax(x), fmt, margin)` unless given
      (amax over finite values; 1.0 for an all-zero or all-non-finite tensor; FLT_MAX when
      fp8_max / amax overflows); codes = saturating encoding of fl(x * scale): +-Inf and
      overflow become +-max finite (also for e5m2); a NaN becomes the POSITIVE NaN code
      (e4m3 0x7F, e5m2 0x7E) whatever its sign, because the float32 product yields the
      canonical NaN, as on NVIDIA GPUs; tensor_scale = fl(1 / scale). A zero tensor gives
      zero codes (-0 keeps its sign) and tensor_scale 1.
    f16/bf16: the nearest-even cast of x on bit patterns, `numerics.bits.convert` (float16
      overflow -> +-Inf; an input of the target dtype keeps its exact bits; a NaN keeps its
      sign, with numpy's float16 / ml_dtypes' bfloat16 payload rule), two per word, no scale.

  Returns:
    a QuantizedArray (see its docstring for the layout).

  Raises:
    ValueError: unknown format (lists the valid ones), bad axis, block_shape, scale_mode,
      rounding, hadamard, margin, or a missing key; TypeError: x not float32/bf16/f16.
  """
  qf = get_quantized_format(fmt)
  fmt, kind = qf.name, qf.scaling
  x = as_float_input(x, "quantize")
  if x.ndim == 0:
    raise ValueError("quantize needs an array with at least one axis")
  axis = _normalize_axis(axis, x.ndim)
  block_shape = _check_block_shape(qf, block_shape, x.ndim, axis)
  if scale_mode is None:
    scale_mode = qf.scale_modes[0] if qf.scale_modes else None
  elif scale_mode not in qf.scale_modes:
    if qf.scale_modes:
      raise ValueError(f"scale_mode for {fmt!r} must be one of {qf.scale_modes} (None: "
                       f"{qf.scale_modes[0]!r}), got {scale_mode!r}")
    raise ValueError(f"{fmt!r} has no scale_mode (pass None); got {scale_mode!r}")
  if rounding == "stochastic" and not qf.stochastic_rounding:
    raise ValueError(f"{fmt!r} is a nearest-even cast; stochastic rounding is for the "
                     "e4m3/e5m2/e2m1 element formats")
  check_rounding(rounding, key, sr_bits)
  if kind not in ("tensor", "nvfp4") and scale is not None:
    raise ValueError(f"scale is only for the per-tensor formats 'e4m3'/'e5m2' and for "
                     f"'nvfp4' (its S_enc), not {fmt!r}")
  if kind != "tensor" and margin != 0:
    raise ValueError(f"margin is only for the per-tensor formats 'e4m3'/'e5m2', not {fmt!r}")
  margin = sc._check_margin(margin)
  if scale is not None and margin != 0:
    raise ValueError("a given scale is used as is; margin applies to current scaling only")
  if scale is not None and jnp.size(scale) != 1:
    raise ValueError(f"scale must be a scalar, got shape {jnp.shape(scale)}")
  spec = _check_hadamard(hadamard)
  if spec is not None and x.shape[axis] % spec.block:
    raise ValueError(f"the length {x.shape[axis]} of axis {axis} is not a multiple of the "
                     f"Hadamard block {spec.block}")

  meta = dict(format=fmt, element_format=qf.element.name, shape=x.shape, axis=axis,
              block_shape=block_shape, scale_mode=scale_mode,
              hadamard=spec)
  data, scales, tensor_scale = _quantize_leaves(
      x, key, None if scale is None else sc.float_of(sc.bits_of(scale)), **{
          k: meta[k] for k in ("format", "axis", "block_shape", "scale_mode", "hadamard")},
      rounding=rounding, margin=margin, sr_bits=sr_bits)
  return QuantizedArray(data, scales, tensor_scale, **meta)


@functools.partial(jax.jit, static_argnames=("format", "axis", "block_shape", "scale_mode",
                                             "hadamard", "rounding", "margin", "sr_bits"))
def _quantize_leaves(x, key, scale, *, format, axis, block_shape, scale_mode, hadamard,
                     rounding, margin, sr_bits):
  qf = get_quantized_format(format)
  elem, kind = qf.element, qf.scaling
  elem_name = elem.name
  if hadamard is not None:
    x = _rotate(x, hadamard, axis, inverse=False)
  if kind == "none":
    codes = lax.bitcast_convert_type(convert(x, elem.dtype), jnp.uint16)
    return pack(codes, elem_name, axis), None, None
  bits = sc.bits_of(x)
  rbits = None
  if rounding == "stochastic":
    rbits = fp8_random.random_bits(key, x.shape)
  if kind == "tensor":
    if scale is None:
      scale_bits = sc._scale_from_amax_bits(sc.finite_amax_bits(bits), elem.max_finite, margin,
                                            sc.ONE_BITS)
    else:
      scale_bits = sc.bits_of(scale.reshape(()))
    codes = encode_bits(sc.f32_mul(bits, scale_bits), elem, saturate=True,
                        random_bits=rbits, sr_bits=sr_bits)
    tensor_scale = sc.float_of(sc.f32_div(sc.ONE_BITS, scale_bits))
    return pack(codes, elem_name, axis), None, tensor_scale
  mag = bits & _U(0x7FFFFFFF)
  if kind == "block":                                     # docs/numerics.md section 8b
    # Like per-tensor scaling: the amax skips NaN and +-Inf, which the encode handles.
    finite_mag = jnp.where(mag >= _U(0x7F800000), _U(0), mag)
    scale, scale_inv = sc.block_scales(_block_reduce_max(finite_mag, axis, block_shape), elem,
                                       scale_mode)
    codes = encode_bits(sc.f32_mul(bits, _expand(scale, axis, block_shape, x.shape)), elem,
                        saturate=True, random_bits=rbits, sr_bits=sr_bits)
    return pack(codes, elem_name, axis), sc.float_of(scale_inv), None
  # MX / nvfp4: a NaN or Inf anywhere in a block marks it (its magnitude bits are the
  # largest), so the block max of the magnitude bits serves both amax and that test.
  block_max = _block_reduce_max(mag, axis, block_shape)
  nonfinite_block = block_max >= _U(0x7F800000)
  if kind == "mx":
    scale_codes = sc.mx_scale_codes(block_max, elem, scale_mode)
    s = sc.mx_shared_exponent(jnp.minimum(block_max, sc.FLT_MAX_BITS), elem, scale_mode)
    scaled = sc.ldexp_bits(bits, _expand(-s, axis, block_shape, x.shape))
    tensor_scale = None
  else:                                                   # nvfp4, docs/numerics.md section 5
    if scale is None:
      s_enc, s_dec = sc.nvfp4_tensor_scales(sc.finite_amax_bits(bits))
    else:                                                 # a given S_enc, used as is
      s_enc = sc.bits_of(scale.reshape(()))
      s_dec = sc.f32_div(sc.ONE_BITS, s_enc)
    scale_codes = sc.nvfp4_block_scale_codes(block_max, s_enc)
    scale_codes = jnp.where(nonfinite_block, jnp.uint8(qf.scale_format.nan_code), scale_codes)
    enc_b = sc.nvfp4_block_encode_factor(scale_codes, s_dec)
    scaled = sc.f32_mul(bits, _expand(enc_b, axis, block_shape, x.shape))
    tensor_scale = sc.float_of(s_dec)
  codes = encode_bits(scaled, elem, saturate=True, random_bits=rbits, sr_bits=sr_bits)
  codes = jnp.where(_expand(nonfinite_block, axis, block_shape, x.shape), jnp.uint8(0), codes)
  return pack(codes, elem_name, axis), scale_codes, tensor_scale


def _rotate(x, spec: HadamardSpec, axis: int, inverse: bool):
  return hadamard(x, spec.block, signs=spec.sign_arg(), axis=axis, inverse=inverse)


def _block_reduce_max(mag, axis: int, block_shape):
  """Max over each block; zero padding (which changes no max of magnitudes)."""
  if len(block_shape) == 2:
    rows, cols = mag.shape[-2:]
    br, bc = block_shape
    nr, nc = -(-rows // br), -(-cols // bc)
    pad = [(0, 0)] * (mag.ndim - 2) + [(0, nr * br - rows), (0, nc * bc - cols)]
    tiles = jnp.pad(mag, pad).reshape(mag.shape[:-2] + (nr, br, nc, bc))
    return jnp.max(tiles, axis=(-3, -1))
  (b,) = block_shape
  m = jnp.moveaxis(mag, axis, -1)
  n = m.shape[-1]
  nb = -(-n // b)
  m = jnp.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, nb * b - n)])
  blocks = jnp.max(m.reshape(m.shape[:-1] + (nb, b)), axis=-1)
  return jnp.moveaxis(blocks, -1, axis)


def _expand(per_block, axis: int, block_shape, shape):
  """Broadcasts a per-block array back to one value per element of `shape`."""
  if len(block_shape) == 2:
    out = jnp.repeat(jnp.repeat(per_block, block_shape[0], axis=-2), block_shape[1], axis=-1)
    return out[..., :shape[-2], :shape[-1]]
  out = jnp.repeat(per_block, block_shape[0], axis=axis)
  return lax.slice_in_dim(out, 0, shape[axis], axis=axis)


# ----------------------------------------------------------------------------------------
# Dequantization.

def _check_leaves(q: QuantizedArray):
  elem = get_format(q.element_format)
  want = list(q.shape)
  want[q.axis] = -(-q.shape[q.axis] // elem.per_word)
  problems = []
  if tuple(q.data.shape) != tuple(want):
    problems.append(f"data has shape {tuple(q.data.shape)}, metadata implies {tuple(want)}")
  if q.scales is not None:
    want_s = scales_shape(q.shape, q.axis, q.block_shape)
    if tuple(q.scales.shape) != want_s:
      problems.append(f"scales have shape {tuple(q.scales.shape)}, metadata implies {want_s}")
  want_dtype = get_quantized_format(q.format).scale_dtype
  if q.scales is not None and want_dtype is not None and q.scales.dtype != want_dtype:
    raise ValueError(f"{q.format} scales must be {want_dtype}, got {q.scales.dtype}")
  if problems:
    raise ValueError("QuantizedArray leaves do not match its metadata (" + "; ".join(problems)
                     + "). A QuantizedArray made under jax.vmap describes one example: "
                     "use it under jax.vmap too.")


def scales_shape(shape, axis: int, block_shape) -> tuple[int, ...]:
  """Shape of the block scales of an array of `shape` blocked along non-negative `axis`:
  the blocked axis becomes its block count; 2D tiles block the last two axes."""
  shape = list(shape)
  if len(block_shape) == 2:
    shape[-2] = -(-shape[-2] // block_shape[0])
    shape[-1] = -(-shape[-1] // block_shape[1])
  else:
    shape[axis] = -(-shape[axis] // block_shape[0])
  return tuple(shape)


def dequantize(q: QuantizedArray, dtype=jnp.float32, *, unrotate: bool = False) -> jax.Array:
  """The values a QuantizedArray stands for.

  Computed exactly in float32 (IEEE on bit patterns), then rounded to `dtype` (float32,
  bfloat16 or float16) by the nearest-even cast on bit patterns of `numerics.bits.convert`
  (the same bits on every backend, NaN included):
    e4m3/e5m2: fl(decode(code) * tensor_scale).
    MX: decode(code) * 2^(scale_code - 127), exact (subnormal results included); scale code
      0xFF makes the whole block NaN. A value of 2^128 or more becomes +-Inf: with "ceil",
      "even" or "rceil" a block whose amax is within an element rounding of 2^128 can
      round up to it (floor cannot).
    nvfp4: fl(decode(code) * fl(decode_e4m3(scale_code) * S_dec)); an E4M3 NaN scale makes
      the block NaN.
    e4m3_block/e5m2_block: fl(decode(code) * scale_inv), scale_inv the block's float32
      scale (NaN codes give NaN, e5m2 Inf codes +-Inf).
    f16/bf16: the stored values (their exact bits when `dtype` is the stored dtype).
  Hadamard-rotated arrays give the ROTATED values, unless unrotate=True, which applies the
  inverse rotation (in float32) before the cast to `dtype`.
  """
  if not isinstance(q, QuantizedArray):
    raise TypeError(f"dequantize takes a QuantizedArray, got {type(q).__name__}")
  dtype = jnp.dtype(dtype)
  if dtype not in INPUT_DTYPES:
    raise TypeError(f"dequantize output dtype must be float32, bfloat16 or float16, got {dtype}")
  if unrotate not in (True, False):
    raise ValueError(f"unrotate must be a bool, got {unrotate!r}")
  _check_leaves(q)
  return _dequantize_leaves(q.data, q.scales, q.tensor_scale, aux=q._aux(), dtype=dtype,
                            unrotate=bool(unrotate) and q.hadamard is not None)


@functools.partial(jax.jit, static_argnames=("aux", "dtype", "unrotate"))
def _dequantize_leaves(data, scales, tensor_scale, *, aux, dtype, unrotate):
  fmt, elem_name, shape, axis, block_shape, _, spec = aux
  kind = get_quantized_format(fmt).scaling
  codes = unpack(data, elem_name, shape[axis], axis)
  if kind == "none":
    stored = lax.bitcast_convert_type(codes, get_format(elem_name).dtype)
    if not unrotate:
      return convert(stored, dtype)                   # the stored dtype: its exact bits
    values = convert(stored, jnp.float32)
  else:
    elem_bits = sc.bits_of(decode(codes, elem_name))
    if kind == "tensor":
      out = sc.f32_mul(elem_bits, sc.bits_of(tensor_scale))
    elif kind == "block":
      out = sc.f32_mul(elem_bits, _expand(sc.bits_of(scales), axis, block_shape, shape))
    elif kind == "mx":
      exponent = scales.astype(jnp.int32) - E8M0.bias
      out = sc.ldexp_bits(elem_bits, _expand(exponent, axis, block_shape, shape))
      nan_block = _expand(scales == jnp.uint8(E8M0.nan_code), axis, block_shape, shape)
      out = jnp.where(nan_block, _U(0x7FC00000), out)
    else:
      factor = sc.nvfp4_block_decode_factor(scales, sc.bits_of(tensor_scale))
      out = sc.f32_mul(elem_bits, _expand(factor, axis, block_shape, shape))
    values = sc.float_of(out)
  if unrotate:
    values = _rotate(values, spec, axis, inverse=True)
  return convert(values, dtype)
