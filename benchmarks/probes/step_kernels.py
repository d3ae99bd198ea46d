"""Every kernel of one decode step, in launch order (a probe; not a test).

Builds bench_decode.py's step (its weights, caches, linear layers and attention) for a few
layers at the 8B widths, runs it twice back to back under the profiler, and prints the
second step's kernels in the order the GPU ran them: device time, the idle gap before it,
and for an XLA fusion what it computes (its kind and the opcodes of its fused computation,
from the optimized HLO). The rows of one layer say which small kernels sit around the
GEMVs and the attention kernel, and what fusing them could save.

  PYTHONPATH=. python3 benchmarks/probes/step_kernels.py fp8lab_e4m3:e4m3_block:1x4096 \\
      [path:kv:BxL ...] [--layers=3]
"""

from __future__ import annotations

import dataclasses
import sys

import jax
import jax.numpy as jnp

from benchmarks import bench_decode as BD
from benchmarks import timing

def main(argv: list[str]) -> None:
  layers, smoke = 3, False
  cases = []
  for a in argv:
    if a.startswith("--layers="):
      layers = int(a.split("=", 1)[1])
    elif a == "--smoke":                 # the tiny model's widths (a CPU check of the script)
      smoke = True
    else:
      cases.append(a)
  model = (dataclasses.replace(BD.SMOKE_MODEL, layers=layers, head_dim=64) if smoke
           else dataclasses.replace(BD.LLAMA3_8B, layers=layers))
  for case in cases:
    path, kv, bl = case.split(":")
    batch, kv_len = BD.parse_case(bl)
    params = BD.make_params(path, model, 0)
    linear = BD.make_linear(path, None, False, jnp.bfloat16)
    attn = "cudnn" if jax.default_backend() == "gpu" else "xla"
    step = BD.make_step(model, linear, attn, kv, {}, "auto")
    caches = BD.make_caches(model, batch, kv_len, 1, kv)
    tokens = jnp.zeros((batch,), jnp.int32)
    compiled = jax.jit(step, donate_argnums=(1,)).lower(params, caches, tokens).compile()
    run = BD.Stepper(compiled, params, caches, tokens)
    jax.block_until_ready(run())
    timing.print_second_call(lambda _: run(), compiled.as_text(),
                             f"{path} kv={kv} B={batch} L={kv_len} layers={layers}")
    del run, compiled, params, caches


if __name__ == "__main__":
  main(sys.argv[1:])
