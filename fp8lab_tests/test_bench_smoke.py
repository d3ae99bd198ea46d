"""Smoke tests of the benchmarks: bench_gemv.py, its timing helpers, gpu_tune.py, the probes.

The benchmark's main entry is run as `./dev bench` runs it (a subprocess on the CPU backend,
the Pallas kernel in interpret mode) on the smallest shapes, and the JSON it writes is checked
field by field against values computed here. Timings themselves are never asserted on. Each
probe (benchmarks/probes/) and gpu_tune.py runs its main with tiny flags in a subprocess
(their absl flags would collide with bench_gemv's in one process).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from benchmarks import bench_gemv
from benchmarks import timing
from fp8lab.formats import get_format

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HAS_OPS = hasattr(fp8lab, "gemv_packed") and hasattr(fp8lab, "quantize")
_FP8LAB_OPS = ("pallas", "reference", "xla_packed")


def _run_script(script: str, *flags: str, timeout: int = 300) -> subprocess.CompletedProcess:
  """Runs a benchmarks/ script as a subprocess on the CPU backend; asserts rc 0."""
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p))
  env.pop("OUT", None)      # the probes' default --out; tests name their files
  proc = subprocess.run([sys.executable, os.path.join(_REPO, "benchmarks", script), *flags],
                        cwd=_REPO, env=env, capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return proc


def _run_bench(tmp_path, *flags: str) -> tuple[dict, str]:
  out = tmp_path / "gemv.json"
  proc = _run_script("bench_gemv.py", f"--out={out}", *flags)
  with open(out) as f:
    return json.load(f), proc.stdout


# Hand-written from docs/numerics.md (not read from the registry the benchmark reads): each
# format's element format, scale block along k (0: none) and rows per scale row.
_LAYOUT_FACTS = {"e4m3": ("e4m3", 0, 1), "e5m2": ("e5m2", 0, 1), "mxfp8": ("e4m3", 32, 1),
                 "mxfp8_e5m2": ("e5m2", 32, 1), "mxfp4": ("e2m1", 32, 1),
                 "mxfp4_had32": ("e2m1", 32, 1), "nvfp4": ("e2m1", 16, 1),
                 "nvfp4_2d": ("e2m1", 16, 16), "f16": ("f16", 0, 1), "bf16": ("bf16", 0, 1)}


def test_formats_come_from_the_registry():
  """Every registry layout is a benchmark format, with the layout's block shape; the
  variants add quantize arguments only; pallas_int covers the natively decoded elements."""
  want = set(_LAYOUT_FACTS)
  assert set(bench_gemv.FORMATS) == want
  for name, (elem, block, rows) in _LAYOUT_FACTS.items():
    qfmt, kwargs = bench_gemv.FORMATS[name]
    assert fp8lab.get_quantized_format(qfmt).element.name == elem
    if rows > 1:
      assert kwargs == {"block_shape": (rows, block)}
  assert bench_gemv.FORMATS["mxfp4_had32"] == ("mxfp4", {"hadamard": 32})
  assert set(bench_gemv.INT_DECODE_FORMATS) == {"e4m3", "e5m2", "mxfp8", "mxfp8_e5m2"}
  assert "xla_packed" in bench_gemv.DEFAULT_OPS


def test_xla_packed_op_calls_the_xla_implementation(monkeypatch):
  """xla_packed is gemv_packed(w, x, implementation="xla"): checked on the call it makes."""
  calls = []
  monkeypatch.setattr(fp8lab, "gemv_packed", lambda w, x, **kw: calls.append(kw) or x)
  assert bench_gemv.make_op("xla_packed", True)("w", "x") == "x"
  assert calls == [dict(implementation="xla", interpret=False, fp8_decode=None)]


def _expected_weight_bytes(fmt: str, n_out: int, k: int) -> dict[str, int]:
  """Stored bytes of the packed words and scales, from _LAYOUT_FACTS and the QuantizedArray
  contract (scales: one uint8 per block along k, per row or per 16 rows)."""
  elem, block, rows = _LAYOUT_FACTS[fmt]
  per_word = get_format(elem).per_word
  out = {"data": n_out * math.ceil(k / per_word) * 4}
  out["scales"] = math.ceil(n_out / rows) * math.ceil(k / block) if block else 0
  return out


def _check_common(doc: dict) -> None:
  for key in ("device_kind", "backend", "platform", "jax", "jaxlib"):
    assert doc["machine"][key], key
  assert doc["machine"]["backend"] == "cpu"
  assert doc["date"] and doc["git"]["commit"]
  assert "median" in doc["timing_method"]
  assert doc["smoke"] is True
  assert doc["copy_bandwidth"]["GBps"] > 0
  assert doc["copy_bandwidth"]["bytes_moved"] == 2 * doc["copy_bandwidth"]["array_bytes"]
  assert doc["dispatch_overhead_us"] > 0
  assert doc["skipped"] == []


def _check_row_numbers(r: dict, copy_gbps: float, rows: list[dict]) -> None:
  assert r["status"] == "ok", r.get("error")
  assert r["time_us"] > 0 and r["timing"]["median_us"] == r["time_us"]
  assert r["timing"]["p25_us"] <= r["time_us"] <= r["timing"]["p75_us"]
  assert r["GBps"] == pytest.approx(r["bytes_needed"] / (r["time_us"] * 1e-6) / 1e9)
  assert r["pct_copy_bw"] == pytest.approx(100 * r["GBps"] / copy_gbps)
  # Every copy of the unrolled call gave a different result (the copies are distinct data).
  assert r["outputs_distinct"] is True
  assert r["output_has_nan"] is False
  base = {b: next(x for x in rows if x["op"] == b and x["size"] == r["size"]
                  and x["batch"] == r["batch"]) for b in ("xla_f32", "xla_e4m3")}
  for b, br in base.items():
    assert r[f"speedup_vs_{b}"] == pytest.approx(br["time_us"] / r["time_us"])


def test_smoke_xla_baselines(tmp_path):
  """The XLA-only run needs nothing from fp8lab's ops; checks the JSON and the unrolling."""
  doc, stdout = _run_bench(tmp_path, "--ops=xla_f32,xla_bf16@3,xla_e4m3", "--sizes=200x300",
                           "--batches=1,3")
  _check_common(doc)
  rows = doc["rows"]
  # xla_bf16@3: that op at batch 3 only
  assert {(r["op"], r["batch"]) for r in rows} == {
      (op, b) for op in ("xla_f32", "xla_bf16", "xla_e4m3") for b in (1, 3)} - {("xla_bf16", 1)}
  assert doc["settings"]["grids"] == [{"ops": ["xla_f32", "xla_bf16", "xla_e4m3"],
                                       "formats": list(bench_gemv.DEFAULT_FORMATS),
                                       "sizes": ["200x300"], "batches": [1, 3],
                                       "op_batches": [["xla_bf16", [3]]]}]
  itemsize = {"xla_f32": (4, 4), "xla_bf16": (2, 2), "xla_e4m3": (1, 2)}
  for r in rows:
    _check_row_numbers(r, doc["copy_bandwidth"]["GBps"], rows)
    w_item, x_item = itemsize[r["op"]]
    assert (r["n_out"], r["k"], r["copies"]) == (200, 300, 2)
    assert r["bytes_needed"] == 200 * 300 * w_item + r["batch"] * (300 + 200) * x_item
    # The optimized module holds a dot per copy: XLA did not merge or drop any.
    assert r["hlo_ops"]["dot"] >= r["copies"]
  assert "xla_e4m3" in stdout and "copy bandwidth" in stdout


@pytest.mark.skipif(not _HAS_OPS, reason="fp8lab.gemv_packed / fp8lab.quantize not there yet")
def test_smoke_pallas_vs_reference(tmp_path):
  """Interpret-mode Pallas and the reference on the odd smallest shape, batches 1 and 4
  (a per-tensor and a 2D-block-scaled format; MX weights run through bench_decode's smoke)."""
  fmts = ("e4m3", "nvfp4_2d")
  ops = _FP8LAB_OPS + bench_gemv.XLA_OPS
  doc, stdout = _run_bench(tmp_path, "--sizes=200x300", "--batches=1,4",
                           f"--formats={','.join(fmts)}", f"--ops={','.join(ops)}")
  _check_common(doc)
  rows = doc["rows"]
  want = {(op, "-", b) for op in bench_gemv.XLA_OPS for b in (1, 4)}
  want |= {(op, f, b) for op in _FP8LAB_OPS for f in fmts for b in (1, 4)}
  assert {(r["op"], "-" if r["op"] in bench_gemv.XLA_OPS else r["format"], r["batch"])
          for r in rows} == want
  for r in rows:
    _check_row_numbers(r, doc["copy_bandwidth"]["GBps"], rows)
    if r["op"] not in _FP8LAB_OPS:
      continue
    exp = _expected_weight_bytes(r["format"], 200, 300)
    assert r["bytes_weights"]["data"] == exp["data"]
    assert r["bytes_weights"]["scales"] == exp["scales"]
    assert r["bytes_needed"] == (sum(r["bytes_weights"].values())
                                 + r["batch"] * (300 + 200) * 4)   # float32 x and y
    if r["op"] == "reference":
      assert r["hlo_ops"]["dot"] >= r["copies"]
    if r["op"] == "pallas":
      assert r["interpret"] is True
      # One interpret-mode kernel (a while loop over the grid) per copy.
      assert r["hlo_ops"]["while"] >= r["copies"]
    if r["op"] in ("pallas", "xla_packed"):
      # Pallas and reference computed the same products (float32 accumulation in another
      # order only); the bound is the benchmark's coarse alarm, the tests bound it tightly.
      assert 0 <= r["max_rel_diff_vs_reference"] <= doc["settings"]["agree_tol"]
      assert r["agrees"] is True
  assert "pallas vs reference: max rel diff" in stdout


def test_op_batches_in_plans():
  default = bench_gemv.Grid(ops=("pallas",), formats=("e4m3",), sizes=("64x64",),
                            batches=(1, 4, 16))
  (g,) = bench_gemv.parse_plan("ops=pallas,xla_packed@1+16,xla_parts", default)
  assert g.ops == ("pallas", "xla_packed", "xla_parts")
  assert g.op_batches == (("xla_packed", (1, 16)),)
  assert [b for b in g.batches if g.runs("xla_packed", b)] == [1, 16]
  assert [b for b in g.batches if g.runs("pallas", b)] == [1, 4, 16]
  assert g.settings()["op_batches"] == (("xla_packed", (1, 16)),)
  assert "op_batches" not in default.settings()
  for bad in ("ops=pallas,xla_packed@2", "ops=pallas,xla_packed@x", "op_batches=1"):
    with pytest.raises(ValueError):
      bench_gemv.parse_plan(bad, default)


def test_estimate_counts_the_plans_ops():
  """The llama plan's timed ops, counted by hand: per (format, shape) pallas and xla_parts at
  3 batches and xla_packed at 1 (7 ops; f16, whose values are not bfloat16 numbers, has no
  xla_parts: 4), 2 XLA baselines x 3 batches per shape; 5 shapes."""
  def grids(formats):
    default = bench_gemv.Grid(ops=("pallas",), formats=formats, sizes=("64x64",), batches=(1,))
    return bench_gemv.parse_plan(bench_gemv.NAMED_PLANS["llama"], default)
  assert bench_gemv.estimate_s(grids(("e4m3",)))[0] == 5 * 7 + 5 * 6
  assert bench_gemv.estimate_s(grids(("f16",)))[0] == 5 * 4 + 5 * 6
  assert bench_gemv.estimate_s(grids(bench_gemv.DEFAULT_FORMATS))[0] == 7 * 5 * 7 + 5 * 6
  n1, s1 = bench_gemv.estimate_s(grids(("e4m3",)))
  n2, s2 = bench_gemv.estimate_s(grids(("e4m3", "mxfp4")))
  assert s2 > s1 > n1      # more work, more time; over a second a timed op


# --- the roofline picture ------------------------------------------------------------------


def _roofline_doc():
  def row(op, fmt, size, batch, nbytes, dev_us, **kw):
    return dict({"op": op, "format": fmt, "size": size, "batch": batch, "status": "ok",
                 "bytes_needed": nbytes, "time_us": 2 * dev_us, "device_us_per_op": dev_us,
                 "GBps": nbytes / (2 * dev_us) * 1e-3},                # host GB/s
                **kw)
  return {"machine": {"device_kind": "Test GPU"}, "date": "2026-01-01",
          "copy_bandwidth": {"GBps": 3000.0},
          "rows": [
              row("xla_e4m3", "float8_e4m3fn", "256x512", 1, 2_000_000, 1.0),   # 2000 GB/s
              row("pallas", "e4m3", "256x512", 1, 1_000_000, 0.5),              # 2000
              row("xla_parts", "e4m3", "256x512", 1, 1_000_000, 2.0),           # 500
              row("pallas", "nvfp4", "256x512", 16, 600_000, 0.4),              # 1500
              row("pallas", "e4m3", "256x512", 16, 1_200_000, 1.2),             # 1000
              row("xla_bf16", "bfloat16", "128x64", 4, 300_000, 0.25),          # 1200
              row("pallas", "e4m3", "128x64", 4, 0, 0.5, status="error",
                  error="E"),                                                 # left out
          ]}


def test_roofline_data_from_a_synthetic_run():
  data = bench_gemv.roofline_data(_roofline_doc())
  assert data["time"] == "device"
  assert data["cells"] == [["256x512", 1], ["256x512", 16], ["128x64", 4]]
  xla = {"xla_bf16": [None, None, pytest.approx(1200.0)],
         "xla_e4m3": [pytest.approx(2000.0), None, None]}
  assert data["panels"] == [                                # registry order of formats
      {"format": "e4m3", "run": "2026-01-01", "copy_GBps": 3000.0, "xla": xla,
       "fp8lab": {"pallas": [pytest.approx(2000.0), pytest.approx(1000.0), None],
                  "xla_parts": [pytest.approx(500.0), None, None]}},
      {"format": "nvfp4", "run": "2026-01-01", "copy_GBps": 3000.0, "xla": xla,
       "fp8lab": {"pallas": [None, pytest.approx(1500.0), None]}}]
  # without device times (a run off the GPU): host times, and the picture says so
  doc = _roofline_doc()
  for r in doc["rows"]:
    del r["device_us_per_op"]
  data = bench_gemv.roofline_data(doc)
  assert data["time"] == "host"
  assert data["panels"][0]["fp8lab"]["pallas"][0] == pytest.approx(1000.0)


def test_roofline_data_of_several_runs():
  """Runs that timed other formats: a panel per format and run, each with its own run's XLA
  GEMVs and copy bandwidth; the cells are every run's."""
  other = {"machine": {"device_kind": "Test GPU"}, "date": "2026-01-02",
           "copy_bandwidth": {"GBps": 2000.0},
           "rows": [dict(_roofline_doc()["rows"][1], format="mxfp4", size="64x64"),
                    dict(_roofline_doc()["rows"][0], size="64x64", device_us_per_op=4.0)]}
  data = bench_gemv.roofline_data([_roofline_doc(), other])
  assert data["cells"] == [["256x512", 1], ["256x512", 16], ["128x64", 4], ["64x64", 1]]
  assert [(p["format"], p["run"], p["copy_GBps"]) for p in data["panels"]] == [
      ("e4m3", "2026-01-01", 3000.0), ("mxfp4", "2026-01-02", 2000.0),
      ("nvfp4", "2026-01-01", 3000.0)]
  mx = data["panels"][1]
  assert mx["fp8lab"] == {"pallas": [None, None, None, pytest.approx(2000.0)]}
  assert mx["xla"] == {"xla_e4m3": [None, None, None, pytest.approx(500.0)]}
  assert data["panels"][0]["xla"]["xla_e4m3"][3] is None        # not the other run's
  assert data["title"] == "Test GPU; 2026-01-01, 2026-01-02"


def test_roofline_without_matplotlib_says_so(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib fails
  out = tmp_path / "r.png"
  why = bench_gemv.draw_roofline(bench_gemv.roofline_data(_roofline_doc()), str(out))
  assert "matplotlib" in why and not out.exists()
  assert bench_gemv.draw_roofline(bench_gemv.roofline_data({"rows": []}), str(out)) is not None
  assert not out.exists()


def test_roofline_png(tmp_path):
  pytest.importorskip("matplotlib")
  out = tmp_path / "r.png"
  assert bench_gemv.draw_roofline(bench_gemv.roofline_data(_roofline_doc()), str(out)) is None
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summarize_draws_the_roofline(tmp_path):
  src, src2, out = tmp_path / "r.json", tmp_path / "r2.json", tmp_path / "r.png"
  src.write_text(json.dumps(_roofline_doc()))
  src2.write_text(json.dumps(dict(_roofline_doc(), date="2026-01-02")))
  proc = _run_script("bench_gemv.py", f"--summarize={src},{src2}", f"--roofline={out}")
  assert proc.stdout.count("256x512") >= 2 * 4           # a table per file first
  if out.exists():
    assert f"roofline: {out}" in proc.stdout and out.read_bytes()[:4] == b"\x89PNG"
  else:
    assert "roofline skipped: matplotlib is not importable" in proc.stdout


def test_unrolled_call_does_the_work_copies_times():
  """compile_unrolled keeps one op per copy and each result belongs to its own copy."""
  r, n, k = 3, 48, 40
  rng = np.random.default_rng(0)
  ws = [jnp.asarray(rng.standard_normal((n, k), np.float32)) for _ in range(r)]
  xs = [jnp.asarray(rng.standard_normal((2, k), np.float32)) for _ in range(r)]
  compiled = timing.compile_unrolled(bench_gemv.make_op("xla_f32", False), list(zip(ws, xs)))
  assert timing.count_hlo_ops(compiled.as_text())["dot"] >= r
  outs = compiled(list(zip(ws, xs)))
  assert len(outs) == r and timing.outputs_distinct(outs)
  for w, x, y in zip(ws, xs, outs):
    ref = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T
    # float32 products of k=40 terms: |error| <= k * eps32 * sum|x||w| per element
    # (eps32 = 2^-23; the CPU backend computes float32 dots in float32, no TF32 or bf16).
    bound = k * 2.0**-23 * (np.abs(np.asarray(x, np.float64)) @ np.abs(np.asarray(w)).T)
    assert np.all(np.abs(np.asarray(y, np.float64) - ref) <= bound)
  # The distinctness check can fail: identical copies give identical results.
  same = compiled([(ws[0], xs[0])] * r)
  assert not timing.outputs_distinct(same)


def test_timing_divides_by_copies():
  compiled = jax.jit(lambda v: v * 2.0).lower(jnp.ones(4)).compile()
  t = timing.time_compiled(compiled, jnp.ones(4), reps=5, warmup=1, copies=4)
  assert (t.copies, t.reps, t.warmup) == (4, 5, 1)
  assert 0 < t.min_us <= t.p25_us <= t.median_us <= t.p75_us
  with pytest.raises(ValueError):
    timing.time_compiled(compiled, jnp.ones(4), reps=0, warmup=0, copies=1)


@pytest.mark.parametrize("bytes_per_copy,expected", [
    (2**30, 8),              # 1 GiB float32 16384^2: 8 GiB per call
    (268_435_456, 32),       # e4m3 16384^2
    (16 * 2**20, 128),       # small weights: capped at max_copies
    (20 * 2**30, 1),         # larger than the memory budget: one copy
    (3 * 2**30, 4),          # 8 GiB per call needs 3: min_copies (4) binds
    (5 * 2**30, 3),          # min_copies wants 4, the memory budget (16 GiB) holds 3
])
def test_choose_copies(bytes_per_copy, expected):
  got = timing.choose_copies(bytes_per_copy, l2_bytes=60 * 2**20, call_bytes=8 * 2**30,
                             max_bytes=16 * 2**30, max_copies=128)
  assert got == expected


def test_choose_copies_covers_l2():
  # 10 MiB weights, call target tiny: 4 x 60 MiB of L2 needs 24 copies.
  assert timing.choose_copies(10 * 2**20, l2_bytes=60 * 2**20, call_bytes=1,
                              max_bytes=2**40) == 24
  with pytest.raises(ValueError):
    timing.choose_copies(0, l2_bytes=1, call_bytes=1, max_bytes=1)


def test_plan_parsing():
  default = bench_gemv.Grid(ops=("pallas",), formats=("e4m3",), sizes=("64x64",), batches=(1,))
  grids = bench_gemv.parse_plan("sizes=128x256 batches=1,16; formats=mxfp4,e5m2", default)
  assert grids[0] == bench_gemv.Grid(("pallas",), ("e4m3",), ("128x256",), (1, 16))
  assert grids[1] == bench_gemv.Grid(("pallas",), ("mxfp4", "e5m2"), ("64x64",), (1,))
  for bad in ("sizes=12x", "formats=fp7", "ops=cublas", "color=red", "batches=0", ";"):
    with pytest.raises(ValueError):
      bench_gemv.parse_plan(bad, default)


def test_missing_ops_fail_clearly(monkeypatch):
  monkeypatch.delattr(fp8lab, "gemv_packed", raising=False)
  with pytest.raises(SystemExit, match="gemv_packed"):
    bench_gemv.check_fp8lab_api(["pallas"])
  bench_gemv.check_fp8lab_api(["xla_f32"])   # the XLA baselines do not need it


def test_max_rel_diff():
  ref = (np.array([1.0, -4.0, 2.0], np.float32), np.array([8.0, 0.5], np.float32))
  y = (np.array([1.0, -4.0, 2.5], np.float32), np.array([8.0, 0.25], np.float32))
  # Copy 0: 0.5 / 4; copy 1: 0.25 / 8; the worst copy counts.
  assert bench_gemv.max_rel_diff(y, ref) == 0.125
  assert bench_gemv.max_rel_diff(ref, ref) == 0.0
  y_nan = (np.array([1.0, np.nan, 2.0], np.float32), ref[1])
  assert math.isnan(bench_gemv.max_rel_diff(y_nan, ref))


# --- gpu_tune.py and the probes: each main with tiny flags, interpret mode on the CPU ------


def test_gpu_tune_checks(tmp_path):
  out = tmp_path / "tune.json"
  _run_script("gpu_tune.py", "--smoke", "--check_formats=nvfp4_2d", "--check_cases=b3b",
              f"--out={out}")
  rows = json.loads(out.read_text())["check"]
  assert [(r["format"], r["batch"], r["x_dtype"]) for r in rows] == [("nvfp4_2d", 3, "bfloat16")]
  assert rows[0]["ok"] and rows[0]["deterministic"] and 0 <= rows[0]["err_over_bound"] <= 1


def test_probe_configs(tmp_path):
  out = tmp_path / "configs.json"
  _run_script("probes/configs.py", "--formats=e4m3", "--sizes=48x256", "--batches=2",
              "--configs=16:16,16:16:4:3:2", "--nodefault_config", "--copies=2", "--reps=1",
              "--warm_s=0", "--nobaselines", "--nokernel_only", f"--out={out}")
  doc = json.loads(out.read_text())
  assert doc["interpret"] is True and doc["decode"] == {"native_fp8": False, "asm_e2m1": False}
  rows = doc["rows"]
  assert [r["config"] for r in rows] == [[16, 16, 4, 3, 0, 0, False, False],
                                        [16, 16, 4, 3, 2, 0, False, False]]
  assert all(r["full_us"] > 0 and "error" not in r for r in rows)
  assert rows[0]["same_bits_as_first"] is True


def test_probe_accuracy(tmp_path):
  out = tmp_path / "accuracy.json"
  _run_script("probes/accuracy.py", "--formats=e4m3", "--size=64", "--batches=3",
              "--chain_dots=0", f"--out={out}")
  (row,) = json.loads(out.read_text())["rows"]
  assert (row["format"], row["n"], row["k"], row["batch"]) == ("e4m3", 64, 64, 3)
  # Within the kernel's documented bound, 2 (k + 7) u of |x| @ |W|^T.
  assert 0 <= row["err_max_u"] <= 2 * (64 + 7) and row["rel_max"] < 1e-5


def test_probe_ncu_gemv():
  proc = _run_script("probes/ncu_gemv.py", "--formats=nvfp4_2d", "--size=64", "--launches=1",
                     "--config=16,16")
  assert "nvfp4_2d plan FormatPlan(format='nvfp4'" in proc.stdout
  assert "block_rows=16, block_k=16" in proc.stdout


def test_probe_hlo_kernels():
  proc = _run_script("probes/hlo_kernels.py", "--cases=e4m3:2", "--size=64",
                     "--implementation=reference")
  head, *lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
  assert head.startswith("== e4m3 batch 2 (") and lines
  assert all(" fusion(" in ln or " custom-call(" in ln for ln in lines)


def test_probe_ncu_sass_mix(tmp_path):
  csv_path = tmp_path / "sass.csv"
  csv_path.write_text(
      '"Kernel Name","fp8lab_gemv_nvfp4"\n'
      '"Address","Source","Instructions Executed","Warp Stall Sampling (All Samples)",'
      '"stall_long_sb","stall_wait"\n'
      '"0","IMAD.WIDE R1, R2, R3","100","10","6","4"\n'
      '"1","@P0 LDG.E.128 R4, [R1]","50","30","25","5"\n'
      '"2","IMAD R5, R6, R7","50","0","0","0"\n')
  out = _run_script("probes/ncu_sass_mix.py", f"--csv={csv_path}").stdout.splitlines()
  assert out[0] == "fp8lab_gemv_nvfp4: 200 warp instructions executed, 40 stall samples"
  # IMAD: 150 of 200 instructions, 10 of 40 samples; the predicate @P0 is not an opcode.
  assert out[1].split() == ["IMAD", "150", "75.0%", "of", "instructions", "25.0%", "of",
                            "samples"]
  assert out[2].split()[:3] == ["LDG", "50", "25.0%"]
  assert out[3] == "  stall reasons, % of samples: long_sb 77.5, wait 22.5"


def test_probe_sweep_codec(tmp_path):
  out = tmp_path / "sweep.json"
  _run_script("probes/sweep_codec.py", "--format=e8m0", "--chunk_log2=12", "--max_chunks=1",
              f"--out={out}")
  doc = json.loads(out.read_text())
  assert (doc["format"], doc["elements"], doc["complete"], doc["mismatches"]) == (
      "e8m0", 4096, False, 0)


@pytest.mark.parametrize("script", ["gpu_run.sh", "probes/ncu_run.sh"])
def test_shell_scripts_parse(script):
  subprocess.run(["bash", "-n", os.path.join(_REPO, "benchmarks", script)], check=True)


def test_scripts_use_public_kernel_names_only():
  """No benchmark reads a private name of fp8lab or assigns to a module's attribute."""
  import re  # pylint: disable=import-outside-toplevel
  private = re.compile(r"\b(G|gemv|gemv_kernel|fp8lab(\.\w+)*)\._(?!_)\w")
  assign = re.compile(r"^\s*(G|gemv|gemv_kernel|fp8lab(\.\w+)*)\.\w+\s*=[^=]", re.M)
  root = os.path.join(_REPO, "benchmarks")
  paths = [os.path.join(d, f) for d, _, fs in os.walk(root) if "results" not in d
           for f in fs if f.endswith(".py")]
  assert len(paths) >= 10
  for path in paths:
    text = open(path).read()
    assert not private.search(text), (path, private.search(text).group(0))
    assert not assign.search(text), (path, assign.search(text).group(0))


def test_smoke_bench_quantize(tmp_path):
  """bench_quantize.py's main on the CPU: every row ran, the kernel's bytes equal the
  reference's (exact), and bytes_needed is x read once (twice for current scaling) plus the
  outputs, computed here from the shapes."""
  out = tmp_path / "quantize.json"
  _run_script("bench_quantize.py", f"--out={out}", "--cases=e4m3_current,mxfp4,nvfp4_delayed",
              "--impls=pallas,reference", "--xla=copy,xla_given", "--sizes=32x64")
  with open(out) as f:
    doc = json.load(f)
  rows = {(r["impl"], r["op"]): r for r in doc["rows"]}
  assert all(r["status"] == "ok" for r in rows.values()), rows
  assert rows[("pallas", "mxfp4")]["exact"] is True
  n = 32 * 64
  x_bytes = 2 * n                                           # bfloat16 input
  # mxfp4: 8 codes per word + one E8M0 scale per 32 + the float32 amax
  assert rows[("pallas", "mxfp4")]["bytes_needed"] == x_bytes + n // 2 + n // 32 + 4
  # e4m3 current scaling: two reads of x, 1 byte per code, tensor scale and amax
  assert rows[("pallas", "e4m3_current")]["bytes_needed"] == 2 * x_bytes + n + 4 + 4
  assert rows[("xla", "copy")]["bytes_needed"] == 2 * x_bytes
  assert rows[("pallas", "mxfp4")]["pct_copy"] > 0


def test_smoke_bench_attention(tmp_path):
  """bench_attention.py's main on the CPU (interpret-mode kernel): every row ran with a
  finite output, and bytes_needed is K and V as stored plus q and the output, computed here
  from the smoke size's shapes (B 2, S 256, Hq 8, Hkv 2, D 64, bfloat16 q)."""
  out = tmp_path / "attention.json"
  _run_script("bench_attention.py", f"--out={out}", "--cases=e4m3_block,nvfp4_paged",
              "--baselines=copy,xla_bf16")
  with open(out) as f:
    doc = json.load(f)
  rows = {r["op"]: r for r in doc["rows"]}
  assert set(rows) == {"copy", "xla_bf16", "e4m3_block", "nvfp4_paged"}
  assert all(r["status"] == "ok" and r["finite"] for r in rows.values()), rows
  n = 2 * 256 * 2 * 64                                      # K (or V) elements
  q_and_out = 2 * (2 * 8 * 64 * 2)                          # bfloat16 q and output
  # e4m3_block with block D: one byte per code, one float32 scale per token and head
  assert rows["e4m3_block"]["bytes_needed"] == 2 * (n + 4 * n // 64) + q_and_out
  # nvfp4: half a byte per code, one E4M3 scale byte per 16, a float32 tensor scale
  assert rows["nvfp4_paged"]["bytes_needed"] == 2 * (n // 2 + n // 16 + 4) + q_and_out
  assert rows["e4m3_block"]["pct_copy"] > 0
