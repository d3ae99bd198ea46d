"""What every benchmark records about its run: the commit, the machine, file-name slugs."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from typing import Any

import jax

__all__ = ["git_commit", "machine_info", "slug", "default_out"]

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def slug(text: str) -> str:
  return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")


def git_commit() -> dict[str, Any]:
  """The working tree's commit and whether tracked files differ from it. FP8LAB_GIT_COMMIT,
  when set, wins: the lent GPU machine's copy of the tree carries a stale .git."""
  if os.environ.get("FP8LAB_GIT_COMMIT"):
    return {"commit": os.environ["FP8LAB_GIT_COMMIT"], "dirty": None}
  try:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_REPO, capture_output=True,
                          text=True, timeout=10, check=True).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=_REPO,
                           capture_output=True, timeout=10).returncode != 0
    return {"commit": head, "dirty": dirty}
  except (OSError, subprocess.SubprocessError):
    # A copy of the tree without .git (as on the lent GPU machine): the caller may say.
    return {"commit": os.environ.get("FP8LAB_GIT_COMMIT", "unknown"), "dirty": None}


def machine_info() -> dict[str, Any]:
  dev = jax.devices()[0]
  import jaxlib  # pylint: disable=g-import-not-at-top
  return {
      "device_kind": dev.device_kind, "platform": dev.platform,
      "backend": jax.default_backend(), "device_count": jax.device_count(),
      "host": platform.node(), "cpu_count": os.cpu_count(),
      "python": platform.python_version(), "jax": jax.__version__,
      "jaxlib": jaxlib.__version__,
      "xla_flags": os.environ.get("XLA_FLAGS", ""),
  }


def default_out(bench: str, smoke: bool) -> str:
  """benchmarks/results/<bench>_<device kind or cpu>[_smoke]_<UTC stamp>.json."""
  backend = jax.default_backend()
  kind = "cpu" if backend == "cpu" else slug(jax.devices()[0].device_kind)
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d_%H%M%S")
  return os.path.join(_REPO, "benchmarks", "results",
                      f"{bench}_{kind}{'_smoke' if smoke else ''}_{stamp}.json")


def write_json(doc: Any, path: str, **dump_kwargs) -> None:
  """doc as indented JSON at path, atomically (a .tmp file renamed over it), so that a run
  cut short leaves its last complete file."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path + ".tmp", "w") as f:
    json.dump(doc, f, indent=1, **dump_kwargs)
  os.replace(path + ".tmp", path)
