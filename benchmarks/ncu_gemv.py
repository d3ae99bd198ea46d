"""GEMV kernel launches of one or more formats for Nsight Compute (hardware counters), on the GPU.

Runs fp8lab's kernel (the defaults gemv_packed would pick: config, native / asm decodes;
batch NCU_B) at NCU_N x NCU_N, three launches per format in NCU_FORMATS (two warm-ups). ncu
prints its report only when the program exits and replays each profiled kernel ~18 times for
the sections below, so profile one format per process and only its third launch:

  PYTHONPATH=. NCU_FORMATS=nvfp4 ncu --clock-control none -k regex:fp8lab_gemv \
      --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
      --section SchedulerStats --section WarpStateStats --section LaunchStats \
      python3 benchmarks/ncu_gemv.py

NCU_CONFIG="block_rows,block_k,num_warps,num_stages[,k_splits]" replaces the default config.
benchmarks/ncu_run.sh runs this recipe per format (sections, stall and pipe metrics, and the
SASS source page with NCU_SOURCE=1; benchmarks/ncu_sass_mix.py summarizes that page).
Results: benchmarks/results/gemv_ncu_h200_20261130_*.txt (each ncu process took 7-13 s).

A first attempt (2026-11-30, all three launches of nvfp4, mxfp4 and e4m3 in one process, -c 9)
profiled 7 launches and ran past its 360 s limit before the report was printed: no counters
were recorded.
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
CONFIG = os.environ.get("NCU_CONFIG")
CONFIG = G.GemvConfig(*map(int, CONFIG.split(","))) if CONFIG else None
for name in FORMATS:
  words, scales, ts = random_weight(jax.random.key(0), name, N, N)
  x = jax.random.normal(jax.random.key(1), (B, N))
  plan = plan_of(name, native_fp8=G.native_fp8_requested(), asm_e2m1=G.asm_e2m1_default())
  f = jax.jit(lambda w, s, t, v: G.gemv_pallas(w, s, t, v, plan=plan, n_out=N, k=N,
                                      config=CONFIG))
  for _ in range(3):                      # ncu -c / the kernel filter pick the launches
    jax.block_until_ready(f(words, scales, ts, x))
  print(name, "plan", plan, "config", CONFIG or G.gemv_config(plan.format, B, N), flush=True)
