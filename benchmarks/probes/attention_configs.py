"""Probe: launch configurations of the decode-attention kernel, per KV format and size.

For each size and format, times attention_pallas (the kernel and its split combine) over one
decode step (q (B, 1, Hq, D) bfloat16, a full cache of S positions) for each variant of
--variants, by the profiler's device time (benchmarks/timing.py's method), with the bytes
the op must move and GB/s, and each variant's largest |o - o_first| against the size's
first variant (a broken variant shows up there). Stage 2 (--top > 0): the --top fastest
variants of each format at the first size are run again at the other sizes, with the
first variant (the baseline). Results: a JSON in the usual form (run_info) and a table.

Variant: dots:decode:block_s:num_warps:num_stages[:split_mult] (AttentionConfig fields;
split_mult multiplies attention_config's n_splits, 0.5 halves it), or "default"
(attention_config's launch for the size and formats, as fp8lab.attention runs it); the
Mosaic GPU kernel: "mosaic" (mosaic_config's launch) or mosaic:block_s:stages[:split_mult
[:p_parts[:k_regs 0/1]]] (MosaicConfig fields), formats e4m3 / e5m2 (block) only.

  python benchmarks/probes/attention_configs.py --out=$OUT/attn_configs.json   # on the GPU
  python benchmarks/probes/attention_configs.py --sizes=2x256x8x2x64 --formats=e4m3_block \\
      --variants=f16:fast:32:4:2,bf16x3:integer:32:4:2 --top=0    # CPU, interpret, seconds
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
import time

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import fp8lab  # noqa: E402
from benchmarks import timing  # noqa: E402
from benchmarks.run_info import git_commit, machine_info, write_json  # noqa: E402
from benchmarks.timing import nbytes  # noqa: E402
from fp8lab.kernels import attention as AK  # noqa: E402

_SIZES = flags.DEFINE_list("sizes", ["8x32768x32x8x128", "8x131072x32x8x128",
                                     "1x131072x32x8x128", "8x8192x32x8x128"],
                           "BxSxHqxHkvxD; stage 2 runs the first size's best at the others.")
_FORMATS = flags.DEFINE_list("formats", ["e4m3_block", "nvfp4", "mxfp4", "bf16"],
                             "KV formats (bf16: plain bfloat16 arrays).")
_VARIANTS = flags.DEFINE_list("variants", [
    "bf16x3:integer:64:4:2", "f16:fast:64:4:2", "f16:integer:64:4:2", "bf16x3:fast:64:4:2",
    "f16:fast:128:4:2", "f16:fast:128:8:2", "f16:fast:64:8:2", "f16:fast:64:4:3",
    "f16:fast:128:8:3", "f16:fast:256:8:2", "f16:fast:32:4:2", "f16:fast:64:4:2:2",
    "f16:fast:64:4:2:0.5", "f16:fast:128:4:3"], "Variants (module docstring).")
_TOP = flags.DEFINE_integer("top", 3, "Best variants per format carried to the other sizes.")
_REPS = flags.DEFINE_integer("reps", 10, "Timed calls.")
_BUDGET = flags.DEFINE_float("time_budget_s", 0.0, "Stop starting variants after this long.")
_OUT = flags.DEFINE_string("out", None, "Results JSON.")
_LAUNCHES = flags.DEFINE_integer("ncu_launches", 0, "If > 0: no timing; launch each (format, "
                                 "variant) at the first size this many times, for Nsight "
                                 "Compute (ncu -k regex:fp8lab_attention --launch-skip ...).")


@dataclasses.dataclass(frozen=True)
class Variant:
  dots: str
  decode: str
  block_s: int
  num_warps: int
  num_stages: int
  split_mult: float = 1.0

  @classmethod
  def parse(cls, s: str) -> "Variant":
    if s == "default":                   # attention_config's launch as it is
      return cls("default", "", 0, 0, 0)
    if s == "mosaic":                    # mosaic_config's launch as it is
      return cls("mosaic", "default", 0, 0, 0)
    if s.startswith("mosaic:"):   # mosaic:block_s:stages[:split_mult[:p_parts[:k_regs]]]
      f = s.split(":")
      return cls("mosaic", (f[4] if len(f) > 4 else "2") + (":r" if len(f) > 5 and f[5] == "1"
                                                             else ""),
                 int(f[1]), 0, int(f[2]), float(f[3]) if len(f) > 3 else 1.0)
    f = s.split(":")
    return cls(f[0], f[1], int(f[2]), int(f[3]), int(f[4]), float(f[5]) if len(f) > 5 else 1.0)

  def config(self, bsz, hkv, cap, dim, interpret, plans=()):
    if self.dots == "mosaic":          # decode "default" or the p_parts
      base = AK.mosaic_config(bsz, hkv, cap, dim, interpret)
      if self.decode == "default":
        return base
      return AK.MosaicConfig(block_s=self.block_s, stages=self.num_stages,
                             n_splits=max(1, int(base.n_splits * self.split_mult)),
                             p_parts=int(self.decode.split(":")[0]),
                             k_regs=self.decode.endswith(":r"))
    base = AK.attention_config(bsz, hkv, cap, dim, interpret, plans)
    if self.dots == "default":
      return base
    splits = max(1, int(base.n_splits * self.split_mult))
    return AK.AttentionConfig(block_s=self.block_s, n_splits=splits, num_warps=self.num_warps,
                              num_stages=self.num_stages, dots=self.dots, decode=self.decode)

  def name(self) -> str:
    if self.dots == "default" or (self.dots == "mosaic" and self.decode == "default"):
      return self.dots
    if self.dots == "mosaic":
      return (f"mosaic:{self.block_s}:{self.num_stages}:{self.split_mult:g}:{self.decode}")
    tail = "" if self.split_mult == 1.0 else f":{self.split_mult:g}"
    return f"{self.dots}:{self.decode}:{self.block_s}:{self.num_warps}:{self.num_stages}{tail}"


def _inputs(shape, fmt, seed):
  bsz, cap, hq, hkv, dim = shape
  k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
  q = jax.random.normal(k1, (bsz, 1, hq, dim), jnp.bfloat16)
  k = jax.random.normal(k2, (bsz, cap, hkv, dim), jnp.bfloat16)
  v = jax.random.normal(k3, (bsz, cap, hkv, dim), jnp.bfloat16)
  if fmt != "bf16":
    block = (dim,) if fp8lab.get_quantized_format(fmt).scaling == "block" else None
    k = fp8lab.quantize(k, fmt, block_shape=block)
    v = fp8lab.quantize(v, fmt, block_shape=block)
  qpos = jnp.full((bsz, 1), np.iinfo(np.int32).max, jnp.int32)
  lengths = jnp.full((bsz,), cap, jnp.int32)
  return (q, qpos, lengths, k, v), hq // hkv


def _op(shape, kplan, vplan, cfg, interpret):
  bsz, cap, hq, hkv, dim = shape

  def op(q, qpos, lengths, k, v):
    if isinstance(cfg, AK.MosaicConfig):
      return AK.attention_mosaic(q, qpos, lengths, k, v, kplan=kplan, vplan=vplan,
                                 group=hq // hkv, capacity=cap, sm_scale=dim ** -0.5,
                                 config=cfg, interpret=interpret)[0]
    return AK.attention_pallas(q, qpos, lengths, None, k, v, kplan=kplan, vplan=vplan,
                               group=hq // hkv, capacity=cap, page_size=cap,
                               sm_scale=dim ** -0.5, config=cfg, interpret=interpret)[0]
  return op


def main(argv):
  del argv
  interpret = jax.default_backend() != "gpu"
  shapes = [tuple(int(x) for x in s.split("x")) for s in _SIZES.value]
  variants = [Variant.parse(s) for s in _VARIANTS.value]
  now = datetime.datetime.now(datetime.timezone.utc)
  out = _OUT.value or os.path.join(_REPO, "benchmarks", "results",
                                   f"attention_configs_{now:%Y%m%d_%H%M%S}.json")
  doc = {"probe": "attention_configs", "date": now.isoformat(timespec="seconds"),
         "machine": machine_info(), "git": git_commit(), "jax": jax.__version__,
         "settings": {"sizes": _SIZES.value, "formats": _FORMATS.value,
                      "variants": _VARIANTS.value, "top": _TOP.value, "reps": _REPS.value},
         "rows": []}
  t0 = time.perf_counter()

  def run(shape, fmt, vlist):
    args, _ = _inputs(shape, fmt, seed=hash((shape, fmt)) % 1000)
    kplan = AK.kv_plan(args[3], shape[4])
    vplan = AK.kv_plan(args[4], shape[4])
    moved = nbytes(args[3]) + nbytes(args[4]) + 2 * nbytes(args[0])
    first = None
    res = []
    for var in vlist:
      if _BUDGET.value and time.perf_counter() - t0 > _BUDGET.value:
        print(f"budget: skipping {fmt} {var.name()}", flush=True)
        continue
      cfg = var.config(shape[0], shape[3], shape[1], shape[4], interpret, (kplan, vplan))
      row = {"size": "x".join(map(str, shape)), "format": fmt, "variant": var.name(),
             "config": dataclasses.asdict(cfg), "bytes": moved}
      r, outs = timing.measure(_op(shape, kplan, vplan, cfg, interpret), [args],
                               reps=_REPS.value, warmup=2)
      row.update(r)
      if outs is not None:
        o = np.asarray(outs[0], np.float32)
        if first is None:
          first = o
        row["max_diff_vs_first"] = float(np.nanmax(np.abs(o - first)))
        row["finite"] = bool(np.isfinite(o).all())
      us = row.get("device_us_per_op") or row.get("time_us")
      if us:
        row["GBps"] = moved / (us * 1e-6) / 1e9
      doc["rows"].append(row)
      write_json(doc, out, default=str)
      print(f"[{time.perf_counter() - t0:6.1f}s] {row['size']:>18} {fmt:<11} {var.name():<24} "
            f"{row.get('status')} dev {row.get('device_us_per_op', float('nan')):9.1f} us "
            f"host {row.get('time_us', float('nan')):9.1f} us  "
            f"{row.get('GBps', float('nan')):7.0f} GB/s  diff {row.get('max_diff_vs_first')}"
            + (f"  {row.get('error', '')[:300]}" if row.get("status") != "ok" else ""),
            flush=True)
      res.append((us if row.get("status") == "ok" and row.get("finite") else float("inf"), var))
    return res

  if _LAUNCHES.value:
    for fmt in _FORMATS.value:
      args, _ = _inputs(shapes[0], fmt, seed=0)
      kplan, vplan = AK.kv_plan(args[3], shapes[0][4]), AK.kv_plan(args[4], shapes[0][4])
      for var in variants:
        cfg = var.config(shapes[0][0], shapes[0][3], shapes[0][1], shapes[0][4], interpret)
        f = jax.jit(_op(shapes[0], kplan, vplan, cfg, interpret))
        for _ in range(_LAUNCHES.value):
          jax.block_until_ready(f(*args))
        print(f"launched {fmt} {var.name()} x{_LAUNCHES.value}", flush=True)
    return
  best = {}
  for fmt in _FORMATS.value:
    res = run(shapes[0], fmt, variants)
    ranked = [v for t, v in sorted(res, key=lambda t: t[0]) if t != float("inf")]
    best[fmt] = ranked[:_TOP.value]
    if ranked:
      b = ranked[0]
      print(f"BEST {fmt} {b.name()} env={b.block_s}:{b.num_warps}:{b.num_stages}:"
            f"{b.split_mult:g}", flush=True)
  if _TOP.value > 0:
    for shape in shapes[1:]:
      for fmt in _FORMATS.value:
        vlist = [variants[0]] + [v for v in best[fmt] if v != variants[0]]
        run(shape, fmt, vlist)
  print(f"wrote {out}")


if __name__ == "__main__":
  app.run(main)
