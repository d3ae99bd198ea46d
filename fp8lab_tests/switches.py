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


def grid(*axes):
  """pytest parameters for the product of `axes` (each a list of values or of tuples, which
  are spliced in), thinned for the default run: a case whose axis indices sum to an odd
  number is marked `slow`. With axes of two or more values, every value of every axis, and
  (with three axes or more) every pair of values of two axes, stays in the default run; the whole product runs with
  FP8LAB_SLOW_TESTS=1 (and in the compiled GPU runs)."""
  import itertools
  cases = []
  for picks in itertools.product(*(list(enumerate(a)) for a in axes)):
    values = []
    for _, v in picks:
      values.extend(v if isinstance(v, tuple) else (v,))
    odd = sum(i for i, _ in picks) % 2
    cases.append(pytest.param(*values, marks=pytest.mark.slow) if odd else tuple(values))
  return cases
