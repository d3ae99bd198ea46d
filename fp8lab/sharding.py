"""Packed weights, KV caches and quantization under jax.sharding (docs/sharding.md).

A QuantizedArray is a pytree of `data` (uint32 words), `scales` and `tensor_scale` with its
logical shape as static metadata. Sharding one means sharding each leaf so that every
device holds whole words and whole scale blocks of its part of the logical array, with the
scales that go with its words:

  * `data` takes the logical array's PartitionSpec axis for axis (the packed axis holds
    ceil(length / per_word) words in place of `length` elements);
  * `scales` the same spec (1D blocks: the blocked axis holds block counts; 2D tiles: the
    last two axes hold tile counts);
  * `tensor_scale` (a scalar) is replicated: P().

`check_sharding` raises ValueError, with the numbers, for a spec under which a shard
boundary would fall inside a uint32 word, a scale block or tile, or a Hadamard block (or
that does not divide an axis evenly). `shard_quantized` is jax.device_put with those
shardings.

The ops, through jax.shard_map (each is a function of global arrays, for use under jax.jit;
the `*_shard` bodies are the same steps for use inside a caller's own shard_map):

  column_parallel_gemv  w's rows (n_out) split, x replicated: each device's gemv_packed
                        of its rows, no communication; the output split along n_out;
  row_parallel_gemv     w's columns (k) and x's last axis split: each device's float32
                        partial product (gemv_packed of float32 x), lax.psum of the
                        partials, then the cast to x's dtype;
  sharded_attention     q's heads and the KV cache's KV heads split (and optionally the
                        batch): each device's fp8lab.attention of its heads, no
                        communication;
  sharded_quantize_with_amax
                        x split along any axes (block boundaries respected): each device
                        quantizes its part with one scale for all, the amax is reduced
                        across devices (lax.pmax of its bit pattern) before the scale is
                        chosen (current scaling) or folded into a DelayedScaling.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from fp8lab.formats import get_quantized_format
from fp8lab.numerics import scales as sc
from fp8lab.numerics.hadamard import hadamard
from fp8lab.numerics.scales import DelayedScaling
from fp8lab.ops.attention import attention as _attention
from fp8lab.ops.gemv import gemv_packed
from fp8lab.ops.quantize import QuantizeResult, quantize_with_amax
from fp8lab.quantized import QuantizedArray

__all__ = ["check_sharding", "quantized_specs", "quantized_sharding", "shard_quantized",
           "local_view", "column_parallel_gemv", "row_parallel_gemv", "column_gemv_shard",
           "row_gemv_shard", "sharded_attention", "sharded_quantize_with_amax"]


# ---------------------------------------------------------------------------- specs

def _entries(spec, ndim: int, what: str) -> tuple:
  """spec's entries padded with None to ndim (each None, a mesh axis name or a tuple)."""
  if spec is None:
    spec = P()
  if not isinstance(spec, P):
    raise TypeError(f"{what}: spec must be a jax.sharding.PartitionSpec, got "
                    f"{type(spec).__name__}")
  entries = tuple(spec)
  if len(entries) > ndim:
    raise ValueError(f"{what}: spec {spec} has {len(entries)} entries for an array of "
                     f"{ndim} dimensions")
  return entries + (None,) * (ndim - len(entries))


def _names(entry) -> tuple:
  if entry is None:
    return ()
  return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _axis_sizes(mesh) -> dict:
  """Mesh axis name -> size (a Mesh, an AbstractMesh, or inside shard_map: None)."""
  return dict(zip(mesh.axis_names, mesh.axis_sizes)) if hasattr(mesh, "axis_sizes") else \
      dict(mesh.shape)


def _shards(entry, sizes: dict | None) -> int:
  """How many pieces `entry` cuts an axis into (sizes None: lax.axis_size, in a body)."""
  n = 1
  for name in _names(entry):
    if sizes is None:
      n *= lax.axis_size(name)
    else:
      if name not in sizes:
        raise ValueError(f"mesh has no axis {name!r} (its axes: {tuple(sizes)})")
      n *= sizes[name]
  return n


def _block_along(x: QuantizedArray) -> dict[int, int]:
  """Logical axis -> the length of x's scale blocks (or tiles) along it."""
  bs = x.block_shape
  if bs is None:
    return {}
  if len(bs) == 2:
    return {x.ndim - 2: bs[0], x.ndim - 1: bs[1]}
  return {x.axis: bs[0]}


def _check(x: QuantizedArray, entries: tuple, sizes: dict | None, what: str) -> None:
  qf = get_quantized_format(x.format)
  blocks = _block_along(x)
  for i, entry in enumerate(entries):
    n = _shards(entry, sizes)
    if n == 1:
      continue
    length = x.shape[i]
    where = f"{what}: axis {i} of {x.format} {x.shape} split {n} ways ({entry!r})"
    if length % n:
      raise ValueError(f"{where}: length {length} is not a multiple of {n}")
    part = length // n
    if i == x.axis and part % qf.per_word:
      raise ValueError(f"{where}: each shard would hold {part} elements, not a multiple of "
                       f"the {qf.per_word} {qf.element.name} codes per uint32 word: a shard "
                       f"boundary would fall inside a packed word")
    if i in blocks and part % blocks[i]:
      kind = "tile" if len(x.block_shape) == 2 else "block"
      raise ValueError(f"{where}: each shard would hold {part} elements, not a multiple of "
                       f"the scale {kind} {x.block_shape} ({blocks[i]} along this axis): a "
                       f"shard boundary would fall inside a scale {kind}")
    if i == x.axis and x.hadamard is not None and part % x.hadamard.block:
      raise ValueError(f"{where}: each shard would hold {part} elements, not a multiple of "
                       f"the Hadamard block {x.hadamard.block}: a shard boundary would fall "
                       f"inside a rotated block")


def check_sharding(x: QuantizedArray, mesh, spec) -> None:
  """Raises ValueError if `spec` (a PartitionSpec of x's logical shape over `mesh`) would
  cut a packed word, a scale block / tile or a Hadamard block, or split an axis unevenly.

  The rules, for each logical axis i split into n shards (n = the product of the sizes of
  the mesh axes named at position i): shape[i] % n == 0, and the shard length
  shape[i] / n is a multiple of the codes per word (packed axis), of the block (or tile)
  length along i (block-scaled formats) and of the Hadamard block (packed axis)."""
  if not isinstance(x, QuantizedArray):
    raise TypeError(f"check_sharding needs a QuantizedArray, got {type(x).__name__}")
  _check(x, _entries(spec, x.ndim, "check_sharding"), _axis_sizes(mesh), "check_sharding")


def quantized_specs(x: QuantizedArray, spec) -> QuantizedArray:
  """The PartitionSpecs of x's leaves for a spec of its logical shape, as a QuantizedArray
  with PartitionSpec leaves (a pytree prefix of x: shard_map's in_specs / out_specs): data
  and scales take `spec`, tensor_scale P(). Checks nothing (check_sharding does)."""
  entries = _entries(spec, x.ndim, "quantized_specs")
  full = P(*entries)
  return QuantizedArray(full, None if x.scales is None else full,
                        None if x.tensor_scale is None else P(),
                        **_meta_kwargs(x))


def _meta_kwargs(x: QuantizedArray, shape=None) -> dict[str, Any]:
  return dict(format=x.format, element_format=x.element_format,
              shape=x.shape if shape is None else shape, axis=x.axis,
              block_shape=x.block_shape, scale_mode=x.scale_mode, hadamard=x.hadamard)


def quantized_sharding(x: QuantizedArray, mesh: Mesh, spec) -> QuantizedArray:
  """NamedShardings of x's leaves (a QuantizedArray with NamedSharding leaves, for
  jax.device_put or jit's in_shardings / out_shardings), after check_sharding."""
  check_sharding(x, mesh, spec)
  specs = quantized_specs(x, spec)
  return jax.tree.map(lambda s: NamedSharding(mesh, s), specs,
                      is_leaf=lambda s: isinstance(s, P))


def shard_quantized(x: QuantizedArray, mesh, spec=None) -> QuantizedArray:
  """jax.device_put of x with its leaves sharded consistently with `spec` over `mesh`
  (scales with their words, tensor scale replicated); `mesh` may also be a NamedSharding
  (its mesh and spec; `spec` None). ValueError for a spec that cuts a word or a scale block
  (check_sharding)."""
  if isinstance(mesh, NamedSharding):
    if spec is not None:
      raise ValueError("shard_quantized: give a NamedSharding or a mesh and a spec, not both")
    mesh, spec = mesh.mesh, mesh.spec
  if not isinstance(x, QuantizedArray):
    raise TypeError(f"shard_quantized needs a QuantizedArray, got {type(x).__name__}")
  return jax.device_put(x, quantized_sharding(x, mesh, spec))


def local_view(x: QuantizedArray, spec) -> QuantizedArray:
  """Inside a shard_map body: the per-device QuantizedArray (the leaves are the device's
  shards already; the static shape becomes the shard's logical shape). `spec` is the
  logical spec x was mapped with; the body's mesh axis sizes give the shard lengths."""
  entries = _entries(spec, x.ndim, "local_view")
  _check(x, entries, None, "local_view")
  shape = tuple(length // _shards(e, None) for length, e in zip(x.shape, entries))
  return QuantizedArray(x.data, x.scales, x.tensor_scale, **_meta_kwargs(x, shape))


# ---------------------------------------------------------------------------- gemv

def _check_weight(w, what: str) -> None:
  if not isinstance(w, QuantizedArray):
    raise TypeError(f"{what} needs a fp8lab.QuantizedArray as w, got {type(w).__name__}")
  if w.ndim != 2 or w.axis != 1:
    raise ValueError(f"{what} needs a 2D weight (n_out, k) quantized along k, got shape "
                     f"{w.shape}, axis {w.axis}")


def column_gemv_shard(w_local: QuantizedArray, x, axis, **gemv_kwargs):
  """Column-parallel GEMV inside a shard_map body: w_local holds this device's rows
  (mapped with P(axis, None); its static shape still global), x all of k. Returns this
  device's (..., n_out / n) outputs; no communication."""
  return gemv_packed(local_view(w_local, P(axis, None)), x, **gemv_kwargs)


def row_gemv_shard(w_local: QuantizedArray, x_local, axis, **gemv_kwargs):
  """Row-parallel GEMV inside a shard_map body: w_local holds this device's k columns
  (mapped with P(None, axis)), x_local the same part of x's last axis. The float32 partial
  products (gemv_packed of float32 x, exact for 16-bit x) are lax.psum'ed over `axis`,
  then cast to x's dtype: every device gets the whole (..., n_out)."""
  part = gemv_packed(local_view(w_local, P(None, axis)), x_local.astype(jnp.float32),
                     **gemv_kwargs)
  return lax.psum(part, axis).astype(x_local.dtype)


def column_parallel_gemv(w: QuantizedArray, x, mesh: Mesh, axis="tp", **gemv_kwargs):
  """y = x @ dequantize(w).T with w's rows (n_out) split over mesh axis `axis`, x
  replicated: each device runs gemv_packed on its rows (no communication). Returns y
  (..., n_out), sharded along its last axis. gemv_kwargs go to gemv_packed
  (implementation, interpret, fp8_decode). Under jax.jit, inputs placed otherwise are
  resharded by shard_map (shard_quantized(w, mesh, P(axis, None)) avoids it).

  Each output row is the same float32 sum as in gemv_packed over all of w wherever the
  shard's launch makes the same K steps (the reference path, and the kernel unless its
  split of K depends on n_out: docs/sharding.md)."""
  _check_weight(w, "column_parallel_gemv")
  check_sharding(w, mesh, P(axis, None))
  x = jnp.asarray(x)
  lead = (None,) * (x.ndim - 1)
  body = lambda w_l, x_l: column_gemv_shard(w_l, x_l, axis, **gemv_kwargs)
  return jax.shard_map(body, mesh=mesh,
                       in_specs=(quantized_specs(w, P(axis, None)), P()),
                       out_specs=P(*lead, axis), check_vma=False)(w, x)


def row_parallel_gemv(w: QuantizedArray, x, mesh: Mesh, axis="tp", **gemv_kwargs):
  """y = x @ dequantize(w).T with w's columns (k) and x's last axis split over mesh axis
  `axis`: each device's float32 partial product over its k / n columns, lax.psum over the
  devices, then the cast to x's dtype. Returns y (..., n_out), replicated.

  The psum adds the n float32 partials in the collective's order: the result is a float32
  sum in another order than gemv_packed's over all of k (bound: docs/sharding.md; equal
  bit for bit where every partial sum is exact)."""
  _check_weight(w, "row_parallel_gemv")
  check_sharding(w, mesh, P(None, axis))
  x = jnp.asarray(x)
  lead = (None,) * (x.ndim - 1)
  body = lambda w_l, x_l: row_gemv_shard(w_l, x_l, axis, **gemv_kwargs)
  return jax.shard_map(body, mesh=mesh,
                       in_specs=(quantized_specs(w, P(None, axis)), P(*lead, axis)),
                       out_specs=P(), check_vma=False)(w, x)


# ---------------------------------------------------------------------------- attention

def _kv_spec(x, head_axis, batch_axis, paged: bool, what: str):
  """(logical spec, in_spec pytree) of a K or V operand split by KV heads."""
  spec = P(None if paged else batch_axis, None, head_axis, None)
  if isinstance(x, QuantizedArray):
    return spec, quantized_specs(x, spec)
  if not (hasattr(x, "shape") and len(x.shape) == 4):
    raise TypeError(f"sharded_attention: {what} must be a QuantizedArray or a 4D array")
  return spec, spec


def sharded_attention(q, k, v, mesh: Mesh, *, head_axis="tp", batch_axis=None,
                      kv_lengths=None, block_tables=None, q_positions=None,
                      return_lse: bool = False, **attention_kwargs):
  """fp8lab.attention with q's heads and the KV cache's KV heads split over mesh axis
  `head_axis` (and the batch over `batch_axis`, unpaged only): each device attends its
  Hq / n query heads to its Hkv / n KV heads, no communication.

  q (B, Tq, Hq, D) is split on axis 2 (P(batch_axis, None, head_axis, None)), k / v
  (B, S, Hkv, D) the same (page pools (num_pages, page_size, Hkv, D): P(None, None,
  head_axis, None)); the scales go with their words (quantized_specs), a per-tensor scale
  is replicated. Query head i reads KV head i // (Hq / Hkv): contiguous head blocks keep
  each device's query heads with their KV heads. kv_lengths / q_positions are split by
  batch (or replicated), block_tables replicated. Returns o (and lse) split like q.
  attention_kwargs go to fp8lab.attention (causal, sm_scale, compute, implementation,
  interpret)."""
  q = jnp.asarray(q)
  if q.ndim != 4 or not hasattr(k, "shape") or len(k.shape) != 4:
    raise ValueError("sharded_attention: q must be (B, Tq, Hq, D) and k, v 4D")
  paged = block_tables is not None
  if paged and batch_axis is not None:
    raise ValueError("sharded_attention: a paged cache (block_tables) is split by heads "
                     "only; batch_axis must be None")
  sizes = _axis_sizes(mesh)
  n_heads = _shards(head_axis, sizes)
  hq, hkv = q.shape[2], k.shape[2]
  if hkv % n_heads or hq % n_heads:
    raise ValueError(f"sharded_attention: Hq={hq} query heads and Hkv={hkv} KV heads must "
                     f"both be multiples of the {n_heads} devices of mesh axis "
                     f"{head_axis!r}")
  if hq % hkv:
    raise ValueError(f"sharded_attention: Hq={hq} is not a multiple of Hkv={hkv}")
  k_spec, k_in = _kv_spec(k, head_axis, batch_axis, paged, "k")
  v_spec, v_in = _kv_spec(v, head_axis, batch_axis, paged, "v")
  for x, spec in ((k, k_spec), (v, v_spec)):
    if isinstance(x, QuantizedArray):
      check_sharding(x, mesh, spec)
  bsz = q.shape[0]
  if batch_axis is not None and bsz % _shards(batch_axis, sizes):
    raise ValueError(f"sharded_attention: batch {bsz} is not a multiple of the "
                     f"{_shards(batch_axis, sizes)} devices of mesh axis {batch_axis!r}")
  q_spec = P(batch_axis, None, head_axis, None)
  args = {"q": q, "k": k, "v": v}
  specs = {"q": q_spec, "k": k_in, "v": v_in}
  if kv_lengths is not None:
    args["kv_lengths"], specs["kv_lengths"] = kv_lengths, P(batch_axis)
  if q_positions is not None:
    args["q_positions"], specs["q_positions"] = q_positions, P(batch_axis, None)
  if paged:
    args["block_tables"], specs["block_tables"] = block_tables, P()

  def body(a):
    kl, vl = a["k"], a["v"]
    if isinstance(kl, QuantizedArray):
      kl = local_view(kl, k_spec)
    if isinstance(vl, QuantizedArray):
      vl = local_view(vl, v_spec)
    return _attention(a["q"], kl, vl, kv_lengths=a.get("kv_lengths"),
                      block_tables=a.get("block_tables"), q_positions=a.get("q_positions"),
                      return_lse=return_lse, **attention_kwargs)

  out_specs = (q_spec, P(batch_axis, None, head_axis)) if return_lse else q_spec
  return jax.shard_map(body, mesh=mesh, in_specs=(specs,), out_specs=out_specs,
                       check_vma=False)(args)


# ---------------------------------------------------------------------------- quantize

def _amax_pmax(amax, axes):
  """The largest of the devices' amaxes: lax.pmax over their bit patterns (non-negative
  float32 values order like their bits), exact whatever the backend does with floats."""
  if not axes:
    return amax
  bits = lax.pmax(sc.bits_of(amax), axes)
  return sc.float_of(bits)


def sharded_quantize_with_amax(x, fmt: str, mesh: Mesh, spec, *, scaling=None,
                               implementation: str | None = None, interpret: bool = False,
                               **quantize_kwargs) -> QuantizeResult:
  """fp8lab.quantize_with_amax of x split by `spec` (a PartitionSpec of x over `mesh`):
  the same QuantizeResult, byte for byte, as the unsharded call, with q sharded like x
  (quantized_specs) and the amax, tensor scale and state replicated.

  Each device quantizes its part with one per-tensor scale for all: scaling given (a
  float32 scalar or a DelayedScaling, whose scale is used as is) or, for current scaling of
  "e4m3" / "e5m2" / "nvfp4", the scale of the global amax. The amax of the whole tensor is
  the lax.pmax (on bit patterns) of the devices' amaxes, and it is that amax which a
  DelayedScaling folds into its history (DelayedScaling.update): every device ends with the
  same state. Block scales are per block, so a spec must keep blocks whole
  (check_sharding's rules on x's QuantizedArray layout). transpose=True is not taken.

  quantize_kwargs: fp8lab.quantize's other arguments (axis, scale_mode, block_shape,
  rounding="nearest", hadamard, margin, sr_bits). Stochastic rounding is not taken: its
  random bits are indexed by the position in the whole tensor."""
  qf = get_quantized_format(fmt)
  x = jnp.asarray(x)
  if quantize_kwargs.pop("transpose", False):
    raise ValueError("sharded_quantize_with_amax: transpose=True is not supported")
  if quantize_kwargs.get("rounding", "nearest") != "nearest":
    raise ValueError("sharded_quantize_with_amax: stochastic rounding draws bits by the "
                     "position in the whole tensor; only rounding='nearest' is sharded")
  entries = _entries(spec, x.ndim, "sharded_quantize_with_amax")
  state = scaling if isinstance(scaling, DelayedScaling) else None
  if state is not None and state.format != qf.name:
    raise ValueError(f"a DelayedScaling of format {state.format!r} cannot scale {qf.name!r}")
  per_tensor = qf.scaling in ("tensor", "nvfp4")
  if scaling is not None and not per_tensor:
    raise ValueError(f"{qf.name!r} has no per-tensor scale: scaling must be None")
  margin = quantize_kwargs.pop("margin", 0)
  if margin and (scaling is not None or qf.scaling != "tensor"):
    raise ValueError("margin is only for current scaling of 'e4m3'/'e5m2' (a DelayedScaling "
                     "has its own)")
  # The layout of the result, on shapes only (also runs quantize's own argument checks).
  meta = jax.eval_shape(lambda a: quantize_with_amax(
      a, qf.name, scaling=jnp.float32(1) if per_tensor else None,
      implementation="reference", **quantize_kwargs).q, x)
  x_spec = P(*entries)
  check_sharding(meta, mesh, x_spec)
  mesh_axes = tuple(n for e in entries for n in _names(e))
  given = None
  if state is not None:
    given = state.scale
  elif scaling is not None:
    given = jnp.asarray(scaling, jnp.float32).reshape(())
  rot = meta.hadamard

  def body(x_l, s, st):
    amax = _amax_pmax(sc.tensor_amax(x_l), mesh_axes)
    scale = s
    if per_tensor and scale is None:       # current scaling: the global (rotated) amax's
      ref = amax
      if rot is not None:
        xr = hadamard(x_l.astype(jnp.float32), rot.block, signs=rot.sign_arg(),
                      axis=meta.axis)
        ref = _amax_pmax(sc.tensor_amax(xr), mesh_axes)
      if qf.scaling == "tensor":
        scale = sc.current_scale(ref, qf.name, margin)
      else:
        scale = sc.float_of(sc.nvfp4_tensor_scales(sc.bits_of(ref))[0])
    res = quantize_with_amax(x_l, qf.name, scaling=scale, implementation=implementation,
                             interpret=interpret, **quantize_kwargs)
    q = QuantizedArray(res.q.data, res.q.scales, res.q.tensor_scale,
                       **_meta_kwargs(res.q, meta.shape))
    return q, amax, None if st is None else st.update(amax)

  state_spec = None if state is None else jax.tree.map(lambda _: P(), state)
  q, amax, new_state = jax.shard_map(
      body, mesh=mesh,
      in_specs=(x_spec, None if given is None else P(), state_spec),
      out_specs=(quantized_specs(meta, x_spec), P(), state_spec),
      check_vma=False)(x, given, state)
  return QuantizeResult(q, None, amax, new_state)
