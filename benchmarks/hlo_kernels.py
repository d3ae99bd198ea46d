"""Lists the kernels XLA runs for jax.jit(fp8lab.gemv_packed): the fusions and custom calls of
the optimized HLO's ENTRY computation (x's preparation around the Pallas GEMV), float32 x.

  PYTHONPATH=. python3 benchmarks/hlo_kernels.py            # on the GPU
  HLO_CASES=e4m3:1,nvfp4:16 HLO_SIZE=4096 ...               # other cases / sizes
Result: benchmarks/results/gemv_xprep_hlo_h200_20261130.txt.
"""
import glob
import os
import re
import shutil
import sys
import tempfile

DUMP = tempfile.mkdtemp(prefix="fp8lab_hlo_")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={DUMP}"
                           " --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*gemv_packed.*")
sys.path.insert(0, os.getcwd())
import jax                      # noqa: E402  (XLA_FLAGS must be set first)
import fp8lab                   # noqa: E402

N = int(os.environ.get("HLO_SIZE", "16384"))
CASES = [(c.split(":")[0], int(c.split(":")[1]))
         for c in os.environ.get("HLO_CASES", "e4m3:1,e4m3:16,nvfp4:1,mxfp4:1").split(",")]
for fmt, b in CASES:
  w = fp8lab.quantize(jax.random.normal(jax.random.key(0), (N, N)), fmt)
  shape = (N,) if b == 1 else (b, N)
  jax.block_until_ready(jax.jit(fp8lab.gemv_packed)(w, jax.random.normal(jax.random.key(1), shape)))
  files = sorted(glob.glob(os.path.join(DUMP, "*gemv_packed*after_optimizations.txt")))
  text = open(files[-1]).read()
  print(f"== {fmt} batch {b}: {os.path.basename(files[-1])}", flush=True)
  for line in text[text.index("ENTRY"):].splitlines():
    if re.search(r" (fusion|custom-call)\(", line):
      print("  ", line.strip()[:260], flush=True)
  shutil.rmtree(DUMP)
  os.makedirs(DUMP)
shutil.rmtree(DUMP, ignore_errors=True)
