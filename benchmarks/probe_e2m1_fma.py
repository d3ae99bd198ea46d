"""Probe: the asm e2m1 decode with its shifts moved from the ALU pipe to the FMA pipe.

ncu (results/gemv_ncu_h200_20261130_nvfp4*.txt) puts the nvfp4 kernel's ALU pipe at 55% and
its FMA-heavy pipe at 31% of peak, with "math pipe throttle" stalls growing when more warps
are resident. Variant "fma" of unpack._e2m1_plane_ops (patched here, not in the library):
even planes build the magnitude with shl 1 (ptxas: IMAD.SHL) instead of shr 3 after the
shl 4, odd planes shift right by 3 with mul.hi.u32 by 2^29 (IMAD.HI) instead of shr (SHF).
Offline SASS (nvfp4 128 x 32 words, batch 1, the one-word-per-plane program of unpack): the
same 722 loop instructions, SHF 64 -> 0, IMAD 109 -> 173 (ALU pipe 320 -> 256). (At e0c17b8
the probe patched the previous, word-interleaving program: results/gemv_e2m1_fma_h200_
20261130.txt.) Median device time of fp8lab_gemv (3 calls of R copies after 10 warm-ups)
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
ORIG = U._e2m1_plane_ops


def fma_ops(i):
  """unpack._e2m1_plane_ops(i) with the shifts moved: the same bits."""
  ops = ORIG(i)
  w, odd = ("$2" if i >= 4 else "$1"), i % 2
  if odd:          # shr m, w, 3  ->  mul.hi m, w, 2^29
    assert ops[0][:3] == ("shr", "m", w), ops
    return [("mul.hi.u32", "m", w, 1 << 29)] + ops[1:]
  # shl s, w, 4; shr m, s, 3  ->  shl s, w, 4; shl m, w, 1 (the bits the and keeps agree)
  assert ops[0] == ("shl", "s", w, 4) and ops[1] == ("shr", "m", "s", 3), ops
  return [ops[0], ("shl", "m", w, 1)] + ops[2:]


def run(plan, cfg, n, k, args, variant):
  U._e2m1_plane_ops = fma_ops if variant == "fma" else ORIG
  jax.clear_caches()                  # gemv_pallas's traces are cached: retrace
  try:
    us, _, out = gemv_device_us(plan, cfg, n, k, args)
  finally:
    U._e2m1_plane_ops = ORIG
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
