"""The quantize benchmark: fp8lab's fused quantize kernel against what a user writes in XLA.

Times, side by side in one run over one input tensor per size (bfloat16 by default):
  copy            y = x * 1.5 + 0.25 in x's dtype: the copy bandwidth of this size, the
                  yardstick of every row's "% copy" (bytes read + written per second);
  xla_given       XLA's scale, clip, cast to float8_e4m3fn plus the finite amax (a given or
                  delayed scale; unpacked codes, as a user writes it);
  xla_current     XLA's current scaling: the amax pass, then scale, clip and cast;
  xla_delayed     XLA's delayed-scaling chain: cast with the state's scale, amax, history roll,
                  max over the history, the next scale (Transformer Engine's rule);
  jax_nn_mxfp8    jax.nn's internal mxfp8 quantizer (jax._src.cudnn.scaled_matmul_stablehlo,
                  values and E8M0 scales, not packed);
  <fmt case>      fp8lab.quantize_with_amax with implementation "pallas" (the kernel; interpret
                  mode on a CPU) and "reference" (the golden model, jitted), for the cases of
                  CASES: formats, scaling (given / delayed with a 1024-long history / current),
                  transpose, stochastic rounding, Hadamard.
Every fp8lab row is checked byte for byte against the reference on the first copy (`exact`).
Bytes per row: what the op must move at least: x read once (twice for current scaling), the
outputs written once (packed words, scales, tensor scale, amax, state). Timing: R distinct input
copies per compiled call, medians (benchmarks/timing.py); device time per op from the profiler
on a GPU.

Usage:
  python benchmarks/bench_quantize.py                       # smoke on a CPU, the grid on a GPU
  python benchmarks/bench_quantize.py --sizes=16384x16384 --cases=e4m3_delayed,mxfp8
  python benchmarks/bench_quantize.py --summarize=benchmarks/results/quantize_h200_....json
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import json
import os
import sys
import time
from typing import Any, Callable

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import fp8lab  # noqa: E402
from benchmarks import cli  # noqa: E402
from benchmarks import timing  # noqa: E402
from benchmarks.run_info import default_out, git_commit, machine_info, write_json  # noqa: E402
from benchmarks.timing import nbytes  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Case:
  """One fp8lab configuration: quantize_with_amax(x, fmt, scaling=..., **kwargs)."""
  fmt: str
  scaling: str = "none"            # "none" (block scales / current), "given", "delayed"
  transpose: bool = False
  kwargs: tuple[tuple[str, Any], ...] = ()

  @property
  def passes(self) -> int:
    """Reads of x the op needs: current scaling reads it for its amax first."""
    kind = fp8lab.get_quantized_format(self.fmt).scaling
    return 2 if kind in ("tensor", "nvfp4") and self.scaling == "none" else 1


HISTORY = 1024
CASES: dict[str, Case] = {
    "e4m3_given": Case("e4m3", "given"),
    "e4m3_delayed": Case("e4m3", "delayed"),
    "e4m3_current": Case("e4m3"),
    "e5m2_delayed": Case("e5m2", "delayed"),
    "mxfp8": Case("mxfp8"),
    "mxfp8_e5m2": Case("mxfp8_e5m2"),
    "mxfp4": Case("mxfp4"),
    "nvfp4": Case("nvfp4"),
    "nvfp4_delayed": Case("nvfp4", "delayed"),
    "e4m3_delayed_t": Case("e4m3", "delayed", transpose=True),
    "mxfp8_t": Case("mxfp8", transpose=True),
    "mxfp4_t": Case("mxfp4", transpose=True),
    "nvfp4_t": Case("nvfp4", "delayed", transpose=True),
    "e4m3_delayed_sr": Case("e4m3", "delayed", kwargs=(("rounding", "stochastic"),)),
    "mxfp4_sr": Case("mxfp4", kwargs=(("rounding", "stochastic"),)),
    "nvfp4_sr": Case("nvfp4", "delayed", kwargs=(("rounding", "stochastic"),)),
    "mxfp4_had32": Case("mxfp4", kwargs=(("hadamard", 32),)),
    "nvfp4_had16": Case("nvfp4", "delayed", kwargs=(("hadamard", 16),)),
}
XLA_OPS = ("copy", "xla_given", "xla_current", "xla_delayed", "jax_nn_mxfp8")
# Variants of the kernel, called directly on 2D x with its table's QuantizeConfig changed, on
# the cases listed (their rows' exact_vs_pallas: the same bytes as the pallas row or not):
#   pallas_intmul  float_products off: the products by integer ops on bit patterns (the
#                  pallas rows use the GPU's float32 multiply, exact there);
#   pallas_int     float_products and float_encode off: every step integer ops (the kernel
#                  of 2026-12-01);
#   pallas_tpp1    tiles_per_program=1: one tile per program (delayed scaling's default
#                  loops programs over tiles so that the fold takes ~2048 atomics).
# "pallas@RxCxW" (--tiles) is the pallas row with block_rows R, block_cols C, num_warps W.
VARIANTS: dict[str, dict[str, Any]] = {
    "pallas_intmul": dict(float_products=False),
    "pallas_int": dict(float_products=False, float_encode=False),
    "pallas_tpp1": dict(tiles_per_program=1),
}
IMPLS = ("pallas", "pallas_tpp1", "pallas_intmul", "pallas_int", "reference")
VARIANT_CASES = {"pallas_intmul": ("e4m3_delayed", "nvfp4_delayed", "mxfp8", "mxfp4"),
                 "pallas_int": ("e4m3_delayed", "mxfp8", "mxfp4", "nvfp4_delayed"),
                 "pallas_tpp1": ("e4m3_delayed", "nvfp4_delayed", "e4m3_delayed_t")}
TILE_CASES = ("e4m3_given", "e4m3_delayed", "mxfp8", "mxfp4", "nvfp4_delayed")
# Priority order: the targets' size, then the fixed-cost sizes.
GPU_SIZES = ("16384x16384", "1024x1024", "4096x4096")
SMOKE_SIZES = ("64x256",)
# The golden model is slow (milliseconds at 16384^2): its rows run at the first size only,
# for these cases (the exactness check of the other cases is the tests' job).
REFERENCE_SIZES = 1
REFERENCE_CASES = ("e4m3_delayed", "mxfp4", "nvfp4")

_CASES = flags.DEFINE_list("cases", list(CASES), f"fp8lab cases; valid: {', '.join(CASES)}")
_IMPLS = flags.DEFINE_list("impls", list(IMPLS), "fp8lab implementations to time.")
_XLA = flags.DEFINE_list("xla", list(XLA_OPS), f"XLA baselines; valid: {', '.join(XLA_OPS)}")
_SIZES = flags.DEFINE_list("sizes", None, "RxC sizes (default: the GPU grid, or a smoke size).")
_TILES = flags.DEFINE_list("tiles", [], "RxCxW tiles (block_rows x block_cols x num_warps) to "
                           f"time at the first size, on the cases {', '.join(TILE_CASES)}.")
_DTYPE = flags.DEFINE_enum("dtype", "bfloat16", ["float32", "bfloat16", "float16"], "x's dtype.")
_OUT = flags.DEFINE_string("out", None, "Results JSON (default benchmarks/results/...).")
_REPS = flags.DEFINE_integer("reps", None, "Timed calls (default 30 on a GPU, 2 smoke).")
_WARMUP = flags.DEFINE_integer("warmup", None, "Untimed calls first (default 3, 1 smoke).")
_MAX_COPIES = flags.DEFINE_integer("max_copies", 64, "Upper bound on R (compile time).")
_TIME_BUDGET_S = flags.DEFINE_float("time_budget_s", 0.0, "Stop starting work after this "
                                    "many seconds (0: no limit).")
_INTERPRET = flags.DEFINE_bool("interpret", None, "Kernels in interpret mode (default: on a CPU).")
_SUMMARIZE = flags.DEFINE_string("summarize", None, "Print the table of a results file and exit.")


def parse_size(s: str) -> tuple[int, int]:
  parts = s.lower().split("x")
  if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
    raise ValueError(f"size {s!r} is not RxC with positive integers, e.g. 16384x16384")
  return int(parts[0]), int(parts[1])


# --- the ops --------------------------------------------------------------------------------

_E4M3_MAX = float(fp8lab.get_format("e4m3").max_finite)


def _finite_amax(x):
  a = jnp.abs(x.astype(jnp.float32))
  return jnp.max(jnp.where(jnp.isfinite(a), a, 0.0))


def _cast(x, scale):
  y = jnp.clip(x.astype(jnp.float32) * scale, -_E4M3_MAX, _E4M3_MAX)
  return y.astype(jnp.float8_e4m3fn)


def _next_scale(history, scale):
  ref = jnp.max(history)
  new = _E4M3_MAX / ref
  new = jnp.where(jnp.isinf(new), jnp.finfo(jnp.float32).max, new)
  return jnp.where((ref > 0) & jnp.isfinite(ref), new, scale)


def xla_op(name: str) -> Callable[..., Any]:
  """The XLA baseline `name` on (x, history, scale)."""
  if name == "copy":
    return lambda x, h, s: x * jnp.asarray(1.5, x.dtype) + jnp.asarray(0.25, x.dtype)
  if name == "xla_given":
    return lambda x, h, s: (_cast(x, s), _finite_amax(x))
  if name == "xla_current":
    def current(x, h, s):
      amax = _finite_amax(x)
      return _cast(x, jnp.where(amax > 0, _E4M3_MAX / amax, 1.0)), amax
    return current
  if name == "xla_delayed":
    def delayed(x, h, s):
      amax = _finite_amax(x)
      hist = jnp.concatenate([amax[None], h[:-1]])
      return _cast(x, s), amax, hist, _next_scale(hist, s)
    return delayed
  if name == "jax_nn_mxfp8":
    from jax._src.cudnn import scaled_matmul_stablehlo as sms  # pylint: disable=g-import-not-at-top
    config = sms.BlockScaleConfig(mode="mxfp8", block_size=32, data_type=jnp.float8_e4m3fn,
                                  scale_type=jnp.float8_e8m0fnu, global_scale=None,
                                  infer_only=False)
    return lambda x, h, s: sms.quantize(x, config)
  raise ValueError(f"unknown XLA op {name!r}; valid: {', '.join(XLA_OPS)}")


def fp8lab_op(case: Case, impl: str, interpret: bool) -> Callable[..., Any]:
  """fp8lab.quantize_with_amax for `case` on (x, state, key)."""
  kwargs = dict(case.kwargs)
  overrides = variant_overrides(impl)
  if overrides is not None:
    return _config_kernel_op(case, interpret, overrides)

  def op(x, state, key):
    kw = dict(kwargs)
    if kw.get("rounding") == "stochastic":
      kw["key"] = key
    scaling = None if case.scaling == "none" else (state if case.scaling == "delayed"
                                                   else state.scale)
    r = fp8lab.quantize_with_amax(x, case.fmt, scaling=scaling, transpose=case.transpose,
                                  implementation=impl, interpret=interpret and impl == "pallas",
                                  **kw)
    return r.q, r.q_t, r.amax, r.scaling

  return op


def variant_overrides(impl: str) -> dict[str, Any] | None:
  """QuantizeConfig fields a kernel variant changes (VARIANTS, "pallas@RxCxW"); None for
  the plain rows."""
  if impl in VARIANTS:
    return VARIANTS[impl]
  if impl.startswith("pallas@"):
    r, c, w = (int(v) for v in impl[len("pallas@"):].split("x"))
    return dict(block_rows=r, block_cols=c, num_warps=w)
  return None


def _config_kernel_op(case: Case, interpret: bool,
                      overrides: dict[str, Any]) -> Callable[..., Any]:
  """The kernel with its table's config changed by `overrides` on (x, state, key), as
  quantize_with_amax calls it."""
  from fp8lab.kernels import quantize as qk  # pylint: disable=g-import-not-at-top
  from fp8lab.numerics.hadamard import hadamard_signs  # pylint: disable=g-import-not-at-top
  from fp8lab.numerics.random import key_words  # pylint: disable=g-import-not-at-top
  kwargs = dict(case.kwargs)
  cfg = dataclasses.replace(qk.quantize_config(case.fmt, case.transpose), **overrides)
  had = kwargs.get("hadamard")

  def op(x, state, key):
    scale = None if case.scaling == "none" else state.scale
    delayed = case.scaling == "delayed"
    r = qk.quantize_2d(
        x, fmt=case.fmt, transpose=case.transpose, scale=scale, interpret=interpret,
        key_words=key_words(key) if kwargs.get("rounding") == "stochastic" else None,
        hadamard=None if had is None else (had, hadamard_signs(had)), config=cfg,
        history=state.amax_history if delayed else None,
        history_algo=state.amax_compute_algo, margin=state.margin if delayed else 0)
    return r, None

  return op


def make_inputs(rows: int, cols: int, dtype, copies: int, seed: int, fmt: str = "e4m3"):
  """`copies` distinct (x, state, key): normal x with a few large values; a delayed-scaling state
  whose history holds earlier amaxes (its scale is the one it gives)."""
  @jax.jit
  def make(key):
    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, (rows, cols), jnp.float32) * 3.0
    return x.astype(dtype), jax.random.uniform(k2, (HISTORY,), jnp.float32, 5.0, 15.0)

  out = []
  for i in range(copies):
    x, hist = make(jax.random.key(seed * 7919 + i))
    state = fp8lab.DelayedScaling.create(fmt if fmt in ("e4m3", "e5m2", "nvfp4") else "e4m3",
                                         history_length=HISTORY)
    state = dataclasses.replace(state, amax_history=hist).update(hist[0])
    out.append((x, state, jax.random.key(seed + i)))
  jax.block_until_ready(out)
  return out


# --- the run --------------------------------------------------------------------------------

def _bytes_equal(a, b) -> bool:
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  if len(la) != len(lb):
    return False
  for u, v in zip(la, lb):
    u, v = np.asarray(u), np.asarray(v)
    if u.shape != v.shape or u.dtype != v.dtype or u.tobytes() != v.tobytes():
      return False
  return True


def _kernel_leaves(out) -> list:
  """(data, scales, tensor_scale, amax, data_t, scales_t, history, scale) of a pallas row's
  first output (q, q_t, amax, state) or of a variant row's KernelResult."""
  if hasattr(out, "data_t"):
    return [out.data, out.scales, out.tensor_scale, out.amax, out.data_t, out.scales_t,
            out.history, out.next_scale]
  q, q_t, amax, state = out
  return [q.data, q.scales, q.tensor_scale, amax] + (
      [q_t.data, q_t.scales] if q_t is not None else [None, None]) + (
      [state.amax_history, state.scale] if state is not None else [None, None])


def time_row(op: Callable, args: list, *, reps: int, warmup: int) -> dict[str, Any]:
  """timing.measure's row, with the first call's first output (first_output: popped by the
  caller for the byte checks)."""
  row, outs = timing.measure(op, args, reps=reps, warmup=warmup)
  row["first_output"] = None if outs is None else outs[0]
  return row


def run_benchmark(*, sizes, cases, impls, xla_ops, dtype, out_path, reps, warmup, interpret,
                  max_copies, budget_s, smoke, tiles=()) -> dict[str, Any]:
  now = datetime.datetime.now(datetime.timezone.utc)
  doc: dict[str, Any] = {
      "benchmark": "quantize (fp8lab pallas vs reference vs XLA)",
      "date": now.isoformat(timespec="seconds"), "machine": machine_info(), "git": git_commit(),
      "smoke": smoke, "timing_method": timing.METHOD,
      "bytes_needed": "x read once (twice for current scaling) + the outputs written once; "
                      "GBps = bytes_needed / time; pct_copy = GBps / the copy row's GBps; "
                      "floor_us = bytes_needed at the copy row's bandwidth (floor_device_us, "
                      "pct_copy_device: the same by device time, on a GPU)",
      "settings": {"sizes": sizes, "cases": cases, "impls": impls, "xla": xla_ops,
                   "dtype": dtype, "reps": reps, "warmup": warmup, "interpret": interpret,
                   "history_length": HISTORY, "max_copies": max_copies,
                   "tiles": list(tiles)},
      "rows": [], "skipped": [],
  }
  t_start = time.perf_counter()

  def log(msg):
    print(f"[{time.perf_counter() - t_start:7.1f}s] {msg}", flush=True)

  def write():
    write_json(doc, out_path, default=str)

  log(f"{doc['machine']['device_kind']}, jax {jax.__version__}; writing {out_path}")
  dt = jnp.dtype(dtype)
  for si, size in enumerate(sizes):
    rows_, cols = parse_size(size)
    x_bytes = rows_ * cols * dt.itemsize
    copies = 2 if smoke else timing.choose_copies(
        x_bytes, l2_bytes=60 * 2**20, call_bytes=2 * 2**30, max_bytes=8 * 2**30,
        max_copies=max_copies)
    units = [("xla", op, None) for op in xla_ops]
    units += [(impl, name, CASES[name]) for name in cases for impl in impls
              if impl == "pallas" or name in VARIANT_CASES.get(impl, ())
              or (impl == "reference" and si < REFERENCE_SIZES and name in REFERENCE_CASES)]
    if si == 0:
      units += [(f"pallas@{t}", name, CASES[name]) for t in tiles for name in cases
                if name in TILE_CASES]
    inputs: dict[str, list] = {}
    copy_gbps = copy_dev_gbps = None
    firsts: dict[str, Any] = {}
    for impl, name, case in units:
      if budget_s and time.perf_counter() - t_start > budget_s:
        doc["skipped"].append(f"{size} {impl} {name}")
        continue
      fmt = case.fmt if case else "e4m3"
      state_fmt = fmt if fmt in ("e4m3", "e5m2", "nvfp4") else "e4m3"
      if state_fmt not in inputs:
        inputs[state_fmt] = make_inputs(rows_, cols, dt, copies, seed=si + 1, fmt=state_fmt)
      args = inputs[state_fmt]
      n = copies if impl != "reference" else min(copies, 2)
      op = xla_op(name) if case is None else fp8lab_op(case, impl, interpret)
      xla_args = [(x, s.amax_history, s.scale) for x, s, _ in args[:n]]
      row = time_row(op, xla_args if case is None else args[:n], reps=reps, warmup=warmup)
      first = row.pop("first_output", None)
      row.update(op=name, impl=impl, size=size, dtype=dtype, copies=n)
      if row["status"] == "ok":
        passes = case.passes if case is not None else 2 if name == "xla_current" else 1
        row["bytes_needed"] = passes * x_bytes + nbytes(first)
        row["GBps"] = row["bytes_needed"] / (row["time_us"] * 1e-6) / 1e9
        dev = row.get("device_us_per_op")
        if name == "copy":
          copy_gbps = row["GBps"]
          copy_dev_gbps = row["bytes_needed"] / (dev * 1e-6) / 1e9 if dev else None
        row["pct_copy"] = 100 * row["GBps"] / copy_gbps if copy_gbps else None
        # The bytes floor at the copy bandwidth of this size, by host and by device time.
        row["floor_us"] = row["bytes_needed"] / (copy_gbps * 1e3) if copy_gbps else None
        if dev and copy_dev_gbps:
          row["floor_device_us"] = row["bytes_needed"] / (copy_dev_gbps * 1e3)
          row["pct_copy_device"] = 100 * row["floor_device_us"] / dev
        if case is not None:
          firsts[(impl, name)] = first
          ref = firsts.get(("reference", name))
          pal = firsts.get(("pallas", name))
          if ref is not None and pal is not None:
            exact = _bytes_equal(ref, pal)
            for r in doc["rows"] + [row]:
              if r.get("op") == name and r.get("size") == size and r.get("impl") == "pallas":
                r["exact"] = exact
          if variant_overrides(impl) is not None and pal is not None:
            # a variant against the pallas row: the same bytes or not
            row["exact_vs_pallas"] = _bytes_equal(_kernel_leaves(first[0]),
                                                  _kernel_leaves(pal))
      doc["rows"].append(row)
      log(f"{size:>12} {impl:>9} {name:<16} " + (
          f"{row['time_us']:9.2f} us {row['GBps']:8.1f} GB/s R={n}" if row["status"] == "ok"
          else f"ERROR {row['error'][:200]}"))
      write()
    del inputs, firsts
    gc.collect()
  doc["elapsed_s"] = round(time.perf_counter() - t_start, 1)
  write()
  return doc


def format_table(doc: dict[str, Any]) -> str:
  lines = [f"{'size':>12} {'impl':>12} {'op':<16} {'time us':>9} {'dev us':>8} {'GB/s':>8} "
           f"{'%copy':>6} {'floor':>7} {'%dev':>5} {'exact':>5}", "-" * 97]
  for r in doc["rows"]:
    if r.get("status") != "ok":
      lines.append(f"{r['size']:>12} {r['impl']:>12} {r['op']:<16} ERROR {r.get('error', '')[:60]}")
      continue
    dev = r.get("device_us_per_op")
    pct = r.get("pct_copy")
    exact = r.get("exact", r.get("exact_vs_pallas", "-"))
    floor = r.get("floor_device_us") or r.get("floor_us")
    pdev = r.get("pct_copy_device")
    lines.append(f"{r['size']:>12} {r['impl']:>12} {r['op']:<16} {r['time_us']:9.2f} "
                 f"{(f'{dev:8.1f}' if dev else '       -')} {r['GBps']:8.1f} "
                 f"{(f'{pct:6.1f}' if pct else '     -')} "
                 f"{(f'{floor:7.1f}' if floor else '      -')} "
                 f"{(f'{pdev:5.0f}' if pdev else '    -')} {str(exact):>5}")
  m = doc.get("machine", {})
  lines.append(f"{m.get('device_kind')} jax {m.get('jax')}, commit "
               f"{str(doc.get('git', {}).get('commit'))[:10]}")
  if doc.get("skipped"):
    lines.append(f"skipped (time budget): {', '.join(doc['skipped'])}")
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  cli.no_arguments(argv)
  if _SUMMARIZE.value:
    with open(_SUMMARIZE.value) as f:
      print(format_table(json.load(f)))
    return
  backend = jax.default_backend()
  smoke = backend == "cpu" or os.environ.get("FP8LAB_BENCH_SMOKE") == "1"
  with cli.usage_errors():
    cli.check_choices("case", _CASES.value, CASES)
    cli.check_choices("XLA op", _XLA.value, XLA_OPS)
    cli.check_choices("implementation", _IMPLS.value, IMPLS)
    sizes = _SIZES.value or list(SMOKE_SIZES if smoke else GPU_SIZES)
    for s in sizes:
      parse_size(s)
    for t in _TILES.value:
      if len(t.split("x")) != 3 or not all(v.isdigit() for v in t.split("x")):
        raise ValueError(f"--tiles takes RxCxW (e.g. 16x256x8), got {t!r}")
  interpret = _INTERPRET.value if _INTERPRET.value is not None else backend == "cpu"
  out = _OUT.value or default_out("quantize", smoke)
  doc = run_benchmark(sizes=sizes, cases=_CASES.value, impls=_IMPLS.value, xla_ops=_XLA.value,
                      dtype=_DTYPE.value, out_path=out,
                      reps=_REPS.value or (2 if smoke else 30),
                      warmup=_WARMUP.value if _WARMUP.value is not None else (1 if smoke else 3),
                      interpret=interpret, max_copies=_MAX_COPIES.value,
                      budget_s=_TIME_BUDGET_S.value, smoke=smoke, tiles=_TILES.value)
  print()
  print(format_table(doc))
  print(f"\nresults: {out}")
  bad = [r for r in doc["rows"] if r.get("status") == "error" or r.get("exact") is False
         or r.get("exact_vs_pallas") is False]
  if bad:
    print(f"bench_quantize: {len(bad)} rows failed or differ from the reference",
          file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
