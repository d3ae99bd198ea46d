"""Scale rules (numerics/scales.py): the exact float32 arithmetic they run on, the MX shared
exponent rules with hand-computed vectors, NVFP4's steps, per-tensor current scaling and
the delayed-scaling state.

Expected values are written from docs/numerics.md by hand (each derived in a comment) or
computed by numpy float32 arithmetic, which is IEEE with gradual underflow on the CPU;
never by fp8lab itself.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import fp8lab
from fp8lab.formats import E2M1, E4M3, E5M2
from fp8lab.numerics import scales as sc
from fp8lab.testing import float32_bits

FLT_MAX = float(np.finfo(np.float32).max)


def f32(value) -> np.float32:
  return np.float32(value)


def bits(value) -> int:
  return int(np.float32(value).view(np.uint32))


def next_up(value) -> np.float32:
  return np.nextafter(np.float32(value), np.float32(np.inf))


def next_down(value) -> np.float32:
  return np.nextafter(np.float32(value), np.float32(-np.inf))


# ----------------------------------------------------------------------------------------
# Exact float32 arithmetic on bit patterns, against numpy's IEEE float32.

_OPS = {
    "mul": (jax.jit(sc.f32_mul), np.multiply),
    "div": (jax.jit(sc.f32_div), np.divide),
    "add": (jax.jit(sc.f32_add), np.add),
    "sub": (jax.jit(sc.f32_sub), np.subtract),
}


def _check_op(name, a_bits, b_bits):
  ours, ref = _OPS[name]
  got = np.asarray(ours(a_bits, b_bits))
  with np.errstate(all="ignore"):
    want = ref(a_bits.view(np.float32), b_bits.view(np.float32)).view(np.uint32)
  want_nan = np.isnan(want.view(np.float32))
  # NaN results: any NaN is right (fp8lab returns the canonical 0x7FC00000); all other
  # results bit for bit, signed zeros and subnormals included.
  np.testing.assert_array_equal(np.isnan(got.view(np.float32)), want_nan)
  np.testing.assert_array_equal(got[~want_nan], want[~want_nan])
  assert np.all(got[want_nan] == 0x7FC00000)


@pytest.mark.parametrize("name", sorted(_OPS))
@given(a=hnp.arrays(np.uint32, 64, elements=float32_bits()),
       b=hnp.arrays(np.uint32, 64, elements=float32_bits()))
def test_f32_ops_match_numpy_on_raw_bits(name, a, b):
  _check_op(name, a, b)


@pytest.mark.parametrize("name", sorted(_OPS))
def test_f32_ops_match_numpy_sweep(name):
  # 2^17 pairs weighted toward the hard parts: small and subnormal exponents (results that
  # underflow), exponents near 127 (overflow), and pairs of nearly equal magnitude (the
  # cancellations of add/sub, quotients near 1).
  rng = np.random.default_rng(1234)
  n = 1 << 17
  def draw():
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    kind = rng.integers(0, 4, n)
    low_exp = rng.integers(0, 12, n).astype(np.uint32) << np.uint32(23)
    high_exp = rng.integers(240, 255, n).astype(np.uint32) << np.uint32(23)
    a = np.where(kind == 0, (a & np.uint32(0x807FFFFF)) | low_exp, a)
    a = np.where(kind == 1, (a & np.uint32(0x807FFFFF)) | high_exp, a)
    return a.astype(np.uint32)
  a = draw()
  b = draw()
  near = a ^ rng.integers(0, 1 << 6, n).astype(np.uint32)
  b = np.where(rng.integers(0, 2, n) == 1, near, b).astype(np.uint32)
  _check_op(name, a, b)


def test_f32_ops_keep_what_xla_cpu_flushes():
  # Why the arithmetic is done on integers: XLA:CPU flushes float32 subnormals. The
  # expected bits are the IEEE results: 2^-127 * 448 = 1.75 * 2^-119 (normal, 0x04600000);
  # 2^-149 * 2 = 2^-148 (0x00000002); 2^-149 + 2^-149 = 2^-148; 1 / FLT_MAX = 2^-128 after
  # rounding to the subnormal grid (0x00200000).
  assert int(sc.f32_mul(bits(2.0**-127), bits(448.0))) == 0x04600000
  assert int(sc.f32_mul(1, bits(2.0))) == 2
  assert int(sc.f32_add(1, 1)) == 2
  assert int(sc.f32_div(bits(1.0), bits(FLT_MAX))) == 0x00200000


@given(x=hnp.arrays(np.uint32, 64, elements=float32_bits()),
       k=hnp.arrays(np.int32, 64, elements=st.integers(-300, 300)))
def test_ldexp_bits_matches_numpy(x, k):
  got = np.asarray(jax.jit(sc.ldexp_bits)(x, k))
  with np.errstate(all="ignore"):
    want = np.ldexp(x.view(np.float32), k).view(np.uint32)
  nan = np.isnan(want.view(np.float32))
  np.testing.assert_array_equal(got[~nan], want[~nan])
  assert np.isnan(got.view(np.float32)[nan]).all()


# ----------------------------------------------------------------------------------------
# MX scale rules: hand-computed vectors (docs/numerics.md section 4). Code = s + 127.

# Each row: element format, amax, expected codes for floor, ceil, even, rceil. "sig" is
# amax's significand (amax = sig * 2^e, sig in [1, 2)); floor: s = e - emax; ceil adds 1
# when sig != 1; even adds 1 when sig >= 2 - 2^-(mbits+1) (the bump carries into the
# exponent: e4m3 1.9375, e5m2 1.875, e2m1 1.75); rceil rounds fl(amax * fl(1/max)) up to a
# power of two. fl(1/448) = (1 + 0.75*2^-24)/448, fl(1/57344) = (1 + 0.75*2^-24)/57344,
# fl(1/6) = (1 + 0.5*2^-24)/6 (all slightly above), so amax == max gives fl(...) = 1 exactly
# (the excess is below half an ulp of 1, 2^-24).
MX_VECTORS = [
    # e4m3: emax 8, max 448 = 1.75 * 2^8.
    # 1.0 = 2^0: floor/ceil/even s = -8; rceil: 2^-9 < fl(1/448) < 2^-8 -> s = -8. Code 119.
    ("e4m3", f32(1.0), (119, 119, 119, 119)),
    # 448 = 1.75 * 2^8: floor 0; ceil 1; even 1.75 + 1/16 < 2 -> 0; rceil fl(448 * fl(1/448))
    # = 1 -> 0.
    ("e4m3", f32(448.0), (127, 128, 127, 127)),
    # One ulp above the element max: 448 * (1 + 2^-23). rceil: (1 + 2^-23)(1 + 0.75*2^-24)
    # rounds to 1 + 2^-23 > 1 -> s = 1. floor keeps s = 0 and saturates that element.
    ("e4m3", next_up(448.0), (127, 128, 127, 128)),
    # 496 = 1.9375 * 2^8: even's bump carries (s = 1); one ulp below it does not.
    ("e4m3", f32(496.0), (127, 128, 128, 128)),
    ("e4m3", next_down(496.0), (127, 128, 127, 128)),
    # Powers of two: 256 = 2^8: floor/ceil/even s = 0; rceil 256/448 < 1 -> s = 0.
    ("e4m3", f32(256.0), (127, 127, 127, 127)),
    # 512 = 2^9: floor/ceil/even s = 1; rceil 512/448 in (1, 2] -> s = 1.
    ("e4m3", f32(512.0), (128, 128, 128, 128)),
    # A float32 subnormal amax 2^-130 (E = 0): floor -127 - 8, ceil -126 - 8, even's bump
    # (2^19 + 2^19 in the fraction) stays subnormal, rceil ~2^-138.8 <= 2^-127: every rule
    # clamps to s = -127, code 0.
    ("e4m3", f32(2.0**-130), (0, 0, 0, 0)),
    # 1.75 * 2^-119 = 448 * 2^-127: floor -119 - 8 -> clamp -127, code 0; ceil (sig 1.75 != 1)
    # -119 + 1 - 8 = -126, code 1; even: no carry -> clamp, code 0. rceil:
    # the product is 2^-127 (1 + 0.75*2^-24), which rounds to the subnormal 2^-127 exactly
    # (quantum 2^-149) -> s = -127.
    ("e4m3", f32(1.75 * 2.0**-119), (0, 1, 0, 0)),
    # One ulp above (an ulp of amax is 2^-142, i.e. 2^-23 / 1.75 relative): the product
    # exceeds 2^-127 by (1/1.75 + 0.375) * 2^-150 = 0.95 * 2^-150, under half a quantum
    # (2^-150): still 2^-127, code 0. Two ulps above: (2/1.75 + 0.375) * 2^-150 = 1.52 *
    # 2^-150 rounds up to 2^-127 + 2^-149, whose power-of-two ceiling is 2^-126: code 1.
    ("e4m3", next_up(1.75 * 2.0**-119), (0, 1, 0, 0)),
    ("e4m3", next_up(next_up(1.75 * 2.0**-119)), (0, 1, 0, 1)),
    # 2^-118: floor/ceil/even s = -126 (code 1); rceil 2^-118 / 448 = 1.14 * 2^-127 is a
    # subnormal above 2^-127 -> 2^-126 (code 1).
    ("e4m3", f32(2.0**-118), (1, 1, 1, 1)),
    # FLT_MAX = (2 - 2^-23) * 2^127: floor 127 - 8 = 119 (246); ceil 120; even carries into
    # E = 255: 128 - 8 = 120; rceil FLT_MAX / 448 ~ 2^119.2 -> 120. Codes 246/247.
    ("e4m3", f32(FLT_MAX), (246, 247, 247, 247)),
    # e5m2: emax 15, max 57344 = 1.75 * 2^15, even threshold 1.875.
    ("e5m2", f32(57344.0), (127, 128, 127, 127)),
    ("e5m2", f32(61440.0), (127, 128, 128, 128)),        # 1.875 * 2^15: even carries
    ("e5m2", f32(1.0), (112, 112, 112, 112)),            # s = -15; rceil 2^-16 < 1/57344 < 2^-15
    # e2m1: emax 2, max 6 = 1.5 * 2^2, even threshold 1.75.
    # 6: floor 0; ceil 1; even 1.5 + 0.25 < 2 -> 0; rceil fl(6 * fl(1/6)) = 1 -> 0.
    ("e2m1", f32(6.0), (127, 128, 127, 127)),
    ("e2m1", f32(7.0), (127, 128, 128, 128)),            # 1.75 * 4: even carries
    ("e2m1", next_down(7.0), (127, 128, 127, 128)),
    ("e2m1", f32(6.5), (127, 128, 127, 128)),            # rceil 6.5/6 > 1 -> 1
    ("e2m1", f32(4.0), (127, 127, 127, 127)),            # 2^2: s = 0 for all; rceil 4/6 < 1
    ("e2m1", f32(8.0), (128, 128, 128, 128)),            # 2^3: s = 1; rceil 8/6 -> 1
    ("e2m1", f32(0.5), (124, 124, 124, 124)),            # 2^-1: s = -3; rceil 1/12 -> 2^-3
]
MODES = ("floor", "ceil", "even", "rceil")
_MX_OF_ELEMENT = {"e4m3": "mxfp8", "e5m2": "mxfp8_e5m2", "e2m1": "mxfp4"}


@pytest.mark.parametrize("elem,amax,codes", MX_VECTORS)
def test_mx_scale_codes_hand_vectors(elem, amax, codes):
  f = fp8lab.get_format(elem)
  for mode, want in zip(MODES, codes):
    got = int(sc.mx_scale_codes(jnp.uint32(bits(amax)), f, mode))
    assert got == want, (elem, float(amax), mode, got, want)
    # The same scale through quantize: one block whose largest magnitude is amax (the other
    # elements are smaller), with either sign.
    x = np.zeros(32, np.float32)
    x[5] = -amax
    x[6] = amax / 4
    q = fp8lab.quantize(x, _MX_OF_ELEMENT[elem], scale_mode=mode)
    assert int(q.scales[0]) == want, (elem, float(amax), mode)


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp8_e5m2", "mxfp4"])
@pytest.mark.parametrize("mode", MODES)
def test_mx_zero_nan_inf_blocks(fmt, mode):
  x = np.zeros((4, 32), np.float32)
  x[0, 1] = -0.0                            # a zero block (with a -0)
  x[1, :] = 1.0
  x[1, 7] = np.nan                          # NaN block
  x[2, :] = 2.0
  x[2, 3] = -np.inf                         # Inf block
  x[3, :] = 3.0                             # a normal block
  q = fp8lab.quantize(x, fmt, scale_mode=mode)
  assert np.asarray(q.scales)[:, 0].tolist() == [0x00, 0xFF, 0xFF, int(q.scales[3, 0])]
  codes = np.asarray(q.codes())
  sign_code = fp8lab.get_format(q.element_format).sign_bit
  assert codes[0, 1] == sign_code and (np.delete(codes[0], 1) == 0).all()   # -0 keeps its sign
  assert (codes[1:3] == 0).all()            # NaN/Inf blocks: zero element codes
  d = np.asarray(q.dequantize())
  assert np.isnan(d[1:3]).all()
  assert (d[0] == 0).all() and np.signbit(d[0, 1])
  assert (d[3] == 3.0).all()                # 3 is exact in every element format


def test_mx_element_ties_and_saturation():
  # mxfp4, floor. Block 0: amax 4 = 2^2 -> s = 0, elements unscaled. e2m1 grid 0, .5, 1, 1.5,
  # 2, 3, 4, 6 (codes 0..7); ties go to the even code: 2.5 -> 2 (4), 0.25 -> 0 (0),
  # 0.75 -> 1 (2), 1.25 -> 1 (2), 1.75 -> 2 (4), 3.5 -> 4 (6), -2.5 -> -2 (0xC).
  # Block 1: amax 7 -> s = 0 as well (E = 2), so 7 is the tie between 6 and 8: nearest-even
  # gives 8, which overflows and saturates to 6 (code 7); 6.5 rounds to 6 (7) unsaturated;
  # 5, the tie between 4 and 6, goes to 4 (6).
  x = np.zeros(64, np.float32)
  x[:8] = [4, 2.5, 0.25, 0.75, 1.25, 1.75, 3.5, -2.5]
  x[32:35] = [7, 6.5, 5]
  q = fp8lab.quantize(x, "mxfp4")
  assert [int(c) for c in q.scales] == [127, 127]
  codes = np.asarray(q.codes())
  assert codes[:8].tolist() == [6, 4, 0, 2, 2, 4, 6, 0xC]
  assert codes[32:35].tolist() == [7, 7, 6]
  # mxfp8, floor, amax 256 -> s = 0. e4m3 around 16: 16 (0x58), 18 (0x59), 20 (0x5A); the
  # ties 17 -> 16 (mantissa 000 even), 19 -> 20 (010 even).
  y = np.zeros(32, np.float32)
  y[:3] = [256, 17, 19]
  q8 = fp8lab.quantize(y, "mxfp8")
  assert int(q8.scales[0]) == 127
  assert np.asarray(q8.codes())[:3].tolist() == [0x78, 0x58, 0x5A]


def test_mx_subnormal_block_round_trips_exactly():
  # amax 2^-130 -> s clamps to -127 (code 0); elements x * 2^127: 2^-130 -> 2^-3 (e4m3 code
  # (-3 + 7) << 3 = 0x20), -3 * 2^-133 -> -1.5 * 2^-5 (code 0x80 | (-5 + 7) << 3 | 4 = 0x94).
  # Dequantization
  # multiplies back by 2^-127 exactly, landing on the float32 subnormals (which XLA:CPU's
  # own multiply would flush).
  x = np.zeros(32, np.float32)
  x[:2] = [2.0**-130, -3 * 2.0**-133]
  q = fp8lab.quantize(x, "mxfp8")
  assert int(q.scales[0]) == 0
  assert np.asarray(q.codes())[:2].tolist() == [0x20, 0x94]
  np.testing.assert_array_equal(np.asarray(q.dequantize()).view(np.uint32), x.view(np.uint32))


# ----------------------------------------------------------------------------------------
# NVFP4 (docs/numerics.md section 5), with numpy float32 for the expected float32 steps.

def test_nvfp4_tensor_scales_hand_values():
  def scales_of(amax):
    s_enc, s_dec = sc.nvfp4_tensor_scales(jnp.uint32(bits(amax)))
    return int(s_enc), int(s_dec)
  # amax = 2688 = 448 * 6: S_enc = 1, S_dec = 1.
  assert scales_of(2688.0) == (bits(1.0), bits(1.0))
  # amax = 1: S_enc = 2688, S_dec = fl(1/2688).
  assert scales_of(1.0) == (bits(2688.0), bits(f32(1) / f32(2688)))
  # amax = 3: S_enc = fl(2688/3) = 896 exactly, S_dec = fl(1/896).
  assert scales_of(3.0) == (bits(896.0), bits(f32(1) / f32(896)))
  # amax = 0: S_enc = 1 by rule.
  assert scales_of(0.0) == (bits(1.0), bits(1.0))
  # amax = 2^-149: 2688 / 2^-149 overflows -> min(inf, FLT_MAX) = FLT_MAX, and
  # S_dec = fl(1/FLT_MAX) = 2^-128, a subnormal (bits 0x00200000).
  assert scales_of(2.0**-149) == (bits(FLT_MAX), 0x00200000)


def test_nvfp4_block_steps_hand_values():
  # S_enc = 1 (tensor amax 2688). Block amax 2688: s = fl(2688 * fl(1/6)) = 448.0000134 ->
  # 448 (the excess is below half an ulp of 448, 2^-16 = 1.5e-5) -> code 0x7E.
  # Block amax 22.5: s = fl(22.5 * fl(1/6)) = 3.75 (excess 1.1e-7 < 1.19e-7) -> 3.75 =
  # 1.875 * 2 -> code (1 + 7) << 3 | 7 = 0x47. Block amax 2^-12: s ~ 2^-14.6 is below half
  # the smallest e4m3 subnormal (2^-10) -> code 0.
  amax = jnp.array([bits(2688.0), bits(22.5), bits(2.0**-12)], jnp.uint32)
  codes = sc.nvfp4_block_scale_codes(amax, jnp.uint32(bits(1.0)))
  assert np.asarray(codes).tolist() == [0x7E, 0x47, 0x00]
  enc = np.asarray(sc.nvfp4_block_encode_factor(codes, jnp.uint32(bits(1.0))))
  # enc_b = min(fl(1 / fl(s * 1)), FLT_MAX): fl(1/448), fl(1/3.75), and FLT_MAX for s = 0.
  assert enc.tolist() == [bits(f32(1) / f32(448)), bits(f32(1) / f32(3.75)), bits(FLT_MAX)]


def test_nvfp4_quantize_hand_vector():
  # One tensor, three blocks of 16, tensor amax 2688 so S_enc = S_dec = 1.
  x = np.zeros(48, np.float32)
  x[0] = 2688.0                  # block 0: scale 448 (0x7E); 2688 * fl(1/448) = 6(1 + ...)
                                 # -> 6, code 7
  x[16:18] = [22.5, 9.375]       # block 1: scale 3.75 (0x47); enc = fl(1/3.75) = 0.26666668
                                 # 22.5 * enc = 6.0000003 -> 6 (code 7); 9.375 * enc =
                                 # 2.5000002 -> above the 2/3 tie -> 3 (code 5)
  x[32:34] = [2.0**-12, -2.0**-13]   # block 2: scale 0 -> enc = FLT_MAX; the products
                                 # saturate to +-6 (codes 7, 0xF), dequantized as 6 * 0 = 0
  q = fp8lab.quantize(x, "nvfp4")
  assert float(q.tensor_scale) == 1.0
  assert np.asarray(q.scales).tolist() == [0x7E, 0x47, 0x00]
  codes = np.asarray(q.codes())
  assert codes[[0, 16, 17, 32, 33]].tolist() == [7, 7, 5, 7, 0xF]
  d = np.asarray(q.dequantize())
  # code * fl(s * S_dec): 6 * 448, 6 * 3.75, 3 * 3.75, 6 * 0, -6 * 0.
  np.testing.assert_array_equal(d[[0, 16, 17, 32]], [2688.0, 22.5, 11.25, 0.0])
  assert d[33] == 0 and np.signbit(d[33])


def test_nvfp4_nan_inf_and_zero_tensor():
  x = np.zeros((2, 32), np.float32)
  x[0, :16] = np.linspace(-3, 5, 16, dtype=np.float32)
  x[0, 20] = np.nan                         # block (0, 1) holds a NaN
  x[1, 3] = np.inf                          # block (1, 0) holds an Inf
  x[1, 17] = 7.0
  q = fp8lab.quantize(x, "nvfp4")
  clean = np.where(np.isfinite(x), x, 0).astype(np.float32)
  qc = fp8lab.quantize(clean, "nvfp4")
  scales, scales_c = np.asarray(q.scales), np.asarray(qc.scales)
  # The non-finite blocks get the E4M3 NaN code and zero codes; the rest is what the tensor
  # with those values zeroed gives (the tensor amax skips NaN and Inf).
  assert scales[0, 1] == 0x7F and scales[1, 0] == 0x7F
  assert scales[0, 0] == scales_c[0, 0] and scales[1, 1] == scales_c[1, 1]
  assert float(q.tensor_scale) == float(qc.tensor_scale)
  codes = np.asarray(q.codes())
  assert (codes[0, 16:] == 0).all() and (codes[1, :16] == 0).all()
  d = np.asarray(q.dequantize())
  assert np.isnan(d[0, 16:]).all() and np.isnan(d[1, :16]).all()
  np.testing.assert_array_equal(d[0, :16], np.asarray(qc.dequantize())[0, :16])
  # All-zero tensor: S_enc = 1 (tensor_scale 1), scales 0, codes 0 (-0 keeps its sign code).
  z = np.zeros(32, np.float32)
  z[4] = -0.0
  qz = fp8lab.quantize(z, "nvfp4")
  assert float(qz.tensor_scale) == 1.0 and (np.asarray(qz.scales) == 0).all()
  codes = np.asarray(qz.codes())
  assert codes[4] == 0x8 and (np.delete(codes, 4) == 0).all()
  assert (np.asarray(qz.dequantize()) == 0).all()


# ----------------------------------------------------------------------------------------
# Per-tensor current scaling and delayed scaling (docs/numerics.md section 8).

@pytest.mark.parametrize("fmt,fmax", [("e4m3", 448.0), ("e5m2", 57344.0)])
@pytest.mark.parametrize("margin", [0, 1, 3, -2])
@given(amax=float32_bits())
def test_current_scale_matches_numpy(fmt, fmax, margin, amax):
  a = np.array(amax & 0x7FFFFFFF, np.uint32).view(np.float32)
  with np.errstate(all="ignore"):
    want = (f32(fmax) / a) / f32(2.0**margin)        # numpy float32: one rounding each
    if np.isinf(want):
      want = f32(FLT_MAX)
    if a == 0 or not np.isfinite(a):
      want = f32(1.0)
  got = np.asarray(sc.current_scale(a, fmt, margin))
  assert got.view(np.uint32) == want.view(np.uint32), (float(a), float(got), float(want))


def test_per_tensor_hand_vectors():
  # amax 1 -> scale 448, tensor_scale fl(1/448); 1 -> 448 (0x7E), 0.5 -> 224 = 1.75 * 2^7
  # (exponent field 14: 0x76), -1 -> 0xFE.
  q = fp8lab.quantize(np.array([1.0, 0.5, -1.0], np.float32), "e4m3")
  assert np.asarray(q.codes()).tolist() == [0x7E, 0x76, 0xFE]
  assert np.asarray(q.tensor_scale).view(np.uint32) == bits(f32(1) / f32(448))
  # margin 1: scale 224, so 1 -> 224 (0x76).
  q = fp8lab.quantize(np.array([1.0], np.float32), "e4m3", margin=1)
  assert np.asarray(q.codes()).tolist() == [0x76]
  # NaN and Inf do not count in amax (2 -> scale 224); NaN -> NaN code, +-Inf saturate.
  x = np.array([np.nan, np.inf, -np.inf, 2.0], np.float32)
  q = fp8lab.quantize(x, "e4m3")
  assert np.asarray(q.codes()).tolist() == [0x7F, 0x7E, 0xFE, 0x7E]
  q = fp8lab.quantize(x, "e5m2")                     # 2 -> 57344: e5m2 0x7B; Inf -> 0x7B
  assert np.asarray(q.codes()).tolist() == [0x7E, 0x7B, 0xFB, 0x7B]
  # All-zero and all-NaN tensors: scale 1.
  for z in (np.zeros(4, np.float32), np.full(4, np.nan, np.float32)):
    assert float(fp8lab.quantize(z, "e4m3").tensor_scale) == 1.0
  # A tiny amax: 448 / 2^-149 overflows -> scale FLT_MAX; tensor_scale = fl(1/FLT_MAX) =
  # 2^-128 (subnormal, 0x00200000); 2^-149 * FLT_MAX = 2^-21 (1 - 2^-24) -> e4m3 0.
  q = fp8lab.quantize(np.array([2.0**-149], np.float32), "e4m3")
  assert np.asarray(q.tensor_scale).view(np.uint32) == 0x00200000
  # A given scale is used as is: 3 * 2 = 6 = 1.5 * 2^2 (0x4C); tensor_scale 1/2.
  q = fp8lab.quantize(np.array([3.0], np.float32), "e4m3", scale=2.0)
  assert np.asarray(q.codes()).tolist() == [0x4C] and float(q.tensor_scale) == 0.5


def test_delayed_scaling_sequence():
  state = fp8lab.DelayedScaling.create("e4m3", history_length=2)
  assert np.asarray(state.amax_history).tolist() == [0, 0] and float(state.scale) == 1.0
  update = jax.jit(lambda s, a: s.update(a))
  state = update(state, 1.0)            # history [1, 0]: scale 448 / 1
  assert np.asarray(state.amax_history).tolist() == [1, 0] and float(state.scale) == 448
  state = update(state, 2.0)            # [2, 1]: max 2 -> 224
  assert float(state.scale) == 224
  state = update(state, 0.5)            # [0.5, 2]: max 2 -> 224
  assert np.asarray(state.amax_history).tolist() == [0.5, 2] and float(state.scale) == 224
  state = update(state, 0.25)           # [0.25, 0.5]: the 2 fell out -> 896
  assert float(state.scale) == 896
  # Amax 0, NaN or Inf: the previous scale stays (and so does the history shift).
  for bad in (0.0, np.nan, np.inf):
    s2 = fp8lab.DelayedScaling.create("e4m3", history_length=1).update(1.0).update(bad)
    assert float(s2.scale) == 448, bad
  # most_recent ignores older entries; margin 2 divides by 4; e5m2 uses 57344.
  s = fp8lab.DelayedScaling.create("e4m3", 4, margin=2, amax_compute_algo="most_recent")
  s = s.update(8.0).update(1.0)
  assert float(s.scale) == 448 / 4
  s = fp8lab.DelayedScaling.create("e5m2", 4).update(2.0)
  assert float(s.scale) == 57344 / 2
  # Tiny amax: the quotient overflows -> FLT_MAX.
  s = fp8lab.DelayedScaling.create("e4m3").update(np.float32(2.0**-149))
  assert float(s.scale) == FLT_MAX


def test_delayed_scaling_pairs_with_quantize_and_is_a_pytree():
  x = np.array([0.5, -3.0, 10.0], np.float32)
  state = fp8lab.DelayedScaling.create("e4m3", 4).update(fp8lab.tensor_amax(x))
  assert float(fp8lab.tensor_amax(x)) == 10.0
  q = fp8lab.quantize(x, "e4m3", scale=state.scale)
  # scale fl(448/10) = 44.8 (float32); tensor_scale = fl(1/44.8).
  assert np.asarray(state.scale).view(np.uint32) == bits(f32(448) / f32(10))
  assert np.asarray(q.tensor_scale).view(np.uint32) == bits(f32(1) / (f32(448) / f32(10)))
  leaves, tree = jax.tree_util.tree_flatten(state)
  assert len(leaves) == 2
  back = jax.tree_util.tree_unflatten(tree, leaves)
  assert back.format == "e4m3" and back.margin == 0 and back.amax_compute_algo == "max"
  doubled = jax.tree_util.tree_map(lambda a: a * 2, state)
  assert float(doubled.scale) == 2 * float(state.scale)


def test_delayed_scaling_rejects_bad_arguments():
  with pytest.raises(ValueError, match="e4m3"):
    fp8lab.DelayedScaling.create("mxfp4")
  with pytest.raises(ValueError, match="history_length"):
    fp8lab.DelayedScaling.create("e4m3", 0)
  with pytest.raises(ValueError, match="amax_compute_algo"):
    fp8lab.DelayedScaling.create("e4m3", amax_compute_algo="mean")
  with pytest.raises(ValueError, match="margin"):
    fp8lab.DelayedScaling.create("e4m3", margin=0.5)
  with pytest.raises(ValueError, match="scale_mode"):
    sc.mx_shared_exponent(jnp.uint32(0), E4M3, "nearest")


def test_fixed_reciprocals_are_the_ones_the_vectors_assume():
  # The hand derivations above rely on these float32 reciprocals being slightly above the
  # exact ones, by 0.75 * 2^-24 (1/448, 1/57344) and 0.5 * 2^-24 (1/6) relative.
  for value, excess in ((E4M3.max_finite, 0.75), (E5M2.max_finite, 0.75),
                        (E2M1.max_finite, 0.5)):
    r = f32(1) / f32(value)
    assert float(r) * value - 1 == excess * 2.0**-24
