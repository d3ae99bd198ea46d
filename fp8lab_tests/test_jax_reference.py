"""fp8lab against JAX's own block quantizer (jax._src.cudnn.scaled_matmul_stablehlo.quantize,
behind jax.nn.scaled_dot_general), jax 0.11.2.

JAX's quantizer, as written: per block of the last axis, scale = amax / elem_max;
mxfp8: scale code = round-up-to-power-of-two of that quotient (cast_to_e8m0_with_rounding_up),
elements = clip(x / 2^s, +-max) cast to e4m3; nvfp4: x /= global_scale (given by the
caller), block scale = clip(amax / 6, 0, 448) cast to e4m3, elements = clip(x / scale, +-6)
cast to e2m1.

Where fp8lab agrees bit for bit:
  - mxfp8 (e4m3 and e5m2 elements) with scale_mode="rceil": scales and element codes, for
    every block of finite values whose amax is at least 2^-90 (any element values inside,
    subnormals included). JAX's fl(amax / max) and fp8lab's fl(amax * fl(1/max)) have the
    same power-of-two ceiling for every normal amax (test_rceil_quotients_round_up_alike).
    The bound: XLA:CPU reads a float32 subnormal element as zero, which is harmless only
    if its scaled value rounds to zero anyway: amax >= 2^-107 for e4m3, 2^-93 for e5m2
    (whose subnormals reach down to 2^-16).
  - mxfp8 with the default "floor": JAX's code is fp8lab's plus one exactly where the
    block's amax significand exceeds the element max's (1.75), i.e. where floor saturates.
  - nvfp4 with global_scale = fp8lab's tensor_scale (S_dec): equal on nearly all inputs
    (every code of the random tensors below), not always (the scale example below).

Differences, each shown by a concrete example below:
  - An all-zero block (CPU): JAX divides 0 by the code-0 scale 2^-127, a subnormal that
    XLA:CPU flushes to 0, so 0/0 = NaN: element codes 0x7F/0xFF (mxfp8), and for nvfp4 the
    scale 0 gives NaN again, cast to e2m1 as 0x8 (-0). fp8lab: zero codes.
  - A block with a NaN: JAX's scale code is 0x00 (the NaN quotient's exponent field 0xFF
    plus the round-up carry wraps to 0x100 -> uint8 0), fp8lab's 0xFF (the spec's NaN scale).
  - A block with an Inf: both give scale 0xFF; JAX's element codes are x / Inf = 0 and NaN at
    the Inf, fp8lab's are all zero (both dequantize to a NaN block).
  - A tiny block (amax 2^-118, CPU): amax / 448 = 1.14 * 2^-127 is subnormal and XLA:CPU
    flushes it, so JAX stores scale 0 and clips x / 2^-127 (flushed divisor: Inf) to 448
    (codes 0x7E); fp8lab computes 2^-126 (code 1) and 2^-118 / 2^-126 = 256 (code 0x78).
  - A subnormal element in a small block (CPU): e5m2, amax 2^-99 -> s = -114, and the element
    2^-129 scales to 2^-15, an e5m2 subnormal (code 0x02) for fp8lab; XLA:CPU flushes the
    input to zero (JAX code 0x00).
  - nvfp4 scale rounding order: TE (fp8lab) rounds fl(amax_b * fl(S_enc * fl(1/6))), JAX
    fl(fl(amax_b / S_dec) / 6). Tensor amax 104.5, block amax 78.375: TE 336.00003 -> e4m3
    352 (0x7B), JAX exactly 336, the tie between 320 and 352 -> 320 (0x7A).
  - nvfp4 element rounding: JAX's source divides by the block scale, which rounds ties
    differently from TE's multiplication by fl(1/fl(s * S_dec)) (9.375 / 3.75 = 2.5 -> 2,
    9.375 * fl(1/3.75) = 2.5000002 -> 3); but XLA:CPU rewrites the division by a broadcast
    scale into a multiplication by its reciprocal, so on the CPU JAX returns 3, like fp8lab.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fp8lab
from fp8lab.testing import quantized as fqt

sms = pytest.importorskip("jax._src.cudnn.scaled_matmul_stablehlo")

ON_CPU = jax.default_backend() == "cpu"
cpu_only = pytest.mark.skipif(not ON_CPU, reason="shows XLA:CPU's flushing of subnormals")


def jax_mxfp8(x, data_type=jnp.float8_e4m3fn):
  config = sms.BlockScaleConfig(mode="mxfp8", block_size=32, data_type=data_type,
                                scale_type=jnp.float8_e8m0fnu, global_scale=None,
                                infer_only=False)
  q, s = sms.quantize(jnp.asarray(x), config)
  return np.asarray(q).view(np.uint8), np.asarray(s).view(np.uint8)


def jax_nvfp4(x, global_scale):
  config = sms.BlockScaleConfig(mode="nvfp4", block_size=16, data_type=jnp.float4_e2m1fn,
                                scale_type=jnp.float8_e4m3fn,
                                global_scale=jnp.asarray([global_scale], jnp.float32),
                                infer_only=False)
  q, s = sms.quantize(jnp.asarray(x), config)
  return np.asarray(q).view(np.uint8), np.asarray(s).view(np.uint8)


def block(values, size=32, fill=0.0):
  x = np.full((1, size), fill, np.float32)
  x[0, :len(values)] = values
  return x


# ----------------------------------------------------------------------------------------
# Agreements.

@pytest.mark.parametrize("fmt,data_type", [("mxfp8", jnp.float8_e4m3fn),
                                           ("mxfp8_e5m2", jnp.float8_e5m2)])
@settings(max_examples=50)
@given(data=st.data())
def test_mxfp8_rceil_agrees_bit_for_bit(fmt, data_type, data):
  shape = data.draw(st.sampled_from([(2, 64), (1, 96)]))
  x = data.draw(fqt.block_arrays(fmt, shape, -1, allow_nan=False, allow_inf=False,
                                 min_exponent=-90))
  # The stated range: every block's amax >= 2^-90 (a block drawn with a smaller amax gets
  # one element of 2^-90).
  blocks = x.reshape(shape[0], -1, 32)
  small = np.abs(blocks).max(-1) < 2.0**-90
  blocks[..., 0] = np.where(small, np.float32(2.0**-90), blocks[..., 0])
  x = blocks.reshape(shape)
  q = fp8lab.quantize(x, fmt, scale_mode="rceil")
  codes, scales = jax_mxfp8(x, data_type)
  np.testing.assert_array_equal(np.asarray(q.scales), scales)
  np.testing.assert_array_equal(np.asarray(q.codes()), codes)


@pytest.mark.parametrize("elem_max", [448.0, 57344.0])
def test_rceil_quotients_round_up_alike(elem_max):
  # JAX rounds up fl(amax / max), NVIDIA (and fp8lab's rceil) fl(amax * fl(1/max)). Over all
  # 2^23 significands of the binade [1, 2) both have the same power-of-two ceiling; scaling
  # amax by 2^k scales both quotients by 2^k exactly while they stay normal, so this covers
  # every amax whose quotient is a normal float32.
  amax = (np.arange(1 << 23, dtype=np.uint32) | np.uint32(0x3F800000)).view(np.float32)
  m = np.float32(elem_max)
  def ceil_exponent(q):
    bits = q.view(np.uint32)
    return (bits >> np.uint32(23)).astype(np.int64) + ((bits & np.uint32(0x7FFFFF)) != 0)
  np.testing.assert_array_equal(ceil_exponent(amax / m),
                                ceil_exponent(amax * (np.float32(1) / m)))


@settings(max_examples=30)
@given(data=st.data())
def test_mxfp8_floor_is_one_below_jax_exactly_where_floor_saturates(data):
  x = data.draw(fqt.block_arrays("mxfp8", (2, 64), -1, allow_nan=False, allow_inf=False,
                                 min_exponent=-90, max_exponent=120))
  blocks = x.reshape(2, 2, 32)
  amax = np.abs(blocks).max(-1).astype(np.float64)
  x[amax.repeat(32, -1).reshape(2, 64) == 0] = 1.0   # no zero blocks (a separate difference)
  amax = np.abs(x.reshape(2, 2, 32)).max(-1).astype(np.float64)
  significand = amax / np.exp2(np.floor(np.log2(amax)))
  q = fp8lab.quantize(x, "mxfp8", scale_mode="floor")
  _, scales = jax_mxfp8(x)
  np.testing.assert_array_equal(scales.astype(np.int64),
                                np.asarray(q.scales).astype(np.int64) + (significand > 1.75))
  # Concretely: amax 500 = 1.95 * 2^8: floor s = 0 (500 saturates to 448), JAX s = 1.
  q = fp8lab.quantize(block([500.0]), "mxfp8")
  assert int(q.scales[0, 0]) == 127 and jax_mxfp8(block([500.0]))[1][0, 0] == 128


def test_nvfp4_agrees_on_random_tensors():
  # Empirical: with JAX's global_scale set to fp8lab's S_dec, every scale and element code
  # of these tensors agrees; the examples below show that this is not guaranteed.
  rng = np.random.default_rng(0)
  for i in range(10):
    x = (rng.standard_normal((8, 256)) * np.exp2(rng.integers(-20, 20))).astype(np.float32)
    q = fp8lab.quantize(x, "nvfp4")
    codes, scales = jax_nvfp4(x, float(q.tensor_scale))
    np.testing.assert_array_equal(np.asarray(q.scales), scales)
    np.testing.assert_array_equal(np.asarray(q.codes()), codes)


# ----------------------------------------------------------------------------------------
# Differences.

@cpu_only
def test_all_zero_block_on_cpu():
  x = np.zeros((1, 64), np.float32)
  x[0, 32:] = 1.0
  codes, scales = jax_mxfp8(x)
  q = fp8lab.quantize(x, "mxfp8", scale_mode="rceil")
  assert scales[0, 0] == 0 and int(q.scales[0, 0]) == 0        # both: scale code 0
  # JAX: 0 / 2^-127 with the subnormal divisor flushed: 0/0 = NaN -> NaN codes.
  assert np.isin(codes[0, :32], [0x7F, 0xFF]).all()
  assert (np.asarray(q.codes())[0, :32] == 0).all()
  np.testing.assert_array_equal(codes[0, 32:], np.asarray(q.codes())[0, 32:])
  # nvfp4: JAX's block scale 0 gives x / 0 = NaN, which becomes e2m1 code 0x8 (-0) here;
  # fp8lab uses enc_b = FLT_MAX for a zero scale: 0 * FLT_MAX = +0 -> code 0x0.
  y = np.zeros((1, 32), np.float32)
  y[0, 16:] = 3.0
  q4 = fp8lab.quantize(y, "nvfp4")
  codes4, scales4 = jax_nvfp4(y, float(q4.tensor_scale))
  assert scales4[0, 0] == 0 and int(q4.scales[0, 0]) == 0
  assert (codes4[0, :16] == 0x8).all() and (np.asarray(q4.codes())[0, :16] == 0).all()


def test_nan_block_scale_code():
  x = block([1.0, np.nan, -2.0])
  codes, scales = jax_mxfp8(x)
  q = fp8lab.quantize(x, "mxfp8", scale_mode="rceil")
  # JAX: NaN / 448 has exponent field 0xFF and a nonzero mantissa; its round-up adds 1, and
  # the uint8 cast wraps 0x100 to 0x00. fp8lab: 0xFF, the spec's NaN scale.
  assert scales[0, 0] == 0x00 and int(q.scales[0, 0]) == 0xFF
  assert codes[0, 1] in (0x7F, 0xFF)                   # JAX keeps the NaN element itself
  assert np.isnan(np.asarray(q.dequantize())).all()    # fp8lab: the whole block is NaN


def test_inf_block():
  x = block([1.0, np.inf, -2.0])
  codes, scales = jax_mxfp8(x)
  q = fp8lab.quantize(x, "mxfp8", scale_mode="rceil")
  assert scales[0, 0] == 0xFF and int(q.scales[0, 0]) == 0xFF  # agree on the scale
  # JAX: the 0xFF scale decodes to Inf; x / Inf = 0 and Inf / Inf = NaN.
  assert codes[0, 1] in (0x7F, 0xFF)
  assert (np.delete(codes[0], 1) & 0x7F == 0).all()
  assert (np.asarray(q.codes()) == 0).all()


@cpu_only
def test_tiny_block_on_cpu():
  x = block([2.0**-118], fill=2.0**-118)
  codes, scales = jax_mxfp8(x)
  q = fp8lab.quantize(x, "mxfp8", scale_mode="rceil")
  assert scales[0, 0] == 0 and (codes == 0x7E).all()           # 448 * 2^-127 != x
  assert int(q.scales[0, 0]) == 1 and (np.asarray(q.codes()) == 0x78).all()
  np.testing.assert_array_equal(np.asarray(q.dequantize()), x)  # exact


@cpu_only
def test_subnormal_element_in_a_small_block_on_cpu():
  # e5m2, rceil: amax 2^-99 -> s = ceil(-99 - log2(57344)) = ceil(-114.8) = -114; the
  # element 2^-129 (a float32 subnormal) becomes 2^-15 = 2 * 2^-16: e5m2 code 0x02.
  x = block([2.0**-99, 2.0**-129])
  q = fp8lab.quantize(x, "mxfp8_e5m2", scale_mode="rceil")
  codes, scales = jax_mxfp8(x, jnp.float8_e5m2)
  assert int(q.scales[0, 0]) == scales[0, 0] == 127 - 114
  assert int(q.codes()[0, 1]) == 0x02 and codes[0, 1] == 0x00
  np.testing.assert_array_equal(np.asarray(q.codes())[0, [0] + list(range(2, 32))],
                                codes[0, [0] + list(range(2, 32))])


def test_nvfp4_scale_rounding_order():
  f32 = np.float32
  x = np.zeros((1, 32), np.float32)
  x[0, 0] = 104.5                     # tensor amax
  x[0, 16] = 78.375                   # block amax of block 1
  s_enc = f32(2688) / f32(104.5)
  s_dec = f32(1) / s_enc
  te = f32(78.375) * (s_enc * (f32(1) / f32(6)))
  jax_order = (f32(78.375) / s_dec) / f32(6)
  assert te == np.nextafter(f32(336), f32(1000)) and jax_order == f32(336)
  q = fp8lab.quantize(x, "nvfp4")
  assert np.asarray(q.tensor_scale).view(np.uint32) == s_dec.view(np.uint32)
  _, scales = jax_nvfp4(x, float(s_dec))
  # 336 is the tie between 320 (0x7A, mantissa even) and 352 (0x7B).
  assert int(q.scales[0, 1]) == 0x7B and scales[0, 1] == 0x7A


def test_nvfp4_element_rounding_order():
  f32 = np.float32
  # Tensor amax 2688 (S_enc = S_dec = 1); block 1 has amax 22.5 -> scale 3.75 in both.
  x = np.zeros((1, 32), np.float32)
  x[0, 0] = 2688.0
  x[0, 16:18] = [22.5, 9.375]
  assert f32(9.375) / f32(3.75) == f32(2.5)                         # the source's order
  assert f32(9.375) * (f32(1) / f32(3.75)) == np.nextafter(f32(2.5), f32(3))   # TE's
  q = fp8lab.quantize(x, "nvfp4")
  assert int(q.codes()[0, 17]) == 5                                 # 3.0
  codes, scales = jax_nvfp4(x, 1.0)
  assert scales[0, 1] == int(q.scales[0, 1]) == 0x47
  if ON_CPU:
    # XLA:CPU turns the division by the broadcast scale into a multiplication by its
    # reciprocal, so JAX's result matches TE's order here.
    assert codes[0, 17] == 5
