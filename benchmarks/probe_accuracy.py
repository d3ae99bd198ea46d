"""Probe: the GEMV kernel's error on the GPU, with and without chained dots.

GemvConfig.chain_dots lets the tensor cores carry the float32 accumulator across K steps
(acc = acc + dot_i, folded into the MMA), where unchained configs add each step's dots to
acc with one float32 add, rounded to nearest. Tensor-core accumulation truncates, so a long
chain may drift towards zero. This probe measures it: random finite weights
(gpu_tune.random_weight), standard-normal float32 x, the default config of each format and
batch with chain_dots False and True, against the float64 product of the golden-model
dequantized weights (gpu_tune.dequantize64). Per case, with e = y - y64 and
m = |x| @ |W|^T (the scale of the rounding errors):
  max|e| / max|y64|   the benchmark's agreement metric (there against the reference path),
  max(|e| / m) / u    the error in units of u = 2^-24 (the documented bound is 2 (k + 7)),
  mean(e sign(y64) / m) / u   the signed drift (negative: towards zero).
No timing. JSON in $OUT/probe_accuracy.json.

  PYTHONPATH=. OUT=/tmp/out python3 benchmarks/probe_accuracy.py        # on the GPU
  PROBE_ACC_FORMATS=e4m3,nvfp4 PROBE_ACC_SIZE=4096 (n = k; default 16384)
  PROBE_ACC_SIZE=256 python3 benchmarks/probe_accuracy.py      # dry run on a CPU (interpret)
"""
import dataclasses, json, os, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, os.getcwd())
import jax
import numpy as np
from benchmarks.gpu_tune import plan_of, random_weight, dequantize64
from fp8lab.kernels import gemv as G

FORMATS = os.environ.get("PROBE_ACC_FORMATS", "e4m3,mxfp8,mxfp4,nvfp4,bf16").split(",")
N = K = int(os.environ.get("PROBE_ACC_SIZE", "16384"))
BATCHES = (1, 16, 64)
U = 2.0**-24
INTERPRET = jax.default_backend() == "cpu"       # a dry run here: interpret mode, tiny sizes
rows = []
print("device", jax.devices()[0].device_kind, "jax", jax.__version__, f"{N}x{K}", flush=True)
for name in FORMATS:
  t0 = time.time()
  words, scales, ts = random_weight(jax.random.key(0), name, N, K)
  deq = dequantize64(name, words, scales, ts, N, K)
  x = jax.random.normal(jax.random.key(100), (max(BATCHES), K))
  x64 = np.asarray(x, np.float64)
  y64 = x64 @ deq.T
  mag = np.abs(x64) @ np.abs(deq).T
  del deq
  plan = plan_of(name, native_fp8=G.native_fp8_requested(INTERPRET),
                 asm_e2m1=G.asm_e2m1_default(INTERPRET))
  for b in BATCHES:
    for chain in (False, True):
      cfg = dataclasses.replace(G.gemv_config(name, b, N), chain_dots=chain)
      y = np.asarray(G.gemv_pallas(words, scales, ts, x[:b], plan=plan, n_out=N, k=K,
                                   config=cfg, interpret=INTERPRET), np.float64)
      e, want, m = y - y64[:b], y64[:b], mag[:b]
      row = dict(format=name, n=N, k=K, batch=b, config=dataclasses.astuple(cfg),
                 rel_max=float(np.abs(e).max() / np.abs(want).max()),
                 err_max_u=float((np.abs(e) / m).max() / U),
                 drift_mean_u=float((e * np.sign(want) / m).mean() / U))
      rows.append(row)
      print(f"{name:6s} B{b:<2d} chain {int(chain)}  max|e|/max|y| {row['rel_max']:.2e}  "
            f"max e/m {row['err_max_u']:8.1f} u  drift {row['drift_mean_u']:+8.2f} u", flush=True)
  print(f"  ({time.time() - t0:.0f} s)", flush=True)
  if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "probe_accuracy.json"), "w") as fh:
      json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
                     commit=os.environ.get("FP8LAB_GIT_COMMIT"), rows=rows), fh, indent=1)
