"""GEMV kernel launches of one or more formats for Nsight Compute (hardware counters).

Runs fp8lab's kernel with the choices gemv_packed would make here (config, native / asm
decodes) or --config, at --size x --size and batch --batch, --launches launches per format.
ncu prints its report only when the program exits and replays each profiled kernel ~18
times for the sections below, so profile one format per process and only its last launch:

  ncu --clock-control none -k regex:fp8lab_gemv --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section SchedulerStats \
      --section WarpStateStats --section LaunchStats \
      python3 benchmarks/probes/ncu_gemv.py --formats=nvfp4

benchmarks/probes/ncu_run.sh runs this recipe per format (sections, stall and pipe metrics,
and the SASS source page with NCU_SOURCE=1; ncu_sass_mix.py summarizes that page). Results:
benchmarks/results/gemv_ncu_h200_*.txt. On a CPU it runs in interpret mode (a dry run).
"""

from __future__ import annotations

import os
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)   # run as a script: fp8lab and benchmarks from the working tree

from absl import app, flags  # noqa: E402
import jax  # noqa: E402

from benchmarks import cli  # noqa: E402
from benchmarks import kernel_inputs as KI  # noqa: E402
from fp8lab.kernels import gemv as G  # noqa: E402

_FORMATS = flags.DEFINE_list("formats", ["nvfp4", "mxfp4", "e4m3"],
                             f"Layouts, from {', '.join(KI.LAYOUT_NAMES)}.")
_SIZE = flags.DEFINE_integer("size", 16384, "n_out = k.")
_BATCH = flags.DEFINE_integer("batch", 1, "Rows of x.")
_CONFIG = flags.DEFINE_string(
    "config", None, "block_rows:block_k:num_warps:num_stages[:k_splits[:batch_block"
    "[:chain_dots]]] instead of the default config (',' separates too).")
_LAUNCHES = flags.DEFINE_integer("launches", 3, "Launches per format (ncu's --launch-skip "
                                 "and --launch-count pick among them).")
_INTERPRET = flags.DEFINE_bool("interpret", None, "Interpret mode (default: on a CPU).")


def main(argv):
  cli.no_arguments(argv)
  with cli.usage_errors():
    KI.check_layouts(_FORMATS.value)
    config = KI.parse_config(_CONFIG.value) if _CONFIG.value else None
  interpret = _INTERPRET.value if _INTERPRET.value is not None else jax.default_backend() == "cpu"
  n, b = _SIZE.value, _BATCH.value
  for name in _FORMATS.value:
    words, scales, ts = KI.random_weight(jax.random.key(0), name, n, n)
    x = jax.random.normal(jax.random.key(1), (b, n))
    plan = KI.plan_of(name, **KI.default_decode(interpret))
    f = jax.jit(lambda w, s, t, v, plan=plan: G.gemv_pallas(
        w, s, t, v, plan=plan, n_out=n, k=n, config=config, interpret=interpret))
    for _ in range(_LAUNCHES.value):
      jax.block_until_ready(f(words, scales, ts, x))
    print(name, "plan", plan, "config", config or G.gemv_config(plan.format, b, n), flush=True)


if __name__ == "__main__":
  app.run(main)
