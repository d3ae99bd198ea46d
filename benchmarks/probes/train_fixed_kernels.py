"""Every kernel of one quantized linear's forward + backward at small M (a probe; not a test).

bench_train.py's `fixed` part times a d x d linear at M tokens on the host clock; this prints
what the GPU runs for it: bench_train's own op (`_linear_fwd_bwd`, and `_quantize_only`: the
three quantize calls alone) for each recipe, compiled, run twice back to back under the
profiler, the second call's kernels in launch order with their device time, the idle gap
before each and, for an XLA fusion, what it computes (step_kernels.fusion_summaries). The
sum says how far the fixed cost is from the issue's 10 us and which launches hold it.

  PYTHONPATH=. python3 benchmarks/probes/train_fixed_kernels.py [--m=32] [--d=2048] \\
      [--recipes=bf16,fp8_delayed,fp8_current]
"""

from __future__ import annotations

import math
import sys

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import bench_train as BT
from benchmarks import timing
from fp8lab import training


def _args(recipe: str, m: int, d: int):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((m, d)), jnp.bfloat16)
  w = jnp.asarray(rng.standard_normal((d, d)) / math.sqrt(d), jnp.bfloat16)
  c = jnp.asarray(rng.standard_normal((m, d)), jnp.float32)
  st = None if recipe == BT.BASELINE else training.init_state(recipe, history_length=1024)
  return (x, w, c, st, jax.random.key(1))


def main(argv: list[str]) -> None:
  opts = {"m": "32", "d": "2048", "recipes": "bf16,fp8_delayed,fp8_current"}
  for a in argv:
    k, _, v = a.lstrip("-").partition("=")
    if k not in opts:
      raise SystemExit(f"unknown flag {a!r}; flags: {sorted(opts)}")
    opts[k] = v
  m, d = int(opts["m"]), int(opts["d"])
  for recipe in opts["recipes"].split(","):
    parts = [("linear", BT._linear_fwd_bwd(recipe))]     # pylint: disable=protected-access
    if recipe != BT.BASELINE:
      parts.append(("quantize", BT._quantize_only(recipe)))  # pylint: disable=protected-access
    for part, op in parts:
      args = _args(recipe, m, d)
      compiled = jax.jit(op).lower(*args).compile()
      timing.print_second_call(lambda _, c=compiled, a=args: c(*a), compiled.as_text(),
                               f"{recipe} {part} m={m} d={d}")

if __name__ == "__main__":
  main(sys.argv[1:])
