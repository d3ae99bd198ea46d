"""Pallas GEMV over packed weights: y = x @ dequantize(W).T, W read once, unpacked in registers.

Layout. W is the QuantizedArray's uint32 `data`, (n_out, kw) with kw = ceil(k / per_word);
code i of word j of a row is element per_word * j + i (NUMERICS.md section 3). x is
rearranged OUTSIDE the kernel into per-word planes, x_plane[i, j] = x[per_word * j + i]
(zero padded), so plane i of a tile of words multiplies one contiguous slice of x. The
weight array itself is never copied or padded: row blocks past n_out re-read the last row
(clamped indices, results discarded) and the K tail uses masked loads whose missing words
read as 0 (code 0 is +0 in every format and meets zero-padded x, so no NaN leaks in).

Grid: one program per block of `block_rows` rows, a loop over K in steps of `block_k`
words (full steps unmasked, one masked tail step). No atomics, no split K: each output is
reduced by one program in a fixed order, so results are bitwise deterministic.

Two paths, chosen per (format, batch) from DEFAULT_CONFIGS:

"fma" (CUDA cores; 1-2 rows). Per word: integer decode of all codes to
float32 via the float16 route (kernels/unpack.py), then float32 FMAs against x. Order of
float operations for one output y[b, r] (per-tensor formats):
    acc[r, c] += plane_i[r, c] * x_plane_i[c]   for i = 0..per_word-1, every K step
                (one fma each; c runs over the block_k word columns of the tile)
    y = fl(sum_c acc[r, c]) * fl(2^-route * tensor_scale)      (a tree sum over c)
Block-scaled formats (MX, NVFP4) take the tile as (rows, blocks, words_per_block):
    part[r, g] = sum over the block's words and planes of plane * x     (fma chain + tree)
    acc[r, g] += part[r, g] * scale[r, g]                                (one fma)
    y = fl(sum_g acc[r, g]) * final
with scale = 2^(code - 127) (E8M0, exact) or the E4M3 block scale (times 2^-8, exact),
final = 2^-route (MX) or 2^(8 - route) * S_dec (NVFP4). Against the reference, which
rounds each dequantized weight to float32 first (NVFP4: fl(code * fl(s * S_dec))) and sums
in jnp.dot's order, this differs only in the order of the float32 additions and the place
of the (exact or single) scale roundings: |y - y_exact| <= (k + 3) u sum|w x| (u = 2^-24)
unless an intermediate overflows or underflows (extreme scales: the reference's per-weight
product can overflow where our per-block product does not, and vice versa).

"dot" (tensor cores; 3 rows and more). x is kept in element order (zero padded) and the
decoded planes of a (rows, block_k) word tile are interleaved back into element order, so
one dot per x part covers block_k * per_word elements. Operands:
  * per-tensor minifloats and f16 weights: float16. Every float16-route code is exactly a
    float16 (e4m3: value * 2^-8, e2m1: value * 2^-14), taken straight from the bit pattern
    (no float arithmetic). x (float32 / bfloat16) is scaled per row by a power of two so
    that max|x| is in [2^14, 2^15), then cut into float16 hi (the top 11 significant bits,
    by masking the float32 pattern) and lo = float16(x - hi): |hi + lo - x| <= 2^-22 |x|
    (<= 2^-25 * 2^e absolutely where x is below float16's normal range). float16 x: one
    exact part, no scaling.
  * NVFP4: float16 code (value * 2^-14) times the E4M3 scale's true value, multiplied in
    float16 -- exact (<= 6 significant bits, >= 2^-24); S_dec and 2^14 come at the end.
  * MX: float32 code * 2^(scale - 127) (exact), converted to bfloat16 (exact: <= 4
    significant bits; values below 2^-126, only with scale codes < ~20, may lose bits);
    x as bfloat16 parts cut by masking that sum to it exactly: 3 for float32, 2 for
    float16, 1 for bfloat16. bf16 weights: bfloat16 as stored, x likewise.
The x parts are cut with integer ops, never by float round trips that XLA may elide
(NUMERICS.md section 9). Every product is exact in float32; jnp.dot accumulates in float32
on the tensor cores:
    acc_hi[r, b] += dot(w, x_part0),  acc_lo[r, b] += dot(w, x_part1 (+ part2))
    y = (acc_hi + acc_lo if acc_hi is finite else acc_hi) * 2^(fold - s_b) * tensor_scale
Keeping the hi product apart means an Inf weight times a nonzero x whose low part is 0
gives Inf, not Inf * 0 = NaN. Bound: |y - y_exact| <= (k + 7) u sum|w x| + u |y| (the x
split adds 4u per product); the tensor cores' float32 accumulation truncates instead of
rounding, so the tests allow twice the addition term.

NaN: e4m3 NaN codes are flagged per word (unpack.nan_byte_flags) and make the row NaN, as a
NaN weight makes the reference row NaN (for any x). E8M0 scale 0xFF and E4M3 scale NaN
codes decode to NaN and propagate. e5m2 Inf / NaN codes decode to float16 Inf / NaN.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import numpy as np

from fp8lab.formats import E4M3, ElementFormat, get_format
from fp8lab.kernels import unpack

__all__ = ["GemvConfig", "FormatPlan", "DEFAULT_CONFIGS", "gemv_config", "format_plan",
           "gemv_pallas", "split_bf16_parts"]

_U = np.uint32


@dataclasses.dataclass(frozen=True)
class GemvConfig:
  """Launch configuration of the GEMV kernel.

  Attributes:
    path: "fma" (CUDA-core FMAs, for small batches) or "dot" (tensor cores).
    block_rows: output rows per program (power of two; >= 16 for "dot").
    block_k: uint32 words of K per loop step (power of two; a multiple of the words per
      scale block for block-scaled formats).
    num_warps, num_stages: Triton compiler parameters.
    prefetch: "fma" path: load the next K step's words before decoding the current one.
  """
  path: str
  block_rows: int
  block_k: int
  num_warps: int = 4
  num_stages: int = 3
  prefetch: bool = False

  def __post_init__(self):
    if self.path not in ("fma", "dot"):
      raise ValueError(f"GemvConfig.path must be 'fma' or 'dot', got {self.path!r}")
    for name in ("block_rows", "block_k", "num_warps"):
      v = getattr(self, name)
      if not (isinstance(v, int) and v > 0 and v & (v - 1) == 0):
        raise ValueError(f"GemvConfig.{name} must be a power of two, got {v!r}")
    if self.path == "dot" and self.block_rows < 16:
      raise ValueError("the 'dot' path needs block_rows >= 16 (tensor-core tile)")


def _cfg(path, br, bk, nw, ns=3):
  return dict(path=path, block_rows=br, block_k=bk, num_warps=nw, num_stages=ns)


# Tuned launch configurations, per format and batch bucket (the smallest bucket >= the
# batch applies; the largest bucket above). Data, not code: benchmarks/gpu_tune.py
# measures candidates on the H200 and these are its winners (see BUILD.md for the run).
# Winners of benchmarks/gpu_tune.py on the H200 (16384 x 16384; tune rounds 2 and 3, see
# BUILD.md). Differences under ~10% between
# neighbouring candidates were within the run-to-run spread.
def _table(fma1, dot):
  # The FMA path's cost grows with the batch (batch 4: 2.5x batch 1 for e4m3 in the final
  # run), the tensor-core path's does not up to 16: FMA for 1-2 rows, tensor cores above.
  return {1: fma1, 2: fma1, 64: dot}


DEFAULT_CONFIGS: dict[str, dict[int, dict[str, Any]]] = {
    "e4m3": _table(_cfg("fma", 4, 512, 4), _cfg("dot", 64, 32, 4, 1)),
    "e5m2": _table(_cfg("fma", 8, 512, 4), _cfg("dot", 64, 32, 4, 1)),
    "mxfp8": _table(_cfg("fma", 4, 512, 4), _cfg("dot", 64, 32, 4, 2)),
    "mxfp8_e5m2": _table(_cfg("fma", 8, 512, 4), _cfg("dot", 64, 32, 4, 2)),
    "mxfp4": _table(_cfg("fma", 8, 256, 4), _cfg("dot", 64, 32, 4, 2)),
    "nvfp4": _table(_cfg("fma", 4, 256, 4), _cfg("dot", 64, 32, 4, 3)),
    "f16": _table(_cfg("fma", 4, 512, 4), _cfg("dot", 64, 32, 4, 1)),
    "bf16": _table(_cfg("fma", 4, 512, 4), _cfg("dot", 64, 32, 4, 1)),
}


def gemv_config(format: str, batch: int) -> GemvConfig:
  """The tuned launch configuration for a weight format and a number of x rows."""
  if format not in DEFAULT_CONFIGS:
    raise ValueError(f"no GEMV configuration for format {format!r}; "
                     f"known: {', '.join(DEFAULT_CONFIGS)}")
  table = DEFAULT_CONFIGS[format]
  buckets = sorted(table)
  key = next((b for b in buckets if b >= batch), buckets[-1])
  return GemvConfig(**table[key])


@dataclasses.dataclass(frozen=True)
class FormatPlan:
  """What the kernel needs to know about a weight format (static, hashable).

  Attributes:
    format: the QuantizedArray format name.
    elem: the element format of the packed codes.
    scale_kind: None, "e8m0" (MX) or "e4m3" (NVFP4) block scales.
    block_len: elements of K per scale block (None without block scales).
    scale_row_div: rows per scale row (16 for NVFP4's 16x16 tiles, else 1).
    has_tensor_scale: whether a float32 tensor scale multiplies the result.
  """
  format: str
  elem: ElementFormat
  scale_kind: str | None
  block_len: int | None
  scale_row_div: int
  has_tensor_scale: bool

  @property
  def per_word(self) -> int:
    return self.elem.per_word

  @property
  def words_per_block(self) -> int:
    return 1 if self.block_len is None else self.block_len // self.per_word

  def final_scale_log2(self) -> int:
    """log2 of the power of two that undoes the float16 routes (elements and E4M3 scales)."""
    e = -unpack.f16_route_log2(self.elem)
    if self.scale_kind == "e4m3":
      e -= unpack.f16_route_log2(E4M3)
    return e


_SCALE_KINDS = {"mxfp8": "e8m0", "mxfp8_e5m2": "e8m0", "mxfp4": "e8m0", "nvfp4": "e4m3"}


def format_plan(format: str, element_format: str, block_shape: tuple[int, ...] | None,
                has_tensor_scale: bool) -> FormatPlan:
  """Builds the kernel's view of a QuantizedArray's static metadata."""
  elem = get_format(element_format)
  kind = _SCALE_KINDS.get(format)
  if kind is None:
    return FormatPlan(format, elem, None, None, 1, has_tensor_scale)
  if not block_shape:
    raise ValueError(f"format {format!r} needs a block_shape")
  block_len = block_shape[-1]
  row_div = block_shape[0] if len(block_shape) == 2 else 1
  if block_len % elem.per_word:
    raise ValueError(f"block length {block_len} is not a multiple of {elem.per_word} codes")
  return FormatPlan(format, elem, kind, block_len, row_div, has_tensor_scale)


def _next_pow2(n: int) -> int:
  return 1 << max(0, (n - 1).bit_length())


_X_PARTS = {jnp.dtype(jnp.float32): 3, jnp.dtype(jnp.float16): 2,
            jnp.dtype(jnp.bfloat16): 1}


def _decode_scales(codes: jax.Array, plan: FormatPlan) -> jax.Array:
  if plan.scale_kind == "e8m0":
    return unpack.e8m0_scale_to_f32(codes)
  return unpack.e4m3_scale_to_f32(codes)


def _dot_operand_dtype(plan: FormatPlan):
  """Tensor-core operand type: float16 holds every float16-route code exactly and, for
  NVFP4, code * E4M3 scale (<= 2688, >= 2^-10); MX-scaled weights need bfloat16's
  exponent range; bf16 weights are bfloat16."""
  if plan.elem.name == "bf16" or plan.scale_kind == "e8m0":
    return jnp.bfloat16
  return jnp.float16


def _dot_scale_fold_log2(plan: FormatPlan) -> int:
  """Power of two multiplied into the block scale on the dot path: the NVFP4 scale becomes
  its true E4M3 value (<= 448, float16 range); MX scales stay 2^(code - 127)."""
  if plan.scale_kind == "e4m3":
    return -unpack.f16_route_log2(E4M3)
  return 0


def _interleave(planes: list[jax.Array]) -> jax.Array:
  """(R, W) planes p_0..p_{n-1} (code i of each word) -> (R, W * n) in element order."""
  if len(planes) == 1:
    return planes[0]
  even = _interleave(planes[0::2])
  odd = _interleave(planes[1::2])
  both = jnp.stack([even, odd], axis=-1)
  return both.reshape(both.shape[:-2] + (both.shape[-2] * 2,))


def _gemv_kernel(*refs, plan: FormatPlan, cfg: GemvConfig, n_out: int, kw: int, nbk: int,
                 n_b: int, n_parts: int):
  """Kernel body for both paths; see the module docstring for the arithmetic."""
  it = iter(refs)
  w_ref = next(it)
  s_ref = next(it) if plan.scale_kind else None
  x_ref = next(it)
  f_ref = next(it)
  ts_ref = next(it) if plan.has_tensor_scale else None
  o_ref = next(it)

  br, bk = cfg.block_rows, cfg.block_k
  pw = plan.per_word
  blocked = plan.scale_kind is not None
  wpb = plan.words_per_block
  n_groups = bk // wpb
  nan_flags = unpack.needs_nan_flags(plan.elem)
  dot_path = cfg.path == "dot"

  r0 = pl.program_id(0) * br
  # Clamped rows: every load stays inside W; rows past n_out are computed and dropped.
  rows = jnp.minimum(r0 + lax.iota(jnp.int32, br), n_out - 1)
  srows = (rows // plan.scale_row_div) * nbk
  # Built once, outside the K loop, with expand_dims ([:, None]): a reshape inside the
  # loop makes Triton convert layouts through shared memory at every step.
  row_off = {1: (rows * kw)[:, None], 2: (rows * kw)[:, None, None]}
  srow_off = srows[:, None]

  def load_words(first_word: Any, tile_cols: jax.Array, masked: bool):
    cols = first_word + tile_cols
    offs = row_off[cols.ndim] + cols[None]
    if masked:
      return plgpu.load(w_ref.at[offs], mask=jnp.broadcast_to(cols[None] < kw, offs.shape),
                        other=0)
    return w_ref[offs]

  def load_scales(first_group: Any, n: int | None, masked: bool):
    """Scale codes of groups first_group.. (n of them: (br, n); None: one group, (br,))."""
    gcols = first_group + (lax.iota(jnp.int32, n) if n else 0)
    offs = srow_off + gcols if n else srows + gcols
    if masked:
      ok = gcols < nbk
      return plgpu.load(s_ref.at[offs], mask=jnp.broadcast_to(ok, offs.shape), other=0)
    return s_ref[offs]

  # ---------------------------------------------------------------- the FMA path
  if blocked:
    fma_cols = (lax.iota(jnp.int32, n_groups)[:, None] * wpb
                + lax.iota(jnp.int32, wpb)[None, :])          # (G, wpb)
  else:
    fma_cols = lax.iota(jnp.int32, bk)                          # (bk,)

  def fma_load(step, masked):
    words = load_words(step * bk, fma_cols, masked)
    codes = load_scales(step * n_groups, n_groups, masked) if blocked else None
    return words, codes

  def fma_compute(step, accs, flags, words, codes):
    planes = unpack.decode_planes(words, plan.elem)
    scale = _decode_scales(codes, plan) if blocked else None
    new_accs = []
    for b in range(n_b):
      if blocked:
        part = None
        for i in range(pw):
          xs = x_ref[b, i, pl.ds(step * n_groups, n_groups), :]        # (G, wpb)
          t = planes[i] * xs[None]
          part = t if part is None else part + t
        new_accs.append(accs[b] + jnp.sum(part, axis=2) * scale)
      else:
        acc = accs[b]
        for i in range(pw):
          acc = acc + planes[i] * x_ref[b, i, pl.ds(step * bk, bk)][None]
        new_accs.append(acc)
    if nan_flags:
      flags = unpack.nan_byte_flags(words, plan.elem, flags)
    return tuple(new_accs), flags

  # ---------------------------------------------------------------- the dot path
  def dot_accumulate(accs, wt, x_first: Any, length: int, scale):
    acc_hi, acc_lo = accs
    for p in range(n_parts):
      xs = x_ref[p, pl.ds(x_first, length), :]                          # (length, Bp)
      d = jnp.dot(wt, xs, preferred_element_type=jnp.float32)
      if scale is not None:
        d = d * scale[:, None]
      if p == 0:
        acc_hi = acc_hi + d
      else:
        acc_lo = acc_lo + d
    return acc_hi, acc_lo

  def dot_step(step, accs, flags, masked):
    if blocked:
      # Block scales go on the weights before the dot, so one dot spans many scale blocks.
      # The scale codes are gathered per word (2D, like the words: a 3D tile reshaped to
      # 2D would make Triton convert layouts through shared memory at every step).
      words = load_words(step * bk, lax.iota(jnp.int32, bk), masked)     # (br, bk)
      gcols = step * n_groups + lax.iota(jnp.int32, bk) // wpb
      soffs = srow_off + gcols[None, :]
      if masked:
        codes = plgpu.load(s_ref.at[soffs], mask=jnp.broadcast_to(gcols[None, :] < nbk,
                                                                   soffs.shape), other=0)
      else:
        codes = s_ref[soffs]
      scale = _decode_scales(codes, plan) * jnp.float32(2.0 ** _dot_scale_fold_log2(plan))
      if _dot_operand_dtype(plan) == jnp.float16:
        # NVFP4: float16 code (value * 2^-14) times the E4M3 scale's value, in float16:
        # exact (<= 6 significant bits, >= 2^-24), two products per instruction.
        s16 = scale.astype(jnp.float16)
        ws = [p * s16 for p in unpack.decode_planes_16bit(words, plan.elem)]
      else:
        # MX: exact float32 products (power-of-two scales), then bfloat16 (exact).
        ws = [(p * scale).astype(jnp.bfloat16) for p in unpack.decode_planes(words, plan.elem)]
      wt = _interleave(ws)                                              # (br, bk * pw)
      accs = dot_accumulate(accs, wt, step * bk * pw, bk * pw, None)
      if nan_flags:
        flags = unpack.nan_byte_flags(words, plan.elem, flags)
    else:
      words = load_words(step * bk, lax.iota(jnp.int32, bk), masked)  # (br, bk)
      wt = _interleave(unpack.decode_planes_16bit(words, plan.elem))
      accs = dot_accumulate(accs, wt, step * bk * pw, bk * pw, None)
      if nan_flags:
        flags = unpack.nan_byte_flags(words, plan.elem, flags)
    return accs, flags

  # ---------------------------------------------------------------- the K loop
  n_full, tail = divmod(kw, bk)
  if dot_path:
    accs = (jnp.zeros((br, n_b), jnp.float32), jnp.zeros((br, n_b), jnp.float32))
    # Flags are OR-ed per element across steps and reduced over columns once at the end.
    flags = jnp.zeros((br, bk), jnp.uint32)
    if n_full:
      accs, flags = lax.fori_loop(0, n_full, lambda s, c: dot_step(s, *c, False),
                                  (accs, flags))
    if tail:
      accs, flags = dot_step(n_full, accs, flags, True)
    if nan_flags:
      flags = jnp.max((flags & unpack.NAN_FLAG_MASK).reshape(br, -1), axis=1)
  else:
    acc_shape = (br, n_groups) if blocked else (br, bk)
    tile_shape = (br, n_groups, wpb) if blocked else (br, bk)
    accs = tuple(jnp.zeros(acc_shape, jnp.float32) for _ in range(n_b))
    flags = jnp.zeros(tile_shape, jnp.uint32) if nan_flags else jnp.zeros((), jnp.uint32)
    if n_full and cfg.prefetch:
      def body(s, c):
        accs, flags, words, codes = c
        nxt = fma_load(jnp.minimum(s + 1, n_full - 1), False)
        accs, flags = fma_compute(s, accs, flags, words, codes)
        return (accs, flags) + nxt
      first = fma_load(0, False)
      accs, flags, _, _ = lax.fori_loop(0, n_full, body, (accs, flags) + first)
    elif n_full:
      accs, flags = lax.fori_loop(
          0, n_full, lambda s, c: fma_compute(s, *c, *fma_load(s, False)), (accs, flags))
    if tail:
      accs, flags = fma_compute(n_full, accs, flags, *fma_load(n_full, True))
    if nan_flags:
      flags = jnp.max((flags & unpack.NAN_FLAG_MASK).reshape(br, -1), axis=1)

  # ---------------------------------------------------------------- epilogue
  ts = ts_ref[0] if ts_ref is not None else None
  row_nan = (flags & unpack.NAN_FLAG_MASK) != _U(0) if nan_flags else None
  if dot_path:
    acc_hi, acc_lo = accs
    f = f_ref[...]                                                     # (Bp,)
    if ts is not None:
      f = f * ts                     # 2^e * ts: exact, so y gets one rounding from it
    y = jnp.where(jnp.isfinite(acc_hi), acc_hi + acc_lo, acc_hi) * f[None, :]
    if row_nan is not None:
      y = jnp.where(row_nan[:, None], jnp.float32(jnp.nan), y)
    o_ref[:, pl.ds(r0, br)] = y.T.astype(o_ref.dtype)
  else:
    for b in range(n_b):
      f = f_ref[b]
      if ts is not None:
        f = f * ts
      y = jnp.sum(accs[b].reshape(br, -1), axis=1) * f
      if row_nan is not None:
        y = jnp.where(row_nan, jnp.float32(jnp.nan), y)
      o_ref[b, pl.ds(r0, br)] = y.astype(o_ref.dtype)


def _exp2_exact(n: jax.Array) -> jax.Array:
  """2^n as float32 for integer n in [-149, 127], built from bits (exact)."""
  n = n.astype(jnp.int32)
  normal = lax.bitcast_convert_type((jnp.clip(n, -126, 127) + 127).astype(jnp.uint32)
                                    << _U(23), jnp.float32)
  sub = lax.bitcast_convert_type(_U(1) << jnp.clip(n + 149, 0, 22).astype(jnp.uint32),
                                 jnp.float32)
  return jnp.where(n >= -126, normal, sub)


def _row_exponents(x: jax.Array) -> jax.Array:
  """floor(log2(max finite |x|)) per row of (rows, k) float32, from the exponent field
  (subnormal maxima count as -127; an all-zero or non-finite row gives 0)."""
  a = jnp.max(jnp.where(jnp.isfinite(x), jnp.abs(x), 0.0), axis=-1)
  e = (lax.bitcast_convert_type(a, jnp.uint32) >> _U(23)).astype(jnp.int32) - 127
  return jnp.where(a > 0, e, 0)


def _scale_pow2(x: jax.Array, s: jax.Array) -> jax.Array:
  """x * 2^s per row, s up to +-252, in two exact steps (no 2^s overflow)."""
  s1 = jnp.clip(s // 2, -126, 126)
  s2 = jnp.clip(s - s1, -126, 126)
  return x * _exp2_exact(s1)[:, None] * _exp2_exact(s2)[:, None]


# Target exponent of max|x| for the dot path's float16 parts: max in [2^14, 2^15) < 65504.
_F16_X_EXP = 14


def split_bf16_parts(x: jax.Array, n_parts: int) -> jax.Array:
  """Splits float32 x into n_parts bfloat16 arrays whose float32 sum is x (stacked on axis 0).

  Each part is the top 8 significant bits of what the previous parts left, cut by masking
  the float32 bit pattern (the remainder x - part is exact in float32). Exact for normal
  float32 x with n_parts = 3 (float16 inputs: 2; bfloat16: 1), unless a remainder falls
  below float32's normal range (|x| < 2^-110 or so), where low bits may be lost.
  """
  parts = []
  r = x.astype(jnp.float32)
  for p in range(n_parts):
    if p == n_parts - 1:
      hi = r                                             # what is left fits in 8 bits
    else:
      hi = lax.bitcast_convert_type(
          lax.bitcast_convert_type(r, jnp.uint32) & _U(0xFFFF0000), jnp.float32)
    bits16 = (lax.bitcast_convert_type(hi, jnp.uint32) >> _U(16)).astype(jnp.uint16)
    parts.append(lax.bitcast_convert_type(bits16, jnp.bfloat16))
    r = r - hi
  return jnp.stack(parts)


def split_f16_parts(x: jax.Array) -> jax.Array:
  """Splits float32 x (|x| < 2^15) into float16 hi + lo (stacked on axis 0).

  hi = x truncated to 11 significant bits (a float16 value when |x| >= 2^-14), lo = the
  float16 rounding of the exact remainder: |hi + lo - x| <= 2^-22 |x|, or <= 2^-25 when
  |x| < 2^-14 (float16 subnormals). Cut by masking bits, not by a float round trip that
  XLA may elide (NUMERICS.md section 9).
  """
  hi = lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.uint32) & _U(0xFFFFE000),
                                jnp.float32)
  return jnp.stack([hi.astype(jnp.float16), (x - hi).astype(jnp.float16)])


def _effective_config(cfg: GemvConfig, plan: FormatPlan, n_out: int, kw: int) -> GemvConfig:
  """Shrinks blocks that exceed a small problem (keeps powers of two and the block grain)."""
  wpb = plan.words_per_block
  bk = max(wpb, min(cfg.block_k, _next_pow2(kw)))
  br_min = 16 if cfg.path == "dot" else 1
  br = max(br_min, min(cfg.block_rows, _next_pow2(n_out)))
  if bk % wpb:
    raise ValueError(f"block_k={bk} is not a multiple of the {wpb} words per scale block")
  return dataclasses.replace(cfg, block_rows=br, block_k=bk)


# Shared memory a program may use on the tensor-core path (the H200 has 227 KiB per block;
# Triton adds staging for the dot operand on top of the pipelined loads).
_SMEM_BUDGET = 200 * 1024


def _fit_shared_memory(cfg: GemvConfig, plan: FormatPlan, n_parts: int, bp: int) -> GemvConfig:
  """Halves block_k (then num_stages) until the tensor-core path's pipelined loads fit.

  Estimate: num_stages * (x parts + weight words of one K step) + the bfloat16 / float16
  weight tile staged for the dot. Wide batches (Bp = 32, 64) with 3 x parts overflowed the
  tuned block_k (RESOURCE_EXHAUSTED on the H200 for mxfp4 at batch 33)."""
  pw = plan.per_word

  def need(c):
    step = n_parts * c.block_k * pw * bp * 2 + c.block_rows * c.block_k * 4
    return c.num_stages * step + c.block_rows * c.block_k * pw * 2

  while need(cfg) > _SMEM_BUDGET and cfg.block_k > plan.words_per_block and cfg.block_k > 8:
    cfg = dataclasses.replace(cfg, block_k=cfg.block_k // 2)
  while need(cfg) > _SMEM_BUDGET and cfg.num_stages > 1:
    cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
  return cfg


def _prep_x_fma(x: jax.Array, plan: FormatPlan, kw_pad: int):
  """x planes (B, pw, kw_pad[/wpb, wpb]) float32 and the per-row factor 2^fold."""
  n_b, k = x.shape
  pw = plan.per_word
  x32 = x.astype(jnp.float32)
  s = jnp.zeros((n_b,), jnp.int32)
  fold = -unpack.f16_route_log2(plan.elem)
  if plan.scale_kind == "e4m3":
    fold -= unpack.f16_route_log2(E4M3)
  xp = jnp.pad(x32, ((0, 0), (0, kw_pad * pw - k))).reshape(n_b, kw_pad, pw)
  xin = jnp.transpose(xp, (0, 2, 1))                            # (B, pw, kw_pad)
  if plan.scale_kind:
    wpb = plan.words_per_block
    xin = xin.reshape(n_b, pw, kw_pad // wpb, wpb)
  return xin, _exp2_exact(fold - s)


def _prep_x_dot(x: jax.Array, plan: FormatPlan, kw_pad: int, bp: int):
  """x parts (P, kw_pad * pw, Bp) as tensor-core operands, and the column factor."""
  n_b, k = x.shape
  pw = plan.per_word
  x32 = jnp.pad(x.astype(jnp.float32), ((0, bp - n_b), (0, kw_pad * pw - k)))
  fold = -unpack.f16_route_log2(plan.elem) - _dot_scale_fold_log2(plan)
  if plan.scale_kind == "e4m3":
    fold -= unpack.f16_route_log2(E4M3)
  if _dot_operand_dtype(plan) == jnp.bfloat16:
    parts = split_bf16_parts(x32, _X_PARTS[jnp.dtype(x.dtype)])
    s = jnp.zeros((bp,), jnp.int32)
  elif jnp.dtype(x.dtype) == jnp.float16:
    parts = x32.astype(jnp.float16)[None]                      # exact, one part
    s = jnp.zeros((bp,), jnp.int32)
  else:
    s = _F16_X_EXP - _row_exponents(x32)
    parts = split_f16_parts(_scale_pow2(x32, s))
  return jnp.transpose(parts, (0, 2, 1)), _exp2_exact(fold - s)


@functools.partial(jax.jit, static_argnames=("plan", "n_out", "k", "config", "interpret"))
def gemv_pallas(data: jax.Array, scales: jax.Array | None, tensor_scale: jax.Array | None,
                x: jax.Array, *, plan: FormatPlan, n_out: int, k: int,
                config: GemvConfig | None = None, interpret: bool = False) -> jax.Array:
  """y = x @ dequantize(W).T with the Pallas kernel, from W's raw arrays.

  Args:
    data: uint32 (n_out, ceil(k / per_word)) packed codes.
    scales: uint8 block-scale codes ((n_out, ceil(k / block)) or, for 16x16 NVFP4,
      (ceil(n_out / 16), ceil(k / 16))), or None.
    tensor_scale: float32 scalar dequantization factor, or None.
    x: (B, k) float32 / bfloat16 / float16.
    plan: format_plan(...) of W.
    config: launch configuration (default: gemv_config(plan.format, B)).
    interpret: run the kernel in Pallas interpret mode (CPU).

  Returns:
    (B, n_out) in x's dtype. Arguments are assumed checked (fp8lab.ops.gemv_packed does).
  """
  n_b = x.shape[0]
  kw = data.shape[1]
  cfg = config if config is not None else gemv_config(plan.format, n_b)
  cfg = _effective_config(cfg, plan, n_out, kw)
  if n_out * kw >= 2**31:
    raise ValueError("W has more than 2^31 words; the kernel uses int32 offsets")
  if cfg.path == "dot":
    bp = max(16, _next_pow2(n_b))
    n_x_parts = (_X_PARTS[jnp.dtype(x.dtype)] if _dot_operand_dtype(plan) == jnp.bfloat16
                 else 1 if jnp.dtype(x.dtype) == jnp.float16 else 2)
    cfg = _fit_shared_memory(cfg, plan, n_x_parts, bp)
  br, bk = cfg.block_rows, cfg.block_k
  n_prog = pl.cdiv(n_out, br)
  kw_pad = pl.cdiv(kw, bk) * bk

  if cfg.path == "dot":
    xin, factor = _prep_x_dot(x, plan, kw_pad, bp)
    assert xin.shape[0] == n_x_parts
    n_parts = xin.shape[0]
    out_rows = n_acc = bp
  else:
    xin, factor = _prep_x_fma(x, plan, kw_pad)
    n_parts = 1
    out_rows = n_acc = n_b

  operands = [data.reshape(-1)]
  nbk = 0
  if plan.scale_kind:
    nbk = scales.shape[-1]
    operands.append(scales.reshape(-1))
  operands += [xin, factor]
  if plan.has_tensor_scale:
    operands.append(jnp.asarray(tensor_scale, jnp.float32).reshape(1))

  kernel = functools.partial(_gemv_kernel, plan=plan, cfg=cfg, n_out=n_out, kw=kw, nbk=nbk,
                             n_b=n_acc, n_parts=n_parts)
  out = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((out_rows, n_prog * br), x.dtype),
      grid=(n_prog,),
      compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps,
                                           num_stages=cfg.num_stages),
      interpret=interpret,
      name=f"fp8lab_gemv_{plan.format}_{cfg.path}",
  )(*operands)
  if out.shape != (n_b, n_out):
    out = out[:n_b, :n_out]
  return out
