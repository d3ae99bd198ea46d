"""The pallas-vs-reference GEMV benchmark: fp8lab.gemv_packed against XLA's GEMVs.

Times, side by side in one run, y = x @ dequantize(w).T for weights of shape (n_out, k):
  pallas     fp8lab.gemv_packed(w, x, implementation="pallas"): the packed-weight Pallas kernel
             (interpret mode on a CPU, where it is a correctness smoke run, not a timing);
  pallas_int the same kernel with the integer decode forced (fp8_decode="integer"), for the
             e4m3 / e5m2-coded formats, which the default decodes natively on sm_89+ GPUs
             (not in the default --ops);
  reference  fp8lab.gemv_packed(w, x, implementation="reference"): golden dequantize + jnp.dot;
  xla_packed fp8lab.gemv_packed(w, x, implementation="xla"): jnp over the same packed words,
             bitcast to XLA's float8 / float4 dtypes (skipped from the default --ops where
             this fp8lab has no "xla" implementation);
  xla_parts  fp8lab.gemv_packed(w, x, implementation="xla_parts"): the same words dequantized
             exactly to bfloat16 in XLA's fusion, x as exact bfloat16 parts, one bfloat16
             dot (for the formats whose values are bfloat16 numbers; not in the default
             --ops);
  xla_f32    XLA's GEMV over float32 weights (float32 x);
  xla_bf16   XLA's GEMV over bfloat16 weights (bfloat16 x);
  xla_e4m3   XLA's GEMV over float8_e4m3fn weights upcast to bfloat16 inside the fusion,
             jnp.dot(w_f8.astype(bf16), x) with bfloat16 x;
for each weight format (pallas and reference), size and batch, plus the copy bandwidth of the
device measured in the same run (an elementwise op over a large float32 array, bytes read +
written). See benchmarks/timing.py for how times are taken (R distinct copies per compiled
call, medians). Effective GB/s counts the bytes an op must move at least: the weights as
stored (packed words, scales, tensor scale), x and y.

On a CPU backend the defaults are a smoke run: tiny shapes, batches 1 and 4, the Pallas kernel
in interpret mode, and the pallas-vs-reference agreement (max |y_pallas - y_ref| / max |y_ref|)
printed per row, which is what "pallas vs reference" means without a GPU.

Usage:
  python benchmarks/bench_gemv.py                          # smoke on CPU, full grid on a GPU
  python benchmarks/bench_gemv.py --formats=e4m3,mxfp4 --sizes=16384x16384 --batches=1,16
  python benchmarks/bench_gemv.py --ops=pallas,xla_e4m3 --out=/tmp/r.json
  python benchmarks/bench_gemv.py --plan=dispatch --formats=e4m3,nvfp4   # issue 20's grid
  python benchmarks/bench_gemv.py --summarize=benchmarks/results/gemv_h200_....json \
      --sizes=16384x16384 --batches=1,16                   # print a table from a results file
  python benchmarks/bench_gemv.py --summarize=R.json --roofline=R.png   # the roofline picture
  python benchmarks/bench_gemv.py --plan=llama --estimate  # its expected H200 run time
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import gc
import json
import os
import sys
import time
from typing import Any, Callable

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  # Run as a script (`python benchmarks/bench_gemv.py`): make fp8lab and benchmarks importable
  # from the working tree without an install.
  sys.path.insert(0, _REPO)

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
import numpy as np  # noqa: E402

import fp8lab  # noqa: E402
from benchmarks import cli  # noqa: E402
from benchmarks import timing  # noqa: E402
from benchmarks.run_info import default_out, git_commit, machine_info, write_json  # noqa: E402
from benchmarks.timing import nbytes  # noqa: E402
from fp8lab.formats import LAYOUTS, QUANTIZED  # noqa: E402
from fp8lab.kernels import gemv as gemv_kernel  # noqa: E402
from fp8lab.ops.gemv import PARTS_FORMATS  # noqa: E402

ALL_OPS = ("pallas", "pallas_int", "reference", "xla_packed", "xla_parts", "xla_f32",
           "xla_bf16", "xla_e4m3")
DEFAULT_OPS = ("pallas", "reference", "xla_packed", "xla_f32", "xla_bf16", "xla_e4m3")
FP8LAB_OPS = ("pallas", "pallas_int", "reference", "xla_packed", "xla_parts")
# Ops whose output is compared with the reference op's (max_rel_diff_vs_reference, agrees).
CHECKED_OPS = ("pallas", "pallas_int", "xla_packed", "xla_parts")
XLA_OPS = ("xla_f32", "xla_bf16", "xla_e4m3")

# Benchmark-only variants that are not registry layouts: name -> (quantized format, extra
# quantize keyword arguments). mxfp4_had32: Hadamard-rotated weights (blocks of 32 along k);
# gemv_packed rotates x the same way first, and that rotation is part of the timed op.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "mxfp4_had32": ("mxfp4", {"hadamard": 32}),
}


def _formats() -> dict[str, tuple[str, dict[str, Any]]]:
  """Every registry layout (fp8lab.formats.LAYOUTS) whose format the Pallas kernel serves
  (gemv_kernel.serves_format) plus VARIANTS, each after its base quantized format in
  registry order (the table's row order)."""
  entries = {name: (qname, {} if bs is None else {"block_shape": bs})
             for name, (qname, bs) in LAYOUTS.items() if gemv_kernel.serves_format(qname)}
  entries.update(VARIANTS)
  return {name: entries[name] for q in QUANTIZED for name in entries if entries[name][0] == q}


# Benchmark format name -> (fp8lab.quantize format, extra quantize keyword arguments).
FORMATS: dict[str, tuple[str, dict[str, Any]]] = _formats()
# pallas_int: the kernel with the integer decode forced (fp8_decode="integer"), for the
# formats whose elements the default decode may convert natively (sm_89+ GPUs).
INT_DECODE_FORMATS = tuple(name for name, (q, _) in FORMATS.items()
                           if QUANTIZED[q].element.f16x2_convert)
DEFAULT_FORMATS = ("e4m3", "e5m2", "mxfp8", "mxfp4", "nvfp4", "nvfp4_2d", "bf16")
GPU_SIZES = ("16384x16384", "4096x14336", "14336x4096", "8192x8192", "4096x4096")
SMOKE_SIZES = ("256x512", "200x300")
# Issue 20's grid: 16384^2 and a Llama-3-8B decode step's projections (down 4096 x 14336,
# 14336 x 4096, fused QKV 6144 x 4096, fused gate-up 28672 x 4096, LM head 128256 x 4096).
LLAMA_SIZES = ("16384x16384", "4096x14336", "14336x4096", "6144x4096", "28672x4096",
               "128256x4096")
# A Llama-3-8B decode step's projections, by their share of its weight bytes: fused gate-up,
# down, fused QKV, o; the LM head (once per step, the costliest to time) last.
DECODE_SIZES = ("28672x4096", "4096x14336", "6144x4096", "4096x4096", "128256x4096")
# --plan=NAME runs one of these plans (formats from --formats unless the plan names them).
# "dispatch": what benchmarks/tune_gemv_dispatch.py needs for every cell of issue 20's grid
# (pallas and the xla path over the same words) and XLA's float8-weight GEMV beside them.
# "llama": every gemv_packed path the tuner chooses among at the decode step's shapes and
# batches 1, 16, 64, with XLA's float8- and bfloat16-weight GEMVs beside them; the xla path
# at batch 1 only (at batches 4-64 it was several times the kernel's time in every cell
# measured, docs/gemv_kernel.md section 5). `--estimate` prints its expected H200 run time.
NAMED_PLANS = {
    "dispatch": (f"sizes={','.join(LLAMA_SIZES)} batches=1,4,16,64 "
                 "ops=pallas,xla_packed,xla_parts,xla_e4m3"),
    "llama": (f"sizes={','.join(DECODE_SIZES)} batches=1,16,64 "
              "ops=xla_e4m3,xla_bf16,pallas,xla_packed@1,xla_parts"),
}
GPU_BATCHES = (1, 16, 4, 64)
SMOKE_BATCHES = (1, 4)
# Weight dtype and x dtype of each XLA baseline.
XLA_BASELINES = {
    "xla_f32": (jnp.float32, jnp.float32),
    "xla_bf16": (jnp.bfloat16, jnp.bfloat16),
    "xla_e4m3": (jnp.float8_e4m3fn, jnp.bfloat16),
}

_OPS = flags.DEFINE_list("ops", list(DEFAULT_OPS),
                        f"Ops to time, from {', '.join(ALL_OPS)} (pallas_int: not by default).")
_FORMATS = flags.DEFINE_list(
    "formats", list(DEFAULT_FORMATS),
    f"Weight formats for the pallas and reference ops, from {', '.join(FORMATS)}.")
_SIZES = flags.DEFINE_list(
    "sizes", None, "Weight shapes n_out x k, e.g. 16384x16384,4096x14336 (run in this order). "
    f"Default: {','.join(GPU_SIZES)} on a GPU, {','.join(SMOKE_SIZES)} on a CPU or with --smoke.")
_BATCHES = flags.DEFINE_list(
    "batches", None, "Rows of x (1 means x is one vector of shape (k,)). Default: "
    f"{','.join(map(str, GPU_BATCHES))} on a GPU, {','.join(map(str, SMOKE_BATCHES))} on a CPU.")
_SMOKE = flags.DEFINE_bool(
    "smoke", False, "Tiny sizes and few repetitions even on a GPU (the default on a CPU). "
    "The environment variable FP8LAB_BENCH_SMOKE=1 does the same.")
_OUT = flags.DEFINE_string(
    "out", None, "JSON results path (default benchmarks/results/gemv_<device>_<date>.json). "
    "It is rewritten after every (size, format) so that a killed run keeps what it finished.")
_REPS = flags.DEFINE_integer("reps", None, "Timed calls per op (default 50 on a GPU, 3 smoke).")
_WARMUP = flags.DEFINE_integer("warmup", None, "Untimed calls first (default 3, 1 smoke).")
_COPIES = flags.DEFINE_integer(
    "copies", 0, "Distinct input copies per timed call (R); 0 picks it from the weight size "
    "(see timing.choose_copies; 2 in a smoke run).")
_L2_MB = flags.DEFINE_float("l2_mb", 60.0, "L2 cache size the copies must exceed 4x (MiB).")
_CALL_GIB = flags.DEFINE_float(
    "call_gib", 8.0, "Weight bytes one timed call should read at least (GiB), so the per-call "
    "dispatch overhead is ~1% of a call.")
_MEM_GIB = flags.DEFINE_float("mem_gib", 16.0, "Most device memory the weight copies of one op "
                              "may take (GiB).")
_MAX_COPIES = flags.DEFINE_integer("max_copies", 128, "Upper bound on R (compile time).")
_COPY_GIB = flags.DEFINE_float(
    "copy_gib", None, "Array size for the copy-bandwidth measurement (GiB; default 4 on a GPU, "
    "1/16 in a smoke run).")
_X_DTYPE = flags.DEFINE_enum("x_dtype", "float32", ["float32", "bfloat16", "float16"],
                             "dtype of x (and y) for the pallas and reference ops.")
_INTERPRET = flags.DEFINE_bool(
    "interpret", None, "Run the Pallas kernel in interpret mode (default: on a CPU only).")
_TIME_BUDGET_S = flags.DEFINE_float(
    "time_budget_s", 0.0, "Stop starting new work after this many seconds (0: no limit); "
    "what was skipped is listed in the JSON.")
_AGREE_TOL = flags.DEFINE_float(
    "agree_tol", 1e-2, "Flag pallas rows whose max relative difference from the reference "
    "exceeds this. A coarse alarm for wrong results only: float32 accumulation in another "
    "order (or TF32 in a dot) legitimately differs by ~1e-6..1e-3; the tests check precision.")
_PLAN = flags.DEFINE_string(
    "plan", None, "Several grids run in order in one process (one copy-bandwidth measurement, "
    "one JSON), separated by ';', each setting any of ops=, formats=, sizes=, batches= and "
    "taking the rest from those flags, e.g. 'sizes=16384x16384 batches=1,16; "
    "sizes=4096x14336,14336x4096 formats=e4m3,mxfp4 batches=1', or the name of one of "
    f"NAMED_PLANS ({', '.join(NAMED_PLANS)}).")
_SUMMARIZE = flags.DEFINE_string(
    "summarize", None, "Print the table of an existing results JSON (filtered by --sizes, "
    "--batches, --formats, --ops when given) and exit; several comma-separated files: a "
    "table each, and one --roofline picture of them all.")
_ROOFLINE = flags.DEFINE_string(
    "roofline", None, "Also draw the roofline picture (PNG) of the results, of this run or "
    "of --summarize's files: achieved bandwidth (bytes needed / op device time) per format, "
    "shape and batch against the run's copy bandwidth, XLA's GEMVs beside fp8lab's paths. "
    "Needs matplotlib (the bench extra); without it the picture is skipped, with a message.")
_ESTIMATE = flags.DEFINE_bool(
    "estimate", False, "Print the run's timed ops and its expected run time on an H200 "
    "(estimate_s) and exit without running anything.")


def parse_size(s: str) -> tuple[int, int]:
  """'16384x4096' -> (16384, 4096)."""
  parts = s.lower().split("x")
  if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
    raise ValueError(f"size {s!r} is not n_out x k with positive integers, e.g. 4096x14336")
  return int(parts[0]), int(parts[1])


def check_fp8lab_api(ops: list[str]) -> None:
  """Fails with a clear message when the fp8lab ops the run needs are not there yet."""
  if not any(op in FP8LAB_OPS for op in ops):
    return
  missing = [name for name in ("quantize", "gemv_packed") if not hasattr(fp8lab, name)]
  if missing:
    raise SystemExit(
        f"bench_gemv: fp8lab has no {' / '.join(missing)} (fp8lab/quantized.py and "
        "fp8lab/ops.py, re-exported from fp8lab/__init__.py); the pallas and reference ops "
        "need them. Run only the XLA baselines with --ops=xla_f32,xla_bf16,xla_e4m3.")


# --- the ops -------------------------------------------------------------------------------


def _xla_gemv(w: jax.Array, x: jax.Array) -> jax.Array:
  # y = x @ w.T for x of shape (k,) or (b, k): contract x's last axis with w's axis 1.
  if w.dtype == jnp.float8_e4m3fn:
    w = w.astype(jnp.bfloat16)   # upcast inside XLA's fusion, as jnp.dot users write it
  return lax.dot_general(x, w, (((x.ndim - 1,), (1,)), ((), ())))


def make_op(op: str, interpret: bool) -> Callable[[Any, jax.Array], jax.Array]:
  if op == "pallas":
    return functools.partial(_gemv_packed, implementation="pallas", interpret=interpret)
  if op == "pallas_int":
    return functools.partial(_gemv_packed, implementation="pallas", interpret=interpret,
                             fp8_decode="integer")
  if op == "reference":
    return functools.partial(_gemv_packed, implementation="reference", interpret=False)
  if op == "xla_parts":
    return functools.partial(_gemv_packed, implementation="xla_parts", interpret=False)
  if op == "xla_packed":
    # Plain jnp (XLA) over the packed words: no kernel, so no interpret mode.
    return functools.partial(_gemv_packed, implementation="xla", interpret=False)
  if op in XLA_OPS:
    return _xla_gemv
  raise ValueError(f"unknown op {op!r}; valid: {', '.join(ALL_OPS)}")


def _gemv_packed(w, x, *, implementation: str, interpret: bool, fp8_decode=None):
  return fp8lab.gemv_packed(w, x, implementation=implementation, interpret=interpret,
                            fp8_decode=fp8_decode)


# --- inputs, built on the device -----------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _x_maker(shape: tuple[int, ...], dtype_name: str):
  dtype = jnp.dtype(dtype_name)
  return jax.jit(lambda key: jax.random.normal(key, shape, jnp.float32).astype(dtype))


def make_x_copies(batch: int, k: int, dtype, copies: int, seed: int) -> list[jax.Array]:
  """`copies` distinct random x of shape (k,) (batch 1: one vector) or (batch, k)."""
  make = _x_maker((k,) if batch == 1 else (batch, k), jnp.dtype(dtype).name)
  xs = [make(jax.random.key(seed * 7919 + i)) for i in range(copies)]
  jax.block_until_ready(xs)
  return xs


def weight_breakdown(w: Any) -> dict[str, int]:
  if isinstance(w, jax.Array):
    return {"weights": nbytes(w)}
  return {"data": nbytes(w.data), "scales": nbytes(w.scales), "tensor_scale":
          nbytes(w.tensor_scale)}


# --- the run -------------------------------------------------------------------------------


class Run:
  """Collects result rows and rewrites the JSON file after every unit of work."""

  def __init__(self, out_path: str, meta: dict[str, Any], budget_s: float):
    self.out_path = out_path
    self.meta = meta
    self.rows: list[dict[str, Any]] = []
    self.skipped: list[str] = []
    self.t0 = time.perf_counter()
    self.budget_s = budget_s

  def elapsed(self) -> float:
    return time.perf_counter() - self.t0

  def over_budget(self) -> bool:
    return self.budget_s > 0 and self.elapsed() > self.budget_s

  def log(self, msg: str) -> None:
    print(f"[{self.elapsed():7.1f}s] {msg}", flush=True)

  def write(self) -> None:
    add_speedups(self.rows, self.meta.get("copy_bandwidth", {}).get("GBps"))
    doc = dict(self.meta, rows=self.rows, skipped=self.skipped,
               elapsed_s=round(self.elapsed(), 1))
    write_json(doc, self.out_path)


def add_speedups(rows: list[dict[str, Any]], copy_gbps: float | None) -> None:
  """Fills GB/s against the copy bandwidth and speedups against the XLA baselines."""
  base: dict[tuple[str, int, str], float] = {}
  for r in rows:
    if r["op"] in ("xla_f32", "xla_e4m3") and r.get("time_us"):
      base[(r["size"], r["batch"], r["op"])] = r["time_us"]
  for r in rows:
    t = r.get("time_us")
    if not t:
      continue
    r["pct_copy_bw"] = 100.0 * r["GBps"] / copy_gbps if copy_gbps else None
    for b in ("xla_f32", "xla_e4m3"):
      tb = base.get((r["size"], r["batch"], b))
      r[f"speedup_vs_{b}"] = tb / t if tb else None


def max_rel_diff(ys: tuple[jax.Array, ...], refs: tuple[jax.Array, ...]) -> float:
  """max |y - ref| / max |ref| over all copies (float32); NaN anywhere gives NaN."""
  worst = 0.0
  for y, r in zip(ys, refs):
    y32, r32 = np.asarray(y, np.float32), np.asarray(r, np.float32)
    if np.isnan(y32).any() or np.isnan(r32).any():
      return float("nan")
    scale = float(np.max(np.abs(r32)))
    d = float(np.max(np.abs(y32 - r32)))
    worst = max(worst, d / scale if scale > 0 else d)
  return worst


def time_op(run: Run, *, op: str, fmt_label: str, size: str, batch: int, ws: list[Any],
            xs: list[jax.Array], interpret: bool, reps: int, warmup: int, copy_gbps: float | None,
            keep_outputs: bool) -> tuple[dict[str, Any], tuple[jax.Array, ...] | None]:
  """Compiles, checks and times one (op, format, size, batch); returns its row (+ outputs)."""
  n_out, k = parse_size(size)
  copies = len(ws)
  x_item = xs[0].dtype.itemsize
  row: dict[str, Any] = {
      "op": op, "format": fmt_label, "size": size, "n_out": n_out, "k": k, "batch": batch,
      "x_dtype": str(xs[0].dtype), "copies": copies,
      "interpret": interpret and op.startswith("pallas"),
      "bytes_weights": weight_breakdown(ws[0]),
  }
  # The least an op must move: the weights as stored, x read once, y written once.
  row["bytes_needed"] = nbytes(ws[0]) + batch * k * x_item + batch * n_out * x_item
  outs = None
  try:
    t_c = time.perf_counter()
    compiled = timing.compile_unrolled(make_op(op, interpret), list(zip(ws, xs)))
    row["compile_s"] = round(time.perf_counter() - t_c, 2)
    try:
      row["hlo_ops"] = timing.count_hlo_ops(compiled.as_text())
    except Exception:  # pylint: disable=broad-except
      row["hlo_ops"] = None   # text of the optimized module not available on this backend
    args = list(zip(ws, xs))
    outs = compiled(args)
    host = [np.asarray(o, np.float32) for o in outs]
    row["outputs_distinct"] = timing.outputs_distinct(host)
    row["output_has_nan"] = bool(any(np.isnan(h).any() for h in host))
    del host
    t = timing.time_compiled(compiled, args, reps=reps, warmup=warmup, copies=copies)
    row["timing"] = t.as_dict()
    row["time_us"] = t.median_us
    row["GBps"] = row["bytes_needed"] / (t.median_us * 1e-6) / 1e9
    row["pct_copy_bw"] = 100.0 * row["GBps"] / copy_gbps if copy_gbps else None
    if jax.default_backend() == "gpu":
      # Device time of the kernels alone (profiler): all kernels of one op (x preparation
      # included), and the fp8lab GEMV kernel by itself.
      try:
        runs = 3
        dev = timing.device_kernel_times(compiled, args, runs=runs)
      except Exception as e:  # pylint: disable=broad-except
        dev, row["device_error"] = None, f"{type(e).__name__}: {e}"[:300]
      if dev:
        row["device_us_per_op"] = sum(map(sum, dev.values())) / (runs * copies)
        row["kernels_per_op"] = sum(map(len, dev.values())) / (runs * copies)
        gemv = [d for name, ds in dev.items() if "fp8lab_gemv" in name for d in ds]
        row["gemv_kernel_us"] = float(np.median(gemv)) if gemv else None
    row["status"] = "ok"
    del compiled
  except Exception as e:  # pylint: disable=broad-except
    # One failing op (an unsupported format, a kernel bug) must not lose the rest of the run.
    row["status"] = "error"
    row["error"] = f"{type(e).__name__}: {e}"[:2000]
    outs = None
  msg = (f"{size:>12} {fmt_label:>10} b={batch:<3} {op:<10} " +
         (f"{row['time_us']:9.2f} us  {row['GBps']:8.1f} GB/s  R={copies} "
          f"compile {row['compile_s']}s" if row["status"] == "ok" else
          f"ERROR {row['error'][:300]}"))
  run.log(msg)
  return row, (outs if keep_outputs else None)


def measure_copy_bandwidth(run: Run, gib: float, reps: int, warmup: int) -> dict[str, Any]:
  """Bandwidth of an elementwise op over a float32 array of `gib` GiB (bytes read + written)."""
  n = max(1024, int(gib * 2**30) // 4)
  copies = 2
  make = jax.jit(lambda key: jax.random.uniform(key, (n,), jnp.float32))
  arrs = [make(jax.random.key(100 + i)) for i in range(copies)]
  compiled = timing.compile_unrolled(lambda a: a * 1.5 + 0.25, [(a,) for a in arrs])
  args = [(a,) for a in arrs]
  t = timing.time_compiled(compiled, args, reps=reps, warmup=warmup, copies=copies)
  moved = 2 * n * 4
  res = {"array_bytes": n * 4, "bytes_moved": moved, "time_us": t.median_us,
         "GBps": moved / (t.median_us * 1e-6) / 1e9, "timing": t.as_dict(),
         "op": "y = x * 1.5 + 0.25 over float32 (bytes read + written)"}
  run.log(f"copy bandwidth: {res['GBps']:.1f} GB/s ({n * 4 / 2**30:.3f} GiB, "
          f"{t.median_us:.1f} us)")
  del arrs, compiled
  return res


@dataclasses.dataclass(frozen=True)
class Grid:
  """One block of the run: every op x format x size x batch of it is timed, except that an
  op of `op_batches` runs only at its batches there (written `op@1+4` in --ops and --plan)."""
  ops: tuple[str, ...]
  formats: tuple[str, ...]
  sizes: tuple[str, ...]
  batches: tuple[int, ...]
  op_batches: tuple[tuple[str, tuple[int, ...]], ...] = ()

  def validate(self) -> None:
    cli.check_choices("op", self.ops, ALL_OPS)
    cli.check_choices("format", self.formats, FORMATS)
    for s in self.sizes:
      parse_size(s)
    if not self.batches or any(b < 1 for b in self.batches):
      raise ValueError(f"batches must be >= 1, got {self.batches}")
    for op, bs in self.op_batches:
      if op not in self.ops or not bs or not set(bs) <= set(self.batches):
        raise ValueError(f"{op}@{'+'.join(map(str, bs))}: the batches of an op must be some "
                         f"of the grid's {self.batches}")

  def runs(self, op: str, batch: int) -> bool:
    """Whether this grid times `op` at `batch` (an op of the grid)."""
    return batch in dict(self.op_batches).get(op, self.batches)

  def settings(self) -> dict[str, Any]:
    """The grid as the results JSON records it (op_batches only where set)."""
    d = dataclasses.asdict(self)
    if not self.op_batches:
      del d["op_batches"]
    return d


OpBatches = tuple[tuple[str, tuple[int, ...]], ...]


def parse_ops(values: list[str]) -> tuple[tuple[str, ...], OpBatches]:
  """['pallas', 'xla_packed@1+4'] -> (('pallas', 'xla_packed'), (('xla_packed', (1, 4)),))."""
  ops, op_batches = [], []
  for v in values:
    op, sep, bs = v.partition("@")
    ops.append(op)
    if sep:
      try:
        op_batches.append((op, tuple(int(b) for b in bs.split("+"))))
      except ValueError:
        raise ValueError(f"op {v!r}: write an op's batches as op@1+4") from None
  return tuple(ops), tuple(op_batches)


def parse_plan(plan: str, default: Grid) -> list[Grid]:
  """'sizes=16384x16384 batches=1,16; sizes=4096x14336 formats=e4m3' -> grids.

  Grids are separated by ';'; each sets any of ops=, formats=, sizes=, batches= (comma lists;
  an op written op@1+4 runs at those of the grid's batches only) and takes the rest from
  `default` (the --ops/--formats/--sizes/--batches values).
  """
  grids = []
  for part in plan.split(";"):
    if not part.strip():
      continue
    fields = dataclasses.asdict(default)
    for item in part.split():
      key, sep, value = item.partition("=")
      if not sep or key not in fields:
        raise ValueError(f"--plan item {item!r} is not one of ops=, formats=, sizes=, "
                         "batches= followed by a comma-separated list")
      vals = [v for v in value.split(",") if v]
      if key == "ops":
        fields["ops"], fields["op_batches"] = parse_ops(vals)
      elif key == "op_batches":
        raise ValueError(f"--plan item {item!r}: write an op's batches as ops=op@1+4")
      else:
        fields[key] = tuple(int(v) for v in vals) if key == "batches" else tuple(vals)
    grid = Grid(**fields)
    grid.validate()
    grids.append(grid)
  if not grids:
    raise ValueError(f"--plan {plan!r} holds no grid")
  return grids


def work_units(grids: list[Grid]) -> list[tuple[Grid, str, str]]:
  """The run's units of work in priority order, (grid, size, what): per grid, per size, the
  XLA baselines (what = the op), then each format (what = "fmt:" + format)."""
  units: list[tuple[Grid, str, str]] = []
  for g in grids:
    for size in g.sizes:
      units += [(g, size, op) for op in XLA_OPS if op in g.ops]
      if any(op in g.ops for op in FP8LAB_OPS):
        units += [(g, size, "fmt:" + f) for f in g.formats]
  return units


def fp8lab_ops(grid: Grid, fmt: str) -> list[str]:
  """The grid's fp8lab ops that apply to a format (pallas_int: formats with a native decode;
  xla_parts: formats whose values are bfloat16 numbers)."""
  return [op for op in FP8LAB_OPS
          if op in grid.ops and (op != "pallas_int" or fmt in INT_DECODE_FORMATS)
          and (op != "xla_parts" or FORMATS[fmt][0] in PARTS_FORMATS)]


# Seconds one timed op (compile, checks, timing, profiler) takes on the H200 at --reps=20
# --max_copies=32: medians over the rows of the committed logs
# gemv_h200_dispatch_{a,b}_20261202_*_bench.log and gemv_h200_20261201_215647_bench.log.
# xla_parts was not measured yet: guessed as the kernel. Compiles dominate, so --reps and
# --max_copies change these little.
_EST_OP_S = {"pallas": 2.5, "pallas_int": 2.0, "reference": 3.5, "xla_packed": 3.0,
             "xla_parts": 2.5, "xla_f32": 1.5, "xla_bf16": 1.5, "xla_e4m3": 1.5}
_EST_UNIT_S = 1.5     # making one (size, format)'s weight copies (0.5 for a baseline's)
_EST_START_S = 15.0   # JAX's start, the dispatch overhead and copy bandwidth measurements


def _est_op_s(op: str, fmt: str | None, batch: int) -> float:
  if op == "xla_packed":                    # its float32 dot: cheap at 1, a long compile at 64
    return {1: 0.6, 4: 1.8, 16: 2.9, 64: 10.5}.get(batch, _EST_OP_S[op])
  if op.startswith("pallas") and QUANTIZED[FORMATS[fmt][0]].scaling == "mx":
    # the MX kernels' compiles (first loop, exact fallback): mxfp4 at batch 64 ~11 s
    return 11.0 if batch >= 64 and FORMATS[fmt][0] == "mxfp4" else 2 * _EST_OP_S[op]
  return _EST_OP_S[op]


def estimate_s(grids: list[Grid]) -> tuple[int, float]:
  """(timed ops, expected seconds on the H200) of a run of `grids`, from the constants
  above: a rough guide for fitting a plan into a device call (--time_budget_s still
  decides where a run stops)."""
  n, total = 0, _EST_START_S
  for grid, _, what in work_units(grids):
    fmt = None if what in XLA_OPS else what[4:]
    total += 0.5 if fmt is None else _EST_UNIT_S
    for op in [what] if fmt is None else fp8lab_ops(grid, fmt):
      for b in grid.batches:
        if grid.runs(op, b):
          n, total = n + 1, total + _est_op_s(op, fmt, b)
  return n, total


@functools.lru_cache(maxsize=None)
def _weight_maker(fmt: str | None, dtype_name: str | None, n_out: int, k: int):
  # One compiled maker per (format, shape), reused across grids and copies.
  if fmt is None:
    dtype = jnp.dtype(dtype_name)
    return jax.jit(lambda key: jax.random.normal(key, (n_out, k), jnp.float32).astype(dtype))
  qfmt, kwargs = FORMATS[fmt]
  return jax.jit(lambda key: fp8lab.quantize(
      jax.random.normal(key, (n_out, k), jnp.float32), qfmt, axis=-1, **kwargs))


def run_benchmark(*, grids: list[Grid], smoke: bool, out_path: str, reps: int, warmup: int,
                  copies_flag: int, interpret: bool, x_dtype: str, copy_gib: float,
                  budget_s: float, l2_bytes: int, call_bytes: int, mem_bytes: int,
                  max_copies: int, agree_tol: float) -> dict[str, Any]:
  """Runs the grids in order and writes the JSON; returns the results document."""
  for g in grids:
    g.validate()
  check_fp8lab_api([op for g in grids for op in g.ops])

  now = datetime.datetime.now(datetime.timezone.utc)
  meta: dict[str, Any] = {
      "benchmark": "gemv_packed (pallas vs reference vs XLA)",
      "date": now.isoformat(timespec="seconds"), "machine": machine_info(), "git": git_commit(),
      "smoke": smoke,
      "timing_method": timing.METHOD,
      "bytes_needed": "weights as stored (packed words + scales + tensor scale, or the plain "
                      "array for XLA ops) + x + y, each once; GBps = bytes_needed / time",
      "settings": {"grids": [g.settings() for g in grids],
                   "reps": reps, "warmup": warmup, "copies": copies_flag or "auto",
                   "l2_bytes": l2_bytes, "call_bytes": call_bytes, "mem_bytes": mem_bytes,
                   "max_copies": max_copies, "x_dtype": x_dtype, "interpret": interpret,
                   "agree_tol": agree_tol, "time_budget_s": budget_s},
  }
  run = Run(out_path, meta, budget_s)
  run.log(f"{meta['machine']['device_kind']} ({meta['machine']['backend']}), jax "
          f"{jax.__version__}; writing {out_path}")
  meta["dispatch_overhead_us"] = timing.dispatch_overhead_s() * 1e6
  run.log(f"dispatch overhead of an empty compiled call: {meta['dispatch_overhead_us']:.1f} us")
  copy = measure_copy_bandwidth(run, copy_gib, reps=max(5, reps // 2), warmup=warmup)
  meta["copy_bandwidth"] = copy
  copy_gbps = copy["GBps"]
  run.write()

  def n_copies(bytes_per_copy: int) -> int:
    if copies_flag:
      return copies_flag
    return timing.choose_copies(bytes_per_copy, l2_bytes=l2_bytes, call_bytes=call_bytes,
                                max_bytes=mem_bytes, max_copies=max_copies)

  def make_copies(fmt: str | None, dtype_name: str | None, n_out: int, k: int,
                  copies: int, seed: int) -> list[Any]:
    """`copies` weights of distinct random normal values, each made on the device."""
    make = _weight_maker(fmt, dtype_name, n_out, k)
    ws = [make(jax.random.key(seed * 1000003 + i)) for i in range(copies)]
    jax.block_until_ready(ws)
    return ws

  for seed, (grid, size, what) in enumerate(work_units(grids), start=1):
    if run.over_budget():
      run.skipped.append(f"{size} {what} b={','.join(map(str, grid.batches))}")
      continue
    n_out, k = parse_size(size)
    fmt = None if what in XLA_OPS else what[4:]
    ops_of_unit = [what] if fmt is None else fp8lab_ops(grid, fmt)
    if fmt is None:
      wdt, xdt = XLA_BASELINES[what]
      label, dtype_name = jnp.dtype(wdt).name, jnp.dtype(wdt).name
      bytes_per_copy = n_out * k * jnp.dtype(wdt).itemsize
    else:
      xdt, label, dtype_name, bytes_per_copy = jnp.dtype(x_dtype), fmt, None, 0
    try:
      if fmt is not None:
        # The stored size of a quantized weight (words + scales) decides R.
        probe = make_copies(fmt, None, n_out, k, 1, seed)
        bytes_per_copy = nbytes(probe[0])
        del probe
      r = n_copies(bytes_per_copy)
      ws = make_copies(fmt, dtype_name, n_out, k, r, seed)
    except Exception as e:  # pylint: disable=broad-except
      run.log(f"{size} {label}: making weights failed: {type(e).__name__}: {e}")
      for op in ops_of_unit:
        run.rows.append({"op": op, "format": label, "size": size, "batch": None,
                         "status": "error", "error": f"weights: {type(e).__name__}: {e}"[:2000]})
      run.write()
      continue
    for batch in grid.batches:
      if run.over_budget():
        run.skipped.append(f"{size} {label} b={batch}")
        continue
      xs = make_x_copies(batch, k, xdt, r, seed)
      outs: dict[str, Any] = {}
      rows: dict[str, dict[str, Any]] = {}
      for op in (op for op in ops_of_unit if grid.runs(op, batch)):
        # The reference path may materialise a float32 copy of each dequantized weight, and
        # XLA may keep several alive at once: fewer copies keep it within device memory.
        r_op = min(r, max(2, mem_bytes // (4 * n_out * k))) if op == "reference" else r
        rows[op], outs[op] = time_op(
            run, op=op, fmt_label=label, size=size, batch=batch, ws=ws[:r_op], xs=xs[:r_op],
            interpret=interpret, reps=reps, warmup=warmup, copy_gbps=copy_gbps,
            keep_outputs=fmt is not None)
        run.rows.append(rows[op])
      for op in CHECKED_OPS:
        if outs.get(op) is None or outs.get("reference") is None:
          continue
        err = max_rel_diff(outs[op], outs["reference"])
        rows[op]["max_rel_diff_vs_reference"] = err
        rows[op]["agrees"] = bool(err <= agree_tol)
        run.log(f"{size:>12} {label:>10} b={batch:<3} {op} vs reference: max rel diff "
                f"{err:.3g}" + ("" if err <= agree_tol else f"  > {agree_tol}: MISMATCH"))
      del xs, outs
      run.write()
    del ws   # free this unit's weight copies before the next one
    gc.collect()

  if run.skipped:
    run.log(f"time budget {budget_s:.0f}s reached; skipped: {', '.join(run.skipped)}")
  run.write()
  return dict(meta, rows=run.rows, skipped=run.skipped)


# --- the table -----------------------------------------------------------------------------


def _fmt(v: Any, spec: str) -> str:
  return "-" if v is None else format(v, spec)


def format_table(doc: dict[str, Any], *, sizes: list[str] | None = None,
                 batches: list[int] | None = None, formats: list[str] | None = None,
                 ops: list[str] | None = None) -> str:
  """The results as a fixed-width text table (one row per op, format, size, batch)."""
  rows = [r for r in doc["rows"] if r.get("status") == "ok"]
  if sizes:
    rows = [r for r in rows if r["size"] in sizes]
  if batches:
    rows = [r for r in rows if r["batch"] in batches]
  if ops:
    rows = [r for r in rows if r["op"] in ops]
  if formats:
    rows = [r for r in rows if r["op"] in XLA_OPS or r["format"] in formats]
  size_order = {s: i for i, s in enumerate(dict.fromkeys(r["size"] for r in doc["rows"]))}
  op_order = {op: i for i, op in enumerate(XLA_OPS + FP8LAB_OPS)}
  fmt_order = {f: i for i, f in enumerate(FORMATS)}
  rows.sort(key=lambda r: (size_order.get(r["size"], 99), r["batch"],
                           r["op"] not in XLA_OPS, fmt_order.get(r["format"], -1),
                           op_order[r["op"]]))
  head = (f"{'format':<14} {'size':>12} {'batch':>5} {'op':<10} {'time us':>9} {'GB/s':>8} "
          f"{'%copy':>6} {'vs f32':>7} {'vs e4m3':>7} {'agree':>8} {'dev us':>7} {'kern us':>7}")
  lines = [head, "-" * len(head)]
  for r in rows:
    agree = r.get("max_rel_diff_vs_reference")
    flag = "" if r.get("agrees", True) else "!"
    lines.append(
        f"{r['format']:<14} {r['size']:>12} {r['batch']:>5} {r['op']:<10} "
        f"{r['time_us']:9.2f} {r['GBps']:8.1f} {_fmt(r.get('pct_copy_bw'), '6.1f')} "
        f"{_fmt(r.get('speedup_vs_xla_f32'), '7.2f')} {_fmt(r.get('speedup_vs_xla_e4m3'), '7.2f')} "
        f"{(_fmt(agree, '8.1e') + flag) if agree is not None else '-':>8} "
        f"{_fmt(r.get('device_us_per_op'), '7.1f')} {_fmt(r.get('gemv_kernel_us'), '7.1f')}")
  errors = [r for r in doc["rows"] if r.get("status") == "error"]
  cb = doc.get("copy_bandwidth", {})
  mach = doc.get("machine", {})
  lines.append(f"copy bandwidth {cb.get('GBps', float('nan')):.1f} GB/s; dispatch overhead "
               f"{doc.get('dispatch_overhead_us', float('nan')):.1f} us per call (divided by R "
               f"copies per call); {mach.get('device_kind')} jax {mach.get('jax')}")
  if errors:
    lines.append(f"{len(errors)} errors: " + "; ".join(
        f"{r['size']} {r['format']} b={r['batch']} {r['op']}: {r['error'][:120]}"
        for r in errors[:8]))
  if doc.get("skipped"):
    lines.append(f"skipped (time budget): {', '.join(doc['skipped'])}")
  return "\n".join(lines)


# --- the roofline picture ------------------------------------------------------------------


def roofline_data(docs: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
  """What the roofline picture shows, from one results document or several (runs that
  timed different formats; no matplotlib needed):
    time     "device" (op device time, the profiler's) or "host" where no row has one (a run
             off the GPU: the picture then says so);
    cells    [size, batch] pairs, the x axis: sizes in the runs' order, batches ascending;
    panels   one per weight format and run, in registry order: {"format", "run" (the run's
             date), "copy_GBps" (that run's copy bandwidth), "fp8lab": {op: [GB/s or None
             per cell]} (fp8lab's ops over that format), "xla": {op: [...]} (XLA's GEMVs of
             the same run, drawn beside them)};
    title    the device and the runs' dates.
  GB/s = the row's bytes_needed (weights as stored, x and y, each once) / its time."""
  docs = [docs] if isinstance(docs, dict) else list(docs)
  runs = [[r for r in d["rows"] if r.get("status") == "ok" and r.get("bytes_needed")]
          for d in docs]
  device = any(r.get("device_us_per_op") for rows in runs for r in rows)
  key = "device_us_per_op" if device else "time_us"
  runs = [[r for r in rows if r.get(key)] for rows in runs]
  every = [r for rows in runs for r in rows]
  sizes = list(dict.fromkeys(r["size"] for r in every))
  cells = [[s, b] for s in sizes for b in sorted({r["batch"] for r in every if r["size"] == s})]
  index = {(s, b): i for i, (s, b) in enumerate(cells)}
  fmt_order = {f: i for i, f in enumerate(FORMATS)}
  op_order = {op: i for i, op in enumerate(FP8LAB_OPS + XLA_OPS)}

  def series(rows: list[dict[str, Any]]) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in sorted(rows, key=lambda r: op_order.get(r["op"], len(op_order))):
      vals = out.setdefault(r["op"], [None] * len(cells))
      vals[index[(r["size"], r["batch"])]] = r["bytes_needed"] / (r[key] * 1e-6) / 1e9
    return out

  panels = []
  for doc, rows in zip(docs, runs):
    xla = series([r for r in rows if r["op"] in XLA_OPS])
    fmts = {r["format"] for r in rows if r["op"] not in XLA_OPS}
    for fmt in sorted(fmts, key=lambda f: (fmt_order.get(f, len(fmt_order)), f)):
      panels.append({"format": fmt, "run": doc.get("date", ""),
                     "copy_GBps": doc.get("copy_bandwidth", {}).get("GBps"),
                     "fp8lab": series([r for r in rows if r["format"] == fmt
                                       and r["op"] not in XLA_OPS]), "xla": xla})
    if not fmts and xla:                           # XLA's GEMVs alone
      panels.append({"format": "XLA", "run": doc.get("date", ""),
                     "copy_GBps": doc.get("copy_bandwidth", {}).get("GBps"), "fp8lab": {},
                     "xla": xla})
  panels.sort(key=lambda p: fmt_order.get(p["format"], len(fmt_order)))   # stable: runs' order
  kinds = sorted({d.get("machine", {}).get("device_kind", "?") for d in docs})
  return {"time": "device" if device else "host", "cells": cells, "panels": panels,
          "title": f"{', '.join(kinds)}; " + ", ".join(d.get("date", "?") for d in docs)}


_OP_STYLE = {"pallas": ("C0", "-", "o"), "pallas_int": ("C4", "-", "v"),
             "reference": ("C7", ":", "x"), "xla_packed": ("C1", "-", "s"),
             "xla_parts": ("C2", "-", "^"), "xla_e4m3": ("k", "--", "D"),
             "xla_bf16": ("0.45", "--", "P"), "xla_f32": ("0.7", ":", "*")}


def draw_roofline(data: dict[str, Any], path: str) -> str | None:
  """Draws roofline_data's picture as a PNG at `path`: one panel per weight format (and
  run), GB/s per (shape, batch) for fp8lab's ops (solid) and XLA's GEMVs of the same run
  (dashed), that run's copy bandwidth as a line. Returns None, or why nothing was drawn (no
  matplotlib, no rows)."""
  if not data["panels"]:
    return "no timed rows in the results"
  try:
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  except ImportError:
    return "matplotlib is not importable (pip install fp8lab[bench])"
  panels, cells = data["panels"], data["cells"]
  fig, axes = plt.subplots(len(panels), 1, figsize=(max(9, 0.5 * len(cells) + 5),
                                                    2.4 * len(panels) + 1.2),
                           sharex=True, squeeze=False)
  spans: dict[str, list[int]] = {}                 # size -> the cell indices of its batches
  for i, (s, _) in enumerate(cells):
    spans.setdefault(s, []).append(i)
  top = max([v for p in panels for ser in [*p["fp8lab"].values(), *p["xla"].values()]
             for v in ser if v] + [p["copy_GBps"] or 0 for p in panels])
  several_runs = len({p["run"] for p in panels}) > 1
  for ax, panel in zip(axes[:, 0], panels):
    fmt = panel["format"]
    for op, vals in [*panel["fp8lab"].items(), *panel["xla"].items()]:
      color, ls, marker = _OP_STYLE.get(op, ("C9", "-", "."))
      label = op if op in XLA_OPS else f"{fmt} {op}"
      for idx in spans.values():                   # a line per shape, across its batches
        pts = [(i, vals[i]) for i in idx if vals[i] is not None]
        if pts:
          ax.plot(*zip(*pts), color=color, ls=ls, marker=marker, ms=4, lw=1.2, label=label)
          label = None
    if panel["copy_GBps"]:
      ax.axhline(panel["copy_GBps"], color="C3", lw=1, label="copy bandwidth")
    for idx in list(spans.values())[1:]:
      ax.axvline(idx[0] - 0.5, color="0.85", lw=0.8)
    ax.set_ylim(0, 1.08 * top)
    ax.set_ylabel("GB/s")
    ax.set_title(fmt + (f"  (run {panel['run']})" if several_runs else ""), fontsize=10,
                 loc="left")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    ax.grid(axis="y", alpha=0.3)
  bottom = axes[-1, 0]
  bottom.set_xticks(list(range(len(cells))), [str(b) for _, b in cells], fontsize=7)
  bottom.set_xlabel("batch, per weight shape (n_out x k)", fontsize=8, labelpad=16)
  for s, idx in spans.items():
    bottom.annotate(s, ((idx[0] + idx[-1]) / 2, 0), xycoords=("data", "axes fraction"),
                    xytext=(0, -22), textcoords="offset points", ha="center", fontsize=8)
  fig.suptitle(f"GEMV achieved bandwidth: bytes needed / op {data['time']} time, against "
               f"the copy bandwidth of the same run\n{data['title']}", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return None


def _draw(docs: list[dict[str, Any]], path: str) -> None:
  why = draw_roofline(roofline_data(docs), path)
  print(f"roofline: {path}" if why is None else f"roofline skipped: {why}")


def main(argv: list[str]) -> None:
  cli.no_arguments(argv)
  batches = [int(b) for b in _BATCHES.value] if _BATCHES.value else None
  if _SUMMARIZE.value:
    docs = []
    for path in _SUMMARIZE.value.split(","):
      with open(path) as f:
        docs.append(json.load(f))
      if len(docs) > 1:
        print()
      print(format_table(docs[-1], sizes=_SIZES.value, batches=batches,
                         formats=_FORMATS.value if flags.FLAGS["formats"].present else None,
                         ops=_OPS.value if flags.FLAGS["ops"].present else None))
    if _ROOFLINE.value:
      _draw(docs, _ROOFLINE.value)
    return
  backend = jax.default_backend()
  # --estimate is for the GPU run: the GPU defaults, not a smoke run's.
  smoke = not _ESTIMATE.value and (_SMOKE.value or backend == "cpu"
                                   or os.environ.get("FP8LAB_BENCH_SMOKE") == "1")
  sizes = _SIZES.value or list(SMOKE_SIZES if smoke else GPU_SIZES)
  batches = batches or list(SMOKE_BATCHES if smoke else GPU_BATCHES)
  interpret = _INTERPRET.value if _INTERPRET.value is not None else backend == "cpu"
  out = _OUT.value or default_out("gemv", smoke)
  with cli.usage_errors():
    ops, op_batches = parse_ops(_OPS.value)
    default = Grid(ops=ops, formats=tuple(_FORMATS.value), sizes=tuple(sizes),
                   batches=tuple(batches), op_batches=op_batches)
    default.validate()
    plan = NAMED_PLANS.get(_PLAN.value, _PLAN.value)
    grids = parse_plan(plan, default) if plan else [default]
  if _ESTIMATE.value:
    n, secs = estimate_s(grids)
    for g in grids:
      print(f"grid: {g.settings()}")
    print(f"estimate: {n} timed ops, ~{secs:.0f} s on an H200 (--reps=20 --max_copies=32; "
          "rough: see bench_gemv.estimate_s)")
    return
  if smoke and len(grids) > 1:
    # A smoke run keeps the plan's ops and formats (so a dry run checks them) but not its
    # real-size grids: one grid of the smoke sizes and batches.
    grids = [Grid(ops=tuple(dict.fromkeys(op for g in grids for op in g.ops)),
                  formats=tuple(dict.fromkeys(f for g in grids for f in g.formats)),
                  sizes=tuple(sizes), batches=tuple(batches))]
  elif smoke:
    # An op's own batches that are not smoke batches: the op runs at every smoke batch.
    kept = tuple((op, tuple(b for b in bs if b in batches)) for op, bs in grids[0].op_batches
                 if set(bs) & set(batches))
    grids = [dataclasses.replace(grids[0], sizes=tuple(sizes), batches=tuple(batches),
                                 op_batches=kept)]
  doc = run_benchmark(
      grids=grids, smoke=smoke, out_path=out, reps=_REPS.value or (3 if smoke else 50),
      warmup=_WARMUP.value if _WARMUP.value is not None else (1 if smoke else 3),
      copies_flag=_COPIES.value or (2 if smoke else 0), interpret=interpret,
      x_dtype=_X_DTYPE.value,
      copy_gib=_COPY_GIB.value if _COPY_GIB.value is not None else (1 / 16 if smoke else 4.0),
      budget_s=_TIME_BUDGET_S.value, l2_bytes=int(_L2_MB.value * 2**20),
      call_bytes=int(_CALL_GIB.value * 2**30), mem_bytes=int(_MEM_GIB.value * 2**30),
      max_copies=_MAX_COPIES.value, agree_tol=_AGREE_TOL.value)
  print()
  print(format_table(doc))
  print(f"\nresults: {out}")
  if _ROOFLINE.value:
    _draw([doc], _ROOFLINE.value)
  bad = [r for r in doc["rows"] if r.get("agrees") is False or r.get("status") == "error"]
  if bad:
    # Timings are still written; a wrong or failing kernel makes the run fail visibly.
    print(f"bench_gemv: {len(bad)} rows failed or disagree with the reference", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
