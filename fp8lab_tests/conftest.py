"""Hypothesis profiles for the test suite, chosen by FP8LAB_HYPOTHESIS_PROFILE.

  ci     (default) 50 examples per test (100 with FP8LAB_SLOW_TESTS=1), derandomized so
         that CI runs are reproducible; tests that set max_examples keep theirs.
  heavy  10,000 examples per test, random seeds, for a long local or nightly run:
         FP8LAB_HYPOTHESIS_PROFILE=heavy pytest fp8lab_tests
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=100 if os.environ.get("FP8LAB_SLOW_TESTS") == "1" else 50,
    deadline=None, derandomize=True, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "heavy", max_examples=10_000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("FP8LAB_HYPOTHESIS_PROFILE", "ci"))


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
