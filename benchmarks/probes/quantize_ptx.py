"""Probe (GPU): the PTX that the quantize kernel compiles to, instructions counted per element.

For each case, quantize_2d is compiled for a bf16 x in a fresh process-local XLA dump folder
(XLA_FLAGS=--xla_dump_to), and the PTX of the fp8lab_quantize_* kernel is read back: its
instructions by opcode (the text before the first '.' or space), and per tile element (the
whole kernel body, loads and stores included, divided by block_rows * block_cols: each
thread's straight-line code covers its share of one tile). The PTX files are copied to
--out's folder so that they can be read off the machine. The SASS that ptxas makes folds and
fuses further; PTX is the closest text one can read without it.

  python benchmarks/probes/quantize_ptx.py --out=$OUT/ptx.json
  python benchmarks/probes/quantize_ptx.py --cases=mxfp4,e4m3 --tiles=16x256x8
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)

# case name -> (format, quantize_2d keyword arguments)
CASES = {
    "e4m3": ("e4m3", dict(scale=0.75)),
    "mxfp8": ("mxfp8", {}),
    "mxfp4": ("mxfp4", {}),
    "nvfp4": ("nvfp4", dict(scale=3.0)),
    "mxfp8_t": ("mxfp8", dict(transpose=True)),
    "mxfp4_t": ("mxfp4", dict(transpose=True)),
}

_CHILD = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import jax, jax.numpy as jnp
from fp8lab.kernels.quantize import QuantizeConfig, quantize_2d
fmt, kw, tile, fields = json.loads(sys.argv[1])
r, c, w = tile
cfg = QuantizeConfig(r, c, w, **fields)
x = jnp.ones((1024, 2048), jnp.bfloat16)
jax.block_until_ready(jax.jit(lambda v: quantize_2d(v, fmt=fmt, config=cfg, **kw))(x))
"""


def _opcode(line: str) -> str | None:
  line = line.strip()
  if not line or line.startswith(("//", ".", "{", "}", "$", "@!")) or line.endswith(":"):
    return None
  if line.startswith("@"):                          # predicated: @%p1 op ...
    line = line.split(None, 1)[1] if " " in line else ""
  m = re.match(r"([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*)", line)
  return m.group(1) if m else None


def count_ptx(text: str, kernel_prefix: str = "fp8lab_quantize_") -> dict[str, dict]:
  """{kernel name: {"total": n, "ops": {opcode: n}}} of the .entry functions whose names
  contain kernel_prefix."""
  out = {}
  for m in re.finditer(r"\.entry\s+([\w$]+)\s*\(", text):
    name = m.group(1)
    if kernel_prefix not in name:
      continue
    start = text.index("{", m.end())
    depth, i = 0, start
    while True:
      if text[i] == "{":
        depth += 1
      elif text[i] == "}":
        depth -= 1
        if depth == 0:
          break
      i += 1
    ops = collections.Counter()
    for line in text[start + 1:i].splitlines():
      op = _opcode(line)
      if op is not None:
        ops[op] += 1
    out[name] = {"total": sum(ops.values()), "ops": dict(ops.most_common())}
  return out


def run(cases, tiles, fields, out_path):
  doc = {"cases": []}
  folder = os.path.dirname(os.path.abspath(out_path))
  os.makedirs(folder, exist_ok=True)
  for name in cases:
    fmt, kw = CASES[name]
    for tile in tiles:
      dump = os.path.join(folder, f"dump_{name}_{'x'.join(map(str, tile))}")
      shutil.rmtree(dump, ignore_errors=True)
      env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={dump}", PYTHONPATH=_REPO)
      res = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([fmt, kw, tile, fields])],
                           env=env, capture_output=True, text=True, timeout=300)
      row = {"case": name, "tile": tile, "fields": fields, "rc": res.returncode}
      kernels = {}
      for p in glob.glob(os.path.join(dump, "*.ptx")):
        with open(p) as f:
          kernels.update(count_ptx(f.read()))
      if res.returncode:
        row["error"] = res.stderr[-1500:]
      row["kernels"] = kernels
      elems = tile[0] * tile[1]
      row["per_element"] = {k: round(v["total"] / elems, 2) for k, v in kernels.items()}
      doc["cases"].append(row)
      # keep only the PTX (small) of the dump
      for p in glob.glob(os.path.join(dump, "*")):
        if not p.endswith(".ptx"):
          os.remove(p) if os.path.isfile(p) else shutil.rmtree(p, ignore_errors=True)
      print(f"{name:>8} {tile} {fields}: rc={res.returncode} "
            + ", ".join(f"{k}: {v['total']} ({row['per_element'][k]}/elem)"
                        for k, v in kernels.items()), flush=True)
  with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
  return doc


def main():
  import argparse  # pylint: disable=g-import-not-at-top
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--cases", default=",".join(CASES))
  ap.add_argument("--tiles", default="16x256x8")
  ap.add_argument("--float_products", default=None, choices=[None, "0", "1"])
  ap.add_argument("--out", required=True)
  a = ap.parse_args()
  fields = {} if a.float_products is None else {"float_products": a.float_products == "1"}
  tiles = [tuple(int(v) for v in t.split("x")) for t in a.tiles.split(",")]
  run(a.cases.split(","), tiles, fields, a.out)


if __name__ == "__main__":
  main()
