"""Correlation statistics of benchmarks/eval_models.py, in numpy (no absl flags here, so tests
can import them beside the other benchmark scripts, whose flags would collide)."""

from __future__ import annotations

import numpy as np

__all__ = ["rankdata", "pearson", "spearman"]


def rankdata(x: np.ndarray) -> np.ndarray:
  """Ranks 1..n, ties given their average rank (for Spearman's rho)."""
  order = np.argsort(x, kind="stable")
  ranks = np.empty(len(x), np.float64)
  xs = x[order]
  i = 0
  while i < len(x):
    j = i
    while j + 1 < len(x) and xs[j + 1] == xs[i]:
      j += 1
    ranks[order[i:j + 1]] = (i + j) / 2 + 1
    i = j + 1
  return ranks


def pearson(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  a, b = a - a.mean(), b - b.mean()
  return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def spearman(a, b) -> float:
  return pearson(rankdata(np.asarray(a)), rankdata(np.asarray(b)))
