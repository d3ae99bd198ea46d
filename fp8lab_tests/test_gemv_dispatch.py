"""Tests of gemv_packed's dispatch table (fp8lab/kernels/gemv/dispatch.py), the script that
writes it (benchmarks/tune_gemv_dispatch.py) and `implementation=None` on a GPU.

The expected picks are read by hand from the committed H200 results files named in the
comments; the script's expected output for a synthetic results file is written out here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from benchmarks import tune_gemv_dispatch as tune
from fp8lab.kernels.gemv import dispatch
from fp8lab.ops import _op
from fp8lab.ops import gemv as gemv_op

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H200 = "NVIDIA H200"


@pytest.mark.parametrize("n,want", [(1, 1), (2, 2), (3, 4), (5, 4), (6, 8), (4096, 4096),
                                    (5792, 4096), (5793, 8192), (6144, 8192), (14336, 16384),
                                    (28672, 32768), (128256, 131072)])
def test_shape_bucket_rounds_to_the_nearest_power_of_two_on_a_log_scale(n, want):
  # 5792 < 4096 * sqrt(2) = 5792.6 < 5793
  assert dispatch.shape_bucket(n, 64) == (want, 64)
  assert dispatch.shape_bucket(64, n) == (64, want)


def test_layout_of_names_registry_layouts():
  assert dispatch.layout_of("nvfp4", (16,)) == "nvfp4"
  assert dispatch.layout_of("nvfp4", (16, 16)) == "nvfp4_2d"
  assert dispatch.layout_of("e4m3", None) == "e4m3"
  assert dispatch.layout_of("mxfp4", (32,)) == "mxfp4"
  assert dispatch.layout_of("e4m3_block", (128, 128)) == "e4m3_block_2d"
  assert dispatch.layout_of("nvfp4", (32, 16)) == "nvfp4:32x16"     # no layout: no entries


def test_seeded_table_picks_what_the_h200_runs_measured():
  """Pins the seed (the runs of SOURCES at the time of writing): a regenerated table with
  other runs updates these numbers, read again from its results files."""
  # gemv_h200_20261201_215647.json, 16384x16384 batch 1, op device time: bf16 weights
  # pallas 127.97 us, xla 120.45 us; e4m3 pallas 69.01, xla 116.43; batch 16: bf16 pallas
  # 169.97, xla 654.61.
  e = dispatch.lookup(H200, "bf16", 16384, 16384, 1)
  assert (e.impl, e.pallas_us, e.xla_us, e.shape) == ("xla", 128.0, 120.5, "16384x16384")
  assert e.source == "gemv_h200_20261201_215647"
  assert e.ratio == 1.062 and e.times == {"pallas": 128.0, "xla": 120.5}   # 127.97 / 120.45
  assert e.xla_f8_us == 71.1 and e.xla_parts_us is None
  assert dispatch.choose(H200, "e4m3", 16384, 16384, 1) == "pallas"
  # gemv_h200_xla_parts_20261202_0815.json (a newer run of that cell, which replaced it
  # whole): e4m3 pallas 67.5 us, xla_parts 72.0; 4096 x 14336 batch 1: xla_parts 19.7 us
  # beats pallas 21.5 by more than the 3% margin.
  e = dispatch.lookup(H200, "e4m3", 16384, 16384, 1)
  assert (e.impl, e.times, e.xla_us) == ("pallas", {"pallas": 67.5, "xla_parts": 72.0}, None)
  assert dispatch.choose(H200, "e4m3", 4096, 14336, 1) == "xla_parts"
  assert dispatch.choose(H200, "bf16", 16384, 16384, 16) == "pallas"
  # Shapes in the same bucket take its entry: 15000 x 17000 rounds to 16384 x 16384.
  assert dispatch.choose(H200, "bf16", 15000, 17000, 1) == "xla"
  # Batch buckets: the smallest measured batch >= the call's (2 -> 4, pallas there).
  assert dispatch.lookup(H200, "bf16", 16384, 16384, 2).pallas_us == 129.4
  assert dispatch.choose(H200, "bf16", 16384, 16384, 2) == "pallas"
  # 14336 x 4096 batch 64, gemv_h200_dispatch_a_20261202_043919.json: nvfp4 pallas 63.1 us,
  # xla 288.4 (the newer run replaced gemv_h200_20261130_233426's 63.2, which had no xla row).
  e = dispatch.lookup(H200, "nvfp4", 14336, 4096, 64)
  assert (e.impl, e.pallas_us, e.xla_us, e.source) == ("pallas", 63.1, 288.4,
                                                       "gemv_h200_dispatch_a_20261202_043919")
  # The same run, 6144 x 4096 batch 1 (bucket 8192 x 4096): e4m3 xla 11.3 < pallas 12.9 us.
  assert dispatch.choose(H200, "e4m3", 6144, 4096, 1) == "xla"
  assert dispatch.choose(H200, "e4m3", 6144, 4096, 4) == "pallas"


def test_lookup_falls_back_to_the_kernel():
  assert dispatch.FALLBACK == "pallas"
  assert dispatch.lookup(H200, "bf16", 16384, 16384, 65) is None       # above every batch
  assert dispatch.choose(H200, "bf16", 16384, 16384, 65) == "pallas"
  assert dispatch.lookup("NVIDIA A100-SXM4-80GB", "bf16", 16384, 16384, 1) is None
  assert dispatch.choose("NVIDIA A100-SXM4-80GB", "bf16", 16384, 16384, 1) == "pallas"
  assert dispatch.lookup(H200, "bf16", 256, 512, 1) is None            # unmeasured bucket
  assert dispatch.lookup(H200, "nvfp4:32x16", 16384, 16384, 1) is None
  table = {("G", "e4m3", (64, 64), 4): _entry("xla_parts", pallas=2.0, xla_parts=1.0),
           ("G", "e4m3", (64, 64), 16): _entry("xla", pallas=2.0, xla=1.0)}
  assert dispatch.choose("G", "e4m3", 60, 70, 1, table) == "xla_parts"   # bucket 4
  assert dispatch.choose("G", "e4m3", 60, 70, 3, table) == "xla_parts"
  assert dispatch.choose("G", "e4m3", 60, 70, 5, table) == "xla"         # bucket 16
  assert dispatch.choose("G", "e4m3", 60, 70, 17, table) == "pallas"     # above: no guess
  assert dispatch.choose("G", "e4m3", 128, 70, 1, table) == "pallas"     # other bucket
  assert dispatch.choose("G", "e5m2", 60, 70, 1, table) == "pallas"      # other layout


def test_bfloat16_x_runs_key_their_own_layouts():
  """A run with bfloat16 x (settings.x_dtype) writes "<layout>@bfloat16" cells; a call with
  bfloat16 x takes them where its (device, layout, bucket) has some, the float32 x cells
  otherwise; float32 / float16 x never take them."""
  doc = _doc("2026-03-01T00:00:00+00:00", [
      _row("pallas", "e4m3", "1024x2048", 16, 40.0),
      _row("xla_parts", "e4m3", "1024x2048", 16, 20.0)])
  doc["settings"] = {"x_dtype": "bfloat16"}
  cells = tune.cells_of_run(doc, "gemv_bf16x")
  assert list(cells) == [("Test GPU", "e4m3@bfloat16", (1024, 2048), 16)]
  assert cells[("Test GPU", "e4m3@bfloat16", (1024, 2048), 16)][0] == "xla_parts"
  assert dispatch.table_layout("e4m3", jnp.bfloat16) == "e4m3@bfloat16"
  assert dispatch.table_layout("e4m3", jnp.float32) == "e4m3"
  table = {("G", "e4m3", (1024, 2048), 16): _entry("pallas", pallas=2.0),
           ("G", "e4m3@bfloat16", (1024, 2048), 16): _entry("xla_parts", pallas=2.0,
                                                            xla_parts=1.0),
           ("G", "e5m2", (1024, 2048), 16): _entry("xla", pallas=2.0, xla=1.0)}
  assert dispatch.choose("G", "e4m3", 1024, 2048, 9, table, x_dtype=jnp.bfloat16) == "xla_parts"
  assert dispatch.choose("G", "e4m3", 1024, 2048, 9, table) == "pallas"
  assert dispatch.choose("G", "e4m3", 1024, 2048, 9, table, x_dtype=jnp.float16) == "pallas"
  assert dispatch.choose("G", "e4m3", 1024, 2048, 17, table, x_dtype=jnp.bfloat16) == "pallas"
  # no bfloat16 cells for e5m2: the float32 x cells
  assert dispatch.choose("G", "e5m2", 1024, 2048, 9, table, x_dtype=jnp.bfloat16) == "xla"
  # the committed table: e4m3 at the Llama shapes, batch 64, bfloat16 x
  assert dispatch.choose(H200, "e4m3", 28672, 4096, 64, x_dtype=jnp.bfloat16) == "xla_parts"


def _entry(impl, ratio=None, shape="64x64", source="s", **times):
  return dispatch.Entry(impl, ratio, times, {}, shape, source)


def test_committed_table_is_what_its_sources_give():
  """The table file is the script's output from the results files its SOURCES name."""
  with open(tune.TABLE_PATH) as f:
    text = f.read()
  paths = tune.source_paths(text)
  assert paths and all(os.path.exists(p) for p in paths)
  assert tune.regenerate(text, tune.load(paths)) == text
  assert set(dispatch.SOURCES) == {key[0] for key in dispatch.TABLE}


def _row(op, fmt, size, batch, dev_us, status="ok"):
  n, k = size.split("x")
  row = {"op": op, "format": fmt, "size": size, "n_out": int(n), "k": int(k), "batch": batch,
         "status": status, "time_us": 99.0}
  if dev_us is not None:
    row["device_us_per_op"] = dev_us
  return row


def _doc(date, rows, device="Test GPU", smoke=False):
  return {"date": date, "smoke": smoke, "machine": {"device_kind": device}, "rows": rows}


_TEMPLATE = """x = 1
# BEGIN GENERATED TABLE: old header
SOURCES = {'Other GPU': ('gemv_other',), 'Test GPU': ('gemv_stale',)}
_MEASURED = {
    ('Other GPU', 'e4m3', (1024, 1024), 1):
        ('xla', 1.25, {'pallas': 5.0, 'xla': 4.0}, {}, '1024x1024', 'gemv_other'),
    ('Test GPU', 'bf16', (64, 64), 1):
        ('xla', 1.25, {'pallas': 5.0, 'xla': 4.0}, {}, '64x64', 'gemv_stale'),
}
# END GENERATED TABLE
y = 2
"""

# The picks and ratios below are worked out by hand from _synthetic_docs' device times
# (ratio = pallas us / the fastest other path's us, rounded to 3 places; the kernel is kept
# unless ratio >= 1.03).
_EXPECTED = """x = 1
# BEGIN GENERATED TABLE: written by benchmarks/tune_gemv_dispatch.py; rerun it, do not edit.
SOURCES: dict[str, tuple[str, ...]] = {
    'Other GPU': (
        'gemv_other',
    ),
    'Test GPU': (
        'gemv_old',
        'gemv_new',
    ),
}
# (device kind, layout, (n_out, k) bucket, batch bucket):
#     (implementation, pallas us / fastest other path's us, {implementation: op
#      device us}, {XLA GEMV op: us}, measured shape, results file)
_MEASURED: dict[tuple[str, str, tuple[int, int], int], tuple] = {
    ('Other GPU', 'e4m3', (1024, 1024), 1):
        ('xla', 1.25, {'pallas': 5.0, 'xla': 4.0}, {},
         '1024x1024', 'gemv_other'),
    ('Test GPU', 'bf16', (1024, 2048), 16):
        ('pallas', 1.026, {'pallas': 40.0, 'xla': 45.0, 'xla_parts': 39.0}, {},
         '1024x2048', 'gemv_old'),
    ('Test GPU', 'bf16', (1024, 2048), 64):
        ('xla_parts', 1.036, {'pallas': 100.0, 'xla_parts': 96.5}, {},
         '1024x2048', 'gemv_old'),
    ('Test GPU', 'e4m3', (1024, 2048), 1):
        ('pallas', 0.846, {'pallas': 11.0, 'xla': 13.0}, {'xla_e4m3': 10.0},
         '1024x2048', 'gemv_new'),
    ('Test GPU', 'e4m3', (1024, 2048), 4):
        ('xla', 1.29, {'pallas': 20.0, 'xla': 15.5}, {},
         '1024x2048', 'gemv_old'),
    ('Test GPU', 'e5m2', (1024, 2048), 16):
        ('xla_parts', 1.333, {'pallas': 40.0, 'xla': 41.0, 'xla_parts': 30.0}, {},
         '1024x2048', 'gemv_old'),
    ('Test GPU', 'mxfp4', (1024, 2048), 1):
        ('pallas', None, {'pallas': 8.0}, {'xla_e4m3': 9.0, 'xla_bf16': 7.0},
         '1024x2048', 'gemv_old'),
    ('Test GPU', 'mxfp8', (1024, 2048), 16):
        ('xla', 1.333, {'pallas': 40.0, 'xla': 30.0, 'xla_parts': 30.0}, {},
         '1024x2048', 'gemv_old'),
    ('Test GPU', 'nvfp4', (1024, 2048), 16):
        ('xla_parts', 1.143, {'pallas': 40.0, 'xla_parts': 35.0}, {},
         '1024x2048', 'gemv_old'),
    ('Test GPU', 'nvfp4', (1024, 2048), 64):
        ('pallas', None, {'pallas': 100.0}, {},
         '1024x2048', 'gemv_old'),
    ('Test GPU', 'nvfp4_2d', (4096, 2048), 2):
        ('pallas', 1.004, {'pallas': 30.0, 'xla': 29.9}, {},
         '3000x2048', 'gemv_old'),
}
# END GENERATED TABLE
y = 2
"""


def _disagrees(row):
  return dict(row, agrees=False, max_rel_diff_vs_reference=0.5)


def _synthetic_docs():
  old = _doc("2026-01-01T00:00:00+00:00", [
      _row("xla_e4m3", "float8_e4m3fn", "1024x2048", 1, 9.0),
      _row("xla_bf16", "bfloat16", "1024x2048", 1, 7.0),
      _row("pallas", "e4m3", "1024x2048", 1, 10.0),
      _row("xla_packed", "e4m3", "1024x2048", 1, 12.0),
      _row("pallas", "e4m3", "1024x2048", 4, 20.0),
      _row("xla_packed", "e4m3", "1024x2048", 4, 15.5),        # 1.29x faster: xla
      # the same bucket, farther from it (1100 rounds to 1024): left out
      _row("pallas", "e4m3", "1100x2048", 4, 50.0),
      _row("pallas", "mxfp4", "1024x2048", 1, 8.0),            # the kernel alone: pallas
      _row("xla_parts", "mxfp4", "1024x2048", 16, 5.0),        # no pallas row: no entry
      _row("pallas", "nvfp4_2d", "3000x2048", 2, 30.04),       # 3000 rounds to 4096
      _row("xla_packed", "nvfp4_2d", "3000x2048", 2, 29.91),   # 0.4% faster: noise, pallas
      # three paths
      _row("pallas", "e5m2", "1024x2048", 16, 40.0),
      _row("xla_packed", "e5m2", "1024x2048", 16, 41.0),
      _row("xla_parts", "e5m2", "1024x2048", 16, 30.0),        # fastest by 1.33x
      _row("pallas", "bf16", "1024x2048", 16, 40.0),
      _row("xla_packed", "bf16", "1024x2048", 16, 45.0),
      _row("xla_parts", "bf16", "1024x2048", 16, 39.0),        # 2.6% faster: pallas kept
      _row("pallas", "bf16", "1024x2048", 64, 100.0),
      _row("xla_parts", "bf16", "1024x2048", 64, 96.5),        # 3.6% faster: xla_parts
      # a tie of the two xla paths: the first in dispatch.IMPLEMENTATIONS
      _row("pallas", "mxfp8", "1024x2048", 16, 40.0),
      _row("xla_parts", "mxfp8", "1024x2048", 16, 30.0),
      _row("xla_packed", "mxfp8", "1024x2048", 16, 30.0),
      # a path not measured (no xla_packed row): not a candidate
      _row("pallas", "nvfp4", "1024x2048", 16, 40.0),
      _row("xla_parts", "nvfp4", "1024x2048", 16, 35.0),
      # wrong results are not candidates: a fast xla_parts that disagrees, a pallas row that
      # disagrees (its cell gets no entry: the fallback)
      _row("pallas", "nvfp4", "1024x2048", 64, 100.0),
      _disagrees(_row("xla_parts", "nvfp4", "1024x2048", 64, 50.0)),
      _disagrees(_row("pallas", "e4m3", "1024x2048", 64, 10.0)),
      _row("xla_packed", "e4m3", "1024x2048", 64, 50.0),
      _row("pallas", "mxfp4_had32", "1024x2048", 1, 1.0),      # a variant, not a layout
      _row("pallas", "e5m2", "1024x2048", 1, 1.0, status="error"),
      _row("pallas", "f16", "1024x2048", 1, None),             # no device time
      _row("reference", "mxfp4", "1024x2048", 1, 1.0),         # the golden model: not a path
      _row("pallas_int", "mxfp8", "1024x2048", 16, 1.0),       # a forced decode: not a path
  ])
  new = _doc("2026-02-01T00:00:00+00:00", [           # a later run replaces e4m3 batch 1
      _row("xla_e4m3", "float8_e4m3fn", "1024x2048", 1, 10.0),
      _row("pallas", "e4m3", "1024x2048", 1, 11.0),
      _row("xla_packed", "e4m3", "1024x2048", 1, 13.0),
  ])
  return [("gemv_new", new), ("gemv_old", old)]         # given newest first: dates order them


def test_tuning_script_writes_the_table_from_a_synthetic_run():
  assert tune.regenerate(_TEMPLATE, _synthetic_docs()) == _EXPECTED
  # Deterministic: the output rebuilt from itself is the same bytes.
  assert tune.regenerate(_EXPECTED, _synthetic_docs()) == _EXPECTED


def test_tuning_script_output_is_a_working_table():
  sources, measured = tune.parse_block(tune._split(_EXPECTED)[1])
  assert sources["Test GPU"] == ("gemv_old", "gemv_new")
  table = {k: dispatch.Entry(*v) for k, v in measured.items()}
  assert dispatch.choose("Test GPU", "e4m3", 1024, 2048, 3, table) == "xla"
  assert dispatch.choose("Test GPU", "e4m3", 1024, 2048, 1, table) == "pallas"
  assert dispatch.choose("Test GPU", "e4m3", 1024, 2048, 64, table) == "pallas"  # no entry
  assert dispatch.choose("Test GPU", "e5m2", 1024, 2048, 5, table) == "xla_parts"
  assert dispatch.choose("Test GPU", "bf16", 1024, 2048, 17, table) == "xla_parts"
  assert dispatch.choose("Test GPU", "nvfp4_2d", 3000, 2048, 1, table) == "pallas"
  assert dispatch.choose("Test GPU", "bf16", 64, 64, 1, table) == "pallas"   # stale: gone
  e = dispatch.lookup("Test GPU", "e5m2", 1024, 2048, 16, table)
  assert (e.pallas_us, e.xla_us, e.xla_parts_us, e.xla_f8_us) == (40.0, 41.0, 30.0, None)
  assert dispatch.lookup("Test GPU", "mxfp4", 1024, 2048, 1, table).xla_f8_us == 9.0


@pytest.mark.parametrize("times,want", [
    ({"pallas": 10.0}, ("pallas", None)),
    ({"pallas": 10.0, "xla": 9.0}, ("xla", 10 / 9)),                 # 11% faster
    ({"pallas": 10.0, "xla_parts": 9.8}, ("pallas", 10 / 9.8)),      # 2% faster: noise
    ({"pallas": 10.0, "xla_parts": 9.6}, ("xla_parts", 10 / 9.6)),   # 4% faster
    ({"pallas": 10.0, "xla": 12.0, "xla_parts": 11.0}, ("pallas", 10 / 11)),
    ({"pallas": 10.0, "xla": 8.0, "xla_parts": 7.0}, ("xla_parts", 10 / 7)),
    ({"pallas": 10.0, "xla": 7.0, "xla_parts": 7.0}, ("xla", 10 / 7)),   # tie: table order
    ({"pallas": 10.0, "xla_parts": 7.0, "xla": 7.0}, ("xla", 10 / 7)),   # either dict order
])
def test_pick_rule(times, want):
  impl, ratio = tune.pick(times)
  assert impl == want[0]
  assert ratio == (None if want[1] is None else pytest.approx(want[1], rel=1e-12))


def test_margin_is_three_percent():
  assert tune.MARGIN == 0.03
  # 1.0299x keeps the kernel, 1.0301x picks the other path
  assert tune.pick({"pallas": 10.299, "xla": 10.0})[0] == "pallas"
  assert tune.pick({"pallas": 10.301, "xla": 10.0})[0] == "xla"


def test_tuning_script_rejects_smoke_runs():
  with pytest.raises(ValueError, match="smoke"):
    tune.build([("s", _doc("2026-01-01", [_row("pallas", "e4m3", "64x64", 1, 1.0)],
                           smoke=True))])


def test_tuning_script_command_line(tmp_path):
  table = tmp_path / "dispatch.py"
  table.write_text(_TEMPLATE)
  paths = []
  for name, doc in _synthetic_docs():
    paths.append(tmp_path / f"{name}.json")
    paths[-1].write_text(json.dumps(doc))
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p))
  cmd = [sys.executable, os.path.join(_REPO, "benchmarks", "tune_gemv_dispatch.py"),
         f"--table={table}", f"--results={paths[1]},{paths[0]}"]
  check = subprocess.run(cmd + ["--check"], env=env, capture_output=True, text=True)
  assert check.returncode == 1 and table.read_text() == _TEMPLATE
  run = subprocess.run(cmd, env=env, capture_output=True, text=True)
  assert run.returncode == 0, run.stderr[-2000:]
  assert table.read_text() == _EXPECTED
  lines = run.stdout.splitlines()
  for want in [
      "xla       Test GPU e4m3 1024x2048 b=4: xla 15.5 us, pallas 20.0 (x1.29)",
      "xla_parts Test GPU e5m2 1024x2048 b=16: xla_parts 30.0 us, pallas 40.0, xla 41.0 "
      "(x1.333)",
      "margin    Test GPU nvfp4_2d 3000x2048 b=2: pallas 30.0 us kept, xla 29.9 "
      "(x1.004 < x1.03)",
      "behind    Test GPU e4m3 1024x2048 b=1: pallas 11.0 > XLA float8 10.0 us (gemv_new)",
      "wrong     Test GPU e4m3 1024x2048 b=64: pallas disagrees with the reference (max rel "
      "diff 0.5): not a candidate"]:
    assert want in lines, (want, run.stdout)
  again = subprocess.run(cmd + ["--check"], env=env, capture_output=True, text=True)
  assert again.returncode == 0 and "up to date" in again.stdout


# --- implementation=None -------------------------------------------------------------------


@pytest.fixture
def spy(monkeypatch):
  """Records the implementation gemv_packed resolves to instead of running it."""
  calls = []

  def fake(implementation, interpret, native, w, x):
    calls.append(implementation)
    return jnp.zeros(x.shape[:-1] + (w.shape[0],), x.dtype)
  monkeypatch.setattr(gemv_op, "_gemv", fake)
  return calls


def _weight(fmt="e4m3", n=64, k=128, **kw):
  # the golden model: with on_gpu faked, quantize's default would be its GPU kernel
  return fp8lab.quantize(jnp.asarray(np.random.default_rng(0).standard_normal((n, k)),
                                     jnp.float32), fmt, axis=-1, implementation="reference",
                         **kw)


def test_none_on_a_gpu_resolves_through_the_table(monkeypatch, spy):
  monkeypatch.setattr(_op, "on_gpu", lambda: True)
  monkeypatch.setattr(dispatch, "device_kind", lambda: "Test GPU")
  monkeypatch.setattr(dispatch, "TABLE", {
      ("Test GPU", "e4m3", (64, 128), 4): _entry("xla", pallas=2.0, xla=1.0),
      ("Test GPU", "e4m3", (64, 128), 16): _entry("pallas", pallas=2.0, xla=3.0),
      ("Test GPU", "e4m3", (64, 128), 32): _entry("xla_parts", pallas=2.0, xla_parts=1.0),
      ("Test GPU", "nvfp4_2d", (64, 128), 1): _entry("xla", pallas=2.0, xla=1.0),
      # a pick the format's path cannot serve (f16 values are not bfloat16 numbers)
      ("Test GPU", "f16", (64, 128), 1): _entry("xla_parts", pallas=2.0, xla_parts=1.0),
  })
  w = _weight()
  fp8lab.gemv_packed(w, jnp.ones((128,)))                  # batch 1 -> bucket 4: xla
  fp8lab.gemv_packed(w, jnp.ones((2, 2, 128)))             # 4 rows
  fp8lab.gemv_packed(w, jnp.ones((5, 128)))                # bucket 16: pallas
  fp8lab.gemv_packed(w, jnp.ones((17, 128)))               # bucket 32: xla_parts
  fp8lab.gemv_packed(w, jnp.ones((33, 128)))               # above the table: the fallback
  fp8lab.gemv_packed(_weight(n=60, k=100), jnp.ones((128 - 28,)))   # same bucket: xla
  fp8lab.gemv_packed(_weight("nvfp4", block_shape=(16, 16)), jnp.ones((128,)))
  fp8lab.gemv_packed(_weight("nvfp4"), jnp.ones((128,)))   # 1D scales: another layout
  fp8lab.gemv_packed(_weight("f16"), jnp.ones((128,)))     # xla_parts cannot: the kernel
  assert spy == ["xla", "xla", "pallas", "xla_parts", "pallas", "xla", "xla", "pallas",
                 "pallas"]
  spy.clear()
  # Given an implementation, a decode or interpret mode, the table is not asked.
  fp8lab.gemv_packed(w, jnp.ones((128,)), implementation="pallas")
  fp8lab.gemv_packed(w, jnp.ones((128,)), fp8_decode="integer")
  fp8lab.gemv_packed(w, jnp.ones((128,)), interpret=True)
  fp8lab.gemv_packed(w, jnp.ones((128,)), implementation="reference")
  assert spy == ["pallas", "pallas", "pallas", "reference"]


def test_none_off_the_gpu_is_unchanged(monkeypatch, spy):
  monkeypatch.setattr(_op, "on_gpu", lambda: False)

  def no_table(*a, **k):
    raise AssertionError("the table is for GPUs")
  monkeypatch.setattr(dispatch, "choose", no_table)
  w = _weight()
  fp8lab.gemv_packed(w, jnp.ones((128,)))
  fp8lab.gemv_packed(w, jnp.ones((128,)), interpret=True)
  fp8lab.gemv_packed(_weight("e4m3_block"), jnp.ones((128,)))
  assert spy == ["reference", "pallas", "reference"]


# --- the benchmark grid the table is measured on ------------------------------------------


def test_named_dispatch_plan_is_issue_20s_grid():
  from benchmarks import bench_gemv  # pylint: disable=import-outside-toplevel
  default = bench_gemv.Grid(ops=("pallas",), formats=("e4m3", "mxfp4"), sizes=("64x64",),
                            batches=(1,))
  (grid,) = bench_gemv.parse_plan(bench_gemv.NAMED_PLANS["dispatch"], default)
  assert grid == bench_gemv.Grid(
      ops=("pallas", "xla_packed", "xla_parts", "xla_e4m3"), formats=("e4m3", "mxfp4"),
      sizes=("16384x16384", "4096x14336", "14336x4096", "6144x4096", "28672x4096",
             "128256x4096"),
      batches=(1, 4, 16, 64))


def _bench_gemv_on_cpu(tmp_path, plan: str, batches: str) -> dict:
  """bench_gemv.py --plan=plan on a CPU at nvfp4 64x128 (a subprocess): its JSON."""
  out = tmp_path / "gemv.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p))
  proc = subprocess.run(
      [sys.executable, os.path.join(_REPO, "benchmarks", "bench_gemv.py"), f"--plan={plan}",
       "--formats=nvfp4", "--sizes=64x128", f"--batches={batches}", f"--out={out}"],
      env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  return json.loads(out.read_text())


@pytest.mark.slow    # ~14 s; the llama plan's CPU run below covers the named-plan path by default
def test_named_plan_on_a_cpu_runs_the_smoke_sizes(tmp_path):
  """--plan=dispatch on a CPU keeps its ops and the --formats, at the smoke sizes; its JSON
  is a smoke run, which the tuning script refuses."""
  doc = _bench_gemv_on_cpu(tmp_path, "dispatch", "2")
  assert doc["settings"]["grids"] == [{"ops": ["pallas", "xla_packed", "xla_parts", "xla_e4m3"],
                                       "formats": ["nvfp4"], "sizes": ["64x128"],
                                       "batches": [2]}]
  assert {(r["op"], r["size"], r["batch"], r["status"]) for r in doc["rows"]} == {
      (op, "64x128", 2, "ok") for op in ("pallas", "xla_packed", "xla_parts", "xla_e4m3")}
  with pytest.raises(ValueError, match="smoke"):
    tune.build([("smoke", doc)])


def test_named_llama_plan_is_the_decode_steps_grid():
  """The decode step's shapes x batches 1, 16, 64 with every path the tuner chooses among
  (the xla path at batch 1 only) and XLA's float8 and bfloat16 baselines."""
  from benchmarks import bench_gemv  # pylint: disable=import-outside-toplevel
  default = bench_gemv.Grid(ops=("pallas",), formats=bench_gemv.DEFAULT_FORMATS,
                            sizes=("64x64",), batches=(1,))
  (grid,) = bench_gemv.parse_plan(bench_gemv.NAMED_PLANS["llama"], default)
  assert grid == bench_gemv.Grid(
      ops=("xla_e4m3", "xla_bf16", "pallas", "xla_packed", "xla_parts"),
      formats=("e4m3", "e5m2", "mxfp8", "mxfp4", "nvfp4", "nvfp4_2d", "bf16"),
      sizes=("28672x4096", "4096x14336", "6144x4096", "4096x4096", "128256x4096"),
      batches=(1, 16, 64), op_batches=(("xla_packed", (1,)),))
  # every op the plan times is a candidate or a recorded baseline of the tuner
  assert set(grid.ops) == set(tune.OP_IMPLEMENTATIONS) | set(tune.BASELINE_OPS)


@pytest.mark.slow      # bench_gemv's llama plan on the CPU (~23 s); the GPU runs use it
def test_llama_plan_on_a_cpu_times_xla_packed_at_batch_1_only(tmp_path):
  doc = _bench_gemv_on_cpu(tmp_path, "llama", "1,2")
  assert {(r["op"], r["batch"], r["status"]) for r in doc["rows"]} == {
      (op, b, "ok") for op in ("xla_e4m3", "xla_bf16", "pallas", "xla_parts") for b in (1, 2)
  } | {("xla_packed", 1, "ok")}
