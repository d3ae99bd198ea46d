"""Tests of fp8lab.gemv_packed and its Pallas kernel (fp8lab/kernels/gemv/, unpack.py).

Default (CPU): the kernel runs in Pallas interpret mode on tiny odd shapes, and the larger
grids (switches.grid) run a thinned cover of their cases; FP8LAB_SLOW_TESTS=1 runs them
whole. With FP8LAB_GPU_TESTS=1 on a GPU the same tests run the compiled kernel on larger
shapes, plus the tests marked `gpu` (determinism across runs). Expected values never come from the
kernel: they come from the golden model (fp8lab.dequantize, fp8lab.decode) and from float64
products computed here with numpy.

Tolerances. Where weights and x are small integers (times powers of two) every product and
every partial sum is an integer below 2^24, exact in float32 in any order, so the kernel must
match the reference path bit for bit. Elsewhere the error bound against the float64 product
of the dequantized weights is derived from the kernel's order of operations
(fp8lab/kernels/gemv/kernel.py docstring), with u = 2^-24:
  * each product w * x is exact on the tensor cores apart from the representation of x
    by float16 / bfloat16 parts, |x - sum(parts)| <= 2^-22 |x| = 4u|x|;
  * k float32 additions in any order add at most (k - 1) u sum|w x| (first order);
  * the final scale factors (exact powers of two times the tensor scale) round once: u |y|;
  * the reference's own rounding of each dequantized weight (NVFP4: code * fl(s * S_dec),
    two roundings) moves the "exact" product by at most 2u sum|w x|;
so |y - y64| <= (k + 7) u sum|w x| + u |y64|. Tensor cores accumulate float32 with
truncation instead of rounding to nearest, which at most doubles the addition term: we test
|y - y64| <= 2 (k + 8) u sum|w x| + u_out (|y64| + that), u_out being the unit roundoff of
x's dtype (the result is rounded to it once at the end).
"""

from __future__ import annotations

import functools
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from fp8lab.formats import LAYOUTS, QUANTIZED_FORMATS, get_format, get_quantized_format
from fp8lab.kernels import device
from fp8lab.kernels import gemv as G
from fp8lab.kernels.gemv import configs as GC
from fp8lab.kernels.gemv import operands as GO
from fp8lab.kernels.gemv import plan as GP
from fp8lab.kernels.gemv import xprep as GX
from fp8lab.kernels import unpack as U
from fp8lab.quantized import QuantizedArray

warnings.filterwarnings("ignore", message=".*Triton.*deprecated.*")
warnings.filterwarnings("ignore", message=".*Pallas Triton backend is deprecated.*")

from fp8lab_tests.lowering import triton_irs
from fp8lab_tests.switches import ON_GPU, gpu, grid
INTERPRET = not ON_GPU
# (n_out, k): odd sizes, so that row blocks and the K tail are partial and k is not a
# multiple of the codes per word nor of the scale block.
SHAPE = (1000, 4100) if ON_GPU else (37, 100)

# layout name -> (quantize format, element format, block_shape), from the registry's LAYOUTS
# that the kernel serves (G.serves_format; the blockwise formats are test_blockwise.py's);
# each format's named variants right after it (the grids below cycle x dtypes in this order).
FORMATS = {
    name: (fmt, get_quantized_format(fmt).element.name,
           block or get_quantized_format(fmt).block_shape)
    for name, (fmt, block) in sorted(LAYOUTS.items(), key=lambda it: (
        QUANTIZED_FORMATS.index(it[1][0]), it[1][1] is not None))
    if G.serves_format(fmt)
}
X_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
U_OUT = {jnp.dtype(jnp.float32): 2.0**-24, jnp.dtype(jnp.bfloat16): 2.0**-8,
         jnp.dtype(jnp.float16): 2.0**-11}


def _gemv(w, x, **kw):
  return fp8lab.gemv_packed(w, x, implementation="pallas", interpret=INTERPRET, **kw)


# Formats with e2m1 codes, which the inline-PTX integer decode (FormatPlan.asm_e2m1) takes.
ASM_E2M1_NAMES = ("mxfp4", "nvfp4", "nvfp4_2d")


def _gemv_plan(w, x, **plan_kw):
  """The kernel on a 2D x with format_plan(..., **plan_kw): for decodes gemv_packed does not
  choose (asm_e2m1)."""
  plan = G.format_plan(w.format, w.element_format, w.block_shape, w.tensor_scale is not None,
                       **plan_kw)
  assert all(getattr(plan, f) == v for f, v in plan_kw.items()), plan
  return G.gemv_pallas(w.data, w.scales, w.tensor_scale, x, plan=plan, n_out=w.shape[0],
                       k=w.shape[1], interpret=INTERPRET)


# Formats whose codes the native fp8 decode (FormatPlan.native_fp8) takes.
NATIVE_NAMES = ("e4m3", "e5m2", "mxfp8", "mxfp8_e5m2")
# Formats whose E4M3 block scales it takes (FormatPlan.native_scale).
NATIVE_SCALE_NAMES = ("nvfp4", "nvfp4_2d")


@pytest.fixture
def use_native(monkeypatch):
  """use_native(on): sets or clears FP8LAB_GEMV_NATIVE_FP8 for this test and makes every
  gemv_pallas call check that its plan uses the native decode exactly when asked (and the
  format has e4m3 / e5m2 codes: elements or NVFP4 scales), and the asm e2m1 decode exactly
  when compiled for a GPU (e2m1 codes). Calls whose trace is cached (same shapes, same static
  native flag: gemv_packed passes it down as a static argument) do not reach gemv_pallas;
  returns the plans seen."""
  real = G.gemv_pallas
  seen = []

  def set_(on: bool, asm: bool | None = None):
    """asm: the asm e2m1 decode expected (None: gemv_packed's choice, on exactly on a GPU)."""
    want_asm = ON_GPU if asm is None else asm
    if on and ON_GPU and not device.has_fp8_converts():
      pytest.skip("the native fp8 decode needs sm_89+")
    monkeypatch.setenv(G.NATIVE_FP8_ENV, "1" if on else "0")

    def spy(*a, plan, **kw):
      assert plan.native_fp8 == (on and plan.elem.name in U.NATIVE_FORMATS), plan
      assert plan.native_scale == (on and plan.scaling == "nvfp4"), plan
      assert plan.asm_e2m1 == (want_asm and plan.elem.name == "e2m1"), plan
      seen.append(plan)
      return real(*a, plan=plan, **kw)

    monkeypatch.setattr(G, "gemv_pallas", spy)
    return seen

  return set_


def _bits(a) -> np.ndarray:
  a = np.asarray(a)
  return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def _integer_weight(name: str, n: int, k: int, rng, nan_row: int | None = None):
  """A QuantizedArray whose dequantized values are small integers times powers of two,
  built from codes (not by the quantizer), with its float64 dequantization."""
  fmt, elem_name, block = FORMATS[name]
  elem = get_format(elem_name)
  vals = rng.integers(-4, 5, (n, k)).astype(np.float32)
  if elem.bits == 16:
    codes = jnp.asarray(vals.astype(elem.dtype))
  else:
    codes = fp8lab.encode(jnp.asarray(vals), elem)
    if nan_row is not None and elem.nan_codes:
      codes = codes.at[nan_row, k // 2].set(elem.nan_codes[-1])
  deq = vals.astype(np.float64)
  if nan_row is not None and elem.nan_codes:
    deq[nan_row, k // 2] = np.nan
  scales = tensor_scale = None
  scale_mode = None
  if fmt in ("e4m3", "e5m2"):
    tensor_scale = jnp.float32(2.0)
    deq = deq * 2.0
  elif fmt.startswith("mx"):
    e = rng.integers(0, 2, (n, -(-k // 32)))
    codes_s = (127 + e).astype(np.uint8)
    if nan_row is not None:
      codes_s[nan_row, 0] = 0xFF
    scales = jnp.asarray(codes_s)
    mult = np.repeat(2.0 ** e, 32, axis=1)[:, :k]
    if nan_row is not None:
      mult[nan_row, :32] = np.nan
    deq = deq * mult
    scale_mode = "floor"
  elif fmt == "nvfp4":
    rows = -(-n // 16) if block == (16, 16) else n
    sv = rng.integers(0, 2, (rows, -(-k // 16))).astype(np.float32) + 1.0   # 1 or 2
    codes_s = np.array(fp8lab.encode(jnp.asarray(sv), "e4m3"))
    if nan_row is not None:
      codes_s[nan_row // (16 if block == (16, 16) else 1), 0] = 0x7F
      sv[nan_row // (16 if block == (16, 16) else 1), 0] = np.nan
    scales = jnp.asarray(codes_s)
    tensor_scale = jnp.float32(0.5)
    full = np.repeat(sv, 16, axis=1)
    if block == (16, 16):
      full = np.repeat(full, 16, axis=0)
    deq = deq * full[:n, :k] * 0.5
  w = QuantizedArray(fp8lab.pack(codes, elem), scales, tensor_scale, format=fmt,
                     element_format=elem_name, shape=(n, k), axis=1, block_shape=block,
                     scale_mode=scale_mode, hadamard=None)
  return w, deq


# ------------------------------------------------------------------ unpack helpers

@pytest.mark.parametrize("elem_name", ["e4m3", "e5m2", "e2m1"])
def test_decode_planes_every_code_every_position(elem_name):
  """The float16 route gives value * 2^f16_route_log2 for every code at every position of a
  word (NaN codes: NaN), bit for bit against the golden decode."""
  f = get_format(elem_name)
  codes = np.arange(1 << f.bits, dtype=np.uint8)
  grid = np.stack([np.roll(codes, s) for s in range(f.per_word)], axis=1).reshape(-1)
  words = fp8lab.pack(jnp.asarray(grid), f)
  planes = [np.asarray(p) for p in U.decode_planes(words, f)]
  planes16 = [np.asarray(p.astype(jnp.float32)) for p in U.decode_planes_16bit(words, f)]
  got = np.stack(planes, -1).reshape(-1) * np.float32(2.0 ** -U.f16_route_log2(f))
  got16 = np.stack(planes16, -1).reshape(-1) * np.float32(2.0 ** -U.f16_route_log2(f))
  want = np.asarray(fp8lab.decode(jnp.asarray(grid), f, jnp.float32))
  nan = np.isnan(want)
  np.testing.assert_array_equal(np.isnan(got), nan)
  np.testing.assert_array_equal(np.isnan(got16), nan)
  keep = ~nan
  np.testing.assert_array_equal(_bits(got[keep]), _bits(want[keep]))
  np.testing.assert_array_equal(_bits(got16[keep]), _bits(want[keep]))


def test_e4m3_scale_native_twin_equals_the_integer_scale_decode_on_every_code():
  """NVFP4's native scale decode (interpret-mode twin of cvt.rn.f16x2.e4m3x2 on pairs of
  codes) and the integer decode give the same float16 bits for every
  finite code, both the golden value, and NaN for both NaN codes."""
  codes = jnp.arange(256, dtype=jnp.uint32).astype(jnp.uint8).reshape(2, 128)
  nat = np.asarray(U.e4m3_scale_to_f16_native(codes, interpret=True)).reshape(-1)
  ref = np.asarray(U.e4m3_scale_to_f16(codes)).reshape(-1)
  gold = np.asarray(fp8lab.decode(codes.reshape(-1), get_format("e4m3")), np.float32)
  nan = np.isnan(gold)
  assert nan.sum() == 2
  np.testing.assert_array_equal(np.isnan(nat), nan)
  np.testing.assert_array_equal(np.isnan(ref), nan)
  np.testing.assert_array_equal(_bits(nat[~nan]), _bits(ref[~nan]))
  np.testing.assert_array_equal(nat[~nan].astype(np.float32), gold[~nan])
  np.testing.assert_array_equal(np.signbit(nat[~nan]), np.signbit(gold[~nan]))


# The plane orders of the asm decodes, written out: plane i, column e + g (words paired
# (e, e + 1), e even) -> (word offset from e, code index in that word).
_PAIR_SOURCE = {
    "code": lambda i, g, pw: (g, i),
    "native": lambda i, g, pw: (i // 2, 2 * (i % 2) + g),
    "e2m1_asm": lambda i, g, pw: (i // 4, i % 4 + 4 * g),
}


def _in_pair_order(codes: np.ndarray, layout: str) -> np.ndarray:
  """codes[..., w, c] (code c of word w; even number of words) -> [..., w, i]: what plane
  i holds in column w under `layout` (_PAIR_SOURCE)."""
  n_w, pw = codes.shape[-2:]
  out = np.empty_like(codes)
  for w in range(n_w):
    e, g = w - w % 2, w % 2
    for i in range(pw):
      dw, c = _PAIR_SOURCE[layout](i, g, pw)
      out[..., w, i] = codes[..., e + dw, c]
  return out


@pytest.mark.parametrize("layout,pw", [("code", 4), ("code", 8), ("native", 4),
                                       ("e2m1_asm", 8)])
def test_pair_offsets_match_the_written_out_orders(layout, pw):
  off = U.pair_offsets(layout, pw)
  want = [[pw * dw + c for dw, c in (_PAIR_SOURCE[layout](i, g, pw) for g in (0, 1))]
          for i in range(pw)]
  np.testing.assert_array_equal(off, want)
  assert sorted(off.reshape(-1)) == list(range(2 * pw))                 # a permutation


@pytest.mark.parametrize("elem_name", ["e4m3", "e5m2"])
def test_decode_planes_native_every_code_every_position(elem_name):
  """The native decode (interpret-mode twin of the kernel's cvt.rn.f16x2.*x2 on a 16-bit
  half of a word) gives every code's TRUE value as float16, bit for bit against ml_dtypes'
  fp8 -> float16 cast (subnormals, -0) and the golden decode, in the "native" pair order
  (plane i: codes 2 (i % 2) and 2 (i % 2) + 1 of word e + i // 2); NaN codes NaN, e5m2 Inf
  codes Inf."""
  f = get_format(elem_name)
  codes = np.arange(256, dtype=np.uint8)
  grid = np.stack([np.roll(codes, s) for s in range(f.per_word)], axis=1)  # word w, code c
  words = fp8lab.pack(jnp.asarray(grid.reshape(-1)), f)
  planes = U.decode_planes_native(words, f, interpret=True)
  assert all(p.dtype == jnp.float16 and p.shape == words.shape for p in planes)
  got = np.stack([np.asarray(p) for p in planes], -1)                      # word w, plane i
  order = _in_pair_order(grid, "native")
  assert not np.array_equal(order, grid)
  want = order.view(f.dtype).astype(np.float16)                             # ml_dtypes
  golden = np.asarray(fp8lab.decode(jnp.asarray(order), f, jnp.float32))
  nan = np.isnan(want)
  assert nan.sum() == len(f.nan_codes) * f.per_word
  np.testing.assert_array_equal(np.isnan(got), nan)
  np.testing.assert_array_equal(np.isnan(golden), nan)
  np.testing.assert_array_equal(_bits(got[~nan]), _bits(want[~nan]))
  np.testing.assert_array_equal(_bits(got[~nan].astype(np.float32)), _bits(golden[~nan]))
  assert _bits(got[order == 0x80]).tolist() == [0x8000] * f.per_word     # -0 stays -0


def test_native_plane_asm_converts_a_half_of_one_word():
  """The inline PTX of the compiled native decode: plane i names the 16-bit halves of
  word e ($1) for i < 2, of word e + 1 ($2) otherwise, and converts half i % 2 with one
  cvt; no PRMT or other instruction moves bytes. (Runs only compiled; the GPU tests
  check its results.)"""
  for name in U.NATIVE_FORMATS:
    f = get_format(name)
    for i in range(f.per_word):
      asm = U._native_plane_asm(f, i)
      assert f"mov.b32 {{lo, hi}}, {'$2' if i >= 2 else '$1'};" in asm
      assert f"cvt.rn.f16x2.{name}x2 $0, {'hi' if i % 2 else 'lo'};" in asm
      assert "prmt" not in asm and asm.count("$1") + asm.count("$2") == 1


def _e2m1_pair_grid() -> np.ndarray:
  """uint32 words, shape (2, 34): every e2m1 code at every word position, each in an even
  (low half of an asm pair) and in an odd word (high half); row 1 reversed."""
  codes = np.arange(16, dtype=np.uint8)
  grid = np.stack([np.roll(codes, s) for s in range(8)], axis=1)          # word r, code i
  words = np.asarray(fp8lab.pack(jnp.asarray(grid), "e2m1")).reshape(-1)  # 16 words
  row = np.concatenate([words, [0], words, [0]]).astype(np.uint32)        # parity flipped
  return np.stack([row, row[::-1]])


def test_decode_planes_e2m1_asm_every_code_every_position():
  """The asm e2m1 decode (its interpret-mode twin runs the very ops the PTX is printed
  from) gives the integer route's float16 patterns bit for bit, i.e. the golden value
  times 2^-14 (-0 for code 8), in the "e2m1_asm" pair order (plane i: codes i % 4 and
  i % 4 + 4 of word e + i // 4), for all 16 codes at all 8 positions of both words of a
  pair."""
  f = get_format("e2m1")
  words = _e2m1_pair_grid()
  codes = (words[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF     # (2, 34, 8)
  order = _in_pair_order(codes, "e2m1_asm")                                  # word, plane
  for i in range(8):
    even, odd = order[:, 0::2, i].reshape(-1), order[:, 1::2, i].reshape(-1)
    assert set(even) == set(odd) == set(range(16))
  planes = U.decode_planes_e2m1_asm(jnp.asarray(words), interpret=True)
  assert len(planes) == 8
  assert all(p.dtype == jnp.float16 and p.shape == words.shape for p in planes)
  got = np.stack([_bits(p) for p in planes], -1)                           # (2, 34, 8)
  route = np.stack([_bits(p) for p in U.decode_planes_16bit(jnp.asarray(words), f)], -1)
  np.testing.assert_array_equal(got, _in_pair_order(route, "e2m1_asm"))
  golden = np.asarray(fp8lab.decode(jnp.asarray(order.astype(np.uint8)), f, jnp.float32))
  want = (golden * np.float32(2.0 ** -14)).astype(np.float16)
  assert U.f16_route_log2(f) == -14
  np.testing.assert_array_equal(got, _bits(want))
  assert set(got[order == 8].tolist()) == {0x8000}                           # -0 stays -0


def test_e2m1_plane_asm_is_integer_one_word_per_plane():
  """The inline PTX of the compiled asm e2m1 decode: integer ops only (no cvt; sm_80 runs
  it); plane i reads only word e ($1) for i < 4, e + 1 ($2) otherwise, and its last PRMT
  puts byte q = (i % 4) // 2 of the decoded bytes in bits 8..15 and byte q + 2 in bits
  24..31, zero bytes from the immediate 0; 4 instructions for odd i, 5 for even (shl 4
  first). (Runs only compiled; the GPU tests check its results; the twin above runs the
  same op list.)"""
  for i in range(8):
    asm = U._e2m1_plane_asm(i)
    ops = re.findall(r"(\w+)\.b32 ", asm)
    assert set(ops) <= {"prmt", "shl", "shr", "and", "lop3"} and "cvt" not in asm, asm
    assert len(ops) == (4 if i % 2 else 5), asm
    w, other = ("$2", "$1") if i >= 4 else ("$1", "$2")
    assert other not in asm and w in asm, asm
    q = (i % 4) // 2
    assert f"prmt.b32 $0, x, 0, {((q + 2) << 12) | 0x400 | (q << 4) | 4:#x};" in asm
    assert asm.count("$0") == 1 and ops.count("prmt") == 1


@pytest.mark.parametrize("kind", ["e8m0", "e4m3"])
def test_scale_decoders_every_code(kind):
  c = jnp.arange(256, dtype=jnp.uint8)
  want = np.asarray(fp8lab.decode(c, kind, jnp.float32))
  if kind == "e8m0":
    got = np.asarray(U.e8m0_scale_to_f32(c))
  else:
    g16 = U.e4m3_scale_to_f16(c)
    assert g16.dtype == jnp.float16
    got = np.asarray(g16.astype(jnp.float32))
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  ok = ~np.isnan(want)
  np.testing.assert_array_equal(_bits(got[ok]), _bits(want[ok]))


# ------------------------------------------------------------------ exact agreement

# Batches 1..64 and the three x dtypes spread over the formats (interpret mode is slow):
# the batch decides how many columns the dots have (x parts times the batch padded to a
# power of two, at least 8) and which config bucket applies.
# The fp8 formats and NVFP4 (its E4M3 scales) again with the native decode
# (FP8LAB_GEMV_NATIVE_FP8=1), the e2m1 formats with the asm decode (FormatPlan.asm_e2m1,
# through gemv_pallas; in interpret mode gemv_packed takes the shift-and-mask route).
# The default run takes every format and decode at batches 1 and 16 (the two dot widths of
# the small batches), and batches 3 and 64 / 5 for one format of each family (8-bit, MX
# 4-bit, NVFP4, 16-bit) with the integer decode; the rest with FP8LAB_SLOW_TESTS=1 and on
# the GPU.
_EXACT_ODD_BATCHES = ("e4m3", "mxfp4", "nvfp4", "bf16")
_EXACT_CASES = [pytest.param(name, b, X_DTYPES[(i + j) % 3], decode,
                             marks=[pytest.mark.slow] if j % 2 and (
                                 decode != "integer" or name not in _EXACT_ODD_BATCHES)
                             else [])
                for i, name in enumerate(FORMATS)
                for j, b in enumerate((1, 3, 16, 64 if name in ("e4m3", "mxfp4", "nvfp4") else 5))
                for decode in ("integer",)
                + ("native",) * (name in NATIVE_NAMES + NATIVE_SCALE_NAMES)
                + ("asm",) * (name in ASM_E2M1_NAMES)]


@pytest.mark.parametrize("name,batch,xdt,decode", _EXACT_CASES)
def test_exact_on_small_integers(name, batch, xdt, decode, use_native):
  use_native(decode == "native", asm=True if decode == "asm" else None)
  rng = np.random.default_rng(hash((name, batch)) % 2**32)
  n, k = SHAPE
  w, deq = _integer_weight(name, n, k, rng)
  xv = rng.integers(-3, 4, (batch, k)).astype(np.float32)
  x = jnp.asarray(xv).astype(xdt)
  y = _gemv_plan(w, x, asm_e2m1=True) if decode == "asm" else _gemv(w, x)
  ref = fp8lab.gemv_packed(w, x, implementation="reference")
  assert y.shape == (batch, n) and y.dtype == x.dtype
  np.testing.assert_array_equal(_bits(y), _bits(ref))
  # The reference itself against an independent float64 product, rounded like it.
  want = (xv.astype(np.float64) @ deq.T).astype(np.float32).astype(x.dtype)
  np.testing.assert_array_equal(_bits(y), _bits(want))


# ------------------------------------------------------------------ random data

def _bound(xv: np.ndarray, deq: np.ndarray, xdt, name: str | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
  """y64 and the kernel's error bound (gemv.py docstring). With `name` of a format whose dots
  take float16 operands and a float32 / bfloat16 x, the float16 window term is added: x row b
  is scaled so that its largest |x| lies in [2^14, 2^15), and parts below float16's normal
  range keep an absolute error <= 2^-24 there (hi and lo both rounded as float16
  subnormals), i.e. 2^(e_b - 38) with e_b = floor(log2 max|x_b|), times sum_j |w_rj|."""
  u = 2.0**-24
  k = xv.shape[-1]
  y64 = xv @ deq.T
  acc = 2 * (k + 8) * u * (np.abs(xv) @ np.abs(deq).T)
  if name is not None and FORMATS[name][1] != "bf16" and jnp.dtype(xdt) != jnp.float16:
    amax = np.abs(np.where(np.isfinite(xv), xv, 0)).max(axis=-1)
    e = np.floor(np.log2(np.where(amax > 0, amax, 1.0)))
    acc = acc + 2.0 ** (e - 38)[:, None] * np.abs(deq).sum(axis=1)[None, :]
  return y64, acc + U_OUT[jnp.dtype(xdt)] * (np.abs(y64) + acc)


@pytest.mark.parametrize("name,batch,xdt", grid(
    list(FORMATS), [(1, jnp.float32), (2, jnp.bfloat16), (33, jnp.float32), (8, jnp.float16)],
    cover=True))
def test_random_within_float32_bound(name, batch, xdt):
  fmt, _, block = FORMATS[name]
  key = jax.random.key(hash((name, batch)) % 2**31)
  kw, kx = jax.random.split(key)
  n, k = SHAPE
  wf = jax.random.normal(kw, (n, k), jnp.float32) * 3.0
  kwargs = {"block_shape": block} if block == (16, 16) else {}
  w = fp8lab.quantize(wf, fmt, **kwargs)
  x = (jax.random.normal(kx, (batch, k), jnp.float32) * 2.0).astype(xdt)
  y = np.asarray(_gemv(w, x).astype(jnp.float32), np.float64)
  deq = np.asarray(fp8lab.dequantize(w), np.float64)
  y64, bound = _bound(np.asarray(x.astype(jnp.float32), np.float64), deq, xdt, name)
  assert np.isfinite(y).all()
  err = np.abs(y - y64)
  assert (err <= bound).all(), f"max err/bound {np.max(err / bound):.3f}"


def test_hadamard_rotated_weights():
  key = jax.random.key(3)
  n, k = (SHAPE[0], 256 if not ON_GPU else 4096)
  wf = jax.random.normal(key, (n, k), jnp.float32)
  w = fp8lab.quantize(wf, "mxfp4", hadamard=32)
  x = jax.random.normal(jax.random.key(4), (3, k), jnp.float32)
  y = np.asarray(_gemv(w, x), np.float64)
  # The rotation is orthogonal: x_rot @ W_rot^T == x @ W^T with W = the unrotated weights.
  deq = np.asarray(fp8lab.dequantize(w, unrotate=True), np.float64)
  xr = np.asarray(fp8lab.hadamard(x, 32), np.float64)
  y64, bound = _bound(xr, np.asarray(fp8lab.dequantize(w), np.float64), jnp.float32, "mxfp4")
  assert (np.abs(y - y64) <= bound).all()
  np.testing.assert_allclose(y, np.asarray(x, np.float64) @ deq.T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("elem_name,native", [("e2m1", False), ("e4m3", False),
                                              ("e5m2", False), ("e4m3", True),
                                              ("e5m2", True)])
def test_mx_fast_path_factors_are_exact_within_the_spread(elem_name, native):
  """_mx_factors: for every drop d = c - m, the float16 factor is 2^(d - route) and every
  code's decoded value (float16 route, or the true value when native: route 0) times it is
  exactly value * 2^d (float16 multiply, as in the kernel) down to d = -_MX_SPREAD; further
  drops are "far" with factor 0."""
  f = get_format(elem_name)
  spread = GO._MX_SPREAD[elem_name]
  # Derived from the element formats: log2 of their smallest subnormal over float16's.
  assert spread == {"e2m1": 23, "e4m3": 15, "e5m2": 8}[elem_name]
  plan = G.format_plan({"e4m3": "mxfp8", "e5m2": "mxfp8_e5m2", "e2m1": "mxfp4"}[elem_name],
                       elem_name, (32,), False, native_fp8=native)
  assert plan.native_fp8 == native
  route = GP._route_log2(plan)
  assert route == (0 if native else U.f16_route_log2(f))
  c = np.arange(0, 255, dtype=np.uint8)[None, :]              # m = 254: d = c - 254
  fac, far = GO._mx_factors(jnp.asarray(c), f, route, jnp.full((1,), 254, jnp.int32))
  fac = np.asarray(fac.astype(jnp.float32), np.float64)[0]
  far = np.asarray(far)[0]
  d = c[0].astype(np.int64) - 254
  np.testing.assert_array_equal(far, d < -spread)
  np.testing.assert_array_equal(fac[~far], 2.0 ** (d[~far] - route))
  assert (fac[far] == 0).all()
  codes = np.arange(1 << f.bits, dtype=np.uint8)
  vals = np.asarray(fp8lab.decode(jnp.asarray(codes), f, jnp.float32), np.float64)
  route16 = (vals * 2.0 ** route).astype(np.float16)     # exact (tested above)
  finite = np.isfinite(vals)
  for dd in range(-spread, 1):
    got = (route16 * np.float16(2.0 ** (dd - route))).astype(np.float64)
    np.testing.assert_array_equal(got[finite], vals[finite] * 2.0 ** dd)


@pytest.mark.parametrize("name,native", [("mxfp8", False), ("mxfp8_e5m2", False),
                                         ("mxfp4", False), ("mxfp8", True),
                                         ("mxfp8_e5m2", True)])
@pytest.mark.parametrize("spread", ["near", "far", "zero_blocks"])
def test_mx_block_scales_far_apart(name, native, spread, use_native):
  """Block scales far apart within a row, where it matters: even blocks get scale 2^a and
  odd blocks 2^-b, and x is 2^-(a + b) on the even blocks, so both halves contribute alike.
  "near" (a + b = _MX_SPREAD) stays on the fast path, "far" (a + b = 40) needs the exact
  fallback; "zero_blocks": all-zero blocks with scale code 0 beside large ones must add
  exactly 0. Every product is an integer times 2^-b and every sum is exact, so the kernel
  must match the float64 product bit for bit. Native decode too (the fallback keeps the
  integer route)."""
  use_native(native)
  rng = np.random.default_rng(hash((name, spread)) % 2**32)
  n, k = SHAPE
  w0, _ = _integer_weight(name, n, k, rng)
  elem = get_format(FORMATS[name][1])
  vals = np.asarray(fp8lab.decode(w0.codes(), elem, jnp.float32), np.float64)
  nb = -(-k // 32)
  even = (np.arange(nb) % 2 == 0)
  a, b = {"near": (0, GO._MX_SPREAD[elem.name]), "far": (20, 20), "zero_blocks": (1, 0)}[spread]
  j = rng.integers(0, 2, (n, nb))                 # jitter that only narrows the drop
  e = np.where(even[None, :], a - j, -b + j)
  scodes = (127 + e).astype(np.uint8)
  if spread == "zero_blocks":
    zero = (rng.random((n, nb)) < 0.3) & ~even
    vals = vals * ~np.repeat(zero, 32, axis=1)[:, :k]
    scodes[zero] = 0
  codes = fp8lab.encode(jnp.asarray(vals, jnp.float32), elem)
  deq = vals * np.repeat(2.0 ** (scodes.astype(np.float64) - 127), 32, axis=1)[:, :k]
  w = QuantizedArray(fp8lab.pack(codes, elem), jnp.asarray(scodes), None, format=name,
                     element_format=elem.name, shape=(n, k), axis=1, block_shape=(32,),
                     scale_mode="floor", hadamard=None)
  np.testing.assert_array_equal(np.asarray(fp8lab.dequantize(w), np.float64), deq)
  xscale = np.where(np.repeat(even, 32)[:k], 2.0 ** -(a + b), 1.0)
  xv = (rng.integers(-3, 4, (3, k)) * xscale).astype(np.float32)
  y = np.asarray(_gemv(w, jnp.asarray(xv)), np.float64)
  want = xv.astype(np.float64) @ deq.T
  np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("name", ["mxfp4", "mxfp8"])
def test_mx_far_blocks_take_the_fallback_only_with_nonzero_codes(name):
  """The MX fallback decision, seen through its numerics. All-zero blocks get scale code 0
  (far below their row's other blocks); x is 1 there and ints * 2^-40 elsewhere, so the
  float16 x split of the fast path loses the small elements (below its window) while the
  exact fallback keeps them. (A) zero blocks with code 0 must give the same bits as (B) the
  same zero blocks with a near code (fast path only), and differ from the exact product
  (else this test could not tell the paths apart); (C) a nonzero code in code-0 blocks
  must take the fallback: the exact float64 product, bit for bit."""
  rng = np.random.default_rng(hash(name) % 2**32)
  n, k = SHAPE
  fmt, elem_name, _ = FORMATS[name]
  elem = get_format(elem_name)
  nb = -(-k // 32)
  zero = rng.random((n, nb)) < 0.4
  zero[:, 0] = True                                   # x's largest elements live here
  vals = np.where(np.repeat(zero, 32, axis=1)[:, :k], 0.0,     # +0: code 0 (-0 is nonzero)
                  rng.integers(-4, 5, (n, k)).astype(np.float64))
  xv = (rng.integers(-3, 4, (2, k)) * 2.0**-40).astype(np.float32)
  xv[:, np.repeat(zero.all(axis=0), 32)[:k]] = 1.0    # only where every row is zero

  def weight_k(vals, scodes, k):
    codes = fp8lab.encode(jnp.asarray(vals, jnp.float32), elem)
    return QuantizedArray(fp8lab.pack(codes, elem), jnp.asarray(scodes), None, format=fmt,
                          element_format=elem.name, shape=(n, k), axis=1, block_shape=(32,),
                          scale_mode="floor", hadamard=None)

  weight = lambda vals, scodes: weight_k(vals, scodes, k)

  near = np.full((n, nb), 127, np.uint8)
  y_far = np.asarray(_gemv(weight(vals, np.where(zero, 0, near)), jnp.asarray(xv)))
  y_near = np.asarray(_gemv(weight(vals, near), jnp.asarray(xv)))
  exact = xv.astype(np.float64) @ vals.T
  np.testing.assert_array_equal(y_far.view(np.uint32), y_near.view(np.uint32))
  assert (y_near != exact).any(), "fast path exact here: the test cannot see the fallback"
  # (C) in a row whose fast-path result is inexact: the fallback recomputes its programs.
  # Every zero block of the row but the first gets a nonzero code, so that each program
  # along K (the kernel may split K) holds one: its first element, then its last (the
  # far-block check loads a block's words together: each must count), in full blocks.
  full = k // 32
  r = next(r for r in np.flatnonzero((y_near != exact).any(axis=0)) if zero[r, 1:full].any())
  for offset in (0, 31):
    vals_c = vals.copy()
    js = 1 + np.flatnonzero(zero[r, 1:full if offset else None])
    vals_c[r, 32 * js + offset] = 2.0                   # nonzero codes in far blocks
    y_c = np.asarray(_gemv(weight(vals_c, np.where(zero, 0, near)), jnp.asarray(xv)))
    deq_c = vals_c * np.repeat(np.where(zero, 2.0**-127, 1.0), 32, axis=1)[:, :k]
    np.testing.assert_array_equal(y_c[:, r],
                                  (xv.astype(np.float64) @ deq_c[r]).astype(np.float32))
  # (D) "far" is relative to the row's largest scale: row r's only code-0 blocks are 4
  # adjacent ones (all of a short K step, where a per-step maximum would not call them
  # far), one of them holding a nonzero code.
  kd = 1024
  vals_d = rng.integers(-4, 5, (n, kd)).astype(np.float64)
  sc_d = np.full((n, kd // 32), 127, np.uint8)
  sc_d[r, 4:8] = 0
  vals_d[r, 128:256] = 0.0
  xd = (rng.integers(-3, 4, (2, kd)) * 2.0**-40).astype(np.float32)
  xd[:, 128:256] = 1.0
  y_pre = np.asarray(_gemv(weight_k(vals_d, sc_d, kd), jnp.asarray(xd)))
  assert (y_pre[:, r] != (xd.astype(np.float64) @ vals_d[r])).any(), "fast path exact here"
  vals_d[r, 160] = 2.0                                # value 2 * 2^-127
  y_d = np.asarray(_gemv(weight_k(vals_d, sc_d, kd), jnp.asarray(xd)))
  deq_d = vals_d[r] * np.repeat(2.0 ** (sc_d[r].astype(np.float64) - 127), 32)
  np.testing.assert_array_equal(y_d[:, r], (xd.astype(np.float64) @ deq_d).astype(np.float32))


@pytest.mark.parametrize("name", ["e4m3", "mxfp4", "nvfp4", "bf16"])
@pytest.mark.parametrize("xdt", [jnp.float32, jnp.bfloat16])
def test_x_dynamic_range_inf_and_nan(name, xdt):
  """x rows the float16 split must survive: a 2^+-60 spread inside a row, rows scaled by
  1e30 and 1e-30, a zero row, and rows holding +Inf or NaN. Finite rows: within the bound;
  rows with Inf / NaN: NaN exactly where the float64 product is NaN, and the same infinities."""
  fmt, _, block = FORMATS[name]
  n, k = SHAPE
  key = jax.random.key(hash(name) % 2**31)
  kw = {"block_shape": block} if block == (16, 16) else {}
  w = fp8lab.quantize(jax.random.normal(key, (n, k), jnp.float32) * 3.0, fmt, **kw)
  rng = np.random.default_rng(11)
  xv = rng.standard_normal((7, k))
  xv[0] *= 2.0 ** rng.integers(-60, 61, k)
  xv[1] *= 1e30
  xv[2] *= 1e-30
  xv[3] = 0.0
  xv[4, k // 3] = np.inf
  xv[5, k // 2] = np.nan
  xv[6, :2] = [np.inf, -np.inf]
  x = jnp.asarray(xv, jnp.float32).astype(xdt)
  y = np.asarray(_gemv(w, x).astype(jnp.float32), np.float64)
  xr = np.asarray(x.astype(jnp.float32), np.float64)
  deq = np.asarray(fp8lab.dequantize(w), np.float64)
  with np.errstate(invalid="ignore", over="ignore"):
    y64, bound = _bound(np.nan_to_num(xr, nan=0.0, posinf=0.0, neginf=0.0), deq, xdt, name)
    special = xr[4:] @ deq.T
  np.testing.assert_array_equal(np.isnan(y[4:]), np.isnan(special))
  np.testing.assert_array_equal(y[4:][np.isinf(special)], special[np.isinf(special)])
  assert (y[3] == 0).all()
  assert (np.abs(y[:4] - y64[:4]) <= bound[:4]).all()


@pytest.mark.parametrize("name", ["e4m3", "nvfp4", "mxfp4"])
def test_x_below_the_float16_window_stays_within_the_documented_bound(name):
  """The worst case for the float16 split of x: large x elements meet zero weights, so
  sum|w x| comes only from elements 2^40 below max|x|, which float16 (scaled to max|x|)
  cannot hold to 2^-22. The error must stay within the bound's window term; the reference
  path (float32 operands) is far more accurate here: the limitation is documented, not hidden."""
  n, k = SHAPE
  rng = np.random.default_rng(12)
  fmt, elem_name, block = FORMATS[name]
  w0, deq0 = _integer_weight(name, n, k, rng)
  codes = np.array(w0.codes())
  big = np.arange(k) % 7 == 0
  codes[:, big] = 0                                   # +0 where x is large
  w = QuantizedArray(fp8lab.pack(jnp.asarray(codes), elem_name), w0.scales, w0.tensor_scale,
                     format=fmt, element_format=elem_name, shape=(n, k), axis=1,
                     block_shape=block, scale_mode=w0.scale_mode, hadamard=None)
  xv = np.where(big, 2.0 ** 20, rng.standard_normal(k) * 2.0 ** -20)[None, :]
  xv = xv.astype(np.float32).astype(np.float64)
  y = np.asarray(_gemv(w, jnp.asarray(xv, jnp.float32)), np.float64)
  deq = np.asarray(fp8lab.dequantize(w), np.float64)
  y64, bound = _bound(xv, deq, jnp.float32, name)
  assert (np.abs(y - y64) <= bound).all()
  y_ref = np.asarray(fp8lab.gemv_packed(w, jnp.asarray(xv, jnp.float32),
                                        implementation="reference"), np.float64)
  y64_plain, plain = _bound(xv, deq, jnp.float32)
  assert (np.abs(y_ref - y64_plain) <= plain).all()


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "nvfp4"])
def test_tiny_x_times_small_tensor_scale(name):
  """x ~ 1e-30 and a tensor scale ~ 1e-7: y ~ 1e-34 is a normal float32, but the power of
  two that undoes x's scaling times the tensor scale is not (a float32 subnormal, which
  XLA:CPU flushes to zero). The kernel applies them one after the other; y must stay
  within the bound."""
  fmt, _, block = FORMATS[name]
  n, k = SHAPE
  key = jax.random.key(13)
  w = fp8lab.quantize(jax.random.normal(key, (n, k), jnp.float32) * 3e-5, fmt)
  assert float(w.tensor_scale) < 2.0 ** -16
  xv = np.asarray(jax.random.normal(jax.random.key(14), (2, k), jnp.float32) * 1e-30,
                  np.float64)
  y = np.asarray(_gemv(w, jnp.asarray(xv, jnp.float32)), np.float64)
  deq = np.asarray(fp8lab.dequantize(w), np.float64)
  y64, bound = _bound(xv, deq, jnp.float32, name)
  assert np.abs(y64).min() > 2.0 ** -126                 # every y is a normal float32
  assert (np.abs(y - y64) <= bound).all()


@pytest.mark.parametrize("name,k_splits", grid(
    ["e4m3", "e5m2", "mxfp4", "mxfp8_e5m2", "nvfp4_2d", "bf16"], [2, 8]))
def test_split_k_gives_the_same_exact_sums(name, k_splits):
  """Programs split along K (the tail step in the last split, partial results added after
  the kernel in a fixed order) on small integers: every sum is exact, so the result must be
  the reference's bit for bit, and the same bits twice."""
  rng = np.random.default_rng(hash((name, k_splits)) % 2**32)
  n, k = (SHAPE[0], 1000) if not ON_GPU else SHAPE
  w, deq = _integer_weight(name, n, k, rng)
  xv = rng.integers(-3, 4, (3, k)).astype(np.float32)
  cfg = G.GemvConfig(16, 16, 4, 3, k_splits=k_splits)
  plan = G.format_plan(w.format, w.element_format, w.block_shape, w.tensor_scale is not None)
  f = functools.partial(G.gemv_pallas, plan=plan, n_out=n, k=k, config=cfg,
                        interpret=INTERPRET)
  y = f(w.data, w.scales, w.tensor_scale, jnp.asarray(xv))
  np.testing.assert_array_equal(_bits(y), _bits(f(w.data, w.scales, w.tensor_scale,
                                                  jnp.asarray(xv))))
  np.testing.assert_array_equal(np.asarray(y, np.float64), xv.astype(np.float64) @ deq.T)


def _scaled_integer_case(name: str, batch: int, seed: int, xdt, default_decodes=False):
  """Small-integer weights of format `name` and x of `batch` rows, each row scaled by its own
  power of two (so each program reads its own rows' maxima), at (37 or 1000, 1000) here and
  SHAPE on the GPU: every sum is exact in float32. Returns run(config) -> y (gemv_pallas,
  integer decodes, or with `default_decodes` those gemv_packed would choose) and the exact
  float64 product."""
  rng = np.random.default_rng(seed % 2**32)
  n, k = (SHAPE[0], 1000) if not ON_GPU else SHAPE
  w, deq = _integer_weight(name, n, k, rng)
  xv = rng.integers(-3, 4, (batch, k)) * 2.0 ** rng.integers(-6, 7, (batch, 1))
  xv = xv.astype(np.float32)
  decodes = (dict(native_fp8=G.native_fp8_requested(INTERPRET),
                  asm_e2m1=G.asm_e2m1_default(INTERPRET)) if default_decodes else {})
  plan = G.format_plan(w.format, w.element_format, w.block_shape, w.tensor_scale is not None,
                       **decodes)
  run = lambda cfg: G.gemv_pallas(w.data, w.scales, w.tensor_scale, jnp.asarray(xv, xdt),
                                  plan=plan, n_out=n, k=k, config=cfg, interpret=INTERPRET)
  return run, xv.astype(np.float64) @ deq.T


@pytest.mark.parametrize("name,xdt,batch,batch_block,k_splits", grid(
    ["e4m3", "mxfp4", "mxfp8", "nvfp4", "bf16"], [jnp.float32, jnp.float16],
    [(20, 8, 1), (64, 16, 2), (64, 32, 1), (9, 4, 1)], cover=True))
def test_batch_blocks_give_the_same_exact_sums(name, xdt, batch, batch_block, k_splits):
  """A batch in blocks of x rows (GemvConfig.batch_block: a program per block and row block,
  with K splits too) on small integers, each x row scaled by its own power of two (each
  block reads its rows' maxima and columns): every sum is exact in float32, so the result
  must be the float64 product (rounded to float16 for float16 x), the same bits as one block
  for the whole batch."""
  run, y64 = _scaled_integer_case(name, batch, hash((name, batch, batch_block)), xdt)
  cfg = lambda bb: G.GemvConfig(16, 16, 4, 3, k_splits=k_splits, batch_block=bb)
  y = run(cfg(batch_block))
  # y is in x's dtype: the exact float32 sum rounded once to float16 for float16 x
  want = y64.astype(np.dtype(xdt)).astype(np.float64)
  np.testing.assert_array_equal(np.asarray(y, np.float64), want)
  np.testing.assert_array_equal(_bits(y), _bits(run(cfg(0))))


def _far_apart_mxfp4(seed: int, batch: int):
  """MXFP4 weights whose even blocks have scale 2^20 and odd blocks 2^-20 (far apart: every
  program takes the exact fallback), x of `batch` rows that is 2^-40 over the even blocks, and
  the float64 product the kernel must give exactly."""
  rng = np.random.default_rng(seed)
  n, k = SHAPE[0], 1000
  w0, _ = _integer_weight("mxfp4", n, k, rng)
  vals = np.asarray(fp8lab.decode(w0.codes(), "e2m1", jnp.float32), np.float64)
  even = np.arange(-(-k // 32)) % 2 == 0
  scodes = np.where(even, 127 + 20, 127 - 20)[None, :].repeat(n, 0).astype(np.uint8)
  deq = vals * np.repeat(2.0 ** (scodes.astype(np.float64) - 127), 32, axis=1)[:, :k]
  w = QuantizedArray(w0.data, jnp.asarray(scodes), None, format="mxfp4",
                     element_format="e2m1", shape=(n, k), axis=1, block_shape=(32,),
                     scale_mode="floor", hadamard=None)
  xv = rng.integers(-3, 4, (batch, k)) * np.where(np.repeat(even, 32)[:k], 2.0 ** -40, 1.0)
  xv = xv.astype(np.float32)
  run = lambda cfg: G.gemv_pallas(w.data, w.scales, None, jnp.asarray(xv),
                                  plan=G.format_plan("mxfp4", "e2m1", (32,), False), n_out=n,
                                  k=k, config=cfg, interpret=INTERPRET)
  return run, xv.astype(np.float64) @ deq.T


def test_batch_blocks_with_the_mx_exact_path():
  """Batch blocks whose programs take the MX exact fallback (far-apart scales): its
  bfloat16 x parts are laid out per block too."""
  run, want = _far_apart_mxfp4(23, 12)
  y = run(G.GemvConfig(16, 16, 4, 3, batch_block=4))
  np.testing.assert_array_equal(np.asarray(y, np.float64), want)


def _slow_unless(cases, keep, axis: int = 0):
  """grid()'s cases with those whose value `axis` is not in `keep` marked slow too."""
  values = [c.values if hasattr(c, "values") else c for c in cases]
  return [c if v[axis] in keep else pytest.param(*v, marks=pytest.mark.slow)
          for c, v in zip(cases, values)]


# By default the two permuted pair layouts (the "code" layouts, plain strides, run with
# FP8LAB_SLOW_TESTS=1 and on the GPU).
@pytest.mark.parametrize("pw,layout,xdt,n_b,bp,bb,tw", _slow_unless(grid(
    [(4, "code"), (4, "native"), (8, "code"), (8, "e2m1_asm")],
    [jnp.float32, jnp.bfloat16, jnp.float16], [(13, 16, 16, 8), (20, 32, 8, 4)], cover=True),
    keep=("native", "e2m1_asm"), axis=1))
def test_xprep_kernel_gives_the_bits_of_xla_preparation(pw, layout, xdt, n_b, bp, bb, tw):
  """_prep_x_pallas (gemv_launch's x preparation on a GPU from 16 rows on) writes the bits
  of XLA's _prep_x: x of raw bit patterns (subnormals, Inf and NaN; one row of normal
  numbers), k not a multiple of the words, rows and words padded, batch blocks, several
  programs (kw_pad / tw)."""
  rng = np.random.default_rng([pw, n_b, tw, len(layout), np.dtype(xdt).itemsize])
  k, kw_pad = 23 * pw + 5, 32
  nbits = 8 * np.dtype(xdt).itemsize
  bits = rng.integers(0, 2**nbits, (n_b, k), dtype=np.uint64).astype(f"uint{nbits}")
  xv = bits.view(np.dtype(xdt))
  xv[0] = rng.standard_normal(k) * 1000
  x = jnp.asarray(xv)
  want, a = GO._prep_x(x, pw, kw_pad, jnp.float16, bp, layout, bb)
  got = GX._prep_x_pallas(x, pw, kw_pad, bp, layout, bb, a, tw, 1, interpret=INTERPRET)
  assert got.shape == want.shape and got.dtype == want.dtype
  np.testing.assert_array_equal(np.asarray(got).view(np.uint16),
                                np.asarray(want).view(np.uint16))


def test_xprep_kernel_checks_its_tiles():
  x = jnp.ones((3, 40), jnp.float32)
  a = GO._row_max(x)
  with pytest.raises(ValueError, match="words per program"):
    GX._prep_x_pallas(x, 4, 12, 4, "code", 4, a, 8, 1, interpret=True)
  with pytest.raises(ValueError, match="row maxima missing"):
    GX._prep_x_pallas(x, 4, 16, 4, "code", 4, None, 8, 1, interpret=True)



# By default the four format families (fp8, MX 4-bit, NVFP4, 16-bit weights), each with one
# of the two configs; every pair with FP8LAB_SLOW_TESTS=1.
@pytest.mark.parametrize("name,batch,batch_block,k_splits", _slow_unless(grid(
    ["e4m3", "mxfp4", "nvfp4", "bf16", "e5m2", "mxfp8", "nvfp4_2d", "f16"],
    [(3, 0, 1), (20, 8, 2)]), keep=("e4m3", "mxfp4", "nvfp4", "bf16")))
def test_chained_dots_give_the_same_exact_sums(name, batch, batch_block, k_splits):
  """GemvConfig.chain_dots (each plane's dot added to the accumulator in turn) on small
  integers, with K splits and batch blocks: every sum is exact, so both orders must give
  the float64 product, the same bits."""
  run, want = _scaled_integer_case(name, batch, hash((name, batch, "chain")), jnp.float32,
                                   default_decodes=True)
  cfg = lambda chain: G.GemvConfig(16, 16, 4, 3, k_splits=k_splits, batch_block=batch_block,
                                   chain_dots=chain)
  y = run(cfg(True))
  np.testing.assert_array_equal(np.asarray(y, np.float64), want)
  np.testing.assert_array_equal(_bits(y), _bits(run(cfg(False))))


def _same_bits_or_both_nan(got, want):
  """Bitwise equality, any NaN matching any NaN (payloads are the arithmetic's, which
  XLA and Triton need not share)."""
  got, want = np.asarray(got), np.asarray(want)
  nan = np.isnan(got.astype(np.float32))
  np.testing.assert_array_equal(nan, np.isnan(want.astype(np.float32)))
  np.testing.assert_array_equal(np.where(nan, 0, _bits(got)), np.where(nan, 0, _bits(want)))


# By default one case per format family (8-bit, NVFP4 with the asm decode, MX, 16-bit
# weights) and x dtype; every format and pair with FP8LAB_SLOW_TESTS=1 and on the GPU.
@pytest.mark.parametrize("name,xdt,batch,batch_block,k_splits,decodes", _slow_unless(grid(
    ["e4m3", "nvfp4", "mxfp4", "bf16"] + [n for n in FORMATS
                                         if n not in ("e4m3", "nvfp4", "mxfp4", "bf16")],
    list(X_DTYPES),
    [(3, 0, 1, True), (20, 8, 2, True), (9, 4, 1, False), (1, 0, 4, False)], cover=True),
    keep=("e4m3", "nvfp4", "mxfp4", "bf16")))
def test_fused_x_gives_the_bits_of_the_prepared_operand(name, xdt, batch, batch_block,
                                                        k_splits, decodes):
  """GemvConfig.fuse_x (the kernel cuts x's parts from x itself, in its K loop) against the
  prepared operand with the same launch otherwise: x of raw bit patterns of its dtype
  (subnormals, Inf, NaN, values far apart; one row of normal numbers whose largest element
  sits in the K tail), k not a multiple of the codes per word, K splits, batch blocks, and
  (`decodes`) the native fp8 / asm e2m1 decodes' pair layouts. The operands hold the same
  bits, so the results must too (NaN for NaN). The MX exact fallback, which these
  weights' scales never need: test_fused_x_with_the_mx_exact_path."""
  rng = np.random.default_rng([batch, k_splits, np.dtype(xdt).itemsize, len(name)])
  n, k = SHAPE
  w, _ = _integer_weight(name, n, k, rng)
  nbits = 8 * np.dtype(xdt).itemsize
  bits = rng.integers(0, 2**nbits, (batch, k), dtype=np.uint64).astype(f"uint{nbits}")
  xv = bits.view(np.dtype(xdt))
  xv[0] = (rng.standard_normal(k) * 100).astype(xdt)
  xv[0, -1] = 30000
  x = jnp.asarray(xv)
  plan = G.format_plan(w.format, w.element_format, w.block_shape, w.tensor_scale is not None,
                       native_fp8=decodes, asm_e2m1=decodes)
  run = lambda fuse: G.gemv_pallas(
      w.data, w.scales, w.tensor_scale, x, plan=plan, n_out=n, k=k,
      config=G.GemvConfig(16, 16, 4, 3, k_splits=k_splits, batch_block=batch_block,
                          fuse_x=fuse), interpret=INTERPRET)
  got, want = run(True), run(False)
  assert np.isfinite(np.asarray(want[0], np.float32)).any()
  _same_bits_or_both_nan(got, want)


def test_fused_x_with_the_mx_exact_path():
  """Far-apart MX scales (every program takes the exact fallback) with GemvConfig.fuse_x:
  the fallback's bfloat16 x parts are cut in-kernel too, per batch block and K split."""
  run, want = _far_apart_mxfp4(27, 12)
  for cfg in (G.GemvConfig(16, 16, 4, 3, batch_block=4, fuse_x=True),
              G.GemvConfig(16, 16, 4, 3, k_splits=4, fuse_x=True)):
    np.testing.assert_array_equal(np.asarray(run(cfg), np.float64), want)


def test_chained_dots_with_the_mx_exact_path():
  """The MX exact fallback's loop chains its dots too (far-apart scales)."""
  run, want = _far_apart_mxfp4(25, 5)
  y = run(G.GemvConfig(16, 16, 4, 3, chain_dots=True))
  np.testing.assert_array_equal(np.asarray(y, np.float64), want)


def test_split_k_with_the_mx_exact_path():
  """Far-apart MX scales send a split's program through the exact loop, which must cover
  the same K range as its split: even blocks 2^20 with x 2^-40 there, odd blocks 2^-20."""
  run, want = _far_apart_mxfp4(21, 2)
  for k_splits in (1, 4):
    y = run(G.GemvConfig(16, 16, 4, 3, k_splits=k_splits))
    np.testing.assert_array_equal(np.asarray(y, np.float64), want)


@pytest.mark.parametrize("name", ["mxfp8", "mxfp8_e5m2", "mxfp4", "nvfp4"])
def test_small_block_scaled_weights_take_k_steps_of_four_scale_blocks(name):
  """Tiny shapes shrink the blocks, but a K step keeps >= 4 scale blocks: on the H200 a
  16 x 16-word step of 8-bit MX weights (a (16, 2) scale tile) summed wrongly when
  compiled. The sums here are exact, so the result must be the float64 product."""
  rng = np.random.default_rng(17)
  n, k = 16, 200
  w, deq = _integer_weight(name, n, k, rng)
  plan = G.format_plan(w.format, w.element_format, w.block_shape, w.tensor_scale is not None)
  cfg = GC._effective_config(G.GemvConfig(16, 16), plan, n, w.data.shape[1])
  assert cfg.block_k >= 4 * plan.words_per_block and cfg.block_rows == 16
  xv = rng.integers(-3, 4, (3, k)).astype(np.float32)
  y = G.gemv_pallas(w.data, w.scales, w.tensor_scale, jnp.asarray(xv), plan=plan, n_out=n,
                    k=k, config=G.GemvConfig(16, 16), interpret=INTERPRET)
  np.testing.assert_array_equal(np.asarray(y, np.float64), xv.astype(np.float64) @ deq.T)


def test_k_split_choice():
  C = G.GemvConfig
  # Interpret mode (and a host without a CUDA GPU) splits as on the H200's 132 SMs.
  assert device.sm_count(interpret=True) == 132 and device.smem_per_block(True) == 227 * 1024
  if not ON_GPU:
    assert device.sm_count() == 132
  assert GC._smem_budget(interpret=True) == 200 * 1024
  k_splits = functools.partial(GC._k_splits, n_sms=132)
  assert k_splits(C(64, 64), n_prog=256, n_steps=64) == 1        # 16384 rows: unsplit
  assert k_splits(C(64, 64), n_prog=64, n_steps=56) == 4         # 4096 x 14336
  assert k_splits(C(64, 64), n_prog=128, n_steps=32) == 2        # 8192^2
  assert k_splits(C(64, 64), n_prog=224, n_steps=16) == 1        # 14336 x 4096: 224 >= 132
  assert k_splits(C(64, 64), n_prog=1, n_steps=6) == 1           # too few steps
  assert k_splits(C(64, 64, k_splits=4), n_prog=999, n_steps=2) == 2
  assert GC._k_splits(C(64, 64), n_prog=224, n_steps=16, n_sms=264) == 2   # a larger GPU
  with pytest.raises(ValueError, match="k_splits"):
    C(64, 64, k_splits=3)


# ------------------------------------------------------------------ NaN and padding

# Every case at batch 1; at batch 16 (the wider dots) one integer and one native decode by
# default, the rest with FP8LAB_SLOW_TESTS=1 and on the GPU.
@pytest.mark.parametrize("name,native,batch", [
    (name, native, batch) if batch == 1 or (name, native) in (("mxfp4", False), ("nvfp4", True))
    else pytest.param(name, native, batch, marks=pytest.mark.slow)
    for batch in (1, 16)
    for name, native in [("e4m3", False), ("mxfp8", False), ("mxfp4", False), ("nvfp4", False),
                         ("nvfp4_2d", False), ("e4m3", True), ("mxfp8", True), ("nvfp4", True)]])
def test_nan_weights_make_their_row_nan_and_nothing_else(name, native, batch, use_native):
  use_native(native)
  rng = np.random.default_rng(7)
  n, k = SHAPE
  nan_row = 5
  w, deq = _integer_weight(name, n, k, rng, nan_row=nan_row)
  xv = rng.integers(-3, 4, (batch, k)).astype(np.float32)
  y = np.asarray(_gemv(w, jnp.asarray(xv)))
  bad_rows = np.isnan(deq).any(axis=1)
  assert bad_rows[nan_row]
  np.testing.assert_array_equal(np.isnan(y), np.broadcast_to(bad_rows, y.shape))
  good = ~bad_rows
  np.testing.assert_array_equal(y[:, good], (xv.astype(np.float64) @ deq[good].T))


@pytest.mark.parametrize("native", [False, True])
def test_e5m2_inf_weight_gives_inf_not_nan_at_batch_1_and_16(native, use_native):
  use_native(native)
  rng = np.random.default_rng(8)
  n, k = SHAPE
  w, deq = _integer_weight("e5m2", n, k, rng)
  codes = np.array(w.codes())
  codes[2, 3] = 0x7C                                       # +Inf
  w = QuantizedArray(fp8lab.pack(jnp.asarray(codes), "e5m2"), None, w.tensor_scale,
                     format="e5m2", element_format="e5m2", shape=(n, k), axis=1,
                     block_shape=None, scale_mode=None, hadamard=None)
  for batch in (1, 16):
    xv = np.ones((batch, k), np.float32)
    y = np.asarray(_gemv(w, jnp.asarray(xv)))
    ref = np.asarray(fp8lab.gemv_packed(w, jnp.asarray(xv), implementation="reference"))
    assert np.isposinf(y[:, 2]).all()
    np.testing.assert_array_equal(_bits(y), _bits(ref))


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
@pytest.mark.parametrize("native", [False, True])
def test_every_code_at_every_word_position_through_the_kernel(name, native, use_native):
  """Row 4 * c + i holds code c at column i (word position i) and zeros elsewhere; with
  x = ones, y is the code's value times the tensor scale, bit for bit (NaN codes: NaN). On
  the GPU this checks the compiled decode (integer route or the native PTX cvt) over every
  code, subnormals and specials included; the golden decode gives the expected values."""
  use_native(native)
  elem = get_format(name)
  k = 16
  codes = np.zeros((256 * 4, k), np.uint8)
  for c in range(256):
    for i in range(4):
      codes[4 * c + i, i] = c
  w = QuantizedArray(fp8lab.pack(jnp.asarray(codes), name), None, jnp.float32(0.5),
                     format=name, element_format=name, shape=codes.shape, axis=1,
                     block_shape=None, scale_mode=None, hadamard=None)
  vals = np.asarray(fp8lab.decode(jnp.asarray(np.arange(256, dtype=np.uint8)), elem),
                    np.float32)
  want = np.repeat(vals, 4) * np.float32(0.5) + np.float32(0.0)   # -0 + 0 products: +0
  for xdt in (jnp.float16, jnp.float32):
    y = np.asarray(_gemv(w, jnp.ones((k,), xdt)), np.float32)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(_bits(y[ok]), _bits(want[ok]))


@pytest.mark.parametrize("native", [False, True])
def test_every_nvfp4_scale_code_through_the_kernel(native, use_native):
  """Row s has E4M3 block scale code s on block 0 and 255 - s on block 1, and every element
  1.0 (e2m1 code 2); with x = ones, y = 8 * (value(s) + value(255 - s)) (tensor scale 0.5;
  exact in float32, then rounded to x's dtype), bit for bit for every scale code
  (subnormals, -0, the largest), NaN where either scale is a NaN code. On the GPU this checks the compiled scale decode: integer, or the native
  cvt.rn.f16x2.e4m3x2 (FormatPlan.native_scale)."""
  use_native(native)
  n, k = 256, 32
  codes = jnp.full((n, k), 0x2, jnp.uint8)                      # e2m1 1.0
  s = np.arange(256, dtype=np.uint8)
  scales = jnp.asarray(np.stack([s, 255 - s], axis=1))
  w = QuantizedArray(fp8lab.pack(codes, "e2m1"), scales, jnp.float32(0.5), format="nvfp4",
                     element_format="e2m1", shape=(n, k), axis=1, block_shape=(16,),
                     scale_mode=None, hadamard=None)
  sv = np.asarray(fp8lab.decode(jnp.asarray(np.asarray(scales)), get_format("e4m3")),
                  np.float64)
  exact = 8.0 * (sv[:, 0] + sv[:, 1]) + 0.0                  # exact in float32
  for xdt in (jnp.float16, jnp.float32):
    want = exact.astype(np.float32).astype(xdt)                 # y in x's dtype
    y = np.asarray(_gemv(w, jnp.ones((k,), xdt)))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    ok = ~np.isnan(want)
    assert ok.sum() == 252
    np.testing.assert_array_equal(_bits(y[ok]), _bits(want[ok]))


# By default each decode once (asm on NVFP4, integer on MXFP4); the other pairs with
# FP8LAB_SLOW_TESTS=1 and on the GPU.
@pytest.mark.parametrize("name,asm", [
    ("nvfp4", True), ("mxfp4", False),
    pytest.param("nvfp4", False, marks=pytest.mark.slow),
    pytest.param("mxfp4", True, marks=pytest.mark.slow)])
def test_every_e2m1_code_at_every_word_position_through_the_kernel(name, asm):
  """Row 16 * c + 2 * i + j holds e2m1 code c at position i of word j (j = 0, 1: both words
  of an asm pair) and zeros elsewhere, under unit block scales (nvfp4: E4M3 1.0, tensor
  scale 0.5; mxfp4: E8M0 code 127); with x = ones, y is the code's value times the tensor
  scale, bit for bit, with the asm decode (asm_e2m1) and the shift-and-mask route."""
  elem = get_format("e2m1")
  fmt, _, block = FORMATS[name]
  k = 16
  codes = np.zeros((16 * 8 * 2, k), np.uint8)
  for c in range(16):
    for i in range(8):
      for j in range(2):
        codes[16 * c + 2 * i + j, 8 * j + i] = c
  n = codes.shape[0]
  if fmt == "nvfp4":
    scales = jnp.full((n, 1), fp8lab.encode(jnp.float32(1.0), "e4m3"), jnp.uint8)
    ts, mode = jnp.float32(0.5), None
  else:
    scales, ts, mode = jnp.full((n, 1), 127, jnp.uint8), None, "floor"
  w = QuantizedArray(fp8lab.pack(jnp.asarray(codes), elem), scales, ts, format=fmt,
                     element_format="e2m1", shape=codes.shape, axis=1, block_shape=block,
                     scale_mode=mode, hadamard=None)
  vals = np.asarray(fp8lab.decode(jnp.asarray(np.arange(16, dtype=np.uint8)), elem),
                    np.float32)
  want = np.repeat(vals, 16) * np.float32(0.5 if ts is not None else 1.0) + np.float32(0.0)
  for xdt in (jnp.float16, jnp.float32):
    y = np.asarray(_gemv_plan(w, jnp.ones((1, k), xdt), asm_e2m1=asm), np.float32)[0]
    np.testing.assert_array_equal(_bits(y), _bits(want))


# ------------------------------------------------------------------ transformations

def test_vector_and_leading_batch_dims():
  rng = np.random.default_rng(9)
  n, k = SHAPE
  w, _ = _integer_weight("e4m3", n, k, rng)
  x = jnp.asarray(rng.integers(-3, 4, (2, 3, k)).astype(np.float32))
  y = _gemv(w, x)
  assert y.shape == (2, 3, n)
  np.testing.assert_array_equal(_bits(y[1, 2]), _bits(_gemv(w, x[1, 2])))
  np.testing.assert_array_equal(_bits(y.reshape(6, n)), _bits(_gemv(w, x.reshape(6, k))))


def test_jit_and_vmap_over_x():
  rng = np.random.default_rng(10)
  n, k = SHAPE
  w, _ = _integer_weight("mxfp4", n, k, rng)
  x = jnp.asarray(rng.integers(-3, 4, (4, 2, k)).astype(np.float32))
  eager = _gemv(w, x)
  jitted = jax.jit(functools.partial(fp8lab.gemv_packed, implementation="pallas",
                                     interpret=INTERPRET))(w, x)
  vmapped = jax.vmap(lambda xx: _gemv(w, xx))(x)
  np.testing.assert_array_equal(_bits(jitted), _bits(eager))
  np.testing.assert_array_equal(_bits(vmapped), _bits(eager))
  # jax.jit of the op itself (default implementation: the kernel on a GPU, else reference).
  direct = jax.jit(fp8lab.gemv_packed)(w, x)
  np.testing.assert_array_equal(_bits(direct), _bits(eager))


def test_grad_wrt_x_matches_reference_grad():
  key = jax.random.key(11)
  n, k = SHAPE
  w = fp8lab.quantize(jax.random.normal(key, (n, k), jnp.float32), "nvfp4")
  x = jax.random.normal(jax.random.key(12), (3, k), jnp.float32)
  cot = jax.random.normal(jax.random.key(13), (3, n), jnp.float32)
  g = jax.grad(lambda xx: jnp.sum(_gemv(w, xx) * cot))(x)
  g_ref = jax.grad(lambda xx: jnp.sum(
      fp8lab.gemv_packed(w, xx, implementation="reference") * cot))(x)
  want = np.asarray(cot, np.float64) @ np.asarray(fp8lab.dequantize(w), np.float64)
  np.testing.assert_array_equal(_bits(g), _bits(g_ref))
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


# ------------------------------------------------------------------ errors

def test_errors_before_tracing():
  w = fp8lab.quantize(jnp.ones((8, 64)), "e4m3")
  x = jnp.ones((64,), jnp.float32)
  with pytest.raises(TypeError, match="QuantizedArray"):
    fp8lab.gemv_packed(jnp.ones((8, 64)), x)
  with pytest.raises(ValueError, match="2D"):
    fp8lab.gemv_packed(fp8lab.quantize(jnp.ones((2, 8, 64)), "e4m3"), x)
  with pytest.raises(ValueError, match="last axis"):
    fp8lab.gemv_packed(fp8lab.quantize(jnp.ones((8, 64)), "e4m3", axis=0), jnp.ones((64,)))
  with pytest.raises(ValueError, match="k=64"):
    fp8lab.gemv_packed(w, jnp.ones((3, 65)))
  with pytest.raises(TypeError, match="float32"):
    fp8lab.gemv_packed(w, jnp.ones((64,), jnp.int32))
  with pytest.raises(ValueError, match="implementation"):
    fp8lab.gemv_packed(w, x, implementation="triton")
  with pytest.raises(ValueError, match="interpret"):
    fp8lab.gemv_packed(w, x, implementation="reference", interpret=True)
  if jax.default_backend() != "gpu":
    with pytest.raises(ValueError, match="GPU"):
      fp8lab.gemv_packed(w, x, implementation="pallas")
  with pytest.raises(ValueError, match="power of two"):
    G.GemvConfig(48, 128)
  with pytest.raises(ValueError, match=">= 16"):
    G.GemvConfig(8, 64)
  with pytest.raises(ValueError, match="positive int"):
    G.GemvConfig(64, 64, num_stages=0)
  with pytest.raises(ValueError, match="batch_block"):
    G.GemvConfig(64, 64, batch_block=12)
  with pytest.raises(ValueError, match="chain_dots"):
    G.GemvConfig(64, 64, chain_dots=1)
  with pytest.raises(ValueError, match="format"):
    G.gemv_config("e3m4", 1)
  # format_plan takes the registry record's facts; metadata that contradicts it is an error.
  with pytest.raises(ValueError, match="tensor scale"):
    G.format_plan("e4m3", "e4m3", None, False)
  with pytest.raises(ValueError, match="elements"):
    G.format_plan("mxfp8", "e5m2", (32,))
  with pytest.raises(ValueError, match="block_shape"):
    G.format_plan("mxfp4", "e2m1", (16,))
  with pytest.raises(ValueError, match="no block scales"):
    G.format_plan("f16", "f16", (32,))


def test_default_configs_are_data_for_every_format(monkeypatch):
  served = [f for f in QUANTIZED_FORMATS if G.serves_format(f)]
  assert set(G.DEFAULT_CONFIGS) == set(served)                 # every served format tuned
  for fmt in served:
    for batch in (1, 2, 4, 5, 16, 64, 1000):
      cfg = G.gemv_config(fmt, batch)
      assert isinstance(cfg, G.GemvConfig)
      assert G.gemv_config(fmt, batch, G.TALL_ROWS - 1) == cfg       # short: the table
      tall = G.TALL_CONFIGS.get(fmt, {})
      bucket = next((b for b in sorted(tall) if b >= batch), None)
      want = cfg if bucket is None else G.GemvConfig(**tall[bucket])
      assert G.gemv_config(fmt, batch, G.TALL_ROWS) == want
      # No default lets the tensor cores' truncating accumulation run over all of K
      # (GemvConfig.chain_dots: 18-55x the error on the H200,
      # benchmarks/results/gemv_chain_accuracy_h200_20261130.txt).
      assert not cfg.chain_dots and not want.chain_dots
  # A registry format without tuned entries runs with the documented untuned default.
  monkeypatch.delitem(G.DEFAULT_CONFIGS, "bf16")
  assert G.gemv_config("bf16", 64) == G.GemvConfig(**GC.UNTUNED_CONFIG) == G.GemvConfig(64, 64)


@pytest.mark.parametrize("name,batch", [(f, b) for f, t in G.TALL_CONFIGS.items()
                                        for b in sorted(t)])
def test_tall_configs_give_the_exact_sums(name, batch):
  """Each TALL_CONFIGS entry (taken for n_out >= TALL_ROWS, too large for a test) at the
  test shape, with the decodes gemv_packed would choose, on small integers: every sum is
  exact, so the result must be the float64 product."""
  rng = np.random.default_rng(hash((name, batch)) % 2**32)
  n, k = SHAPE
  w, deq = _integer_weight(name, n, k, rng)
  plan = G.format_plan(w.format, w.element_format, w.block_shape, w.tensor_scale is not None,
                       native_fp8=G.native_fp8_requested(INTERPRET),
                       asm_e2m1=G.asm_e2m1_default(INTERPRET))
  xv = rng.integers(-3, 4, (batch, k)).astype(np.float32)
  y = G.gemv_pallas(w.data, w.scales, w.tensor_scale, jnp.asarray(xv), plan=plan, n_out=n,
                    k=k, config=G.GemvConfig(**G.TALL_CONFIGS[name][batch]),
                    interpret=INTERPRET)
  np.testing.assert_array_equal(np.asarray(y, np.float64), xv.astype(np.float64) @ deq.T)


# ------------------------------------------------------------------ what the kernel compiles to

_FP8_TYPES = re.compile(r"f8E\d|f4E\d|f6E\d|tt\.fp_to_fp|F8E|F4E")


@pytest.mark.parametrize("name,native,xdt,batch", [
    ("e4m3", True, jnp.bfloat16, 1), ("e4m3", False, jnp.float32, 16),
    ("nvfp4", True, jnp.bfloat16, 16), ("mxfp4", True, jnp.float32, 1),
    ("mxfp8", False, jnp.bfloat16, 16)])
def test_fused_x_lowers_to_one_kernel(name, native, xdt, batch):
  """With GemvConfig.fuse_x the op lowers (for an H200, here on any host) to the GEMV kernel
  alone: no x-preparation kernel (at batch 16 the prepared operand takes one), x in its own
  dtype as an operand, still no 8/6/4-bit float type."""
  fmt, elem, block = FORMATS[name]
  plan = G.format_plan(fmt, elem, block, native_fp8=native, asm_e2m1=native)
  n, k = 64, 256
  s_shape = None
  if plan.block_scaled:
    s_shape = jax.ShapeDtypeStruct((n // plan.scale_row_div, k // block[-1]), jnp.uint8)
  ts = jax.ShapeDtypeStruct((), jnp.float32) if plan.has_tensor_scale else None
  f = functools.partial(G.gemv_pallas, plan=plan, n_out=n, k=k,
                        config=G.GemvConfig(64, 64, fuse_x=True))
  (ir,) = triton_irs(f, jax.ShapeDtypeStruct((n, fp8lab.packed_length(k, elem)), jnp.uint32),
                     s_shape, ts, jax.ShapeDtypeStruct((batch, k), xdt))
  assert "fp8lab_gemv" in ir and not _FP8_TYPES.search(ir)
  assert {"bfloat16": "!tt.ptr<bf16>", "float32": "!tt.ptr<f32>"}[jnp.dtype(xdt).name] in ir


@pytest.mark.parametrize("name,decode", [(n, "integer") for n in FORMATS] +
                         [(n, "native") for n in NATIVE_NAMES + NATIVE_SCALE_NAMES] +
                         [(n, "asm") for n in ASM_E2M1_NAMES])
def test_kernel_ir_has_no_fp8_or_fp4_types(name, decode):
  """The Triton IR handed to the compiler (lowered for an H200 here, also on a CPU) has no
  8/6/4-bit float types and no fp-to-fp converts, so no fp8/fp4 conversion instruction can
  come out of it; the integer decode decodes every code with integer ops (see docs/gemv_kernel.md for
  the PTX check). The native decode (native_fp8, the default for e4m3 / e5m2 codes on sm_89+
  GPUs) converts only in its inline PTX (cvt.rn.f16x2.<elem>x2), still with no fp8 type in
  the IR; the integer decode has no such asm. NVFP4's native scale decode (native_scale) is
  one such e4m3 cvt per K step. The asm e2m1 decode (asm_e2m1) is 8 integer inline-PTX
  planes per K step, no cvt."""
  fmt, elem, block = FORMATS[name]
  native, asm = decode == "native", decode == "asm"
  plan = G.format_plan(fmt, elem, block, native_fp8=native, asm_e2m1=asm)
  assert plan.native_fp8 == (native and name in NATIVE_NAMES) and plan.asm_e2m1 == asm
  assert plan.native_scale == (native and name in NATIVE_SCALE_NAMES)
  n, k = 64, 256
  kw_ = fp8lab.packed_length(k, elem)
  s_shape = None
  if plan.block_scaled:
    s_shape = jax.ShapeDtypeStruct((n // plan.scale_row_div, k // block[-1]), jnp.uint8)
  ts = jax.ShapeDtypeStruct((), jnp.float32) if plan.has_tensor_scale else None
  f = functools.partial(G.gemv_pallas, plan=plan, n_out=n, k=k)
  captured = [ir for batch in (1, 16)
              for ir in triton_irs(f, jax.ShapeDtypeStruct((n, kw_), jnp.uint32), s_shape, ts,
                                   jax.ShapeDtypeStruct((batch, k), jnp.float32))]
  for ir in captured:                      # the GEMV and, at batch 16, x's preparation
    assert "tt.func" in ir
    assert not _FP8_TYPES.search(ir), _FP8_TYPES.search(ir).group(0)
  gemvs = [ir for ir in captured if "fp8lab_gemv" in ir]
  assert len(gemvs) == 2 and len(captured) == 2 + GX._use_xprep_kernel(plan, 16, False)
  for ir in gemvs:
    cvts = re.findall(r"cvt\.rn\.f16x2\.(e4m3|e5m2)x2", ir)
    assert cvts == ([elem] * 4 if plan.native_fp8 else ["e4m3"] if plan.native_scale
                    else []), cvts
    planes = [i for i in range(8) if U._e2m1_plane_asm(i) in ir]
    assert planes == (list(range(8)) if asm else []), planes
    assert ir.count("prmt.b32 $0, x, 0,") == (8 if asm else 0)


@pytest.mark.parametrize("native", [False, True])
def test_native_env_reaches_the_plan(native, use_native):
  """FP8LAB_GEMV_NATIVE_FP8 decides the plan of gemv_packed's kernel (a shape no other
  test uses, so the call is traced here)."""
  seen = use_native(native)
  rng = np.random.default_rng(15)
  n, k = SHAPE[0] + 2, SHAPE[1] + 4 * (2 + native)
  w, deq = _integer_weight("e4m3", n, k, rng)
  xv = rng.integers(-3, 4, (2, k)).astype(np.float32)
  y = np.asarray(_gemv(w, jnp.asarray(xv)), np.float64)
  np.testing.assert_array_equal(y, xv.astype(np.float64) @ deq.T)
  assert [p.native_fp8 for p in seen] == [native]


def test_native_fp8_choice_from_the_environment_and_the_device(monkeypatch):
  """Unset: native exactly on CUDA GPUs of compute capability >= 8.9 (never in interpret
  mode); "0" / "1" force it; anything else is an error, and so is "1" for a compiled
  kernel on a device without fp8 conversions."""
  monkeypatch.delenv(G.NATIVE_FP8_ENV, raising=False)
  assert G.native_fp8_requested(interpret=True) is False
  assert G.native_fp8_requested() is device.has_fp8_converts()
  if not ON_GPU:
    assert device.has_fp8_converts() is False          # the CPU backend
  monkeypatch.setenv(G.NATIVE_FP8_ENV, "0")
  assert G.native_fp8_requested() is False and G.native_fp8_requested(True) is False
  monkeypatch.setenv(G.NATIVE_FP8_ENV, "1")
  assert G.native_fp8_requested(interpret=True) is True
  if device.has_fp8_converts():
    assert G.native_fp8_requested() is True
  else:
    with pytest.raises(ValueError, match="compute capability"):
      G.native_fp8_requested()
  # The argument wins over the variable.
  assert G.native_fp8_requested(interpret=True, fp8_decode="integer") is False
  monkeypatch.setenv(G.NATIVE_FP8_ENV, "0")
  assert G.native_fp8_requested(interpret=True, fp8_decode="native") is True
  if not device.has_fp8_converts():
    with pytest.raises(ValueError, match="compute capability"):
      G.native_fp8_requested(fp8_decode="native")
  w = _integer_weight("e4m3", 16, 16, np.random.default_rng(0))[0]
  with pytest.raises(ValueError, match="fp8_decode must be one of"):
    fp8lab.gemv_packed(w, jnp.ones((16,)), interpret=True, fp8_decode="fast")
  monkeypatch.setenv(G.NATIVE_FP8_ENV, "yes")
  with pytest.raises(ValueError, match="must be 0 or 1"):
    G.native_fp8_requested(interpret=True)
  with pytest.raises(ValueError, match="must be 0 or 1"):
    fp8lab.gemv_packed(w, jnp.ones((16,)), interpret=True)


@pytest.mark.parametrize("fp8_decode", ["native", "integer"])
def test_fp8_decode_argument_reaches_the_plan(fp8_decode, monkeypatch):
  """gemv_packed(fp8_decode=...) wins over the environment (set the other way here)."""
  native = fp8_decode == "native"
  if native and ON_GPU and not device.has_fp8_converts():
    pytest.skip("the native fp8 decode needs sm_89+")
  monkeypatch.setenv(G.NATIVE_FP8_ENV, "0" if native else "1")
  if not native and ON_GPU and not device.has_fp8_converts():
    monkeypatch.delenv(G.NATIVE_FP8_ENV)
  real, seen = G.gemv_pallas, []
  monkeypatch.setattr(G, "gemv_pallas", lambda *a, plan, **kw: (seen.append(plan),
                                                                  real(*a, plan=plan, **kw))[1])
  rng = np.random.default_rng(16)
  n, k = SHAPE[0] + 3, SHAPE[1] + 4 * (5 + native)       # shapes no other test traces
  w, deq = _integer_weight("e4m3", n, k, rng)
  xv = rng.integers(-3, 4, (2, k)).astype(np.float32)
  y = np.asarray(_gemv(w, jnp.asarray(xv), fp8_decode=fp8_decode), np.float64)
  np.testing.assert_array_equal(y, xv.astype(np.float64) @ deq.T)
  assert [p.native_fp8 for p in seen] == [native]


def test_native_fp8_plan_only_for_fp8_elements_and_nvfp4_scales():
  for name, (fmt, elem, block) in FORMATS.items():
    plan = G.format_plan(fmt, elem, block, native_fp8=True)
    assert plan.native_fp8 == (name in NATIVE_NAMES), name
    assert plan.native_scale == (name in NATIVE_SCALE_NAMES), name
    plain = G.format_plan(fmt, elem, block)
    assert plain.native_fp8 is False and plain.native_scale is False
    # The scales' decode leaves the elements' route alone.
    assert GP._route_log2(plan) == (0 if plan.native_fp8 else GP._route_log2(plain))


def test_asm_e2m1_plan_only_for_e2m1_elements_and_compiled_cuda():
  for name, (fmt, elem, block) in FORMATS.items():
    plan = G.format_plan(fmt, elem, block, asm_e2m1=True)
    assert plan.asm_e2m1 == (name in ASM_E2M1_NAMES) and not plan.native_fp8, name
    assert GP._route_log2(plan) == GP._route_log2(G.format_plan(fmt, elem, block))
    assert G.format_plan(fmt, elem, block).asm_e2m1 is False
  # gemv_packed's choice: compiled for a CUDA GPU, never in interpret mode.
  assert G.asm_e2m1_default(interpret=True) is False
  assert G.asm_e2m1_default() is (device.cuda_capability() is not None)
  assert G.asm_e2m1_default() is ON_GPU


# ------------------------------------------------------------------ GPU only

@gpu
@pytest.mark.parametrize("name", ["e4m3", "e5m2", "mxfp4", "nvfp4"])
@pytest.mark.parametrize("batch", [1, 16])
def test_deterministic_bits_across_runs(name, batch):
  fmt, _, block = FORMATS[name]
  w = fp8lab.quantize(jax.random.normal(jax.random.key(5), (4096, 4096), jnp.float32), fmt)
  x = jax.random.normal(jax.random.key(6), (batch, 4096), jnp.float32)
  f = jax.jit(functools.partial(fp8lab.gemv_packed, implementation="pallas"))
  first = _bits(f(w, x))
  for _ in range(3):
    np.testing.assert_array_equal(_bits(f(w, x)), first)
