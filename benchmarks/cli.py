"""What every benchmark script's main() does with its command line (absl)."""

from __future__ import annotations

import contextlib

from absl import app

__all__ = ["no_arguments", "usage_errors", "check_choices"]


def no_arguments(argv) -> None:
  """Raises absl's UsageError for positional arguments (the scripts take flags only)."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")


@contextlib.contextmanager
def usage_errors():
  """Turns a ValueError raised while checking flag values into absl's UsageError (its
  message and usage, exit status 1) instead of a traceback."""
  try:
    yield
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def check_choices(what: str, values, valid) -> None:
  """Raises ValueError for the first of `values` that is not one of `valid` (inside
  usage_errors: a usage error naming the valid ones)."""
  for v in values:
    if v not in valid:
      raise ValueError(f"unknown {what} {v!r}; valid: {', '.join(map(str, valid))}")
