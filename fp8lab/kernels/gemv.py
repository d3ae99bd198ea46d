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

"fma" (CUDA cores; batch 1 to a few rows). Per word: integer decode of all codes to
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

"dot" (tensor cores; batches of 16 and more). Decoded weights, times their block scale
(exact in float32), go to bfloat16 -- exact, since every element format has at most 3
mantissa bits and the E4M3 block scale 3 more, except f16 weights, split into two bfloat16
parts (8 + 8 >= 11 bits). x is split outside the kernel into bfloat16 parts that sum to it
exactly: 3 for float32 (8 + 8 + 8 >= 24 significant bits), 2 for float16, 1 for bfloat16.
The parts are cut by truncating bit patterns (integer ops), never by float round trips
that XLA may elide (NUMERICS.md section 9). Every bfloat16 product is exact in float32;
jnp.dot accumulates in float32 on the tensor cores:
    acc_hi[r, b] += dot(w_hi, x_hi),  acc_lo[r, b] += dot(other part pairs)
    y = (acc_hi + acc_lo if acc_hi is finite else acc_hi) * final
Keeping the hi product apart means an Inf weight times a nonzero x whose low parts are 0
gives Inf, not Inf * 0 = NaN. Same bound as above (the tensor cores' float32 accumulation
is not round-to-nearest, so the tests allow 2 (k + 3) u sum|w x|). Weights whose scaled
magnitude is below bfloat16's normal range (2^-126; only with the smallest MX scales) may
lose low bits there.

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
  """
  path: str
  block_rows: int
  block_k: int
  num_warps: int = 4
  num_stages: int = 3

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
DEFAULT_CONFIGS: dict[str, dict[int, dict[str, Any]]] = {
    "e4m3":       {1: _cfg("fma", 4, 256, 4), 4: _cfg("fma", 4, 128, 4),
                   16: _cfg("dot", 64, 64, 4), 64: _cfg("dot", 64, 64, 4)},
    "e5m2":       {1: _cfg("fma", 4, 256, 4), 4: _cfg("fma", 4, 128, 4),
                   16: _cfg("dot", 64, 64, 4), 64: _cfg("dot", 64, 64, 4)},
    "mxfp8":      {1: _cfg("fma", 4, 256, 4), 4: _cfg("fma", 4, 128, 4),
                   16: _cfg("dot", 64, 64, 4), 64: _cfg("dot", 64, 64, 4)},
    "mxfp8_e5m2": {1: _cfg("fma", 4, 256, 4), 4: _cfg("fma", 4, 128, 4),
                   16: _cfg("dot", 64, 64, 4), 64: _cfg("dot", 64, 64, 4)},
    "mxfp4":      {1: _cfg("fma", 4, 128, 4), 4: _cfg("fma", 4, 64, 4),
                   16: _cfg("dot", 64, 32, 4), 64: _cfg("dot", 64, 32, 4)},
    "nvfp4":      {1: _cfg("fma", 4, 128, 4), 4: _cfg("fma", 4, 64, 4),
                   16: _cfg("dot", 64, 32, 4), 64: _cfg("dot", 64, 32, 4)},
    "f16":        {1: _cfg("fma", 4, 256, 4), 4: _cfg("fma", 4, 128, 4),
                   16: _cfg("dot", 64, 64, 4), 64: _cfg("dot", 64, 64, 4)},
    "bf16":       {1: _cfg("fma", 4, 256, 4), 4: _cfg("fma", 4, 128, 4),
                   16: _cfg("dot", 64, 64, 4), 64: _cfg("dot", 64, 64, 4)},
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


def _decode_scales(codes: jax.Array, plan: FormatPlan) -> jax.Array:
  if plan.scale_kind == "e8m0":
    return unpack.e8m0_scale_to_f32(codes)
  return unpack.e4m3_scale_to_f32(codes)


def _final_scale(ts_ref, plan: FormatPlan) -> jax.Array:
  f = jnp.float32(2.0 ** plan.final_scale_log2())
  if ts_ref is not None:
    # 2^e * ts is exact (barring overflow), so y gets one rounding from this factor.
    f = f * ts_ref[0]
  return f


def _gemv_kernel(*refs, plan: FormatPlan, cfg: GemvConfig, n_out: int, kw: int, nbk: int,
                 n_b: int, n_parts: int, w_parts: int):
  """Kernel body for both paths; see the module docstring for the arithmetic."""
  it = iter(refs)
  w_ref = next(it)
  s_ref = next(it) if plan.scale_kind else None
  x_ref = next(it)
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
  if blocked:
    tile_cols = (lax.iota(jnp.int32, n_groups)[:, None] * wpb
                 + lax.iota(jnp.int32, wpb)[None, :])          # (G, wpb)
    row_off = (rows * kw)[:, None, None]
    srow_off = ((rows // plan.scale_row_div) * nbk)[:, None]
  else:
    tile_cols = lax.iota(jnp.int32, bk)                         # (bk,)
    row_off = (rows * kw)[:, None]

  def load_tile(step, masked: bool):
    k0 = step * bk
    cols = k0 + tile_cols
    offs = row_off + cols[None]
    if masked:
      words = plgpu.load(w_ref.at[offs], mask=jnp.broadcast_to(cols[None] < kw, offs.shape),
                         other=0)
    else:
      words = w_ref[offs]
    scale = None
    if blocked:
      gcols = step * n_groups + lax.iota(jnp.int32, n_groups)
      soffs = srow_off + gcols[None, :]
      if masked:
        codes = plgpu.load(s_ref.at[soffs],
                           mask=jnp.broadcast_to(gcols[None, :] < nbk, soffs.shape), other=0)
      else:
        codes = s_ref[soffs]
      scale = _decode_scales(codes, plan)                       # (br, G)
    return words, scale

  def x_slice(step, lead: tuple[int, ...]):
    if dot_path:
      return x_ref[(*lead, pl.ds(step * bk, bk), slice(None))]    # (bk, Bp)
    if blocked:
      return x_ref[(*lead, pl.ds(step * n_groups, n_groups), slice(None))]   # (G, wpb)
    return x_ref[(*lead, pl.ds(step * bk, bk))]                    # (bk,)

  def fma_step(step, carry, masked):
    accs, flags = carry
    words, scale = load_tile(step, masked)
    planes = unpack.decode_planes(words, plan.elem)
    new_accs = []
    for b in range(n_b):
      if blocked:
        part = None
        for i in range(pw):
          t = planes[i] * x_slice(step, (b, i))[None]
          part = t if part is None else part + t
        new_accs.append(accs[b] + jnp.sum(part, axis=2) * scale)
      else:
        acc = accs[b]
        for i in range(pw):
          acc = acc + planes[i] * x_slice(step, (b, i))[None]
        new_accs.append(acc)
    if nan_flags:
      flags = flags | unpack.nan_byte_flags(words, plan.elem)
    return tuple(new_accs), flags

  def to_bf16_parts(w32):
    if w_parts == 1:
      return [w32.astype(jnp.bfloat16)]                  # exact: <= 8 significant bits
    hi = lax.bitcast_convert_type(
        lax.bitcast_convert_type(w32, jnp.uint32) & _U(0xFFFF0000), jnp.float32)
    return [hi.astype(jnp.bfloat16), (w32 - hi).astype(jnp.bfloat16)]

  def dot_step(step, carry, masked):
    (acc_hi, acc_lo), flags = carry
    words, scale = load_tile(step, masked)
    planes = unpack.decode_planes(words, plan.elem)
    for i in range(pw):
      w32 = planes[i]
      if blocked:
        w32 = (w32 * scale[:, :, None]).reshape(br, bk)
      for wp, wpart in enumerate(to_bf16_parts(w32)):
        for p in range(n_parts):
          d = jnp.dot(wpart, x_slice(step, (p, i)), preferred_element_type=jnp.float32)
          if wp == 0 and p == 0:
            acc_hi = acc_hi + d
          else:
            acc_lo = acc_lo + d
    if nan_flags:
      flags = flags | unpack.nan_byte_flags(words, plan.elem)
    return (acc_hi, acc_lo), flags

  step_fn = dot_step if dot_path else fma_step
  tile_shape = (br, n_groups, wpb) if blocked else (br, bk)
  if dot_path:
    accs = (jnp.zeros((br, n_b), jnp.float32), jnp.zeros((br, n_b), jnp.float32))
  else:
    acc_shape = (br, n_groups) if blocked else (br, bk)
    accs = tuple(jnp.zeros(acc_shape, jnp.float32) for _ in range(n_b))
  flags = jnp.zeros(tile_shape, jnp.uint32) if nan_flags else jnp.zeros((), jnp.uint32)
  carry = (accs, flags)

  n_full, tail = divmod(kw, bk)
  if n_full:
    carry = lax.fori_loop(0, n_full, lambda s, c: step_fn(s, c, False), carry)
  if tail:
    carry = step_fn(n_full, carry, True)
  accs, flags = carry

  final = _final_scale(ts_ref, plan)
  row_nan = None
  if nan_flags:
    marked = flags & unpack.NAN_FLAG_MASK
    row_nan = jnp.max(marked.reshape(br, -1) if blocked else marked, axis=1) != _U(0)

  if dot_path:
    acc_hi, acc_lo = accs
    y = jnp.where(jnp.isfinite(acc_hi), acc_hi + acc_lo, acc_hi) * final
    if row_nan is not None:
      y = jnp.where(row_nan[:, None], jnp.float32(jnp.nan), y)
    o_ref[:, pl.ds(r0, br)] = y.T.astype(o_ref.dtype)
  else:
    for b in range(n_b):
      y = jnp.sum(accs[b], axis=1) * final
      if row_nan is not None:
        y = jnp.where(row_nan, jnp.float32(jnp.nan), y)
      o_ref[b, pl.ds(r0, br)] = y.astype(o_ref.dtype)


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


_X_PARTS = {jnp.dtype(jnp.float32): 3, jnp.dtype(jnp.float16): 2,
            jnp.dtype(jnp.bfloat16): 1}


def _effective_config(cfg: GemvConfig, plan: FormatPlan, n_out: int, kw: int) -> GemvConfig:
  """Shrinks blocks that exceed a small problem (keeps powers of two and the block grain)."""
  wpb = plan.words_per_block
  bk = max(wpb, min(cfg.block_k, _next_pow2(kw)))
  br_min = 16 if cfg.path == "dot" else 1
  br = max(br_min, min(cfg.block_rows, _next_pow2(n_out)))
  if bk % wpb:
    raise ValueError(f"block_k={bk} is not a multiple of the {wpb} words per scale block")
  return dataclasses.replace(cfg, block_rows=br, block_k=bk)


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
  pw = plan.per_word
  cfg = config if config is not None else gemv_config(plan.format, n_b)
  cfg = _effective_config(cfg, plan, n_out, kw)
  br, bk = cfg.block_rows, cfg.block_k
  n_prog = pl.cdiv(n_out, br)
  kw_pad = pl.cdiv(kw, bk) * bk
  if n_out * kw >= 2**31:
    raise ValueError("W has more than 2^31 words; the kernel uses int32 offsets")

  # x planes: x_plane[i, j] = x[pw * j + i], zero padded to kw_pad words.
  xp = jnp.pad(x.astype(jnp.float32), ((0, 0), (0, kw_pad * pw - k)))
  xp = xp.reshape(n_b, kw_pad, pw)
  n_parts = w_parts = 1
  if cfg.path == "dot":
    n_parts = _X_PARTS[jnp.dtype(x.dtype)]
    w_parts = 2 if plan.elem.name == "f16" else 1
    bp = max(16, _next_pow2(n_b))
    xp = jnp.pad(xp, ((0, bp - n_b), (0, 0), (0, 0)))
    xp = jnp.transpose(xp, (2, 1, 0))                        # (pw, kw_pad, Bp)
    xin = split_bf16_parts(xp, n_parts)                      # (P, pw, kw_pad, Bp)
    out_rows = bp
  else:
    xin = jnp.transpose(xp, (0, 2, 1))                       # (B, pw, kw_pad)
    if plan.scale_kind:
      wpb = plan.words_per_block
      xin = xin.reshape(n_b, pw, kw_pad // wpb, wpb)
    out_rows = n_b

  operands = [data.reshape(-1)]
  nbk = 0
  if plan.scale_kind:
    nbk = scales.shape[-1]
    operands.append(scales.reshape(-1))
  operands.append(xin)
  if plan.has_tensor_scale:
    operands.append(jnp.asarray(tensor_scale, jnp.float32).reshape(1))

  kernel = functools.partial(_gemv_kernel, plan=plan, cfg=cfg, n_out=n_out, kw=kw, nbk=nbk,
                             n_b=(out_rows if cfg.path == "dot" else n_b), n_parts=n_parts,
                             w_parts=w_parts)
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
