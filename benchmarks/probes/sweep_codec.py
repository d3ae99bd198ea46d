"""Compares fp8lab.encode with ml_dtypes on every one of the 2^32 float32 bit patterns.

One run checks one format and one saturate mode; it walks the uint32 range in chunks of
2^chunk_log2 patterns, encodes each chunk with `jax.jit(fp8lab.encode)` and casts the same
patterns with ml_dtypes (`x.astype(T).view(uint8)`), and counts the codes that differ.

saturate=True has no ml_dtypes counterpart, so the expected codes are derived from ml_dtypes'
non-saturating result (docs/numerics.md section 2): where the input is not NaN but ml_dtypes gives
a non-finite code (finite overflow or +-Inf), the expected code is the largest finite code
with the input's sign (e8m0: 0xFE for positive inputs; its zero, negatives and NaN stay 0xFF).

Usage:
  python benchmarks/probes/sweep_codec.py --format=e4m3 --saturate=false \
      --out=benchmarks/results/sweep_e4m3_nosat.json
  python benchmarks/probes/sweep_codec.py --format=e5m2 --max_chunks=4   # the rate only

The JSON result holds the mismatch count, the first mismatches (hex input, got, expected),
the wall time, the rate, the machine and the library versions.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import platform
import sys
import time

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)   # run as a script: fp8lab from the working tree

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import fp8lab  # noqa: E402
from fp8lab.formats import FORMAT_NAMES, get_format  # noqa: E402

_FORMAT = flags.DEFINE_enum(
    "format", "e4m3", [n for n in FORMAT_NAMES if get_format(n).minifloat],
    "Element format to sweep (the codec's: every minifloat of the registry).")
_SATURATE = flags.DEFINE_bool("saturate", False, "Sweep encode(..., saturate=True).")
_CHUNK_LOG2 = flags.DEFINE_integer("chunk_log2", 24, "log2 of the patterns per chunk (8..32).")
_MAX_CHUNKS = flags.DEFINE_integer(
    "max_chunks", 0, "Stop after this many chunks (0: the whole 2^32 range); for rate tests.")
_OUT = flags.DEFINE_string("out", "", "Write the JSON result here (default: stdout only).")
_KEEP = 16   # mismatches reported in full


def expected_codes(x: np.ndarray, fmt_name: str, saturate: bool) -> np.ndarray:
  """Codes ml_dtypes gives for float32 `x`, with the saturating rule applied on top."""
  f = get_format(fmt_name)
  with np.errstate(invalid="ignore", over="ignore"):   # NaN/overflow casts are the point
    codes = x.astype(f.dtype).view(np.uint8)
  if not saturate:
    return codes
  # Which codes ml_dtypes itself decodes to a non-finite value (NaN or Inf).
  all_codes = np.arange(1 << f.bits, dtype=np.uint8)
  nonfinite = ~np.isfinite(all_codes.view(f.dtype).astype(np.float32))
  overflow = nonfinite[codes] & ~np.isnan(x)
  if f.signed:
    sign = ((x.view(np.uint32) >> np.uint32(31)).astype(np.uint8) << np.uint8(f.bits - 1))
    sat = np.uint8(f.max_code) | sign
  else:
    # Unsigned e8m0: only positive overflow saturates; zero and negatives stay NaN.
    overflow &= x > 0
    sat = np.uint8(f.max_code)
  return np.where(overflow, sat, codes).astype(np.uint8)


def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as fh:
      for line in fh:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return ""


def machine() -> dict:
  u = platform.uname()
  return {"processor": platform.processor() or u.machine, "cpu_model": _cpu_model(),
          "uname": " ".join(u),
          "cpu_count": os.cpu_count(), "jax_backend": jax.default_backend(),
          "jax_devices": [str(d) for d in jax.devices()]}


def sweep(fmt_name: str, saturate: bool, chunk_log2: int, max_chunks: int) -> dict:
  if not 8 <= chunk_log2 <= 32:
    raise ValueError(f"chunk_log2 must be in [8, 32], got {chunk_log2}")
  n = 1 << chunk_log2
  n_chunks = 1 << (32 - chunk_log2)
  if max_chunks:
    n_chunks = min(n_chunks, max_chunks)
  encode = jax.jit(functools.partial(fp8lab.encode, fmt=fmt_name, saturate=saturate))
  base = np.arange(n, dtype=np.uint32)
  bits = np.empty_like(base)
  mismatches = 0
  first: list[dict] = []
  start = time.perf_counter()
  last_print = start
  for c in range(n_chunks):
    np.add(base, np.uint32(c * n), out=bits)
    x = bits.view(np.float32)
    got_async = encode(x)                       # runs while ml_dtypes casts below
    want = expected_codes(x, fmt_name, saturate)
    got = np.asarray(got_async)
    bad = np.flatnonzero(got != want)
    mismatches += bad.size
    for i in bad[:max(0, _KEEP - len(first))]:
      first.append({"input": f"0x{int(bits[i]):08X}", "got": f"0x{int(got[i]):02X}",
                    "expected": f"0x{int(want[i]):02X}"})
    now = time.perf_counter()
    if now - last_print > 5 or c == n_chunks - 1:
      done = (c + 1) * n
      rate = done / (now - start)
      print(f"{fmt_name} saturate={saturate}: chunk {c + 1}/{n_chunks} "
            f"({100 * (c + 1) / n_chunks:5.1f}%), {done:,} patterns, {rate / 1e6:.1f} M/s, "
            f"{mismatches} mismatches, eta {(n_chunks - c - 1) * n / rate:.0f} s",
            flush=True)
      last_print = now
  seconds = time.perf_counter() - start
  elements = n_chunks * n
  return {
      "format": fmt_name, "saturate": saturate, "elements": elements,
      "complete": elements == 1 << 32, "chunk_log2": chunk_log2,
      "mismatches": int(mismatches), "first_mismatches": first,
      "seconds": round(seconds, 2), "elements_per_second": round(elements / seconds),
      "machine": machine(), "python": sys.version.split()[0], "jax_version": jax.__version__,
      "ml_dtypes_version": ml_dtypes.__version__, "numpy_version": np.__version__,
      "fp8lab_version": fp8lab.__version__,
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
  }


def main(argv):
  del argv
  result = sweep(_FORMAT.value, _SATURATE.value, _CHUNK_LOG2.value, _MAX_CHUNKS.value)
  text = json.dumps(result, indent=2)
  print(text)
  if _OUT.value:
    with open(_OUT.value, "w") as fh:
      fh.write(text + "\n")
  return 1 if result["mismatches"] else 0


if __name__ == "__main__":
  app.run(main)
