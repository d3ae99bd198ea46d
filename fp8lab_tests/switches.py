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
