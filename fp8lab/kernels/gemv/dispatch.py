"""Which path gemv_packed's `implementation=None` runs on a GPU: a table of measured data.

The table (the generated block below) holds, per device kind (JAX's `device_kind`, e.g.
"NVIDIA H200"), weight layout (fp8lab.formats.LAYOUTS: "e4m3", "nvfp4_2d", ...), (n_out, k)
shape bucket and batch bucket, the implementation that won one benchmark run, one of
IMPLEMENTATIONS ("pallas": the kernel; "xla": jnp over the same packed words, a float32 dot;
"xla_parts": the words dequantized exactly to bfloat16, bfloat16 dots over x's exact parts),
with every path's op device time it was chosen from, the kernel's time over the fastest other
path's (`ratio`), XLA's own GEMVs of that run beside them (not candidates) and the results
file. benchmarks/tune_gemv_dispatch.py writes it from bench_gemv results files, by the rule
its docstring gives (the fastest measured path, the kernel unless another is MARGIN faster);
docs/gemv_kernel.md section 5 says how to regenerate it for another GPU.

Lookup (`lookup`, `choose`):
  shape bucket  each of n_out and k rounded to the nearest power of two on a log scale
                (shape_bucket: 14336 -> 16384, 6144 -> 8192, 28672 -> 32768);
  batch bucket  the smallest measured batch >= the call's batch (the kernel pads the batch
                to a power of two, so batches 2-4 cost what 4 costs);
  fallback      FALLBACK, "pallas" (the rule before this table existed), for a device,
                layout or shape bucket without entries and for a batch above the largest
                measured one: no nearest-neighbour guess from other shapes or batches.
Measured with float32 x (bench_gemv's default); other x dtypes take the same entries.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from fp8lab.formats import LAYOUTS, get_quantized_format

__all__ = ["Entry", "TABLE", "SOURCES", "FALLBACK", "IMPLEMENTATIONS", "shape_bucket",
           "layout_of", "device_kind", "lookup", "choose"]

# What a table entry may pick (gemv_packed's implementation names), and what a call without
# an entry runs (the kernel: the rule before this table existed).
IMPLEMENTATIONS = ("pallas", "xla", "xla_parts")
FALLBACK = "pallas"


class Entry(NamedTuple):
  """One measured cell: the pick and the op device times (us, profiler) it came from."""
  impl: str                  # one of IMPLEMENTATIONS
  ratio: float | None        # times["pallas"] / the fastest other path's time; None: the
                             # kernel alone was measured
  times: dict[str, float]    # implementation -> op device time, the paths measured (pallas
                             # always; "xla" = bench_gemv's xla_packed op)
  baselines: dict[str, float]  # XLA's own GEMVs of the run (bench_gemv's xla_e4m3: float8
                             # weights, xla_bf16: bfloat16 weights): recorded, never picked
  shape: str                 # the measured shape, "n_out x k"
  source: str                # the results file (benchmarks/results/<source>.json)

  @property
  def pallas_us(self) -> float:
    return self.times["pallas"]

  @property
  def xla_us(self) -> float | None:
    return self.times.get("xla")

  @property
  def xla_parts_us(self) -> float | None:
    return self.times.get("xla_parts")

  @property
  def xla_f8_us(self) -> float | None:
    return self.baselines.get("xla_e4m3")


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
        'gemv_h200_xla_parts_20261202_0815',
    ),
}
# (device kind, layout, (n_out, k) bucket, batch bucket):
#     (implementation, pallas us / fastest other path's us, {implementation: op
#      device us}, {XLA GEMV op: us}, measured shape, results file)
_MEASURED: dict[tuple[str, str, tuple[int, int], int], tuple] = {
    ('NVIDIA H200', 'bf16', (4096, 4096), 1):
        ('pallas', None, {'pallas': 12.8}, {},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 4096), 4):
        ('pallas', None, {'pallas': 13.2}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 4096), 16):
        ('pallas', None, {'pallas': 16.7}, {},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 4096), 64):
        ('pallas', None, {'pallas': 44.0}, {'xla_e4m3': 14.1},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 1):
        ('pallas', None, {'pallas': 32.4}, {},
         '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 4):
        ('pallas', None, {'pallas': 34.2}, {'xla_e4m3': 19.1},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 16):
        ('pallas', None, {'pallas': 41.2}, {},
         '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 64):
        ('pallas', None, {'pallas': 106.3}, {'xla_e4m3': 28.0},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'bf16', (8192, 8192), 1):
        ('pallas', None, {'pallas': 36.4}, {},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (8192, 8192), 4):
        ('pallas', None, {'pallas': 37.4}, {'xla_e4m3': 21.1},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (8192, 8192), 16):
        ('pallas', None, {'pallas': 46.6}, {},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (8192, 8192), 64):
        ('pallas', None, {'pallas': 113.7}, {'xla_e4m3': 30.2},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (16384, 4096), 1):
        ('pallas', None, {'pallas': 31.6}, {},
         '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (16384, 4096), 4):
        ('pallas', None, {'pallas': 32.7}, {'xla_e4m3': 18.6},
         '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'bf16', (16384, 4096), 16):
        ('pallas', None, {'pallas': 41.3}, {},
         '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (16384, 4096), 64):
        ('pallas', None, {'pallas': 120.4}, {'xla_e4m3': 29.5},
         '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'bf16', (16384, 16384), 1):
        ('xla', 1.062, {'pallas': 128.0, 'xla': 120.5}, {'xla_e4m3': 71.1, 'xla_bf16': 126.9},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'bf16', (16384, 16384), 4):
        ('pallas', None, {'pallas': 129.4}, {'xla_e4m3': 73.3},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'bf16', (16384, 16384), 16):
        ('pallas', 0.26, {'pallas': 170.0, 'xla': 654.6}, {'xla_e4m3': 79.7, 'xla_bf16': 133.5},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'bf16', (16384, 16384), 64):
        ('pallas', None, {'pallas': 409.0}, {'xla_e4m3': 94.9},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 1):
        ('pallas', None, {'pallas': 11.4}, {'xla_e4m3': 8.6},
         '4096x4096', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 4):
        ('pallas', None, {'pallas': 11.1}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 16):
        ('pallas', None, {'pallas': 13.8}, {'xla_e4m3': 8.9},
         '4096x4096', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 64):
        ('pallas', None, {'pallas': 39.8}, {'xla_e4m3': 14.1},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 1):
        ('xla_parts', 1.092, {'pallas': 21.5, 'xla_parts': 19.7}, {'xla_e4m3': 19.8},
         '4096x14336', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 4):
        ('pallas', 0.213, {'pallas': 22.1, 'xla': 103.5}, {'xla_e4m3': 18.5},
         '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 16):
        ('pallas', 0.876, {'pallas': 25.1, 'xla_parts': 28.7}, {'xla_e4m3': 20.1},
         '4096x14336', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 64):
        ('pallas', 0.911, {'pallas': 72.3, 'xla_parts': 79.4}, {'xla_e4m3': 27.5},
         '4096x14336', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 1):
        ('xla', 1.14, {'pallas': 12.9, 'xla': 11.3}, {'xla_e4m3': 11.4},
         '6144x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 4):
        ('pallas', 0.218, {'pallas': 13.2, 'xla': 60.5}, {'xla_e4m3': 10.3},
         '6144x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 16):
        ('pallas', 0.228, {'pallas': 20.1, 'xla': 88.2}, {'xla_e4m3': 12.1},
         '6144x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 64):
        ('pallas', 0.462, {'pallas': 56.8, 'xla': 123.0}, {'xla_e4m3': 18.2},
         '6144x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 8192), 1):
        ('pallas', None, {'pallas': 23.2}, {'xla_e4m3': 21.3},
         '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (8192, 8192), 4):
        ('pallas', None, {'pallas': 23.7}, {'xla_e4m3': 21.1},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e4m3', (8192, 8192), 16):
        ('pallas', None, {'pallas': 27.5}, {'xla_e4m3': 24.1},
         '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e4m3', (8192, 8192), 64):
        ('pallas', None, {'pallas': 75.0}, {'xla_e4m3': 30.2},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e4m3', (16384, 4096), 1):
        ('pallas', 0.867, {'pallas': 20.3, 'xla': 23.4}, {'xla_e4m3': 25.3},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 4096), 4):
        ('pallas', 0.185, {'pallas': 20.4, 'xla': 110.1}, {'xla_e4m3': 19.4},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 4096), 16):
        ('pallas', 0.137, {'pallas': 23.8, 'xla': 173.5}, {'xla_e4m3': 21.2},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 4096), 64):
        ('pallas', 0.252, {'pallas': 68.9, 'xla': 273.5}, {'xla_e4m3': 29.5},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 16384), 1):
        ('pallas', 0.937, {'pallas': 67.5, 'xla_parts': 72.0}, {'xla_e4m3': 69.3},
         '16384x16384', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'e4m3', (16384, 16384), 4):
        ('pallas', 0.157, {'pallas': 69.2, 'xla': 441.8}, {'xla_e4m3': 72.9},
         '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (16384, 16384), 16):
        ('pallas', 0.761, {'pallas': 72.8, 'xla_parts': 95.7}, {'xla_e4m3': 76.7},
         '16384x16384', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'e4m3', (16384, 16384), 64):
        ('pallas', 0.806, {'pallas': 203.7, 'xla_parts': 252.7}, {'xla_e4m3': 90.6},
         '16384x16384', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 1):
        ('pallas', 1.015, {'pallas': 34.2, 'xla_parts': 33.7}, {'xla_e4m3': 33.3},
         '28672x4096', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 4):
        ('pallas', 0.155, {'pallas': 35.1, 'xla': 226.5}, {'xla_e4m3': 31.1},
         '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 16):
        ('pallas', 0.912, {'pallas': 40.7, 'xla_parts': 44.7}, {'xla_e4m3': 34.1},
         '28672x4096', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 64):
        ('pallas', 1.017, {'pallas': 127.6, 'xla_parts': 125.4}, {'xla_e4m3': 39.1},
         '28672x4096', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 1):
        ('pallas', 0.647, {'pallas': 124.2, 'xla': 192.2}, {'xla_e4m3': 130.9},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 4):
        ('pallas', 0.145, {'pallas': 126.8, 'xla': 875.7}, {'xla_e4m3': 131.1},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 16):
        ('pallas', 0.106, {'pallas': 150.7, 'xla': 1417.7}, {'xla_e4m3': 138.4},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 64):
        ('pallas', 0.206, {'pallas': 467.6, 'xla': 2274.0}, {'xla_e4m3': 161.2},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 1):
        ('pallas', None, {'pallas': 11.4}, {},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 4):
        ('pallas', None, {'pallas': 11.1}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 16):
        ('pallas', None, {'pallas': 13.9}, {},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 64):
        ('pallas', None, {'pallas': 39.4}, {'xla_e4m3': 14.1},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 1):
        ('pallas', None, {'pallas': 21.6}, {},
         '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 4):
        ('pallas', None, {'pallas': 22.1}, {'xla_e4m3': 19.1},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 16):
        ('pallas', None, {'pallas': 25.1}, {},
         '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 64):
        ('pallas', None, {'pallas': 71.9}, {'xla_e4m3': 28.0},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'e5m2', (8192, 8192), 1):
        ('pallas', None, {'pallas': 23.0}, {},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (8192, 8192), 4):
        ('pallas', None, {'pallas': 23.6}, {'xla_e4m3': 21.1},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (8192, 8192), 16):
        ('pallas', None, {'pallas': 27.4}, {},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (8192, 8192), 64):
        ('pallas', None, {'pallas': 75.2}, {'xla_e4m3': 30.2},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (16384, 4096), 1):
        ('pallas', None, {'pallas': 20.6}, {},
         '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (16384, 4096), 4):
        ('pallas', None, {'pallas': 20.3}, {'xla_e4m3': 18.6},
         '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'e5m2', (16384, 4096), 16):
        ('pallas', None, {'pallas': 23.7}, {},
         '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (16384, 4096), 64):
        ('pallas', None, {'pallas': 69.2}, {'xla_e4m3': 29.5},
         '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'e5m2', (16384, 16384), 1):
        ('pallas', 0.593, {'pallas': 69.0, 'xla': 116.5}, {'xla_e4m3': 71.1, 'xla_bf16': 126.9},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e5m2', (16384, 16384), 4):
        ('pallas', None, {'pallas': 69.4}, {'xla_e4m3': 73.3},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e5m2', (16384, 16384), 16):
        ('pallas', 0.103, {'pallas': 74.0, 'xla': 716.2}, {'xla_e4m3': 79.7, 'xla_bf16': 133.5},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'e5m2', (16384, 16384), 64):
        ('pallas', None, {'pallas': 203.2}, {'xla_e4m3': 94.9},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 1):
        ('pallas', None, {'pallas': 16.3}, {'xla_e4m3': 8.6},
         '4096x4096', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 4):
        ('pallas', None, {'pallas': 16.3}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 16):
        ('pallas', None, {'pallas': 17.1}, {'xla_e4m3': 8.9},
         '4096x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 64):
        ('pallas', None, {'pallas': 36.0}, {'xla_e4m3': 14.1},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 1):
        ('pallas', 0.183, {'pallas': 23.3, 'xla_parts': 127.2}, {'xla_e4m3': 19.8},
         '4096x14336', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 4):
        ('pallas', 0.132, {'pallas': 23.6, 'xla': 179.0}, {'xla_e4m3': 18.5},
         '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 16):
        ('pallas', 0.242, {'pallas': 31.7, 'xla_parts': 130.9}, {'xla_e4m3': 20.1},
         '4096x14336', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 64):
        ('pallas', 0.631, {'pallas': 86.9, 'xla_parts': 137.9}, {'xla_e4m3': 27.5},
         '4096x14336', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'mxfp4', (8192, 8192), 1):
        ('pallas', None, {'pallas': 23.8}, {'xla_e4m3': 21.3},
         '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp4', (8192, 8192), 4):
        ('pallas', None, {'pallas': 24.2}, {'xla_e4m3': 21.1},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp4', (8192, 8192), 16):
        ('pallas', None, {'pallas': 32.2}, {'xla_e4m3': 24.1},
         '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp4', (8192, 8192), 64):
        ('pallas', None, {'pallas': 92.8}, {'xla_e4m3': 30.2},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp4', (16384, 4096), 1):
        ('pallas', 0.293, {'pallas': 21.2, 'xla': 72.5}, {'xla_e4m3': 25.3},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 4096), 4):
        ('pallas', 0.117, {'pallas': 21.6, 'xla': 185.4}, {'xla_e4m3': 19.4},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 4096), 16):
        ('pallas', 0.146, {'pallas': 34.3, 'xla': 235.4}, {'xla_e4m3': 21.2},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 4096), 64):
        ('pallas', 0.315, {'pallas': 93.3, 'xla': 296.4}, {'xla_e4m3': 29.5},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 16384), 1):
        ('pallas', 0.111, {'pallas': 60.4, 'xla_parts': 542.1}, {'xla_e4m3': 69.3},
         '16384x16384', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'mxfp4', (16384, 16384), 4):
        ('pallas', 0.078, {'pallas': 60.9, 'xla': 778.4}, {'xla_e4m3': 72.9},
         '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (16384, 16384), 16):
        ('pallas', 0.156, {'pallas': 86.5, 'xla_parts': 554.1}, {'xla_e4m3': 76.7},
         '16384x16384', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'mxfp4', (16384, 16384), 64):
        ('pallas', 0.569, {'pallas': 321.4, 'xla_parts': 565.2}, {'xla_e4m3': 90.6},
         '16384x16384', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 1):
        ('pallas', 0.143, {'pallas': 34.9, 'xla_parts': 244.6}, {'xla_e4m3': 33.3},
         '28672x4096', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 4):
        ('pallas', 0.098, {'pallas': 35.2, 'xla': 358.0}, {'xla_e4m3': 31.1},
         '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 16):
        ('pallas', 0.112, {'pallas': 48.3, 'xla': 431.3}, {'xla_e4m3': 35.0},
         '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 64):
        ('pallas', 0.277, {'pallas': 151.9, 'xla': 548.8}, {'xla_e4m3': 39.8},
         '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 1):
        ('pallas', None, {'pallas': 14.3}, {},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 4):
        ('pallas', None, {'pallas': 14.2}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 16):
        ('pallas', None, {'pallas': 17.7}, {},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 64):
        ('pallas', None, {'pallas': 31.0}, {'xla_e4m3': 14.1},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 1):
        ('pallas', None, {'pallas': 27.7}, {},
         '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 4):
        ('pallas', None, {'pallas': 28.0}, {'xla_e4m3': 19.1},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 16):
        ('pallas', None, {'pallas': 30.3}, {},
         '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 64):
        ('pallas', None, {'pallas': 85.2}, {'xla_e4m3': 28.0},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp8', (8192, 8192), 1):
        ('pallas', None, {'pallas': 27.2}, {},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (8192, 8192), 4):
        ('pallas', None, {'pallas': 27.5}, {'xla_e4m3': 21.1},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (8192, 8192), 16):
        ('pallas', None, {'pallas': 31.5}, {},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (8192, 8192), 64):
        ('pallas', None, {'pallas': 91.2}, {'xla_e4m3': 30.2},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (16384, 4096), 1):
        ('pallas', None, {'pallas': 24.0}, {},
         '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (16384, 4096), 4):
        ('pallas', None, {'pallas': 24.3}, {'xla_e4m3': 18.6},
         '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp8', (16384, 4096), 16):
        ('pallas', None, {'pallas': 28.7}, {},
         '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (16384, 4096), 64):
        ('pallas', None, {'pallas': 92.2}, {'xla_e4m3': 29.5},
         '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp8', (16384, 16384), 1):
        ('pallas', 0.496, {'pallas': 78.6, 'xla': 158.4}, {'xla_e4m3': 71.1, 'xla_bf16': 126.9},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp8', (16384, 16384), 4):
        ('pallas', None, {'pallas': 78.8}, {'xla_e4m3': 73.3},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp8', (16384, 16384), 16):
        ('pallas', 0.094, {'pallas': 85.0, 'xla': 903.7}, {'xla_e4m3': 79.7, 'xla_bf16': 133.5},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'mxfp8', (16384, 16384), 64):
        ('pallas', None, {'pallas': 323.4}, {'xla_e4m3': 94.9},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 1):
        ('pallas', None, {'pallas': 10.9}, {'xla_e4m3': 8.5},
         '4096x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 4):
        ('pallas', None, {'pallas': 11.2}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 16):
        ('pallas', None, {'pallas': 14.9}, {'xla_e4m3': 8.9},
         '4096x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 64):
        ('pallas', None, {'pallas': 39.7}, {'xla_e4m3': 14.1},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 1):
        ('pallas', 0.147, {'pallas': 18.1, 'xla_parts': 123.2}, {'xla_e4m3': 19.8},
         '4096x14336', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 4):
        ('pallas', 0.105, {'pallas': 18.5, 'xla': 175.6}, {'xla_e4m3': 18.5},
         '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 16):
        ('pallas', 0.201, {'pallas': 25.4, 'xla_parts': 126.3}, {'xla_e4m3': 20.1},
         '4096x14336', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 64):
        ('pallas', 0.51, {'pallas': 68.3, 'xla_parts': 133.8}, {'xla_e4m3': 27.5},
         '4096x14336', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'nvfp4', (8192, 8192), 1):
        ('pallas', None, {'pallas': 19.4}, {'xla_e4m3': 21.3},
         '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4', (8192, 8192), 4):
        ('pallas', None, {'pallas': 19.7}, {'xla_e4m3': 21.1},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4', (8192, 8192), 16):
        ('pallas', None, {'pallas': 27.2}, {'xla_e4m3': 24.1},
         '8192x8192', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4', (8192, 8192), 64):
        ('pallas', None, {'pallas': 68.9}, {'xla_e4m3': 30.2},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4', (16384, 4096), 1):
        ('pallas', 0.303, {'pallas': 20.1, 'xla': 66.2}, {'xla_e4m3': 25.3},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 4096), 4):
        ('pallas', 0.113, {'pallas': 20.5, 'xla': 181.7}, {'xla_e4m3': 19.4},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 4096), 16):
        ('pallas', 0.134, {'pallas': 31.2, 'xla': 232.6}, {'xla_e4m3': 21.2},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 4096), 64):
        ('pallas', 0.219, {'pallas': 63.1, 'xla': 288.4}, {'xla_e4m3': 29.5},
         '14336x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 16384), 1):
        ('pallas', 0.101, {'pallas': 52.9, 'xla_parts': 523.4}, {'xla_e4m3': 69.3},
         '16384x16384', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'nvfp4', (16384, 16384), 4):
        ('pallas', 0.071, {'pallas': 54.0, 'xla': 765.3}, {'xla_e4m3': 72.9},
         '16384x16384', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (16384, 16384), 16):
        ('pallas', 0.133, {'pallas': 71.1, 'xla_parts': 535.2}, {'xla_e4m3': 76.7},
         '16384x16384', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'nvfp4', (16384, 16384), 64):
        ('pallas', 0.338, {'pallas': 185.4, 'xla_parts': 548.5}, {'xla_e4m3': 90.6},
         '16384x16384', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 1):
        ('pallas', 0.122, {'pallas': 28.8, 'xla_parts': 236.6}, {'xla_e4m3': 33.3},
         '28672x4096', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 4):
        ('pallas', 0.083, {'pallas': 29.4, 'xla': 354.3}, {'xla_e4m3': 31.1},
         '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 16):
        ('pallas', 0.162, {'pallas': 39.6, 'xla_parts': 244.1}, {'xla_e4m3': 34.1},
         '28672x4096', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 64):
        ('pallas', 0.445, {'pallas': 115.3, 'xla_parts': 259.1}, {'xla_e4m3': 39.1},
         '28672x4096', 'gemv_h200_xla_parts_20261202_0815'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 1):
        ('pallas', 0.159, {'pallas': 91.2, 'xla': 572.3}, {'xla_e4m3': 130.9},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 4):
        ('pallas', 0.063, {'pallas': 93.7, 'xla': 1481.1}, {'xla_e4m3': 131.1},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 16):
        ('pallas', 0.08, {'pallas': 138.5, 'xla': 1739.4}, {'xla_e4m3': 138.4},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 64):
        ('pallas', 0.194, {'pallas': 428.2, 'xla': 2210.5}, {'xla_e4m3': 161.2},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 1):
        ('pallas', None, {'pallas': 11.0}, {},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 4):
        ('pallas', None, {'pallas': 10.8}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 16):
        ('pallas', None, {'pallas': 15.2}, {},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 64):
        ('pallas', None, {'pallas': 38.6}, {'xla_e4m3': 14.1},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 1):
        ('pallas', None, {'pallas': 17.4}, {},
         '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 4):
        ('pallas', None, {'pallas': 17.7}, {'xla_e4m3': 19.1},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 16):
        ('pallas', None, {'pallas': 25.0}, {},
         '4096x14336', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 64):
        ('pallas', None, {'pallas': 67.5}, {'xla_e4m3': 28.0},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 8192), 1):
        ('pallas', None, {'pallas': 18.4}, {},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 8192), 4):
        ('pallas', None, {'pallas': 18.8}, {'xla_e4m3': 21.1},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 8192), 16):
        ('pallas', None, {'pallas': 26.6}, {},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 8192), 64):
        ('pallas', None, {'pallas': 68.1}, {'xla_e4m3': 30.2},
         '8192x8192', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 4096), 1):
        ('pallas', None, {'pallas': 19.4}, {},
         '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 4096), 4):
        ('pallas', None, {'pallas': 19.5}, {'xla_e4m3': 18.6},
         '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 4096), 16):
        ('pallas', None, {'pallas': 30.2}, {},
         '14336x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 4096), 64):
        ('pallas', None, {'pallas': 63.1}, {'xla_e4m3': 29.5},
         '14336x4096', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 16384), 1):
        ('pallas', 0.154, {'pallas': 49.6, 'xla': 321.7}, {'xla_e4m3': 71.1, 'xla_bf16': 126.9},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 16384), 4):
        ('pallas', None, {'pallas': 50.1}, {'xla_e4m3': 73.3},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 16384), 16):
        ('pallas', 0.073, {'pallas': 69.9, 'xla': 956.9}, {'xla_e4m3': 79.7, 'xla_bf16': 133.5},
         '16384x16384', 'gemv_h200_20261201_215647'),
    ('NVIDIA H200', 'nvfp4_2d', (16384, 16384), 64):
        ('pallas', None, {'pallas': 181.7}, {'xla_e4m3': 94.9},
         '16384x16384', 'gemv_h200_20261201_215647'),
}
# END GENERATED TABLE

TABLE: dict[tuple[str, str, tuple[int, int], int], Entry] = {
    key: Entry(*value) for key, value in _MEASURED.items()}
for _key, _entry in TABLE.items():
  if (_entry.impl not in IMPLEMENTATIONS or _entry.impl not in _entry.times
      or "pallas" not in _entry.times or not set(_entry.times) <= set(IMPLEMENTATIONS)):
    raise ValueError(f"gemv dispatch table entry {_key} is malformed: {_entry}")
