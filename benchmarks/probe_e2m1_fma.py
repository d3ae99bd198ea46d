"""Probe: the asm e2m1 decode with its shifts moved from the ALU pipe to the FMA pipe.

ncu (results/gemv_ncu_h200_20261130_nvfp4*.txt) puts the nvfp4 kernel's ALU pipe at 55% and
its FMA-heavy pipe at 31% of peak, with "math pipe throttle" stalls growing when more warps
are resident. Variant "fma" of unpack._e2m1_plane_ops (patched here, not in the library):
even planes build the magnitude with shl 1 (ptxas: IMAD.SHL) instead of shl 4 then shr 3,
odd planes shift right by 3 with mul.hi.u32 by 2^29 (IMAD.HI) instead of shr (SHF). Offline
SASS (nvfp4 128 x 32 words, batch 1): the same 779-781 loop instructions, SHF 64 -> 0,
IMAD 112 -> 174. Median device time of fp8lab_gemv (3 calls of R copies after 10 warm-ups)
with the library's decode and with the variant, and whether both give the same bits.

  PYTHONPATH=. python3 benchmarks/probe_e2m1_fma.py      # on the GPU
"""
import os, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, os.getcwd())
import jax, numpy as np
from benchmarks.gpu_tune import plan_of, probe_args, gemv_device_us
from fp8lab.kernels import gemv as G, unpack as U

R = int(os.environ.get("PROBE_COPIES", "8"))
ORIG = U._e2m1_plane_asm


def fma_ops(i):
  """unpack._e2m1_plane_ops(i) with the shifts moved: the same bits."""
  q, odd = divmod(i, 2)
  lo = 2 * (q % 2)
  ops = [("prmt", "r", "$1", "$2", 0x7362 if q >= 2 else 0x5140)]
  if odd:
    src, ops = "r", ops + [("mul.hi.u32", "m", "r", 1 << 29)]
  else:
    src, ops = "s", ops + [("shl", "s", "r", 4), ("shl", "m", "r", 1)]
  return ops + [("and", "m", "m", U._E2M1_MAG),
                ("lop3", "x", src, U._E2M1_SIGN, "m", U._OR_AND),
                ("prmt", "$0", "x", 0, ((lo + 1) << 12) | (4 << 8) | (lo << 4) | 4)]


fma_asm = lambda i: U._e2m1_ptx(fma_ops(i))


def run(plan, cfg, n, k, args, variant):
  U._e2m1_plane_asm = fma_asm if variant == "fma" else ORIG
  jax.clear_caches()                  # gemv_pallas's traces are cached: retrace
  try:
    us, _, out = gemv_device_us(plan, cfg, n, k, args)
  finally:
    U._e2m1_plane_asm = ORIG
  return us, out


print("device", jax.devices()[0].device_kind, "jax", jax.__version__, "copies", R, flush=True)
for name, b in (("nvfp4", 1), ("mxfp4", 1), ("nvfp4", 16), ("mxfp4", 16)):
  S = 16384
  args = probe_args(name, S, S, b, R)
  plan = plan_of(name, native_fp8=G.native_fp8_requested(), asm_e2m1=G.asm_e2m1_default())
  cfg = G.gemv_config(plan.format, b)
  (t0, y0), (t1, y1) = (run(plan, cfg, S, S, args, v) for v in ("library", "fma"))
  print(f"{name} B{b:<2d} {cfg}: library {t0:6.1f} us  fma {t1:6.1f} us  same bits "
        f"{np.array_equal(y0.view(np.uint32), y1.view(np.uint32))}", flush=True)
