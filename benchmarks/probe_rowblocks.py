"""Probe: rows per program (block_rows, num_warps) against the GEMV kernel's device time.

For e4m3 and nvfp4 at 16384 x 16384 and 4096 x 14336 (n_out x k), batches 1 and 16: the
median device time of the fp8lab_gemv kernel (profiler, benchmarks/timing.py
device_kernel_times) over 3 calls of 8 distinct weight copies each, after 20 warm-up calls.
Output: one line per (format, shape, batch), "(block_rows, block_k, num_warps, num_stages):
microseconds". Results: benchmarks/results/gemv_rowblocks_h200_20261130.txt.

  PYTHONPATH=. python3 benchmarks/probe_rowblocks.py       # on the GPU
"""
import sys, os, warnings; warnings.filterwarnings("ignore")
sys.path.insert(0, os.getcwd())
from benchmarks.gpu_tune import plan_of, probe_args, gemv_device_us
from fp8lab.kernels import gemv as G
R = 8
for name, n, k, cfgs in (("e4m3", 16384, 16384, [(64,64,4,3),(32,64,2,3),(16,64,1,3)]),
                         ("nvfp4", 16384, 16384, [(64,32,4,4),(32,32,2,4),(16,32,1,4),(16,64,1,3)]),
                         ("e4m3", 4096, 14336, [(64,64,4,3),(32,64,2,3),(16,64,1,3)]),
                         ("nvfp4", 4096, 14336, [(64,32,4,4),(32,32,2,4),(16,32,1,4)])):
  for B in (1, 16):
    args = probe_args(name, n, k, B, R)
    res = [f"{c}: {gemv_device_us(plan_of(name), G.GemvConfig(*c), n, k, args, warmup=20)[0]:6.1f}"
           for c in cfgs]
    print(f"{name} {n}x{k} B{B}: " + "  ".join(res), flush=True)
