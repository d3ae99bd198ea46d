"""What both models share: weight and KV-cache formats, quantized linear layers, sizes.

A linear layer's weight (n_out, k) is either a float32 array (the "f32" baseline: a plain
float32 dot) or a QuantizedArray made by `fp8lab.quantize` along k, applied by
`fp8lab.gemv_packed` (any batch of rows: the "xla" implementation for prefill-sized batches,
the op's own default, implementation=None, for decode). Embedding tables, norms and biases stay
float32 in every format: they are gathers and elementwise ops, not GEMVs.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

import fp8lab
from fp8lab.formats import LAYOUTS, QUANTIZED, get_quantized_format

__all__ = ["WeightFormat", "KVFormat", "weight_formats", "kv_formats", "quantize_weight",
           "linear", "tree_nbytes", "F32", "DEFAULT_HADAMARD"]

# Rotation block of the "+had" rows: 64 divides every k of both models (MiniLM 384 / 1536,
# SmolLM2 576 / 1536); 128 divides neither 384 nor 576.
DEFAULT_HADAMARD = 64


@dataclasses.dataclass(frozen=True)
class WeightFormat:
  """How every linear weight of a model is stored. fmt None: float32, a plain dot."""
  label: str
  fmt: str | None = None
  block_shape: tuple[int, ...] | None = None
  scale_mode: str | None = None
  hadamard: int | None = None
  stochastic: bool = False

  def quantize_kwargs(self) -> dict:
    return dict(block_shape=self.block_shape, scale_mode=self.scale_mode,
                hadamard=self.hadamard, rounding="stochastic" if self.stochastic else "nearest")


F32 = WeightFormat("f32")


def weight_formats(variants=("nearest", "hadamard", "stochastic"),
                   hadamard_block: int = DEFAULT_HADAMARD) -> list[WeightFormat]:
  """f32, then every layout of fp8lab.formats.LAYOUTS (every QUANTIZED format, nvfp4 16x16,
  e4m3_block 128x128) and the MX formats' "rceil" scale rule, each in `variants`:
  "nearest", "hadamard" (rotated along k) and "stochastic" (SR of the elements, where the
  format has it; f16 / bf16 are plain casts: nearest only)."""
  out = [F32]
  layouts = []
  for name, (fmt, block) in LAYOUTS.items():
    layouts.append((name, fmt, block, None))
    qf = QUANTIZED[fmt]
    if qf.scaling == "mx" and block is None:
      layouts.append((f"{name}_rceil", fmt, None, "rceil"))
  for name, fmt, block, mode in layouts:
    qf = get_quantized_format(fmt)
    plain_cast = qf.scaling == "none"
    for v in variants:
      if v == "nearest":
        out.append(WeightFormat(name, fmt, block, mode))
      elif v == "hadamard" and not plain_cast:
        out.append(WeightFormat(f"{name}+had", fmt, block, mode, hadamard=hadamard_block))
      elif v == "stochastic" and qf.stochastic_rounding:
        out.append(WeightFormat(f"{name}+sr", fmt, block, mode, stochastic=True))
  return out


@dataclasses.dataclass(frozen=True)
class KVFormat:
  """How the KV cache is stored: fmt None keeps plain arrays of `dtype` ("float32" /
  "bfloat16"); otherwise fp8lab.quantize's format along the head dimension. Per-tensor
  formats (e4m3, e5m2, nvfp4) take their scale from the prompt's amax with 2x headroom."""
  label: str
  fmt: str | None = None
  dtype: str = "float32"
  block_shape: tuple[int, ...] | None = None


def kv_formats(head_dim: int) -> list[KVFormat]:
  """f32 and bf16 plain arrays ("f32", "bf16_array"), then every QUANTIZED format that
  fp8lab.attention takes as a KV cache (1D blocks along D; blockwise FP8 with one scale per
  token and head, block (D,))."""
  from fp8lab.kernels import attention as attn_kernel  # pylint: disable=g-import-not-at-top
  out = [KVFormat("f32"), KVFormat("bf16_array", dtype="bfloat16")]
  for name, qf in QUANTIZED.items():
    block = (head_dim,) if qf.scaling == "block" else None
    if attn_kernel.serves(name, block if block else qf.block_shape):
      out.append(KVFormat(name, name, block_shape=block))
  return out


@functools.lru_cache(maxsize=None)
def _quantizer(fmt: str, block_shape, scale_mode, hadamard, stochastic: bool):
  """fp8lab.quantize for one format, jitted whole: eagerly, its golden model dispatches
  op by op (about a second per weight on the CPU); jitted, one compile per weight shape."""
  def run(w, key):
    return fp8lab.quantize(w, fmt, axis=-1, block_shape=block_shape, scale_mode=scale_mode,
                           hadamard=hadamard, rounding="stochastic" if stochastic else "nearest",
                           key=key if stochastic else None)
  return jax.jit(run)


def quantize_weight(w, wf: WeightFormat, key=None):
  """w (n_out, k) float32 -> the stored weight of format wf (float32 array for f32)."""
  w = jnp.asarray(w, jnp.float32)
  if wf.fmt is None:
    return w
  if wf.stochastic and key is None:
    raise ValueError(f"{wf.label}: stochastic rounding needs a key")
  if key is None:
    key = jax.random.key(0)                      # unused by nearest rounding
  return _quantizer(wf.fmt, wf.block_shape, wf.scale_mode, wf.hadamard, wf.stochastic)(w, key)


def linear(w, x, bias=None, *, implementation=None):
  """x (..., k) @ w.T (+ bias): fp8lab.gemv_packed for a QuantizedArray, a float32 dot else."""
  if isinstance(w, fp8lab.QuantizedArray):
    y = fp8lab.gemv_packed(w, x, implementation=implementation)
  else:
    y = jnp.dot(x, w.T, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
  return y if bias is None else y + bias


def tree_nbytes(tree) -> int:
  """Bytes of every array leaf (QuantizedArray: packed words + scales + tensor scale)."""
  return int(sum(np.dtype(a.dtype).itemsize * int(np.prod(a.shape))
                 for a in jax.tree_util.tree_leaves(tree)))
