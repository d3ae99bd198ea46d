"""encode / decode against ml_dtypes, bit for bit, eagerly and under jax.jit.

The reference is always ml_dtypes (`x.astype(T).view(uint8)`, `codes.view(T).astype(dtype)`)
or a rule derived here from ml_dtypes' tables; fp8lab's codec never produces an expected
value. Comparisons are on bit patterns (uint8 codes, uint16/uint32 float bits).
"""

import math

from hypothesis import given
import jax
from jax.extend.random import threefry2x32_p
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fp8lab
from fp8lab import formats
from fp8lab import testing as fpt

E4M3, E5M2, E2M1, E8M0 = formats.E4M3, formats.E5M2, formats.E2M1, formats.E8M0
MINIFLOATS = [E4M3, E5M2, E2M1, E8M0]
SR_FORMATS = [E4M3, E5M2, E2M1]          # stochastic rounding is not defined for e8m0
MODES = ["eager", "jit"]
UINT_OF = {np.dtype(np.float32): np.uint32, np.dtype(np.float16): np.uint16,
           np.dtype(ml_dtypes.bfloat16): np.uint16}
_name = lambda f: f.name

_encode_jit = jax.jit(fp8lab.encode, static_argnames=(
    "fmt", "saturate", "rounding", "sr_bits", "index_offset"))
_decode_jit = jax.jit(fp8lab.decode, static_argnames=("fmt", "dtype"))


def encode(mode, x, fmt, **kwargs) -> np.ndarray:
  fn = fp8lab.encode if mode == "eager" else _encode_jit
  return np.asarray(fn(x, fmt, **kwargs))


def decode(mode, codes, fmt, dtype) -> np.ndarray:
  fn = fp8lab.decode if mode == "eager" else _decode_jit
  return np.asarray(fn(codes, fmt, dtype))


# --- The reference: ml_dtypes, and the saturating rule built on top of it -----------------

def ml_codes(x: np.ndarray, f) -> np.ndarray:
  """ml_dtypes' cast of float32/bfloat16/float16 `x` to f, as codes."""
  with np.errstate(invalid="ignore", over="ignore"):
    return x.astype(f.dtype).view(np.uint8)


def _sign(x: np.ndarray) -> np.ndarray:
  u = x.view(UINT_OF[x.dtype])
  return (u >> (u.dtype.itemsize * 8 - 1)).astype(np.uint8)


def ml_codes_saturating(x: np.ndarray, f) -> np.ndarray:
  """The satfinite rule (docs/numerics.md section 2) applied to ml_dtypes' result: a non-NaN
  input that ml_dtypes sends to a non-finite code (finite overflow, +-Inf) becomes the
  largest finite code with the input's sign; e8m0 only for positive inputs (its zero,
  negatives and NaN are NaN in both modes)."""
  codes = ml_codes(x, f)
  all_codes = np.arange(1 << f.bits, dtype=np.uint8)
  nonfinite = ~np.isfinite(all_codes.view(f.dtype).astype(np.float32))
  overflow = nonfinite[codes] & ~np.isnan(x)
  if f.signed:
    sat = np.uint8(f.max_code) | (_sign(x) << np.uint8(f.bits - 1))
  else:
    overflow &= x.astype(np.float32) > 0
    sat = np.uint8(f.max_code)
  return np.where(overflow, sat, codes).astype(np.uint8)


def expected(x, f, saturate):
  return ml_codes_saturating(x, f) if saturate else ml_codes(x, f)


def assert_codes_equal(got, want, x):
  assert got.dtype == np.uint8 and got.shape == want.shape, (got.dtype, got.shape)
  bad = np.flatnonzero(got.ravel() != want.ravel())
  if bad.size:
    xb = x.reshape(-1).view(UINT_OF[x.dtype])
    rows = [f"in=0x{int(xb[i]):X} ({x.reshape(-1)[i]}) got=0x{int(got.ravel()[i]):02X} "
            f"want=0x{int(want.ravel()[i]):02X}" for i in bad[:10]]
    pytest.fail(f"{bad.size} of {want.size} codes differ:\n" + "\n".join(rows))


def f32(bits) -> np.ndarray:
  return np.asarray(bits, dtype=np.uint32).view(np.float32)


# --- The reference helper itself, on documented literal cases -------------------------------

# (format, float32 input, code without saturation, code with saturation), from docs/numerics.md
# section 2 and the satfinite rule; independent of both ml_dtypes and fp8lab.
LITERALS = [
    ("e4m3", 448.0, 0x7E, 0x7E), ("e4m3", 464.0, 0x7E, 0x7E), ("e4m3", 465.0, 0x7F, 0x7E),
    ("e4m3", -465.0, 0xFF, 0xFE), ("e4m3", np.inf, 0x7F, 0x7E), ("e4m3", -np.inf, 0xFF, 0xFE),
    ("e4m3", np.nan, 0x7F, 0x7F), ("e4m3", -np.nan, 0xFF, 0xFF), ("e4m3", -0.0, 0x80, 0x80),
    ("e4m3", 2.0**-10, 0x00, 0x00), ("e4m3", 3 * 2.0**-10, 0x02, 0x02),
    ("e4m3", -2.0**-10, 0x80, 0x80),
    ("e5m2", 57344.0, 0x7B, 0x7B), ("e5m2", 61440.0, 0x7C, 0x7B),
    ("e5m2", float(np.nextafter(np.float32(61440), np.float32(0))), 0x7B, 0x7B),
    ("e5m2", -np.inf, 0xFC, 0xFB), ("e5m2", np.nan, 0x7E, 0x7E), ("e5m2", -np.nan, 0xFE, 0xFE),
    ("e2m1", 0.25, 0x0, 0x0), ("e2m1", 0.75, 0x2, 0x2), ("e2m1", 1.25, 0x2, 0x2),
    ("e2m1", 1.75, 0x4, 0x4), ("e2m1", 2.5, 0x4, 0x4), ("e2m1", 3.5, 0x6, 0x6),
    ("e2m1", 5.0, 0x6, 0x6), ("e2m1", 7.0, 0x7, 0x7), ("e2m1", -np.inf, 0xF, 0xF),
    ("e2m1", np.nan, 0x8, 0x8), ("e2m1", -np.nan, 0x0, 0x0), ("e2m1", -0.0, 0x8, 0x8),
    ("e8m0", 1.0, 0x7F, 0x7F), ("e8m0", 1.5, 0x80, 0x80), ("e8m0", 3.0, 0x81, 0x81),
    ("e8m0", 0.0, 0xFF, 0xFF), ("e8m0", -1.0, 0xFF, 0xFF), ("e8m0", np.inf, 0xFF, 0xFE),
    ("e8m0", 2.0**127 * 1.5, 0xFF, 0xFE), ("e8m0", np.nan, 0xFF, 0xFF),
]


@pytest.mark.parametrize("mode", MODES)
def test_documented_literals(mode):
  for name, value, nosat, sat in LITERALS:
    f = formats.get_format(name)
    x = np.array([value], np.float32)
    assert ml_codes(x, f)[0] == nosat, (name, value)            # the reference agrees
    assert ml_codes_saturating(x, f)[0] == sat, (name, value)
    assert encode(mode, x, name, saturate=False)[0] == nosat, (name, value)
    assert encode(mode, x, name, saturate=True)[0] == sat, (name, value)


# --- Exhaustive: every float16 and bfloat16 pattern -----------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("f", MINIFLOATS, ids=_name)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_encode_every_16bit_pattern(dtype, f, saturate, mode):
  x = np.arange(1 << 16, dtype=np.uint16).view(dtype).reshape(256, 256)
  want = expected(x, f, saturate)
  if saturate and f is not E2M1:
    assert (want != ml_codes(x, f)).any()   # the saturating reference is not vacuous
  assert_codes_equal(encode(mode, x, f.name, saturate=saturate), want, x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16],
                         ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("f", MINIFLOATS, ids=_name)
def test_decode_every_code(f, dtype, mode):
  codes = np.arange(1 << f.bits, dtype=np.uint8).reshape(-1, 4)
  with np.errstate(over="ignore"):
    want = codes.view(f.dtype).astype(dtype)
  got = decode(mode, codes, f.name, dtype)
  assert got.dtype == np.dtype(dtype) and got.shape == codes.shape
  u = UINT_OF[np.dtype(dtype)]
  np.testing.assert_array_equal(got.view(u), want.view(u))


@pytest.mark.parametrize("f", MINIFLOATS, ids=_name)
def test_decode_accepts_format_dtype_arrays(f):
  codes = np.arange(1 << f.bits, dtype=np.uint8)
  want = codes.view(f.dtype).astype(np.float32).view(np.uint32)
  got = np.asarray(fp8lab.decode(jnp.asarray(codes.view(f.dtype)), f.name))
  np.testing.assert_array_equal(got.view(np.uint32), want)


def test_decode_e2m1_reads_only_the_low_nibble():
  codes = np.arange(256, dtype=np.uint8)
  want = (codes & 0xF).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
  got = np.asarray(fp8lab.decode(codes, "e2m1"))
  np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# --- float32: hand-picked edges and a few million random patterns ---------------------------

def edge_values(f) -> np.ndarray:
  """float32 bits of f's edges, built from the descriptor: every grid value and every tie of
  every binade (subnormals included), the overflow threshold, each +- 1 float32 ulp, both
  signs; plus float32's own specials (NaN payloads of both signs, +-Inf, +-0, subnormals)."""
  m = f.mantissa_bits
  lowest = int(math.log2(f.min_normal))      # exponent of the smallest normal
  vals = []
  for e in range(lowest, f.emax + 1):
    for k in range(1 << m):
      vals.append((1 + k / 2**m) * 2.0**e)                   # grid
      vals.append((1 + (2 * k + 1) / 2**(m + 1)) * 2.0**e)   # tie above it
  for k in range(1 << m if m else 0):                          # subnormals and their ties
    vals.append(k * 2.0**(lowest - m))
    vals.append((2 * k + 1) * 2.0**(lowest - m - 1))
  top = 2.0**(f.emax - m)                                      # quantum of the top binade
  vals += [f.max_finite, f.max_finite + top / 2, f.max_finite + top, 2 * f.max_finite,
           f.min_subnormal / 2, f.min_subnormal / 4, 0.75 * f.min_subnormal,
           465.0, 61440.0]      # docs/numerics.md's e4m3 and e5m2 overflow examples
  x = np.array([v for v in vals if v <= 3e38], np.float32)
  assert np.all(x.astype(np.float64) == np.array([v for v in vals if v <= 3e38]))
  b = x.view(np.uint32).astype(np.int64)
  b = np.concatenate([b - 1, b, b + 1])
  b = b[b >= 0]
  specials = [0x0, 0x1, 0x400000, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000,
              0x7F800001, 0x7FA00000, 0x7FBFFFFF, 0x7FC00001, 0x7FFFFFFF]
  b = np.concatenate([b, specials])
  b = np.concatenate([b, b | 0x80000000])
  return f32(np.unique(b).astype(np.uint32))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("f", MINIFLOATS, ids=_name)
def test_encode_float32_edges(f, saturate, mode):
  x = edge_values(f)
  assert_codes_equal(encode(mode, x, f.name, saturate=saturate), expected(x, f, saturate), x)


_RANDOM_BITS = np.random.default_rng(20261130).integers(0, 1 << 32, size=1 << 22,
                                                        dtype=np.uint32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("f", MINIFLOATS, ids=_name)
def test_encode_random_float32_patterns(f, saturate, mode):
  # 4M patterns under jit; eager dispatch is slower, so a 256K slice of them.
  bits = _RANDOM_BITS if mode == "jit" else _RANDOM_BITS[:1 << 18]
  x = f32(bits).reshape(-1, 1024)
  assert_codes_equal(encode(mode, x, f.name, saturate=saturate), expected(x, f, saturate), x)


@given(fpt.bit_pattern_arrays(np.float32, 256))
def test_encode_hypothesis_float32_bits(x):
  for f in MINIFLOATS:
    for saturate in (False, True):
      assert_codes_equal(encode("jit", x, f.name, saturate=saturate),
                         expected(x, f, saturate), x)


@given(fpt.bit_pattern_arrays(ml_dtypes.bfloat16, (4, 16), formats=("e4m3", "e2m1")))
def test_encode_hypothesis_bfloat16_bits(x):
  for f in (E4M3, E2M1):
    assert_codes_equal(encode("jit", x, f.name, saturate=True), expected(x, f, True), x)


# --- Errors, raised before any tracing ------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x", [np.zeros(4, np.int32), np.zeros(4, np.uint8),
                               np.zeros(4, ml_dtypes.float8_e4m3fn), jnp.zeros(4, jnp.int32),
                               np.zeros(4, np.complex64)],
                         ids=["int32", "uint8", "e4m3", "jnp-int32", "complex64"])
def test_encode_rejects_other_dtypes(x, mode):
  with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
    encode(mode, x, "e4m3")


def test_encode_float64_numpy_input():
  # With x64 off, jnp.asarray would narrow float64 to float32 silently (rounding twice);
  # encode checks the caller's dtype first, so a direct call is a TypeError.
  x = np.array([1.0 + 2.0**-30, 464.0000001], np.float64)
  with pytest.raises(TypeError, match="got float64"):
    fp8lab.encode(x, "e4m3")
  if not jax.config.jax_enable_x64:
    # Under jax.jit, jit itself narrows the argument before encode sees it (documented):
    # the result is that of the float32 input.
    np.testing.assert_array_equal(encode("jit", x, "e4m3"),
                                  ml_codes(x.astype(np.float32), E4M3))


def test_encode_accepts_python_scalars_as_float32():
  assert int(fp8lab.encode(1.5, "e4m3")) == 0x3C
  np.testing.assert_array_equal(np.asarray(fp8lab.encode([1.5, -2.0], "e4m3")), [0x3C, 0xC0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["e4m4", "f16", "bf16", "float32"])
def test_encode_rejects_unknown_or_storage_formats(fmt, mode):
  with pytest.raises(ValueError, match="e4m3"):
    encode(mode, np.zeros(4, np.float32), fmt)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kwargs,match", [
    ({"rounding": "up"}, "rounding"),
    ({"rounding": "stochastic"}, "key"),
    ({"rounding": "stochastic", "key": jax.random.key(0), "sr_bits": 0}, "sr_bits"),
    ({"rounding": "stochastic", "key": jax.random.key(0), "sr_bits": 25}, "sr_bits"),
    ({"rounding": "stochastic", "key": jax.random.key(0), "sr_bits": 8.0}, "sr_bits"),
    ({"rounding": "nearest", "key": jax.random.key(0)}, "key"),
    ({"rounding": "stochastic", "key": jnp.zeros(3, jnp.uint32)}, "key"),
    ({"rounding": "stochastic", "key": jax.random.split(jax.random.key(0), 2)}, "key"),
], ids=["rounding", "no-key", "sr0", "sr25", "sr-float", "key-nearest", "key3", "two-keys"])
def test_encode_argument_errors(kwargs, match, mode):
  with pytest.raises(ValueError, match=match):
    encode(mode, np.ones(4, np.float32), "e4m3", **kwargs)


@pytest.mark.parametrize("mode", MODES)
def test_stochastic_e8m0_is_an_error(mode):
  with pytest.raises(ValueError, match="e8m0"):
    encode(mode, np.ones(4, np.float32), "e8m0", rounding="stochastic", key=jax.random.key(0))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codes", [np.zeros(4, np.int8), np.zeros(4, np.int32),
                                   np.zeros(4, np.uint16), np.zeros(4, np.float32),
                                   np.zeros(4, ml_dtypes.float8_e5m2)],
                         ids=["int8", "int32", "uint16", "float32", "other-format"])
def test_decode_rejects_wrong_code_dtype(codes, mode):
  with pytest.raises(TypeError, match="uint8"):
    decode(mode, codes, "e4m3", np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8, ml_dtypes.float8_e4m3fn])
def test_decode_rejects_wrong_output_dtype(dtype, mode):
  with pytest.raises(TypeError, match="output dtype"):
    decode(mode, np.zeros(4, np.uint8), "e4m3", dtype)


def test_decode_rejects_unknown_format():
  with pytest.raises(ValueError, match="e4m3"):
    fp8lab.decode(np.zeros(4, np.uint8), "e3m3")


# --- Stochastic rounding --------------------------------------------------------------------

def grid(f) -> np.ndarray:
  """f's non-negative finite values (ml_dtypes' table), ascending, float64, then one quantum
  of the top binade past the largest finite value: the neighbour that overflows."""
  values = np.arange(1 << f.bits, dtype=np.uint8).view(f.dtype).astype(np.float64)
  values = np.unique(np.abs(values[np.isfinite(values)]))     # abs: -0 is not a magnitude
  return np.append(values, f.max_finite + 2.0**(f.emax - f.mantissa_bits))


def neighbours(x: np.ndarray, f):
  """(lo, hi): the grid magnitudes with lo <= |x| <= hi (equal when |x| is on the grid)."""
  g = grid(f)
  a = np.abs(x.astype(np.float64))
  assert np.all(a <= g[-1])
  return g[np.searchsorted(g, a, side="right") - 1], g[np.searchsorted(g, a, side="left")]


def signed_codes(mag: np.ndarray, x: np.ndarray, f, saturate: bool) -> np.ndarray:
  """Reference code of the grid magnitude `mag` with x's sign (the top neighbour overflows
  the way ml_dtypes' cast or the satfinite rule says)."""
  v = np.where(_sign(x) == 1, -mag, mag).astype(np.float32)
  return expected(v, f, saturate)


def sr_inputs(f, n: int, seed: int) -> np.ndarray:
  """float32 values up to the top neighbour: random sign, exponent from below the smallest
  subnormal to the top binade, random 23-bit mantissa; grid values and zeros mixed in."""
  rng = np.random.default_rng(seed)
  lowest = int(math.log2(f.min_subnormal)) - 3
  exp = rng.integers(lowest + 127, f.emax + 128, size=n, dtype=np.uint32)
  bits = (exp << 23) | rng.integers(0, 1 << 23, size=n, dtype=np.uint32)
  bits |= rng.integers(0, 2, size=n, dtype=np.uint32) << 31
  x = f32(bits)
  g = grid(f)
  x[::16] = rng.choice(g, size=x[::16].size) * rng.choice([-1, 1], size=x[::16].size)
  return x[np.abs(x) <= g[-1]]


def threefry_bits(key, n: int, offset: int = 0) -> np.ndarray:
  """First output word of JAX's threefry2x32 primitive on (key words; index, 0)."""
  data = jax.random.key_data(key)
  index = jnp.arange(n, dtype=jnp.uint32) + jnp.uint32(offset)
  k0 = jnp.full_like(index, data[0])
  k1 = jnp.full_like(index, data[1])
  return np.asarray(threefry2x32_p.bind(k0, k1, index, jnp.zeros_like(index))[0])


def sr_reference(x, f, saturate, sr_bits, random_words):
  """docs/numerics.md section 6: round up iff floor(frac * 2^n) + r >= 2^n, r the top n bits."""
  lo, hi = neighbours(x, f)
  a = np.abs(x.astype(np.float64))
  step = hi - lo                      # a power of two, or 0 on the grid
  # Exact in float64: a - lo has at most 25 significant bits, and the scaling is by powers
  # of two.
  frac_n = np.floor(np.where(step > 0, (a - lo) / np.where(step > 0, step, 1), 0) * 2.0**sr_bits)
  r = (random_words >> np.uint32(32 - sr_bits)).astype(np.float64)
  up = frac_n + r >= 2.0**sr_bits
  return np.where(up, signed_codes(hi, x, f, saturate), signed_codes(lo, x, f, saturate))


SR_CASES = [(n, False) for n in (1, 2, 8, 20, 21, 24)] + [(8, True)]


@pytest.mark.parametrize("sr_bits,saturate", SR_CASES)
@pytest.mark.parametrize("f", SR_FORMATS, ids=_name)
def test_stochastic_follows_the_rule_exactly(f, sr_bits, saturate):
  x = sr_inputs(f, 1 << 14, seed=sr_bits)
  key = jax.random.key(1000 + sr_bits)
  got = encode("jit", x, f.name, saturate=saturate, rounding="stochastic", key=key,
               sr_bits=sr_bits)
  want = sr_reference(x, f, saturate, sr_bits, threefry_bits(key, x.size))
  assert_codes_equal(got, want, x)
  # Only ever one of the two neighbours, and both occur.
  lo, hi = neighbours(x, f)
  is_lo = got == signed_codes(lo, x, f, saturate)
  is_hi = got == signed_codes(hi, x, f, saturate)
  assert np.all(is_lo | is_hi)
  assert np.any(is_lo & ~is_hi) and np.any(is_hi & ~is_lo)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("f", SR_FORMATS, ids=_name)
def test_stochastic_16bit_inputs(f, dtype):
  x = sr_inputs(f, 1 << 12, seed=7).astype(dtype)
  x = x[np.abs(x.astype(np.float64)) <= grid(f)[-1]]
  key = jax.random.key(77)
  got = encode("jit", x, f.name, rounding="stochastic", key=key)
  want = sr_reference(x.astype(np.float32), f, False, 8, threefry_bits(key, x.size))
  assert_codes_equal(got, want, x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f", SR_FORMATS, ids=_name)
def test_stochastic_exact_values_never_move(f, mode):
  g = grid(f)[:-1]
  x = np.concatenate([g, -g]).astype(np.float32)
  x = np.tile(x, 8)
  want = ml_codes(x, f)
  for seed, sr_bits in [(0, 1), (1, 8), (2, 24)]:
    got = encode(mode, x, f.name, rounding="stochastic", key=jax.random.key(seed),
                 sr_bits=sr_bits)
    assert_codes_equal(got, want, x)


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("f", SR_FORMATS, ids=_name)
def test_stochastic_specials_and_overflow_as_nearest(f, saturate):
  # NaN, +-Inf, +-0 and magnitudes at or past the top neighbour have no choice to make.
  beyond = grid(f)[-1]
  edges = edge_values(f)
  x = np.concatenate([edges[~np.isfinite(edges) | (edges == 0)],
                      np.array([beyond, 2 * beyond, 3e38], np.float32)])
  x = np.concatenate([x, -x])
  got = encode("jit", x, f.name, saturate=saturate, rounding="stochastic",
               key=jax.random.key(3))
  assert_codes_equal(got, expected(x, f, saturate), x)


def test_stochastic_is_deterministic_per_key():
  x = sr_inputs(E4M3, 4096, seed=11)
  kw = dict(rounding="stochastic", sr_bits=8)
  a = encode("jit", x, "e4m3", key=jax.random.key(5), **kw)
  b = encode("jit", x, "e4m3", key=jax.random.key(5), **kw)
  c = encode("eager", x, "e4m3", key=jax.random.key(5), **kw)
  d = encode("jit", x, "e4m3", key=jax.random.key(6), **kw)
  legacy = encode("jit", x, "e4m3", key=jax.random.PRNGKey(5), **kw)
  np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(a, c)
  np.testing.assert_array_equal(a, legacy)    # same key words, same bits
  assert np.count_nonzero(a != d) > 100


def test_stochastic_index_offset_draws_the_slice_of_a_larger_array():
  x = sr_inputs(E5M2, 3000, seed=12)
  key = jax.random.key(9)
  whole = encode("jit", x, "e5m2", rounding="stochastic", key=key)
  part = encode("jit", x[1000:], "e5m2", rounding="stochastic", key=key, index_offset=1000)
  np.testing.assert_array_equal(part, whole[1000:])
  # The bits follow the flat row-major index, whatever the shape.
  x2 = x[:2400].reshape(40, 60)
  np.testing.assert_array_equal(
      encode("jit", x2, "e5m2", rounding="stochastic", key=key).ravel(), whole[:2400])


def _between_grid_points(f) -> list[tuple[float, float]]:
  """(lo, hi) pairs: the first subnormal step, a step at 1, and the top binade's last step."""
  g = grid(f)[:-1]
  i1 = int(np.searchsorted(g, 1.0))
  return [(g[0], g[1]), (g[i1], g[i1 + 1]), (g[-2], g[-1])]


FRACTIONS = (0.1, 0.3, 0.5, 0.77, 0.99)


@pytest.mark.parametrize("sr_bits", [2, 8])
@pytest.mark.parametrize("f", SR_FORMATS, ids=_name)
def test_stochastic_is_unbiased_over_elements(f, sr_bits):
  """Each element index draws its own bits, so N copies of x are N Bernoulli draws between
  the neighbours a < b, with P(up) = q = floor(frac * 2^n) / 2^n exactly. Then
    |E[mean] - x| = step * (frac - q) < step / 2^n  (the rule's bias bound), and
    std(mean) = step * sqrt(q (1 - q) / N);
  allow the bias bound plus 6 sigma (a false alarm below 1e-8 per check)."""
  n_copies = 1 << 15
  rows = []
  for lo, hi in _between_grid_points(f):
    for frac in FRACTIONS:
      x = np.float32(lo + frac * (hi - lo))
      rows += [x, -x]
  x = np.repeat(np.array(rows, np.float32)[:, None], n_copies, axis=1)
  codes = encode("jit", x, f.name, rounding="stochastic", key=jax.random.key(21),
                 sr_bits=sr_bits)
  values = codes.view(f.dtype).astype(np.float64)       # decoded by ml_dtypes
  for row in range(x.shape[0]):
    xv = np.float64(x[row, 0])
    lo, hi = (v[0] for v in neighbours(x[row, :1], f))
    step = hi - lo
    frac = (abs(xv) - lo) / step
    q = math.floor(frac * 2**sr_bits) / 2**sr_bits
    sigma = step * math.sqrt(q * (1 - q) / n_copies)
    mean = values[row].mean()
    assert abs(mean - xv) <= step / 2**sr_bits + 6 * sigma, (xv, mean, sr_bits)
    # The frequency of rounding up (away from zero) is q, within 6 sigma of a binomial.
    p_up = np.mean(np.abs(values[row]) == hi)
    assert abs(p_up - q) <= 6 * math.sqrt(q * (1 - q) / n_copies), (xv, p_up, q)
    if q in (0.0, 1.0):
      assert p_up == q


@pytest.mark.parametrize("f", SR_FORMATS, ids=_name)
def test_stochastic_is_unbiased_over_keys(f):
  """The same element under N different keys: the same bound as above, over keys."""
  n_keys = 4096
  lo, hi = _between_grid_points(f)[1]
  x = np.array([lo + fr * (hi - lo) for fr in FRACTIONS], np.float32)
  keys = jax.random.split(jax.random.key(33), n_keys)
  per_key = jax.jit(jax.vmap(
      lambda k: fp8lab.encode(x, f.name, rounding="stochastic", key=k, sr_bits=8)))
  values = np.asarray(per_key(keys)).view(f.dtype).astype(np.float64)
  step = hi - lo
  for j, xv in enumerate(x.astype(np.float64)):
    q = math.floor((xv - lo) / step * 256) / 256
    sigma = step * math.sqrt(q * (1 - q) / n_keys)
    assert abs(values[:, j].mean() - xv) <= step / 256 + 6 * sigma, (xv, values[:, j].mean())


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e2m1", "e8m0"])
def test_decode_takes_arrays_of_the_formats_own_dtype(name):
  # decode also accepts the format's ml_dtypes array (its bits are the codes); expected
  # values come from ml_dtypes, bit patterns compared (NaN included).
  f = formats.get_format(name)
  codes = np.arange(1 << f.bits, dtype=np.uint8)
  typed = jnp.asarray(codes.view(f.dtype) if f.bits == 8 else
                      codes.view(f.dtype).astype(np.float32).astype(f.dtype))
  want = np.asarray(codes.view(f.dtype)).astype(np.float32).view(np.uint32)
  got = np.asarray(fp8lab.decode(typed, name)).view(np.uint32)
  np.testing.assert_array_equal(got, want)
