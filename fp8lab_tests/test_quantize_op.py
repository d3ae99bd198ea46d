"""The quantize op (fp8lab/ops/quantize.py): quantize_with_amax's results and the golden model's
given-scale paths against values computed here with numpy and ml_dtypes, its argument errors,
and (with the kernel) the Pallas implementation against the reference, byte for byte.

Independent expectations: per-tensor codes are ml_dtypes' nearest-even casts of the float32
products clipped to the format's max (finite inputs); a float32 quotient is the float64
quotient rounded to float32 (correctly rounded: 53 >= 2 * 24 + 2 bits).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fp8lab
from fp8lab.formats import get_format

_ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
       "e2m1": ml_dtypes.float4_e2m1fn}


def _f32(v) -> np.float32:
  return np.float32(np.float64(v))


def _div(a, b) -> np.float32:
  return np.float32(np.float64(np.float32(a)) / np.float64(np.float32(b)))


def _encode(values: np.ndarray, elem: str) -> np.ndarray:
  """Saturating nearest-even codes of finite float32 values (ml_dtypes after a clip)."""
  m = np.float32(get_format(elem).max_finite)
  c = np.clip(values.astype(np.float32), -m, m).astype(_ML[elem]).view(np.uint8)
  return c & np.uint8(0x0F) if elem == "e2m1" else c


def _x(shape, seed=0, dtype=np.float32) -> np.ndarray:
  rng = np.random.default_rng(seed)
  return (rng.standard_normal(shape) * rng.choice([0.01, 1.0, 30.0], shape)).astype(dtype)


def _finite_amax(x) -> np.float32:
  a = np.abs(np.asarray(x, np.float32))
  return np.float32(np.max(np.where(np.isfinite(a), a, 0), initial=0))


# ----------------------------------------------------------------------------------------
# quantize_with_amax on the reference path.

@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_delayed_scaling_step(fmt, algo):
  x = _x((24, 40), seed=1)
  hist = np.array([3.0, 250.0, 0.5, 7.0], np.float32)
  state = dataclasses.replace(fp8lab.DelayedScaling.create(fmt, 4, amax_compute_algo=algo),
                              amax_history=jnp.asarray(hist), scale=jnp.float32(1.75))
  r = fp8lab.quantize_with_amax(x, fmt, scaling=state, transpose=True)
  amax = _finite_amax(x)
  assert np.asarray(r.amax).view(np.uint32) == amax.view(np.uint32)
  new_hist = np.concatenate([[amax], hist[:-1]]).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(r.scaling.amax_history).view(np.uint32),
                                new_hist.view(np.uint32))
  ref = np.max(new_hist) if algo == "max" else new_hist[0]
  want_scale = _div(get_format(fmt).max_finite, ref)
  assert np.asarray(r.scaling.scale).view(np.uint32) == want_scale.view(np.uint32)
  # The codes use the OLD scale, 1.75; tensor_scale = fl(1 / 1.75).
  for q, xs in ((r.q, x), (r.q_t, x.T)):
    np.testing.assert_array_equal(np.asarray(q.codes()), _encode(xs * np.float32(1.75), fmt))
    assert np.asarray(q.tensor_scale).view(np.uint32) == _div(1, 1.75).view(np.uint32)
  assert r.q_t.shape == (40, 24)


def test_given_scale_and_current_scaling():
  x = _x((16, 48), seed=2)
  r = fp8lab.quantize_with_amax(x, "e4m3", scaling=np.float32(0.375))
  np.testing.assert_array_equal(np.asarray(r.q.codes()), _encode(x * np.float32(0.375), "e4m3"))
  assert r.scaling is None and r.q_t is None
  r = fp8lab.quantize_with_amax(x, "e4m3", margin=1)
  scale = np.float32(_div(448, _finite_amax(x)) / np.float32(2))
  np.testing.assert_array_equal(np.asarray(r.q.codes()), _encode(x * scale, "e4m3"))


def test_block_formats_amax_and_transpose():
  x = _x((40, 64), seed=3)
  x[3, 5] = np.inf
  x[7, 9] = np.nan
  r = fp8lab.quantize_with_amax(x, "mxfp8", transpose=True)
  assert np.asarray(r.amax).view(np.uint32) == _finite_amax(x).view(np.uint32)
  assert r.q_t.shape == (64, 40) and r.q_t.scales.shape == (64, 2)
  # Transposed blocks run along x's first axis: block (j, b) of q_t covers x[32b:32b+32, j].
  col = np.abs(x[:32, 10].astype(np.float32))
  e = int(np.floor(np.log2(col.max()))) - 8                        # floor mode, e4m3 emax 8
  assert int(np.asarray(r.q_t.scales)[10, 0]) == e + 127


def test_nvfp4_given_s_enc():
  """quantize(x, "nvfp4", scale=S_enc) follows docs/numerics.md section 5 with that S_enc."""
  x = _x((8, 64), seed=4)
  s_enc = np.float32(3.0)
  q = fp8lab.quantize(x, "nvfp4", scale=s_enc)
  s_dec = _div(1, s_enc)
  assert np.asarray(q.tensor_scale).view(np.uint32) == s_dec.view(np.uint32)
  blocks = np.abs(x).reshape(8, 4, 16).max(-1)
  s = (blocks * np.float32(s_enc * _div(1, 6))).astype(np.float32)
  codes = _encode(s, "e4m3")
  np.testing.assert_array_equal(np.asarray(q.scales), codes)
  scale_val = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
  enc_b = np.minimum(np.float32(1) / (scale_val * s_dec).astype(np.float32),
                     np.finfo(np.float32).max).astype(np.float32)
  want = _encode(x * np.repeat(enc_b, 16, axis=1), "e2m1")
  np.testing.assert_array_equal(np.asarray(q.codes()), want)


def test_nvfp4_delayed_state():
  state = fp8lab.DelayedScaling.create("nvfp4", 3)
  assert state.format == "nvfp4" and float(state.scale) == 1.0
  x = _x((16, 32), seed=5)
  r = fp8lab.quantize_with_amax(x, "nvfp4", scaling=state)
  # This step used S_enc = 1 (the fresh state); the next S_enc is 2688 / amax.
  assert np.asarray(r.q.tensor_scale) == np.float32(1)
  want = _div(2688, _finite_amax(x))
  assert np.asarray(r.scaling.scale).view(np.uint32) == want.view(np.uint32)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(transpose=True, x=np.zeros((2, 3, 32), np.float32)), ValueError, "2D"),
    (dict(transpose=True, axis=0), ValueError, "axis must be -1"),
    (dict(scaling=np.float32(1), fmt="mxfp8"), ValueError, "no per-tensor scale"),
    (dict(scaling="e4m3"), TypeError, "scaling must be"),
    (dict(scale=np.float32(2)), ValueError, "through `scaling`"),
    (dict(transpose=1), TypeError, "transpose must be a bool"),
    (dict(implementation="xla"), ValueError, "implementation must be one of"),
    (dict(implementation="pallas"), ValueError, "needs a GPU"),
    (dict(implementation="pallas", interpret=True, axis=0), ValueError, "last axis"),
    (dict(x=np.zeros((4, 32), np.int32)), TypeError, "float32"),
    (dict(fmt="e4m3x"), ValueError, "e4m3"),
])
def test_errors(kwargs, error, match):
  if kwargs.get("implementation") == "pallas" and not kwargs.get("interpret") \
      and jax.default_backend() == "gpu":
    pytest.skip("a GPU runs the kernel")
  x = kwargs.pop("x", np.zeros((32, 64), np.float32))
  fmt = kwargs.pop("fmt", "e4m3")
  with pytest.raises(error, match=match):
    fp8lab.quantize_with_amax(x, fmt, **kwargs)


@pytest.mark.parametrize("history, scale", [
    (np.zeros((2, 4), np.float32), np.float32(1)),
    (np.zeros((0,), np.float32), np.float32(1)),
    (np.zeros((4,), np.float16), np.float32(1)),
    (np.zeros((4,), np.float32), np.ones((2,), np.float32)),
])
def test_delayed_state_that_does_not_match(history, scale):
  state = dataclasses.replace(fp8lab.DelayedScaling.create("e4m3", 4),
                              amax_history=jnp.asarray(history), scale=jnp.asarray(scale))
  with pytest.raises(ValueError, match="amax_history of shape"):
    fp8lab.quantize_with_amax(np.ones((4, 32), np.float32), "e4m3", scaling=state)


def test_delayed_state_of_another_format():
  with pytest.raises(ValueError, match="cannot scale"):
    fp8lab.quantize_with_amax(np.ones((4, 32), np.float32), "e4m3",
                              scaling=fp8lab.DelayedScaling.create("e5m2"))
  with pytest.raises(ValueError, match="delayed scaling is for"):
    fp8lab.DelayedScaling.create("mxfp8")


def test_quantize_dispatch_default_is_the_golden_model_on_a_cpu():
  if jax.default_backend() == "gpu":
    pytest.skip("the default on a GPU may be the kernel")
  x = _x((4, 64), seed=6)
  a = fp8lab.quantize(x, "mxfp4")
  b = fp8lab.quantize(x, "mxfp4", implementation="reference")
  for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    assert np.asarray(u).tobytes() == np.asarray(v).tobytes()


def test_default_on_a_gpu_is_the_kernel_where_it_serves_the_call(monkeypatch):
  """implementation=None on a GPU: the kernel for every scaling kind it serves, the golden
  model where it does not (here a Hadamard block of 64). The GPU and the kernel are faked:
  the kernel path raises a marker."""
  import importlib  # pylint: disable=g-import-not-at-top
  qop = importlib.import_module("fp8lab.ops.quantize")      # the module, not the function

  class KernelCalled(Exception):
    pass

  def fake_kernel(*args, **kwargs):
    raise KernelCalled()

  monkeypatch.setattr(qop._op, "on_gpu", lambda: True)
  monkeypatch.setattr(qop, "_kernel", fake_kernel)
  x = _x((16, 128), seed=7)
  for fmt, kw in [("e4m3", dict(scale=1.0)), ("mxfp4", {}), ("nvfp4", {}),
                  ("e4m3_block", {})]:
    with pytest.raises(KernelCalled):
      fp8lab.quantize(x, fmt, **kw)
  got = fp8lab.quantize(x, "mxfp4", hadamard=64)
  want = fp8lab.quantize(x, "mxfp4", hadamard=64, implementation="reference")
  assert np.asarray(got.data).tobytes() == np.asarray(want.data).tobytes()
  # 2^31 elements and more: not served (int32 offsets), so None is the golden model there
  big = jax.eval_shape(lambda v: fp8lab.quantize(v, "mxfp8", implementation="reference"),
                       jax.ShapeDtypeStruct((65536, 32768), jnp.bfloat16))
  assert "int32" in qop.kernel_serves(big, ndim=2, transpose=False, has_scale=False)
  small = jax.eval_shape(lambda v: fp8lab.quantize(v, "mxfp8", implementation="reference"),
                         jax.ShapeDtypeStruct((65536, 32767), jnp.bfloat16))
  assert qop.kernel_serves(small, ndim=2, transpose=False, has_scale=False) is None


# ----------------------------------------------------------------------------------------
# The Pallas implementation against the reference, byte for byte (interpret mode on a CPU,
# compiled with FP8LAB_GPU_TESTS=1).

from fp8lab_tests.switches import ON_GPU  # noqa: E402


def _specials_x(shape, seed, dtype=np.float32) -> np.ndarray:
  """Normal values over many binades with NaN, +-Inf, -0, float32 subnormals and a saturating
  value placed in."""
  x = _x(shape, seed).astype(np.float32)
  flat = x.reshape(-1)
  rng = np.random.default_rng(seed + 100)
  picks = rng.choice(flat.size, 8, replace=False)
  flat[picks] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 1e-40, -3e-39, 6e4]
  return flat.reshape(shape).astype(dtype)


def _state(fmt, n=8):
  s = fp8lab.DelayedScaling.create(fmt, n)
  hist = np.linspace(0.5, 40.0, n).astype(np.float32)
  return dataclasses.replace(s, amax_history=jnp.asarray(hist), scale=jnp.float32(9.5))


_KERNEL_CASES = {
    "e4m3_delayed_t": ("e4m3", dict(scaling="delayed", transpose=True)),
    "e4m3_current_margin": ("e4m3", dict(margin=1)),
    "e5m2_given_bf16": ("e5m2", dict(scaling=np.float32(0.75), dtype="bfloat16")),
    "mxfp8_rceil_t": ("mxfp8", dict(scale_mode="rceil", transpose=True)),
    "mxfp8_e5m2_even_3d": ("mxfp8_e5m2", dict(scale_mode="even", shape=(3, 5, 64))),
    "mxfp4_ceil_sr": ("mxfp4", dict(scale_mode="ceil", rounding="stochastic")),
    "nvfp4_current_f16": ("nvfp4", dict(dtype="float16")),
    "nvfp4_delayed_t": ("nvfp4", dict(scaling="delayed", transpose=True)),
    "nvfp4_2d_t_sr": ("nvfp4", dict(block_shape=(16, 16), transpose=True,
                                    rounding="stochastic")),
    "e4m3_sr_t": ("e4m3", dict(scaling=np.float32(3.0), rounding="stochastic",
                               transpose=True)),
}


@pytest.mark.parametrize("case", sorted(_KERNEL_CASES))
def test_pallas_matches_reference(case):
  fmt, kw = _KERNEL_CASES[case]
  kw = dict(kw)
  shape = kw.pop("shape", (40, 96))
  dtype = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16,
           "float16": np.float16}[kw.pop("dtype", "float32")]
  x = jnp.asarray(_specials_x(shape, seed=len(case), dtype=dtype))
  if kw.get("scaling") == "delayed":
    kw["scaling"] = _state(fmt)
  if kw.get("rounding") == "stochastic":
    kw["key"] = jax.random.key(7)
  want = fp8lab.quantize_with_amax(x, fmt, implementation="reference", **kw)
  got = fp8lab.quantize_with_amax(x, fmt, implementation="pallas", interpret=not ON_GPU, **kw)
  assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
  for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    g, w = np.asarray(g), np.asarray(w)
    assert g.dtype == w.dtype and g.shape == w.shape
    np.testing.assert_array_equal(g.reshape(-1).view(np.uint8), w.reshape(-1).view(np.uint8))


def test_pallas_under_jit_is_deterministic():
  x = jnp.asarray(_specials_x((24, 64), seed=3))
  f = jax.jit(lambda v: fp8lab.quantize(v, "nvfp4", implementation="pallas",
                                        interpret=not ON_GPU))
  a, b = f(x), f(x)
  for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    assert np.asarray(u).tobytes() == np.asarray(v).tobytes()


def test_pallas_rejects_blockwise_lengths_it_does_not_tile():
  with pytest.raises(ValueError, match="does not serve 'e4m3_block'"):
    fp8lab.quantize(np.ones((4, 160), np.float32), "e4m3_block", block_shape=(80,),
                    implementation="pallas", interpret=True)


# By default the two with an NVFP4 / per-tensor scale (random and fixed signs); the MX two
# (default and fixed signs) with FP8LAB_SLOW_TESTS=1 and on the GPU.
@pytest.mark.parametrize("fmt, block, signs, scaling", [
    pytest.param("mxfp4", 32, None, None, marks=pytest.mark.slow),
    pytest.param("mxfp8", 32, "fixed", None, marks=pytest.mark.slow),
    ("nvfp4", 16, "random", "delayed"),
    ("e4m3", 16, "fixed", np.float32(4.0)),
])
def test_pallas_fused_hadamard_matches_reference(fmt, block, signs, scaling):
  x = jnp.asarray(_specials_x((24, 64), seed=block + len(fmt)))
  sign_arg = jax.random.key(5) if signs == "random" else signs
  spec = fp8lab.HadamardSpec.from_signs(block, sign_arg)
  kw = dict(hadamard=spec, rounding="stochastic", key=jax.random.key(2))
  if scaling is not None:
    kw["scaling"] = _state(fmt) if isinstance(scaling, str) else scaling
  want = fp8lab.quantize_with_amax(x, fmt, implementation="reference", **kw)
  got = fp8lab.quantize_with_amax(x, fmt, implementation="pallas", interpret=not ON_GPU, **kw)
  for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    g, w = np.asarray(g), np.asarray(w)
    np.testing.assert_array_equal(g.reshape(-1).view(np.uint8), w.reshape(-1).view(np.uint8))


@pytest.mark.parametrize("kwargs, match", [
    (dict(hadamard=64), "16 and 32"),
    (dict(hadamard=32, transpose=True), "transpose"),
])
def test_pallas_hadamard_limits(kwargs, match):
  with pytest.raises(ValueError, match=match):
    fp8lab.quantize_with_amax(np.ones((8, 128), np.float32), "mxfp4", implementation="pallas",
                              interpret=True, **kwargs)
  with pytest.raises(ValueError, match="current scale"):
    fp8lab.quantize_with_amax(np.ones((8, 128), np.float32), "nvfp4", hadamard=16,
                              implementation="pallas", interpret=True)


@pytest.mark.parametrize("fmt, n, algo, margin", [
    ("e4m3", 5, "max", 0), ("e5m2", 8, "most_recent", 2), ("nvfp4", 1024, "max", 0),
    ("e4m3", 1, "max", -1)])
def test_kernel_folds_the_delayed_update_in_its_launch(fmt, n, algo, margin):
  """The pallas path's state (the update folded into the launch: atomic amax, the last
  program rolls the history and computes the scale) against DelayedScaling.update, over
  amaxes with hard bit patterns (0, the smallest subnormal, a subnormal, FLT_MAX, 1.0) and
  random ones, old histories with zeros, and codes / amax against the reference."""
  rng = np.random.default_rng(n)
  state = fp8lab.DelayedScaling.create(fmt, n, margin=margin, amax_compute_algo=algo)
  specials = [0, 1, 0x00400000, 0x7F7FFFFF, 0x3F800000]
  amaxes = specials + list(rng.integers(0, 0x7F800000, 5, dtype=np.uint64))
  for i, a in enumerate(amaxes):
    x = (rng.standard_normal((16, 64)) * 0.01).astype(np.float32)
    amax = np.uint32(a).view(np.float32)
    x = np.where(np.abs(x) < amax, x, np.float32(0)) if a else np.zeros_like(x)
    x[i % 16, (7 * i) % 64] = -amax if i % 2 else amax
    hist = rng.uniform(0, 500, n).astype(np.float32)
    if i % 3 == 0:
      hist[rng.integers(n)] = np.float32(0)
    st = dataclasses.replace(state, amax_history=jnp.asarray(hist),
                             scale=jnp.float32(rng.uniform(0.1, 9)))
    got = fp8lab.quantize_with_amax(x, fmt, scaling=st, implementation="pallas",
                                    interpret=not ON_GPU)
    want = fp8lab.quantize_with_amax(x, fmt, scaling=st, implementation="reference")
    assert np.asarray(got.amax).view(np.uint32) == np.uint32(a), (i, a)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
      assert np.asarray(g).tobytes() == np.asarray(w).tobytes(), (i, a)


@pytest.mark.parametrize("fmt", ["mxfp8", "e4m3"])
def test_pallas_under_vmap_matches_reference(fmt):
  """A vmapped quantize_with_amax: per-example amax, scales and codes, as the reference."""
  x = jnp.asarray(_specials_x((3, 8, 64), seed=11))
  got = jax.vmap(lambda v: fp8lab.quantize_with_amax(v, fmt, implementation="pallas",
                                                     interpret=not ON_GPU))(x)
  want = jax.vmap(lambda v: fp8lab.quantize_with_amax(v, fmt, implementation="reference"))(x)
  assert got.amax.shape == (3,)
  for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    assert np.asarray(g).tobytes() == np.asarray(w).tobytes()


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_gemv_packed_takes_kernel_made_weights(fmt):
  """gemv_packed over a weight quantized by the kernel: the same QuantizedArray, so the same
  product as over the golden model's weight, bit for bit (reference path)."""
  w = jnp.asarray(_x((16, 64), seed=12))
  v = jnp.asarray(_x((64,), seed=13))
  qk = fp8lab.quantize(w, fmt, implementation="pallas", interpret=not ON_GPU)
  qr = fp8lab.quantize(w, fmt, implementation="reference")
  yk = fp8lab.gemv_packed(qk, v, implementation="reference")
  yr = fp8lab.gemv_packed(qr, v, implementation="reference")
  np.testing.assert_array_equal(np.asarray(yk).view(np.uint32), np.asarray(yr).view(np.uint32))
  assert np.asarray(yk).any()
