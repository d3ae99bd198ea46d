"""Probe: one FormatPlan decode flag off and on, per shape, batch and launch config.

PROBE_FLAG names the flag: "asm_e2m1" (the inline-PTX e2m1 decode against the shift-and-mask
route; results/gemv_e2m1_asm_h200_20261130.txt, run as probe_e2m1_asm.py at 569c752) or
"native_scale" (NVFP4's E4M3 block scales by cvt.rn.f16x2.e4m3x2 against the integer decode;
asm_e2m1 on in both). For each case, the median device time of the fp8lab_gemv kernel
(profiler, benchmarks/timing.py device_kernel_times) over 3 calls of R distinct weight copies
each, after 10 warm-up calls, with the flag off and on; plus whether the two give the same
output bits (copy 0). Work is ordered by priority and stops starting new rows after
PROBE_BUDGET_S seconds. One line per (format, shape, batch, config); JSON in
$OUT/probe_<flag>.json.

  PYTHONPATH=. OUT=/tmp/out PROBE_FLAG=native_scale python3 benchmarks/probe_decode.py   # GPU
"""
import dataclasses, json, os, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, os.getcwd())
import jax, numpy as np
from benchmarks.gpu_tune import plan_of, probe_args, gemv_device_us
from fp8lab.kernels import gemv as G

R = int(os.environ.get("PROBE_COPIES", "8"))
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "300"))
FLAG = os.environ.get("PROBE_FLAG", "asm_e2m1")
T0 = time.time()
if FLAG == "asm_e2m1":
  BASE = {}
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
elif FLAG == "native_scale":
  BASE = {"asm_e2m1": True}
  B1 = [(128, 32, 4, 3), (64, 32, 4, 4), (128, 32, 4, 4), (128, 64, 8, 3), (256, 32, 8, 3)]
  B16 = [(64, 32, 4, 4), (128, 32, 8, 3), (128, 16, 4, 4), (64, 32, 4, 3)]
  LLM = [(128, 32, 4, 3), (64, 32, 4, 4)]
  WORK = [(f, 16384, 16384, b, c) for b, c in ((1, B1), (16, B16)) for f in ("nvfp4", "nvfp4_2d")]
  WORK += [("nvfp4", n, k, b, LLM) for n, k in ((4096, 14336), (14336, 4096)) for b in (1, 16)]
  WORK += [("nvfp4", 16384, 16384, 64, [(64, 16, 4, 3), (128, 16, 8, 3)])]
else:
  raise SystemExit(f"unknown PROBE_FLAG {FLAG!r}")

rows = []


def save():
  out = os.environ.get("OUT")
  if out:
    with open(os.path.join(out, f"probe_{FLAG}.json"), "w") as fh:
      json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__, flag=FLAG,
                     base=BASE, commit=os.environ.get("FP8LAB_GIT_COMMIT"),
                     date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), copies=R,
                     rows=rows), fh, indent=1)


def kernel_us(plan, cfg, n, k, args):
  us, _, out = gemv_device_us(plan, cfg, n, k, args)
  return us, out


print("device", jax.devices()[0].device_kind, "jax", jax.__version__, "copies", R, "flag", FLAG,
      "base", BASE, flush=True)
for name, n, k, b, cands in WORK:
  if time.time() - T0 > BUDGET_S:
    print("budget spent: stopping", flush=True)
    break
  args = probe_args(name, n, k, b, R)
  base = dataclasses.replace(plan_of(name), **BASE)
  default = G.gemv_config(base.format, b)
  cfgs = list(dict.fromkeys([default] + [G.GemvConfig(*c) for c in cands]))
  for cfg in cfgs:
    if time.time() - T0 > BUDGET_S:
      break
    res = {}
    try:
      for on in (False, True):
        res[on] = kernel_us(dataclasses.replace(base, **{FLAG: on}), cfg, n, k, args)
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
          f"  off {row['off_us']:7.1f}  on {row['on_us']:7.1f}  same bits {same}", flush=True)
print(f"done in {time.time() - T0:.0f} s", flush=True)
