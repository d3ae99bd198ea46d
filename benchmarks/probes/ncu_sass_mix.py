"""Summarizes an ncu source page (SASS with per-instruction counters, the CSV that
benchmarks/probes/ncu_run.sh writes with NCU_SOURCE=1): executed warp instructions and
sampled warp stalls per opcode, and the stall reasons over the whole kernel.

  python3 benchmarks/probes/ncu_sass_mix.py --csv=ncu_nvfp4_b1_sass.csv [--full_opcodes]
"""

from __future__ import annotations

import collections
import csv

from absl import app, flags
from benchmarks import cli

_CSV = flags.DEFINE_string("csv", None, "The source page CSV (ncu --page source --csv).",
                           required=True)
_FULL = flags.DEFINE_bool("full_opcodes", False, "Keep opcode modifiers (IMAD.WIDE, ...).")
_TOP = flags.DEFINE_integer("top", 24, "Opcodes listed.")


def num(s: str) -> float:
  try:
    return float(s.replace(",", ""))
  except ValueError:
    return 0.0


def summarize(path: str, full: bool, top: int) -> str:
  with open(path, newline="") as fh:
    rows = list(csv.reader(fh))
  hdr, data = rows[1], rows[2:]
  ix = {h: i for i, h in enumerate(hdr)}
  samples = lambda r: num(r[ix["Warp Stall Sampling (All Samples)"]])
  executed = lambda r: num(r[ix["Instructions Executed"]])
  tot_s = sum(map(samples, data)) or 1.0
  ops, samp = collections.Counter(), collections.Counter()
  for r in data:
    t = r[ix["Source"]].split()
    if not t:
      continue
    op = t[1] if t[0].startswith("@") and len(t) > 1 else t[0]   # skip a predicate
    op = op if full else op.split(".")[0]
    ops[op] += executed(r)
    samp[op] += samples(r)
  tot_e = sum(ops.values()) or 1.0
  lines = [f"{rows[0][1] if len(rows[0]) > 1 else path}: {tot_e:.0f} warp instructions "
           f"executed, {tot_s:.0f} stall samples"]
  for op, c in ops.most_common(top):
    lines.append(f"  {op:28s} {c:11.0f} {c / tot_e * 100:5.1f}% of instructions  "
                 f"{samp[op] / tot_s * 100:5.1f}% of samples")
  stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
  agg = {h[6:]: sum(num(r[ix[h]]) for r in data) / tot_s * 100 for h in stalls}
  lines.append("  stall reasons, % of samples: " + ", ".join(
      f"{k} {v:.1f}" for k, v in sorted(agg.items(), key=lambda kv: -kv[1]) if v >= 0.1))
  return "\n".join(lines)


def main(argv):
  cli.no_arguments(argv)
  print(summarize(_CSV.value, _FULL.value, _TOP.value))


if __name__ == "__main__":
  app.run(main)
