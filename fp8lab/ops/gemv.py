"""gemv_packed: y = x @ dequantize(W).T over packed weights, in four implementations.

"pallas" (fp8lab/kernels/gemv/), "xla" (jnp over the same packed words bitcast to XLA's
float8 / float4 dtypes, a float32 dot), "xla_parts" (the same words dequantized exactly to
bfloat16 and x as exact bfloat16 parts: bfloat16 dots with float32 accumulation, the form of
XLA's own float8-weight GEMV) and "reference" (the golden model), dispatched by the
scaffolding of fp8lab/ops/_op.py.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from fp8lab.formats import get_quantized_format
from fp8lab.kernels import gemv as gemv_kernel
from fp8lab.kernels.attention import split_bf16
from fp8lab.kernels.gemv import dispatch as gemv_dispatch
from fp8lab.numerics.codec import as_float_input
from fp8lab.numerics.hadamard import hadamard
from fp8lab.ops import _op
from fp8lab.ops._xla import per_element, xla_values
from fp8lab.quantized import QuantizedArray

__all__ = ["gemv_packed"]


def gemv_packed(w, x, *, implementation: str | None = None, interpret: bool = False,
                fp8_decode: str | None = None):
  """y = x @ dequantize(w).T: a matrix-vector product over packed quantized weights.

  Args:
    w: a QuantizedArray of logical shape (n_out, k) quantized along its last axis, in any
      format ("e4m3", "e5m2", "mxfp8", "mxfp8_e5m2", "mxfp4", "nvfp4" with 1D or 16x16
      scales, "f16", "bf16"; the blockwise "e4m3_block" / "e5m2_block", with any block
      shape, by the "xla" and "reference" paths only). Hadamard-rotated weights are
      supported: x is rotated the same way first (the rotation is orthogonal, so the
      product is that of the unrotated operands up to rounding).
    x: (k,) or (..., k) float32, bfloat16 or float16 (a batch of tokens).
    implementation: None (on a GPU the fastest of the Pallas kernel, "xla" and "xla_parts"
      as measured for this device, layout, shape and batch: the table of
      fp8lab/kernels/gemv/dispatch.py,
      the kernel where it has no entry, and the kernel whenever fp8_decode is given; the
      reference elsewhere; interpret=True: the kernel; for formats the kernel does not serve,
      fp8lab.kernels.gemv.serves_format: "xla" on a GPU, the reference elsewhere; the batch
      is x's rows as this call sees them, before a vmap folds its axis in), "pallas",
      "xla" (jnp: the packed words bitcast to XLA's float8 / float4 dtype, upcast and scaled
      in XLA's fusion, a float32 dot at HIGHEST precision), "xla_parts" (jnp: the words
      dequantized in XLA's fusion to bfloat16, exactly, with a per-tensor factor left for
      y, and x split into bfloat16 parts whose float32 sum is x, 1 for bfloat16 x, else 3;
      one bfloat16 dot with float32 accumulation over the stacked parts, the parts' results
      summed smallest first; formats whose values are bfloat16 numbers: e4m3, e5m2, mxfp8,
      mxfp8_e5m2, mxfp4, nvfp4, bf16; None picks it where the table does) or "reference"
      (golden-model dequantize + jnp.dot at HIGHEST precision). See fp8lab/ops/_op.py.
    interpret: run the Pallas kernel in interpret mode (CPU); implies the kernel (with
      implementation "xla" or "reference" it is an error).
    fp8_decode: how the kernel decodes e4m3 / e5m2 codes (elements, and NVFP4's E4M3
      block scales): None (see below), "native" or "integer". The same decoded values
      either way (see below).

  Returns:
    (..., n_out) in x's dtype, accumulated in float32 (the kernel's order of operations
    and error bound: fp8lab/kernels/gemv/kernel.py; measured errors: docs/gemv_kernel.md).

  Accuracy of the Pallas kernel: the products are exact and only the float32 additions
  round, so |y - y_exact| <= 2 (k + 7) u sum|w x| + u |y| (u = 2^-24; the factor 2 because
  the tensor cores' float32 accumulation truncates instead of rounding), with one
  limit of its float16 tensor-core operands: a float32 / bfloat16 x row is scaled so that
  its largest |x| is about 2^14 and split into two float16 parts, so its elements keep a
  relative error <= 2^-22 only down to 2^-17 max|x| and an absolute error <= 2^-38 max|x|
  below that (elements under ~2^-39 max|x| are lost). Only when the small elements carry
  the result (the large ones meet weights near zero) is this visible; it adds
  2^-38 max|x| sum|w| to the bound.
  float16 x, bf16 weights, the "xla" and the reference paths have no such term; the "xla"
  path's float32 dot has the reference's bound up to its order of additions. "xla_parts":
  exact products too (bfloat16 values times bfloat16 parts), float32 sums in the dot's
  order, two more for the parts and one for a per-tensor factor (nvfp4's S_dec multiplies
  y, not each block scale as dequantize does): within 2 (k + 8) u sum|w x| + 2 u |y|; x
  elements below 2^-103 in magnitude keep only their top 8 significant bits (their low
  parts are float32 subnormals, which XLA flushes).

  Decoding e4m3 / e5m2 codes (the elements of formats "e4m3", "e5m2", "mxfp8",
  "mxfp8_e5m2", and the E4M3 block scales of "nvfp4"): on a GPU of compute capability
  >= 8.9 (Ada, Hopper and later) the kernel uses the GPU's fp8 -> float16 conversion (PTX
  cvt.rn.f16x2.e4m3x2 / .e5m2x2), fewer instructions than the integer decode it uses
  elsewhere (older GPUs, interpret mode); the same weight values, bit for bit, but the
  native planes pair the codes in another order, so the float32 sums may round
  differently (both within the bound above). fp8_decode="integer" / "native" forces
  either (native: an error on GPUs without it); with fp8_decode=None the environment
  variable FP8LAB_GEMV_NATIVE_FP8 can do the same ("0" / "1"; read at each
  call, under jax.jit when the caller is traced). e2m1 codes (mxfp4, nvfp4) always take an
  integer decode, written as inline PTX when compiled for a CUDA GPU.

  NaN / Inf: a NaN weight (e4m3 / e5m2 NaN code, MX scale 0xFF, NVFP4 NaN scale) makes its
  output row NaN for every x, as in the reference; Inf weights (e5m2) give +-Inf or NaN as
  float32 arithmetic does. NaN or Inf in x propagate as in a float32 dot product.

  Works under jax.jit, jax.vmap over x (and over w, one kernel per weight), and jax.grad
  with respect to x (the backward pass is the reference path: dx = g @ dequantize(w),
  rotated back for Hadamard weights). Not differentiable with respect to w.

  Raises:
    TypeError: w is not a QuantizedArray; x is not float32 / bfloat16 / float16.
    ValueError: w is not 2D or not quantized along its last axis; x's last dimension is
      not k; unknown implementation or fp8_decode (or FP8LAB_GEMV_NATIVE_FP8 value);
      "pallas" without a GPU and without interpret; "pallas" or interpret=True for a
      format the kernel does not serve; the native decode on a GPU without fp8 conversions.
  """
  x = _check_operands(w, x)
  if not gemv_kernel.serves_format(w.format):
    if implementation in _op.KERNEL_IMPLEMENTATIONS or (implementation is None
                                                         and interpret is True):
      raise ValueError(f"gemv_packed: the Pallas kernel does not serve {w.format!r} "
                       "weights; implementation 'xla' or 'reference' does (None picks 'xla' "
                       "on a GPU, 'reference' elsewhere, without interpret=True)")
    if implementation is None:
      implementation = "xla" if _op.on_gpu() else "reference"
  elif implementation is None and not interpret and fp8_decode is None and _op.on_gpu():
    implementation = _dispatched(w, x)
  implementation = _op.resolve_implementation("gemv_packed", implementation, interpret)
  # Native or integer fp8 decode (FP8LAB_GEMV_NATIVE_FP8 / the GPU), read here at each call
  # (a static argument below, so cached traces of either path stay apart).
  if fp8_decode not in gemv_kernel.FP8_DECODES:
    raise ValueError(f"fp8_decode must be one of {gemv_kernel.FP8_DECODES}, "
                     f"got {fp8_decode!r}")
  native = (implementation == "pallas"
            and gemv_kernel.native_fp8_requested(interpret, fp8_decode))
  return _gemv(implementation, interpret, native, w, x)


def _dispatched(w, x: jax.Array) -> str:
  """implementation=None on a GPU: the dispatch table's pick for this device, layout, shape,
  number of x rows and x dtype (fp8lab/kernels/gemv/dispatch.py; "pallas" where it has no entry,
  and where it picks "xla_parts" for a format that path does not take)."""
  n_out, k = w.shape
  batch = math.prod(x.shape[:-1])
  impl = gemv_dispatch.choose(gemv_dispatch.device_kind(),
                              gemv_dispatch.layout_of(w.format, w.block_shape), n_out, k, batch,
                              x_dtype=x.dtype)
  if impl == "xla_parts" and w.format not in PARTS_FORMATS:
    return gemv_dispatch.FALLBACK
  return impl


def _check_operands(w, x) -> jax.Array:
  """gemv_packed's checks of w and x, before anything is traced; x as a JAX array."""
  if not isinstance(w, QuantizedArray):
    raise TypeError(f"gemv_packed needs a fp8lab.QuantizedArray as w, got {type(w).__name__}")
  if len(w.shape) != 2:
    raise ValueError(f"gemv_packed needs a 2D weight (n_out, k), got shape {w.shape}")
  if w.axis != 1:
    raise ValueError("gemv_packed needs a weight quantized along its last axis (axis=-1), "
                     f"got axis={w.axis}")
  x = as_float_input(x, "gemv_packed")
  k = w.shape[1]
  if x.ndim < 1 or x.shape[-1] != k:
    raise ValueError(f"x's last dimension must be k={k} (w.shape={w.shape}), got x.shape={x.shape}")
  return x


def _rotate_x(w, x: jax.Array) -> jax.Array:
  """Applies w's Hadamard rotation to x (along its last axis); x unchanged without one."""
  if w.hadamard is None:
    return x
  spec = w.hadamard
  return hadamard(x.astype(jnp.float32), spec.block, signs=spec.sign_arg(), axis=-1)


def _reference(w, x: jax.Array) -> jax.Array:
  """Golden path: x (rotated like w) @ dequantize(w).T in float32 at HIGHEST precision."""
  xr = _rotate_x(w, x).astype(jnp.float32)
  wd = w.dequantize(jnp.float32)
  y = jnp.dot(xr, wd.T, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
  return y.astype(x.dtype)


# Formats whose values (without a per-tensor factor) are bfloat16 numbers: the "xla_parts"
# path's weights. e4m3 / e5m2 codes have <= 4 significant bits, e2m1 2, an E8M0 scale is a
# power of two and an E4M3 block scale <= 4 bits (e2m1 x E4M3: <= 6), bf16 is bf16.
PARTS_FORMATS = ("e4m3", "e5m2", "mxfp8", "mxfp8_e5m2", "mxfp4", "nvfp4", "bf16")


def _bf16_weight(w):
  """(values (n_out, k) bfloat16, factor float32 scalar or None): w's dequantized values are
  values * factor (nvfp4: up to the rounding of fl(s_e4m3 * S_dec)), values exact."""
  qf = get_quantized_format(w.format)
  n_out, k = w.shape
  if qf.scaling == "mx":
    # exact float32 products (the xla path's), each a bfloat16 number: the cast is exact
    return xla_values(w).astype(jnp.bfloat16), None
  elems = lax.bitcast_convert_type(w.data, qf.element.dtype)
  values = elems.reshape(n_out, -1)[:, :k]
  if qf.scaling == "nvfp4":
    s = per_element(w, lax.bitcast_convert_type(w.scales, qf.scale_format.dtype)
                    .astype(jnp.float32))
    return (values.astype(jnp.float32) * s).astype(jnp.bfloat16), w.tensor_scale
  return values.astype(jnp.bfloat16), w.tensor_scale if qf.scaling == "tensor" else None


def _bf16_parts(x: jax.Array) -> list[jax.Array]:
  """bfloat16 arrays whose float32 sum is x exactly (|x| >= 2^-103 or 0): x itself if it is
  bfloat16, else the three parts of kernels/attention's split_bf16 (cut with integer ops,
  so that XLA cannot fold the float round trips away)."""
  if x.dtype == jnp.bfloat16:
    return [x]
  return split_bf16(x.astype(jnp.float32))


def _xla_parts(w, x: jax.Array) -> jax.Array:
  """The "xla_parts" path: one bfloat16 dot over x's stacked parts (see gemv_packed)."""
  if w.format not in PARTS_FORMATS:
    raise ValueError(f"gemv_packed: implementation 'xla_parts' takes {PARTS_FORMATS} "
                     f"weights (bfloat16-exact values), got {w.format!r}")
  xr = _rotate_x(w, x) if w.hadamard is not None else x
  parts = _bf16_parts(xr)
  values, factor = _bf16_weight(w)
  stacked = jnp.stack(parts)                                      # (P, ..., k)
  y = lax.dot_general(stacked, values, (((stacked.ndim - 1,), (1,)), ((), ())),
                      preferred_element_type=jnp.float32)         # (P, ..., n_out)
  acc = y[-1]
  for i in range(len(parts) - 2, -1, -1):                         # smallest part first
    acc = acc + y[i]
  if factor is not None:
    acc = acc * factor
  return acc.astype(x.dtype)


def _xla(w, x: jax.Array) -> jax.Array:
  """The "xla" path: x (rotated like w) @ xla_values(w).T in float32 at HIGHEST precision."""
  xr = _rotate_x(w, x).astype(jnp.float32)
  y = jnp.dot(xr, xla_values(w).T, precision=lax.Precision.HIGHEST,
              preferred_element_type=jnp.float32)
  return y.astype(x.dtype)


def _pallas_2d(interpret: bool, native_fp8: bool, w, x2: jax.Array) -> jax.Array:
  plan = gemv_kernel.format_plan(w.format, w.element_format, w.block_shape,
                                 w.tensor_scale is not None, native_fp8=native_fp8,
                                 asm_e2m1=gemv_kernel.asm_e2m1_default(interpret))
  return gemv_kernel.gemv_pallas(w.data, w.scales, w.tensor_scale, x2, plan=plan,
                                 n_out=w.shape[0], k=w.shape[1], interpret=interpret)


@functools.lru_cache(maxsize=None)
def _batched_pallas(interpret: bool, native_fp8: bool):
  """The kernel on (B, k) x; a vmapped x is folded into B (one launch), a vmapped w runs one
  launch per weight (_op.fold_vmap)."""
  return _op.fold_vmap(functools.partial(_pallas_2d, interpret, native_fp8),
                       foldable=(False, True))


def _pallas(interpret: bool, native_fp8: bool, w, x: jax.Array) -> jax.Array:
  lead = x.shape[:-1]
  k, n_out = w.shape[1], w.shape[0]
  # A rotated x is no longer exactly representable in a 16-bit x dtype: it goes to the
  # kernel in float32 (split there into exact float16 or bfloat16 parts), rounded once at the end.
  x2 = _rotate_x(w, x).reshape(-1, k)
  if x2.shape[0] == 0:
    return jnp.zeros(lead + (n_out,), x.dtype)
  y = _batched_pallas(interpret, native_fp8)(w, x2)
  return y.reshape(lead + (n_out,)).astype(x.dtype)


def _forward(implementation: str, interpret: bool, native_fp8: bool, w, x: jax.Array):
  if implementation == "reference":
    return _reference(w, x)
  if implementation == "xla":
    return _xla(w, x)
  if implementation == "xla_parts":
    return _xla_parts(w, x)
  return _pallas(interpret, native_fp8, w, x)


def _reference_of(implementation, interpret, native_fp8, w, x):
  del implementation, interpret, native_fp8
  return _reference(w, x)


# Every implementation differentiates through the reference: dx = g @ dequantize(w)
# (rotated back for Hadamard weights); w gets no cotangent.
_gemv = _op.reference_vjp(_forward, _reference_of, n_static=3)
