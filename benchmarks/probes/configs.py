"""Probe: candidate GEMV launch configs per format, shape and batch, timed several ways.

For each (format, n_out x k, batch) and each config (the tuned default, gemv_config, first,
then --configs): `full` = host time per op of gemv_pallas (x preparation included),
`kernel` = host time of the kernel's launch alone on operands prepared outside the timed
function (gemv_launch), and on a GPU the profiler's device times: the fp8lab_gemv kernel and
every kernel of the op per GEMV (x preparation, the GEMV, the fixed-order sum of K splits).
Each config's output (copy 0) is compared bit for bit with the row's first config. Timing as
in benchmarks/timing.py: --copies distinct weight copies per compiled call, --warm_s of
warm-up per op, the median over --reps. Plus the copy bandwidth and XLA's
float8_e4m3fn-weight GEMV at each shape and batch for scale. The source of the kernel's
DEFAULT_CONFIGS; results in benchmarks/results/gemv_configs_*.

  python benchmarks/probes/configs.py --out=$OUT/probe_configs.json         # on the GPU
  python benchmarks/probes/configs.py --formats=mxfp4 --batches=16 \
      --configs=128:32:4:3,128:32:4:3:4,64:64:4:3:0:16:1   # fields: see --configs
  python benchmarks/probes/configs.py --sizes=64x256 --batches=2 --copies=2 --reps=2 \
      --formats=e4m3 --configs=16:16 --copy_gib=0.001     # CPU: interpret mode, seconds
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)   # run as a script: fp8lab and benchmarks from the working tree

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import cli  # noqa: E402
from benchmarks import kernel_inputs as KI  # noqa: E402
from fp8lab.kernels import gemv as G  # noqa: E402

_FORMATS = flags.DEFINE_list("formats", ["e4m3", "e5m2", "nvfp4", "mxfp4"],
                             f"Layouts, from {', '.join(KI.LAYOUT_NAMES)}.")
_SIZES = flags.DEFINE_list("sizes", ["16384x16384"], "Weight shapes n_out x k.")
_BATCHES = flags.DEFINE_list("batches", ["1", "16"], "Rows of x.")
_CONFIGS = flags.DEFINE_list(
    "configs", ["128:64:8:3", "64:32:4:4"],
    "Configs tried after the default: block_rows:block_k:num_warps:num_stages[:k_splits"
    "[:batch_block[:chain_dots 0/1[:fuse_x 0/1]]]] (GemvConfig's fields in order).")
_DEFAULT = flags.DEFINE_bool("default_config", True, "Try the tuned default config first.")
_FUSE_X_TOO = flags.DEFINE_bool("fuse_x_too", False,
                                "Also try each config with the other GemvConfig.fuse_x.")
_COPIES = flags.DEFINE_integer("copies", 32, "Distinct weight copies per compiled call.")
_REPS = flags.DEFINE_integer("reps", 15, "Timed calls per measurement.")
_WARM_S = flags.DEFINE_float("warm_s", 0.4, "Seconds of warm-up calls before each timing.")
_KERNEL_ONLY = flags.DEFINE_bool("kernel_only", True,
                                 "Also time the launch alone (gemv_launch's operands ready).")
_BASELINES = flags.DEFINE_bool("baselines", True,
                               "Also time the copy bandwidth and XLA's e4m3-weight GEMV.")
_COPY_GIB = flags.DEFINE_float("copy_gib", 1.0, "Array size of the copy measurement (GiB).")
_X_DTYPE = flags.DEFINE_enum("x_dtype", "float32", ["float32", "bfloat16", "float16"],
                             "dtype of x.")
_NATIVE_FP8 = flags.DEFINE_bool("native_fp8", None, "format_plan's native_fp8 (default: "
                                "what gemv_packed picks here).")
_ASM_E2M1 = flags.DEFINE_bool("asm_e2m1", None, "format_plan's asm_e2m1 (default: what "
                              "gemv_packed picks here).")
_INTERPRET = flags.DEFINE_bool("interpret", None, "Interpret mode (default: on a CPU).")
_BUDGET_S = flags.DEFINE_float("budget_s", 420.0, "Stop starting new rows after this long.")
_OUT = flags.DEFINE_string("out", KI.default_out("probe_configs.json"),
                           "JSON results path ('' for none; default $OUT/probe_configs.json).")


def _size(s: str) -> tuple[int, int]:
  n, k = s.lower().split("x")
  return int(n), int(k)


def main(argv):
  cli.no_arguments(argv)
  with cli.usage_errors():
    KI.check_layouts(_FORMATS.value)
    sizes = [_size(s) for s in _SIZES.value]
    batches = [int(b) for b in _BATCHES.value]
    extra = [KI.parse_config(c) for c in _CONFIGS.value]
  t_start = time.time()
  interpret = _INTERPRET.value if _INTERPRET.value is not None else jax.default_backend() == "cpu"
  decode = KI.default_decode(interpret)
  for key, flag in (("native_fp8", _NATIVE_FP8), ("asm_e2m1", _ASM_E2M1)):
    if flag.value is not None:
      decode[key] = flag.value
  x_dtype = jnp.dtype(_X_DTYPE.value)
  copies = _COPIES.value
  rows: list[dict] = []
  doc = dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
             commit=os.environ.get("FP8LAB_GIT_COMMIT"),
             date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), copies=copies,
             reps=_REPS.value, interpret=interpret, decode=decode, x_dtype=x_dtype.name,
             rows=rows)

  def save():
    if _OUT.value:
      os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
      with open(_OUT.value, "w") as fh:
        json.dump(doc, fh, indent=1)

  def timed(fn, args) -> float:
    return KI.time_host_us(fn, args, reps=_REPS.value, warm_s=_WARM_S.value).median_us

  print("device", doc["device"], "jax", jax.__version__, "copies", copies, "decode", decode,
        flush=True)
  if _BASELINES.value:
    n = max(1024, int(_COPY_GIB.value * 2**30) // 4)
    a = [jnp.full((n,), i + 1.0, jnp.float32) for i in range(2)]
    us = timed(lambda v: v * 1.5, [(v,) for v in a])
    doc["copy_GBps"] = 2 * n * 4 / us / 1e3
    print(f"copy {n * 4 / 2**30:.3f} GiB (r+w): {us:8.1f} us  {doc['copy_GBps']:6.0f} GB/s",
          flush=True)
    del a
  for n, k in sizes:
    for b in batches:
      if _BASELINES.value:
        key = jax.random.key(7)
        w8 = [jax.lax.bitcast_convert_type(
            jax.random.bits(jax.random.fold_in(key, i), (n, k), jnp.uint8) & 0xBF,
            jnp.float8_e4m3fn) for i in range(copies)]
        xs = [jax.random.normal(jax.random.fold_in(key, 100 + i), (b, k)).astype(x_dtype)
              for i in range(copies)]
        us = timed(lambda w, x: jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16).T,
                                        preferred_element_type=jnp.float32), list(zip(w8, xs)))
        rows.append(dict(format="xla_e4m3", n=n, k=k, batch=b, full_us=us))
        print(f"xla e4m3-weight {n}x{k} B{b}: {us:8.1f} us", flush=True)
        del w8, xs
      for name in _FORMATS.value:
        if time.time() - t_start > _BUDGET_S.value:
          print(f"budget spent: skipping {name} {n}x{k} B{b}", flush=True)
          continue
        plan = KI.plan_of(name, **decode)
        args = KI.probe_args(name, n, k, b, copies, x_dtype)
        nbytes = sum(a.size * a.dtype.itemsize for a in args[0][:2] if a is not None)
        cfgs = ([G.gemv_config(plan.format, b, n)] if _DEFAULT.value else []) + extra
        if _FUSE_X_TOO.value:
          cfgs = [v for c in cfgs for v in (c, dataclasses.replace(c, fuse_x=not c.fuse_x))]
        first = None
        for cfg in dict.fromkeys(cfgs):
          if time.time() - t_start > _BUDGET_S.value:
            break
          row = dict(format=name, n=n, k=k, batch=b, config=KI.config_tuple(cfg))
          try:
            f = lambda w, s, t, x, cfg=cfg: G.gemv_pallas(w, s, t, x, plan=plan, n_out=n, k=k,
                                                          config=cfg, interpret=interpret)
            row["full_us"] = timed(f, args)
            row["GBps"] = nbytes / row["full_us"] / 1e3
            if _KERNEL_ONLY.value:
              built = [G.gemv_launch(w, s, t, x, plan=plan, n_out=n, k=k, config=cfg,
                                     interpret=interpret) for w, s, t, x in args]
              row["kernel_us"] = timed(built[0][1], [ops for ops, _ in built])
              del built
            kern = op = None
            if jax.default_backend() == "gpu":
              kern, op, per, out = KI.gemv_device_us(plan, cfg, n, k, args)
              row.update(dev_kernel_us=kern, dev_op_us=op, kernels_us=per)
            else:
              out = jax.jit(f)(*args[0])
          except Exception as e:  # pylint: disable=broad-except
            # A config that does not compile (shared memory, a bad block_k) is a result.
            row["error"] = f"{type(e).__name__}: {e}"[:500]
            rows.append(row)
            print(f"{name:8s} {n}x{k} B{b:<2d} {row['config']} FAILED {row['error'][:200]}",
                  flush=True)
            save()
            continue
          bits = np.asarray(out, np.float32).view(np.uint32)
          first = bits if first is None else first
          row["same_bits_as_first"] = bool(np.array_equal(bits, first))
          rows.append(row)
          save()
          fmt = lambda v: "-" if v is None else f"{v:8.1f}"
          print(f"{name:8s} {n}x{k} B{b:<2d} {str(row['config']):30s} full {fmt(row['full_us'])}"
                f"  kernel {fmt(row.get('kernel_us'))}  dev kernel {fmt(kern)}  dev op "
                f"{fmt(op)}" + ("" if row["same_bits_as_first"] else "  (bits differ)"),
                flush=True)
        del args
  save()
  print(f"done in {time.time() - t_start:.0f} s" + (f"; {_OUT.value}" if _OUT.value else ""))


if __name__ == "__main__":
  app.run(main)
