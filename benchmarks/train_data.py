"""Helpers of benchmarks/bench_train.py without absl flags (tests import them beside the
other benchmark scripts, whose flags would collide): FP8 GEMMs counted in compiled HLO text,
and the training corpus, the interpreter's own standard-library sources."""

from __future__ import annotations

import os
import re
import sysconfig
from typing import Any

import numpy as np

__all__ = ["fp8_gemm_counts", "stdlib_corpus"]


_DEF = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(\(?[\w]+)\[")
_DOT = re.compile(r"\bdot\(%([\w.\-]+),\s*%([\w.\-]+)\)")
_F8 = re.compile(r"^f8e(4m3fn|5m2)$")


def _fp8_dots(hlo_text: str) -> int:
  """Dots whose two operands are fp8 (f8e4m3fn / f8e5m2) in their computation: XLA's GPU
  backend may emit an fp8 dot as its own Triton GEMM fusion (`gemm_fusion_dot`, small M)
  instead of a cuBLASLt call; the dot inside still takes the fp8 operands. Names are looked
  up in the computation that holds the dot (a computation starts at a line ending in "{")."""
  n, types = 0, {}
  for line in hlo_text.splitlines():
    if line.rstrip().endswith("{"):
      types = {}
    m = _DEF.match(line)
    if m:
      types[m.group(1)] = m.group(2)
    d = _DOT.search(line)
    if d and all(_F8.match(types.get(a, "")) for a in d.groups()):
      n += 1
  return n


def fp8_gemm_counts(hlo_text: str) -> dict[str, int]:
  """FP8 GEMMs in compiled HLO text: cuBLASLt FP8 custom calls (what XLA's GPU backend makes
  of an fp8 dot at large M), dots over two fp8 operands (its Triton GEMM fusions, at small M;
  a CPU has none: it converts the codes to float32 first), "fp8_gemms" their sum, all cuBLAS
  GEMM calls, plain dots, and instructions that mention an fp8 type."""
  cublas_f8 = len(re.findall(r'custom_call_target="__cublas\$lt\$matmul\$f8"', hlo_text))
  fp8_dots = _fp8_dots(hlo_text)
  return {
      "cublas_f8": cublas_f8,
      "fp8_dots": fp8_dots,
      "fp8_gemms": cublas_f8 + fp8_dots,
      "cublas_gemm": len(re.findall(r'custom_call_target="__cublas\$(lt\$matmul|gemm)', hlo_text)),
      "dot": len(re.findall(r"\bdot\(", hlo_text)),
      "f8_instructions": len(re.findall(r"= f8e(4m3fn|5m2)\[", hlo_text)),
  }


def stdlib_corpus(max_bytes: int) -> tuple[np.ndarray, dict[str, Any]]:
  """The interpreter's own standard-library sources (*.py outside site-packages and tests),
  in sorted path order, as uint8 bytes; and where they came from."""
  root = sysconfig.get_paths()["stdlib"]
  paths = []
  for dirpath, dirnames, files in os.walk(root):
    dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "test", "tests",
                                                          "__pycache__", "idlelib"))
    paths += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".py")]
  chunks, total = [], 0
  for p in sorted(paths):
    with open(p, "rb") as f:
      data = f.read()
    chunks.append(data)
    total += len(data)
    if total >= max_bytes:
      break
  corpus = np.frombuffer(b"".join(chunks), np.uint8)[:max_bytes]
  return corpus, {"root": root, "files": len(chunks), "bytes": int(corpus.size)}
