"""The values of a QuantizedArray computed by XLA from its packed words: what a user writes in
jnp over the same bytes, and the first step of every op's "xla" (and "cudnn") path.

The golden model (fp8lab/numerics, QuantizedArray.dequantize) decodes with integer ops so
that it is obviously right; this module decodes the way XLA's own arrays do: the uint32
words bitcast to XLA's float8 / float4 element dtype (the same bytes, docs/numerics.md
section 9), upcast to float32, times the block or tensor factors. test_ops.py checks it bit
for bit against the golden model. No kernel and no op path calls the golden model.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from fp8lab.formats import get_quantized_format

__all__ = ["xla_values", "per_element"]


def per_element(x, per_block: jax.Array) -> jax.Array:
  """A per-block array of x's block scales repeated over x's elements: 1D blocks along the
  last axis, or 2D tiles over the last two axes."""
  *lead, rows, k = x.shape
  if len(x.block_shape) == 2:
    r, c = x.block_shape
    out = jnp.repeat(jnp.repeat(per_block, r, axis=-2), c, axis=-1)
    return out[..., :rows, :k]
  return jnp.repeat(per_block, x.block_shape[0], axis=-1)[..., :k]


def xla_values(x) -> jax.Array:
  """x's values (its logical shape, float32) from its packed words, x quantized along its
  last axis: the float32 products dequantize makes (IEEE multiplies), except that XLA
  flushes float32 subnormals to zero (on the CPU and GPUs): a subnormal product gives a
  zero there. Subnormal factors (E8M0 code 0 = 2^-127, blockwise scales below 2^-126) go in
  as two normal factors, so that XLA does not flush them. A Hadamard-rotated x gives its
  rotated values, as dequantize does.

  Raises:
    ValueError: x is not quantized along its last axis.
  """
  if x.axis != len(x.shape) - 1:
    raise ValueError(f"xla_values: x must be quantized along its last axis, got axis "
                     f"{x.axis} of shape {x.shape}")
  qf = get_quantized_format(x.format)
  k = x.shape[-1]
  elems = lax.bitcast_convert_type(x.data, qf.element.dtype)        # (..., kw, per_word)
  values = elems.reshape(tuple(x.shape[:-1]) + (-1,))[..., :k].astype(jnp.float32)
  if qf.scaling == "tensor":
    return values * x.tensor_scale
  if not qf.block_scaled:
    return values

  def expand(per_block):
    return per_element(x, per_block)

  if qf.scaling == "block":                                 # float32 block scales
    # A subnormal scale b * 2^-149 (1 / FLT_MAX, pow2's 2^-127), which XLA would flush (an
    # Inf code times 0 is NaN), goes in as two normal factors: float(b) 2^-125 and 2^-24.
    bits = lax.bitcast_convert_type(x.scales, jnp.uint32)
    sub = (bits >> 23) == 0
    hi = jnp.where(sub, bits.astype(jnp.float32) * jnp.float32(2.0**-125), x.scales)
    return values * expand(hi) * expand(jnp.where(sub, jnp.float32(2.0**-24), 1.0))
  if qf.scaling == "nvfp4":
    scales = lax.bitcast_convert_type(x.scales, qf.scale_format.dtype).astype(jnp.float32)
    return values * expand(scales * x.tensor_scale)         # fl(s_e4m3 * S_dec) per block
  # MX: 2^(c - 127) as two normal float32 factors 2^h * 2^(e - h), h = floor(e / 2): the
  # E8M0 code 0 alone (2^-127) is a float32 subnormal, which XLA flushes to 0 (and an Inf
  # element times 0 would be NaN). Code 0xFF (NaN) makes its block NaN.
  e = x.scales.astype(jnp.int32) - qf.scale_format.bias
  h = e >> 1

  def pow2(n):
    return lax.bitcast_convert_type((n + 127).astype(jnp.uint32) << 23, jnp.float32)

  nan = x.scales == jnp.uint8(qf.scale_format.nan_code)
  first = jnp.where(nan, jnp.float32(jnp.nan), pow2(h))
  return values * expand(first) * expand(pow2(e - h))
