"""Probe: the GEMV kernel's error against the float64 product, with and without chained dots.

GemvConfig.chain_dots lets the tensor cores carry the float32 accumulator across K steps,
where unchained configs add each step's dots to acc with one float32 add, rounded to
nearest; tensor-core accumulation truncates, so a long chain may drift towards zero. For
random finite weights (kernel_inputs.random_weight) and standard-normal x, the default
config of each format and batch (chain_dots False and True, or --configs) against the
float64 product of the golden-model dequantized weights (kernel_inputs.dequantize64). Per
case, with e = y - y64 and m = |x| @ |W|^T (the scale of the rounding errors):
  rel_max       max|e| / max|y64|, the benchmark's agreement metric;
  err_max_u     max(|e| / m) / u, the error in units of u = 2^-24 (the documented bound is
                2 (k + 7));
  drift_mean_u  mean(e sign(y64) / m) / u, the signed drift (negative: towards zero).
No timing. Results: benchmarks/results/gemv_chain_accuracy_*.

  python benchmarks/probes/accuracy.py --out=$OUT/probe_accuracy.json     # on the GPU
  python benchmarks/probes/accuracy.py --size=64 --batches=1,2 --formats=e4m3  # CPU, interpret
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
import numpy as np  # noqa: E402

from benchmarks import cli  # noqa: E402
from benchmarks import kernel_inputs as KI  # noqa: E402
from fp8lab.kernels import gemv as G  # noqa: E402

_FORMATS = flags.DEFINE_list("formats", ["e4m3", "mxfp8", "mxfp4", "nvfp4", "bf16"],
                             f"Layouts, from {', '.join(KI.LAYOUT_NAMES)}.")
_SIZE = flags.DEFINE_integer("size", 16384, "n_out = k.")
_BATCHES = flags.DEFINE_list("batches", ["1", "16", "64"], "Rows of x.")
_CHAIN = flags.DEFINE_list("chain_dots", ["0", "1"],
                           "chain_dots values tried on each default config (0 / 1).")
_CONFIGS = flags.DEFINE_list(
    "configs", [], "Configs instead of the defaults: block_rows:block_k:num_warps:num_stages"
    "[:k_splits[:batch_block[:chain_dots]]] (then --chain_dots is not applied).")
_INTERPRET = flags.DEFINE_bool("interpret", None, "Interpret mode (default: on a CPU).")
_OUT = flags.DEFINE_string("out", KI.default_out("probe_accuracy.json"),
                           "JSON results path ('' for none; default $OUT/probe_accuracy.json).")
U = 2.0**-24


def main(argv):
  cli.no_arguments(argv)
  with cli.usage_errors():
    KI.check_layouts(_FORMATS.value)
    batches = [int(b) for b in _BATCHES.value]
    chains = [bool(int(c)) for c in _CHAIN.value]
    configs = [KI.parse_config(c) for c in _CONFIGS.value]
  interpret = _INTERPRET.value if _INTERPRET.value is not None else jax.default_backend() == "cpu"
  n = k = _SIZE.value
  rows: list[dict] = []
  print("device", jax.devices()[0].device_kind, "jax", jax.__version__, f"{n}x{k}", flush=True)
  for name in _FORMATS.value:
    t0 = time.time()
    words, scales, ts = KI.random_weight(jax.random.key(0), name, n, k)
    deq = KI.dequantize64(name, words, scales, ts, n, k)
    x = jax.random.normal(jax.random.key(100), (max(batches), k))
    x64 = np.asarray(x, np.float64)
    y64 = x64 @ deq.T
    mag = np.abs(x64) @ np.abs(deq).T
    del deq
    plan = KI.plan_of(name, **KI.default_decode(interpret))
    for b in batches:
      cfgs = configs or [dataclasses.replace(G.gemv_config(plan.format, b, n), chain_dots=c)
                         for c in chains]
      for cfg in cfgs:
        y = np.asarray(G.gemv_pallas(words, scales, ts, x[:b], plan=plan, n_out=n, k=k,
                                     config=cfg, interpret=interpret), np.float64)
        e, want, m = y - y64[:b], y64[:b], mag[:b]
        row = dict(format=name, n=n, k=k, batch=b, config=KI.config_tuple(cfg),
                   rel_max=float(np.abs(e).max() / np.abs(want).max()),
                   err_max_u=float((np.abs(e) / m).max() / U),
                   drift_mean_u=float((e * np.sign(want) / m).mean() / U))
        rows.append(row)
        print(f"{name:8s} B{b:<2d} chain {int(cfg.chain_dots)}  max|e|/max|y| "
              f"{row['rel_max']:.2e}  max e/m {row['err_max_u']:8.1f} u  drift "
              f"{row['drift_mean_u']:+8.2f} u", flush=True)
    print(f"  ({time.time() - t0:.0f} s)", flush=True)
    if _OUT.value:
      os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
      with open(_OUT.value, "w") as fh:
        json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
                       commit=os.environ.get("FP8LAB_GIT_COMMIT"), interpret=interpret,
                       rows=rows), fh, indent=1)


if __name__ == "__main__":
  app.run(main)
