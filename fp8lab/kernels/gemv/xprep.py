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


def _xprep_kernel(*refs, n_b: int, k: int, pw: int, kw_pad: int, tw: int, batch_pad: int,
                  block_batch: int, layout: str, scaled: bool):
  """One program of _prep_x_pallas: words [w0, w0 + tw) of every plane of x's parts, all
  batch blocks. x (flat (n_b * k,)) is read once per element, one (block_batch, tw / 2) load
  per position o in a pair of words (elements o, o + 2 pw, ...: a stride of 2 pw in the row);
  rows >= n_b and elements >= k read as zero. Each load's parts are stored transposed in
  the rows of the plane and parity unpack.pair_offsets gives position o.

  refs: x, the row maxima (only where `scaled`), the output."""
  if scaled:
    x_ref, a_ref, o_ref = refs
  else:
    (x_ref, o_ref), a_ref = refs, None
  bb = block_batch
  w0 = pl.program_id(0) * tw
  j = lax.iota(jnp.int32, tw // 2)               # word pairs of the program
  offsets = unpack.pair_offsets(layout, pw)
  n_slots = _n_slots(x_ref.dtype, jnp.float16)
  for c in range(batch_pad // bb):               # batch blocks of bb rows
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
      out_rows = (plane * kw_pad + w0 + g + 2 * j) * (n_slots * batch_pad)
      for slot, part in enumerate(_x_part_list(xv, x_ref.dtype, jnp.float16, shift)):
        col = c * n_slots * bb + slot * bb + lax.iota(jnp.int32, bb)
        plgpu.store(o_ref.at[out_rows[:, None] + col[None, :]], part.T)


def _prep_x_pallas(x: jax.Array, per_word: int, kw_pad: int, batch_pad: int, layout: str,
                   block_batch: int, a: jax.Array | None, tw: int, num_warps: int,
                   interpret: bool = False) -> jax.Array:
  """_prep_x's float16 right operand (pw, kw_pad, n_slots * batch_pad), the same bits, in one
  Pallas kernel (_xprep_kernel) of kw_pad / tw programs; a: x's row maxima where _x_scaled
  (the GEMV takes the same array). XLA's version (_prep_x) gathers x at a stride of k for
  each output row; this reads it along the rows (see _use_xprep_kernel for where it is
  used)."""
  n_b, k = x.shape
  if (kw_pad % tw or tw % 2 or batch_pad % block_batch
      or (a is not None) != _x_scaled(x.dtype, jnp.float16)):
    raise ValueError(f"x preparation: {tw} words per program for {kw_pad} words, "
                     f"{block_batch} of {batch_pad} rows, row maxima "
                     f"{'given' if a is not None else 'missing'}")
  kernel = functools.partial(_xprep_kernel, n_b=n_b, k=k, pw=per_word, kw_pad=kw_pad,
                             tw=tw, batch_pad=batch_pad, block_batch=block_batch,
                             layout=layout, scaled=a is not None)
  n_cols = _n_slots(x.dtype, jnp.float16) * batch_pad
  out = pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct((per_word * kw_pad * n_cols,), jnp.float16),
      grid=(kw_pad // tw,),
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
      interpret=interpret, name="fp8lab_xprep",
  )(x.reshape(-1), *([] if a is None else [a]))
  return out.reshape(per_word, kw_pad, n_cols)


# The Pallas preparation is faster than XLA's from 16 x rows on, for the 4- and 8-codes-per-
# word formats' float16 operand; below, and for 2 codes per word, XLA's is (docs/gemv_kernel.md).
# gemv_launch gives it 32 elements of each row per program and batch_pad / 16 warps.
_XPREP_MIN_ROWS = 16


def _use_xprep_kernel(plan: FormatPlan, batch_pad: int, interpret: bool) -> bool:
  """Whether gemv_launch prepares x's float16 operand with _prep_x_pallas (compiled only)."""
  return (not interpret and batch_pad >= _XPREP_MIN_ROWS and plan.per_word >= 4
          and _operand_dtype(plan) == jnp.float16)
