"""Smoke test of benchmarks/bench_decode.py: its main on the CPU backend at the tiny size.

Run as a subprocess (its absl flags share names with bench_gemv's, which test_bench_smoke.py
imports), 2 layers of the smoke model, the kernel in interpret mode. The JSON is checked
against sizes and byte counts worked out here by hand; timings are never asserted on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The smoke model: 2 layers, hidden 64, 4 query heads and 2 KV heads of 16, MLP 128, vocab 256.
_MODEL = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16,
          "intermediate": 128, "vocab": 256}
# (n_out, k): QKV (4 + 2 * 2) * 16 = 128 rows, gate-up 2 * 128.
_MATRICES = {"qkv": [128, 64], "o": [64, 64], "gate_up": [256, 64], "down": [64, 128],
             "lm_head": [256, 64]}
_LAYER_PARAMS = 128 * 64 + 64 * 64 + 256 * 64 + 64 * 128          # 36864 weights a layer
_LM_PARAMS = 256 * 64
_GAINS = 2 * 2 * 64 * 2 + 64 * 2          # bf16 g_attn and g_mlp per layer, g_final


def _mx4_bytes(n: int, k: int) -> int:
  return n * k // 2 + n * k // 32         # 8 codes per uint32 word, one E8M0 code per 32


# Bytes of the weights a step reads, per path (the embedding's B rows are counted apart).
_WEIGHT_BYTES = {
    "bf16": 2 * (2 * _LAYER_PARAMS + _LM_PARAMS) + _GAINS,
    # one byte per code and a float32 scale per matrix (4 a layer, 1 for the LM head)
    "xla_e4m3": 2 * _LAYER_PARAMS + _LM_PARAMS + 4 * 9 + _GAINS,
    "fp8lab_e4m3": 2 * _LAYER_PARAMS + _LM_PARAMS + 4 * 9 + _GAINS,
    "fp8lab_nvfp4": (2 * _LAYER_PARAMS + _LM_PARAMS) * 9 // 16 + 4 * 9 + _GAINS,
    "fp8lab_mxfp4": 2 * sum(_mx4_bytes(*_MATRICES[m]) for m in ("qkv", "o", "gate_up", "down"))
                    + _mx4_bytes(256, 64) + _GAINS,
}
# KV caches of batch 2, length 32: 2 layers x (k, v) x 2 x 32 x 2 heads x 16, bf16.
_KV_BYTES = 2 * 2 * 2 * 32 * 2 * 16 * 2


def _run(tmp_path, paths, *extra):
  out = tmp_path / "decode.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p))
  env.pop("FP8LAB_BENCH_SMOKE", None)
  proc = subprocess.run(
      [sys.executable, os.path.join(_REPO, "benchmarks", "bench_decode.py"), f"--out={out}",
       f"--paths={','.join(paths)}", "--reps=2", "--warmup=0", "--copy_gib=0", *extra],
      cwd=_REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return json.loads(out.read_text()), proc.stdout


def _check(doc, stdout, paths):
  assert doc["smoke"] is True and doc["machine"]["backend"] == "cpu"
  assert doc["model"] == _MODEL and doc["matrices"] == _MATRICES
  s = doc["settings"]
  assert (s["interpret"], s["attention"], s["check"], s["cases"]) == (True, "xla", True,
                                                                       [[2, 32]])
  rows = {r["path"]: r for r in doc["rows"]}
  assert set(rows) == set(paths) and len(doc["rows"]) == len(paths)
  for path, r in rows.items():
    assert r["status"] == "ok", r.get("error")
    assert (r["batch"], r["kv_len"]) == (2, 32)
    assert r["weight_bytes"] == _WEIGHT_BYTES[path], path
    assert r["bytes_needed"] == _WEIGHT_BYTES[path] + _KV_BYTES + 2 * 64 * 2   # + 2 x rows
    assert r["tokens_per_s"] == pytest.approx(2 / (r["step_us"] * 1e-6))
    assert r["timing"]["reps"] == 2 and r["timing"]["copies"] == 1
    assert r["vs_bf16"] == pytest.approx(r["tokens_per_s"] / rows["bf16"]["tokens_per_s"])
    # the back-to-back steps (2 in a smoke run), their own ratio to bf16's
    assert r["timing_pipelined"]["copies"] == s["pipelined_steps"] == 2
    assert r["tokens_per_s_pipelined"] == pytest.approx(2 / (r["step_us_pipelined"] * 1e-6))
    assert r["vs_bf16_pipelined"] == pytest.approx(
        r["tokens_per_s_pipelined"] / rows["bf16"]["tokens_per_s_pipelined"])
    assert "gpu_pipelined" not in r and "step_us_loop" not in r      # CPU; loop off
    if path.startswith("fp8lab"):
      # the kernel's logits (interpret mode) against the golden model's, same weights
      assert 0 <= r["max_rel_diff_vs_reference"] <= s["agree_tol"] and r["agrees"] is True
      assert r["implementation"] == "auto"
    else:
      assert "max_rel_diff_vs_reference" not in r
  assert rows["bf16"]["vs_bf16"] == 1.0
  assert "tok/s" in stdout and "vs bf16" in stdout


def test_smoke_decode_step(tmp_path):
  """The XLA paths and the 4-bit MX path (the one issue 20 is about), at the smoke size."""
  paths = ["bf16", "xla_e4m3", "fp8lab_mxfp4"]
  _check(*_run(tmp_path, paths), paths)


@pytest.mark.slow
def test_smoke_decode_step_every_path(tmp_path):
  paths = ["bf16", "xla_e4m3", "fp8lab_e4m3", "fp8lab_nvfp4", "fp8lab_mxfp4"]
  _check(*_run(tmp_path, paths), paths)


# The packed-KV smoke model: D = 64 (fp8lab.attention's smallest head dimension), 2 query
# heads, 1 KV head; hidden 64. Per layer: QKV (2 + 2) * 64 = 256 x 64, o 64 x 128,
# gate-up 256 x 64, down 64 x 128; LM head 256 x 64.
_KV_LAYER_PARAMS = 256 * 64 + 64 * 128 + 256 * 64 + 64 * 128
_KV_E4M3_WEIGHTS = 2 * _KV_LAYER_PARAMS + 256 * 64 + 4 * 9 + _GAINS
# (k, v) x 2 layers of (B 2, L 32, 1 head, 64): bf16; e4m3 codes + a float32 scale per token
# and head; nvfp4 codes (half a byte) + an E4M3 byte per 16 + a float32 tensor scale.
_KV_CACHE_BYTES = {"bf16": 4 * 2 * 32 * 64 * 2, "e4m3_block": 4 * 2 * 32 * (64 + 4),
                   "nvfp4": 4 * (2 * 32 * (32 + 4) + 4)}


# The default run takes the per-token-head e4m3 cache; both packed formats (a row each) run
# with FP8LAB_SLOW_TESTS=1.
@pytest.mark.parametrize("kv_formats", [["e4m3_block"],
                                        pytest.param(["e4m3_block", "nvfp4"],
                                                     marks=pytest.mark.slow)])
def test_smoke_decode_step_packed_kv(tmp_path, kv_formats):
  """fp8lab.kv_cache_update + fp8lab.attention (the kernel in interpret mode) over packed
  caches inside the step: rows per KV format, bytes counted by hand, logits against the
  golden model's GEMV and the reference attention over the same packed caches."""
  doc, stdout = _run(tmp_path, ["bf16", "fp8lab_e4m3"], f"--kv_formats={','.join(kv_formats)}",
                     "--head_dim=64", "--heads=2", "--kv_heads=1", "--loop_steps=2")
  assert doc["settings"]["kv_formats"] == kv_formats and doc["settings"]["loop_steps"] == 2
  rows = {(r["path"], r["kv"]): r for r in doc["rows"]}
  # the XLA baseline keeps its bf16 cache; the fp8lab path takes each packed format
  assert set(rows) == {("bf16", "bf16")} | {("fp8lab_e4m3", kv) for kv in kv_formats}
  for (path, kv), r in rows.items():
    assert r["status"] == "ok", r.get("error")
    assert r["kv_bytes"] == _KV_CACHE_BYTES[kv], (path, kv)
    assert r["bytes_needed"] == r["weight_bytes"] + r["kv_bytes"] + 2 * 64 * 2
    assert r["vs_bf16"] == pytest.approx(r["tokens_per_s"]
                                         / rows[("bf16", "bf16")]["tokens_per_s"])
    # 2 steps inside one jitted fori_loop, the packed caches carried through it
    assert r["timing_loop"]["copies"] == 2 and r["step_us_loop"] > 0
    assert r["vs_bf16_loop"] == pytest.approx(r["tokens_per_s_loop"]
                                              / rows[("bf16", "bf16")]["tokens_per_s_loop"])
    if path == "fp8lab_e4m3":
      assert r["weight_bytes"] == _KV_E4M3_WEIGHTS
      assert 0 <= r["max_rel_diff_vs_reference"] <= doc["settings"]["agree_tol"]
      assert r["agrees"] is True
  assert all(kv in stdout for kv in kv_formats)
