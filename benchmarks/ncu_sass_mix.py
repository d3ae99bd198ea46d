"""Summarizes an ncu source page (SASS with per-instruction counters, the CSV that
benchmarks/ncu_run.sh writes with NCU_SOURCE=1): executed warp instructions and sampled warp
stalls per opcode, and the stall reasons over the whole kernel.

  python3 benchmarks/ncu_sass_mix.py ncu_nvfp4_b1_sass.csv [--full-opcodes]
"""
import collections, csv, sys


def num(s: str) -> float:
  try:
    return float(s.replace(",", ""))
  except ValueError:
    return 0.0


def main(path: str, full: bool) -> None:
  rows = list(csv.reader(open(path)))
  hdr, data = rows[1], rows[2:]
  ix = {h: i for i, h in enumerate(hdr)}
  samples = lambda r: num(r[ix["Warp Stall Sampling (All Samples)"]])
  executed = lambda r: num(r[ix["Instructions Executed"]])
  tot_s = sum(map(samples, data))
  ops, samp = collections.Counter(), collections.Counter()
  for r in data:
    t = r[ix["Source"]].split()
    if not t:
      continue
    op = t[1] if t[0].startswith("@") else t[0]
    op = op if full else op.split(".")[0]
    ops[op] += executed(r)
    samp[op] += samples(r)
  tot_e = sum(ops.values())
  print(f"{rows[0][1]}: {tot_e:.0f} warp instructions executed, {tot_s:.0f} stall samples")
  for op, c in ops.most_common(24):
    print(f"  {op:28s} {c:11.0f} {c / tot_e * 100:5.1f}% of instructions  "
          f"{samp[op] / tot_s * 100:5.1f}% of samples")
  stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
  agg = {h[6:]: sum(num(r[ix[h]]) for r in data) / tot_s * 100 for h in stalls}
  print("  stall reasons, % of samples: " + ", ".join(
      f"{k} {v:.1f}" for k, v in sorted(agg.items(), key=lambda kv: -kv[1]) if v >= 0.1))


if __name__ == "__main__":
  main(sys.argv[1], "--full-opcodes" in sys.argv[2:])
