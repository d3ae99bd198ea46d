"""Which path gemv_packed's `implementation=None` runs on a GPU: a table of measured data.

The table (the generated block below) holds, per device kind (JAX's `device_kind`, e.g.
"NVIDIA H200"), weight layout (fp8lab.formats.LAYOUTS: "e4m3", "nvfp4_2d", ...), (n_out, k)
shape bucket and batch bucket, the implementation that was faster in one benchmark run,
"pallas" (the kernel) or "xla" (jnp over the same packed words), with the op device times it
was chosen from. benchmarks/tune_gemv_dispatch.py writes it from bench_gemv results files;
docs/gemv_kernel.md says how to regenerate it for another GPU.

Lookup (`lookup`, `choose`):
  shape bucket  each of n_out and k rounded to the nearest power of two on a log scale
                (shape_bucket: 14336 -> 16384, 6144 -> 8192, 28672 -> 32768);
  batch bucket  the smallest measured batch >= the call's batch (the kernel pads the batch
                to a power of two, so batches 2-4 cost what 4 costs);
  fallback      today's rule, "pallas", for a device, layout or shape bucket without
                entries and for a batch above the largest measured one.
Measured with float32 x (bench_gemv's default); other x dtypes take the same entries.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from fp8lab.formats import LAYOUTS, get_quantized_format

__all__ = ["Entry", "TABLE", "SOURCES", "FALLBACK", "IMPLEMENTATIONS", "shape_bucket",
           "layout_of", "device_kind", "lookup", "choose"]

# What a table entry may pick, and what a call without an entry runs (the kernel: the rule
# before this table existed).
IMPLEMENTATIONS = ("pallas", "xla")
FALLBACK = "pallas"


class Entry(NamedTuple):
  """One measured cell: the pick and the op device times (us, profiler) it came from."""
  impl: str                  # "pallas" or "xla"
  pallas_us: float           # gemv_packed(..., implementation="pallas")
  xla_us: float | None       # gemv_packed(..., implementation="xla"); None: not measured
  xla_f8_us: float | None    # XLA's float8_e4m3fn-weight GEMV (bench_gemv's xla_e4m3)
  shape: str                 # the measured shape, "n_out x k"
  source: str                # the results file (benchmarks/results/<source>.json)


def shape_bucket(n_out: int, k: int) -> tuple[int, int]:
  """(n_out, k), each rounded to the nearest power of two on a log scale (a tie rounds up)."""
  def near(n: int) -> int:
    f = 1 << (max(1, n).bit_length() - 1)
    return 2 * f if n * n >= 2 * f * f else f        # n >= f * sqrt(2), in integers
  return near(n_out), near(k)


def layout_of(format: str, block_shape: tuple[int, ...] | None) -> str:
  """The LAYOUTS name of a QuantizedArray's format and block shape ("nvfp4" with (16, 16)
  blocks is "nvfp4_2d"); a block shape no layout names gives "<format>:<block shape>",
  which has no entries (the fallback)."""
  q = get_quantized_format(format)
  if block_shape is None or tuple(block_shape) == tuple(q.block_shape or ()):
    return q.name
  for name, (qname, bs) in LAYOUTS.items():
    if qname == q.name and bs is not None and tuple(bs) == tuple(block_shape):
      return name
  return f"{q.name}:{'x'.join(map(str, block_shape))}"


def device_kind() -> str:
  """JAX's first device's kind, the table's first key ("NVIDIA H200")."""
  return jax.devices()[0].device_kind


_INDEX_CACHE: dict[int, tuple[dict, dict]] = {}


def _index(table: dict) -> dict[tuple[str, str, tuple[int, int]], tuple[int, ...]]:
  """(device, layout, bucket) -> its measured batches, sorted; cached per table object."""
  hit = _INDEX_CACHE.get(id(table))
  if hit is not None and hit[0] is table:
    return hit[1]
  index: dict[tuple[str, str, tuple[int, int]], list[int]] = {}
  for dev, layout, bucket, batch in table:
    index.setdefault((dev, layout, tuple(bucket)), []).append(batch)
  frozen = {key: tuple(sorted(b)) for key, b in index.items()}
  _INDEX_CACHE[id(table)] = (table, frozen)
  return frozen


def lookup(device: str, layout: str, n_out: int, k: int, batch: int,
           table: dict | None = None) -> Entry | None:
  """The table's entry for a call (module docstring: buckets), None where it has none.
  `table` defaults to TABLE."""
  table = TABLE if table is None else table
  bucket = shape_bucket(n_out, k)
  batches = _index(table).get((device, layout, bucket), ())
  b = next((m for m in batches if m >= batch), None)
  return None if b is None else table[(device, layout, bucket, b)]


def choose(device: str, layout: str, n_out: int, k: int, batch: int,
           table: dict | None = None) -> str:
  """The implementation for a call: its entry's pick, FALLBACK without one."""
  entry = lookup(device, layout, n_out, k, batch, table)
  return FALLBACK if entry is None else entry.impl


# BEGIN GENERATED TABLE: written by benchmarks/tune_gemv_dispatch.py; rerun it, do not edit.
SOURCES: dict[str, tuple[str, ...]] = {
    'NVIDIA H200': (
        'gemv_h200_20261130_233426',
        'gemv_h200_grid_20261130_235729',
        'gemv_h200_20261201_215647',
        'gemv_h200_dispatch_a_20261202_043919',
        'gemv_h200_dispatch_b_20261202_044552',
    ),
}
# (device kind, layout, (n_out, k) bucket, batch bucket):
#     (implementation, pallas us, xla us, XLA float8 us, measured shape, results file)
_MEASURED: dict[tuple[str, str, tuple[int, int], int], tuple] = {
    ('NVIDIA H200', 'bf16', (4096, 4096), 1):
        ('pallas', 12.8, None, None, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 4096), 4):
        ('pallas', 13.2, None, 7.6, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 4096), 16):
        ('pallas', 16.7, None, None, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 4096), 64):
        ('pallas', 44.0, None, 14.1, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 1):
        ('pallas', 32.4, None, None, '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 4):
        ('pallas', 34.2, None, 19.1, '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 16):
        ('pallas', 41.2, None, None, '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 64):
        ('pallas', 106.3, None, 28.0, '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'bf16', (8192, 8192), 1):
        ('pallas', 36.4, None, None, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (8192, 8192), 4):
        ('pallas', 37.4, None, 21.1, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (8192, 8192), 16):
        ('pallas', 46.6, None, None, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (8192, 8192), 64):
        ('pallas', 113.7, None, 30.2, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (16384, 4096), 1):
        ('pallas', 31.6, None, None, '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (16384, 4096), 4):
        ('pallas', 32.7, None, 18.6, '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'bf16', (16384, 4096), 16):
        ('pallas', 41.3, None, None, '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (16384, 4096), 64):
        ('pallas', 120.4, None, 29.5, '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'bf16', (16384, 16384), 1):
        ('xla', 128.0, 120.5, 71.1, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'bf16', (16384, 16384), 4):
        ('pallas', 129.4, None, 73.3, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'bf16', (16384, 16384), 16):
        ('pallas', 170.0, 654.6, 79.7, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'bf16', (16384, 16384), 64):
        ('pallas', 409.0, None, 94.9, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 1):
        ('pallas', 11.4, None, 8.6, '4096x4096', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 4):
        ('pallas', 11.1, None, 7.6, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 16):
        ('pallas', 13.8, None, 8.9, '4096x4096', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 64):
        ('pallas', 39.8, None, 14.1, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 1):
        ('pallas', 21.7, 27.9, 19.9, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 4):
        ('pallas', 22.1, 103.5, 18.5, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 16):
        ('pallas', 25.3, 156.9, 20.5, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 64):
        ('pallas', 71.5, 246.6, 27.8, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 1):
        ('xla', 12.9, 11.3, 11.4, '6144x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 4):
        ('pallas', 13.2, 60.5, 10.3, '6144x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 16):
        ('pallas', 20.1, 88.2, 12.1, '6144x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 64):
        ('pallas', 56.8, 123.0, 18.2, '6144x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 8192), 1):
        ('pallas', 23.2, None, 21.3, '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (8192, 8192), 4):
        ('pallas', 23.7, None, 21.1, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e4m3', (8192, 8192), 16):
        ('pallas', 27.5, None, 24.1, '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (8192, 8192), 64):
        ('pallas', 75.0, None, 30.2, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e4m3', (16384, 4096), 1):
        ('pallas', 20.3, 23.4, 25.3, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 4096), 4):
        ('pallas', 20.4, 110.1, 19.4, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 4096), 16):
        ('pallas', 23.8, 173.5, 21.2, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 4096), 64):
        ('pallas', 68.9, 273.5, 29.5, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 16384), 1):
        ('pallas', 68.9, 116.4, 71.1, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 16384), 4):
        ('pallas', 69.2, 441.8, 72.9, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 16384), 16):
        ('pallas', 74.0, 716.9, 79.6, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 16384), 64):
        ('pallas', 203.9, 1154.2, 95.3, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 1):
        ('pallas', 34.6, 44.7, 34.0, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 4):
        ('pallas', 35.1, 226.5, 31.1, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 16):
        ('pallas', 40.7, 360.3, 35.0, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 64):
        ('pallas', 126.5, 513.0, 39.8, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 1):
        ('pallas', 124.2, 192.2, 130.9, '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 4):
        ('pallas', 126.8, 875.7, 131.1, '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 16):
        ('pallas', 150.7, 1417.7, 138.4, '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 64):
        ('pallas', 467.6, 2274.0, 161.2, '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 1):
        ('pallas', 11.4, None, None, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 4):
        ('pallas', 11.1, None, 7.6, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 16):
        ('pallas', 13.9, None, None, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 64):
        ('pallas', 39.4, None, 14.1, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 1):
        ('pallas', 21.6, None, None, '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 4):
        ('pallas', 22.1, None, 19.1, '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 16):
        ('pallas', 25.1, None, None, '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 64):
        ('pallas', 71.9, None, 28.0, '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'e5m2', (8192, 8192), 1):
        ('pallas', 23.0, None, None, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (8192, 8192), 4):
        ('pallas', 23.6, None, 21.1, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (8192, 8192), 16):
        ('pallas', 27.4, None, None, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (8192, 8192), 64):
        ('pallas', 75.2, None, 30.2, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (16384, 4096), 1):
        ('pallas', 20.6, None, None, '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (16384, 4096), 4):
        ('pallas', 20.3, None, 18.6, '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'e5m2', (16384, 4096), 16):
        ('pallas', 23.7, None, None, '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (16384, 4096), 64):
        ('pallas', 69.2, None, 29.5, '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'e5m2', (16384, 16384), 1):
        ('pallas', 69.0, 116.5, 71.1, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e5m2', (16384, 16384), 4):
        ('pallas', 69.4, None, 73.3, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e5m2', (16384, 16384), 16):
        ('pallas', 74.0, 716.2, 79.7, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e5m2', (16384, 16384), 64):
        ('pallas', 203.2, None, 94.9, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 1):
        ('pallas', 16.3, None, 8.6, '4096x4096', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 4):
        ('pallas', 16.3, None, 7.6, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 16):
        ('pallas', 17.1, None, 8.9, '4096x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 64):
        ('pallas', 36.0, None, 14.1, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 1):
        ('pallas', 23.3, 78.1, 19.9, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 4):
        ('pallas', 23.6, 179.0, 18.5, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 16):
        ('pallas', 31.3, 221.8, 20.5, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 64):
        ('pallas', 86.8, 264.0, 27.8, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (8192, 8192), 1):
        ('pallas', 23.8, None, 21.3, '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp4', (8192, 8192), 4):
        ('pallas', 24.2, None, 21.1, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp4', (8192, 8192), 16):
        ('pallas', 32.2, None, 24.1, '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp4', (8192, 8192), 64):
        ('pallas', 92.8, None, 30.2, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp4', (16384, 4096), 1):
        ('pallas', 21.2, 72.5, 25.3, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 4096), 4):
        ('pallas', 21.6, 185.4, 19.4, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 4096), 16):
        ('pallas', 34.3, 235.4, 21.2, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 4096), 64):
        ('pallas', 93.3, 296.4, 29.5, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 16384), 1):
        ('pallas', 60.5, 341.0, 71.1, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 16384), 4):
        ('pallas', 60.9, 778.4, 72.9, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 16384), 16):
        ('pallas', 86.2, 971.5, 79.6, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 16384), 64):
        ('pallas', 320.1, 1201.8, 95.3, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 1):
        ('pallas', 34.9, 141.7, 34.0, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 4):
        ('pallas', 35.2, 358.0, 31.1, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 16):
        ('pallas', 48.3, 431.3, 35.0, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 64):
        ('pallas', 151.9, 548.8, 39.8, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 1):
        ('pallas', 14.3, None, None, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 4):
        ('pallas', 14.2, None, 7.6, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 16):
        ('pallas', 17.7, None, None, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 64):
        ('pallas', 31.0, None, 14.1, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 1):
        ('pallas', 27.7, None, None, '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 4):
        ('pallas', 28.0, None, 19.1, '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 16):
        ('pallas', 30.3, None, None, '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 64):
        ('pallas', 85.2, None, 28.0, '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp8', (8192, 8192), 1):
        ('pallas', 27.2, None, None, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (8192, 8192), 4):
        ('pallas', 27.5, None, 21.1, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (8192, 8192), 16):
        ('pallas', 31.5, None, None, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (8192, 8192), 64):
        ('pallas', 91.2, None, 30.2, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (16384, 4096), 1):
        ('pallas', 24.0, None, None, '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (16384, 4096), 4):
        ('pallas', 24.3, None, 18.6, '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp8', (16384, 4096), 16):
        ('pallas', 28.7, None, None, '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (16384, 4096), 64):
        ('pallas', 92.2, None, 29.5, '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp8', (16384, 16384), 1):
        ('pallas', 78.6, 158.4, 71.1, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp8', (16384, 16384), 4):
        ('pallas', 78.8, None, 73.3, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp8', (16384, 16384), 16):
        ('pallas', 85.0, 903.7, 79.7, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp8', (16384, 16384), 64):
        ('pallas', 323.4, None, 94.9, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 1):
        ('pallas', 10.9, None, 8.5, '4096x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 4):
        ('pallas', 11.2, None, 7.6, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 16):
        ('pallas', 14.9, None, 8.9, '4096x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 64):
        ('pallas', 39.7, None, 14.1, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 1):
        ('pallas', 18.2, 73.1, 19.9, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 4):
        ('pallas', 18.5, 175.6, 18.5, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 16):
        ('pallas', 25.6, 218.5, 20.5, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 64):
        ('pallas', 69.6, 260.7, 27.8, '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (8192, 8192), 1):
        ('pallas', 19.4, None, 21.3, '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4', (8192, 8192), 4):
        ('pallas', 19.7, None, 21.1, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4', (8192, 8192), 16):
        ('pallas', 27.2, None, 24.1, '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4', (8192, 8192), 64):
        ('pallas', 68.9, None, 30.2, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4', (16384, 4096), 1):
        ('pallas', 20.1, 66.2, 25.3, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 4096), 4):
        ('pallas', 20.5, 181.7, 19.4, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 4096), 16):
        ('pallas', 31.2, 232.6, 21.2, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 4096), 64):
        ('pallas', 63.1, 288.4, 29.5, '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 16384), 1):
        ('pallas', 53.4, 318.5, 71.1, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 16384), 4):
        ('pallas', 54.0, 765.3, 72.9, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 16384), 16):
        ('pallas', 71.2, 956.6, 79.6, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 16384), 64):
        ('pallas', 186.8, 1214.0, 95.3, '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 1):
        ('pallas', 28.8, 129.8, 34.0, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 4):
        ('pallas', 29.4, 354.3, 31.1, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 16):
        ('pallas', 39.7, 425.8, 35.0, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 64):
        ('pallas', 114.6, 542.3, 39.8, '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 1):
        ('pallas', 91.2, 572.3, 130.9, '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 4):
        ('pallas', 93.7, 1481.1, 131.1, '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 16):
        ('pallas', 138.5, 1739.4, 138.4, '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 64):
        ('pallas', 428.2, 2210.5, 161.2, '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 1):
        ('pallas', 11.0, None, None, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 4):
        ('pallas', 10.8, None, 7.6, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 16):
        ('pallas', 15.2, None, None, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 64):
        ('pallas', 38.6, None, 14.1, '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 1):
        ('pallas', 17.4, None, None, '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 4):
        ('pallas', 17.7, None, 19.1, '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 16):
        ('pallas', 25.0, None, None, '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 64):
        ('pallas', 67.5, None, 28.0, '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 8192), 1):
        ('pallas', 18.4, None, None, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 8192), 4):
        ('pallas', 18.8, None, 21.1, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 8192), 16):
        ('pallas', 26.6, None, None, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 8192), 64):
        ('pallas', 68.1, None, 30.2, '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 4096), 1):
        ('pallas', 19.4, None, None, '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 4096), 4):
        ('pallas', 19.5, None, 18.6, '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 4096), 16):
        ('pallas', 30.2, None, None, '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 4096), 64):
        ('pallas', 63.1, None, 29.5, '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 16384), 1):
        ('pallas', 49.6, 321.7, 71.1, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 16384), 4):
        ('pallas', 50.1, None, 73.3, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 16384), 16):
        ('pallas', 69.9, 956.9, 79.7, '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 16384), 64):
        ('pallas', 181.7, None, 94.9, '16384x16384', 'gemv_h200_20261201_215647'),
}
# END GENERATED TABLE

TABLE: dict[tuple[str, str, tuple[int, int], int], Entry] = {
    key: Entry(*value) for key, value in _MEASURED.items()}
for _key, _entry in TABLE.items():
  if _entry.impl not in IMPLEMENTATIONS:
    raise ValueError(f"gemv dispatch table entry {_key} picks {_entry.impl!r}")
