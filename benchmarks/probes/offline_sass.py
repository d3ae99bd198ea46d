"""Probe: the GEMV kernel's SASS for an H200, compiled on any host (no GPU), per config.

Lowers gemv_pallas for an abstract NVIDIA H200 (fp8lab_tests/lowering.py), hands the
fp8lab_gemv kernel's Triton IR to a separate Python that has the `triton` package (3.6, the
Triton jaxlib 0.11 bundles; e.g. `python3.12 -m venv /tmp/tri && /tmp/tri/bin/pip install
triton==3.6.0`), which compiles it for sm_90 with the config's num_warps / num_stages and
disassembles it with the cuobjdump that its wheel carries. Prints, per (layout, x dtype,
batch, config): registers, shared memory, and for the largest loop (the K loop; found as the
span of the longest backward branch) its instructions, MMAs, barriers, shared loads / stores
and global loads. Never run on a GPU: counts, not times. Compiling a .ttir file skips the
TTIR stage's own passes (docs/gemv_kernel.md section 3.8), so compare counts with each
other, not with a real compile's.

  python benchmarks/probes/offline_sass.py --triton_python=/tmp/tri/bin/python \
      --formats=e4m3,nvfp4 --batches=1,16 --x_dtype=bfloat16 --configs=64:64:4:3,64:64:4:3:0:0:0:1
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import cli  # noqa: E402
from benchmarks import kernel_inputs as KI  # noqa: E402
import fp8lab  # noqa: E402
from fp8lab.kernels.gemv import configs as GC  # noqa: E402
from fp8lab.kernels.gemv import kernel as GK  # noqa: E402
from fp8lab_tests.lowering import triton_irs  # noqa: E402

_FORMATS = flags.DEFINE_list("formats", ["e4m3", "nvfp4"], "Layouts (kernel_inputs names).")
_BATCHES = flags.DEFINE_list("batches", ["1", "16"], "Rows of x.")
_SIZE = flags.DEFINE_string("size", "4096x4096", "Weight shape n_out x k.")
_CONFIGS = flags.DEFINE_list("configs", ["64:64:4:3", "64:64:4:3:0:0:0:1"],
                             "Configs (kernel_inputs.parse_config's fields).")
_X_DTYPE = flags.DEFINE_enum("x_dtype", "bfloat16", ["float32", "bfloat16", "float16"],
                             "dtype of x.")
_NATIVE = flags.DEFINE_bool("native", True, "The native fp8 / asm e2m1 decodes (the GPU's "
                            "defaults on an H200).")
_TRITON_PYTHON = flags.DEFINE_string("triton_python", "/tmp/tri/bin/python",
                                     "A Python with triton==3.6 installed.")
_OUT = flags.DEFINE_string("out", "", "JSON results path ('' for none).")

# Run by --triton_python: compile one .ttir, print its metadata and SASS.
_COMPILE = r"""
import json, os, subprocess, sys
import triton
from triton.backends.compiler import GPUTarget
path, warps, stages = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
k = triton.compile(path, target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=warps, num_stages=stages))
cubin = path + ".cubin"
open(cubin, "wb").write(k.asm["cubin"])
tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
sass = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True, check=True).stdout
res = subprocess.run([tool, "-res-usage", cubin], capture_output=True, text=True,
                     check=True).stdout
regs = int(res.split("REG:")[1].split()[0])
print(json.dumps(dict(n_regs=regs, shared=k.metadata.shared, sass=sass)))
"""

_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")


def loop_counts(sass: str) -> dict:
  """Counts over all instructions and over the largest loop (the longest backward branch)."""
  instrs = [(int(a, 16), text.strip()) for a, text in _INSTR.findall(sass)]
  best = (0, 0)
  for a, text in instrs:
    m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
    if m:
      target = int(m.group(1), 16)
      if target < a and a - target > best[1] - best[0]:
        best = (target, a)
  body = [t for a, t in instrs if best[0] <= a <= best[1]]

  def count(ts, pat):
    return sum(bool(re.search(pat, t)) for t in ts)

  def tally(ts):
    return dict(instructions=len(ts), mma=count(ts, r"\bH[G]?MMA"), bar=count(ts, r"\bBAR\b"),
                lds=count(ts, r"\bLDS|LDSM"), sts=count(ts, r"\bSTS"),
                ldg=count(ts, r"\bLDG|LDGSTS"), fadd=count(ts, r"\bFADD\b"))
  return dict(all=tally([t for _, t in instrs]), loop=tally(body))


def main(argv):
  cli.no_arguments(argv)
  with cli.usage_errors():
    KI.check_layouts(_FORMATS.value)
    cfgs = [KI.parse_config(c) for c in _CONFIGS.value]
    n, k = (int(v) for v in _SIZE.value.lower().split("x"))
  xdt = jnp.dtype(_X_DTYPE.value)
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name in _FORMATS.value:
      plan = KI.plan_of(name, native_fp8=_NATIVE.value, asm_e2m1=_NATIVE.value)
      q, block = KI.layout(name)
      kw = fp8lab.packed_length(k, q.element.name)
      s_shape = None
      if plan.block_scaled:
        s_shape = jax.ShapeDtypeStruct((n // plan.scale_row_div, k // block[-1]), jnp.uint8)
      ts = jax.ShapeDtypeStruct((), jnp.float32) if plan.has_tensor_scale else None
      for b in map(int, _BATCHES.value):
        for cfg in cfgs:
          f = functools.partial(GK.gemv_pallas, plan=plan, n_out=n, k=k, config=cfg)
          irs = [ir for ir in triton_irs(f, jax.ShapeDtypeStruct((n, kw), jnp.uint32), s_shape,
                                         ts, jax.ShapeDtypeStruct((b, k), xdt))
                 if "fp8lab_gemv" in ir]
          eff = GC._effective_config(cfg, plan, n, kw)
          path = os.path.join(tmp, "k.ttir")
          with open(path, "w") as fh:
            fh.write(irs[0])
          proc = subprocess.run([_TRITON_PYTHON.value, "-c", _COMPILE, path,
                                 str(eff.num_warps), str(eff.num_stages)],
                                capture_output=True, text=True)
          row = dict(format=name, batch=b, x_dtype=xdt.name, config=KI.config_tuple(cfg))
          if proc.returncode:
            row["error"] = proc.stderr[-800:]
            print(f"{name:6s} B{b:<3d} {row['config']} FAILED {row['error'][-300:]}")
          else:
            got = json.loads(proc.stdout)
            row.update(n_regs=got["n_regs"], shared=got["shared"], **loop_counts(got["sass"]))
            lp = row["loop"]
            print(f"{name:6s} B{b:<3d} {str(row['config']):42s} regs {row['n_regs']:3d} smem "
                  f"{row['shared']:6d}  loop {lp['instructions']:5d} instr {lp['mma']:3d} mma "
                  f"{lp['bar']:2d} bar {lp['lds']:3d} lds {lp['sts']:3d} sts {lp['ldg']:3d} ldg")
          rows.append(row)
  if _OUT.value:
    with open(_OUT.value, "w") as fh:
      json.dump(dict(size=_SIZE.value, native=_NATIVE.value, jax=jax.__version__,
                     target="sm_90 (triton 3.6, offline)",
                     date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), rows=rows),
                fh, indent=1)


if __name__ == "__main__":
  app.run(main)
