"""Probe: the inline-PTX e2m1 decode (FormatPlan.asm_e2m1) against the shift-and-mask route.

For nvfp4, nvfp4 16x16 and mxfp4 weights, per shape, batch and launch config, the median
device time of the fp8lab_gemv kernel (profiler, benchmarks/timing.py device_kernel_times)
over 3 calls of R distinct weight copies each, after 10 warm-up calls, with asm_e2m1 off and
on; plus whether the two decodes give the same output bits (copy 0). Work is ordered by
priority and stops starting new rows after PROBE_BUDGET_S seconds. One line per
(format, shape, batch, config); JSON in $OUT/probe_e2m1_asm.json.

  PYTHONPATH=. OUT=/tmp/out python3 benchmarks/probe_e2m1_asm.py       # on the GPU
"""
import dataclasses, json, os, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, os.getcwd())
import jax, numpy as np
from benchmarks import timing
from benchmarks.gpu_tune import random_weight, plan_of
from fp8lab.kernels import gemv as G

R = int(os.environ.get("PROBE_COPIES", "8"))
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "300"))
T0 = time.time()
B1 = [(64, 32, 4, 4), (64, 64, 4, 3), (128, 32, 4, 3), (128, 64, 8, 3), (32, 64, 4, 3)]
B16 = [(64, 32, 4, 4), (64, 64, 4, 3), (64, 16, 4, 4), (128, 32, 8, 3)]
B64 = [(64, 16, 4, 3), (128, 32, 8, 2), (64, 32, 4, 2)]
# (format, n_out, k, batch, candidate configs); the default config is tried first.
WORK = [(f, 16384, 16384, b, c) for b, c in ((1, B1), (16, B16))
        for f in ("nvfp4", "mxfp4", "nvfp4_2d")]
WORK += [(f, n, k, b, [(64, 32, 4, 4)]) for n, k in ((4096, 14336), (14336, 4096))
         for b in (1, 16) for f in ("nvfp4", "mxfp4")]
WORK += [(f, 16384, 16384, 64, B64) for f in ("nvfp4", "mxfp4")]
WORK += [(f, 16384, 16384, 4, [(64, 64, 4, 3), (64, 32, 4, 4)]) for f in ("nvfp4", "mxfp4")]

rows = []


def save():
  out = os.environ.get("OUT")
  if out:
    with open(os.path.join(out, "probe_e2m1_asm.json"), "w") as fh:
      json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
                     commit=os.environ.get("FP8LAB_GIT_COMMIT"),
                     date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), copies=R,
                     rows=rows), fh, indent=1)


def kernel_us(plan, cfg, n, k, args):
  f = lambda w, s, t, x: G.gemv_pallas(w, s, t, x, plan=plan, n_out=n, k=k, config=cfg)
  comp = timing.compile_unrolled(f, args)
  for _ in range(10):
    out = comp(args)
  jax.block_until_ready(out)
  dev = timing.device_kernel_times(comp, args, runs=3)
  g = [d for nm, ds in dev.items() if "fp8lab_gemv" in nm for d in ds]
  return float(np.median(g)), np.asarray(out[0])


print("device", jax.devices()[0].device_kind, "jax", jax.__version__, "copies", R, flush=True)
for name, n, k, b, cands in WORK:
  if time.time() - T0 > BUDGET_S:
    print("budget spent: stopping", flush=True)
    break
  ws = [random_weight(jax.random.key(i), name, n, k) for i in range(R)]
  xs = [jax.random.normal(jax.random.key(100 + i), (b, k)) for i in range(R)]
  args = [w + (x,) for w, x in zip(ws, xs)]
  base = plan_of(name)
  default = G.gemv_config(base.format, b)
  cfgs = list(dict.fromkeys([default] + [G.GemvConfig(*c) for c in cands]))
  for cfg in cfgs:
    if time.time() - T0 > BUDGET_S:
      break
    res = {}
    try:
      for asm in (False, True):
        res[asm] = kernel_us(dataclasses.replace(base, asm_e2m1=asm), cfg, n, k, args)
    except Exception as e:                       # a config that does not compile: say so
      print(f"{name} {n}x{k} B{b} {cfg} FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
      continue
    same = bool(np.array_equal(res[False][1].view(np.uint32), res[True][1].view(np.uint32)))
    c = (cfg.block_rows, cfg.block_k, cfg.num_warps, cfg.num_stages)
    row = dict(format=name, n=n, k=k, batch=b, config=c, default=cfg == default,
               off_us=res[False][0], on_us=res[True][0], same_bits=same)
    rows.append(row)
    save()
    print(f"{name:8s} {n}x{k} B{b:<2d} {str(c):18s}{' (default)' if row['default'] else '          '}"
          f"  off {row['off_us']:7.1f}  asm {row['on_us']:7.1f}  same bits {same}", flush=True)
print(f"done in {time.time() - T0:.0f} s", flush=True)
