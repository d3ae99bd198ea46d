"""gemv_packed sharded over n devices (fp8lab.sharding) against 1 device, in one run.

Per weight format, size (n_out x k) and batch, three rows timed by benchmarks/timing.py's
method (R distinct weight copies per compiled call, medians; `timing.measure`):
  single   fp8lab.gemv_packed on the first device;
  row      fp8lab.row_parallel_gemv: k split over the n devices, float32 partials, one
           all-reduce (psum) per GEMV, y replicated;
  column   fp8lab.column_parallel_gemv: n_out split, no communication, y split.
Reported: each row's time per GEMV, the ratios row / single and column / single (issue
23's target: row-parallel at 16384^2, batch 1, <= 0.6 on 2 GPUs) and the distance of each
sharded y from the single-device one (max |diff| / max |y|; row: the psum's reordering,
docs/sharding.md section 3).

On a CPU (or with --smoke) it is a smoke run: 256 x 512, the kernel in interpret mode,
over the CPU's devices (XLA_FLAGS=--xla_force_host_platform_device_count=2 for two).

Usage (2 GPUs; NCCL's settings as the machine has them):
  python benchmarks/bench_gemv_tp.py --formats=e4m3,nvfp4 --sizes=16384x16384 --batches=1 \
      --out=$OUT/gemv_tp.json
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from typing import Any

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402
import numpy as np  # noqa: E402

import fp8lab  # noqa: E402
from benchmarks import cli  # noqa: E402
from benchmarks import timing  # noqa: E402
from benchmarks.run_info import default_out, git_commit, machine_info, write_json  # noqa: E402
from fp8lab.formats import LAYOUTS  # noqa: E402

MODES = ("single", "row", "column")
_FORMATS = flags.DEFINE_list("formats", ["e4m3", "nvfp4"], "Layouts (fp8lab.formats.LAYOUTS).")
_SIZES = flags.DEFINE_list("sizes", None, "n_out x k sizes (default 16384x16384 on a GPU, "
                           "256x512 smoke).")
_BATCHES = flags.DEFINE_list("batches", ["1"], "x rows.")
_DEVICES = flags.DEFINE_integer("devices", None, "Devices to split over (default: all).")
_IMPL = flags.DEFINE_enum("implementation", "auto", ["auto", "pallas", "xla"],
                          "gemv_packed's implementation (auto: None; interpret on a CPU).")
_X_DTYPE = flags.DEFINE_enum("x_dtype", "bfloat16", ["float32", "bfloat16"], "x's dtype.")
_SMOKE = flags.DEFINE_bool("smoke", False, "The smoke size even on a GPU.")
_REPS = flags.DEFINE_integer("reps", None, "Timed calls (default 50, 3 smoke).")
_WARMUP = flags.DEFINE_integer("warmup", None, "Untimed calls first (default 3, 1 smoke).")
_CALL_GIB = flags.DEFINE_float("call_gib", 2.0, "Weight bytes one timed call should read "
                               "(sets R with --l2_mb).")
_L2_MB = flags.DEFINE_float("l2_mb", 60.0, "L2 size the copies must exceed 4x (MiB).")
_OUT = flags.DEFINE_string("out", None, "JSON results path (default benchmarks/results/"
                           "gemv_tp_<device>_<date>.json).")


def parse_size(s: str) -> tuple[int, int]:
  parts = s.lower().split("x")
  if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
    raise ValueError(f"size {s!r} is not n_out x k, e.g. 16384x16384")
  return int(parts[0]), int(parts[1])


def _rel(y, ref) -> float:
  y, ref = np.asarray(y, np.float32), np.asarray(ref, np.float32)
  scale = float(np.max(np.abs(ref)))
  return float(np.max(np.abs(y - ref))) / scale if scale > 0 else float(np.max(np.abs(y)))


def run_case(layout: str, n_out: int, k: int, batch: int, n: int, *, impl, interpret: bool,
             x_dtype, copies: int, reps: int, warmup: int) -> list[dict[str, Any]]:
  """The three rows of one case."""
  fmt, block = LAYOUTS[layout]
  devices = jax.devices()[:n]
  mesh = Mesh(np.array(devices), ("tp",))
  kw = dict(implementation=impl, interpret=interpret)
  make = jax.jit(lambda key: fp8lab.quantize(
      jax.random.normal(key, (n_out, k), jnp.float32) / np.sqrt(k), fmt, block_shape=block))
  with jax.default_device(devices[0]):
    ws = [make(jax.random.key(i)) for i in range(copies)]
    xs = [jax.random.normal(jax.random.key(1000 + i), (batch, k), jnp.float32).astype(x_dtype)
          for i in range(copies)]
  w_bytes = timing.nbytes(ws[0])
  ops = {"single": (lambda w, x: fp8lab.gemv_packed(w, x, **kw), ws),
         "row": (lambda w, x: fp8lab.row_parallel_gemv(w, x, mesh, "tp", **kw),
                 [fp8lab.shard_quantized(w, mesh, P(None, "tp")) for w in ws]),
         "column": (lambda w, x: fp8lab.column_parallel_gemv(w, x, mesh, "tp", **kw),
                    [fp8lab.shard_quantized(w, mesh, P("tp", None)) for w in ws])}
  rows, first = [], {}
  for mode in MODES:
    op, wl = ops[mode]
    row, outs = timing.measure(op, list(zip(wl, xs)), reps=reps, warmup=warmup)
    row.update({"layout": layout, "n_out": n_out, "k": k, "batch": batch, "mode": mode,
                "devices": 1 if mode == "single" else n, "copies": copies,
                "weight_bytes": w_bytes})
    if outs is not None:
      first[mode] = outs[0]
    rows.append(row)
  base = rows[0]
  for row in rows[1:]:
    if row.get("status") == "ok" and base.get("status") == "ok":
      row["over_single"] = row["time_us"] / base["time_us"]
      row["max_rel_diff_vs_single"] = _rel(first[row["mode"]], first["single"])
  return rows


def main(argv: list[str]) -> None:
  cli.no_arguments(argv)
  backend = jax.default_backend()
  smoke = _SMOKE.value or backend == "cpu"
  n = _DEVICES.value or jax.device_count()
  with cli.usage_errors():
    sizes = [parse_size(s) for s in (_SIZES.value or (["256x512"] if smoke else
                                                      ["16384x16384"]))]
    batches = [int(b) for b in _BATCHES.value]
    cli.check_choices("format", _FORMATS.value, LAYOUTS)
    if not 1 <= n <= jax.device_count():
      raise ValueError(f"--devices={n}: this process has {jax.device_count()} devices")
  impl = None if _IMPL.value == "auto" else _IMPL.value
  interpret = backend == "cpu" and impl != "xla"
  reps = _REPS.value or (3 if smoke else 50)
  warmup = _WARMUP.value if _WARMUP.value is not None else (1 if smoke else 3)
  out = _OUT.value or default_out("gemv_tp", smoke)
  x_dtype = jnp.dtype(_X_DTYPE.value)
  t0 = time.perf_counter()
  doc: dict[str, Any] = {
      "benchmark": "gemv_packed sharded (row / column parallel) on n devices vs 1 device",
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "machine": machine_info(), "git": git_commit(), "smoke": smoke, "devices": n,
      "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
      "timing_method": timing.METHOD,
      "settings": {"formats": _FORMATS.value, "sizes": [list(s) for s in sizes],
                   "batches": batches, "implementation": _IMPL.value, "interpret": interpret,
                   "x_dtype": _X_DTYPE.value, "reps": reps, "warmup": warmup},
      "rows": [],
  }
  print(f"{n} x {doc['machine']['device_kind']} ({backend}); writing {out}", flush=True)
  for layout in _FORMATS.value:
    for n_out, k in sizes:
      for batch in batches:
        fmt, block = LAYOUTS[layout]
        probe = jax.eval_shape(lambda a: fp8lab.quantize(a, fmt, block_shape=block),
                               jax.ShapeDtypeStruct((n_out, k), jnp.float32))
        per_copy = timing.nbytes(probe)
        copies = 1 if smoke else timing.choose_copies(
            per_copy, l2_bytes=int(_L2_MB.value * 2**20),
            call_bytes=int(_CALL_GIB.value * 2**30), max_bytes=16 * 2**30)
        rows = run_case(layout, n_out, k, batch, n, impl=impl, interpret=interpret,
                        x_dtype=x_dtype, copies=copies, reps=reps, warmup=warmup)
        doc["rows"] += rows
        for r in rows:
          print(f"[{time.perf_counter() - t0:7.1f}s] {layout:>8} {n_out}x{k} b={batch} "
                f"{r['mode']:>6} " + (f"{r['time_us']:10.2f} us" + (
                    f"  x{r['over_single']:.3f}  diff {r['max_rel_diff_vs_single']:.1e}"
                    if "over_single" in r else "") if r["status"] == "ok"
                    else f"ERROR {r['error'][:300]}"), flush=True)
        doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
        write_json(doc, out)
  print(f"\nresults: {out}")
  if any(r.get("status") != "ok" for r in doc["rows"]):
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
