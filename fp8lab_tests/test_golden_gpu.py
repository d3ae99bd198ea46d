"""The golden model gives the same bits on every backend.

XLA's float converts are not bit-defined across backends (on the H200 float16 -> float32
canonicalises NaN, docs/numerics.md section 9), so the golden model widens and narrows 16-bit
floats on bit patterns (fp8lab/numerics/bits.py). Two kinds of tests here:

  * sweeps against numpy / ml_dtypes on the DEFAULT backend (the GPU on a GPU machine): every
    float16 and bfloat16 pattern through jitted encode, the widening and narrowing helpers,
    and decode of every code. They run in the normal suite (on the CPU as well).
  * GPU vs CPU, marked `gpu` (FP8LAB_GPU_TESTS=1 on a GPU machine): the same jitted quantize /
    dequantize / hadamard / encode on jax.devices("cpu")[0] and on the default device, every
    output compared byte for byte. On a CPU-only machine both would be the CPU.

Expected values come from numpy and ml_dtypes, or from the other backend; comparisons are on
uint8/uint16/uint32 patterns.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fp8lab
from fp8lab import formats
from fp8lab.numerics import bits as fbits
from fp8lab_tests.test_codec import MINIFLOATS, UINT_OF, assert_codes_equal, expected

from fp8lab_tests.switches import gpu      # GPU-vs-CPU tests: FP8LAB_GPU_TESTS=1 only


F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
HALF_DTYPES = [F16, BF16]
FLOAT_DTYPES = [np.dtype(np.float32), BF16, F16]
_ids = lambda d: {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[np.dtype(d).name]


def every_pattern(dtype) -> np.ndarray:
  """All 65,536 bit patterns of a 16-bit float dtype, as (256, 256) values."""
  return np.arange(1 << 16, dtype=np.uint16).view(dtype).reshape(256, 256)


def assert_bits_equal(got, want, x=None):
  """got and want (same dtype, shape) equal as unsigned bit patterns; names a few misses."""
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                               want.dtype, want.shape)
  u = np.dtype(f"uint{got.dtype.itemsize * 8}")
  g, w = got.reshape(-1).view(u), want.reshape(-1).view(u)
  bad = np.flatnonzero(g != w)
  if bad.size:
    xs = None if x is None else np.asarray(x).reshape(-1)
    xu = None if xs is None else xs.view(f"uint{xs.dtype.itemsize * 8}")
    rows = [(f"in=0x{int(xu[i]):X} " if xu is not None else f"[{i}] ")
            + f"got=0x{int(g[i]):X} want=0x{int(w[i]):X}" for i in bad[:10]]
    pytest.fail(f"{bad.size} of {w.size} patterns differ:\n" + "\n".join(rows))


# --- Sweeps against numpy / ml_dtypes, on the default backend -------------------------------

_encode = jax.jit(fp8lab.encode, static_argnames=("fmt", "saturate"))


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("f", MINIFLOATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=_ids)
def test_encode_every_16bit_pattern(dtype, f, saturate):
  x = every_pattern(dtype)
  # The reference: numpy's exact widening to float32, then ml_dtypes' cast (test_codec).
  with np.errstate(invalid="ignore"):
    want = expected(x.astype(np.float32), f, saturate)
  assert_codes_equal(np.asarray(_encode(x, f.name, saturate=saturate)), want, x)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=_ids)
def test_widening_every_16bit_pattern(dtype):
  x = every_pattern(dtype)
  with np.errstate(invalid="ignore"):
    want = x.astype(np.float32).view(np.uint32)     # numpy keeps NaN sign and payload
  got = np.asarray(jax.jit(fbits.f32_bits)(x))
  assert got.dtype == np.uint32
  assert_bits_equal(got, want, x)
  assert_bits_equal(jax.jit(functools.partial(fbits.convert, dtype=jnp.float32))(x),
                    want.view(np.float32), x)


@pytest.mark.parametrize("target", HALF_DTYPES, ids=_ids)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=_ids)
def test_convert_every_16bit_pattern(dtype, target):
  x = every_pattern(dtype)
  if dtype == target:
    want = x                                          # same dtype: the exact bits
  else:
    with np.errstate(invalid="ignore", over="ignore"):
      want = x.astype(np.float32).astype(target)      # the documented reference
  got = jax.jit(functools.partial(fbits.convert, dtype=target))(x)
  assert_bits_equal(got, want, x)


def _narrowing_inputs() -> np.ndarray:
  """float32 bits around every 16-bit value (the value, +-1 ulp, its ties +-1 ulp, for both
  16-bit formats), float32's specials (NaN payloads of both signs), and 1M random patterns."""
  wide = [every_pattern(d).astype(np.float32).view(np.uint32).reshape(-1).astype(np.int64)
          for d in HALF_DTYPES]
  # A normal's tie is half a target ulp above it: 2^12 float32 ulps for float16, 2^15 for
  # bfloat16. float16's subnormal ties (odd multiples of 2^-25) are all among the float32
  # patterns below 2^-14 in steps of 2^12, so take all of those.
  ties = [wide[0] + 0x1000, wide[1] + 0x8000, np.arange(0, 0x38800000, 0x1000, np.int64)]
  b = np.concatenate(wide + ties)
  b = np.concatenate([b - 1, b, b + 1])
  b = b[(b >= 0) & (b < 1 << 32)]
  specials = np.array([0x7F800001, 0x7F801FFF, 0x7F802000, 0x7FA00000, 0x7FBFFFFF, 0x7FC00000,
                       0x7FC00001, 0x7FFFE000, 0x7FFFFFFF, 0x477FF000, 0x477FEFFF, 0x7F7FFFFF,
                       0x7F7F8000, 0x7F7F7FFF], np.int64)
  b = np.concatenate([b, specials, specials | 0x80000000]).astype(np.uint32)
  rng = np.random.default_rng(20261201)
  return np.concatenate([np.unique(b), rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint32)])


_NARROWING_BITS = _narrowing_inputs()


@pytest.mark.parametrize("target", HALF_DTYPES, ids=_ids)
def test_narrowing_float32_patterns(target):
  bits = _NARROWING_BITS
  x = bits.view(np.float32)
  with np.errstate(invalid="ignore", over="ignore"):
    want = x.astype(target).view(np.uint16)           # numpy (float16) / ml_dtypes (bf16)
  got = np.asarray(jax.jit(functools.partial(fbits.narrow_f32_bits, dtype=target))(bits))
  assert got.dtype == np.uint16
  assert_bits_equal(got, want, x)
  assert_bits_equal(jax.jit(functools.partial(fbits.convert, dtype=target))(x),
                    want.view(target), x)


def test_narrowing_nan_rule_literals():
  # The documented NaN rule, independent of numpy / ml_dtypes (see numerics/bits.py).
  cases = [(0x7F800001, 0x7C01, 0x7FC0), (0xFF800001, 0xFC01, 0xFFC0),
           (0x7FC00000, 0x7E00, 0x7FC0), (0xFFA00000, 0xFD00, 0xFFC0),
           (0x7F802000, 0x7C01, 0x7FC0), (0x7FFFFFFF, 0x7FFF, 0x7FC0)]
  bits = np.array([c[0] for c in cases], np.uint32)
  for target, column in ((F16, 1), (BF16, 2)):
    got = np.asarray(jax.jit(fbits.narrow_f32_bits, static_argnums=1)(bits, target))
    np.testing.assert_array_equal(got, np.array([c[column] for c in cases], np.uint16))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_ids)
@pytest.mark.parametrize("f", MINIFLOATS, ids=lambda f: f.name)
def test_decode_every_code(f, dtype):
  codes = np.arange(1 << f.bits, dtype=np.uint8)
  with np.errstate(over="ignore"):
    want = codes.view(f.dtype).astype(dtype)
  got = jax.jit(fp8lab.decode, static_argnames=("fmt", "dtype"))(codes, f.name, dtype)
  assert_bits_equal(got, want, codes)


# --- GPU vs CPU -----------------------------------------------------------------------------

SHAPE = (32, 128)       # 16x16 tiles, 32-blocks and 16/32/64/128 Hadamard blocks all fit


def _layout(dtype):
  d = np.dtype(dtype)
  mbits = {"float32": 23, "bfloat16": 7, "float16": 10}[d.name]
  return d.itemsize * 8, mbits, UINT_OF[d]


def edge_patterns(dtype) -> np.ndarray:
  """Bit patterns of dtype's edges, both signs: NaN (quiet, signalling, all-ones payload),
  Inf, zero, the smallest and largest subnormal, the smallest normal, the largest finite, one,
  and the overflow points of e4m3 / e5m2 / e2m1 (rounded to dtype)."""
  nbits, mbits, u = _layout(dtype)
  exp_all = ((1 << (nbits - 1 - mbits)) - 1) << mbits
  mags = [exp_all | (1 << (mbits - 1)), exp_all | 1, exp_all | ((1 << mbits) - 1), exp_all,
          0, 1, (1 << mbits) - 1, 1 << mbits, exp_all - 1]
  vals = np.array([1.0, 448.0, 464.0, 465.0, 57344.0, 61440.0, 6.0, 7.0], np.float32)
  with np.errstate(over="ignore"):
    mags += [int(v) for v in vals.astype(dtype).view(u)]
  mags = np.array(mags, np.uint64)
  return np.concatenate([mags, mags | (1 << (nbits - 1))]).astype(u)


def quantize_inputs(dtype) -> dict[str, np.ndarray]:
  """Named SHAPE arrays of dtype: raw random bit patterns; raw patterns with every exponent
  field kept below all-ones (finite); moderate values (|x| in [2^-8, 2^8)); edges (the edge
  patterns shuffled over the rows, some rows moderate values with one edge value each)."""
  nbits, mbits, u = _layout(dtype)
  rng = np.random.default_rng(nbits * 100 + mbits)
  n = SHAPE[0] * SHAPE[1]
  raw = rng.integers(0, 1 << nbits, n, dtype=np.uint64).astype(u)
  exp_all = u(((1 << (nbits - 1 - mbits)) - 1) << mbits)
  finite = np.where((raw & exp_all) == exp_all, raw ^ (u(1) << u(nbits - 2)), raw)
  moderate = rng.uniform(1.0, 2.0, n) * np.exp2(rng.integers(-8, 8, n))
  moderate = (moderate * rng.choice([-1.0, 1.0], n)).astype(np.float32).astype(dtype)
  edges = moderate.reshape(SHAPE).copy()
  e = edge_patterns(dtype).view(dtype)
  half = SHAPE[0] // 2
  edges[:half] = rng.choice(e, (half, SHAPE[1]))
  cols = rng.integers(0, SHAPE[1], SHAPE[0] - half)
  edges[np.arange(half, SHAPE[0]), cols] = rng.choice(e, SHAPE[0] - half)
  return {"raw": raw.view(dtype).reshape(SHAPE), "finite": finite.view(dtype).reshape(SHAPE),
          "moderate": moderate.reshape(SHAPE), "edges": edges}


def quantize_configs():
  """(id, format, block_shape, scale_mode, rounding, hadamard) from the format registry: every
  format, block shape and scale mode with nearest rounding, stochastic rounding with the
  first of each; one format (nvfp4) also with Hadamard specs."""
  out = []
  for name, qf in formats.QUANTIZED.items():
    for block_shape in qf.block_shapes or (None,):
      tag = name + ("" if block_shape in (None, qf.block_shape) else "_2d")
      # Formats without scale modes take scale_mode=None only.
      for mode in qf.scale_modes or (None,):
        out.append((f"{tag}-{mode or 'nearest'}", name, block_shape, mode, "nearest", None))
      if qf.stochastic_rounding:
        out.append((f"{tag}-sr", name, block_shape, None, "stochastic", None))
  random_spec = fp8lab.HadamardSpec.from_signs(16, jax.random.key(7))
  for spec_id, spec in (("fixed", fp8lab.HadamardSpec(16, "fixed")), ("random", random_spec)):
    for rounding in ("nearest", "stochastic"):
      out.append((f"nvfp4-had-{spec_id}-{rounding}", "nvfp4", None, None, rounding, spec))
  return out


QUANTIZE_CONFIGS = quantize_configs()
DEQUANT_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)


def on_device(device, fn, *args) -> list[np.ndarray]:
  """fn(*args) with its arguments placed on `device` and it as the default device; the
  output leaves as numpy arrays, after checking they were computed there."""
  args = jax.device_put(args, device)
  with jax.default_device(device):
    out = fn(*args)
  leaves = jax.tree_util.tree_leaves(out)
  for leaf in leaves:
    assert leaf.devices() == {device}, (leaf.devices(), device)
  return [np.asarray(leaf) for leaf in leaves]


def assert_same_on_cpu(fn, *args):
  """The leaves of fn(*args) on the default device and on the CPU are byte-equal."""
  cpu = jax.devices("cpu")[0]
  here = on_device(jax.devices()[0], fn, *args)
  there = on_device(cpu, fn, *args)
  assert len(here) == len(there)
  for i, (a, b) in enumerate(zip(here, there)):
    assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, a.shape, b.dtype, b.shape)
    bad = np.flatnonzero(a.reshape(-1).view(np.uint8) != b.reshape(-1).view(np.uint8))
    assert bad.size == 0, f"leaf {i} ({a.dtype}{list(a.shape)}): {bad.size} bytes differ"


@functools.lru_cache(maxsize=None)
def _quantize_fn(fmt, block_shape, scale_mode, rounding, spec):
  def fn(x, key):
    # the golden model on both devices (on a GPU the default is the kernel, which
    # test_quantize_kernel.py compares with the golden model)
    q = fp8lab.quantize(x, fmt, block_shape=block_shape, scale_mode=scale_mode,
                        rounding=rounding, key=key if rounding == "stochastic" else None,
                        hadamard=spec, implementation="reference")
    return q, [q.dequantize(d, unrotate=spec is not None) for d in DEQUANT_DTYPES]
  return jax.jit(fn)


@gpu
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_ids)
@pytest.mark.parametrize("config", QUANTIZE_CONFIGS, ids=[c[0] for c in QUANTIZE_CONFIGS])
def test_quantize_same_on_gpu_and_cpu(config, dtype):
  _, fmt, block_shape, scale_mode, rounding, spec = config
  fn = _quantize_fn(fmt, block_shape, scale_mode, rounding, spec)
  key = jax.random.key(20261201)
  for name, x in quantize_inputs(dtype).items():
    try:
      assert_same_on_cpu(fn, x, key)
    except AssertionError as e:
      raise AssertionError(f"input {name}: {e}") from None


@gpu
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_ids)
def test_hadamard_and_amax_same_on_gpu_and_cpu(dtype):
  def fn(x):
    return ([fp8lab.hadamard(x, b, signs="fixed") for b in (16, 32, 64, 128)],
            fp8lab.tensor_amax(x), fp8lab.current_scale(fp8lab.tensor_amax(x), "e4m3"))
  for x in quantize_inputs(dtype).values():
    assert_same_on_cpu(jax.jit(fn), x)


@gpu
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_ids)
def test_encode_same_on_gpu_and_cpu(dtype):
  def fn(x, key):
    out = []
    for f in MINIFLOATS:
      out += [fp8lab.encode(x, f, saturate=s) for s in (False, True)]
      if f is not formats.E8M0:
        out.append(fp8lab.encode(x, f, rounding="stochastic", key=key, sr_bits=12))
    return out
  for x in quantize_inputs(dtype).values():
    assert_same_on_cpu(jax.jit(fn), x, jax.random.key(3))
