"""fp8lab.quantized_matmul and the training recipes (fp8lab/training.py, docs/training.md).

The references are float64 numpy GEMMs over operands that the golden model
(fp8lab.quantized.quantize, called here with the arguments the recipe's documented record
gives) quantizes and dequantizes; the delayed-scaling states are the golden
DelayedScaling.update chain computed here from the step inputs. Bounds (float32 accumulation):
with u = 2^-24 and gamma_n = n u / (1 - n u), a GEMM with contraction length c over operand
values A, B returns within gamma_(c+6) * (|A| @ |B|) of the float64 product: gamma_(c-1) for the
float32 sum of c exact (fp8 codes) or once-rounded (dequantized float32) products, two
roundings for the two tensor scales of the FP8 GEMM, two for the reference's dequantized
values fl(code * scale) against the codes' exact values, and second-order terms. The data
keep every product a normal float32 (XLA:CPU flushes subnormals).
"""

from __future__ import annotations

import os
import sysconfig

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from fp8lab import quantized as golden
from fp8lab import training
from fp8lab.numerics.hadamard import HadamardSpec
from fp8lab.numerics.scales import DelayedScaling, tensor_amax
from fp8lab_tests import switches

M, K, N = 32, 64, 32
_U = 2.0**-24


def _gamma(n: int) -> float:
  return n * _U / (1 - n * _U)


def _data(seed: int, m=M, k=K, n=N):
  ks = jax.random.split(jax.random.key(seed), 3)
  x = jax.random.normal(ks[0], (m, k), jnp.float32)
  w = jax.random.normal(ks[1], (k, n), jnp.float32) / 8
  c = jax.random.normal(ks[2], (m, n), jnp.float32) / 64      # dL/dy of sum(y * c)
  return x, w, c


def _bits(a):
  return np.asarray(a).view(np.uint32)


def _deq64(q):
  return np.asarray(golden.dequantize(q), np.float64)


def _ref_quantize(a, op, key, scale=None, rotate=False):
  """Q(a) along its last axis by the record `op`, with the golden model."""
  kw = dict(block_shape=op.block_shape, scale_mode=op.scale_mode, rounding=op.rounding,
            scale=scale)
  if op.rounding == "stochastic":
    kw["key"] = key
  if rotate and op.hadamard is not None:
    kw["hadamard"] = op.hadamard
  return golden.quantize(a, op.format, **kw)


# On a GPU, XLA's FP8 GEMM (cuBLASLt, fast accumulation) does not accumulate in full float32:
# DeepSeek-V3 reports about 14 retained bits in Hopper's FP8 MMA accumulation. There the FP8
# recipes are held to u = 2^-12 (an assumption with two bits of slack, not a derivation).
_U_FP8_GPU = 2.0**-12


def _check_gemm(got, a64, b64, exact64, what, fp8=False):
  """got ~ a64 @ b64.T within the bound, and the bound tells the quantized product from the
  unquantized one (exact64) somewhere, so the check could fail."""
  ref = a64 @ b64.T
  n = a64.shape[1] + 6
  gamma = n * _U_FP8_GPU / (1 - n * _U_FP8_GPU) if fp8 and switches.ON_GPU else _gamma(n)
  bound = gamma * (np.abs(a64) @ np.abs(b64).T)
  err = np.abs(np.asarray(got, np.float64) - ref)
  assert np.all(err <= bound), f"{what}: worst excess {np.max(err - bound)}"
  assert np.any(np.abs(exact64 - ref) > bound), f"{what}: the bound cannot see quantization"


def _delayed_states():
  """A MatmulState of fp8_delayed with scales that are not 1 (one update each)."""
  st = training.init_state("fp8_delayed", history_length=4)
  return training.MatmulState(st.x.update(jnp.float32(3.0)), st.w.update(jnp.float32(0.25)),
                              st.grad.update(jnp.float32(0.04)))


def _loss_and_grads(recipe, x, w, c, state, key, **kw):
  def loss(x, w, state):
    y, new_state = fp8lab.quantized_matmul(x, w, recipe=recipe, state=state, key=key, **kw)
    return jnp.sum(y * c), (y, new_state)
  argnums = (0, 1, 2) if state is not None else (0, 1)
  (_, (y, new_state)), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(
      x, w, state)
  return y, new_state, grads


def test_recipe_records():
  """The records say what docs/training.md says (written out here by hand)."""
  facts = {  # role: (format, scaling, block_shape, rounding, Hadamard block); gemm
      "fp8_delayed": ([("e4m3", "delayed", None, "nearest", None),
                       ("e4m3", "delayed", None, "nearest", None),
                       ("e5m2", "delayed", None, "nearest", None)], "fp8"),
      "fp8_current": ([("e4m3", "current", None, "nearest", None)] * 3, "fp8"),
      "fp8_blockwise": ([("e4m3_block", "block", (128,), "nearest", None),
                         ("e4m3_block", "block", (128, 128), "nearest", None),
                         ("e4m3_block", "block", (128,), "nearest", None)], "emulated"),
      "mxfp4_sr_hadamard": ([("mxfp4", "block", None, "nearest", 32),
                             ("mxfp4", "block", None, "nearest", None),
                             ("mxfp4", "block", None, "stochastic", 32)], "emulated"),
      "nvfp4_te": ([("nvfp4", "current", (16,), "nearest", 16),
                    ("nvfp4", "current", (16, 16), "nearest", None),
                    ("nvfp4", "current", (16,), "stochastic", 16)], "emulated"),
  }
  assert tuple(fp8lab.RECIPES) == tuple(facts)
  for name, (ops, gemm) in facts.items():
    r = fp8lab.get_recipe(name)
    assert r.gemm == gemm
    for op, (fmt, scaling, block, rounding, had) in zip(r.operands(), ops):
      assert (op.format, op.scaling, op.block_shape, op.rounding) == (fmt, scaling, block,
                                                                      rounding)
      assert (op.hadamard is None) == (had is None)
      if had is not None:
        assert op.hadamard == HadamardSpec(had, "fixed")


# nvfp4_te's golden model takes ~15 s to compile its six operands on the CPU: its gradients
# (and its forward alone, test_nvfp4_te_forward_against_float64) run with FP8LAB_SLOW_TESTS=1.
@pytest.mark.parametrize("recipe", [pytest.param(r, marks=pytest.mark.slow) if r == "nvfp4_te"
                                    else r for r in training.RECIPE_NAMES])
def test_forward_and_gradients_against_float64(recipe):
  """y, dx, dw against float64 GEMMs over the golden model's operands of the recipe; the
  delayed states against the golden update."""
  r = fp8lab.get_recipe(recipe)
  x, w, c = _data(1)
  key = jax.random.key(7)
  state = _delayed_states() if r.delayed_roles else None
  y, new_state, grads = _loss_and_grads(recipe, x, w, c, state, key)
  kx, kw, kg = (jax.random.fold_in(key, i) for i in range(3))
  sc = (lambda role: getattr(state, role).scale) if state is not None else (lambda role: None)
  qx = _ref_quantize(x, r.x, kx, sc("x"))
  qw_t = _ref_quantize(w.T, r.w, kw, sc("w"))
  qg = _ref_quantize(c, r.grad, kg, sc("grad"))
  qw = _ref_quantize(w, r.w, kw, sc("w"))
  qx_t = _ref_quantize(x.T, r.x, kx, sc("x"), rotate=True)
  qg_t = _ref_quantize(c.T, r.grad, kg, sc("grad"), rotate=True)
  x64, w64, c64 = (np.asarray(a, np.float64) for a in (x, w, c))
  fp8 = r.gemm == "fp8"
  _check_gemm(y, _deq64(qx), _deq64(qw_t), x64 @ w64, "y", fp8)
  _check_gemm(grads[0], _deq64(qg), _deq64(qw), c64 @ w64.T, "dx", fp8)
  _check_gemm(grads[1], _deq64(qx_t), _deq64(qg_t), x64.T @ c64, "dw", fp8)
  if state is None:
    assert new_state is None
    return
  want = training.MatmulState(state.x.update(tensor_amax(x)), state.w.update(tensor_amax(w)),
                              state.grad.update(tensor_amax(c)))
  for role in ("x", "w"):                          # the forward's new_state
    for got, ref in zip(jax.tree.leaves(getattr(new_state, role)),
                        jax.tree.leaves(getattr(want, role))):
      np.testing.assert_array_equal(_bits(got), _bits(ref))
  np.testing.assert_array_equal(_bits(new_state.grad.scale), _bits(state.grad.scale))
  for got, ref in zip(jax.tree.leaves(grads[2]), jax.tree.leaves(want)):   # the next state
    np.testing.assert_array_equal(_bits(got), _bits(ref))


def test_delayed_state_after_steps_equals_the_golden_chain():
  """A jitted training loop (SGD on w, fresh x and gradients each step) threads the state by
  its cotangent; after N steps the histories and scales are byte-equal to DelayedScaling's
  update chain over the steps' amaxes, computed here."""
  steps, history = 5, 4

  @jax.jit
  def step(w, state, x, c):
    def loss(w, state):
      y, _ = fp8lab.quantized_matmul(x, w, recipe="fp8_delayed", state=state)
      return jnp.sum(y * c)
    l, (dw, next_state) = jax.value_and_grad(loss, argnums=(0, 1))(w, state)
    return w - 0.5 * dw, next_state, l

  _, w, _ = _data(2)
  state = fp8lab.init_state("fp8_delayed", history_length=history)
  chain = [DelayedScaling.create(f, history) for f in ("e4m3", "e4m3", "e5m2")]
  losses = []
  for t in range(steps):
    x, _, c = _data(10 + t)
    x = x * (t + 1)                                # the amax changes from step to step
    for i, a in enumerate((x, w, c)):
      chain[i] = chain[i].update(tensor_amax(a))
    w, state, l = step(w, state, x, c)
    losses.append(float(l))
  assert np.all(np.isfinite(losses))
  for got, ref in zip(state, chain):
    np.testing.assert_array_equal(_bits(got.amax_history), _bits(ref.amax_history))
    np.testing.assert_array_equal(_bits(got.scale), _bits(ref.scale))
  assert all(float(s.scale) != 1.0 for s in state)


@pytest.mark.slow           # ~8 s of nvfp4 compiles on the CPU; the file's budget is 40 s
def test_nvfp4_te_forward_against_float64():
  r = fp8lab.get_recipe("nvfp4_te")
  x, w, _ = _data(1)
  y, new_state = fp8lab.quantized_matmul(x, w, recipe=r, key=jax.random.key(7))
  assert new_state is None
  qx = _ref_quantize(x, r.x, None)
  qw_t = _ref_quantize(w.T, r.w, None)
  x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
  _check_gemm(y, _deq64(qx), _deq64(qw_t), x64 @ w64, "y")


@pytest.mark.parametrize("recipe", [pytest.param("fp8_current", marks=pytest.mark.slow),
                                    "fp8_delayed"])
def test_jit_equals_eager(recipe):
  x, w, c = _data(3)
  state = _delayed_states() if recipe == "fp8_delayed" else None
  eager = _loss_and_grads(recipe, x, w, c, state, None)
  jitted = jax.jit(lambda x, w, c, s: _loss_and_grads(recipe, x, w, c, s, None))(x, w, c, state)
  (y, new_state, grads), (y_j, new_state_j, grads_j) = eager, jitted
  for a, b in ((y, y_j), (grads[0], grads_j[0]), (grads[1], grads_j[1])):
    if switches.ON_GPU:
      # Under jit XLA may fold the two tensor scales into the cuBLASLt call (one rounding
      # fewer than eager's two multiplies): the GEMM outputs agree to float32 roundings there.
      np.testing.assert_allclose(a, b, rtol=0, atol=2.0**-21 * float(jnp.max(jnp.abs(a))))
    else:
      np.testing.assert_array_equal(_bits(a), _bits(b))
  for a, b in zip(jax.tree.leaves((new_state, grads[2:])), jax.tree.leaves((new_state_j,
                                                                             grads_j[2:]))):
    np.testing.assert_array_equal(_bits(a), _bits(b))


def test_batched_bfloat16_input():
  """x (..., k) in bfloat16: y keeps the leading axes and the dtype, and equals the 2D call."""
  x, w, _ = _data(4)
  xb = x.astype(jnp.bfloat16).reshape(2, M // 2, K)
  y, _ = fp8lab.quantized_matmul(xb, w.astype(jnp.bfloat16), recipe="fp8_current")
  y2, _ = fp8lab.quantized_matmul(xb.reshape(M, K), w.astype(jnp.bfloat16), recipe="fp8_current")
  assert y.shape == (2, M // 2, N) and y.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(y).view(np.uint16).reshape(M, N),
                                np.asarray(y2).view(np.uint16))


def test_interpret_kernel_refuses_what_it_does_not_serve():
  """nvfp4_te's rotated operand needs current scaling of the rotated tensor, which the kernel
  does not fuse: a clear error before any work, not a silent fallback."""
  x, w, _ = _data(6)
  with pytest.raises(ValueError, match="cannot serve recipe .nvfp4_te.: x .its rotated"):
    fp8lab.quantized_matmul(x, w, recipe="nvfp4_te", key=jax.random.key(0),
                            implementation="pallas", interpret=True)


def test_dense_layer():
  """fp8lab.nn.Dense: its call is quantized_matmul's; its gradient carries the next state."""
  layer = fp8lab.nn.Dense.create(jax.random.key(0), K, N, recipe="fp8_delayed",
                                 history_length=4)
  x, _, c = _data(7)
  grads = jax.grad(lambda l: jnp.sum(l(x)[0] * c))(layer)
  _, _, (_, dw, next_state) = _loss_and_grads("fp8_delayed", x, layer.w, c, layer.state, None)
  np.testing.assert_array_equal(_bits(grads.w), _bits(dw))
  new = layer.apply_update(grads, layer.w - grads.w)
  for a, b in zip(jax.tree.leaves(new.state), jax.tree.leaves(next_state)):
    np.testing.assert_array_equal(_bits(a), _bits(b))
  plain = fp8lab.nn.Dense.create(jax.random.key(0), K, N, recipe=None)
  np.testing.assert_array_equal(_bits(plain(x)[0]), _bits(x @ plain.w))


def test_errors():
  x, w, _ = _data(8)
  qmm = fp8lab.quantized_matmul
  with pytest.raises(ValueError, match="unknown recipe 'fp9'.*fp8_delayed"):
    qmm(x, w, recipe="fp9")
  with pytest.raises(ValueError, match="w must be 2D"):
    qmm(x, w[:, 0], recipe="fp8_current")
  with pytest.raises(ValueError, match="must share k"):
    qmm(x, w[1:], recipe="fp8_current")
  with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
    qmm(x.astype(jnp.int32), w, recipe="fp8_current")
  with pytest.raises(ValueError, match="pass state=fp8lab.init_state"):
    qmm(x, w, recipe="fp8_delayed")
  with pytest.raises(ValueError, match="no delayed-scaling operand"):
    qmm(x, w, recipe="fp8_current", state=fp8lab.init_state("fp8_delayed"))
  st = fp8lab.init_state("fp8_delayed")
  with pytest.raises(ValueError, match="state.grad = a DelayedScaling of 'e5m2'"):
    qmm(x, w, recipe="fp8_delayed", state=st._replace(grad=st.x))
  with pytest.raises(TypeError, match="MatmulState"):
    qmm(x, w, recipe="fp8_delayed", state=tuple(st))
  with pytest.raises(ValueError, match="needs a float32 amax_history"):
    bad = st._replace(x=DelayedScaling(jnp.zeros((2, 3)), st.x.scale, "e4m3"))
    qmm(x, w, recipe="fp8_delayed", state=bad)
  with pytest.raises(ValueError, match="rounds stochastically: pass key"):
    qmm(x, w, recipe="mxfp4_sr_hadamard")
  with pytest.raises(ValueError, match="Hadamard blocks of 32; the 31 tokens"):
    qmm(x[:31], w, recipe="mxfp4_sr_hadamard", key=jax.random.key(0))
  with pytest.raises(ValueError, match="takes scaling 'block'"):
    training.OperandRecipe("mxfp4", "delayed")
  with pytest.raises(ValueError, match="gemm 'emulated'"):
    e4 = training.OperandRecipe("e4m3", "current")
    training.Recipe("bad", e4, e4, training.OperandRecipe("mxfp4", "block"), "fp8")
  with pytest.raises(ValueError, match="weight takes no Hadamard"):
    had = training.OperandRecipe("mxfp4", "block", hadamard=HadamardSpec(32))
    training.Recipe("bad", had, had, had, "emulated")


# Last in the file: interpret mode fills JAX's compilation caches with the kernels' small
# programs and evicts the golden model's, which the tests above share.
_INTERPRET_RECIPES = [pytest.param("fp8_delayed"),
                      pytest.param("fp8_current", marks=pytest.mark.slow),
                      pytest.param("mxfp4_sr_hadamard", marks=pytest.mark.slow),
                      pytest.param("fp8_blockwise", marks=pytest.mark.slow)]


@pytest.mark.parametrize("recipe", _INTERPRET_RECIPES)
def test_interpret_kernels_equal_reference(recipe):
  """The Pallas quantize kernels (interpret mode; compiled on a GPU run) give the golden
  path's y, gradients and states bit for bit."""
  x, w, c = _data(5)
  state = _delayed_states() if recipe == "fp8_delayed" else None
  key = jax.random.key(3)
  outs = [_loss_and_grads(recipe, x, w, c, state, key, implementation=impl, interpret=interp)
          for impl, interp in (("reference", False), ("pallas", not switches.ON_GPU))]
  for a, b in zip(*(jax.tree.leaves(o) for o in outs)):
    np.testing.assert_array_equal(_bits(a), _bits(b))


@switches.gpu
@pytest.mark.parametrize("recipe", ["fp8_delayed", "fp8_current"])
def test_fp8_recipes_compile_to_fp8_gemms(recipe):
  """On the GPU the forward and both backward GEMMs of the FP8 recipes are FP8 GEMMs in the
  compiled HLO: cuBLASLt FP8 calls, or (at this small M, as the H200 compiles it) XLA's
  Triton GEMM fusions over the fp8 operands; none of them a float32 or bf16 dot."""
  from benchmarks import train_data as bench_train
  x, w, c = (a.astype(jnp.bfloat16) for a in _data(9, 256, 256, 256))
  state = fp8lab.init_state(recipe)
  f = jax.jit(lambda x, w, s: _loss_and_grads(recipe, x, w, c, s, None))
  counts = bench_train.fp8_gemm_counts(f.lower(x, w, state).compile().as_text())
  assert counts["fp8_gemms"] >= 3, counts


def test_bench_helpers():
  """bench_train's HLO counter on hand-written HLO lines, and its corpus: the interpreter's
  own stdlib sources, bytes in file order."""
  from benchmarks import train_data as bench_train
  hlo = "\n".join([
      '%a = f8e4m3fn[8,16]{1,0} bitcast(%p)',
      '%g = (f32[8,8]{1,0}, s8[0]) custom-call(%a, %b), '
      'custom_call_target="__cublas$lt$matmul$f8"',
      '%h = (bf16[8,8]{1,0}, s8[0]) custom-call(%c, %d), custom_call_target="__cublas$gemm"',
      '%d = f32[8,8]{1,0} dot(%e, %f), lhs_contracting_dims={1}, rhs_contracting_dims={1}',
      # a Triton GEMM fusion's computation: one dot over two fp8 parameters, one over a
      # float32 and an fp8 one (not an fp8 GEMM), then a computation reusing the names
      '%gemm_fusion_dot_computation (parameter_0: f8e4m3fn[32,256], parameter_1: '
      'f8e5m2[64,256]) -> f32[32,64] {',
      '  %parameter_0 = f8e4m3fn[32,256]{1,0} parameter(0)',
      '  %parameter_1 = f8e5m2[64,256]{1,0} parameter(1)',
      '  %p2 = f32[64,256]{1,0} parameter(2)',
      '  %dot.4 = f32[32,64]{1,0} dot(%parameter_0, %parameter_1), lhs_contracting_dims={1}',
      '  ROOT %dot.5 = f32[32,64]{1,0} dot(%parameter_0, %p2), lhs_contracting_dims={1}',
      '}',
      '%other (parameter_0: f32[32,256], parameter_1: f32[64,256]) -> f32[32,64] {',
      '  %parameter_0 = f32[32,256]{1,0} parameter(0)',
      '  %parameter_1 = f32[64,256]{1,0} parameter(1)',
      '  ROOT %dot.6 = f32[32,64]{1,0} dot(%parameter_0, %parameter_1), lhs_contracting_dims={1}',
      '}'])
  assert bench_train.fp8_gemm_counts(hlo) == {"cublas_f8": 1, "fp8_dots": 1, "fp8_gemms": 2,
                                              "cublas_gemm": 2, "dot": 4,
                                              "f8_instructions": 3}
  corpus, source = bench_train.stdlib_corpus(4096)
  assert corpus.dtype == np.uint8 and corpus.size == source["bytes"] == 4096
  assert source["root"] == sysconfig.get_paths()["stdlib"]
  assert os.path.isdir(source["root"]) and source["files"] >= 1
