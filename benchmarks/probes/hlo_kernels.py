"""Lists the kernels XLA runs for jax.jit(fp8lab.gemv_packed): the fusions and custom calls
(a compiled Pallas kernel is one) of the optimized HLO's ENTRY computation, i.e. x's
preparation around the GEMV. Result: benchmarks/results/gemv_xprep_hlo_h200_*.txt.

  python benchmarks/probes/hlo_kernels.py                            # on the GPU
  python benchmarks/probes/hlo_kernels.py --cases=e4m3:1,nvfp4:16 --size=4096
  python benchmarks/probes/hlo_kernels.py --size=64 --cases=mxfp4:4 --interpret   # CPU
"""

from __future__ import annotations

import os
import re
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)   # run as a script: fp8lab and benchmarks from the working tree

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import cli  # noqa: E402
from benchmarks import kernel_inputs as KI  # noqa: E402
import fp8lab  # noqa: E402

_CASES = flags.DEFINE_list("cases", ["e4m3:1", "e4m3:16", "nvfp4:1", "mxfp4:1"],
                           f"layout:batch pairs; layouts from {', '.join(KI.LAYOUT_NAMES)}.")
_SIZE = flags.DEFINE_integer("size", 16384, "n_out = k.")
_IMPL = flags.DEFINE_enum("implementation", None, ["pallas", "reference", "xla"],
                          "gemv_packed's implementation (default: its own choice).")
_INTERPRET = flags.DEFINE_bool("interpret", False, "gemv_packed's interpret=True (CPU).")
_X_DTYPE = flags.DEFINE_enum("x_dtype", "float32", ["float32", "bfloat16", "float16"],
                             "dtype of x.")
_WIDTH = flags.DEFINE_integer("width", 260, "Characters printed per HLO line.")


def entry_lines(hlo_text: str) -> list[str]:
  """The instruction lines of the ENTRY computation of optimized HLO, stripped."""
  entry = hlo_text[hlo_text.index("ENTRY"):]
  entry = entry[:entry.find("\n}") + 1 or None]
  return [line.strip() for line in entry.splitlines()[1:] if line.strip()]


def entry_kernels(hlo_text: str) -> list[str]:
  """The fusion and custom-call instructions of the ENTRY computation of optimized HLO."""
  return [line for line in entry_lines(hlo_text) if re.search(r" (fusion|custom-call)\(", line)]


def main(argv):
  cli.no_arguments(argv)
  with cli.usage_errors():
    cases = []
    for c in _CASES.value:
      name, _, batch = c.partition(":")
      KI.layout(name)
      cases.append((name, int(batch or 1)))
  n = _SIZE.value
  kwargs = dict(implementation=_IMPL.value, interpret=_INTERPRET.value)
  for name, b in cases:
    q, block_shape = KI.layout(name)
    w = fp8lab.quantize(jax.random.normal(jax.random.key(0), (n, n)), q.name,
                        block_shape=block_shape)
    x = jax.random.normal(jax.random.key(1), (n,) if b == 1 else (b, n)).astype(
        jnp.dtype(_X_DTYPE.value))
    f = jax.jit(lambda w, x: fp8lab.gemv_packed(w, x, **kwargs))
    compiled = f.lower(w, x).compile()
    jax.block_until_ready(compiled(w, x))
    lines = entry_kernels(compiled.as_text())
    print(f"== {name} batch {b} ({len(lines)} kernels)", flush=True)
    for line in lines:
      print("  ", line[:_WIDTH.value], flush=True)


if __name__ == "__main__":
  app.run(main)
