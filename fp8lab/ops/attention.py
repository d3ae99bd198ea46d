"""attention: decode and prefill attention over a packed (FP8 / FP4) KV cache, and
kv_cache_update.

Five implementations, dispatched by the scaffolding of fp8lab/ops/_op.py: "reference" (plain
jnp in float32 over K / V dequantized by the golden model); "pallas": by shape and
`compute`, the split-K flash-decoding kernel (fp8lab/kernels/attention/kernel.py) for few
query rows per KV head (Tq * group <= DECODE_ROWS) or the flash-attention prefill kernel
(prefill.py) for more; "mosaic": the same two as Mosaic GPU kernels (mosaic.py,
mosaic_prefill.py) for FP8 caches on Hopper; "xla" and "cudnn": K / V decoded to bfloat16 by XLA from the packed
words (one memory-bound pre-pass), then attention over bfloat16 operands in plain jnp or by
cuDNN's fused flash attention. `implementation=None` on a GPU takes the decode kernel for
decode-sized queries over the KV kinds in `_KERNEL_DEFAULT`, "cudnn" for prefill (compute
None or "bf16"): each measured faster there than the other paths over the same bytes
(docs/attention_kernel.md sections 4 and 5); the reference elsewhere.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.formats import get_quantized_format
from fp8lab.kernels import attention as attn_kernel
from fp8lab.numerics.codec import INPUT_DTYPES
from fp8lab.numerics.hadamard import hadamard
from fp8lab.ops import _op
from fp8lab.ops._xla import xla_values
from fp8lab.ops.quantize import quantize_rows_into as _quantize_rows_into
from fp8lab.ops.quantize import scatter_rows as _scatter_rows
from fp8lab.quantized import QuantizedArray

__all__ = ["attention", "kv_cache_update", "HEAD_DIMS", "DOTS_ENV", "LAYOUT_ENV", "CONFIG_ENV",
           "MOSAIC_CONFIG_ENV",
           "COMPUTES", "DECODE_ROWS"]

HEAD_DIMS = (64, 128, 256)
# "xla" and "cudnn": K / V decoded to bfloat16 by XLA from the packed words (a memory-bound
# pre-pass, _sdpa), then jax.nn.dot_product_attention's XLA or cuDNN flash attention.
_SDPA_IMPLEMENTATIONS = ("xla", "cudnn")
# "mosaic": the Mosaic GPU kernels (Hopper and later, or interpret=True): the decode kernel
# (fp8lab/kernels/attention/mosaic.py) for the decode calls its mosaic_serves takes, the
# prefill kernel (mosaic_prefill.py) for the others with compute None, "bf16" or "fp8" that
# prefill_mosaic_serves takes.
_MOSAIC = "mosaic"
_IMPLEMENTATIONS = (None, *_op.KERNEL_IMPLEMENTATIONS, _MOSAIC, *_SDPA_IMPLEMENTATIONS,
                    "reference")
# KV kinds (KVPlan.kind of K and V) whose default on a GPU is the decode kernel: its compiled
# tests pass on the H200, where it is faster than XLA's bf16 attention (over bf16 K / V, so
# faster still than the reference, which dequantizes first) and JAX's Pallas gqa decode
# kernel at every measured size (benchmarks/results/attention_h200_*; docs/attention_kernel.md
# section 4). Plain float arrays ("float") keep the reference (cudnn's bf16 decode, which
# users call for them, beats the kernel there); prefill keeps the reference (unmeasured).
_KERNEL_DEFAULT: frozenset[str] = frozenset({"tensor", "block", "mx", "nvfp4"})
# The kernel's dot arithmetic (AttentionConfig.dots), read at each call: "f16" (default:
# float16 dots on float16 planes with q / p as scaled float16 hi + lo parts where
# kernels/attention.f16_serves takes the operand, else as "bf16x3"), "bf16x3" (exact
# bfloat16 parts on the tensor cores for the operands split_serves takes, IEEE float32 dots
# for the others) or "f32" (IEEE float32 dots throughout).
DOTS_ENV = "FP8LAB_ATTENTION_DOTS"
# The decode kernel's launch, read at each call: "block_s:num_warps:num_stages[:split_mult]"
# (AttentionConfig fields; split_mult multiplies the default n_splits) instead of
# kernels/attention.attention_config's defaults; unset or "" for the defaults. For tuning
# runs (benchmarks/probes/attention_configs.py finds candidates).
CONFIG_ENV = "FP8LAB_ATTENTION_CONFIG"
# The Mosaic decode kernel's launch, read at each call: "block_s:stages[:split_mult[:p_parts]]"
# (MosaicConfig fields; split_mult multiplies the default n_splits) instead of its default.
MOSAIC_CONFIG_ENV = "FP8LAB_ATTENTION_MOSAIC_CONFIG"
# The Mosaic prefill kernel's launch, "block_k:stages[:warpgroups]" (unset: the default).
MOSAIC_PREFILL_CONFIG_ENV = "FP8LAB_ATTENTION_MOSAIC_PREFILL_CONFIG"
# The kernels' arithmetic (the `compute` argument): "f32" IEEE float32 dots (the decode
# kernel's, or the prefill kernel's float32 mode), "bf16" the prefill kernel's bfloat16 dots
# with float32 softmax and accumulation, "fp8" the prefill kernel's e4m3 q / P / K / V dots.
COMPUTES = ("f32", "bf16", "fp8")
# The most query rows per KV head (Tq * Hq / Hkv) that go to the decode kernel (one program
# holds them all); more go to the prefill kernel. Not tuned on a GPU yet.
DECODE_ROWS = 64
# The kernel's K / V tile layout (AttentionConfig.layout), read at each call: "planes"
# (default, where kernels/attention.planes_serve takes the operand) or "elements".
LAYOUT_ENV = "FP8LAB_ATTENTION_LAYOUT"
# The position given to query rows that see every key (non-causal attention).
_NO_LIMIT = attn_kernel.NO_LIMIT


def attention(q, k, v, *, kv_lengths=None, block_tables=None, causal: bool = False,
              q_positions=None, sm_scale: float | None = None, return_lse: bool = False,
              compute: str | None = None, implementation: str | None = None,
              interpret: bool = False):
  """Scaled dot-product attention of q over a (packed) KV cache: softmax(q K^T * sm_scale) V.

  Args:
    q: (B, Tq, Hq, D) float32 / bfloat16 / float16; D in HEAD_DIMS (64, 128, 256).
    k, v: the cache, (B, S, Hkv, D) each (or page pools (num_pages, page_size, Hkv, D) with
      block_tables): QuantizedArrays quantized along D (axis -1) in any 1D-blocked format:
      "e4m3" / "e5m2" (per tensor), "e4m3_block" / "e5m2_block" with block_shape (D,) (one
      float32 scale per token and head) or another 1D block dividing D, "mxfp8",
      "mxfp8_e5m2", "mxfp4", "nvfp4" (1x16 blocks), "f16", "bf16"; or plain float32 /
      bfloat16 / float16 arrays. K and V may differ in format. Hq must be a multiple of Hkv
      (query head i reads KV head i // (Hq / Hkv)). A Hadamard-rotated K is met by q rotated
      the same way; a rotated V's output is rotated back (both in float32).
    kv_lengths: (B,) int32, the number of valid cache positions of each row (default: S, or
      pages * page_size). Positions at or past it are never read into the result, whatever
      they hold (NaN, Inf, garbage). Lengths are clipped to [0, capacity]; checked before
      tracing when concrete.
    block_tables: (B, pages) int32: k and v are page pools and row b's logical page j is pool
      page block_tables[b, j] (JAX's paged_attention layout); capacity pages * page_size.
    causal, q_positions: with causal=True, q_positions (B, Tq) int32 gives each query
      token's cache position, and it attends to keys at positions <= it (speculative or
      chunked decode, chunked prefill); without q_positions (allowed when Tq equals the
      cache's capacity) query i sits at position i. Without causal, every query token
      attends to all valid positions.
    sm_scale: the score scale (default 1 / sqrt(D)).
    return_lse: also return the log-sum-exp of the scaled scores, (B, Tq, Hq) float32
      (natural log; -inf for a query that sees no key).
    compute: the kernels' arithmetic (COMPUTES): None (the kernel's own: "f32" for the
      decode kernel, "bf16" for the prefill kernel), "f32" (IEEE float32 dots; the decode
      kernel when Tq * Hq / Hkv <= DECODE_ROWS, else the prefill kernel's float32 mode),
      "bf16" (the prefill kernel, any Tq: q, P and the K / V values not exact in bfloat16
      rounded to bfloat16 (round to nearest even), bf16 x bf16 dots accumulated in float32,
      float32 softmax; docs/attention_kernel.md section 5), "fp8" (the prefill kernel, any
      Tq; e4m3 / e4m3_block (block D) K and V only: their codes into e4m3 x e4m3 -> float32
      dots, q scaled per (token, head) by a power of two and rounded to e4m3, P times 2^8
      (and V's per-token factors over a power of two) rounded to e4m3, float32 softmax and
      accumulation). The reference path computes in float32 whatever compute says.
    implementation: None, "pallas", "xla", "cudnn" or "reference" (see the module
      docstring). "xla" / "cudnn" compute as compute="bf16" does (q and every K / V value
      rounded to bfloat16, bf16 x bf16 dots accumulated in float32, float32 softmax, P
      rounded to bfloat16 for the P V dot; cuDNN's output is bfloat16 before the cast to
      q's dtype), and take compute None or "bf16" only. "cudnn" needs an NVIDIA GPU (D = 256
      from Hopper on); causal with q_positions becomes a (B, 1, Tq, S) mask there, which
      cuDNN reads as a bias for every head (slower than causal=True without q_positions).
      A NaN at a causally masked position within the length may not reach their output.
      "mosaic" (Hopper, or interpret=True: the Mosaic GPU interpreter): e4m3 / e5m2 caches
      per tensor or per token and head (block D); decode-sized calls with compute None or
      "f32" take the Mosaic decode kernel (contiguous or paged; float16 dots on the exact
      codes, q and p as float16 hi + lo parts), the others with compute None or "bf16" the
      Mosaic prefill kernel (contiguous or paged; q rounded to bfloat16, float16 dots on the
      exact codes, P rounded to float16, float32 softmax and accumulation), and with
      compute="fp8" its FP8 mode (the arithmetic of the "fp8" above, but V's per-token
      factors over one power of two per row and head instead of per block);
      docs/attention_kernel.md sections 6, 7.
    interpret: run the Pallas kernel in interpret mode (CPU).

  Returns:
    (B, Tq, Hq, D) in q's dtype (and the lse). A query that sees no key gets zeros.

  Arithmetic: with compute None or "f32", both paths compute in float32: scores q K^T
  (exact products, float32 sums), softmax with a running max, P V in float32. K / V
  positions within the length but masked by causality are real cache data: a NaN there
  still reaches the output through 0 * NaN in P V, in both paths, as in any float32
  attention. The decode kernel's dots are float16 by default (K / V planes exact in
  float16, q and P as per-row power-of-two-scaled float16 hi + lo parts, float32
  accumulation; formats the f16 dots do not take, MX and plain bfloat16, use exact bfloat16
  parts, "bf16x3"); FP8LAB_ATTENTION_DOTS=bf16x3 / f32 (read at each call) takes those
  instead (f32: IEEE float32 dots throughout), FP8LAB_ATTENTION_LAYOUT=elements the per-lane
  K / V gather (docs/attention_kernel.md).

  Works under jax.jit, jax.vmap (kernel: a vmapped q / q_positions folds into the query
  tokens, one launch; anything else vmapped runs one launch per example) and jax.grad with
  respect to q (through the float32 reference path, whichever kernel and compute run
  forward; K / V get no gradient).

  Raises:
    TypeError / ValueError before tracing: bad shapes, dtypes, formats, axes, block shapes,
    D, head counts, lengths or tables (when concrete), unknown implementation or compute,
    compute="fp8" with other KV formats, the kernel without a GPU and without interpret.
  """
  q = _check_q(q)
  bsz, tq, hq, dim = q.shape
  _check_kv(k, "k", dim, block_tables is not None)
  _check_kv(v, "v", dim, block_tables is not None)
  if tuple(k.shape) != tuple(v.shape):
    raise ValueError(f"attention: k and v must have one shape, got {tuple(k.shape)} and "
                     f"{tuple(v.shape)}")
  hkv = k.shape[2]
  if hq % hkv:
    raise ValueError(f"attention: Hq={hq} query heads must be a multiple of Hkv={hkv} KV heads")
  paged = block_tables is not None
  if paged:
    block_tables = _check_int(block_tables, "block_tables", (bsz, None))
    _check_table_values(block_tables, k.shape[0])
    page_size = k.shape[1]
    capacity = block_tables.shape[1] * page_size
  else:
    if k.shape[0] != bsz:
      raise ValueError(f"attention: k / v batch {k.shape[0]} != q batch {bsz}")
    page_size = capacity = k.shape[1]
  full = kv_lengths is None       # every row holds the whole capacity: no padding mask
  if full:
    kv_lengths = jnp.full((bsz,), capacity, jnp.int32)
  else:
    kv_lengths = _check_int(kv_lengths, "kv_lengths", (bsz,))
    _check_range(kv_lengths, "kv_lengths", 0, capacity)
  if not isinstance(causal, bool):
    raise TypeError(f"attention: causal must be a bool, got {causal!r}")
  masking = "causal" if causal and q_positions is None else "positions" if causal else "none"
  if causal:
    if q_positions is None:
      if tq != capacity:
        raise ValueError(f"attention: causal=True needs q_positions (B, Tq) int32 unless Tq "
                         f"equals the cache capacity (Tq={tq}, capacity={capacity})")
      q_positions = jnp.broadcast_to(jnp.arange(tq, dtype=jnp.int32), (bsz, tq))
    q_positions = _check_int(q_positions, "q_positions", (bsz, tq))
  elif q_positions is not None:
    raise ValueError("attention: q_positions goes with causal=True")
  else:
    q_positions = jnp.full((bsz, tq), _NO_LIMIT, jnp.int32)
  if sm_scale is None:
    sm_scale = 1.0 / math.sqrt(dim)
  elif not isinstance(sm_scale, (int, float)) or not math.isfinite(sm_scale):
    raise ValueError(f"attention: sm_scale must be a finite Python float, got {sm_scale!r}")
  if not isinstance(return_lse, bool):
    raise TypeError(f"attention: return_lse must be a bool, got {return_lse!r}")
  if compute is not None and compute not in COMPUTES:
    raise ValueError(f"attention: compute must be None or one of {COMPUTES}, got {compute!r}")
  if compute == "fp8" and not all(attn_kernel.fp8_serves(attn_kernel.kv_plan(x, dim))
                                  for x in (k, v)):
    raise ValueError("attention: compute='fp8' takes K and V in e4m3 per tensor or per token "
                     "and head (\"e4m3\", \"e4m3_block\" with block_shape (D,)); use "
                     "compute='bf16' for the other formats")
  decode = compute in (None, "f32") and tq * (hq // hkv) <= DECODE_ROWS
  impl = _resolve(implementation, interpret, k, v, dim, decode, compute)
  if impl == _MOSAIC:
    kplan, vplan = attn_kernel.kv_plan(k, dim), attn_kernel.kv_plan(v, dim)
    if decode:
      why = attn_kernel.mosaic_serves(kplan, vplan, tq=tq, group=hq // hkv, kv_heads=hkv,
                                      paged=paged, capacity=capacity, page_size=page_size)
    else:
      why = attn_kernel.prefill_mosaic_serves(kplan, vplan, paged=paged, capacity=capacity,
                                              page_size=page_size, compute=compute)
    if why:
      raise ValueError(f"attention: implementation='mosaic' does not take this call: {why}")
  if impl in _SDPA_IMPLEMENTATIONS and compute not in (None, "bf16"):
    raise ValueError(f"attention: implementation {impl!r} computes in bfloat16 (compute None "
                     f"or 'bf16'), got compute={compute!r}")
  dots = os.environ.get(DOTS_ENV, "") or "f16"
  if dots not in attn_kernel.DOTS:
    raise ValueError(f"attention: {DOTS_ENV} must be one of {attn_kernel.DOTS}, got {dots!r}")
  layout = os.environ.get(LAYOUT_ENV, "") or "planes"
  if layout not in attn_kernel.LAYOUTS:
    raise ValueError(f"attention: {LAYOUT_ENV} must be one of {attn_kernel.LAYOUTS}, got "
                     f"{layout!r}")
  mode = (f"sdpa:{masking}:{'full' if full else 'lengths'}" if impl in _SDPA_IMPLEMENTATIONS
          else ("mosaic" if decode else f"mosaic:prefill:{compute or 'bf16'}")
          if impl == _MOSAIC
          else _kernel_mode(tq * (hq // hkv), compute, dots, layout))
  o, lse = _attention(impl, interpret, float(sm_scale), page_size, mode, q, k, v, kv_lengths,
                      q_positions, block_tables)
  return (o, lse) if return_lse else o


# ---------------------------------------------------------------------------- checks

def _check_q(q) -> jax.Array:
  dtype = jnp.dtype(q.dtype) if hasattr(q, "dtype") else jnp.asarray(q).dtype
  if dtype not in INPUT_DTYPES:
    raise TypeError(f"attention: q must be float32, bfloat16 or float16, got {dtype}")
  q = jnp.asarray(q)
  if q.ndim != 4:
    raise ValueError(f"attention: q must be (B, Tq, Hq, D), got shape {q.shape}")
  if q.shape[-1] not in HEAD_DIMS:
    raise ValueError(f"attention: head dimension D must be one of {HEAD_DIMS}, got "
                     f"{q.shape[-1]}")
  if 0 in q.shape:
    raise ValueError(f"attention: q has an empty axis, shape {q.shape}")
  return q


def _check_kv(x, name: str, dim: int, paged: bool) -> None:
  layout = "(num_pages, page_size, Hkv, D)" if paged else "(B, S, Hkv, D)"
  if isinstance(x, QuantizedArray):
    if len(x.shape) != 4:
      raise ValueError(f"attention: {name} must be {layout}, got shape {x.shape}")
    if x.axis != 3:
      raise ValueError(f"attention: {name} must be quantized along D (axis -1), got "
                       f"axis={x.axis}")
    if x.block_shape is not None and len(x.block_shape) != 1:
      raise ValueError(f"attention: {name} needs 1D blocks along D, got block_shape "
                       f"{x.block_shape} (2D tiles mix tokens)")
    if x.block_shape is not None and dim % x.block_shape[0]:
      raise ValueError(f"attention: {name}'s block {x.block_shape[0]} does not divide D={dim}")
    if not attn_kernel.serves(x.format, x.block_shape):
      raise ValueError(f"attention: format {x.format!r} is not a KV format")
    if x.hadamard is not None and dim % x.hadamard.block:
      raise ValueError(f"attention: {name}'s Hadamard block does not divide D={dim}")
  elif hasattr(x, "dtype") and hasattr(x, "shape"):
    if jnp.dtype(x.dtype) not in INPUT_DTYPES:
      raise TypeError(f"attention: a plain {name} must be float32, bfloat16 or float16, got "
                      f"{jnp.dtype(x.dtype)}")
    if len(x.shape) != 4:
      raise ValueError(f"attention: {name} must be {layout}, got shape {tuple(x.shape)}")
  else:
    raise TypeError(f"attention: {name} must be a fp8lab.QuantizedArray or a float array, got "
                    f"{type(x).__name__}")
  if x.shape[-1] != dim:
    raise ValueError(f"attention: {name}'s D={x.shape[-1]} != q's D={dim}")
  if 0 in tuple(x.shape):
    raise ValueError(f"attention: {name} has an empty axis, shape {tuple(x.shape)}")


def _check_int(x, name: str, shape) -> jax.Array:
  dtype = jnp.dtype(x.dtype) if hasattr(x, "dtype") else jnp.asarray(x).dtype
  if dtype != jnp.int32:
    raise TypeError(f"attention: {name} must be int32, got {dtype}")
  x = jnp.asarray(x)
  if len(x.shape) != len(shape) or any(w is not None and w != s
                                       for w, s in zip(shape, x.shape)):
    want = "(" + ", ".join("n" if w is None else str(w) for w in shape) + ")"
    raise ValueError(f"attention: {name} must have shape {want}, got {x.shape}")
  return x


def _concrete(x):
  try:
    return np.asarray(x)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return None


def _check_range(x, name: str, lo: int, hi: int) -> None:
  """Checks lo <= x <= hi when x is concrete (a traced x is clipped instead)."""
  val = _concrete(x)
  if val is not None and val.size and (val.min() < lo or val.max() > hi):
    raise ValueError(f"attention: {name} must lie in [{lo}, {hi}], got values in "
                     f"[{val.min()}, {val.max()}]")


def _check_table_values(table, num_pages: int) -> None:
  if table.shape[1] == 0:
    raise ValueError("attention: block_tables has no pages")
  val = _concrete(table)
  if val is not None and (val.min() < 0 or val.max() >= num_pages):
    raise ValueError(f"attention: block_tables entries must be pool pages in [0, "
                     f"{num_pages}), got values in [{val.min()}, {val.max()}]")


def _resolve(implementation, interpret: bool, k, v, dim: int, decode: bool,
             compute: str | None) -> str:
  if implementation not in _IMPLEMENTATIONS:
    raise ValueError(f"attention: implementation must be one of {_IMPLEMENTATIONS}, got "
                     f"{implementation!r}")
  if implementation is None and not interpret:
    kinds = {attn_kernel.kv_plan(x, dim).kind for x in (k, v)}
    if _op.on_gpu() and decode and kinds <= _KERNEL_DEFAULT:
      return "pallas"
    if _op.on_gpu() and not decode and compute in (None, "bf16") and _cudnn_serves(dim):
      return "cudnn"
    return "reference"
  if implementation in _SDPA_IMPLEMENTATIONS:
    if not isinstance(interpret, bool):
      raise TypeError(f"attention: interpret must be a bool, got {interpret!r}")
    if interpret:
      raise ValueError(f"attention: interpret=True runs the Pallas kernel; it cannot go with "
                       f"implementation={implementation!r}")
    if implementation == "cudnn" and not (_op.on_gpu() and _cudnn_serves(dim)):
      raise ValueError(f"attention: implementation 'cudnn' needs an NVIDIA GPU (head "
                       f"dimension D={dim} > 128 needs Hopper or later); 'xla' runs the same "
                       f"pre-pass with XLA's attention anywhere")
    return implementation
  if implementation == _MOSAIC:
    if not isinstance(interpret, bool):
      raise TypeError(f"attention: interpret must be a bool, got {interpret!r}")
    if not interpret and not _op.on_gpu(sm=9.0):
      raise ValueError("attention: implementation='mosaic' needs a Hopper (sm_90) or later "
                       "GPU; pass interpret=True to run it in the Mosaic GPU interpreter")
    return implementation
  return _op.resolve_implementation("attention", implementation, interpret)


def _cudnn_serves(dim: int) -> bool:
  """Whether cuDNN's flash attention takes head dimension `dim` on this GPU (<= 128 before
  Hopper, <= 256 from sm_90; jax/_src/cudnn/fused_attention_stablehlo.py's checks)."""
  if dim <= 128:
    return True
  cc = getattr(jax.devices()[0], "compute_capability", "0.0")
  return float(cc) >= 9.0


def _kernel_mode(rows: int, compute: str | None, dots: str, layout: str) -> str:
  """Which kernel and arithmetic "pallas" runs: "decode:<dots>:<layout>" or
  "prefill:<compute>"."""
  if compute in (None, "f32") and rows <= DECODE_ROWS:
    return f"decode:{dots}:{layout}"
  return f"prefill:{compute or 'bf16'}"


# ---------------------------------------------------------------------------- shared steps

def _rotate_q(k, q32):
  """q rotated like a Hadamard-rotated K (q K^T is unchanged: the rotation is orthogonal)."""
  if not isinstance(k, QuantizedArray) or k.hadamard is None:
    return q32
  s = k.hadamard
  return hadamard(q32, s.block, signs=s.sign_arg(), axis=-1)


def _unrotate_o(v, o32):
  """The output of a Hadamard-rotated V rotated back (P V_rot = (P V) H^T)."""
  if not isinstance(v, QuantizedArray) or v.hadamard is None:
    return o32
  s = v.hadamard
  return hadamard(o32, s.block, signs=s.sign_arg(), axis=-1, inverse=True)


def _values(x) -> jax.Array:
  """K or V as float32 values: the golden dequantize (rotated values for rotated arrays)."""
  if isinstance(x, QuantizedArray):
    return x.dequantize(jnp.float32)
  return x.astype(jnp.float32)


# ---------------------------------------------------------------------------- reference

def _reference(sm_scale: float, page_size: int, q, k, v, kv_lengths, q_positions, table):
  """Plain jnp in float32: (o (B, Tq, Hq, D) in q's dtype, lse (B, Tq, Hq) float32)."""
  bsz, tq, hq, dim = q.shape
  kd, vd = _values(k), _values(v)
  if table is not None:           # (pool pages, page, Hkv, D) -> (B, pages * page, Hkv, D)
    kd = kd[table].reshape((bsz, -1) + kd.shape[2:])
    vd = vd[table].reshape((bsz, -1) + vd.shape[2:])
  cap = kd.shape[1]
  valid = jnp.arange(cap, dtype=jnp.int32)[None, :] < jnp.clip(kv_lengths, 0, cap)[:, None]
  # Zero the positions past the length before any product: 0 * NaN never happens.
  kd = jnp.where(valid[:, :, None, None], kd, 0.0)
  vd = jnp.where(valid[:, :, None, None], vd, 0.0)
  q32 = _rotate_q(k, q.astype(jnp.float32))
  o, lse = _softmax_attention(sm_scale, q32, kd, vd, valid, q_positions,
                              precision=lax.Precision.HIGHEST)
  return _unrotate_o(v, o).astype(q.dtype), lse


def _softmax_attention(sm_scale: float, q, kd, vd, valid, q_positions, precision=None):
  """softmax(q K^T sm_scale) V in plain jnp over the positions `valid` (B, S) and <= each
  query's position: dots in the operands' dtype (q (B, Tq, Hq, D), kd / vd (B, S, Hkv, D))
  with float32 accumulation, float32 softmax with the row max taken out, P cast to vd's
  dtype for the P V dot. (o (B, Tq, Hq, D), lse (B, Tq, Hq)) float32; a query that sees no
  key gets o = 0 and lse = -inf (a NaN score stays NaN)."""
  bsz, tq, hq, dim = q.shape
  cap, hkv = kd.shape[1], kd.shape[2]
  qg = q.reshape(bsz, tq, hkv, hq // hkv, dim)
  s = jnp.einsum("btkgd,bskd->btkgs", qg, kd, precision=precision,
                 preferred_element_type=jnp.float32) * jnp.float32(sm_scale)
  pos = jnp.arange(cap, dtype=jnp.int32)
  keep = (valid[:, None, None, None, :]
          & (pos[None, None, None, None, :] <= q_positions[:, :, None, None, None]))
  s = jnp.where(keep, s, -jnp.inf)
  m = jnp.max(s, axis=-1, keepdims=True)
  m_safe = jnp.where(m == -jnp.inf, 0.0, m)
  p = jnp.where(keep, jnp.exp(s - m_safe), 0.0)
  den = jnp.sum(p, axis=-1)
  num = jnp.einsum("btkgs,bskd->btkgd", p.astype(vd.dtype), vd, precision=precision,
                   preferred_element_type=jnp.float32)
  has = jnp.any(keep, axis=-1)
  o = jnp.where(has[..., None], num / jnp.where(has, den, 1.0)[..., None], 0.0)
  lse = jnp.where(has, m_safe[..., 0] + jnp.log(jnp.where(has, den, 1.0)), -jnp.inf)
  return o.reshape(bsz, tq, hq, dim), lse.reshape(bsz, tq, hq)


# ---------------------------------------------------------------------------- xla / cudnn

def _bf16_cache(x, table, lengths) -> jax.Array:
  """K or V as bfloat16 (B, capacity, Hkv, D) for a flash-attention library call: the packed
  words decoded by XLA (_xla.xla_values: the golden float32 values, a subnormal product
  flushed), gathered through the page table, zeroed at positions at or past the row's length
  (nothing there reaches a product; lengths None: every position is valid), rounded to
  bfloat16 (nearest even). One elementwise fusion over the cache: its bytes in, two bytes
  per value out (none for a contiguous bfloat16 cache of full rows: x itself)."""
  vals = xla_values(x) if isinstance(x, QuantizedArray) else x
  if table is not None:           # (pool pages, page, Hkv, D) -> (B, pages * page, Hkv, D)
    vals = vals[table].reshape((table.shape[0], -1) + vals.shape[2:])
  if lengths is not None:
    pos = jnp.arange(vals.shape[1], dtype=jnp.int32)
    vals = jnp.where((pos[None, :] < lengths[:, None])[:, :, None, None], vals, 0)
  return vals.astype(jnp.bfloat16)


def _sdpa(implementation: str, sm_scale: float, masking: str, full: bool, q, k, v,
          kv_lengths, q_positions, table):
  """The "xla" / "cudnn" paths: _bf16_cache's pre-pass, then attention over bfloat16
  q / K / V (float32 softmax and accumulation, P rounded to bfloat16 for the P V dot):
  "xla" in plain jnp (_softmax_attention: the reference's arithmetic on these operands),
  "cudnn" cuDNN's fused flash attention (called below jax.nn.dot_product_attention, whose
  wrapper rounds the log-sum-exp to the output dtype).
  cuDNN's masks: kv_lengths as its padding mask (none with `full`: the call had no
  kv_lengths); masking "causal" (query i at position i) as its causal mask; "positions"
  (q_positions given) as a boolean (B, 1, Tq, S) mask, which cuDNN takes as an additive
  bias it reads for every head. A query that sees no key gets o = 0 and lse = -inf (cuDNN
  leaves such rows undefined; with `full` and no q_positions every query sees a key)."""
  bsz, tq, hq, dim = q.shape
  cap = _capacity(k, table, k.shape[1])      # a pool's pages are k.shape[1] positions long
  lengths = jnp.clip(kv_lengths, 0, cap)
  pre = None if full else lengths
  kb, vb = _bf16_cache(k, table, pre), _bf16_cache(v, table, pre)
  rotated = isinstance(k, QuantizedArray) and k.hadamard is not None
  qb = (_rotate_q(k, q.astype(jnp.float32)) if rotated else q).astype(jnp.bfloat16)
  if implementation == "cudnn":
    mask = None
    if masking == "positions":
      mask = (jnp.arange(cap, dtype=jnp.int32)[None, None, None, :]
              <= q_positions[:, None, :, None])
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
    types = cudnn_fa.MaskType
    if full:
      mask_type, seqlens = (types.CAUSAL if masking == "causal" else types.NO_MASK), ()
    else:
      mask_type = types.PADDING_CAUSAL if masking == "causal" else types.PADDING
      seqlens = (jnp.full((bsz,), tq, jnp.int32), lengths)
    o, lse = cudnn_fa.dot_product_attention(
        qb, kb, vb, None, mask, *seqlens, scale=sm_scale, mask_type=mask_type,
        qkv_layout="BTNH", return_residual=True)
    lse = jnp.transpose(lse, (0, 2, 1))                  # cuDNN's (B, Hq, Tq) -> (B, Tq, Hq)
    if not full or masking == "positions":
      # the keys each query sees: min(length, q_position + 1) (INT32_MAX positions: the length)
      seen = jnp.minimum(lengths[:, None], jnp.minimum(q_positions, cap - 1) + 1) > 0
      o = jnp.where(seen[:, :, None, None], o, jnp.zeros((), o.dtype))
      lse = jnp.where(seen[:, :, None], lse, -jnp.inf)
  else:
    valid = jnp.arange(cap, dtype=jnp.int32)[None, :] < lengths[:, None]
    o, lse = _softmax_attention(sm_scale, qb, kb, vb, valid, q_positions)
  if isinstance(v, QuantizedArray) and v.hadamard is not None:
    o = _unrotate_o(v, o.astype(jnp.float32))
  return o.astype(q.dtype), lse


# ---------------------------------------------------------------------------- kernel path

def _prefill_call(interpret: bool, sm_scale: float, page_size: int, compute: str, q, k, v,
                  kv_lengths, q_positions, table=None):
  """The prefill kernel straight on (B, Tq, Hq, D): it reads q's rows and writes o's in
  place (no transposes); a rotated K takes q rotated in float32 first, a rotated V a float32
  output to rotate back."""
  bsz, tq, hq, dim = q.shape
  hkv = k.shape[2]
  out_dtype = q.dtype
  capacity = _capacity(k, table, page_size)
  rotated_v = isinstance(v, QuantizedArray) and v.hadamard is not None
  if isinstance(k, QuantizedArray) and k.hadamard is not None:
    q = _rotate_q(k, q.astype(jnp.float32))
  cfg = attn_kernel.prefill_config(tq * (hq // hkv), dim, compute)
  o, lse = attn_kernel.prefill_pallas(
      q, q_positions, kv_lengths, table, k, v,
      kplan=attn_kernel.kv_plan(k, dim), vplan=attn_kernel.kv_plan(v, dim), group=hq // hkv,
      capacity=capacity, page_size=page_size, sm_scale=sm_scale, config=cfg,
      out_dtype=jnp.dtype(jnp.float32 if rotated_v else out_dtype), interpret=interpret)
  return _unrotate_o(v, o).astype(out_dtype), lse


def _pallas_call(interpret: bool, sm_scale: float, page_size: int, mode: str, q, k, v,
                 kv_lengths, q_positions, table=None):
  kind, arith = mode.split(":", 1)
  if kind == "prefill":
    return _prefill_call(interpret, sm_scale, page_size, arith, q, k, v, kv_lengths,
                         q_positions, table)
  bsz, tq, hq, dim = q.shape
  hkv = k.shape[2]
  # The kernel reads q's (B, Tq, Hq, D) rows in place and the combine writes o's. A
  # bfloat16 q (unrotated) stays bfloat16: the kernel's dots take it as one exact part.
  rotated = isinstance(k, QuantizedArray) and k.hadamard is not None
  qk = q if q.dtype == jnp.bfloat16 and not rotated else _rotate_q(k, q.astype(jnp.float32))
  rotated_v = isinstance(v, QuantizedArray) and v.hadamard is not None
  capacity = _capacity(k, table, page_size)
  kplan, vplan = attn_kernel.kv_plan(k, dim), attn_kernel.kv_plan(v, dim)
  dots, layout = arith.split(":")          # AttentionConfig.dots, .layout
  cfg = dataclasses.replace(_launch_config(attn_kernel.attention_config(
      bsz, hkv, capacity, dim, interpret, (kplan, vplan))), dots=dots, layout=layout)
  o, lse = attn_kernel.attention_pallas(
      qk, q_positions, kv_lengths, table, k, v, kplan=kplan, vplan=vplan, group=hq // hkv,
      capacity=capacity, page_size=page_size, sm_scale=sm_scale, config=cfg,
      out_dtype=jnp.dtype(jnp.float32 if rotated_v else q.dtype), interpret=interpret)
  return _unrotate_o(v, o).astype(q.dtype), lse


def _mosaic_call(interpret: bool, sm_scale: float, q, k, v, kv_lengths, q_positions,
                 table=None):
  """The Mosaic GPU decode kernel on (B, Tq, Hq, D) over a contiguous cache or a page pool
  and its table, with q rotated for a Hadamard-rotated K and o rotated back for a rotated
  V, as _pallas_call does."""
  bsz, _, hq, dim = q.shape
  hkv = k.shape[2]
  qk = _rotate_q(k, q.astype(jnp.float32)) if k.hadamard is not None else q
  rotated_v = v.hadamard is not None
  capacity = _capacity(k, table, k.shape[1])
  cfg = attn_kernel.mosaic_config(bsz, hkv, capacity, dim, interpret)
  o, lse = attn_kernel.attention_mosaic(
      qk, q_positions, kv_lengths, k, v, table, kplan=attn_kernel.kv_plan(k, dim),
      vplan=attn_kernel.kv_plan(v, dim), group=hq // hkv, capacity=capacity,
      sm_scale=sm_scale, config=_mosaic_launch(cfg),
      out_dtype=jnp.dtype(jnp.float32 if rotated_v else q.dtype), interpret=interpret)
  return _unrotate_o(v, o).astype(q.dtype), lse


def _mosaic_prefill_call(interpret: bool, sm_scale: float, compute: str, q, k, v, kv_lengths,
                         q_positions, table=None):
  """The Mosaic GPU prefill kernel on (B, Tq, Hq, D) over a contiguous cache or a page pool
  and its table, with q rotated for a Hadamard-rotated K and o rotated back for a rotated
  V, as _mosaic_call does."""
  hq, dim = q.shape[2], q.shape[3]
  qk = _rotate_q(k, q.astype(jnp.float32)) if k.hadamard is not None else q
  rotated_v = v.hadamard is not None
  o, lse = attn_kernel.prefill_mosaic(
      qk, q_positions, kv_lengths, k, v, table, kplan=attn_kernel.kv_plan(k, dim),
      vplan=attn_kernel.kv_plan(v, dim), group=hq // k.shape[2],
      capacity=_capacity(k, table, k.shape[1]),
      sm_scale=sm_scale,
      config=_mosaic_prefill_launch(attn_kernel.prefill_mosaic_config(dim, interpret, compute)),
      out_dtype=jnp.dtype(jnp.float32 if rotated_v else q.dtype), interpret=interpret)
  return _unrotate_o(v, o).astype(q.dtype), lse


def _env_numbers(env: str, usage: str, n_ints: int, n_max: int):
  """The colon-separated fields of environment variable `env` (None if unset): the first
  n_ints as ints, up to n_max in all, the rest floats; ValueError naming `usage` for a
  malformed value."""
  v = os.environ.get(env, "")
  if not v:
    return None
  f = v.split(":")
  try:
    if not n_ints <= len(f) <= n_max:
      raise ValueError
    return [int(x) for x in f[:n_ints]] + [float(x) for x in f[n_ints:]]
  except ValueError:
    raise ValueError(f"attention: {env} must be {usage}, got {v!r}") from None


def _mosaic_launch(cfg):
  """cfg with MOSAIC_CONFIG_ENV's fields, if set: "block_s:stages[:split_mult[:p_parts]]"."""
  f = _env_numbers(MOSAIC_CONFIG_ENV, "block_s:stages[:split_mult[:p_parts]]", 2, 4)
  if f is None:
    return cfg
  mult = f[2] if len(f) > 2 else 1.0
  return dataclasses.replace(cfg, block_s=f[0], stages=f[1],
                             p_parts=int(f[3]) if len(f) > 3 else cfg.p_parts,
                             n_splits=max(1, int(cfg.n_splits * mult)))


def _mosaic_prefill_launch(cfg):
  """cfg with MOSAIC_PREFILL_CONFIG_ENV's fields, if set: "block_k:stages[:warpgroups]"."""
  usage = "block_k:stages[:warpgroups]"
  f = _env_numbers(MOSAIC_PREFILL_CONFIG_ENV, usage, 2, 3)
  if f is None:
    return cfg
  if len(f) > 2 and f[2] != int(f[2]):
    raise ValueError(f"attention: {MOSAIC_PREFILL_CONFIG_ENV} must be {usage} (integers), got "
                     f"{os.environ[MOSAIC_PREFILL_CONFIG_ENV]!r}")
  return dataclasses.replace(cfg, block_k=f[0], stages=f[1],
                             warpgroups=int(f[2]) if len(f) > 2 else cfg.warpgroups)


def _launch_config(cfg):
  """cfg with CONFIG_ENV's fields, if set (ValueError for a malformed value)."""
  f = _env_numbers(CONFIG_ENV, "block_s:num_warps:num_stages[:split_mult]", 3, 4)
  if f is None:
    return cfg
  mult = f[3] if len(f) == 4 else 1.0
  return dataclasses.replace(cfg, block_s=f[0], num_warps=f[1], num_stages=f[2],
                             n_splits=max(1, int(cfg.n_splits * mult)))


@functools.lru_cache(maxsize=None)
def _batched(implementation: str, interpret: bool, sm_scale: float, page_size: int,
             mode: str):
  """The kernel (or library) call with a vmap rule. Query tokens attend independently given
  the cache, so a vmapped q / q_positions (the cache, lengths and table shared) folds into
  the query tokens: one launch, (B, n * Tq) tokens. Anything else vmapped runs one launch
  per example (lax.map). (cuDNN's own batching rule breaks on a head-broadcast mask.)"""
  if implementation in _SDPA_IMPLEMENTATIONS:
    def call(q, k, v, kv_lengths, q_positions, table):
      _, masking, rows = mode.split(":")
      if masking == "causal" and q.shape[1] != _capacity(k, table, page_size):
        masking = "positions"     # tokens folded: query i is no longer at position i
      return _sdpa(implementation, sm_scale, masking, rows == "full", q, k, v, kv_lengths,
                   q_positions, table)
  elif implementation == _MOSAIC and mode == "mosaic":
    call = functools.partial(_mosaic_call, interpret, sm_scale)
  elif implementation == _MOSAIC:               # "mosaic:prefill:<compute>"
    call = functools.partial(_mosaic_prefill_call, interpret, sm_scale, mode.split(":")[2])
  else:
    call = functools.partial(_pallas_call, interpret, sm_scale, page_size, mode)

  @jax.custom_batching.custom_vmap
  def batched(q, k, v, kv_lengths, q_positions, table):
    return call(q, k, v, kv_lengths, q_positions, table)

  @batched.def_vmap
  def rule(axis_size, in_batched, q, k, v, kv_lengths, q_positions, table):
    flags = [any(jax.tree_util.tree_leaves(b)) for b in in_batched]
    n = axis_size
    if not any(flags[1:4]) and not flags[5]:
      if not flags[0]:
        q = jnp.broadcast_to(q, (n,) + q.shape)
      if not flags[4]:
        q_positions = jnp.broadcast_to(q_positions, (n,) + q_positions.shape)
      bsz, tq = q.shape[1], q.shape[2]
      qf = jnp.moveaxis(q, 0, 1).reshape((bsz, n * tq) + q.shape[3:])
      pf = jnp.moveaxis(q_positions, 0, 1).reshape(bsz, n * tq)
      o, lse = batched(qf, k, v, kv_lengths, pf, table)
      o = jnp.moveaxis(o.reshape((bsz, n, tq) + o.shape[2:]), 1, 0)
      lse = jnp.moveaxis(lse.reshape((bsz, n, tq) + lse.shape[2:]), 1, 0)
      return (o, lse), (True, True)
    ops = (q, k, v, kv_lengths, q_positions, table)
    full = [jax.tree_util.tree_map(
        lambda leaf, b: leaf if b else jnp.broadcast_to(leaf, (n,) + leaf.shape), op, bat)
            for op, bat in zip(ops, in_batched)]
    return lax.map(lambda args: batched(*args), tuple(full)), (True, True)

  return batched


def _capacity(k, table, page_size: int) -> int:
  """The cache's capacity: table pages times page_size, or k's S."""
  return table.shape[1] * page_size if table is not None else k.shape[1]


def _forward(implementation: str, interpret: bool, sm_scale: float, page_size: int, mode: str,
             q, k, v, kv_lengths, q_positions, table):
  if implementation == "reference":
    return _reference(sm_scale, page_size, q, k, v, kv_lengths, q_positions, table)
  return _batched(implementation, interpret, sm_scale, page_size, mode)(
      q, k, v, kv_lengths, q_positions, table)


def _reference_of(implementation, interpret, sm_scale, page_size, mode, *operands):
  del implementation, interpret, mode
  return _reference(sm_scale, page_size, *operands)


# Every implementation differentiates through the reference: dq only (K / V codes, lengths
# and tables get no cotangent).
# jitted (static: the first five arguments) so that an eager call reuses its compiled form.
_attention = jax.jit(_op.reference_vjp(_forward, _reference_of, n_static=5),
                     static_argnums=(0, 1, 2, 3, 4))


# ---------------------------------------------------------------------------- cache update

def kv_cache_update(cache, k_new, positions, *, block_tables=None, scale=None,
                    implementation: str | None = None, interpret: bool = False):
  """The cache with k_new's tokens quantized and written at `positions` (a new cache; under
  jax.jit with the cache donated, donate_argnums, XLA writes it in place).

  Args:
    cache: a QuantizedArray (B, S, Hkv, D) quantized along D (or a page pool (num_pages,
      page_size, Hkv, D) with block_tables), or a plain float array.
    k_new: (B, T, Hkv, D) float32 / bfloat16 / float16: T new tokens per row.
    positions: (B,) int32 (token t of row b goes to position positions[b] + t) or (B, T)
      int32 (each token's position). Positions outside the cache are dropped (checked when
      concrete: ValueError).
    block_tables: (B, pages) int32 for a paged cache: logical position p of row b is slot
      p % page_size of pool page block_tables[b, p // page_size].
    scale: per-tensor formats ("e4m3", "e5m2", "nvfp4") only: the quantization factor of
      the new tokens (e4m3 / e5m2: the scale; nvfp4: S_enc), which should be the one the
      cache was made with; None uses fl(1 / tensor_scale). The cache's tensor_scale is
      kept either way.
    implementation, interpret: as for fp8lab.quantize (None, "pallas", "reference"). The
      kernel quantizes the new tokens and writes them into the cache's arrays in one launch
      (in place when the cache is donated); the reference quantizes with the golden model
      and scatters; the bytes are the same.

  New tokens are quantized by fp8lab.quantize with the cache's format, block shape, scale
  mode and Hadamard rotation. For formats whose scales are per token (blocks along D:
  blockwise FP8, MX, and NVFP4 blocks given its S_enc) the bytes written are exactly those
  of quantizing the whole cache at once: no older token is requantized.
  """
  capacity_axis = 1
  paged = block_tables is not None
  if isinstance(cache, QuantizedArray):
    if len(cache.shape) != 4 or cache.axis != 3:
      raise ValueError(f"kv_cache_update: cache must be (B, S, Hkv, D) quantized along D, got "
                       f"shape {cache.shape}, axis {cache.axis}")
    if cache.block_shape is not None and len(cache.block_shape) != 1:
      raise ValueError("kv_cache_update: cache needs 1D blocks along D, got block_shape "
                       f"{cache.block_shape}")
  elif not (hasattr(cache, "dtype") and len(cache.shape) == 4):
    raise TypeError("kv_cache_update: cache must be a QuantizedArray or a 4D float array, got "
                    f"{type(cache).__name__}")
  dtype = jnp.dtype(k_new.dtype) if hasattr(k_new, "dtype") else None
  if dtype not in INPUT_DTYPES:
    raise TypeError(f"kv_cache_update: k_new must be float32, bfloat16 or float16, got {dtype}")
  k_new = jnp.asarray(k_new)
  bsz = k_new.shape[0] if k_new.ndim == 4 else None
  if (k_new.ndim != 4 or tuple(k_new.shape[2:]) != tuple(cache.shape[2:])
      or (not paged and k_new.shape[0] != cache.shape[0])):
    raise ValueError(f"kv_cache_update: k_new must be (B, T, Hkv, D) matching the cache "
                     f"{tuple(cache.shape)}, got {k_new.shape}")
  tq = k_new.shape[1]
  pdt = jnp.dtype(positions.dtype) if hasattr(positions, "dtype") else None
  if pdt != jnp.int32:
    raise TypeError(f"kv_cache_update: positions must be int32, got {pdt}")
  positions = jnp.asarray(positions)
  if positions.shape == (bsz,):
    positions = positions[:, None] + jnp.arange(tq, dtype=jnp.int32)[None, :]
  elif positions.shape != (bsz, tq):
    raise ValueError(f"kv_cache_update: positions must be (B,) or (B, T) = ({bsz},) or "
                     f"({bsz}, {tq}), got {positions.shape}")
  if paged:
    block_tables = _check_int(block_tables, "block_tables", (bsz, None))
    _check_table_values(block_tables, cache.shape[0])
    capacity = block_tables.shape[1] * cache.shape[1]
  else:
    capacity = cache.shape[capacity_axis]
  val = _concrete(positions)
  if val is not None and (val.min() < 0 or val.max() >= capacity):
    raise ValueError(f"kv_cache_update: positions must lie in [0, {capacity}), got values in "
                     f"[{val.min()}, {val.max()}]")
  hkv = cache.shape[2]
  if paged:
    page_size = cache.shape[1]
    page = jnp.take_along_axis(block_tables, jnp.clip(positions // page_size, 0,
                                                      block_tables.shape[1] - 1), axis=1)
    # A position past the table goes past the pool: dropped.
    slot = jnp.where(positions < capacity, page * page_size + positions % page_size, -1)
  else:
    slot = jnp.arange(bsz, dtype=jnp.int32)[:, None] * capacity + positions
    slot = jnp.where((positions >= 0) & (positions < capacity), slot, -1)
  # The cache's flat rows (slot, head): token t of row b, head h goes to row slot * Hkv + h,
  # or nowhere (-1) when its position is dropped.
  heads = jnp.arange(hkv, dtype=jnp.int32)
  dest = jnp.where(slot[..., None] >= 0, slot[..., None] * hkv + heads, -1).reshape(-1)
  n_rows = math.prod(cache.shape[:3])

  if not isinstance(cache, QuantizedArray):
    if scale is not None:
      raise ValueError("kv_cache_update: scale is for quantized caches")
    return _scatter_rows(cache.reshape(n_rows, cache.shape[3]), dest,
                         k_new.reshape(-1, k_new.shape[3])).reshape(cache.shape)
  qf = get_quantized_format(cache.format)
  kw = dict(axis=-1, scale_mode=cache.scale_mode, hadamard=cache.hadamard,
            implementation=implementation)
  if qf.block_scaled:
    kw["block_shape"] = cache.block_shape
  if qf.tensor_scale:
    kw["scale"] = (scale if scale is not None
                   else jnp.float32(1.0) / jnp.asarray(cache.tensor_scale, jnp.float32))
  elif scale is not None:
    raise ValueError(f"kv_cache_update: scale is for the per-tensor formats, not "
                     f"{cache.format!r}")
  data, scales = _quantize_rows_into(
      k_new.reshape(-1, k_new.shape[3]), dest, cache.data.reshape(n_rows, -1),
      None if cache.scales is None else cache.scales.reshape(n_rows, -1), cache.format,
      _caller="kv_cache_update", interpret=interpret, **kw)
  data = data.reshape(cache.data.shape)
  scales = None if scales is None else scales.reshape(cache.scales.shape)
  return QuantizedArray(data, scales, cache.tensor_scale, format=cache.format,
                        element_format=cache.element_format, shape=cache.shape, axis=cache.axis,
                        block_shape=cache.block_shape, scale_mode=cache.scale_mode,
                        hadamard=cache.hadamard)
