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
  x dtype       the layout key of a run with bfloat16 / float16 x is "<layout>@<dtype>"
                (table_layout: "e4m3@bfloat16"; bench_gemv --x_dtype): the paths' costs
                differ by x's dtype ("xla_parts" splits a float32 x into three bfloat16
                parts, takes a bfloat16 x as it is). A call with such x takes those entries
                where the table has one for its (device, layout, bucket), else the float32
                x entries (the table's default, bench_gemv's default x).
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from fp8lab.formats import LAYOUTS, get_quantized_format

__all__ = ["Entry", "TABLE", "SOURCES", "FALLBACK", "IMPLEMENTATIONS", "shape_bucket",
           "layout_of", "table_layout", "device_kind", "lookup", "choose"]

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


def table_layout(layout: str, x_dtype) -> str:
  """The table's layout key for x of `x_dtype`: the layout for float32 x, "<layout>@<dtype
  name>" otherwise (module docstring)."""
  name = jax.numpy.dtype(x_dtype).name
  return layout if name == "float32" else f"{layout}@{name}"


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
           table: dict | None = None, x_dtype="float32") -> str:
  """The implementation for a call: its entry's pick (the x dtype's entries where the
  table has that (device, layout, bucket) for x_dtype, else float32 x's), FALLBACK without
  one."""
  table = TABLE if table is None else table
  keyed = table_layout(layout, x_dtype)
  if keyed != layout and (device, keyed, shape_bucket(n_out, k)) in _index(table):
    layout = keyed
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
        'gemv_h200_llama_a_20261202_152959',
        'gemv_h200_llama_bc_20261202_153315',
        'gemv_h200_bf16x_20261202_155622',
    ),
}
# (device kind, layout, (n_out, k) bucket, batch bucket):
#     (implementation, pallas us / fastest other path's us, {implementation: op
#      device us}, {XLA GEMV op: us}, measured shape, results file)
_MEASURED: dict[tuple[str, str, tuple[int, int], int], tuple] = {
    ('NVIDIA H200', 'bf16', (4096, 4096), 1):
        ('xla', 1.249, {'pallas': 12.8, 'xla': 10.2, 'xla_parts': 12.7}, {'xla_e4m3': 8.5, 'xla_bf16': 11.7},
         '4096x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (4096, 4096), 4):
        ('pallas', None, {'pallas': 13.2}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'bf16', (4096, 4096), 16):
        ('xla_parts', 1.053, {'pallas': 17.2, 'xla_parts': 16.4}, {'xla_e4m3': 8.8, 'xla_bf16': 12.0},
         '4096x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (4096, 4096), 64):
        ('xla_parts', 2.476, {'pallas': 43.7, 'xla_parts': 17.7}, {'xla_e4m3': 14.2, 'xla_bf16': 17.4},
         '4096x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 1):
        ('xla', 1.072, {'pallas': 32.4, 'xla': 30.2, 'xla_parts': 32.3}, {'xla_e4m3': 19.7, 'xla_bf16': 30.5},
         '4096x14336', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 4):
        ('pallas', None, {'pallas': 34.2}, {'xla_e4m3': 19.1},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 16):
        ('xla_parts', 1.093, {'pallas': 42.1, 'xla_parts': 38.5}, {'xla_e4m3': 20.0, 'xla_bf16': 32.5},
         '4096x14336', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (4096, 16384), 64):
        ('xla_parts', 2.382, {'pallas': 106.0, 'xla_parts': 44.5}, {'xla_e4m3': 27.5, 'xla_bf16': 38.9},
         '4096x14336', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (8192, 4096), 1):
        ('xla', 1.241, {'pallas': 17.1, 'xla': 13.8, 'xla_parts': 16.8}, {'xla_e4m3': 11.4, 'xla_bf16': 15.9},
         '6144x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (8192, 4096), 16):
        ('xla_parts', 1.356, {'pallas': 26.9, 'xla_parts': 19.9}, {'xla_e4m3': 12.1, 'xla_bf16': 16.9},
         '6144x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (8192, 4096), 64):
        ('xla_parts', 2.544, {'pallas': 62.8, 'xla_parts': 24.7}, {'xla_e4m3': 18.2, 'xla_bf16': 18.9},
         '6144x4096', 'gemv_h200_llama_a_20261202_152959'),
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
    ('NVIDIA H200', 'bf16', (32768, 4096), 1):
        ('xla', 1.085, {'pallas': 57.9, 'xla': 53.3, 'xla_parts': 58.3}, {'xla_e4m3': 33.4, 'xla_bf16': 54.6},
         '28672x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (32768, 4096), 16):
        ('xla_parts', 1.241, {'pallas': 81.6, 'xla_parts': 65.7}, {'xla_e4m3': 34.1, 'xla_bf16': 55.7},
         '28672x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (32768, 4096), 64):
        ('xla_parts', 2.469, {'pallas': 206.8, 'xla_parts': 83.7}, {'xla_e4m3': 39.4, 'xla_bf16': 58.7},
         '28672x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (131072, 4096), 1):
        ('xla', 1.086, {'pallas': 247.7, 'xla': 228.0, 'xla_parts': 240.0}, {'xla_e4m3': 125.5, 'xla_bf16': 239.0},
         '128256x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (131072, 4096), 16):
        ('xla_parts', 1.254, {'pallas': 331.2, 'xla_parts': 264.1}, {'xla_e4m3': 132.3, 'xla_bf16': 237.8},
         '128256x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'bf16', (131072, 4096), 64):
        ('xla_parts', 2.407, {'pallas': 850.4, 'xla_parts': 353.3}, {'xla_e4m3': 158.5, 'xla_bf16': 249.7},
         '128256x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 1):
        ('xla', 1.345, {'pallas': 10.9, 'xla': 8.1, 'xla_parts': 9.8}, {'xla_e4m3': 8.5, 'xla_bf16': 11.7},
         '4096x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 4):
        ('pallas', None, {'pallas': 11.1}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 16):
        ('pallas', 0.865, {'pallas': 13.8, 'xla_parts': 16.0}, {'xla_e4m3': 8.8, 'xla_bf16': 12.0},
         '4096x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (4096, 4096), 64):
        ('xla_parts', 1.317, {'pallas': 38.6, 'xla_parts': 29.3}, {'xla_e4m3': 14.2, 'xla_bf16': 17.4},
         '4096x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 1):
        ('xla_parts', 1.09, {'pallas': 21.4, 'xla': 28.0, 'xla_parts': 19.6}, {'xla_e4m3': 19.7, 'xla_bf16': 30.5},
         '4096x14336', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 4):
        ('pallas', 0.213, {'pallas': 22.1, 'xla': 103.5}, {'xla_e4m3': 18.5},
         '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 16):
        ('pallas', 0.874, {'pallas': 25.1, 'xla_parts': 28.7}, {'xla_e4m3': 20.0, 'xla_bf16': 32.5},
         '4096x14336', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (4096, 16384), 64):
        ('pallas', 0.904, {'pallas': 71.8, 'xla_parts': 79.5}, {'xla_e4m3': 27.5, 'xla_bf16': 38.9},
         '4096x14336', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 1):
        ('xla', 1.144, {'pallas': 12.9, 'xla': 11.2, 'xla_parts': 11.5}, {'xla_e4m3': 11.4, 'xla_bf16': 15.9},
         '6144x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 4):
        ('pallas', 0.218, {'pallas': 13.2, 'xla': 60.5}, {'xla_e4m3': 10.3},
         '6144x4096', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 16):
        ('xla_parts', 1.037, {'pallas': 19.9, 'xla_parts': 19.2}, {'xla_e4m3': 12.1, 'xla_bf16': 16.9},
         '6144x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (8192, 4096), 64):
        ('xla_parts', 1.284, {'pallas': 57.4, 'xla_parts': 44.7}, {'xla_e4m3': 18.2, 'xla_bf16': 18.9},
         '6144x4096', 'gemv_h200_llama_a_20261202_152959'),
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
        ('pallas', 1.023, {'pallas': 34.3, 'xla': 44.8, 'xla_parts': 33.5}, {'xla_e4m3': 33.4, 'xla_bf16': 54.6},
         '28672x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 4):
        ('pallas', 0.155, {'pallas': 35.1, 'xla': 226.5}, {'xla_e4m3': 31.1},
         '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 16):
        ('pallas', 0.91, {'pallas': 41.1, 'xla_parts': 45.2}, {'xla_e4m3': 34.1, 'xla_bf16': 55.7},
         '28672x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (32768, 4096), 64):
        ('pallas', 1.021, {'pallas': 128.0, 'xla_parts': 125.4}, {'xla_e4m3': 39.4, 'xla_bf16': 58.7},
         '28672x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 1):
        ('pallas', 0.93, {'pallas': 123.7, 'xla': 193.1, 'xla_parts': 133.1}, {'xla_e4m3': 125.5, 'xla_bf16': 239.0},
         '128256x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 4):
        ('pallas', 0.145, {'pallas': 126.8, 'xla': 875.7}, {'xla_e4m3': 131.1},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 16):
        ('pallas', 0.849, {'pallas': 147.6, 'xla_parts': 173.8}, {'xla_e4m3': 132.3, 'xla_bf16': 237.8},
         '128256x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3', (131072, 4096), 64):
        ('pallas', 0.9, {'pallas': 474.7, 'xla_parts': 527.4}, {'xla_e4m3': 158.5, 'xla_bf16': 249.7},
         '128256x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e4m3@bfloat16', (4096, 16384), 1):
        ('pallas', 0.935, {'pallas': 21.5, 'xla_parts': 23.0}, {'xla_e4m3': 19.8, 'xla_bf16': 31.0},
         '4096x14336', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (4096, 16384), 16):
        ('xla_parts', 1.218, {'pallas': 25.0, 'xla_parts': 20.5}, {'xla_e4m3': 20.6, 'xla_bf16': 32.8},
         '4096x14336', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (4096, 16384), 64):
        ('xla_parts', 2.506, {'pallas': 69.8, 'xla_parts': 27.8}, {'xla_e4m3': 27.8, 'xla_bf16': 36.9},
         '4096x14336', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (8192, 4096), 1):
        ('pallas', 0.974, {'pallas': 12.7, 'xla_parts': 13.1}, {'xla_e4m3': 11.3, 'xla_bf16': 15.9},
         '6144x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (8192, 4096), 16):
        ('xla_parts', 1.569, {'pallas': 19.3, 'xla_parts': 12.3}, {'xla_e4m3': 12.2, 'xla_bf16': 17.0},
         '6144x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (8192, 4096), 64):
        ('xla_parts', 3.007, {'pallas': 54.9, 'xla_parts': 18.3}, {'xla_e4m3': 18.4, 'xla_bf16': 20.2},
         '6144x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (32768, 4096), 1):
        ('pallas', 0.816, {'pallas': 34.4, 'xla_parts': 42.2}, {'xla_e4m3': 34.0, 'xla_bf16': 55.8},
         '28672x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (32768, 4096), 16):
        ('xla_parts', 1.205, {'pallas': 42.6, 'xla_parts': 35.4}, {'xla_e4m3': 35.1, 'xla_bf16': 57.1},
         '28672x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (32768, 4096), 64):
        ('xla_parts', 3.156, {'pallas': 127.6, 'xla_parts': 40.4}, {'xla_e4m3': 39.8, 'xla_bf16': 60.4},
         '28672x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (131072, 4096), 1):
        ('pallas', 0.856, {'pallas': 124.0, 'xla_parts': 144.9}, {'xla_e4m3': 131.1, 'xla_bf16': 238.0},
         '128256x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (131072, 4096), 16):
        ('xla_parts', 1.094, {'pallas': 151.9, 'xla_parts': 138.8}, {'xla_e4m3': 138.6, 'xla_bf16': 241.1},
         '128256x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e4m3@bfloat16', (131072, 4096), 64):
        ('xla_parts', 2.78, {'pallas': 473.9, 'xla_parts': 170.5}, {'xla_e4m3': 165.6, 'xla_bf16': 254.3},
         '128256x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 1):
        ('xla', 1.343, {'pallas': 10.9, 'xla': 8.1, 'xla_parts': 9.0}, {'xla_e4m3': 8.5, 'xla_bf16': 11.7},
         '4096x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 4):
        ('pallas', None, {'pallas': 11.1}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 16):
        ('pallas', 0.886, {'pallas': 13.8, 'xla_parts': 15.6}, {'xla_e4m3': 8.8, 'xla_bf16': 12.0},
         '4096x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (4096, 4096), 64):
        ('xla_parts', 1.29, {'pallas': 37.7, 'xla_parts': 29.3}, {'xla_e4m3': 14.2, 'xla_bf16': 17.4},
         '4096x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 1):
        ('xla_parts', 1.062, {'pallas': 21.4, 'xla': 28.0, 'xla_parts': 20.2}, {'xla_e4m3': 19.7, 'xla_bf16': 30.5},
         '4096x14336', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 4):
        ('pallas', None, {'pallas': 22.1}, {'xla_e4m3': 19.1},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 16):
        ('pallas', 0.873, {'pallas': 25.1, 'xla_parts': 28.8}, {'xla_e4m3': 20.0, 'xla_bf16': 32.5},
         '4096x14336', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (4096, 16384), 64):
        ('pallas', 0.9, {'pallas': 71.3, 'xla_parts': 79.3}, {'xla_e4m3': 27.5, 'xla_bf16': 38.9},
         '4096x14336', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (8192, 4096), 1):
        ('xla', 1.139, {'pallas': 12.8, 'xla': 11.3, 'xla_parts': 11.5}, {'xla_e4m3': 11.4, 'xla_bf16': 15.9},
         '6144x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (8192, 4096), 16):
        ('xla_parts', 1.039, {'pallas': 19.9, 'xla_parts': 19.1}, {'xla_e4m3': 12.1, 'xla_bf16': 16.9},
         '6144x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (8192, 4096), 64):
        ('xla_parts', 1.294, {'pallas': 57.8, 'xla_parts': 44.6}, {'xla_e4m3': 18.2, 'xla_bf16': 18.9},
         '6144x4096', 'gemv_h200_llama_a_20261202_152959'),
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
    ('NVIDIA H200', 'e5m2', (32768, 4096), 1):
        ('pallas', 1.025, {'pallas': 34.3, 'xla': 44.8, 'xla_parts': 33.5}, {'xla_e4m3': 33.4, 'xla_bf16': 54.6},
         '28672x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (32768, 4096), 16):
        ('pallas', 0.917, {'pallas': 40.9, 'xla_parts': 44.6}, {'xla_e4m3': 34.1, 'xla_bf16': 55.7},
         '28672x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (32768, 4096), 64):
        ('pallas', 1.023, {'pallas': 127.5, 'xla_parts': 124.6}, {'xla_e4m3': 39.4, 'xla_bf16': 58.7},
         '28672x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (131072, 4096), 1):
        ('pallas', 0.93, {'pallas': 123.9, 'xla': 193.1, 'xla_parts': 133.1}, {'xla_e4m3': 125.5, 'xla_bf16': 239.0},
         '128256x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (131072, 4096), 16):
        ('pallas', 0.881, {'pallas': 147.7, 'xla_parts': 167.7}, {'xla_e4m3': 132.3, 'xla_bf16': 237.8},
         '128256x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'e5m2', (131072, 4096), 64):
        ('pallas', 0.916, {'pallas': 475.4, 'xla_parts': 518.9}, {'xla_e4m3': 158.5, 'xla_bf16': 249.7},
         '128256x4096', 'gemv_h200_llama_a_20261202_152959'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 1):
        ('pallas', 0.69, {'pallas': 16.0, 'xla': 23.2, 'xla_parts': 36.8}, {'xla_e4m3': 8.9, 'xla_bf16': 11.7},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 4):
        ('pallas', None, {'pallas': 16.3}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 16):
        ('pallas', 0.429, {'pallas': 17.4, 'xla_parts': 40.6}, {'xla_e4m3': 8.8, 'xla_bf16': 11.9},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (4096, 4096), 64):
        ('pallas', 0.824, {'pallas': 35.9, 'xla_parts': 43.6}, {'xla_e4m3': 14.3, 'xla_bf16': 17.3},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 1):
        ('pallas', 0.296, {'pallas': 23.1, 'xla': 78.1, 'xla_parts': 127.3}, {'xla_e4m3': 19.4, 'xla_bf16': 30.6},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 4):
        ('pallas', 0.132, {'pallas': 23.6, 'xla': 179.0}, {'xla_e4m3': 18.5},
         '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 16):
        ('pallas', 0.237, {'pallas': 31.4, 'xla_parts': 132.2}, {'xla_e4m3': 20.5, 'xla_bf16': 32.3},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (4096, 16384), 64):
        ('pallas', 0.632, {'pallas': 87.0, 'xla_parts': 137.7}, {'xla_e4m3': 27.5, 'xla_bf16': 39.0},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (8192, 4096), 1):
        ('pallas', 0.751, {'pallas': 24.8, 'xla': 33.0, 'xla_parts': 55.8}, {'xla_e4m3': 11.3, 'xla_bf16': 16.0},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (8192, 4096), 16):
        ('pallas', 0.378, {'pallas': 22.1, 'xla_parts': 58.5}, {'xla_e4m3': 12.0, 'xla_bf16': 17.1},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (8192, 4096), 64):
        ('pallas', 0.852, {'pallas': 54.6, 'xla_parts': 64.2}, {'xla_e4m3': 18.1, 'xla_bf16': 20.0},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
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
        ('pallas', 0.248, {'pallas': 35.3, 'xla': 142.1, 'xla_parts': 244.1}, {'xla_e4m3': 33.4, 'xla_bf16': 54.6},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 4):
        ('pallas', 0.098, {'pallas': 35.2, 'xla': 358.0}, {'xla_e4m3': 31.1},
         '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 16):
        ('pallas', 0.196, {'pallas': 48.9, 'xla_parts': 249.6}, {'xla_e4m3': 34.1, 'xla_bf16': 56.0},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (32768, 4096), 64):
        ('pallas', 0.575, {'pallas': 152.9, 'xla_parts': 266.0}, {'xla_e4m3': 39.8, 'xla_bf16': 60.5},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (131072, 4096), 1):
        ('pallas', 0.189, {'pallas': 116.9, 'xla': 617.8, 'xla_parts': 1046.4}, {'xla_e4m3': 125.6, 'xla_bf16': 236.7},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (131072, 4096), 16):
        ('pallas', 0.152, {'pallas': 164.5, 'xla_parts': 1083.3}, {'xla_e4m3': 132.6, 'xla_bf16': 240.5},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp4', (131072, 4096), 64):
        ('pallas', 0.532, {'pallas': 610.5, 'xla_parts': 1146.5}, {'xla_e4m3': 157.0, 'xla_bf16': 249.3},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 1):
        ('xla', 1.184, {'pallas': 14.0, 'xla': 11.8, 'xla_parts': 32.2}, {'xla_e4m3': 8.9, 'xla_bf16': 11.7},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 4):
        ('pallas', None, {'pallas': 14.2}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 16):
        ('pallas', 0.489, {'pallas': 17.5, 'xla_parts': 35.7}, {'xla_e4m3': 8.8, 'xla_bf16': 11.9},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (4096, 4096), 64):
        ('pallas', 0.821, {'pallas': 31.3, 'xla_parts': 38.1}, {'xla_e4m3': 14.3, 'xla_bf16': 17.3},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 1):
        ('pallas', 0.732, {'pallas': 27.5, 'xla': 37.6, 'xla_parts': 108.4}, {'xla_e4m3': 19.4, 'xla_bf16': 30.6},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 4):
        ('pallas', None, {'pallas': 28.0}, {'xla_e4m3': 19.1},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 16):
        ('pallas', 0.266, {'pallas': 30.1, 'xla_parts': 113.2}, {'xla_e4m3': 20.5, 'xla_bf16': 32.3},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (4096, 16384), 64):
        ('pallas', 0.724, {'pallas': 85.3, 'xla_parts': 117.8}, {'xla_e4m3': 27.5, 'xla_bf16': 39.0},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (8192, 4096), 1):
        ('pallas', 1.026, {'pallas': 16.3, 'xla': 15.9, 'xla_parts': 47.9}, {'xla_e4m3': 11.3, 'xla_bf16': 16.0},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (8192, 4096), 16):
        ('pallas', 0.494, {'pallas': 25.1, 'xla_parts': 50.7}, {'xla_e4m3': 12.0, 'xla_bf16': 17.1},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (8192, 4096), 64):
        ('pallas', 0.927, {'pallas': 52.4, 'xla_parts': 56.5}, {'xla_e4m3': 18.1, 'xla_bf16': 20.0},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
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
    ('NVIDIA H200', 'mxfp8', (32768, 4096), 1):
        ('pallas', 0.684, {'pallas': 43.8, 'xla': 64.0, 'xla_parts': 205.3}, {'xla_e4m3': 33.4, 'xla_bf16': 54.6},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (32768, 4096), 16):
        ('pallas', 0.229, {'pallas': 48.1, 'xla_parts': 210.1}, {'xla_e4m3': 34.1, 'xla_bf16': 56.0},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (32768, 4096), 64):
        ('pallas', 0.685, {'pallas': 155.1, 'xla_parts': 226.3}, {'xla_e4m3': 39.8, 'xla_bf16': 60.5},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (131072, 4096), 1):
        ('pallas', 0.529, {'pallas': 135.5, 'xla': 256.3, 'xla_parts': 872.2}, {'xla_e4m3': 125.6, 'xla_bf16': 236.7},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (131072, 4096), 16):
        ('pallas', 0.186, {'pallas': 169.1, 'xla_parts': 908.5}, {'xla_e4m3': 132.6, 'xla_bf16': 240.5},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8', (131072, 4096), 64):
        ('pallas', 0.655, {'pallas': 637.2, 'xla_parts': 972.3}, {'xla_e4m3': 157.0, 'xla_bf16': 249.3},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (4096, 16384), 1):
        ('pallas', 0.248, {'pallas': 26.8, 'xla_parts': 108.1}, {'xla_e4m3': 19.8, 'xla_bf16': 31.0},
         '4096x14336', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (4096, 16384), 16):
        ('pallas', 0.279, {'pallas': 30.1, 'xla_parts': 107.7}, {'xla_e4m3': 20.6, 'xla_bf16': 32.8},
         '4096x14336', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (4096, 16384), 64):
        ('pallas', 0.739, {'pallas': 81.5, 'xla_parts': 110.2}, {'xla_e4m3': 27.8, 'xla_bf16': 36.9},
         '4096x14336', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (8192, 4096), 1):
        ('pallas', 0.324, {'pallas': 16.1, 'xla_parts': 49.8}, {'xla_e4m3': 11.3, 'xla_bf16': 15.9},
         '6144x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (8192, 4096), 16):
        ('pallas', 0.509, {'pallas': 24.6, 'xla_parts': 48.3}, {'xla_e4m3': 12.2, 'xla_bf16': 17.0},
         '6144x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (8192, 4096), 64):
        ('pallas', 0.928, {'pallas': 47.1, 'xla_parts': 50.8}, {'xla_e4m3': 18.4, 'xla_bf16': 20.2},
         '6144x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (32768, 4096), 1):
        ('pallas', 0.228, {'pallas': 46.9, 'xla_parts': 205.8}, {'xla_e4m3': 34.0, 'xla_bf16': 55.8},
         '28672x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (32768, 4096), 16):
        ('pallas', 0.24, {'pallas': 49.0, 'xla_parts': 204.7}, {'xla_e4m3': 35.1, 'xla_bf16': 57.1},
         '28672x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (32768, 4096), 64):
        ('pallas', 0.765, {'pallas': 158.1, 'xla_parts': 206.6}, {'xla_e4m3': 39.8, 'xla_bf16': 60.4},
         '28672x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (131072, 4096), 1):
        ('pallas', 0.16, {'pallas': 140.4, 'xla_parts': 877.2}, {'xla_e4m3': 131.1, 'xla_bf16': 238.0},
         '128256x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (131072, 4096), 16):
        ('pallas', 0.198, {'pallas': 173.0, 'xla_parts': 872.6}, {'xla_e4m3': 138.6, 'xla_bf16': 241.1},
         '128256x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'mxfp8@bfloat16', (131072, 4096), 64):
        ('pallas', 0.731, {'pallas': 648.1, 'xla_parts': 886.9}, {'xla_e4m3': 165.6, 'xla_bf16': 254.3},
         '128256x4096', 'gemv_h200_bf16x_20261202_155622'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 1):
        ('pallas', 0.549, {'pallas': 11.3, 'xla': 20.6, 'xla_parts': 36.0}, {'xla_e4m3': 8.9, 'xla_bf16': 11.7},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 4):
        ('pallas', None, {'pallas': 11.2}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 16):
        ('pallas', 0.386, {'pallas': 15.4, 'xla_parts': 39.8}, {'xla_e4m3': 8.8, 'xla_bf16': 11.9},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (4096, 4096), 64):
        ('pallas', 0.941, {'pallas': 40.0, 'xla_parts': 42.5}, {'xla_e4m3': 14.3, 'xla_bf16': 17.3},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 1):
        ('pallas', 0.245, {'pallas': 18.0, 'xla': 73.4, 'xla_parts': 123.5}, {'xla_e4m3': 19.4, 'xla_bf16': 30.6},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 4):
        ('pallas', 0.105, {'pallas': 18.5, 'xla': 175.6}, {'xla_e4m3': 18.5},
         '4096x14336', 'gemv_h200_dispatch_a_20261202_043919'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 16):
        ('pallas', 0.198, {'pallas': 25.4, 'xla_parts': 128.3}, {'xla_e4m3': 20.5, 'xla_bf16': 32.3},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (4096, 16384), 64):
        ('pallas', 0.517, {'pallas': 69.3, 'xla_parts': 134.2}, {'xla_e4m3': 27.5, 'xla_bf16': 39.0},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (8192, 4096), 1):
        ('pallas', 0.464, {'pallas': 13.8, 'xla': 29.6, 'xla_parts': 53.9}, {'xla_e4m3': 11.3, 'xla_bf16': 16.0},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (8192, 4096), 16):
        ('pallas', 0.338, {'pallas': 19.3, 'xla_parts': 57.0}, {'xla_e4m3': 12.0, 'xla_bf16': 17.1},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (8192, 4096), 64):
        ('pallas', 0.939, {'pallas': 58.9, 'xla_parts': 62.7}, {'xla_e4m3': 18.1, 'xla_bf16': 20.0},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
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
        ('pallas', 0.225, {'pallas': 29.2, 'xla': 130.0, 'xla_parts': 235.9}, {'xla_e4m3': 33.4, 'xla_bf16': 54.6},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 4):
        ('pallas', 0.083, {'pallas': 29.4, 'xla': 354.3}, {'xla_e4m3': 31.1},
         '28672x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 16):
        ('pallas', 0.166, {'pallas': 40.0, 'xla_parts': 241.5}, {'xla_e4m3': 34.1, 'xla_bf16': 56.0},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (32768, 4096), 64):
        ('pallas', 0.443, {'pallas': 114.8, 'xla_parts': 259.0}, {'xla_e4m3': 39.8, 'xla_bf16': 60.5},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 1):
        ('pallas', 0.158, {'pallas': 90.5, 'xla': 573.1, 'xla_parts': 1008.7}, {'xla_e4m3': 125.6, 'xla_bf16': 236.7},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 4):
        ('pallas', 0.063, {'pallas': 93.7, 'xla': 1481.1}, {'xla_e4m3': 131.1},
         '128256x4096', 'gemv_h200_dispatch_b_20261202_044552'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 16):
        ('pallas', 0.131, {'pallas': 137.4, 'xla_parts': 1046.9}, {'xla_e4m3': 132.6, 'xla_bf16': 240.5},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4', (131072, 4096), 64):
        ('pallas', 0.387, {'pallas': 430.5, 'xla_parts': 1111.3}, {'xla_e4m3': 157.0, 'xla_bf16': 249.3},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 1):
        ('pallas', 0.496, {'pallas': 10.9, 'xla': 22.0, 'xla_parts': 36.0}, {'xla_e4m3': 8.9, 'xla_bf16': 11.7},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 4):
        ('pallas', None, {'pallas': 10.8}, {'xla_e4m3': 7.6},
         '4096x4096', 'gemv_h200_grid_20261130_235729'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 16):
        ('pallas', 0.38, {'pallas': 15.1, 'xla_parts': 39.8}, {'xla_e4m3': 8.8, 'xla_bf16': 11.9},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 4096), 64):
        ('pallas', 0.906, {'pallas': 38.5, 'xla_parts': 42.5}, {'xla_e4m3': 14.3, 'xla_bf16': 17.3},
         '4096x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 1):
        ('pallas', 0.236, {'pallas': 17.4, 'xla': 73.4, 'xla_parts': 124.1}, {'xla_e4m3': 19.4, 'xla_bf16': 30.6},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 4):
        ('pallas', None, {'pallas': 17.7}, {'xla_e4m3': 19.1},
         '4096x14336', 'gemv_h200_20261130_233426'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 16):
        ('pallas', 0.192, {'pallas': 24.8, 'xla_parts': 129.1}, {'xla_e4m3': 20.5, 'xla_bf16': 32.3},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (4096, 16384), 64):
        ('pallas', 0.503, {'pallas': 67.7, 'xla_parts': 134.6}, {'xla_e4m3': 27.5, 'xla_bf16': 39.0},
         '4096x14336', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 4096), 1):
        ('pallas', 0.442, {'pallas': 13.3, 'xla': 30.0, 'xla_parts': 54.1}, {'xla_e4m3': 11.3, 'xla_bf16': 16.0},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 4096), 16):
        ('pallas', 0.33, {'pallas': 18.9, 'xla_parts': 57.1}, {'xla_e4m3': 12.0, 'xla_bf16': 17.1},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (8192, 4096), 64):
        ('pallas', 0.931, {'pallas': 58.4, 'xla_parts': 62.7}, {'xla_e4m3': 18.1, 'xla_bf16': 20.0},
         '6144x4096', 'gemv_h200_llama_bc_20261202_153315'),
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
    ('NVIDIA H200', 'nvfp4_2d', (32768, 4096), 1):
        ('pallas', 0.211, {'pallas': 27.9, 'xla': 132.0, 'xla_parts': 237.1}, {'xla_e4m3': 33.4, 'xla_bf16': 54.6},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (32768, 4096), 16):
        ('pallas', 0.162, {'pallas': 39.4, 'xla_parts': 242.4}, {'xla_e4m3': 34.1, 'xla_bf16': 56.0},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (32768, 4096), 64):
        ('pallas', 0.439, {'pallas': 114.0, 'xla_parts': 259.8}, {'xla_e4m3': 39.8, 'xla_bf16': 60.5},
         '28672x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (131072, 4096), 1):
        ('pallas', 0.145, {'pallas': 84.7, 'xla': 581.9, 'xla_parts': 1015.0}, {'xla_e4m3': 125.6, 'xla_bf16': 236.7},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (131072, 4096), 16):
        ('pallas', 0.128, {'pallas': 134.5, 'xla_parts': 1051.8}, {'xla_e4m3': 132.6, 'xla_bf16': 240.5},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
    ('NVIDIA H200', 'nvfp4_2d', (131072, 4096), 64):
        ('pallas', 0.379, {'pallas': 422.9, 'xla_parts': 1115.2}, {'xla_e4m3': 157.0, 'xla_bf16': 249.3},
         '128256x4096', 'gemv_h200_llama_bc_20261202_153315'),
}
# END GENERATED TABLE

TABLE: dict[tuple[str, str, tuple[int, int], int], Entry] = {
    key: Entry(*value) for key, value in _MEASURED.items()}
for _key, _entry in TABLE.items():
  if (_entry.impl not in IMPLEMENTATIONS or _entry.impl not in _entry.times
      or "pallas" not in _entry.times or not set(_entry.times) <= set(IMPLEMENTATIONS)):
    raise ValueError(f"gemv dispatch table entry {_key} is malformed: {_entry}")
