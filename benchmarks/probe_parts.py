"""Probe: where the GEMV kernel's time goes, by leaving parts of the main loop out.

Variants of the kernel (monkeypatched here, never in the library), same grid, loads, dots
and epilogue; their outputs are wrong on purpose, only the time is read:
  full      the kernel as gemv_packed runs it;
  noscale   block scales not applied to the planes (NVFP4: no E4M3 decode or multiply;
            MX: no factors; the first loop over the scale codes stays);
  trivial   no decode and no scales: every plane is the word tile's low halves as float16
            (meant as loads, dots, x tiles, pipeline and epilogue only; measured slower than
            noscale for every format, so Triton's code for it differs: not a floor);
(Until the MX kernel took each row's largest scale from a first loop over the scale codes,
variants mx_nomax / mx_nofar measured the per-K-step maximum and far check it replaced:
gemv_parts_h200_20261130.txt, at 0e6f11e.)
Median device time of the fp8lab_gemv kernel (profiler, 3 calls of R copies after 10
warm-ups) per format / batch / config / variant. Results:
benchmarks/results/gemv_parts_h200_20261130.txt.

  PYTHONPATH=. python3 benchmarks/probe_parts.py      # on the GPU
  PARTS_SET=mx PARTS_VARIANTS=full,noscale PYTHONPATH=. python3 benchmarks/probe_parts.py
"""
import os, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, os.getcwd())
import jax, jax.numpy as jnp
from jax import lax
from benchmarks.gpu_tune import plan_of, probe_args, gemv_device_us
from fp8lab.kernels import gemv as G

R = int(os.environ.get("PROBE_COPIES", "8"))
S = 16384
ORIG = {"_decode": G._decode, "_weight_planes": G._weight_planes}


def noscale(words, codes, plan, interpret=False, m=None):
  return G._decode(words, plan, interpret)


def trivial_decode(words, plan, interpret):
  return [lax.bitcast_convert_type(words.astype(jnp.uint16), jnp.float16)] * plan.per_word


PATCHES = {"full": {}, "noscale": {"_weight_planes": noscale},
           "trivial": {"_weight_planes": noscale, "_decode": trivial_decode}}


def kernel_us(plan, cfg, args, variant):
  for name, fn in ORIG.items():
    setattr(G, name, PATCHES[variant].get(name, fn))
  jax.clear_caches()                  # gemv_pallas's traces are cached: retrace
  try:
    return gemv_device_us(plan, cfg, S, S, args)[0]
  finally:
    for name, fn in ORIG.items():
      setattr(G, name, fn)


VARIANTS = os.environ.get("PARTS_VARIANTS", "full,noscale,trivial").split(",")
WORK = [("nvfp4", 1, [(128, 32, 4, 3, 0), (128, 32, 4, 3, 4), (64, 64, 4, 3, 2),
                      (128, 64, 8, 3, 2), (64, 32, 4, 4, 0)]),
        ("mxfp4", 1, [(64, 64, 4, 3, 0), (64, 64, 4, 3, 2), (128, 32, 4, 3, 0)]),
        ("e4m3", 1, [(64, 64, 4, 3, 0)]),
        ("nvfp4", 16, [(64, 32, 4, 4, 0), (128, 32, 4, 3, 0)]),
        ("mxfp4", 16, [(64, 32, 4, 4, 0)])]
if os.environ.get("PARTS_SET") == "mx":
  WORK = [("mxfp4", 1, [(64, 64, 4, 3, 0), (128, 32, 4, 3, 0), (64, 32, 4, 4, 0)]),
          ("mxfp8", 1, [(64, 64, 4, 3, 0), (128, 64, 4, 3, 0)]),
          ("mxfp4", 16, [(64, 32, 4, 4, 0), (128, 32, 4, 3, 0)]),
          ("mxfp8", 16, [(64, 64, 4, 3, 0)])]
print("device", jax.devices()[0].device_kind, "jax", jax.__version__, "copies", R, flush=True)
for name, b, cands in WORK:
  args = probe_args(name, S, S, b, R)
  plan = plan_of(name, native_fp8=G.native_fp8_requested(), asm_e2m1=G.asm_e2m1_default())
  for c in cands:
    cfg = G.GemvConfig(*c)
    res = []
    for v in VARIANTS:
      try:
        res.append(f"{v} {kernel_us(plan, cfg, args, v):7.1f}")
      except Exception as e:
        res.append(f"{v} FAILED {type(e).__name__}: {str(e)[:120]}")
    print(f"{name:6s} B{b:<2d} {str(c):20s} " + "  ".join(res), flush=True)
