"""Raw-array GEMV inputs and measurements shared by gpu_tune.py and the probes.

The tuning sweep and the probes call the kernel's public entry points (gemv_pallas /
gemv_launch with a config=) on raw arrays (packed words, scale codes, tensor scale) rather
than on QuantizedArray, so that any launch config can be tried. Every format fact comes from
the registry (fp8lab.formats: QUANTIZED, LAYOUTS); no flags are defined here, so any script
may import it.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import timing
import fp8lab
from fp8lab.formats import LAYOUTS, QUANTIZED, QuantizedFormat
from fp8lab.kernels import gemv as G

__all__ = ["LAYOUT_NAMES", "layout", "plan_of", "default_decode", "random_weight",
           "probe_args", "dequantize64", "gemv_device_us", "parse_config", "config_tuple",
           "default_out", "check_layouts", "time_host_us"]

# The LAYOUTS the kernel serves (not blockwise FP8, which gemv_packed runs with XLA only).
LAYOUT_NAMES = tuple(n for n, (q, _) in LAYOUTS.items() if G.serves_format(q))


def layout(name: str) -> tuple[QuantizedFormat, tuple[int, ...] | None]:
  """A LAYOUT_NAMES name -> (its quantized format, its block shape: None without block
  scales)."""
  if name not in LAYOUT_NAMES:
    raise ValueError(f"unknown layout {name!r}; valid: {', '.join(LAYOUT_NAMES)}")
  qname, block_shape = LAYOUTS[name]
  q = QUANTIZED[qname]
  return q, block_shape or q.block_shape


def check_layouts(names) -> list[str]:
  """The names as a list; ValueError for one that is not a LAYOUTS name."""
  for n in names:
    layout(n)
  return list(names)


def default_decode(interpret: bool) -> dict[str, bool]:
  """The decode flags gemv_packed would pick here (format_plan's native_fp8 / asm_e2m1)."""
  return dict(native_fp8=G.native_fp8_requested(interpret),
              asm_e2m1=G.asm_e2m1_default(interpret))


def plan_of(name: str, **decode: bool) -> G.FormatPlan:
  """format_plan of a LAYOUTS name; `decode`: format_plan's native_fp8 / asm_e2m1."""
  q, block_shape = layout(name)
  return G.format_plan(q.name, q.element.name, block_shape, q.tensor_scale, **decode)


def random_weight(key, name: str, n: int, k: int):
  """Random packed words (finite codes: no NaN / Inf), scale codes and tensor scale."""
  q, block_shape = layout(name)
  elem = q.element
  kw = -(-k // elem.per_word)
  k1, k2 = jax.random.split(key)
  words = jax.random.bits(k1, (n, kw), jnp.uint32)
  if elem.bits == 8:
    words = words & jnp.uint32(0xBFBFBFBF)     # exponent MSB clear: no NaN / Inf codes
  elif elem.bits == 16:
    words = words & jnp.uint32(0xBFFFBFFF)     # likewise for f16 / bf16 halves
  # Zero the codes past k in the last word, as pack() does.
  pad = kw * elem.per_word - k
  if pad:
    keep = jnp.uint32((1 << (32 - pad * elem.bits)) - 1)
    words = words.at[:, -1].set(words[:, -1] & keep)
  scales = None
  if q.scale_format is not None:
    rows = -(-n // block_shape[0]) if len(block_shape) == 2 else n
    shape = (rows, -(-k // block_shape[-1]))
    # E8M0 2^-7..2^7; E4M3 codes 0x30..0x4F (0.5..3.75): finite, away from subnormals.
    lo, hi = (120, 135) if q.scale_format.name == "e8m0" else (0x30, 0x50)
    scales = jax.random.randint(k2, shape, lo, hi).astype(jnp.uint8)
  ts = jnp.float32(0.375) if q.tensor_scale else None
  return words, scales, ts


def probe_args(name: str, n: int, k: int, batch: int, copies: int,
               x_dtype=jnp.float32) -> list[tuple]:
  """`copies` distinct (words, scales, tensor scale, x) tuples: random weights
  (random_weight, keys 0..) and standard-normal x of `batch` rows (keys 100..)."""
  return [random_weight(jax.random.key(i), name, n, k)
          + (jax.random.normal(jax.random.key(100 + i), (batch, k)).astype(x_dtype),)
          for i in range(copies)]


def dequantize64(name: str, words, scales, ts, n: int, k: int) -> np.ndarray:
  """Float64 dequantized weights from the GOLDEN decode (fp8lab.unpack / fp8lab.decode)."""
  q, block_shape = layout(name)
  elem = q.element
  codes = np.asarray(fp8lab.unpack(jnp.asarray(words), elem.name, k))
  if elem.bits == 16:
    vals = codes.view(elem.dtype).astype(np.float64)
  else:
    vals = np.asarray(fp8lab.decode(jnp.asarray(codes), elem.name, jnp.float32), np.float64)
  if q.scale_format is None:
    return vals * float(ts) if ts is not None else vals
  sv = np.asarray(fp8lab.decode(jnp.asarray(np.asarray(scales)), q.scale_format.name,
                                jnp.float32))
  if q.tensor_scale:
    sv = sv * np.float32(ts)                  # fl(s * S_dec) in float32, as the golden model
  s = sv.astype(np.float64)
  if len(block_shape) == 2:
    s = np.repeat(s, block_shape[0], axis=0)[:n]
  return vals * np.repeat(s, block_shape[-1], axis=1)[:, :k]


def gemv_device_us(plan: G.FormatPlan, cfg: G.GemvConfig | None, n: int, k: int, args, *,
                   warmup: int = 10, runs: int = 3, interpret: bool = False):
  """gemv_pallas over R argument tuples (words, scales, tensor scale, x) in one compiled
  call, `warmup` calls, then `runs` calls under JAX's profiler.

  Returns (median device time of the fp8lab_gemv kernel in us, device time of all the call's
  kernels per GEMV in us, {kernel name without the unrolled copies' ".N" suffix: device us
  per GEMV}, copy 0's output as numpy); the times are None without a GPU trace."""
  f = lambda w, s, t, x: G.gemv_pallas(w, s, t, x, plan=plan, n_out=n, k=k, config=cfg,
                                       interpret=interpret)
  comp = timing.compile_unrolled(f, args)
  out = comp(args)
  for _ in range(warmup):
    out = comp(args)
  jax.block_until_ready(out)
  first = np.asarray(out[0])
  dev = timing.device_kernel_times(comp, args, runs=runs) if jax.default_backend() == "gpu" \
      else None
  if not dev:
    return None, None, {}, first
  kern = [d for name, ds in dev.items() if "fp8lab_gemv" in name for d in ds]
  op = sum(sum(ds) for ds in dev.values()) / (runs * len(args))
  per: dict[str, float] = {}
  for name, ds in dev.items():
    base = re.sub(r"(\.\d+)+$", "", name)
    per[base] = per.get(base, 0.0) + sum(ds) / (runs * len(args))
  return (float(np.median(kern)) if kern else None), float(op), per, first


_CONFIG_FIELDS = ("block_rows", "block_k", "num_warps", "num_stages", "k_splits",
                  "batch_block", "chain_dots", "fuse_x")
_BOOL_FIELDS = ("chain_dots", "fuse_x")


def parse_config(spec: str) -> G.GemvConfig:
  """'128,32,4,3[,k_splits[,batch_block[,chain_dots 0/1[,fuse_x 0/1]]]]' (GemvConfig's
  fields in order; ':' separates too) -> GemvConfig."""
  parts = [p for p in re.split(r"[,:]", spec.strip()) if p]
  if not 2 <= len(parts) <= len(_CONFIG_FIELDS):
    raise ValueError(f"config {spec!r}: give 2 to {len(_CONFIG_FIELDS)} of "
                     f"{', '.join(_CONFIG_FIELDS)}")
  vals: list[Any] = [bool(int(p)) if f in _BOOL_FIELDS else int(p)
                     for f, p in zip(_CONFIG_FIELDS, parts)]
  return G.GemvConfig(*vals)


def config_tuple(cfg: G.GemvConfig) -> tuple:
  """GemvConfig -> its fields as a tuple (the results files' `config` column)."""
  return tuple(getattr(cfg, f) for f in _CONFIG_FIELDS)


def default_out(filename: str) -> str:
  """$OUT/filename when the device tool's output folder is set, else '' (no file)."""
  out = os.environ.get("OUT")
  return os.path.join(out, filename) if out else ""


def time_host_us(fn, arg_copies, *, reps: int, warm_s: float = 0.2) -> timing.Timing:
  """Host time per op of `fn` over R argument tuples in one compiled call (timing.py), after
  running the call for `warm_s` seconds: short bursts measured every op 1.3-1.9x slow on the
  H200 (clocks not yet up; gpu_tune's first run), so each timing starts from a busy GPU."""
  compiled = timing.compile_unrolled(fn, arg_copies)
  t0 = time.time()
  jax.block_until_ready(compiled(arg_copies))
  while time.time() - t0 < warm_s:
    jax.block_until_ready(compiled(arg_copies))
  return timing.time_compiled(compiled, arg_copies, reps=reps, warmup=2,
                              copies=len(arg_copies))
