"""Writes gemv_packed's dispatch table (fp8lab/kernels/gemv/dispatch.py) from bench_gemv results.

The rule, per (layout, size, batch) cell of one results file that has a `pallas` row:
  candidates  every gemv_packed path the run measured there, from the ops of
              OP_IMPLEMENTATIONS (pallas -> "pallas", xla_packed -> "xla", xla_parts ->
              "xla_parts"), by op device time (`device_us_per_op`, the profiler's sum of
              the op's kernels); a path without a row there is not a candidate (nor are
              bench_gemv's reference, the golden model the others are checked against, and
              pallas_int, the kernel with a forced decode, which None cannot ask for). Rows that
              failed, have no device time (no profiler) or disagree with the reference
              (`agrees: false`) are left out; a cell whose pallas row is left out has no
              entry (the fallback, the kernel, runs there: the script prints it).
  pick        the kernel, unless the fastest other candidate is at least MARGIN (3%)
              faster than it in the same run: pallas_us >= (1 + MARGIN) * other_us. The
              margin keeps a pick from flipping on run-to-run noise where the paths are
              even (the spread it covers: docs/gemv_kernel.md section 5), and the kernel is
              the path whose numerics the tests pin hardest. Of two other paths with equal
              times, the one first in dispatch.IMPLEMENTATIONS wins.
  record      the pick, ratio = pallas_us / the fastest other candidate's us (None where
              only the kernel was measured; the pick is not "pallas" only when ratio >=
              1 + MARGIN), every candidate's time, and XLA's own GEMVs of the same size and
              batch (BASELINE_OPS: xla_e4m3, float8_e4m3fn weights; xla_bf16, bfloat16
              weights) beside them, not picked: they are not implementations of
              gemv_packed (other bytes for most layouts, bfloat16 products).
Layouts that are not fp8lab.formats.LAYOUTS names (bench_gemv's variants) are left out.

Several files: cells are keyed by device kind, layout, shape bucket (dispatch.shape_bucket)
and batch; a newer run (its `date`) replaces an older one's cell whole (the comparison is
always within one run), and of two shapes of one run in one bucket the one nearer the bucket
(log scale) counts. The table file's entries of the devices the results cover are replaced
whole (list every run the table should hold); other devices' entries stay. The block is
rendered sorted, so the same inputs give the same bytes.

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


# bench_gemv op -> the gemv_packed implementation it times (the candidates of a cell).
OP_IMPLEMENTATIONS = {"pallas": "pallas", "xla_packed": "xla", "xla_parts": "xla_parts"}
# XLA's own GEMVs recorded beside the candidates (bench_gemv op names).
BASELINE_OPS = ("xla_e4m3", "xla_bf16")
# How much faster (relative) another path must be than the kernel in the same run to be
# picked: pallas_us >= (1 + MARGIN) * other_us.
MARGIN = 0.03


def device_times(doc: dict[str, Any]) -> dict[tuple[str, str, str, int], float]:
  """(op, format, size, batch) -> op device time (us) of the rows that may count: status ok,
  a device time, and not `agrees: false` (a path that disagrees with the reference)."""
  dev_us: dict[tuple[str, str, str, int], float] = {}
  for r in doc["rows"]:
    if (r.get("status") == "ok" and r.get("device_us_per_op")
        and r.get("agrees") is not False):
      dev_us[(r["op"], r["format"], r["size"], r["batch"])] = float(r["device_us_per_op"])
  return dev_us


def rejected(doc: dict[str, Any]) -> list[str]:
  """Lines for the log: the candidate rows of the file left out for disagreeing with the
  reference (a pallas one leaves its cell to the fallback)."""
  return [f"wrong     {doc['machine']['device_kind']} {r['format']} {r['size']} b={r['batch']}: "
          f"{r['op']} disagrees with the reference (max rel diff "
          f"{r.get('max_rel_diff_vs_reference')}): not a candidate"
          for r in doc["rows"]
          if r.get("op") in OP_IMPLEMENTATIONS and r.get("status") == "ok"
          and r.get("agrees") is False]


def pick(times: dict[str, float]) -> tuple[str, float | None]:
  """(implementation, ratio) for one cell's candidates (implementation -> us, "pallas"
  among them): the module docstring's rule."""
  others = [(us, dispatch.IMPLEMENTATIONS.index(impl), impl)
            for impl, us in times.items() if impl != "pallas"]
  if not others:
    return "pallas", None
  us, _, impl = min(others)
  ratio = times["pallas"] / us
  return (impl if ratio >= 1 + MARGIN else "pallas"), ratio


def cells_of_run(doc: dict[str, Any], source: str) -> dict[Key, tuple]:
  """One results document's table cells: key -> (impl, ratio, times, baselines, shape,
  source), dispatch.Entry's fields."""
  if doc.get("smoke"):
    raise ValueError(f"{source} is a smoke run (tiny shapes, interpret mode): no timings "
                     "to tune from")
  device = doc["machine"]["device_kind"]
  dev_us = device_times(doc)
  base_us = {(op, size, batch): t for (op, _, size, batch), t in dev_us.items()
             if op in BASELINE_OPS}
  cells: dict[Key, tuple] = {}
  near: dict[Key, float] = {}
  x_dtype = doc.get("settings", {}).get("x_dtype", "float32")
  for (op, layout, size, batch), p_us in sorted(dev_us.items()):
    if op != "pallas" or layout not in LAYOUTS:
      continue
    n_out, k = (int(v) for v in size.lower().split("x"))
    key = (device, dispatch.table_layout(layout, x_dtype), dispatch.shape_bucket(n_out, k),
           batch)
    d = _bucket_distance(n_out, k)
    if key in cells and (near[key], cells[key][4]) <= (d, size):
      continue
    raw = {impl: dev_us[(o, layout, size, batch)] for o, impl in OP_IMPLEMENTATIONS.items()
           if (o, layout, size, batch) in dev_us}
    impl, ratio = pick(raw)
    times = {i: _us(raw[i]) for i in dispatch.IMPLEMENTATIONS if i in raw}
    baselines = {o: _us(base_us[(o, size, batch)]) for o in BASELINE_OPS
                 if (o, size, batch) in base_us}
    near[key] = d
    cells[key] = (impl, None if ratio is None else round(ratio, 3), times, baselines, size,
                  source)
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
          "#     (implementation, pallas us / fastest other path's us, {implementation: op",
          "#      device us}, {XLA GEMV op: us}, measured shape, results file)",
          "_MEASURED: dict[tuple[str, str, tuple[int, int], int], tuple] = {"]
  for key in sorted(cells):
    impl, ratio, times, baselines, size, source = cells[key]
    out.append(f"    {key!r}:")
    out.append(f"        ({impl!r}, {ratio!r}, {times!r}, {baselines!r},")
    out.append(f"         {size!r}, {source!r}),")
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
  """Lines for the log: the cells that pick another path than the kernel, those where the
  kernel kept its pick within the margin though another path was faster, and those where
  the pick is slower than XLA's float8-weight GEMV for an 8-bit layout (a target of issue
  20 missed)."""
  lines = []
  for key in sorted(cells):
    impl, ratio, times, baselines, size, src = cells[key]
    where = f"{key[0]} {key[1]} {size} b={key[3]}"
    others = ", ".join(f"{i} {us}" for i, us in times.items() if i != impl)
    if impl != "pallas":
      lines.append(f"{impl:<9} {where}: {impl} {times[impl]} us, {others} (x{ratio})")
    elif ratio is not None and ratio > 1:
      lines.append(f"margin    {where}: pallas {times['pallas']} us kept, {others} "
                   f"(x{ratio} < x{1 + MARGIN:g})")
    f8 = baselines.get("xla_e4m3")
    if f8 is not None and times[impl] > f8 and key[1].split("@")[0] in (
        "e4m3", "e5m2", "mxfp8", "mxfp8_e5m2"):
      lines.append(f"behind    {where}: {impl} {times[impl]} > XLA float8 {f8} us ({src})")
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
  for _, doc in docs:
    for line in rejected(doc):
      print(line)
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
