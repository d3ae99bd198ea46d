"""The test suite's environment switches, read once (BUILD.md, "Tests").

  FP8LAB_GPU_TESTS=1   on a GPU: kernel tests run compiled instead of in interpret mode, and
                       tests marked `gpu` run (an error if JAX has no GPU backend).
  FP8LAB_SLOW_TESTS=1  tests marked `slow` run.
conftest.py skips the marked tests otherwise.
"""

import os

import jax
import pytest

ON_GPU = os.environ.get("FP8LAB_GPU_TESTS") == "1"
if ON_GPU and jax.default_backend() != "gpu":
  raise RuntimeError("FP8LAB_GPU_TESTS=1 but JAX has no GPU backend")
SLOW = os.environ.get("FP8LAB_SLOW_TESTS") == "1"

# Marks a test that needs the GPU (runs only with FP8LAB_GPU_TESTS=1).
gpu = pytest.mark.gpu


def grid(*axes, cover: bool = False):
  """pytest parameters for the product of `axes` (each a list of values or of tuples, which
  are spliced in), thinned for the default run: a case whose axis indices sum to an odd
  number is marked `slow`. With axes of two or more values, every value of every axis, and
  (with three axes or more) every pair of values of two axes, stays in the default run; the
  whole product runs with FP8LAB_SLOW_TESTS=1 (and in the compiled GPU runs).

  cover=True thins harder, for the costliest interpret-mode tests: only the "diagonal"
  cases i = 0, 1, ... (axis j at index i % len(axis j)) stay, so every value of every axis
  still runs once by default, no longer every pair."""
  import itertools
  cases = []
  width = max(len(a) for a in axes)
  diagonal = {tuple(i % len(a) for a in axes) for i in range(width)}
  for picks in itertools.product(*(list(enumerate(a)) for a in axes)):
    values = []
    for _, v in picks:
      values.extend(v if isinstance(v, tuple) else (v,))
    idx = tuple(i for i, _ in picks)
    slow = idx not in diagonal if cover else sum(idx) % 2
    cases.append(pytest.param(*values, marks=pytest.mark.slow) if slow else tuple(values))
  return cases
