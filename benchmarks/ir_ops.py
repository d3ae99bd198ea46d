"""Counting the elementwise work in a Triton IR text: each op weighted by the elements of its
widest tensor (layout-only ops free). Shared by benchmarks/probes/quantize_op_count.py and its
test; no absl flags here, so tests can import it beside the benchmarks.
"""

from __future__ import annotations

import collections
import re

__all__ = ["FREE_OPS", "MEMORY_OPS", "count_ops"]

FREE_OPS = frozenset({"arith.constant", "tt.splat", "tt.broadcast", "tt.expand_dims",
                      "tt.reshape", "tt.make_range", "tt.bitcast", "tt.return",
                      "tt.reduce.return", "tt.func"})
MEMORY_OPS = frozenset({"tt.load", "tt.store", "tt.addptr"})
_OP = re.compile(r'^\s*(?:%[\w#:, %]+=\s*)?"?([a-z_]+\.[a-z_.]+)"?')
_TENSOR = re.compile(r"tensor<([0-9x]+)x[^0-9x>][^>]*>")


def _elements(line: str) -> int:
  """Elements of the widest tensor type on an IR line (1 for scalars)."""
  best = 1
  for dims in _TENSOR.findall(line):
    n = 1
    for d in dims.split("x"):
      n *= int(d)
    best = max(best, n)
  return best


def count_ops(ir: str) -> dict[str, float]:
  """{op name: element-weighted count} over a kernel's IR text (see the module docstring);
  the combine region of a tt.reduce is counted by the reduce itself."""
  counts: dict[str, float] = collections.defaultdict(float)
  depth = 0                                  # brace depth inside a tt.reduce's region
  for line in ir.splitlines():
    if depth:
      depth += line.count("{") - line.count("}")
      if not depth:                          # "}) : (tensor<input>) -> ...": the reduce's type
        counts["tt.reduce"] += _elements(line)
      continue
    m = _OP.match(line)
    if not m or m.group(1) in FREE_OPS or m.group(1).startswith("builtin."):
      continue
    if m.group(1) == "tt.reduce":
      depth = line.count("{") - line.count("}")
      continue
    counts[m.group(1)] += _elements(line)
  return dict(counts)
