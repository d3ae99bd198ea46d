"""One GEMV kernel launch per format for Nsight Compute (hardware counters), on the GPU.

Runs fp8lab's kernel (default config, batch B) at N x N for each format in FORMATS after two
warm-up calls; `ncu -k regex:fp8lab_gemv -c 9` profiles all three launches of each (the
third is the one to read).
Results: benchmarks/results/gemv_ncu_h200_20261130.txt (and its command line).

  PYTHONPATH=. ncu --clock-control none -k regex:fp8lab_gemv -c 9 \
      --section SpeedOfLight --section Occupancy --section SchedulerStats \
      --section WarpStateStats --section LaunchStats python3 benchmarks/ncu_gemv.py
"""
import os, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, os.getcwd())
import jax
from benchmarks.gpu_tune import random_weight, plan_of
from fp8lab.kernels import gemv as G

N = int(os.environ.get("NCU_N", "16384"))
B = int(os.environ.get("NCU_B", "1"))
FORMATS = os.environ.get("NCU_FORMATS", "nvfp4,mxfp4,e4m3").split(",")
for name in FORMATS:
  words, scales, ts = random_weight(jax.random.key(0), name, N, N)
  x = jax.random.normal(jax.random.key(1), (B, N))
  plan = plan_of(name)
  plan = G.format_plan(plan.format, plan.elem.name, (plan.block_len,) if plan.block_len else None,
                       plan.has_tensor_scale, native_fp8=G.native_fp8_requested(),
                       asm_e2m1=G.asm_e2m1_default())
  f = jax.jit(lambda w, s, t, v: G.gemv_pallas(w, s, t, v, plan=plan, n_out=N, k=N))
  for _ in range(3):                      # ncu -c / the kernel filter pick the launches
    jax.block_until_ready(f(words, scales, ts, x))
  print(name, "plan", plan, flush=True)
