"""The fused quantize kernel (Pallas, Triton lowering): x -> packed codes, scale codes, amax.

Layout. x (R, C) is read once, flat, in tiles of block_rows x block_cols (QuantizeConfig,
powers of two): program p of a 1D grid takes row block p // n_col_blocks and column block
p % n_col_blocks, so consecutive programs read consecutive column strips of the same rows.
Loads past R or C are masked (they read 0: zeros change no block amax, as the golden model's
zero padding) and their codes are forced to 0 (the golden model pads codes with zeros).
Each program then, in registers:
  1. widens the tile to float32 bit patterns (integer ops, encode.to_f32_bits) and takes
     the magnitudes;
  2. reduces them per block (32 along the row for MX, 16 for nvfp4, 16 x 16 tiles) to the
     block maxima, which give the scale codes and (>= Inf) the NaN / Inf blocks; blockwise
     FP8 (blocks of 16..256, 128 x 128 tiles) reduces the finite magnitudes and divides
     once per block for its float32 scales (blockwise.py);
  3. encodes every element (encode.py: integer ops only) from the scaled value the golden
     model rounds (MX: x * 2^-s as an exponent shift; nvfp4: fl(x * enc_b); e4m3 / e5m2 and
     blockwise: fl(x * scale), exact float32 products on integers), rounding to nearest even
     or stochastically with threefry2x32 bits drawn from each element's flat index;
  4. packs the codes along the row into uint32 words and stores them, with the scale codes
     (uint8; blockwise: the float32 bits of 1 / scale as uint32), and writes its largest
     finite magnitude to one slot of a per-program amax output, which the wrapper reduces
     with a max (order-free, so deterministic).
With transpose=True the same tile is also blocked along its columns (x's first axis) and
packed along them, and stored into quantize(x.T)'s arrays: both orientations come from one
read of x. Masked-off stores point one past the end of their output (interpret mode writes
every offset it is given, so none may alias a stored one).

Scalars that depend on the whole tensor (nvfp4's S_enc, S_dec and the per-code encode
factors enc_b, 1 / scale of per-tensor formats) are computed before the launch, on a few
values, with exact integer float32 arithmetic (f32.mul_bits, f32.div_bits, scalars.py). nvfp4
without a given amax or S_enc, and e4m3 / e5m2 without a given scale (current scaling), take a
first, small Pallas pass (_amax_kernel) for the tensor amax.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import numpy as np

from fp8lab.formats import E2M1, E4M3, ElementFormat, QuantizedFormat, get_quantized_format
from fp8lab.kernels import device
from fp8lab.kernels.quantize import encode as enc
from fp8lab.kernels.quantize import blockwise, f32, rotate, scalars
from fp8lab.kernels.quantize.configs import QuantizeConfig, fit_config, quantize_config
from fp8lab.numerics.random import threefry2x32

__all__ = ["KernelResult", "quantize_2d"]

_U = np.uint32


class KernelResult(NamedTuple):
  """quantize_2d's outputs. data / scales: quantize(x, fmt, axis=-1)'s leaves (scales None
  without block scales); tensor_scale: float32 scalar (None for MX); amax: float32 scalar,
  the largest finite |x| (0 if none); data_t / scales_t: quantize(x.T, ...)'s (None
  without transpose); history / next_scale: with a `history`, the delayed-scaling state's
  new amax history and scale (DelayedScaling.update's), else None."""
  data: Any
  scales: Any
  tensor_scale: Any
  amax: Any
  data_t: Any
  scales_t: Any
  history: Any = None
  next_scale: Any = None


class _Spec(NamedTuple):
  """Static facts of one launch."""
  fmt: str
  kind: str                 # "tensor", "mx", "nvfp4", "block"
  block: tuple[int, ...]    # () for tensor formats
  scale_mode: str
  rows: int
  cols: int
  tr: int                   # tile rows / columns
  tc: int
  n_cb: int                 # column blocks
  transpose: bool
  stochastic: bool
  sr_bits: int
  float_products: bool      # QuantizeConfig.float_products
  hadamard: int = 0         # Hadamard block along the rows (0: none)
  float_encode: bool = False  # QuantizeConfig.float_encode
  fp8_cvt: bool = False     # fp8 codes by the conversion instruction (float_encode, sm_89+)
  even: bool = False        # the tiles cover x exactly: no masks, no clamped offsets
  # delayed scaling folded into the launch: (history length n, margin, algo, numerator
  # bits), or None
  delayed: tuple[int, int, str, int] | None = None
  tpp: int = 1              # consecutive tiles per program (QuantizeConfig.tiles_per_program)
  # rows of the arrays the codes and scales are written into, in place, at each x row's
  # destination row (quantize_2d's `dest` / `into`), or 0: quantize(x)'s own arrays
  dest_rows: int = 0


def _elem(spec: _Spec) -> ElementFormat:
  return get_quantized_format(spec.fmt).element


def _scale_dtype(kind: str):
  """dtype the kernel stores block scales in: uint8 codes, or (blockwise) uint32 float32 bits,
  which the wrapper bitcasts to float32 (no float conversion touches them)."""
  return jnp.uint32 if kind == "block" else jnp.uint8


class _Scalars(NamedTuple):
  """The launch's scalar inputs, each its own small array (an XLA-side stack of them was one
  more kernel per call): first (1,) the per-tensor scale or nvfp4's fl(S_enc / 6) (0 for
  the other kinds); key (2,) the threefry key words (stochastic rounding, else None);
  given (1,) the scale or S_enc as given, where it is not `first` (delayed nvfp4), else
  None."""
  first: Any
  key: Any = None
  given: Any = None

  def given_bits(self):
    return (self.first if self.given is None else self.given)[0]


def _random_bits(scal_ref, idx):
  """threefry2x32(k0, k1, idx, 0)[0] (numerics/random.py's counter rule)."""
  k0, k1 = scal_ref.key[0], scal_ref.key[1]
  bits, _ = threefry2x32(k0, k1, idx, jnp.zeros_like(idx))
  return bits


def _product(bits, factor_bits, spec: _Spec):
  """Bits of fl(x * factor) (QuantizeConfig.float_products: the float multiply, else
  integer ops). A NaN product may be any NaN: the encoders read only that it is one."""
  if spec.float_products:
    return enc.u32(lax.bitcast_convert_type(bits, jnp.float32)
                   * lax.bitcast_convert_type(factor_bits, jnp.float32))
  return f32.mul_bits(bits, factor_bits)


def _encode(p, elem: ElementFormat, spec: _Spec, rbits, nan_code: int | None = None):
  """Saturating codes of the float32 bits p (the scaled values), as enc.encode_bits; with
  QuantizeConfig.float_encode (round to nearest even only) from float instructions: e2m1 by
  float adds, fp8 by the conversion instruction where the GPU has it. A NaN p gives
  nan_code (None: no NaN can occur)."""
  if rbits is not None or not spec.float_encode:
    return enc.encode_bits(p, elem, rbits, spec.sr_bits, nan_code=nan_code)
  if elem.bits == 4:
    code = enc.e2m1_float_code(p)
  elif spec.fp8_cvt:
    code = enc.fp8_convert_code(lax.bitcast_convert_type(p, jnp.float32), elem)
  else:
    return enc.encode_bits(p, elem, nan_code=nan_code)
  if nan_code is not None:
    code = jnp.where((p & enc.MAG) > enc.INF, _U(nan_code), code)
  return code


def _encode_tile(bits, mag, axis: int, spec: _Spec, scal_ref, tab_ref, rbits):
  """(codes, scale codes) of a tile blocked along `axis` (codes uint32, scales uint32 or
  None; blockwise: the float32 bits of the stored 1 / scale). For 2D tiles `axis` only
  matters to the caller (the same codes)."""
  elem = _elem(spec)
  if spec.kind == "tensor":
    # the scale as a scalar: its unpacking in the product is done once, not per element
    p = _product(bits, scal_ref.first[0], spec)
    # fl(x * scale) of a NaN is the canonical, positive NaN (docs/numerics.md section 8)
    return _encode(p, elem, spec, rbits, nan_code=elem.nan_code), None
  if spec.kind == "block":                 # docs/numerics.md section 8b: finite block amax
    mag = blockwise.finite_magnitudes(mag)
  if len(spec.block) == 2:
    br, bc = spec.block
    bm = enc.tile_max(mag, br, bc)
    grow = functools.partial(enc.expand_tiles, br=br, bc=bc)
  else:
    (b,) = spec.block
    bm = enc.block_max(mag, axis, b)
    grow = functools.partial(enc.expand, axis=axis, b=b)
  if spec.kind == "block":
    scale, scale_inv = blockwise.block_scale_bits(bm, elem, spec.scale_mode)
    p = _product(bits, grow(scale), spec)
    # as the per-tensor formats: NaN -> the positive NaN code, +-Inf saturates
    return _encode(p, elem, spec, rbits, nan_code=elem.nan_code), scale_inv
  nonfinite = bm >= enc.INF
  if spec.kind == "mx":
    # rceil's fl(1 / elem_max): numpy's float32 division is IEEE, a constant of the launch
    inv = int((np.float32(1) / np.float32(elem.max_finite)).view(np.uint32))
    s = enc.mx_exponent(bm, elem, spec.scale_mode, inv)
    sc = enc.mx_scale_code(bm, s)
    # x * 2^-s as an exponent shift: exact where the golden model's ldexp is; where ldexp
    # rounds (a float32-subnormal result, < 2^-126) every element format encodes +-0 anyway
    if rbits is not None or not spec.float_encode:
      codes = enc.encode_shifted(bits, grow(s), elem, rbits, spec.sr_bits)
    elif spec.float_products:
      # 2^-s is a normal float32 for every block (-127 <= s <= 126: s = 127 would need an
      # amax >= 2^(127 + emax)), so the product is exact but where it is below 2^-126
      # (encodes to +-0 anyway) or x is subnormal (exact where the multiply keeps them)
      factor = (127 - grow(s)).astype(jnp.uint32) << _U(23)
      codes = _encode(_product(bits, factor, spec), elem, spec, None)
    else:
      codes = _encode(enc.shift_bits(bits, grow(s)), elem, spec, None)
  else:                                                     # nvfp4, docs/numerics.md 5
    sf = jnp.full(bm.shape, scal_ref.first[0], jnp.uint32)  # fl(S_enc * fl(1/6))
    # the block's scale code, rounded to nearest even whatever the elements' rounding
    sc = _encode(_product(bm, sf, spec), E4M3, spec, None)
    sc = jnp.where(nonfinite, _U(E4M3.nan_code), sc)
    enc_b = plgpu.load(tab_ref.at[enc.i32(sc)])            # enc_b of each scale code
    codes = _encode(_product(bits, grow(enc_b), spec), elem, spec, rbits)
  # NaN / Inf blocks' codes are 0: a branch of the whole program, so that a finite tile
  # (every block's max below Inf) pays no select per element
  any_nonfinite = jnp.max(jnp.max(bm, axis=-1), axis=0) >= enc.INF
  codes = lax.cond(any_nonfinite, lambda: jnp.where(grow(nonfinite), _U(0), codes),
                   lambda: codes)
  return codes, sc


def _store(ref, vals, rows, cols, n_rows: int, n_cols: int, dtype, even: bool = False):
  """vals (len(rows), len(cols)) into the row-major (n_rows, n_cols) array behind ref. even:
  every index is in range (plain offsets, which Triton sees as contiguous: vector stores)."""
  if even:
    plgpu.store(ref.at[rows[:, None] * n_cols + cols[None, :]], vals.astype(dtype))
    return
  ok = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
  offs = jnp.where(ok, rows[:, None] * n_cols + cols[None, :], n_rows * n_cols)
  plgpu.store(ref.at[offs], vals.astype(dtype), mask=ok)


def _store_rows_t(ref, vals, vrows, vcols, n_vrows: int, n_vcols: int, dtype,
                  even: bool = False):
  """vals (len(vrows), len(vcols)), indexed in x's orientation, into the TRANSPOSED
  (n_vcols, n_vrows) row-major array behind ref: vals[i, j] -> element (vcols[j], vrows[i])."""
  if even:
    plgpu.store(ref.at[vcols[None, :] * n_vrows + vrows[:, None]], vals.astype(dtype))
    return
  ok = (vrows < n_vrows)[:, None] & (vcols < n_vcols)[None, :]
  offs = jnp.where(ok, vcols[None, :] * n_vrows + vrows[:, None], n_vrows * n_vcols)
  plgpu.store(ref.at[offs], vals.astype(dtype), mask=ok)


def _finite_max(mag):
  """(1,) largest finite magnitude bits of a tile (0 if none), reduced one axis at a time
  (the Triton lowering's multi-axis reduction fails under an explicit abstract mesh). The
  plain max first: below Inf it is the answer, and only a tile holding NaN / Inf (a branch
  of the whole program) masks them out, so a finite tile pays one max per element, not a
  compare, a select and a max."""
  tmax = jnp.max(jnp.max(mag, axis=1), axis=0)
  finite = lambda: jnp.max(jnp.max(jnp.where(mag < enc.INF, mag, _U(0)), axis=1), axis=0)
  return lax.cond(tmax < enc.INF, lambda: tmax, finite)[None]


def _fold_delayed(sync_ref, amax_ref, hist_ref, new_hist_ref, new_scale_ref, scal_ref,
                  tile_amax, n_prog: int, spec: _Spec):
  """Delayed scaling inside the launch. Every program folds its tile's finite amax into
  sync_ref[0] (an atomic unsigned max of non-negative float bits: order-free, so
  deterministic), then counts itself done in sync_ref[1] (both zeroed by the caller). The
  program that counts last (acquire / release atomics: it sees every other program's max)
  reads the amax into amax_ref, rolls the history (a load at offsets i - 1) and computes
  the next scale with the integer twin of DelayedScaling.update
  (scalars.delayed_update_bits), on the (N,) power-of-two padding of the n-long history.
  Called after the program's own stores (see the caller)."""
  n, margin, algo, numerator = spec.delayed
  size = 1 << max(0, (n - 1).bit_length())
  plgpu.atomic_max(sync_ref, jnp.int32(0), tile_amax[0])
  done = plgpu.atomic_add(sync_ref, jnp.int32(1), jnp.uint32(1))

  @pl.when(done == _U(n_prog - 1))
  def _last():
    # the max of every program's
    amax = plgpu.atomic_max(sync_ref, jnp.int32(0), jnp.uint32(0))
    amax_ref[0] = amax
    idx = lax.iota(jnp.int32, size)
    # the old history moved up one slot: entry i - 1 into slot i (clamped offsets, masked)
    shifted = plgpu.load(hist_ref.at[jnp.clip(idx - 1, 0, n - 1)],
                         mask=(idx >= 1) & (idx < n), other=0)
    new_hist, new_scale = scalars.delayed_update_bits(
        shifted, amax, scal_ref.given_bits(), fmt_max_bits=numerator, margin=margin, algo=algo,
        length=n)
    plgpu.store(new_hist_ref.at[idx], new_hist, mask=idx < n)
    new_scale_ref[0] = new_scale


def _quantize_kernel(*refs, spec: _Spec, has_scales: bool, n_prog: int):
  """One program: QuantizeConfig.tiles_per_program consecutive tiles (see the module
  docstring). refs: x, the _Scalars (first; key with stochastic
  rounding; given with delayed nvfp4), enc_b table (nvfp4), Hadamard signs, the history and
  the zeroed (amax, count) pair (delayed), then the outputs data, scales, amax (partials;
  delayed: one word), data_t, scales_t, tensor scale (per-tensor formats), the pair, the
  new history and scale (the present ones, in that order)."""
  refs = list(refs)
  x_ref = refs.pop(0)
  first = refs.pop(0)
  key = refs.pop(0) if spec.stochastic else None
  given = refs.pop(0) if spec.delayed and spec.kind == "nvfp4" else None
  scal_ref = _Scalars(first, key, given)
  tab_ref = refs.pop(0) if spec.kind == "nvfp4" else None
  signs_ref = refs.pop(0) if spec.hadamard else None
  dest_ref = refs.pop(0) if spec.dest_rows else None
  if spec.dest_rows:
    del refs[:1 + has_scales]               # the arrays written into, aliased to data / scales
  if spec.delayed:
    hist_ref = refs.pop(0)
    refs.pop(0)                             # the zeroed pair, aliased to its output
  data_ref = refs.pop(0)
  scales_ref = refs.pop(0) if has_scales else None
  amax_ref = refs.pop(0)
  data_t_ref = refs.pop(0) if spec.transpose else None
  scales_t_ref = refs.pop(0) if spec.transpose and has_scales else None
  ts_ref = refs.pop(0) if spec.kind == "tensor" else None
  if spec.delayed:
    sync_ref, new_hist_ref, new_scale_ref = refs.pop(0), refs.pop(0), refs.pop(0)
  assert not refs
  elem = _elem(spec)
  pw = elem.per_word
  R, C, tr, tc = spec.rows, spec.cols, spec.tr, spec.tc
  s_dtype = _scale_dtype(spec.kind)

  pid = pl.program_id(0)
  if ts_ref is not None:
    @pl.when(pid == 0)
    def _tensor_scale():                    # 1 / scale, stored once (integer division)
      ts_ref[0] = f32.reciprocal_bits(scal_ref.first[0])

  def tile(t):
    """Tile t: its codes and scales stored, its finite amax (1,) returned."""
    rb, cb = t // spec.n_cb, t % spec.n_cb
    rows = rb * tr + lax.iota(jnp.int32, tr)
    cols = cb * tc + lax.iota(jnp.int32, tc)
    ev = spec.even
    x, ok = _load_tile(x_ref, rows, cols, R, C, ev)
    bits = enc.to_f32_bits(x)
    mag = bits & enc.MAG
    tile_amax = _finite_max(mag)                    # the amax of x as given
    if spec.hadamard:
      # The rows' blocks rotated first, as the golden model does (C is a multiple of the
      # block and tiles are block-aligned: masked columns are whole blocks of zeros).
      signs = plgpu.load(signs_ref.at[lax.iota(jnp.int32, spec.hadamard)])
      bits = rotate.rotate_bits(bits, spec.hadamard, signs=signs,
                                float_ops=spec.float_products)
      mag = bits & enc.MAG

    rbits = None
    if spec.stochastic:                    # element (r, c) of x draws index r * C + c
      rbits = _random_bits(scal_ref, enc.u32(rows[:, None] * C + cols[None, :]))
    codes, sc = _encode_tile(bits, mag, 1, spec, scal_ref, tab_ref, rbits)
    if not ev:
      codes = jnp.where(ok, codes, _U(0))
    wcols = cb * (tc // pw) + lax.iota(jnp.int32, tc // pw)
    out_rows, n_out, ev_out = rows, R, ev
    if spec.dest_rows:                      # each row to its destination; outside: dropped
      d = plgpu.load(dest_ref.at[jnp.minimum(rows, R - 1)])
      n_out, ev_out = spec.dest_rows, False
      out_rows = jnp.where((rows < R) & (d >= 0) & (d < n_out), d, n_out)
    _store(data_ref, enc.pack(codes, 1, elem), out_rows, wcols, n_out, -(-C // pw),
           jnp.uint32, ev_out)
    if has_scales:
      _store_scales(scales_ref, sc, out_rows, cols, rb, cb, spec, s_dtype, n_out, ev_out)
    if spec.transpose:
      _transposed(bits, mag, codes, sc, rows, cols, rb, cb, ok, spec, scal_ref, tab_ref,
                  data_t_ref, scales_t_ref, has_scales)
    return tile_amax

  if spec.tpp == 1:
    prog_amax = tile(pid)
  else:                                     # consecutive tiles, a running max
    prog_amax = lax.fori_loop(
        0, spec.tpp, lambda i, m: jnp.maximum(m, tile(pid * spec.tpp + i)),
        jnp.zeros((1,), jnp.uint32))
  if not spec.delayed:
    amax_ref[pl.ds(pid, 1)] = prog_amax
  else:
    # last: with the atomics before the stores the launch took 349.7 us at bf16 16384^2
    # on the H200, after them 287.5 us (2026-12-02; likely each program waiting on the done
    # count's round trip before its own work)
    _fold_delayed(sync_ref, amax_ref, hist_ref, new_hist_ref, new_scale_ref, scal_ref,
                  prog_amax, n_prog, spec)


def _store_scales(ref, sc, rows, cols, rb, cb, spec: _Spec, s_dtype, n_rows: int | None = None,
                  even: bool | None = None):
  """A tile's block scales (x's orientation) into quantize(x)'s scales array (1D blocks:
  rows `rows` of an array of n_rows, default R, rows)."""
  R, C, tr, tc = spec.rows, spec.cols, spec.tr, spec.tc
  n_rows = R if n_rows is None else n_rows
  even = spec.even if even is None else even
  if len(spec.block) == 2:
    br, bc = spec.block
    srows = rb * (tr // br) + lax.iota(jnp.int32, tr // br)
    scols = cb * (tc // bc) + lax.iota(jnp.int32, tc // bc)
    _store(ref, sc, srows, scols, -(-R // br), -(-C // bc), s_dtype, spec.even)
  else:
    (b,) = spec.block
    scols = cb * (tc // b) + lax.iota(jnp.int32, tc // b)
    _store(ref, sc, rows, scols, n_rows, -(-C // b), s_dtype, even)


def _transposed(bits, mag, codes, sc, rows, cols, rb, cb, ok, spec: _Spec, scal_ref, tab_ref,
                data_t_ref, scales_t_ref, has_scales: bool):
  """quantize(x.T)'s part of the tile, blocked, packed and stored along the tile's columns.
  (Transposing the tile in registers first and encoding it as rows are measured no faster
  on the H200: docs/quantize_kernel.md section 3.)"""
  elem = _elem(spec)
  pw = elem.per_word
  R, C, tr, tc = spec.rows, spec.cols, spec.tr, spec.tc
  s_dtype = _scale_dtype(spec.kind)
  ev = spec.even
  tiles2d = len(spec.block) == 2
  # quantize(x.T): blocks along x's first axis, words packed along it, stored at [c, r / pw]
  rbits = None
  if spec.stochastic:                      # x.T's own flat order: element (r, c) is c * R + r
    rbits = _random_bits(scal_ref, enc.u32(cols[None, :] * R + rows[:, None]))
  if tiles2d and not spec.stochastic:
    codes_t, sc_t = codes, sc
  elif spec.kind == "tensor" and not spec.stochastic:
    codes_t, sc_t = codes, None
  else:
    codes_t, sc_t = _encode_tile(bits, mag, 0, spec, scal_ref, tab_ref, rbits)
    if not ev:
      codes_t = jnp.where(ok, codes_t, _U(0))
  wrows = rb * (tr // pw) + lax.iota(jnp.int32, tr // pw)
  _store_rows_t(data_t_ref, enc.pack(codes_t, 0, elem), wrows, cols, -(-R // pw), C,
                jnp.uint32, ev)
  if has_scales:
    if tiles2d:
      br, bc = spec.block
      srows = rb * (tr // br) + lax.iota(jnp.int32, tr // br)
      scols = cb * (tc // bc) + lax.iota(jnp.int32, tc // bc)
      # x.T's tile (j, i) is x's tile (i, j) transposed: the same codes
      _store_rows_t(scales_t_ref, sc_t, srows, scols, -(-R // br), -(-C // bc), s_dtype, ev)
    else:
      (b,) = spec.block
      brows = rb * (tr // b) + lax.iota(jnp.int32, tr // b)
      _store_rows_t(scales_t_ref, sc_t, brows, cols, -(-R // b), C, s_dtype, ev)



def _load_tile(x_ref, rows, cols, n_rows: int, n_cols: int, even: bool):
  """(tile of the row-major (n_rows, n_cols) x behind x_ref, in-range mask or None). Masked
  loads read 0 at clamped offsets (interpret mode reads every offset it is given); even
  (the tiles cover x exactly): plain offsets, which Triton sees as contiguous (vector
  loads), no mask."""
  if even:
    return plgpu.load(x_ref.at[rows[:, None] * n_cols + cols[None, :]]), None
  ok = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
  offs = (jnp.minimum(rows, n_rows - 1)[:, None] * n_cols
          + jnp.minimum(cols, n_cols - 1)[None, :])
  return plgpu.load(x_ref.at[offs], mask=ok, other=0), ok


def _amax_kernel(x_ref, amax_ref, *, rows: int, cols: int, tr: int, tc: int, n_cb: int):
  """nvfp4's first pass: the largest finite magnitude bits of one tile (as in the main
  kernel) into slot program_id of amax_ref."""
  pid = pl.program_id(0)
  r = (pid // n_cb) * tr + lax.iota(jnp.int32, tr)
  c = (pid % n_cb) * tc + lax.iota(jnp.int32, tc)
  x, _ = _load_tile(x_ref, r, c, rows, cols, rows % tr == 0 and cols % tc == 0)
  mag = enc.to_f32_bits(x) & enc.MAG
  amax_ref[pl.ds(pid, 1)] = _finite_max(mag)


def _grain(qf: QuantizedFormat, block: tuple[int, ...], transpose: bool,
           hadamard: int = 0) -> tuple[int, int]:
  """The smallest tile (rows, cols): whole blocks, whole words and whole Hadamard blocks in
  each blocked and packed direction."""
  pw = qf.per_word
  along = block[-1] if block else pw
  min_cols = max(pw, along, 16, hadamard)
  min_rows = 1
  if len(block) == 2:
    min_rows = block[0]
  if transpose:
    min_rows = max(min_rows, pw, block[0] if block else pw, 16)
  return min_rows, min_cols


def _tiles(qf, block, transpose, rows, cols, config, hadamard: int = 0):
  cfg = config if config is not None else quantize_config(qf.name, transpose)
  return fit_config(cfg, rows, cols, *_grain(qf, block, transpose, hadamard))


def _first_pass_amax(x, cfg: QuantizeConfig, interpret: bool):
  """Bits of the largest finite |x| (uint32 scalar) from _amax_kernel's partials."""
  rows, cols = x.shape
  tr, tc = cfg.block_rows, cfg.block_cols
  n_cb = pl.cdiv(cols, tc)
  n_prog = pl.cdiv(rows, tr) * n_cb
  partials = pl.pallas_call(
      functools.partial(_amax_kernel, rows=rows, cols=cols, tr=tr, tc=tc, n_cb=n_cb),
      out_shape=jax.ShapeDtypeStruct((n_prog,), jnp.uint32), grid=(n_prog,),
      compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps,
                                           num_stages=cfg.num_stages),
      interpret=interpret, name="fp8lab_quantize_amax")(x.reshape(-1))
  return jnp.max(partials)


def _nvfp4_scalars(amax_bits, s_enc_bits=None):
  """(fl(S_enc * fl(1/6)), S_dec, enc_b of every E4M3 code 0..127) as float32 bits from the
  tensor amax bits, or from a given S_enc (then S_dec = fl(1 / S_enc)) (docs/numerics.md
  section 5, steps 2, 3, 5; code 127 is the NaN scale, whose blocks' codes are forced to 0)."""
  if s_enc_bits is None:
    s_enc, s_dec = scalars.nvfp4_tensor_scales_bits(amax_bits)
  else:
    s_enc, s_dec = s_enc_bits, f32.reciprocal_bits(s_enc_bits)
  inv6 = jnp.uint32((np.float32(1) / np.float32(E2M1.max_finite)).view(np.uint32))
  table = scalars.nvfp4_block_encode_factor_bits(jnp.arange(128, dtype=jnp.uint32),
                                                 jnp.broadcast_to(s_dec, (128,)))
  return f32.mul_bits(s_enc, inv6), s_dec, table


# Programs that the delayed fold should leave (tiles_per_program=None): each program's two
# same-address atomics cost ~23 us over 65536 programs at bf16 16384^2 on the H200.
_FOLD_PROGRAMS = 1024


def _tiles_per_program(asked: int | None, n_tiles: int, delayed: bool) -> int:
  """QuantizeConfig.tiles_per_program resolved: the largest power of two <= the asked one
  (None: 1, delayed: n_tiles / _FOLD_PROGRAMS) that divides n_tiles."""
  want = asked if asked is not None else (max(1, n_tiles // _FOLD_PROGRAMS) if delayed else 1)
  t = 1
  while t * 2 <= want and n_tiles % (t * 2) == 0:
    t *= 2
  return t


@functools.partial(jax.jit, static_argnames=("fmt", "scale_mode", "block_shape", "transpose",
                                             "sr_bits", "interpret", "config", "stochastic",
                                             "margin", "hadamard", "history_algo"))
def _quantize_2d(x, scale, amax, key, signs, history, dest, into, *, fmt, scale_mode,
                 block_shape, transpose, sr_bits, interpret, config, stochastic, margin,
                 hadamard, history_algo):
  qf = get_quantized_format(fmt)
  kind, elem = qf.scaling, qf.element
  block = tuple(block_shape) if kind != "tensor" else ()
  rows, cols = x.shape
  if rows * cols >= 2**31:
    raise ValueError(f"x has {rows * cols} elements; the kernel uses int32 offsets (< 2^31)")
  cfg = _tiles(qf, block, transpose, rows, cols, config, hadamard)
  tr, tc = cfg.block_rows, cfg.block_cols
  n_cb = pl.cdiv(cols, tc)
  n_tiles = pl.cdiv(rows, tr) * n_cb
  float_encode = cfg.float_encode
  # fp8 conversion instructions: sm_89+; interpret mode and lowering from a host without a
  # CUDA GPU take the H200's (device.py's rule), so they see the GPU's code
  cc = None if interpret else device.cuda_capability()
  delayed = None
  if history is not None:
    numerator = (scalars.NVFP4_ENC_NUMERATOR_BITS if kind == "nvfp4"
                 else scalars.format_max_bits(elem))
    delayed = (history.shape[0], margin, history_algo, int(numerator))
  float_products = (not interpret) if cfg.float_products is None else cfg.float_products
  tpp = _tiles_per_program(cfg.tiles_per_program, n_tiles, delayed is not None)
  n_prog = n_tiles // tpp
  spec = _Spec(qf.name, kind, block, scale_mode, rows, cols, tr, tc, n_cb, transpose,
               stochastic, sr_bits, float_products, hadamard, float_encode=float_encode,
               fp8_cvt=float_encode and (cc is None or cc >= 8.9),
               even=rows % tr == 0 and cols % tc == 0, delayed=delayed, tpp=tpp,
               dest_rows=0 if dest is None else into[0].shape[0])

  first = jnp.uint32(0)
  table = tensor_scale = None
  given_scale = (None if scale is None
                 else lax.bitcast_convert_type(scale.reshape(()), jnp.uint32))
  if kind == "tensor":
    first = given_scale
    if first is None:                       # current scaling: the amax pass decides the scale
      first = scalars.current_scale_bits(_first_pass_amax(x, cfg, interpret),
                                         scalars.format_max_bits(elem), margin, f32.ONE_BITS)
  elif kind == "nvfp4":
    given = None
    if given_scale is None:
      given = (_first_pass_amax(x, cfg, interpret) if amax is None
               else lax.bitcast_convert_type(amax.reshape(()), jnp.uint32) & enc.MAG)
    first, tensor_scale, table = _nvfp4_scalars(given, given_scale)
  # the _Scalars, each its own array: reshapes and bitcasts of scalars are free
  scal = [jnp.asarray(first, jnp.uint32).reshape(1)]
  if stochastic:
    scal.append(key.astype(jnp.uint32).reshape(2))
  if delayed and kind == "nvfp4":
    scal.append(given_scale.reshape(1))

  pw = elem.per_word
  has_scales = kind != "tensor"
  n_scale = None
  if has_scales:
    n_scale = ((-(-rows // block[0]), -(-cols // block[1])) if len(block) == 2
               else (rows, -(-cols // block[0])))
  if dest is not None:                      # the codes and scales go into `into`, in place
    n_scale = into[1].shape if has_scales else None
  outs = [jax.ShapeDtypeStruct(((rows if dest is None else into[0].shape[0])
                                * -(-cols // pw),), jnp.uint32)]
  if has_scales:
    outs.append(jax.ShapeDtypeStruct((n_scale[0] * n_scale[1],), _scale_dtype(kind)))
  outs.append(jax.ShapeDtypeStruct((1 if delayed else n_prog,), jnp.uint32))
  n_scale_t = None
  if transpose:
    outs.append(jax.ShapeDtypeStruct((cols * -(-rows // pw),), jnp.uint32))
    if has_scales:
      n_scale_t = ((n_scale[1], n_scale[0]) if len(block) == 2
                   else (cols, -(-rows // block[0])))
      outs.append(jax.ShapeDtypeStruct((n_scale_t[0] * n_scale_t[1],), _scale_dtype(kind)))
  if kind == "tensor":
    outs.append(jax.ShapeDtypeStruct((1,), jnp.uint32))   # 1 / scale, from program 0
  operands = ([x.reshape(-1)] + scal + ([table] if kind == "nvfp4" else [])
              + ([signs] if hadamard else []))
  aliases = {}
  if dest is not None:
    aliases = {len(operands) + 1: 0}
    operands += [dest, into[0].reshape(-1)]
    if has_scales:
      aliases[len(operands)] = 1
      operands.append(lax.bitcast_convert_type(into[1], _scale_dtype(kind)).reshape(-1))
  if delayed:
    # the (amax, done count) pair starts at 0 (one zeroed input, updated in place)
    aliases = {len(operands) + 1: len(outs)}
    operands += [lax.bitcast_convert_type(history, jnp.uint32), jnp.zeros((2,), jnp.uint32)]
    outs += [jax.ShapeDtypeStruct((2,), jnp.uint32),
             jax.ShapeDtypeStruct((delayed[0],), jnp.uint32),
             jax.ShapeDtypeStruct((1,), jnp.uint32)]
  res = list(pl.pallas_call(
      functools.partial(_quantize_kernel, spec=spec, has_scales=has_scales, n_prog=n_prog),
      out_shape=tuple(outs), grid=(n_prog,), input_output_aliases=aliases,
      compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps,
                                           num_stages=cfg.num_stages),
      interpret=interpret, name=f"fp8lab_quantize_{qf.name}")(*operands))
  as_float = functools.partial(lax.bitcast_convert_type, new_dtype=jnp.float32)
  # blockwise scales: float32 values, stored as their bits
  scale_out = as_float if kind == "block" else (lambda v: v)
  data = res.pop(0).reshape(-1, -(-cols // pw))
  scales = scale_out(res.pop(0).reshape(n_scale)) if has_scales else None
  amax_out = res.pop(0)
  amax_out = amax_out.reshape(()) if delayed else jnp.max(amax_out)
  data_t = scales_t = None
  if transpose:
    data_t = res.pop(0).reshape(cols, -(-rows // pw))
    scales_t = scale_out(res.pop(0).reshape(n_scale_t)) if has_scales else None
  if kind == "tensor":
    tensor_scale = res.pop(0).reshape(())
  new_history = new_scale = None
  if delayed:
    _, new_history, new_scale = res
    new_history, new_scale = as_float(new_history), as_float(new_scale.reshape(()))
  return KernelResult(data, scales, None if tensor_scale is None else as_float(tensor_scale),
                      as_float(amax_out), data_t, scales_t, new_history, new_scale)


def quantize_2d(x, *, fmt: str, scale_mode: str | None = None,
                block_shape: tuple[int, ...] | None = None, scale=None, amax=None,
                margin: int = 0, transpose: bool = False, key_words=None, sr_bits: int = 8,
                hadamard: tuple[int, jax.Array] | None = None, history=None,
                history_algo: str = "max", dest=None, into=None, interpret: bool = False,
                config: QuantizeConfig | None = None) -> KernelResult:
  """Quantizes a 2D x along its last axis with one Pallas kernel: the arrays of
  fp8lab.quantize(x, fmt, axis=-1, ...) bit for bit (and of quantize(x.T, ...) with
  transpose=True), plus x's finite amax.

  Args:
    x: (R, C) float32 / bfloat16 / float16.
    fmt: a registry format with scaling "tensor", "mx", "nvfp4" or "block" (blockwise FP8).
    scale_mode: MX (floor / ceil / even / rceil) and blockwise (exact / pow2) scale rule;
      None: the format's default. Other formats ignore it.
    block_shape: None for the format's default; nvfp4 also (16, 16); blockwise FP8 (b,) for
      b in blockwise.BLOCK_LENGTHS (16 .. 256, powers of two) or (128, 128).
    scale: per-tensor formats: the float32 quantization factor (scalar), used as is; None:
      current scaling (a first pass takes the amax, the scale is fmt_max / amax / 2^margin);
      nvfp4: a given S_enc, used as is (S_dec = fl(1 / S_enc)); then `amax` is ignored.
    amax: nvfp4 without `scale`: the float32 tensor amax of section 5's S_enc (None: a first
      pass takes it).
    margin: per-tensor current scaling's power-of-two headroom.
    hadamard: None, or (block, signs): rotate x's rows in blocks of 16 / 32 first, with the
      (block,) uint32 sign masks of numerics.hadamard.hadamard_signs (zeros: no signs), as
      fp8lab.quantize(x, hadamard=...) does; not with transpose=True, and only with a given
      scale (per-tensor) or S_enc (nvfp4): a current scale would need the rotated amax.
    transpose: also return quantize(x.T)'s data and scales, from the same read of x.
    history: delayed scaling folded into the launch: the state's float32 amax history (n,)
      (then `scale` is the state's scale, and `margin` its margin), history_algo its
      amax_compute_algo ("max" / "most_recent"); the result's history / next_scale are the
      state's DelayedScaling.update(amax) (numerator: the element max, nvfp4: 2688).
    key_words: None (round to nearest even) or (k0, k1) uint32 threefry key words for
      stochastic rounding with the top `sr_bits` bits of each element's word.
    dest, into: write the rows into existing arrays instead of new ones (a KV cache's new
      tokens): into = (data (N, ceil(C / per_word)) uint32, scales (N, ceil(C / b)) in
      quantize's scales dtype, or None for per-tensor formats), dest (R,) int32 the row of
      `into` each x row goes to; a row whose dest lies outside [0, N) is dropped. The
      result's data / scales are `into`'s arrays with those rows replaced (the rest kept;
      in place where XLA may alias them, e.g. donated); amax and tensor_scale as without
      dest. 1D blocks only, not with transpose or history. Rows sent to the same dest
      leave one of them, unspecified which (as `.at[].set`).
    interpret: Pallas interpret mode (CPU).
    config: a QuantizeConfig (default: configs.quantize_config(fmt, transpose)).
  Arguments are assumed checked by the caller (fp8lab/ops/quantize.py); this raises
  ValueError only for what the kernel cannot do.
  """
  qf = get_quantized_format(fmt)
  if qf.scaling not in ("tensor", "mx", "nvfp4", "block"):
    raise ValueError(f"the quantize kernel has no {qf.name!r} (scaling {qf.scaling!r})")
  x = jnp.asarray(x)
  if x.ndim != 2:
    raise ValueError(f"quantize_2d takes a 2D x, got shape {x.shape}")
  block = qf.block_shape if block_shape is None else tuple(int(b) for b in block_shape)
  if qf.scaling == "block":
    why = blockwise.unserved_block(qf.name, block, bool(transpose))
    if why is not None:
      raise ValueError(why)
  elif qf.scaling != "tensor" and block not in qf.block_shapes:
    raise ValueError(f"block_shape {block} is not valid for {qf.name!r}")
  if qf.scaling in ("mx", "block"):
    scale_mode = qf.scale_modes[0] if scale_mode is None else scale_mode
    if scale_mode not in qf.scale_modes:
      raise ValueError(f"scale_mode for {qf.name!r} must be one of {qf.scale_modes}, got "
                       f"{scale_mode!r}")
  else:
    scale_mode = "floor"                   # no scale rule: one jit key for every call
  key = None
  if key_words is not None:
    key = jnp.stack([jnp.asarray(key_words[0], jnp.uint32),
                     jnp.asarray(key_words[1], jnp.uint32)])
  scale = None if scale is None else jnp.asarray(scale, jnp.float32)
  amax = None if amax is None else jnp.asarray(amax, jnp.float32)
  hb, signs = 0, None
  if hadamard is not None:
    if qf.scaling == "block":
      raise ValueError("the kernel does not fuse a Hadamard rotation with blockwise FP8")
    hb, signs = int(hadamard[0]), jnp.asarray(hadamard[1], jnp.uint32).reshape(-1)
    if hb not in (16, 32) or signs.shape != (hb,) or x.shape[1] % hb:
      raise ValueError(f"hadamard must be (16 or 32, ({hb},) sign masks) over columns that "
                       f"are a multiple of the block; got block {hb}, signs {signs.shape}, x "
                       f"{x.shape}")
    if transpose or (scale is None and qf.scaling != "mx"):
      raise ValueError("the kernel fuses a Hadamard rotation without transpose, and with a "
                       "given scale or S_enc only")
  if history is not None:
    history = jnp.asarray(history)
    if qf.scaling not in ("tensor", "nvfp4") or scale is None:
      raise ValueError("history (delayed scaling) needs a per-tensor format or nvfp4 and the "
                       "state's scale")
    if history.ndim != 1 or history.shape[0] < 1 or history.dtype != jnp.float32:
      raise ValueError(f"history must be a float32 (n,) array, got {history.dtype}"
                       f"{list(history.shape)}")
    if history_algo not in scalars.AMAX_ALGOS:
      raise ValueError(f"history_algo must be one of {scalars.AMAX_ALGOS}, got "
                       f"{history_algo!r}")
  if (dest is None) != (into is None):
    raise ValueError("dest and into go together")
  if dest is not None:
    dest = jnp.asarray(dest)
    if transpose or history is not None or (block is not None and len(block) == 2):
      raise ValueError("dest / into take 1D blocks (or per-tensor formats), without transpose "
                       "or history")
    if dest.shape != (x.shape[0],) or dest.dtype != jnp.int32:
      raise ValueError(f"dest must be ({x.shape[0]},) int32, got {dest.dtype}{list(dest.shape)}")
    data_in, scales_in = into
    words = -(-x.shape[1] // qf.per_word)
    if (data_in.ndim != 2 or data_in.shape[1] != words or data_in.dtype != jnp.uint32):
      raise ValueError(f"into's data must be (N, {words}) uint32, got {data_in.dtype}"
                       f"{list(data_in.shape)}")
    if qf.scaling == "tensor":
      if scales_in is not None:
        raise ValueError(f"{qf.name!r} has no block scales: into's scales must be None")
    else:
      want = (data_in.shape[0], -(-x.shape[1] // block[0]))
      sdt = jnp.float32 if qf.scaling == "block" else jnp.uint8
      if scales_in is None or tuple(scales_in.shape) != want or scales_in.dtype != sdt:
        raise ValueError(f"into's scales must be {want} {jnp.dtype(sdt).name}, got "
                         f"{None if scales_in is None else scales_in.shape}")
  return _quantize_2d(x, scale, amax, key, signs, history, dest, into, fmt=qf.name,
                      scale_mode=scale_mode, block_shape=block, transpose=bool(transpose),
                      sr_bits=int(sr_bits), interpret=bool(interpret), config=config,
                      stochastic=key_words is not None, margin=int(margin), hadamard=hb,
                      history_algo=str(history_algo))
