"""Writes gemv_packed's dispatch table (fp8lab/kernels/gemv/dispatch.py) from bench_gemv results.

For every (layout, size, batch) that a results file has a `pallas` row for, the entry picks
the faster by op device time (`device_us_per_op`, the profiler's sum of the op's kernels) of
gemv_packed's two GPU paths measured in that run: "pallas" (the kernel) or "xla" (the
`xla_packed` row: jnp over the same packed words). A cell without an `xla_packed` row keeps
"pallas", the fallback. XLA's float8-weight GEMV (`xla_e4m3`) of the same size and batch is
recorded beside them, not picked: it is not an implementation of gemv_packed (other bytes for
the MX / NVFP4 / 4-bit formats, bfloat16 products). Rows without a device time (no profiler)
and layouts that are not fp8lab.formats.LAYOUTS names (bench_gemv's variants) are left out.

Several files: cells are keyed by device kind, layout, shape bucket (dispatch.shape_bucket)
and batch; a newer run (its `date`) replaces an older one's cell, and of two shapes of one run
in one bucket the one nearer the bucket (log scale) counts. The table file's entries of the
devices the results cover are replaced whole (list every run the table should hold); other
devices' entries stay. The block is rendered sorted, so the same inputs give the same bytes.

  python benchmarks/tune_gemv_dispatch.py --results=benchmarks/results/gemv_h200_A.json,...
  python benchmarks/tune_gemv_dispatch.py --from_sources     # rerun the table's own SOURCES
  python benchmarks/tune_gemv_dispatch.py ... --check        # exit 1 if the file would change
"""

from __future__ import annotations

import ast
import json
import math
import os
import sys
from typing import Any

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)   # run as a script: fp8lab and benchmarks from the working tree

from fp8lab.formats import LAYOUTS  # noqa: E402
from fp8lab.kernels.gemv import dispatch  # noqa: E402

TABLE_PATH = os.path.join(_REPO, "fp8lab", "kernels", "gemv", "dispatch.py")
RESULTS_DIR = os.path.join(_REPO, "benchmarks", "results")
BEGIN = "# BEGIN GENERATED TABLE"
END = "# END GENERATED TABLE"
HEADER = ("# BEGIN GENERATED TABLE: written by benchmarks/tune_gemv_dispatch.py; rerun it, "
          "do not edit.")

Key = tuple[str, str, tuple[int, int], int]


def _us(v: Any) -> float | None:
  return None if v is None else round(float(v), 1)


def _bucket_distance(n_out: int, k: int) -> float:
  bn, bk = dispatch.shape_bucket(n_out, k)
  return abs(math.log2(n_out / bn)) + abs(math.log2(k / bk))


def cells_of_run(doc: dict[str, Any], source: str) -> dict[Key, tuple]:
  """One results document's table cells: key -> (impl, pallas us, xla us, XLA float8 us,
  shape, source)."""
  if doc.get("smoke"):
    raise ValueError(f"{source} is a smoke run (tiny shapes, interpret mode): no timings "
                     "to tune from")
  device = doc["machine"]["device_kind"]
  dev_us: dict[tuple[str, str, str, int], float] = {}
  for r in doc["rows"]:
    if r.get("status") == "ok" and r.get("device_us_per_op"):
      dev_us[(r["op"], r["format"], r["size"], r["batch"])] = float(r["device_us_per_op"])
  f8_us = {(size, batch): t for (op, _, size, batch), t in dev_us.items() if op == "xla_e4m3"}
  cells: dict[Key, tuple] = {}
  near: dict[Key, float] = {}
  for (op, layout, size, batch), p_us in sorted(dev_us.items()):
    if op != "pallas" or layout not in LAYOUTS:
      continue
    n_out, k = (int(v) for v in size.lower().split("x"))
    x_us = dev_us.get(("xla_packed", layout, size, batch))
    impl = "xla" if x_us is not None and x_us < p_us else "pallas"
    key = (device, layout, dispatch.shape_bucket(n_out, k), batch)
    d = _bucket_distance(n_out, k)
    if key in cells and (near[key], cells[key][4]) <= (d, size):
      continue
    near[key] = d
    cells[key] = (impl, _us(p_us), _us(x_us), _us(f8_us.get((size, batch))), size, source)
  return cells


def build(docs: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, tuple[str, ...]],
                                                            dict[Key, tuple]]:
  """(SOURCES, cells) from (source name, results document) pairs: runs applied oldest first
  (by `date`, then name), so a newer run's cell replaces an older one's."""
  sources: dict[str, list[str]] = {}
  cells: dict[Key, tuple] = {}
  for source, doc in sorted(docs, key=lambda sd: (sd[1].get("date", ""), sd[0])):
    sources.setdefault(doc["machine"]["device_kind"], []).append(source)
    cells.update(cells_of_run(doc, source))
  return {d: tuple(s) for d, s in sources.items()}, cells


def render(sources: dict[str, tuple[str, ...]], cells: dict[Key, tuple]) -> str:
  """The generated block (BEGIN to END lines, each ending in a newline), sorted."""
  out = [HEADER, "SOURCES: dict[str, tuple[str, ...]] = {"]
  for dev in sorted(sources):
    out.append(f"    {dev!r}: (")
    out += [f"        {s!r}," for s in sources[dev]]
    out.append("    ),")
  out += ["}",
          "# (device kind, layout, (n_out, k) bucket, batch bucket):",
          "#     (implementation, pallas us, xla us, XLA float8 us, measured shape, results file)",
          "_MEASURED: dict[tuple[str, str, tuple[int, int], int], tuple] = {"]
  for key in sorted(cells):
    out.append(f"    {key!r}:")
    out.append(f"        {cells[key]!r},")
  out += ["}", END]
  return "\n".join(out) + "\n"


def _split(text: str) -> tuple[str, str, str]:
  """(before, block, after) of a table file around the generated block."""
  start = text.index(BEGIN)
  start = text.rindex("\n", 0, start) + 1 if "\n" in text[:start] else 0
  stop = text.index(END, start)
  stop = text.index("\n", stop) + 1
  return text[:start], text[start:stop], text[stop:]


def parse_block(block: str) -> tuple[dict[str, tuple[str, ...]], dict[Key, tuple]]:
  """SOURCES and _MEASURED of a generated block (literals only)."""
  found: dict[str, Any] = {}
  for node in ast.parse(block).body:
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
      target = node.targets[0] if isinstance(node, ast.Assign) else node.target
      found[target.id] = ast.literal_eval(node.value)
  return found.get("SOURCES", {}), found.get("_MEASURED", {})


def regenerate(table_text: str, docs: list[tuple[str, dict[str, Any]]]) -> str:
  """The table file's text with its block rebuilt from `docs`; other devices' entries kept."""
  before, block, after = _split(table_text)
  old_sources, old_cells = parse_block(block)
  sources, cells = build(docs)
  covered = set(sources)
  sources.update({d: s for d, s in old_sources.items() if d not in covered})
  cells.update({k: v for k, v in old_cells.items() if k[0] not in covered})
  return before + render(sources, cells) + after


def load(paths: list[str]) -> list[tuple[str, dict[str, Any]]]:
  """(source name: the file name without .json, document) per path."""
  docs = []
  for p in paths:
    with open(p) as f:
      docs.append((os.path.splitext(os.path.basename(p))[0], json.load(f)))
  return docs


def source_paths(table_text: str, results_dir: str = RESULTS_DIR) -> list[str]:
  """The results files the table's SOURCES name (every device), under results_dir."""
  sources, _ = parse_block(_split(table_text)[1])
  return [os.path.join(results_dir, s + ".json") for dev in sorted(sources)
          for s in sources[dev]]


def summary(cells: dict[Key, tuple]) -> list[str]:
  """Lines for the log: the cells that pick xla, and those where neither path is as fast as
  XLA's float8-weight GEMV for an 8-bit layout (a target of issue 20 missed)."""
  lines = []
  for key in sorted(cells):
    impl, p, x, f8, size, src = cells[key]
    best = p if impl == "pallas" else x
    if impl == "xla":
      lines.append(f"xla    {key[0]} {key[1]} {size} b={key[3]}: xla {x} < pallas {p} us")
    if (f8 is not None and best > f8 and key[1] in ("e4m3", "e5m2", "mxfp8", "mxfp8_e5m2")):
      lines.append(f"behind {key[0]} {key[1]} {size} b={key[3]}: {impl} {best} > XLA float8 "
                   f"{f8} us ({src})")
  return lines


def _define_flags():
  # Defined only when run as a script: the tests import this module beside bench_gemv, whose
  # absl flags would collide with same-named ones.
  from absl import flags  # pylint: disable=import-outside-toplevel
  flags.DEFINE_list("results", [], "bench_gemv results JSON files (benchmarks/results/...).")
  flags.DEFINE_bool("from_sources", False, "Add the files the table's SOURCES name (under "
                    "--results_dir) to --results: rebuild the table as it stands.")
  flags.DEFINE_string("results_dir", RESULTS_DIR, "Where --from_sources finds its files.")
  flags.DEFINE_string("table", TABLE_PATH, "The table file to rewrite.")
  flags.DEFINE_bool("check", False, "Write nothing; exit 1 if the table file would change.")


def main(argv: list[str]) -> None:
  from absl import flags  # pylint: disable=import-outside-toplevel
  from benchmarks import cli  # pylint: disable=import-outside-toplevel
  cli.no_arguments(argv)
  f = flags.FLAGS
  with open(f.table) as fh:
    text = fh.read()
  paths = [os.path.abspath(p) for p in f.results]   # one spelling: a file counts once
  if f.from_sources:
    paths += [p for p in map(os.path.abspath, source_paths(text, f.results_dir))
              if p not in paths]
  with cli.usage_errors():
    if not paths:
      raise ValueError("no results: pass --results=FILE.json,... or --from_sources")
    docs = load(paths)
    new = regenerate(text, docs)
  for line in summary(build(docs)[1]):
    print(line)
  if f.check:
    if new != text:
      print(f"{f.table} is not what {len(paths)} results files give", file=sys.stderr)
      sys.exit(1)
    print(f"{f.table} is up to date")
    return
  if new != text:
    with open(f.table, "w") as fh:
      fh.write(new)
  print(f"wrote {f.table} from {len(paths)} results files")


if __name__ == "__main__":
  from absl import app  # pylint: disable=import-outside-toplevel
  _define_flags()
  app.run(main)
