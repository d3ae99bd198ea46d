"""quantize and quantize_with_amax: the golden model ("reference") and the fused Pallas kernel
("pallas", fp8lab/kernels/quantize/), dispatched by the scaffolding of fp8lab/ops/_op.py.

Both implementations give the same QuantizedArray byte for byte (codes, scales, tensor scale),
the same amax and the same DelayedScaling state; the tests compare them on raw bit patterns.
What the kernel serves is `kernel_serves`; `implementation=None` takes the kernel on a GPU only
where it serves the call and has been verified compiled (`_KERNEL_DEFAULT`), the golden model
elsewhere.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fp8lab import quantized as golden
from fp8lab.formats import get_quantized_format
from fp8lab.kernels import quantize as qkernel
from fp8lab.kernels.quantize import blockwise as qblockwise
from fp8lab.numerics import random as fp8_random
from fp8lab.numerics.codec import as_float_input
from fp8lab.numerics.hadamard import hadamard_signs
from fp8lab.numerics.scales import DelayedScaling, tensor_amax
from fp8lab.ops import _op
from fp8lab.quantized import QuantizedArray

__all__ = ["quantize", "quantize_with_amax", "QuantizeResult", "kernel_serves"]

# quantize has no "xla" implementation: XLA's own scale-clip-cast neither packs nor rounds the
# way the golden model does (it is the benchmark's baseline instead).
_IMPLEMENTATIONS = (None, *_op.KERNEL_IMPLEMENTATIONS, "reference")

# Scaling kinds whose default on a GPU is the kernel, wherever it serves the call: every
# kind's compiled tests passed on the H200 (2026-12-02, docs/quantize_kernel.md section 3),
# and the kernel is faster than the jitted golden model in every benchmark row there.
_KERNEL_DEFAULT: frozenset[str] = frozenset({"tensor", "mx", "nvfp4", "block"})


class QuantizeResult(NamedTuple):
  """What quantize_with_amax returns.

  q: the QuantizedArray of x; q_t: that of x.T (transpose=True) or None; amax: float32 scalar,
  `fp8lab.tensor_amax(x)` (largest finite |x|); scaling: the DelayedScaling state after this
  step when one was given (its history holds amax at index 0, its scale is the next one), else
  None."""
  q: QuantizedArray
  q_t: QuantizedArray | None
  amax: jax.Array
  scaling: DelayedScaling | None


def quantize(x, fmt: str, *, axis: int = -1, scale_mode: str | None = None,
             block_shape: tuple[int, ...] | None = None, rounding: str = "nearest",
             key=None, hadamard=None, scale=None, margin: int = 0, sr_bits: int = 8,
             implementation: str | None = None, interpret: bool = False) -> QuantizedArray:
  """Quantizes x to one of fp8lab's formats.

  The arguments before `implementation` and the result are those of the golden model,
  `fp8lab.quantized.quantize` (its docstring gives every format's rules); the result is the
  same QuantizedArray, byte for byte, whichever implementation runs.

  Args:
    implementation: None (the Pallas kernel on a GPU where it serves the arguments and is
      the verified default, the golden model otherwise), "pallas" (the fused kernel; an error
      for arguments it does not serve, see `kernel_serves`) or "reference" (the golden model).
    interpret: run the Pallas kernel in interpret mode (CPU); implies the kernel.

  Raises:
    ValueError / TypeError: the golden model's checks (format, axis, block_shape, scale_mode,
      rounding, key, hadamard, scale, margin, x's dtype), before anything is traced; an
      unknown implementation; "pallas" for arguments the kernel does not serve.
  """
  kw = dict(axis=axis, block_shape=block_shape, rounding=rounding, key=key, hadamard=hadamard,
            scale=scale, margin=margin, sr_bits=sr_bits)
  if scale_mode is not None:                 # None: the format's default scale mode
    kw["scale_mode"] = scale_mode
  return quantize_with_amax(x, fmt, implementation=implementation, interpret=interpret,
                            _caller="quantize", **kw).q


def quantize_with_amax(x, fmt: str, *, scaling=None, transpose: bool = False,
                       implementation: str | None = None, interpret: bool = False,
                       _caller: str = "quantize_with_amax", **quantize_kwargs) -> QuantizeResult:
  """Quantizes x and reduces its amax in one pass; optionally x.T too, and a delayed-scaling step.

  Args:
    x: float32 / bfloat16 / float16, 2D (or with batched leading dims when transpose=False).
    fmt: a format of `fp8lab.QUANTIZED_FORMATS`.
    scaling: how the per-tensor scale is chosen, for "e4m3" / "e5m2" (the quantization factor)
      and "nvfp4" (its S_enc):
        None: current scaling from this tensor's amax (two passes over x: amax, then codes);
        a float32 scalar: the scale, used as is;
        a `fp8lab.DelayedScaling` of the same format: quantizes with `scaling.scale`, then
          folds this step's amax into the history and computes the next scale
          (`DelayedScaling.update`), returned as `QuantizeResult.scaling`.
      Formats with block scales only (MX, blockwise FP8) or none (f16, bf16) take None.
    transpose: also quantize x.T (`q_t`): the operand of the other GEMM, blocks along x's first
      axis. x must be 2D, quantized along its last axis.
    implementation, interpret: as for `quantize`.
    **quantize_kwargs: `quantize`'s other arguments (axis, scale_mode, block_shape, rounding,
      key, hadamard, margin, sr_bits); `scale` is `scaling`'s.

  Returns:
    QuantizeResult(q, q_t, amax, scaling): q == quantize(x, fmt, scale=<the scale used>,
    **quantize_kwargs), q_t == quantize(x.T, ...) or None, amax == tensor_amax(x), scaling the
    new DelayedScaling state or None.

  Raises:
    TypeError: x not float32 / bfloat16 / float16; scaling of the wrong type.
    ValueError: everything `quantize` checks; transpose with x not 2D or axis not the last;
      a scaling for a format without a per-tensor scale; a DelayedScaling of another format;
      an unknown implementation, or "pallas" for arguments the kernel does not serve.
  """
  qf = get_quantized_format(fmt)
  x = as_float_input(x, _caller)
  if _caller == "quantize_with_amax" and "scale" in quantize_kwargs:
    raise ValueError("quantize_with_amax takes its scale through `scaling`, not `scale`")
  if not isinstance(transpose, bool):
    raise TypeError(f"transpose must be a bool, got {transpose!r}")
  state = None
  if scaling is not None:
    if qf.scaling not in ("tensor", "nvfp4"):
      raise ValueError(f"{qf.name!r} has no per-tensor scale: scaling must be None, got "
                       f"{type(scaling).__name__}")
    if isinstance(scaling, DelayedScaling):
      if scaling.format != qf.name:
        raise ValueError(f"a DelayedScaling of format {scaling.format!r} cannot scale "
                         f"{qf.name!r}; make it with DelayedScaling.create({qf.name!r}, ...)")
      _check_state(scaling)
      state = scaling
      quantize_kwargs["scale"] = scaling.scale
    elif isinstance(scaling, (jax.Array, np.ndarray, float, np.floating)):
      quantize_kwargs["scale"] = jnp.asarray(scaling, jnp.float32)
    else:
      raise TypeError("scaling must be None, a float32 scalar or a fp8lab.DelayedScaling, got "
                      f"{type(scaling).__name__}")
  if transpose:
    if x.ndim != 2:
      raise ValueError(f"transpose=True needs a 2D x, got shape {x.shape}")
    if quantize_kwargs.get("axis", -1) not in (-1, 1):
      raise ValueError("transpose=True quantizes x along its last axis and x.T along its "
                       f"last; axis must be -1, got {quantize_kwargs['axis']!r}")
  meta, impl = _plan(_caller, x, qf.name, implementation, interpret, transpose, quantize_kwargs)
  if impl == "reference":
    q = golden.quantize(x, qf.name, **quantize_kwargs)
    q_t = golden.quantize(x.T, qf.name, **quantize_kwargs) if transpose else None
    amax = tensor_amax(x)
  else:
    # a DelayedScaling's update is folded into the launch (its last program)
    q, q_t, amax, folded = _kernel(x, meta, transpose, quantize_kwargs, interpret, state)
  new_state = None
  if state is not None and impl == "reference":
    new_state = state.update(amax)
  elif state is not None:
    new_state = dataclasses.replace(state, amax_history=folded[0], scale=folded[1])
  return QuantizeResult(q, q_t, amax, new_state)


def quantize_rows_into(x, dest, data, scales, fmt: str, *, implementation: str | None = None,
                       interpret: bool = False, _caller: str = "quantize_rows_into",
                       **quantize_kwargs):
  """(data, scales) with row dest[i] replaced by row i of quantize(x, fmt, axis=-1,
  **quantize_kwargs)'s leaves: a KV cache's new tokens written into its arrays.

  x (R, C) float; dest (R,) int32, rows outside [0, N) dropped; data (N, words) uint32 and
  scales (N, blocks) (None for per-tensor formats): the flat rows of a QuantizedArray's
  leaves quantized along the last axis with 1D blocks. The kernel (implementation as for
  `quantize`) quantizes and writes the rows in one launch, in place where XLA may alias the
  arrays (donated); the reference quantizes with the golden model and scatters. Both give
  the same bytes. Arguments are assumed checked by the caller (ops/attention.py)."""
  qf = get_quantized_format(fmt)
  meta, impl = _plan(_caller, x, qf.name, implementation, interpret, False, quantize_kwargs)
  if impl == "reference":
    q = golden.quantize(x, qf.name, **quantize_kwargs)
    return (scatter_rows(data, dest, q.data),
            None if scales is None else scatter_rows(scales, dest, q.scales))
  res = _launch(x, meta, False, quantize_kwargs, interpret, dest=dest, into=(data, scales))
  return res.data, res.scales


def scatter_rows(dst, dest, src):
  """dst (N, ...) with row dest[i] replaced by src[i] (cast to dst's dtype); rows whose dest
  lies outside [0, N) are dropped (a negative one too: jnp would wrap it)."""
  rows = jnp.where(dest < 0, dst.shape[0], dest)
  return dst.at[rows].set(src.astype(dst.dtype), mode="drop")


def _check_state(state: DelayedScaling) -> None:
  """A DelayedScaling whose leaves are not a float32 history (n,) and a float32 scalar scale
  (one built by hand, or one made under jax.vmap used outside it) is a ValueError."""
  h, s = state.amax_history, state.scale
  if (jnp.ndim(h) != 1 or jnp.shape(h)[0] < 1 or jnp.result_type(h) != jnp.float32
      or jnp.ndim(s) != 0 or jnp.result_type(s) != jnp.float32):
    raise ValueError("the DelayedScaling state needs a float32 amax_history of shape (n,), "
                     f"n >= 1, and a float32 scalar scale; got amax_history "
                     f"{jnp.result_type(h)}{list(jnp.shape(h))}, scale "
                     f"{jnp.result_type(s)}{list(jnp.shape(s))}")


def _plan(caller: str, x, fmt: str, implementation, interpret: bool, transpose: bool,
          kw: dict) -> tuple[QuantizedArray, str]:
  """(the call's abstract QuantizedArray, the implementation it runs). The golden model's
  checks run on shapes only: they raise before anything is computed, and the abstract result
  carries the static metadata that both implementations' results share."""
  static = {k: v for k, v in kw.items() if k not in ("key", "scale")}
  meta = jax.eval_shape(functools.partial(_golden_leaves, fmt=fmt, **static),
                        x, kw.get("key"), kw.get("scale"))
  return meta, _resolve(caller, implementation, interpret, meta, x, transpose, kw)


def _golden_leaves(x, key, scale, *, fmt, **kw):
  kw = dict(kw, key=key, scale=scale)
  return golden.quantize(x, fmt, **kw)


def kernel_serves(meta: QuantizedArray, *, ndim: int, transpose: bool,
                  has_scale: bool) -> str | None:
  """Why the Pallas kernel cannot serve a quantize call (a sentence), or None if it can.

  `meta` is the call's (abstract) QuantizedArray; the kernel works on x as 2D rows
  quantized along the last axis (leading axes folded into rows)."""
  qf = get_quantized_format(meta.format)
  if qf.scaling not in ("tensor", "mx", "nvfp4", "block"):
    return f"the kernel does not serve {qf.name!r} (scaling {qf.scaling!r})"
  if math.prod(meta.shape) >= 2**31:
    return f"x has {math.prod(meta.shape)} elements; the kernel's offsets are int32 (< 2^31)"
  if qf.scaling == "block":
    why = qblockwise.unserved_block(qf.name, meta.block_shape, transpose)
    if why is not None:
      return why
  if meta.axis != ndim - 1:
    return "the kernel quantizes along the last axis only"
  if meta.block_shape is not None and len(meta.block_shape) == 2 and ndim != 2:
    return "the kernel tiles 2D (16x16, 128x128) block scales of a 2D x only"
  spec = meta.hadamard
  if spec is not None and qf.scaling == "block":
    return "the kernel does not fuse a Hadamard rotation with blockwise FP8"
  if spec is not None:
    if spec.block not in (16, 32):
      return f"the kernel fuses Hadamard blocks of 16 and 32, not {spec.block}"
    if transpose:
      return "the kernel does not fuse a Hadamard rotation with transpose=True"
    if qf.scaling != "mx" and not has_scale:
      return ("the kernel fuses a Hadamard rotation with a given scale (per-tensor) or S_enc "
              "(nvfp4) only: a current scale needs the rotated tensor's amax first")
  return None


def _resolve(caller: str, implementation, interpret: bool, meta, x, transpose: bool,
             kw: dict) -> str:
  if implementation not in _IMPLEMENTATIONS:
    raise ValueError(f"{caller}: implementation must be one of {_IMPLEMENTATIONS}, got "
                     f"{implementation!r}")
  why_not = kernel_serves(meta, ndim=x.ndim, transpose=transpose,
                          has_scale=kw.get("scale") is not None)
  if implementation is None and not interpret:
    kind = get_quantized_format(meta.format).scaling
    if why_not is None and _op.on_gpu() and kind in _KERNEL_DEFAULT:
      return "pallas"
    return "reference"
  impl = _op.resolve_implementation(caller, implementation, interpret)
  if impl == "pallas" and why_not is not None:
    raise ValueError(f"{caller}: implementation='pallas' cannot serve this call: {why_not}; "
                     "use implementation='reference' (or None)")
  return impl


def _launch(x, meta: QuantizedArray, transpose: bool, kw: dict, interpret: bool,
            state: DelayedScaling | None = None, dest=None, into=None) -> qkernel.KernelResult:
  """One kernel launch over x folded to 2D rows (dest / into: quantize_2d's)."""
  qf = get_quantized_format(meta.format)
  x2 = x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x
  key_words = None
  if kw.get("rounding", "nearest") == "stochastic":
    key_words = fp8_random.key_words(kw["key"])
  scale = kw.get("scale")
  res = qkernel.quantize_2d(
      x2, fmt=qf.name, scale_mode=meta.scale_mode, block_shape=meta.block_shape,
      scale=None if scale is None else jnp.asarray(scale, jnp.float32).reshape(()),
      margin=kw.get("margin", 0) if state is None else state.margin, transpose=transpose,
      key_words=key_words,
      sr_bits=kw.get("sr_bits", 8), interpret=interpret,
      history=None if state is None else state.amax_history,
      history_algo="max" if state is None else state.amax_compute_algo,
      dest=dest, into=into,
      hadamard=None if meta.hadamard is None else (
          meta.hadamard.block, hadamard_signs(meta.hadamard.block, meta.hadamard.sign_arg())))
  return res


def _kernel(x, meta: QuantizedArray, transpose: bool, kw: dict, interpret: bool,
            state: DelayedScaling | None = None):
  """The Pallas path: one launch; results wrapped like the golden ones, and with a state,
  the (history, scale) of its update (computed in the launch)."""
  res = _launch(x, meta, transpose, kw, interpret, state)
  aux = meta._aux()

  def wrap(data, scales, shape):
    m = list(aux)
    m[2] = shape
    return QuantizedArray.tree_unflatten(tuple(m), (data, scales, res.tensor_scale))

  data = res.data.reshape(meta.data.shape)
  scales = None if res.scales is None else res.scales.reshape(meta.scales.shape)
  q = wrap(data, scales, meta.shape)
  q_t = wrap(res.data_t, res.scales_t, meta.shape[::-1]) if transpose else None
  return q, q_t, res.amax, (res.history, res.next_scale)
