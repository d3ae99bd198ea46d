"""Host cost of one kernel launch inside a jitted step, by kind of kernel (a probe).

The 8B-shaped decode step is launch-bound on the H200 (docs/results.md: host 7.2 ms against
3.2 ms of device time with fp8lab's e4m3 weights). This probe separates the kinds of launch:
one jitted function chains N tiny ops (y = y + 1 over a (128, 128) float32 tile), each its own
kernel, and the host time of one call divided by N is the cost of a launch of that kind:

- xla: XLA fusions, kept apart by lax.optimization_barrier;
- triton: a Pallas kernel through the Triton lowering (pl.pallas_call, the path fp8lab's kernels
  take today);
- mosaic: the same kernel through Mosaic GPU (plgpu.CompilerParams);
- triton_xla: Triton kernels alternating with XLA fusions (what a step with x preparation
  around each GEMV looks like).

Run once per XLA_FLAGS setting (command buffers are chosen when the backend starts). Prints one
line per kind: host us per op (median of reps), and the device us per op from the profiler
where --device_time is set. Not a test; numbers go to docs/results.md.
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

SHAPE = (128, 128)


def _add_one_kernel(x_ref, o_ref):
  o_ref[...] = x_ref[...] + 1.0


def triton_add(x):
  from jax.experimental.pallas import triton as pltriton
  return pl.pallas_call(_add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1))(x)


def mosaic_add(x):
  from jax.experimental.pallas import mosaic_gpu as plgpu
  return pl.pallas_call(_add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                        compiler_params=plgpu.CompilerParams())(x)


def xla_add(x):
  return jax.lax.optimization_barrier(x + 1.0)


def chain(kind, n):
  ops = {"xla": [xla_add], "triton": [triton_add], "mosaic": [mosaic_add],
         "triton_xla": [triton_add, xla_add], "mosaic_xla": [mosaic_add, xla_add]}[kind]

  def f(x):
    for i in range(n):
      x = ops[i % len(ops)](x)
    return x
  return f


def time_call(fn, x, reps, vary=False):
  """Median host time of fn(x); with vary the calls alternate between x and a copy of it
  (another buffer), so that the buffers a step reads change from call to call."""
  xs = [x, jnp.array(x, copy=True)] if vary else [x]
  out = fn(x)
  jax.block_until_ready(out)
  for i in range(3):
    jax.block_until_ready(fn(xs[i % len(xs)]))
  samples = []
  for i in range(reps):
    xi = xs[i % len(xs)]
    t0 = time.perf_counter()
    jax.block_until_ready(fn(xi))
    samples.append(time.perf_counter() - t0)
  return float(np.median(samples)), out


def device_per_op(compiled, x, n, runs=3):
  """(device us per op, kernels per call) from the profiler, or None off a GPU."""
  from benchmarks import timing
  kt = timing.device_kernel_times(compiled, x, runs=runs)
  if not kt:
    return None
  total = sum(sum(v) for v in kt.values()) / runs
  kernels = sum(len(v) for v in kt.values()) / runs
  return total / n, kernels


def main():
  n = int(os.environ.get("PROBE_N", "256"))
  reps = int(os.environ.get("PROBE_REPS", "30"))
  kinds = os.environ.get("PROBE_KINDS", "xla,triton,mosaic,triton_xla,mosaic_xla").split(",")
  x = jnp.zeros(SHAPE, jnp.float32)
  vary = os.environ.get("PROBE_VARY") == "1"
  empty = jax.jit(lambda x: x + 1.0)
  t_empty, _ = time_call(empty, x, reps, vary)
  rows = {"xla_flags": os.environ.get("XLA_FLAGS", ""), "n": n, "vary_inputs": vary,
          "empty_call_us": t_empty * 1e6}
  print(f"XLA_FLAGS='{rows['xla_flags']}' n={n} vary={vary} empty call {t_empty*1e6:.1f} us",
        flush=True)
  for kind in kinds:
    try:
      fn = jax.jit(chain(kind, n)).lower(x).compile()
      t, out = time_call(fn, x, reps, vary)
      ok = bool(np.all(np.asarray(out) == n))
      per = (t - t_empty) / n * 1e6
      dev = device_per_op(fn, x, n) if os.environ.get("PROBE_DEVICE", "1") == "1" else None
      rows[kind] = {"call_us": t * 1e6, "per_op_us": per, "correct": ok,
                    "device_per_op_us": dev and dev[0], "kernels_per_call": dev and dev[1]}
      dtxt = f"device {dev[0]:6.2f} us/op, {dev[1]:.0f} kernels" if dev else "device n/a"
      print(f"{kind:12s} call {t*1e6:9.1f} us  host per op {per:6.2f} us  {dtxt}  "
            f"correct={ok}", flush=True)
    except Exception as e:  # noqa: BLE001 - a probe: report the failure and go on
      msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
      rows[kind] = {"error": f"{type(e).__name__}: {msg}"}
      print(f"{kind:12s} FAILED {type(e).__name__}: {msg}", flush=True)
  out_path = os.environ.get("PROBE_OUT")
  if out_path:
    with open(out_path, "w") as f:
      json.dump(rows, f, indent=1)


if __name__ == "__main__":
  main()
