"""Split-K flash-decoding attention over a packed KV cache (fp8lab.attention's kernel).

Grid (B, Hkv, n_splits). Program (b, h, s) takes every query row of KV head h of batch row b
(the GQA group times the query tokens, padded to a power of two >= 16 rows for tl.dot; read
in place from q's (B, Tq, Hq, D) and cut into the dots' parts in the kernel) and the cache
positions [s * split_len, (s + 1) * split_len) of that row, in blocks of block_s
positions. Per block:

  1. the row of each position: b * S + pos (contiguous) or table[b, pos // page] * page +
     pos % page (paged: the block table is an input, read with a masked gather);
  2. K's packed words for the block. The "planes" layout (AttentionConfig.layout, default
     where planes_serve): one contiguous (block_s, D / per_word) uint32 tile (vector loads,
     each word once), decoded a code plane at a time (plane j = code j of every word =
     elements w * per_word + j; unpack.decode_planes_16bit, integer ops, two codes per op),
     block scales (MX, NVFP4, float32 blocks of whole words) multiplied into the planes,
     per-token-head scales into the scores' / p's columns, the tensor scale and the float16
     route's power of two into the scores (K) or o after the loop (V). The "elements"
     layout: a (block_s, D) gather in natural element order (each lane loads the word of its
     element), a shift and mask per element (unpack.decode_codes), times its scale (the
     golden dequantize's own float32 products);
  3. scores = q @ K^T (planes: sum_j q_j K_j^T, q_j q's columns j, j + per_word, ...), in
     float32 accumulation: "bf16x3" dots (default) on exact bfloat16 parts (q: three, or
     one when it is bfloat16; K exact, see split_serves), or "f32" dots (precision
     HIGHEST: IEEE float32, no tf32); times sm_scale, masked with where to -inf at positions
     >= kv_length (and, causal, > the query's position); loads past the length are masked
     (never read) and V rows past it are zeroed, so NaN / Inf / garbage stored there cannot
     reach the result through 0 * NaN;
  4. online softmax in float32 (running max m, sum l; a row with no key yet keeps m = -inf
     and contributes nothing, without NaN); o = alpha o + p @ V (p in three bfloat16 parts
     on the bf16x3 dots; planes: one accumulator per V plane, stored in natural order).
The program writes its real rows' unnormalized (o, m, l); `combine`, a second kernel, merges
the splits by their log-sum-exp in a fixed order (no atomics: bitwise deterministic) and
writes o and lse into (B, Tq, Hq, D) and (B, Tq, Hq)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from fp8lab.kernels import device, unpack
from fp8lab.kernels.gemv.operands import _exp2_exact, _f16_parts, _scale_pow2, _x_shift
from fp8lab.kernels.attention.kv import (NO_LIMIT, KVPlan, cache_row_offsets, kv_leaves,
                                         kv_plan, kv_refs, load_kv, load_kv_split,
                                         query_row, serves, softmax_step, split_serves)

__all__ = ["KVPlan", "kv_plan", "serves", "AttentionConfig", "attention_config",
           "attention_partials", "combine", "attention_pallas", "MIN_ROWS", "DOTS",
           "LAYOUTS", "DECODES", "MIN_DOT_K", "query_rows", "split_serves", "split_bf16",
           "planes_serve",
           "f16_serves", "plane_decode"]

# tl.dot needs M >= 16: the query rows of a program are padded to a power of two >= 16.
MIN_ROWS = 16
DOTS = ("f32", "bf16x3", "f16")
# How the planes layout decodes e4m3 / e5m2 / e2m1 codes (AttentionConfig.decode): "integer"
# (the float16 route, shifts and masks: unpack.decode_planes_16bit), "fast" (e4m3 / e5m2 by
# the fp8 -> float16 converts of sm_89+, e2m1 by the inline-PTX integer program:
# unpack.decode_planes_native / decode_planes_e2m1_asm; their jnp twins in interpret mode),
# "auto" ("fast" where the device has it when compiled, "integer" in interpret mode).
DECODES = ("auto", "integer", "fast")
# K / V tile layouts (AttentionConfig.layout): "planes" (whole words loaded contiguously,
# code j of every word decoded as plane j) or "elements" (one code per lane, natural order).
LAYOUTS = ("planes", "elements")
# tl.dot's smallest contraction (K) dimension: a plane's D / per_word columns.
MIN_DOT_K = 16


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
  """Launch parameters: block_s positions per step (a power of two), n_splits programs per
  (batch row, KV head) along the cache, num_warps, num_stages; `dots`: "bf16x3" (exact
  bfloat16 parts on the tensor cores for the operands split_serves takes, IEEE float32 dots
  for the others) or "f32" (IEEE float32 dots throughout); `layout`: "planes" (K / V words
  loaded as contiguous (block_s, D / per_word) tiles and decoded a code plane at a time,
  for the operands planes_serve takes; the others "elements") or "elements" (one code per
  lane in natural order, every operand), or "f16" (float16 dots for the operands f16_serves
  takes, bf16x3 for the others); `decode`: one of DECODES."""
  block_s: int = 64
  n_splits: int = 1
  num_warps: int = 4
  num_stages: int = 2
  dots: str = "f16"
  layout: str = "planes"
  decode: str = "auto"

  def __post_init__(self):
    if self.dots not in DOTS:
      raise ValueError(f"dots must be one of {DOTS}, got {self.dots!r}")
    if self.layout not in LAYOUTS:
      raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
    if self.decode not in DECODES:
      raise ValueError(f"decode must be one of {DECODES}, got {self.decode!r}")
    if self.block_s < 16 or self.block_s & (self.block_s - 1):
      raise ValueError(f"block_s must be a power of two >= 16, got {self.block_s}")
    if self.n_splits < 1:
      raise ValueError(f"n_splits must be >= 1, got {self.n_splits}")


def _next_pow2(n: int) -> int:
  return 1 << max(0, (int(n) - 1).bit_length())


def _prev_pow2(n: int) -> int:
  return 1 << max(0, int(n).bit_length() - 1)


# The fewest blocks of block_s positions one split of the compiled D <= 128 launch takes. A
# split writes float32 partials of its rows (16 x D x 4 bytes for a GQA group of up to 16) and
# the combine adds the splits in a chain, so one-block splits of a short cache write about as
# many bytes as they read (8 MB a layer at the 8B step's B 1, L 4096) and make a 128-term
# combine. 4 (and the waves rounded down) measured best: docs/attention_kernel.md section 3.
MIN_SPLIT_BLOCKS = 4
# Below this many waves of the one-warp programs (a short cache at a small batch: B 1,
# L 4096 makes 256 programs of 128 positions on 132 SMs), programs take their positions in
# blocks of FEW_BLOCK_S with 4 warps and 1 stage instead, the same splits: measured faster
# there; FEW_WAVES_FP4 where K or V holds 4-bit codes, whose one-warp programs lost less
# (docs/attention_kernel.md section 3).
FEW_WAVES = 4
FEW_WAVES_FP4 = 2
FEW_BLOCK_S = 128


def attention_config(batch: int, kv_heads: int, capacity: int, dim: int,
                     interpret: bool = False, plans: tuple[KVPlan, ...] = ()) -> AttentionConfig:
  """The default launch (f16 dots, planes layout, decode "auto"). D <= 128: one-warp
  programs of block_s 32, 2 stages (1 when every plan in `plans`, K's and V's, is NVFP4),
  and KV splits n_splits the largest power of two with B * Hkv * n_splits within eight
  waves of the device's SMs and at least MIN_SPLIT_BLOCKS blocks per split; where those
  programs make fewer than FEW_WAVES waves (FEW_WAVES_FP4 with 4-bit K or V), the same
  splits in 4-warp programs of FEW_BLOCK_S positions a block, 1 stage; D = 256:
  block_s 32 with 4 warps, n_splits the power of two at or above two waves, no more than
  the cache has blocks (its K / V tiles live in registers). The choice and its measured
  data: docs/attention_kernel.md section 3 (the launch probe). With interpret=True:
  block_s 128 (D <= 128) and the D = 256 rule (two waves, down to one-block splits: the CPU
  tests' small caches keep several), 2 stages."""
  small = dim <= 128
  # Interpret mode (CPU tests) keeps the earlier block_s 128 over two waves: the same kernel
  # code, 16x fewer interpreted program steps; the compiled tests run the GPU's launch.
  block_s = 128 if (interpret and small) else 32
  waves = 8 if (small and not interpret) else 2
  blocks = -(-capacity // block_s)
  want = -(-waves * device.sm_count(interpret) // max(1, batch * kv_heads))
  if interpret or not small:
    n_splits = min(_next_pow2(want), _next_pow2(blocks))
  else:
    n_splits = min(_prev_pow2(max(1, want)), _prev_pow2(max(1, blocks // MIN_SPLIT_BLOCKS)))
  n_splits = max(1, n_splits)
  nvfp4 = bool(plans) and all(p.kind == "nvfp4" for p in plans)
  stages = 1 if (nvfp4 and small and not interpret) else 2
  few = FEW_WAVES_FP4 if any(p.per_word == 8 for p in plans) else FEW_WAVES
  if small and not interpret and batch * kv_heads * n_splits < few * device.sm_count(interpret):
    return AttentionConfig(block_s=FEW_BLOCK_S, n_splits=n_splits, num_warps=4, num_stages=1)
  return AttentionConfig(block_s=block_s, n_splits=n_splits, num_warps=1 if small else 4,
                         num_stages=stages)


def _trunc_bf16(x):
  """x (float32) with its low 16 bits cleared: exact as a bfloat16 (integer ops only)."""
  bits = lax.bitcast_convert_type(x, jnp.uint32) & jnp.uint32(0xFFFF0000)
  return lax.bitcast_convert_type(bits, jnp.float32)


def split_bf16(x):
  """Three bfloat16 parts of float32 x whose float32 sum is x exactly (hi, mid: truncated
  top 8 significant bits of x and of the rest; lo: the last <= 8 bits), cut with integer
  ops so that no float round trip can be elided (docs/numerics.md section 9). Exact for
  |x| >= 2^-103 (or 0); below, the low parts are float32 subnormals, which XLA and the GPU
  may flush (the top 8 significant bits survive)."""
  hi = _trunc_bf16(x)
  r = x - hi                                       # exact: the low 16 bits of x
  mid = _trunc_bf16(r)
  lo = r - mid                                     # exact, <= 8 significant bits
  return [a.astype(jnp.bfloat16) for a in (hi, mid, lo)]


def _split_dot(parts, b):
  """sum_i dot(parts[i], b) in float32 (tensor cores on bfloat16), smallest parts first."""
  acc = None
  for a in reversed(parts):
    d = jnp.dot(a, b, preferred_element_type=jnp.float32)
    acc = d if acc is None else acc + d
  return acc


def planes_serve(plan: KVPlan) -> bool:
  """Whether the "planes" layout takes this operand: packed words (per_word > 1) with
  D / per_word >= MIN_DOT_K columns per plane (tl.dot's contraction; e2m1 at D = 64 has 8)
  and block scales whose blocks hold whole words (the block of element w * per_word + j
  then depends on w only). Plain float arrays (one element per load already) and the
  others take the "elements" layout."""
  if plan.kind == "float" or plan.per_word == 1:
    return False
  if plan.dim // plan.per_word < MIN_DOT_K:
    return False
  return not plan.has_scales or plan.block_len % plan.per_word == 0


def f16_serves(plan: KVPlan) -> bool:
  """Whether the "f16" dots take this operand: planes (planes_serve) of e4m3 / e5m2 / e2m1
  / float16 codes whose values are exact in float16 (the float16 route, or the native
  decode's true values) times a factor that keeps them exact: none (per tensor, per token
  and head: those factors go on the scores' / p's columns) or NVFP4's E4M3 block scale
  (code * 2^-14 times the scale's float16 value: <= 6 significant bits, >= 2^-24). Not MX
  (E8M0 scales span float32's range), float32 block scales shorter than D, bfloat16."""
  if not planes_serve(plan) or plan.elem.name == "bf16":
    return False
  if plan.kind == "block":
    return plan.block_len == plan.dim
  return plan.kind in ("tensor", "none", "nvfp4")


def plane_decode(plan: KVPlan, decode: str, interpret: bool) -> str:
  """The unpack.PAIR_LAYOUTS order (= which decode) of the operand's planes for
  AttentionConfig.decode: "native" (e4m3 / e5m2 by fp8 -> float16 converts), "e2m1_asm"
  (e2m1 by inline PTX), "code" (the integer float16 route). "auto" is "fast" when compiled
  (native where device.has_fp8_converts, the e2m1 asm on any CUDA GPU) and "integer" in
  interpret mode; "fast" in interpret mode runs the decodes' jnp twins. Block scales
  shorter than two words keep "code" (a pair order puts codes of two words in one column
  pair)."""
  if decode == "integer" or plan.elem is None or plan.per_word == 1:
    return "code"
  if plan.has_scales and plan.block_len < plan.dim and plan.block_len < 2 * plan.per_word:
    return "code"                      # pair orders mix words e, e + 1: one block for both
  if decode == "auto":
    if interpret:
      return "code"
    if plan.elem.f16x2_convert and device.has_fp8_converts():
      return "native"
    if plan.elem.name == "e2m1" and device.cuda_capability() is not None:
      return "e2m1_asm"
    return "code"
  if plan.elem.f16x2_convert:
    return "native"
  return "e2m1_asm" if plan.elem.name == "e2m1" else "code"


def _route_log2(plan: KVPlan, order: str) -> int:
  """log2 of the power of two between a plane's float16 values and the true ones: the
  float16 route's (e4m3: -8, e5m2: 0, e2m1: -14; the e2m1 asm gives the same bits), 0 for
  the native decode (true values)."""
  return 0 if order == "native" else unpack.f16_route_log2(plan.elem)


def _plane_elements(pw: int, dw: int, order: str):
  """The element index (along D) of column w of each plane, for planes in `order`
  (unpack.PAIR_LAYOUTS): with words paired (e, e + 1), column e + g of plane j holds the
  code at offset pair_offsets[j, g] of the pair's 2 * pw codes. "code": w * pw + j."""
  w = lax.iota(jnp.int32, dw)
  if pw == 1:
    return [w]
  g = w % 2
  off = unpack.pair_offsets(order, pw)
  return [(w - g) * pw + int(off[j, 0]) + g * int(off[j, 1] - off[j, 0]) for j in range(pw)]


def _decode_planes(words, plan: KVPlan, order: str, interpret: bool):
  if order == "native":
    return unpack.decode_planes_native(words, plan.elem, interpret=interpret)
  if order == "e2m1_asm":
    return unpack.decode_planes_e2m1_asm(words, interpret=interpret)
  return unpack.decode_planes_16bit(words, plan.elem)


def _load_kv_planes(plan: KVPlan, refs, rows_off, valid, block_s: int, operand: str,
                    order: str = "code", interpret: bool = False):
  """The "planes" layout: (planes, per-position float32 factor (block_s,) or None).

  The block's words load as one contiguous (block_s, D / per_word) uint32 tile (word w of
  row r at r * (D / per_word) + w: plain offsets, vector loads, each word loaded once);
  the planes (code planes in `order`: _plane_elements says which element each column
  holds) hold each code as its float16 value (true value * 2^_route_log2) times its block
  factor: E8M0 2^(c - 127) (MX, exact), NVFP4's E4M3 scale (exact: <= 6 significant bits;
  multiplied in float16 for the "f16" operand), a shorter-than-D float32 block scale (f32
  dots only: not exact in bfloat16). Left out, for the caller to apply: per-token-head
  scales (the position factor, on the scores' / p's columns), the tensor scale / S_dec and
  the route factor (constants: on the scores, or on o once after the loop). `operand`:
  the planes' dtype, "f16" (f16_serves operands), "bf16" (exact where split_serves) or
  "f32". Rows past the length are masked in every load, their words zeroed (so their
  planes are zeros) and their position factors 0."""
  words_ref, scales_ref, _ = refs
  pw = plan.per_word
  dw = plan.dim // pw
  w = lax.iota(jnp.int32, dw)
  mask = jnp.broadcast_to(valid[:, None], (block_s, dw))
  words = plgpu.load(words_ref.at[(rows_off * dw)[:, None] + w[None, :]], mask=mask, other=0)
  # Zeroed words past the length (one select per word, not per code): every code there is
  # +0, and every factor is finite (masked scale loads read 0), so the planes hold zeros.
  words = jnp.where(mask, words, jnp.uint32(0))
  planes16 = _decode_planes(words, plan, order, interpret)
  factor = pos_f = None
  if plan.kind == "block" and plan.block_len == plan.dim:
    pos_f = jnp.where(valid, plgpu.load(scales_ref.at[rows_off], mask=valid, other=0), 0.0)
  elif plan.has_scales:                # whole words per block: the block of column w
    nb = plan.dim // plan.block_len
    # Column w holds a code of word w ("code") or of word e or e + 1 of its pair (the
    # pair orders, which plane_decode takes only where a pair of words shares a block):
    # either way the block of word w.
    soffs = (rows_off * nb)[:, None] + (w // (plan.block_len // pw))[None, :]
    c = plgpu.load(scales_ref.at[soffs], mask=mask, other=0)
    if plan.kind == "mx":
      factor = unpack.e8m0_scale_to_f32(c)
    elif plan.kind == "nvfp4":
      factor = unpack.e4m3_scale_to_f16(c)
      if operand != "f16":
        factor = factor.astype(jnp.float32)
    else:
      factor = c
  if operand == "f16":
    return [h if factor is None else h * factor for h in planes16], pos_f
  out = []
  for h in planes16:
    if factor is None and operand == "bf16" and h.dtype == jnp.bfloat16:
      out.append(h)
      continue
    x = h.astype(jnp.float32)
    if factor is not None:
      x = x * factor
    out.append(x.astype(jnp.bfloat16) if operand == "bf16" else x)
  return out, pos_f


def _tensor_scale(plan: KVPlan, refs):
  """The operand's scalar float32 factor (tensor scale, NVFP4's S_dec) or None."""
  return refs[2][0] if plan.has_tensor_scale else None


def _operand_mode(plan: KVPlan, config: AttentionConfig, planes: bool) -> str:
  """The dot arithmetic of one operand: "f16" (float16 dots: config.dots "f16" on the
  planes f16_serves takes), "bf16" (the bf16x3 dots: "bf16x3", or "f16" falling back, on
  what split_serves takes) or "f32" (IEEE float32 dots)."""
  if config.dots == "f16" and planes and f16_serves(plan):
    return "f16"
  if config.dots in ("bf16x3", "f16") and split_serves(plan):
    return "bf16"
  return "f32"


def _f16_shift(a):
  """For row maxima a >= 0 (float32): s with a * 2^s in [2^14, 2^15) (a normal > 0), clipped
  to [-113, 126] (0 and subnormal maxima: s = 14 and 126 respectively; NaN / Inf: -113)."""
  return jnp.clip(_x_shift(a), -113, 126)


def _f16_p_parts(t):
  """p's float16 operand for the "f16" V dots: t (rows, block) >= 0 (p times V's
  per-position factor) scaled per row by 2^s (its largest element into [2^14, 2^15)), cut
  into hi (the top 11 significant bits, by masking) and lo = float16(rest); returns
  ([lo, hi] float16, 2^-s per row). |hi + lo - t 2^s| <= 2^-22 t 2^s for elements >= 2^-14
  after the scaling (smaller ones, under 2^-28 of the row's largest, keep 2^-24
  absolutely)."""
  sh = _f16_shift(jnp.max(t, axis=1))
  ts = t * _exp2_exact(sh)[:, None]
  hi, lo = _f16_parts(ts)
  return [lo, hi], _exp2_exact(-sh)


def _q_parts(cols, k_mode: str):
  """q's K-dot operands from its columns of each K plane, cols[j] (rows, D / pw) float32 or
  bfloat16 (zeros in padding rows): per plane the parts (summed by _split_dot, which takes
  them last first), and for "f16" each row's 2^-s, else None. "f32": q in float32, one
  part. "bf16": a bfloat16 q is its own exact part (K's values are exact in bfloat16, so the
  products are exact either way); float32 q three exact bfloat16 parts. "f16": q scaled per
  row by 2^s (its largest |q|, over every plane, into [2^14, 2^15)), then one float16 part
  for bfloat16 q (exact where the scaled element is a normal float16: all but those under
  2^-28 of the row's largest), two for float32 q (hi: 11 bits by masking, lo =
  float16(rest): |hi + lo - x| <= 2^-22 |x|)."""
  if k_mode == "f32":
    return [[c.astype(jnp.float32)] for c in cols], None
  if k_mode == "bf16":
    if cols[0].dtype == jnp.bfloat16:
      return [[c] for c in cols], None
    return [split_bf16(c.astype(jnp.float32)) for c in cols], None
  c32 = [c.astype(jnp.float32) for c in cols]
  a = None
  for c in c32:
    cm = jnp.max(jnp.abs(c), axis=1)
    a = cm if a is None else jnp.maximum(a, cm)
  sh = _f16_shift(a)
  qs = [_scale_pow2(c, sh[:, None]) for c in c32]
  if cols[0].dtype == jnp.bfloat16:
    return [[x.astype(jnp.float16)] for x in qs], _exp2_exact(-sh)
  return [_f16_parts(x)[::-1] for x in qs], _exp2_exact(-sh)


def _kernel(*refs, kplan: KVPlan, vplan: KVPlan, paged: bool, kv_heads: int, rows: int,
            group: int, tq: int, capacity: int, page_size: int, pages: int, split_len: int,
            n_splits: int, sm_scale: float, block_s: int, k_mode: str, v_mode: str,
            pool_pages: int, k_planes: bool, v_planes: bool, k_order: str, v_order: str,
            interpret: bool):
  it = iter(refs)
  q_ref, qpos_ref, len_ref = next(it), next(it), next(it)
  table_ref = next(it) if paged else None

  k_refs, v_refs = kv_refs(it, kplan), kv_refs(it, vplan)
  o_ref, m_ref, l_ref = next(it), next(it), next(it)
  dim = kplan.dim
  # Plane layouts: column w of plane j holds element k_elems[j][w] (K) / v_elems[j][w] (V)
  # (_plane_elements: w * pw + j for the "code" order); one plane of D columns in natural
  # order for the "elements" layout.
  kpw = kplan.per_word if k_planes else 1
  vpw = vplan.per_word if v_planes else 1
  kdw, vdw = dim // kpw, dim // vpw
  k_elems = _plane_elements(kpw, kdw, k_order)
  v_elems = _plane_elements(vpw, vdw, v_order)

  b, h, sp = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  r = lax.iota(jnp.int32, rows)
  prog = b * kv_heads + h
  # q's columns of each K plane, gathered once per program (outside the loop) from q's
  # (B, Tq, Hq, D) rows (padding rows read as zeros), and cut into the dots' parts here.
  q_row, t, row_ok = query_row(b, h, r, group=group, tq=tq, kv_heads=kv_heads)
  q_row = jnp.where(row_ok, q_row, 0)
  q_mask = jnp.broadcast_to(row_ok[:, None], (rows, kdw))
  q_in, q_unscale = _q_parts(
      [plgpu.load(q_ref.at[(q_row * dim)[:, None] + k_elems[j][None, :]], mask=q_mask,
                  other=0) for j in range(kpw)], k_mode)
  # Each row's q position (padding rows: no limit; they see what row 0 sees, discarded).
  qpos = plgpu.load(qpos_ref.at[jnp.where(row_ok, b * tq + t, 0)], mask=row_ok,
                    other=NO_LIMIT)                                      # (rows,) int32
  length = jnp.clip(plgpu.load(len_ref.at[b]), 0, capacity)
  start = sp * split_len
  end = jnp.minimum(start + split_len, length)
  n_iter = (jnp.maximum(end - start, 0) + (block_s - 1)) // block_s
  # Constants of the plane layouts, exact powers of two: the float16-route factor of K on
  # the scores (with sm_scale), of V on o after the loop.
  k_sm = sm_scale * (2.0 ** -_route_log2(kplan, k_order) if k_planes else 1.0)
  k_scalar = _tensor_scale(kplan, k_refs) if (k_planes or k_mode != "f32") else None
  v_scalar = _tensor_scale(vplan, v_refs) if (v_planes or v_mode != "f32") else None
  # Per-row factor of the scores: q's 2^-s for the float16 parts, then the constants.
  k_fac = jnp.float32(k_sm) if k_scalar is None else k_scalar * jnp.float32(k_sm)
  if q_unscale is not None:
    k_fac = q_unscale * k_fac                                            # (rows,)

  def dot32(a, bb):
    return jnp.dot(a, bb, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)

  def qk(parts, kt):                   # q parts (smallest last) against one K plane^T
    if k_mode == "f32":
      return dot32(parts[0], kt)
    return _split_dot(parts, kt)

  def body(i, carry):
    o, m, l = carry
    pos = start + i * block_s + lax.iota(jnp.int32, block_s)
    valid = pos < end
    rows_off = cache_row_offsets(pos, valid, b, h, kv_heads=kv_heads, capacity=capacity,
                                 paged=paged, table_ref=table_ref, pages=pages,
                                 page_size=page_size, pool_pages=pool_pages)
    if k_planes:
      kb, k_pos = _load_kv_planes(kplan, k_refs, rows_off, valid, block_s, k_mode,
                                  k_order, interpret)
      s = None
      for j in range(kpw):             # scores = sum_j q_j K_j^T
        d = qk(q_in[j], kb[j].T)
        s = d if s is None else s + d
    elif k_mode == "bf16":
      kb, k_pos, _ = load_kv_split(kplan, k_refs, rows_off, valid, block_s)
      s = qk(q_in[0], kb.T)
    else:
      k_pos = None
      s = qk(q_in[0], load_kv(kplan, k_refs, rows_off, valid, block_s).T)
    if k_pos is not None:
      s = s * k_pos[None, :]
    s = s * (k_fac[:, None] if q_unscale is not None else k_fac)
    m_new, alpha, p, l = softmax_step(s, valid, pos, qpos, m, l)
    vs = None
    if v_planes:
      vb, v_pos = _load_kv_planes(vplan, v_refs, rows_off, valid, block_s, v_mode, v_order,
                                  interpret)
    elif v_mode == "bf16":
      vb, v_pos, vs = load_kv_split(vplan, v_refs, rows_off, valid, block_s)
      vb = [vb]
    else:
      vb, v_pos = [load_kv(vplan, v_refs, rows_off, valid, block_s)], None
    pv_in = p if v_pos is None else p * v_pos[None, :]
    if v_mode == "f16":                # float16 parts of p, scaled per row
      parts, unscale = _f16_p_parts(pv_in)
      pv = [_split_dot(parts[::-1], x) * unscale[:, None] for x in vb]
    elif v_mode == "bf16":
      parts = split_bf16(pv_in)
      pv = [_split_dot(parts, x) for x in vb]
      if not v_planes and vs is not None:                 # the elements path: per block
        pv = [x * vs for x in pv]
    else:
      pv = [dot32(pv_in, x) for x in vb]
    return tuple(alpha[:, None] * oj + x for oj, x in zip(o, pv)), m_new, l

  o = tuple(jnp.zeros((rows, vdw), jnp.float32) for _ in range(vpw))
  m = jnp.full((rows,), -jnp.inf, jnp.float32)
  l = jnp.zeros((rows,), jnp.float32)
  o, m, l = lax.fori_loop(0, n_iter, body, (o, m, l))
  part = prog * n_splits + sp
  for j, oj in enumerate(o):
    if v_planes:                       # V's constants, once: the route factor, then S_dec
      oj = oj * jnp.float32(2.0 ** -_route_log2(vplan, v_order))
      if v_scalar is not None:
        oj = oj * v_scalar
    # plane j's column w is element v_elems[j][w]: stored in natural order (once per program)
    # Real rows only (combine reads no others).
    plgpu.store(o_ref.at[((part * rows + r) * dim)[:, None] + v_elems[j][None, :]], oj,
                mask=jnp.broadcast_to(row_ok[:, None], (rows, vdw)))
  plgpu.store(m_ref.at[part * rows + r], m, mask=row_ok)
  plgpu.store(l_ref.at[part * rows + r], l, mask=row_ok)


def query_rows(tq: int, group: int) -> int:
  """The query rows of a program: the Tq tokens times the GQA group, padded to a power of
  two >= MIN_ROWS (tl.dot's smallest M)."""
  return max(MIN_ROWS, _next_pow2(tq * group))


def attention_partials(q, qpos, kv_len, table, k, v, *, kplan: KVPlan, vplan: KVPlan,
                       group: int, capacity: int, page_size: int, sm_scale: float,
                       config: AttentionConfig, interpret: bool = False):
  """The kernel's per-split (o, m, l): (B, Hkv, n_splits, rows, D), (B, Hkv, n_splits,
  rows) twice, float32, rows = query_rows(Tq, group) (row t * group + g: token t, query
  head h * group + g of KV head h; rows past Tq * group are padding). q (B, Tq, Hq, D)
  float32 or bfloat16 (read in place; bfloat16 takes fewer exact parts on the bf16x3 / f16
  dots); qpos (B, Tq) int32 (a key at a position > its token's qpos is masked); kv_len (B,)
  int32; table (B, pages) int32 or None (contiguous: k / v rows b * capacity + pos); k, v
  the KV operands (QuantizedArrays with leaves (..., Hkv, D / per_word), or float arrays).
  Arguments are assumed checked."""
  bsz, tq, hq, dim = q.shape
  kv_heads = hq // group
  rows = query_rows(tq, group)
  n_splits = config.n_splits
  split_len = pl.cdiv(pl.cdiv(capacity, n_splits), config.block_s) * config.block_s
  paged = table is not None
  pages = table.shape[1] if paged else 1
  k_planes = config.layout == "planes" and planes_serve(kplan)
  v_planes = config.layout == "planes" and planes_serve(vplan)
  k_mode = _operand_mode(kplan, config, k_planes)
  v_mode = _operand_mode(vplan, config, v_planes)
  k_order = plane_decode(kplan, config.decode, interpret) if k_planes else "code"
  v_order = plane_decode(vplan, config.decode, interpret) if v_planes else "code"
  if q.dtype != jnp.bfloat16:
    q = q.astype(jnp.float32)
  operands = [q.reshape(-1), qpos.astype(jnp.int32).reshape(-1), kv_len.astype(jnp.int32)]
  if paged:
    operands.append(table.astype(jnp.int32).reshape(-1))
  operands += kv_leaves(k, kplan) + kv_leaves(v, vplan)
  n_parts = bsz * kv_heads * n_splits
  kernel = functools.partial(
      _kernel, kplan=kplan, vplan=vplan, paged=paged, kv_heads=kv_heads, rows=rows,
      group=group, tq=tq, capacity=capacity, page_size=page_size, pages=pages,
      split_len=split_len, n_splits=n_splits, sm_scale=float(sm_scale),
      block_s=config.block_s, k_mode=k_mode, v_mode=v_mode,
      pool_pages=k.shape[0] if paged else 1, k_planes=k_planes, v_planes=v_planes,
      k_order=k_order, v_order=v_order, interpret=interpret)
  o, m, l = pl.pallas_call(
      kernel,
      out_shape=(jax.ShapeDtypeStruct((n_parts * rows * dim,), jnp.float32),
                 jax.ShapeDtypeStruct((n_parts * rows,), jnp.float32),
                 jax.ShapeDtypeStruct((n_parts * rows,), jnp.float32)),
      grid=(bsz, kv_heads, n_splits),
      compiler_params=plgpu.CompilerParams(num_warps=config.num_warps,
                                           num_stages=config.num_stages),
      interpret=interpret,
      name=f"fp8lab_attention_{kplan.kind}_{vplan.kind}_{config.dots}_{config.layout}",
  )(*operands)
  shape = (bsz, kv_heads, n_splits, rows)
  return o.reshape(shape + (dim,)), m.reshape(shape), l.reshape(shape)


def _combine_kernel(o_ref, m_ref, l_ref, out_ref, lse_ref, *, kv_heads: int, rows: int,
                    dim: int, n_splits: int, real_rows: int, block_d: int, block_splits: int,
                    n_chunks: int, group: int, tq: int, spare: int, transposed: bool):
  """One (batch row, KV head, block_d columns of D): the splits merged in chunks of
  block_splits splits (a chunk's (block_splits, real_rows, block_d) partials load at once;
  splits past n_splits read as empty), its real rows stored into (B, Tq, Hq, D) and, from
  the first column block, the log-sum-exps into (B, Tq, Hq). transposed: a split's o is
  (D, rows) (the Mosaic kernel's o^T), not (rows, D)."""
  b, h, c = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  r = lax.iota(jnp.int32, real_rows)
  d = c * block_d + lax.iota(jnp.int32, block_d)
  base = (b * kv_heads + h) * n_splits

  def rows_of(i):                      # chunk i: (block_splits, real_rows) partial rows, valid
    sp = i * block_splits + lax.iota(jnp.int32, block_splits)
    ok = (sp < n_splits)[:, None] & (r < tq * group)[None, :]
    return jnp.where(ok, ((base + sp) * rows)[:, None] + r[None, :], 0), ok

  def m_of(i):
    row, ok = rows_of(i)
    return plgpu.load(m_ref.at[row], mask=ok, other=-jnp.inf), row, ok

  mx = lax.fori_loop(0, n_chunks, lambda i, a: jnp.maximum(a, jnp.max(m_of(i)[0], axis=0)),
                     jnp.full((real_rows,), -jnp.inf, jnp.float32))
  m_safe = jnp.where(mx == -jnp.inf, 0.0, mx)

  def add(i, carry):
    num, den = carry
    m, row, ok = m_of(i)
    w = jnp.exp(m - m_safe[None, :])                     # 0 for empty splits (m = -inf)
    l = plgpu.load(l_ref.at[row], mask=ok, other=0.0)
    mask = jnp.broadcast_to(ok[:, :, None], (block_splits, real_rows, block_d))
    if transposed:                     # row = part * rows + r: element (r, d) of part's o^T
      off = jnp.where(mask, (((row - r[None, :]) * dim)[:, :, None] + d[None, None, :] * rows
                             + r[None, :, None]), 0)
    else:
      off = (row * dim)[:, :, None] + d[None, None, :]
    o = plgpu.load(o_ref.at[off], mask=mask, other=0.0)
    return num + jnp.sum(o * w[:, :, None], axis=0), den + jnp.sum(l * w, axis=0)

  num, den = lax.fori_loop(0, n_chunks, add, (jnp.zeros((real_rows, block_d), jnp.float32),
                                              jnp.zeros((real_rows,), jnp.float32)))
  has = den > 0
  den_safe = jnp.where(has, den, 1.0)
  out = jnp.where(has[:, None], num / den_safe[:, None], 0.0)
  lse = jnp.where(has, m_safe + jnp.log(den_safe), -jnp.inf)
  q_row, _, ok = query_row(b, h, r, group=group, tq=tq, kv_heads=kv_heads)
  # Rows past Tq * group are masked; compiled, a masked lane touches no memory, but
  # interpret mode stores every lane (the old value where masked), so there they point at
  # spare rows past the outputs' end (`spare`), never at a real row.
  q_row = jnp.where(ok, q_row, spare + r if spare else 0)
  plgpu.store(out_ref.at[(q_row * dim)[:, None] + d[None, :]], out.astype(out_ref.dtype),
              mask=jnp.broadcast_to(ok[:, None], (real_rows, block_d)))
  first = ok & (c == 0)                # one program per row stores its lse
  plgpu.store(lse_ref.at[jnp.where(first, q_row, spare + r if spare else 0)], lse, mask=first)


# The combine's tiles: at most this many float32 partials per program and chunk.
_COMBINE_TILE = 4096


def combine(o, m, l, *, group: int, tq: int, out_dtype, interpret: bool = False,
            transposed: bool = False):
  """Merges attention_partials' splits by their log-sum-exp, in float32, in one Pallas
  kernel (a program per batch row, KV head and block of D's columns; the splits added in
  a fixed reduction order: no atomics, bitwise deterministic): (o (B, Tq, Hq, D) in
  out_dtype, lse (B, Tq, Hq) float32) with o = sum_s w_s o_s / L, w_s = exp(m_s - M),
  M = max_s m_s, L = sum_s w_s l_s, lse = M + log L; a row with no key gets o = 0 and
  lse = -inf. Only the Tq * group real rows of the partials are read. transposed: o is
  (B, Hkv, n_splits, D, rows) (the Mosaic kernel's o^T per split)."""
  bsz, kv_heads, n_splits = o.shape[:3]
  rows, dim = o.shape[3:][::-1] if transposed else o.shape[3:]
  real_rows = _next_pow2(tq * group)
  s_pad = _next_pow2(n_splits)
  block_d = min(dim, 32 if s_pad * real_rows <= 128 else 16)
  block_splits = max(1, min(s_pad, _COMBINE_TILE // (real_rows * block_d)))
  n_rows = bsz * tq * kv_heads * group
  spare = n_rows if interpret else 0
  extra = real_rows if spare else 0
  out, lse = pl.pallas_call(
      functools.partial(_combine_kernel, kv_heads=kv_heads, rows=rows, dim=dim,
                        n_splits=n_splits, real_rows=real_rows, block_d=block_d,
                        block_splits=block_splits, n_chunks=s_pad // block_splits,
                        group=group, tq=tq, spare=spare, transposed=transposed),
      out_shape=(jax.ShapeDtypeStruct(((n_rows + extra) * dim,), out_dtype),
                 jax.ShapeDtypeStruct((n_rows + extra,), jnp.float32)),
      grid=(bsz, kv_heads, dim // block_d),
      compiler_params=plgpu.CompilerParams(
          num_warps=max(1, min(4, block_splits * real_rows * block_d // 1024)), num_stages=1),
      interpret=interpret, name="fp8lab_attention_combine",
  )(o.reshape(-1), m.reshape(-1), l.reshape(-1))
  return (out[:n_rows * dim].reshape(bsz, tq, kv_heads * group, dim),
          lse[:n_rows].reshape(bsz, tq, kv_heads * group))


@functools.partial(jax.jit, static_argnames=("kplan", "vplan", "group", "capacity",
                                             "page_size", "sm_scale", "config", "out_dtype",
                                             "interpret"))
def attention_pallas(q, qpos, kv_len, table, k, v, *, kplan: KVPlan, vplan: KVPlan,
                     group: int, capacity: int, page_size: int, sm_scale: float,
                     config: AttentionConfig, out_dtype=None, interpret: bool = False):
  """(o (B, Tq, Hq, D) in out_dtype (default q's), lse (B, Tq, Hq) float32):
  attention_partials, then combine. Two kernels; q is read and o written in place."""
  out_dtype = q.dtype if out_dtype is None else out_dtype
  parts = attention_partials(q, qpos, kv_len, table, k, v, kplan=kplan, vplan=vplan,
                             group=group, capacity=capacity, page_size=page_size,
                             sm_scale=sm_scale, config=config, interpret=interpret)
  return combine(*parts, group=group, tq=q.shape[1], out_dtype=out_dtype,
                 interpret=interpret)
