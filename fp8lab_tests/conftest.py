"""Hypothesis profiles for the test suite, chosen by FP8LAB_HYPOTHESIS_PROFILE.

  ci     (default) 40 examples per test (100 with FP8LAB_SLOW_TESTS=1), derandomized so
         that CI runs are reproducible; tests that set their own max_examples keep it.
  heavy  10,000 examples per test, random seeds, for a long local or nightly run:
         FP8LAB_HYPOTHESIS_PROFILE=heavy pytest fp8lab_tests
"""

import os

from hypothesis import HealthCheck, settings
import pytest

# XLA:CPU compile time is most of the suite's time (thousands of small jitted programs and
# interpret-mode kernels): without FP8LAB_SLOW_TESTS=1 or FP8LAB_GPU_TESTS=1 the tests run
# with XLA's backend optimization level 0 and LLVM's expensive passes off: ~30% less CPU
# time (test_gemv.py on 2 cores: 7m16s -> 5m09s). Both are code-generation effort: no fast
# math either way; what may differ is where LLVM contracts a multiply and an add into one
# FMA (XLA:CPU allows it), which the optimized build may do more often. The slow run
# (FP8LAB_SLOW_TESTS=1) and the GPU runs keep XLA's defaults and so check that build. Set
# here, before any test initializes a JAX backend; a flag the caller's XLA_FLAGS sets wins.
# (fp8lab_tests/switches.py reads the same variables; it imports jax, which must not happen
# before the environment below is set.)
_SLOW = os.environ.get("FP8LAB_SLOW_TESTS") == "1"
if not _SLOW and os.environ.get("FP8LAB_GPU_TESTS") != "1":
  _fast = ["--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true"]
  _have = os.environ.get("XLA_FLAGS", "").split()
  os.environ["XLA_FLAGS"] = " ".join(_have + [f for f in _fast
                                              if f.split("=")[0] not in
                                              {h.split("=")[0] for h in _have}])

# Most of the default run's hypothesis time is XLA compiling the code under test for each
# drawn shape, axis and mode; 40 examples keep every strategy's branches in the draws.
settings.register_profile(
    "ci", max_examples=100 if _SLOW else 40, deadline=None, derandomize=True, database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "heavy", max_examples=10_000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("FP8LAB_HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
  """One XLA compilation cache per test run (JAX's persistent cache in the run's pytest base
  temp directory, which pytest itself prunes), shared by the xdist workers and the
  subprocesses that tests start: a program that several tests or processes compile alike
  is compiled once (~7% of test_ops.py's time). Nothing outlives the run's temp directory,
  so every run compiles from scratch; a JAX_COMPILATION_CACHE_DIR of the caller's wins."""
  if "JAX_COMPILATION_CACHE_DIR" in os.environ or not hasattr(config, "_tmp_path_factory"):
    return
  base = config._tmp_path_factory.getbasetemp()
  root = base.parent if hasattr(config, "workerinput") else base   # xdist: popen-gwN's parent
  os.environ["JAX_COMPILATION_CACHE_DIR"] = str(root / "jax_compilation_cache")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


def pytest_collection_modifyitems(config, items):
  """Skips tests marked `gpu` without FP8LAB_GPU_TESTS=1 and `slow` without
  FP8LAB_SLOW_TESTS=1 (fp8lab_tests/switches.py)."""
  import pytest
  from fp8lab_tests import switches
  skips = {"gpu": (switches.ON_GPU, "needs FP8LAB_GPU_TESTS=1 on a GPU"),
           "slow": (switches.SLOW, "needs FP8LAB_SLOW_TESTS=1")}
  for item in items:
    for mark, (on, why) in skips.items():
      if not on and mark in item.keywords:
        item.add_marker(pytest.mark.skip(reason=why))
