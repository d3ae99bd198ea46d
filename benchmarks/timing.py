"""Timing helpers shared by fp8lab's benchmarks.

How an op is timed (the method every number in benchmarks/results/ comes from):

1. The op is applied to R distinct copies of its inputs inside ONE jitted function (an unrolled
   Python loop; every result is returned, so none is dead code). One call therefore runs the op
   R times and pays JAX's per-call dispatch and the host-device synchronisation (~10-20 us on a
   GPU, comparable to a GEMV) once; the time per op is the call's time divided by R.
2. The copies are distinct arrays (distinct random data, distinct x too), so XLA can neither
   common-subexpression-eliminate the R ops nor merge them into one dot over a shared operand
   (XLA's dot merger would concatenate weights that share an x), and consecutive ops read
   different memory: with R copies holding more than ~4x the L2 cache, each op finds its
   weights in HBM, as a decode step would.
3. The function is compiled ahead of time (jax.jit(...).lower(...).compile()), run `warmup`
   times, then `reps` times, each call followed by jax.block_until_ready; the host clock
   (time.perf_counter) around each call gives one sample. Reported: the median over the reps
   (and the 25th/75th percentiles and the minimum), divided by R.
4. The dispatch overhead of an (almost) empty compiled call is measured with the same loop and
   reported beside the numbers, so a reader can see how much of it (overhead / R) can remain
   in a per-op time; R is chosen large enough that this is about 1% for the large shapes.
5. A whole model step (bench_decode) is also timed as a generation loop runs it: N calls
   enqueued back to back with one sync at the end (time_pipelined), so the host's dispatch of
   call i+1 overlaps the GPU's work on call i; gpu_busy profiles the same back-to-back calls
   (GPU span, busy and idle time per call, top kernels).
"""

from __future__ import annotations

import collections
import dataclasses
import re
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Timing", "choose_copies", "compile_unrolled", "time_compiled",
           "dispatch_overhead_s", "outputs_distinct", "count_hlo_ops", "device_kernel_times",
           "gpu_busy", "fusion_summaries", "print_second_call", "time_pipelined", "measure", "nbytes", "METHOD"]

METHOD = (
    "per-op time = median over reps of the host time of one compiled call that applies the op "
    "to R distinct copies of the inputs (unrolled inside one jit, every result returned; "
    "jax.block_until_ready after each call; warm-up calls first), divided by R. Distinct "
    "copies defeat CSE/dot merging and make consecutive ops read different memory (R copies "
    "exceed ~4x L2 where the weights are small). The dispatch overhead of an empty call is "
    "reported separately (dispatch_overhead_us); at most overhead/R of it is in a per-op time.")


@dataclasses.dataclass(frozen=True)
class Timing:
  """Per-op times in microseconds (call time / copies) and how they were taken."""
  median_us: float
  p25_us: float
  p75_us: float
  min_us: float
  copies: int
  reps: int
  warmup: int

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def choose_copies(bytes_per_copy: int, *, l2_bytes: int, call_bytes: int, max_bytes: int,
                  min_copies: int = 4, max_copies: int = 128) -> int:
  """How many distinct input copies one timed call should apply the op to.

  At least enough copies that they hold 4x the L2 cache (so each op reads HBM) and that one
  call moves `call_bytes` (so the per-call dispatch overhead is small against the call), at
  least `min_copies`; at most `max_copies` (compile time grows with the unrolled count) and
  at most what fits in `max_bytes` of device memory (but never fewer than one).
  """
  if bytes_per_copy <= 0:
    raise ValueError(f"bytes_per_copy must be positive, got {bytes_per_copy}")
  want = max(min_copies, -(-4 * l2_bytes // bytes_per_copy), -(-call_bytes // bytes_per_copy))
  fits = max(1, max_bytes // bytes_per_copy)
  return int(max(1, min(want, max_copies, fits)))


def compile_unrolled(op: Callable[..., Any], example_args: Sequence[Sequence[Any]]):
  """Compiles one function applying `op` to each argument tuple in `example_args`.

  `example_args[i]` is the i-th copy's argument tuple (pytrees of device arrays). The
  returned compiled function takes the list of argument tuples and returns the tuple of all
  R results. `op` is wrapped in its own jax.jit so that it is traced and lowered once and
  called R times from the outer function.
  """
  inner = jax.jit(op)

  def unrolled(copies):
    return tuple(inner(*args) for args in copies)

  return jax.jit(unrolled).lower(list(example_args)).compile()


def _sample(call: Callable[[], Any], *, reps: int, warmup: int, per: int) -> Timing:
  """Timing of `call()` (its output blocked on): `warmup` untimed calls, then the median
  (and percentiles, min) over `reps` timed ones, each divided by `per` (in Timing.copies)."""
  for _ in range(warmup):
    jax.block_until_ready(call())
  samples = np.empty(reps)
  for i in range(reps):
    t0 = time.perf_counter()
    out = call()
    jax.block_until_ready(out)
    samples[i] = time.perf_counter() - t0
    del out
  each = samples / per * 1e6
  return Timing(median_us=float(np.median(each)), p25_us=float(np.percentile(each, 25)),
                p75_us=float(np.percentile(each, 75)), min_us=float(each.min()),
                copies=per, reps=reps, warmup=warmup)


def time_compiled(compiled, args: Any, *, reps: int, warmup: int, copies: int) -> Timing:
  """Times `compiled(args)` (see the module docstring); per-op times are call times / copies."""
  if reps < 1 or copies < 1:
    raise ValueError(f"reps and copies must be >= 1, got {reps}, {copies}")
  return _sample(lambda: compiled(args), reps=reps, warmup=warmup, per=copies)


def dispatch_overhead_s(reps: int = 200) -> float:
  """Median host time of a compiled call that does almost nothing (one tiny add), seconds."""
  x = jax.device_put(jnp.zeros((8,), jnp.float32) + 1.0)
  compiled = jax.jit(lambda v: v + 1.0).lower(x).compile()
  t = time_compiled(compiled, x, reps=reps, warmup=10, copies=1)
  return t.median_us * 1e-6


def outputs_distinct(outs: Sequence[Any]) -> bool:
  """True when every result after the first differs from the first somewhere.

  The copies hold different random data, so identical results would mean the compiled
  function did not really apply the op to each copy (or the copies were not distinct).
  Compared on the host (np.asarray), so no extra compilation per shape.
  """
  first = np.asarray(outs[0], np.float32)
  return all(np.any(np.asarray(o, np.float32) != first) for o in outs[1:])


def count_hlo_ops(hlo_text: str) -> dict[str, int]:
  """Counts dots, convolutions, custom calls (a compiled Pallas kernel is one), fusions and
  while loops in optimized HLO text.

  Used to check that the unrolled function kept R copies of the work (a dot may appear inside
  a fusion's body and once more as the fusion's call; the counts are evidence, not exact op
  counts).
  """
  return {
      "dot": len(re.findall(r"\bdot\(", hlo_text)),
      "convolution": len(re.findall(r"\bconvolution\(", hlo_text)),
      "custom_call": len(re.findall(r"\bcustom-call\(", hlo_text)),
      "fusion": len(re.findall(r"\bfusion\(", hlo_text)),
      # An interpret-mode Pallas kernel is a while loop over its grid (one per copy).
      "while": len(re.findall(r"\bwhile\(", hlo_text)),
  }


_FUSION_SKIP = {"parameter", "constant", "bitcast", "get-tuple-element", "tuple"}


def fusion_summaries(hlo: str) -> dict[str, str]:
  """fusion instruction name -> 'kind: opcode counts' of its fused computation."""
  comps: dict[str, list[str]] = {}
  cur = None
  for line in hlo.splitlines():
    m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
    if m and not line.startswith(" "):
      cur = m.group(1)
      comps[cur] = []
      continue
    if cur is not None and line.startswith(" "):
      op = re.search(r"= [^ ]+ ([\w\-]+)\(", line)
      if op:
        comps[cur].append(op.group(1))
  out = {}
  for line in hlo.splitlines():
    m = re.search(r"%?([\w.\-]+) = (\S+) fusion\(.*kind=(\w+).*calls=%?([\w.\-]+)", line)
    if m:
      ops = collections.Counter(o for o in comps.get(m.group(4), []) if o not in _FUSION_SKIP)
      out[m.group(1)] = (f"{m.group(3)} {m.group(2)[:40]}: "
                         + ",".join(f"{k}{'x%d' % v if v > 1 else ''}"
                                    for k, v in ops.most_common(8)))
  return out


def print_second_call(call: Callable[[Any], Any], hlo: str, title: str) -> None:
  """Runs `call(None)` twice back to back under the profiler and prints the second call's
  GPU kernels in launch order: device time, the idle gap before each and, for an XLA
  fusion, what it computes (fusion_summaries of the optimized HLO `hlo`); a header line
  `== title: ...` with their count, device time and span (or that the trace had none)."""
  summaries = fusion_summaries(hlo)
  events = sorted(_gpu_kernel_events(call, None, runs=2, sync_each=False), key=lambda e: e[1])
  n = len(events) // 2
  if not n:
    print(f"== {title}: no GPU kernels in the trace; {len(summaries)} fusions in the HLO",
          flush=True)
    return
  second = events[n:]
  print(f"== {title}: {n} kernels, device {sum(e[2] - e[1] for e in second) / 1e3:.1f} us, "
        f"span {(second[-1][2] - second[0][1]) / 1e3:.1f} us", flush=True)
  prev_end = second[0][1]
  for name, start, end in second:
    short = re.sub(r"^void |\(.*$", "", name)[:48]
    print(f"  {(end - start) / 1e3:7.2f} us  gap {(start - prev_end) / 1e3:6.2f}  {short:<48} "
          f"{summaries.get(name, '')[:110]}", flush=True)
    prev_end = end


def _gpu_kernel_events(compiled, args: Any, *, runs: int,
                       sync_each: bool) -> list[tuple[str, int, int]]:
  """(name, start_ns, end_ns) of every GPU kernel over `runs` calls of `compiled(args)`, read
  from JAX's profiler (CUPTI activity records of the GPU streams); [] when the trace has no
  GPU stream. sync_each: jax.block_until_ready after every call (else only after the last, so
  the calls are enqueued back to back, as a generation loop does)."""
  from jax._src.lib import _profiler            # pylint: disable=import-outside-toplevel
  from jax.profiler import ProfileData          # pylint: disable=import-outside-toplevel
  jax.block_until_ready(compiled(args))
  session = _profiler.ProfilerSession(_profiler.ProfileOptions())
  out = None
  for _ in range(runs):
    out = compiled(args)
    if sync_each:
      jax.block_until_ready(out)
  jax.block_until_ready(out)
  data = ProfileData.from_serialized_xspace(session.stop())
  events = []
  for plane in data.planes:
    if not plane.name.startswith("/device:GPU"):
      continue
    for line in plane.lines:
      if not line.name.lower().startswith("stream"):
        continue
      events += [(ev.name, ev.start_ns, ev.end_ns) for ev in line.events]
  return events


def device_kernel_times(compiled, args: Any, *, runs: int = 3) -> dict[str, list[float]] | None:
  """GPU kernel durations (us) by kernel name over `runs` calls of `compiled(args)`.

  Read from JAX's profiler (CUPTI activity records of the GPU streams), so they are device
  times with no host dispatch in them. None when the trace has no GPU stream (a CPU run, or
  a profiler that could not start)."""
  out: dict[str, list[float]] = {}
  for name, start, end in _gpu_kernel_events(compiled, args, runs=runs, sync_each=True):
    out.setdefault(name, []).append((end - start) / 1e3)
  return out or None


def gpu_busy(compiled, args: Any, *, runs: int, top: int = 12) -> dict[str, Any] | None:
  """How the GPU spends `runs` calls of `compiled(args)` enqueued back to back (no sync
  between them), per call, in us: span (first kernel's start to last kernel's end), busy
  (the union of the kernels' intervals), idle = span - busy (launch gaps and waits on the
  host), kernels, and the `top` kernel names by device time (us and launches per call).
  None without GPU events."""
  events = _gpu_kernel_events(compiled, args, runs=runs, sync_each=False)
  if not events:
    return None
  events.sort(key=lambda e: e[1])
  busy, cur_start, cur_end = 0, events[0][1], events[0][2]
  for _, start, end in events[1:]:
    if start > cur_end:
      busy += cur_end - cur_start
      cur_start, cur_end = start, end
    else:
      cur_end = max(cur_end, end)
  busy += cur_end - cur_start
  span = max(e[2] for e in events) - events[0][1]
  by_name: dict[str, list[float]] = {}
  for name, start, end in events:
    by_name.setdefault(name, []).append((end - start) / 1e3)
  ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
  return {"runs": runs, "span_us": span / 1e3 / runs, "busy_us": busy / 1e3 / runs,
          "idle_us": (span - busy) / 1e3 / runs, "kernels": len(events) / runs,
          "top": [{"name": n[:120], "us": sum(d) / runs, "launches": len(d) / runs}
                  for n, d in ranked]}


def time_pipelined(fn: Callable[[], Any], *, steps: int, reps: int, warmup: int) -> Timing:
  """Per-call time of `fn()` called `steps` times back to back with one
  jax.block_until_ready at the end (the host enqueues call i+1 while the GPU runs call i, as
  a generation loop whose tokens stay on the device does): median over reps of the elapsed
  time / steps (Timing.copies = steps; each warm-up is one call)."""
  if reps < 1 or steps < 1:
    raise ValueError(f"reps and steps must be >= 1, got {reps}, {steps}")
  for _ in range(warmup):
    jax.block_until_ready(fn())

  def run_steps():
    out = None
    for _ in range(steps):
      out = fn()
    return out
  return _sample(run_steps, reps=reps, warmup=0, per=steps)


def nbytes(tree: Any) -> int:
  """Bytes of the arrays in a pytree (leaves without a dtype count 0)."""
  return int(sum(int(np.prod(a.shape)) * jnp.dtype(a.dtype).itemsize
                 for a in jax.tree_util.tree_leaves(tree) if hasattr(a, "dtype")))


def measure(op: Callable[..., Any], args: Sequence[Sequence[Any]], *, reps: int,
            warmup: int) -> tuple[dict[str, Any], Any]:
  """One benchmark row of `op` over the copies `args` by the method above: (row, outputs
  of the first call, or None if it failed). row: compile_s, timing, time_us (per op),
  on a GPU device_us_per_op / kernels_per_op (the profiler's kernels; device_error if it
  failed), and status "ok", or "error" with the error's text."""
  row: dict[str, Any] = {}
  outs = None
  try:
    t0 = time.perf_counter()
    compiled = compile_unrolled(op, args)
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    outs = compiled(args)
    t = time_compiled(compiled, args, reps=reps, warmup=warmup, copies=len(args))
    row["timing"], row["time_us"] = t.as_dict(), t.median_us
    if jax.default_backend() == "gpu":
      try:
        dev = device_kernel_times(compiled, args, runs=3)
      except Exception as e:  # pylint: disable=broad-except
        dev, row["device_error"] = None, f"{type(e).__name__}: {e}"[:300]
      if dev:
        row["device_us_per_op"] = sum(map(sum, dev.values())) / (3 * len(args))
        row["kernels_per_op"] = sum(map(len, dev.values())) / (3 * len(args))
    row["status"] = "ok"
  except Exception as e:  # pylint: disable=broad-except
    row["status"], row["error"] = "error", f"{type(e).__name__}: {e}"[:2000]
  return row, outs
