"""The Pallas kernel that prepares x's float16 operand (_prep_x's bits, read along x's rows)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import numpy as np

from fp8lab.kernels import unpack
from fp8lab.kernels.gemv.operands import _n_slots, _x_part_list, _x_scaled, _x_shift
from fp8lab.kernels.gemv.plan import FormatPlan, _operand_dtype


def _xprep_kernel(*refs, n_b: int, k: int, pw: int, kw_pad: int, tw: int, bp: int, bb: int,
                  layout: str, scaled: bool):
  """One program of _prep_x_pallas: words [w0, w0 + tw) of every plane of x's parts, all
  batch blocks. x (flat (n_b * k,)) is read once per element, one (bb, tw / 2) load per
  position o in a pair of words (elements o, o + 2 pw, ...: a stride of 2 pw in the row);
  rows >= n_b and elements >= k read as zero. Each load's parts are stored transposed in
  the rows of the plane and parity unpack.pair_offsets gives position o."""
  x_ref, o_ref = refs[0], refs[-1]
  a_ref = refs[1] if scaled else None
  w0 = pl.program_id(0) * tw
  j = lax.iota(jnp.int32, tw // 2)               # word pairs of the program
  offsets = unpack.pair_offsets(layout, pw)
  n_slots = _n_slots(x_ref.dtype, jnp.float16)
  for c in range(bp // bb):                      # batch blocks of bb rows
    rows = c * bb + lax.iota(jnp.int32, bb)
    safe_rows = jnp.minimum(rows, n_b - 1)
    shift = None
    if scaled:
      a = plgpu.load(a_ref.at[safe_rows], mask=rows < n_b, other=0.0)
      shift = _x_shift(a)[:, None]
    for o in range(2 * pw):                      # position in a pair of words
      kk = w0 * pw + o + 2 * pw * j
      xv = plgpu.load(x_ref.at[safe_rows[:, None] * k + jnp.minimum(kk, k - 1)[None, :]],
                      mask=(rows < n_b)[:, None] & (kk < k)[None, :], other=0)
      plane, g = (int(v[0]) for v in np.nonzero(offsets == o))
      out_rows = (plane * kw_pad + w0 + g + 2 * j) * (n_slots * bp)
      for slot, part in enumerate(_x_part_list(xv, x_ref.dtype, jnp.float16, shift)):
        col = c * n_slots * bb + slot * bb + lax.iota(jnp.int32, bb)
        plgpu.store(o_ref.at[out_rows[:, None] + col[None, :]], part.T)


def _prep_x_pallas(x: jax.Array, per_word: int, kw_pad: int, bp: int, layout: str, bb: int,
                   a: jax.Array | None, tw: int, num_warps: int,
                   interpret: bool = False) -> jax.Array:
  """_prep_x's float16 right operand (pw, kw_pad, n_slots * bp), the same bits, in one Pallas
  kernel (_xprep_kernel) of kw_pad / tw programs; a: x's row maxima where _x_scaled (the
  GEMV takes the same array). XLA's version (_prep_x) gathers x at a stride of k for each
  output row; this reads it along the rows (see _use_xprep_kernel for where it is used)."""
  n_b, k = x.shape
  if kw_pad % tw or tw % 2 or bp % bb or (a is not None) != _x_scaled(x.dtype, jnp.float16):
    raise ValueError(f"x preparation: {tw} words per program for {kw_pad} words, {bb} of "
                     f"{bp} rows, row maxima {'given' if a is not None else 'missing'}")
  kernel = functools.partial(_xprep_kernel, n_b=n_b, k=k, pw=per_word, kw_pad=kw_pad,
                             tw=tw, bp=bp, bb=bb, layout=layout, scaled=a is not None)
  n_cols = _n_slots(x.dtype, jnp.float16) * bp
  out = pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct((per_word * kw_pad * n_cols,), jnp.float16),
      grid=(kw_pad // tw,),
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
      interpret=interpret, name="fp8lab_xprep",
  )(x.reshape(-1), *([] if a is None else [a]))
  return out.reshape(per_word, kw_pad, n_cols)


# _prep_x_pallas against XLA's _prep_x on the H200 (x preparation's device time per GEMV,
# float32 x, benchmarks/results/gemv_xprep_h200_20261130.txt): 16384^2 e4m3 batch 16 2.8 vs
# 3.8 us, batch 64 6.0 vs 12.9, 4096 x 14336 batch 64 5.3 vs 11.7, nvfp4 batch 64 7.8 vs 13.2,
# mxfp8 batch 64 7.3 vs 12.8 (MX: the float16 operand; the exact path's bfloat16 one stays
# XLA's, a tiled transpose there); at batches up to 4 it lost (2.0-2.7 vs 1.9), and for the
# 2-per-word formats (bf16 batch 16 2.9 vs 2.4): those keep XLA's. 32 elements of each row
# per program and bp / 16 warps: 16 elements per thread (fewer per load with batch blocks).
_XPREP_MIN_ROWS = 16


def _use_xprep_kernel(plan: FormatPlan, bp: int, interpret: bool) -> bool:
  """Whether gemv_launch prepares x's float16 operand with _prep_x_pallas (measured faster
  there, above)."""
  return (not interpret and bp >= _XPREP_MIN_ROWS and plan.per_word >= 4
          and _operand_dtype(plan) == jnp.float16)


