"""The KV side shared by the attention kernels (kernel.py: decode; prefill.py: prefill):
what a K / V operand is (KVPlan), which formats the kernels take, and the in-kernel loads
that gather a block of cache positions and decode their packed words with integer ops
(fp8lab/kernels/unpack.py's word_codes / decode_codes), masked by the row's length."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental.pallas import triton as plgpu

from fp8lab.formats import ElementFormat, get_format, get_quantized_format
from fp8lab.kernels import unpack

__all__ = ["KVPlan", "kv_plan", "serves", "split_serves", "load_kv", "load_kv_split",
           "kv_leaves", "cache_row_offsets", "kv_refs", "softmax_step", "query_row",
           "NO_LIMIT"]

# The q position of a non-causal query (and of a kernel's padding rows): no key is past it.
NO_LIMIT = 2**31 - 1

_KERNEL_SCALINGS = ("tensor", "block", "mx", "nvfp4", "none")
@dataclasses.dataclass(frozen=True)
class KVPlan:
  """What the kernel needs to know about K or V (static, hashable).

  kind: the registry scaling ("tensor", "block", "mx", "nvfp4", "none") or "float" for a
    plain float array; elem: the element format (None for "float"); dim: D; block_len: the
    elements per block scale (None without); float_dtype: a plain array's dtype name."""
  kind: str
  elem: ElementFormat | None
  dim: int
  block_len: int | None = None
  float_dtype: str | None = None

  @property
  def per_word(self) -> int:
    return 1 if self.elem is None else self.elem.per_word

  @property
  def has_scales(self) -> bool:
    return self.kind in ("block", "mx", "nvfp4")

  @property
  def has_tensor_scale(self) -> bool:
    return self.kind in ("tensor", "nvfp4")


def serves(fmt: str, block_shape) -> bool:
  """Whether the kernel takes a KV QuantizedArray of this format and block shape (1D blocks
  only: per-token-head float32 scales and any 1D blockwise block, MX 32, NVFP4 1x16)."""
  q = get_quantized_format(fmt)
  if q.scaling not in _KERNEL_SCALINGS:
    return False
  return block_shape is None or len(block_shape) == 1


def kv_plan(x, dim: int) -> KVPlan:
  """The plan of a KV operand (a QuantizedArray quantized along D, or a plain float array)."""
  fmt = getattr(x, "format", None)
  if not isinstance(fmt, str):           # a jax.Array's `format` is its layout
    return KVPlan("float", None, dim, float_dtype=jnp.dtype(x.dtype).name)
  q = get_quantized_format(fmt)
  block = x.block_shape[0] if x.block_shape else None
  return KVPlan(q.scaling, get_format(x.element_format), dim, block)


def load_kv(plan: KVPlan, refs, rows_off, valid, block_s: int):
  """The (block_s, D) float32 K or V values of the block's rows (row * Hkv + h in rows_off);
  rows past the length are masked in every load and zeroed."""
  words_ref, scales_ref, ts_ref = refs
  dim = plan.dim
  d = lax.iota(jnp.int32, dim)
  mask = jnp.broadcast_to(valid[:, None], (block_s, dim))
  if plan.kind == "float":
    x = plgpu.load(words_ref.at[(rows_off * dim)[:, None] + d[None, :]], mask=mask, other=0)
    x = x.astype(jnp.float32)
  else:
    pw = plan.per_word
    dw = dim // pw
    offs = (rows_off * dw)[:, None] + (d // pw)[None, :]
    words = plgpu.load(words_ref.at[offs], mask=mask, other=0)
    x = unpack.decode_codes(unpack.word_codes(words, plan.elem, (d % pw)[None, :]), plan.elem)
    if plan.kind == "tensor":
      x = x * ts_ref[0]
    elif plan.has_scales:
      nb = dim // plan.block_len
      if nb == 1:
        s = plgpu.load(scales_ref.at[rows_off], mask=valid, other=0)[:, None]
      else:
        soffs = (rows_off * nb)[:, None] + (d // plan.block_len)[None, :]
        s = plgpu.load(scales_ref.at[soffs], mask=mask, other=0)
      if plan.kind == "mx":
        s = unpack.e8m0_scale_to_f32(s)
      elif plan.kind == "nvfp4":                 # fl(s_e4m3 * S_dec), as the golden model
        s = unpack.e4m3_scale_to_f16(s).astype(jnp.float32) * ts_ref[0]
      x = x * s
  return jnp.where(mask, x, 0.0)


def split_serves(plan: KVPlan) -> bool:
  """Whether the "bf16x3" dots take this operand as bfloat16 values that are exact: codes
  of <= 4 significant bits times a power of two (MX) or times an E4M3 scale (NVFP4: <= 6
  bits), with the per-tensor / per-token-head float32 factor (and NVFP4's S_dec) applied to
  the products instead (one more rounding than the golden dequantize); bf16 storage as is.
  Not: f16 / float32 values, float32 scales on blocks shorter than D."""
  if plan.kind == "float":
    return plan.float_dtype == "bfloat16"
  if plan.kind == "none":
    return plan.elem.name == "bf16"
  if plan.kind == "block":
    return plan.block_len == plan.dim
  return True


def load_kv_split(plan: KVPlan, refs, rows_off, valid, block_s: int):
  """For the bf16x3 dots: (values (block_s, D) bfloat16, exact; per-position float32 factor
  (block_s,) or None; scalar float32 factor or None), value = bf16 * position factor *
  scalar factor. Rows past the length are masked and zeroed, their factors 0."""
  words_ref, scales_ref, ts_ref = refs
  dim = plan.dim
  d = lax.iota(jnp.int32, dim)
  mask = jnp.broadcast_to(valid[:, None], (block_s, dim))
  pos_f = scalar = None
  if plan.kind == "float":
    x = plgpu.load(words_ref.at[(rows_off * dim)[:, None] + d[None, :]], mask=mask, other=0)
    return jnp.where(mask, x, jnp.zeros_like(x)), None, None
  pw = plan.per_word
  offs = (rows_off * (dim // pw))[:, None] + (d // pw)[None, :]
  words = plgpu.load(words_ref.at[offs], mask=mask, other=0)
  x = unpack.decode_codes(unpack.word_codes(words, plan.elem, (d % pw)[None, :]), plan.elem)
  if plan.kind == "tensor":
    scalar = ts_ref[0]
  elif plan.kind == "block":                       # block = D: one scale per position
    pos_f = jnp.where(valid, plgpu.load(scales_ref.at[rows_off], mask=valid, other=0), 0.0)
  elif plan.kind in ("mx", "nvfp4"):
    nb = dim // plan.block_len
    soffs = (rows_off * nb)[:, None] + (d // plan.block_len)[None, :]
    c = plgpu.load(scales_ref.at[soffs], mask=mask, other=0)
    if plan.kind == "mx":
      x = x * unpack.e8m0_scale_to_f32(c)          # exact: a power of two
    else:
      x = x * unpack.e4m3_scale_to_f16(c).astype(jnp.float32)    # exact: <= 6 bits
      scalar = ts_ref[0]
  return jnp.where(mask, x, 0.0).astype(jnp.bfloat16), pos_f, scalar


def kv_leaves(x, plan: KVPlan) -> list[jax.Array]:
  if plan.kind == "float":
    return [x.reshape(-1)]
  out = [x.data.reshape(-1)]
  if plan.has_scales:
    out.append(x.scales.reshape(-1))
  if plan.has_tensor_scale:
    out.append(jnp.asarray(x.tensor_scale, jnp.float32).reshape(1))
  return out


def cache_row_offsets(pos, valid, b, h, *, kv_heads: int, capacity: int, paged: bool,
                      table_ref=None, pages: int = 1, page_size: int = 1,
                      pool_pages: int = 1):
  """The (row * Hkv + h) offsets of cache positions `pos` of batch row b (0 where not
  `valid`): contiguous row b * capacity + pos, or paged: pool page table[b, pos // page]
  (a masked gather of the table), slot pos % page."""
  if paged:
    page = plgpu.load(table_ref.at[b * pages + pos // page_size], mask=valid, other=0)
    # A traced table is not checked: an entry outside the pool reads its last page
    # instead of faulting (the op checks concrete tables).
    page = jnp.clip(page, 0, pool_pages - 1)
    row = page * page_size + pos % page_size
  else:
    row = b * capacity + pos
  return jnp.where(valid, row * kv_heads + h, 0)


def query_row(b, h, r, *, group: int, tq: int, kv_heads: int):
  """Both kernels' query rows: row r of (batch row b, KV head h) is token t = r // group,
  query head h * group + r % group of q's (B, Tq, Hq, D). Returns (its row index there,
  t, whether it is a real row: t < Tq; the others pad a program's rows)."""
  t = r // group
  return (b * tq + t) * (kv_heads * group) + h * group + r % group, t, t < tq


def kv_refs(it, plan: KVPlan):
  """The (words, scales, tensor scale) refs of one KV operand from the kernel's ref
  iterator, in kv_leaves' order (None for the absent ones)."""
  words = next(it)
  scales = next(it) if plan.has_scales else None
  ts = next(it) if plan.has_tensor_scale else None
  return words, scales, ts


def softmax_step(s, valid, pos, qpos, m, l):
  """One block of the online softmax, both kernels': the scores s (rows, block) masked to
  -inf where the position is past the length or (causal) past the row's qpos, then (new
  running max, the factor alpha for the old sums, p, new running sum). A row with no key
  yet keeps m = -inf and gets p = 0, without NaN (no -inf - -inf)."""
  keep = valid[None, :] & (pos[None, :] <= qpos[:, None])
  s = jnp.where(keep, s, -jnp.inf)
  m_new = jnp.maximum(m, jnp.max(s, axis=1))
  m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
  alpha = jnp.exp(m - m_safe)
  p = jnp.exp(s - m_safe[:, None])
  return m_new, alpha, p, alpha * l + jnp.sum(p, axis=1)
