"""Quantized training: recipes and `quantized_matmul`, a linear layer's GEMMs forward and backward.

`quantized_matmul(x, w, recipe=..., state=...)` computes y = x @ w with x (..., k), w (k, n),
differentiable in x and w (a custom_vjp). docs/training.md describes the recipes, the state
mechanism and which GEMMs are real FP8; in short, with x flattened to (m, k) and g = dL/dy:

  forward   y  = Q(x) @ Q(w)          contraction over k: Q(x) (m, k), Q(w).T (n, k)
  data grad dx = Q(g) @ Q(w).T        contraction over n: Q(g) (m, n), Q(w) (k, n)
  wgrad     dw = Q(x).T @ Q(g)        contraction over m: Q(x).T (k, m), Q(g).T (n, m)

Every GEMM receives both operands quantized (and packed) along its contraction axis: one
`quantize_with_amax(..., transpose=True)` call per tensor gives both orientations from the
same read of x, w and g. Operands with a Hadamard rotation on their weight-gradient
orientation are the exception (the op rotates both orientations or neither): their
weight-gradient orientation is a second quantize of the transposed tensor.

GEMMs: recipes whose three operands are per-tensor e4m3 / e5m2 ("fp8_delayed",
"fp8_current") run XLA's FP8 dot (`lax.dot_general` on the codes bitcast to
jnp.float8_e4m3fn / float8_e5m2, float32 accumulation, the two tensor scales applied to the
float32 result): cuBLASLt's FP8 GEMM on Hopper. The blockwise and FP4 recipes run a float32
GEMM (precision HIGHEST) over the dequantized operands: the quantized operands are bit for
bit the recipe's, the GEMM is an emulation for accuracy studies, not for speed.

Delayed scaling: `state` is a `MatmulState` (a DelayedScaling per operand, None where the
recipe scales currently). The x and w states are updated in the forward pass and returned as
`new_state`; the gradient's state is updated in the backward pass, where the gradient's amax
is known, and leaves the custom_vjp as the "cotangent" of the `state` argument: the
gradient of the loss with respect to the state IS the next state (all three operands), the
"overwrite with gradient" convention of Flax's and Transformer Engine JAX's fp8 meta.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from fp8lab.formats import QUANTIZED, get_quantized_format
from fp8lab.numerics.codec import INPUT_DTYPES
from fp8lab.numerics.hadamard import HadamardSpec
from fp8lab.numerics.scales import DelayedScaling
from fp8lab.ops.quantize import kernel_serves, quantize, quantize_with_amax
from fp8lab.quantized import QuantizedArray, dequantize

__all__ = ["OperandRecipe", "Recipe", "RECIPES", "RECIPE_NAMES", "get_recipe", "MatmulState",
           "init_state", "quantized_matmul", "operand_keys", "GEMMS", "SCALINGS", "ROLES"]

ROLES = ("x", "w", "grad")
# How an operand's scale is chosen: "delayed" (a DelayedScaling state, per-tensor formats and
# nvfp4's S_enc), "current" (from this tensor's amax), "block" (block scales only: MX, blockwise).
SCALINGS = ("delayed", "current", "block")
# "fp8": XLA's FP8 dot on the packed codes; "emulated": float32 GEMM over dequantized values.
GEMMS = ("fp8", "emulated")
_FP8_GEMM_FORMATS = ("e4m3", "e5m2")      # per-tensor formats whose codes XLA's dot takes


@dataclasses.dataclass(frozen=True)
class OperandRecipe:
  """How one operand (x, w or the output gradient) is quantized.

  Attributes:
    format: a quantized format of `fp8lab.QUANTIZED_FORMATS`.
    scaling: one of SCALINGS; "delayed" and "current" for formats with a per-tensor scale
      ("e4m3", "e5m2", "nvfp4"), "block" for the formats with block scales only.
    block_shape: None for the format's default; (r, c) tiles (weights: nvfp4 (16, 16),
      e4m3_block (128, 128)) give both orientations the same tiles.
    scale_mode: the format's block-scale rule (None: its default).
    rounding: "nearest" or "stochastic" (both orientations round stochastically).
    hadamard: a HadamardSpec applied to the operand's weight-gradient orientation only (x.T
      and g.T, along the token axis m, which must be a multiple of its block); None for w.
  """
  format: str
  scaling: str
  block_shape: tuple[int, ...] | None = None
  scale_mode: str | None = None
  rounding: str = "nearest"
  hadamard: HadamardSpec | None = None

  def __post_init__(self):
    qf = get_quantized_format(self.format)
    if qf.scaling == "none":
      raise ValueError(f"{self.format!r} is a plain cast, not a training format")
    if self.scaling not in SCALINGS:
      raise ValueError(f"scaling must be one of {SCALINGS}, got {self.scaling!r}")
    per_tensor = qf.scaling in ("tensor", "nvfp4")
    if per_tensor == (self.scaling == "block"):
      want = "'delayed' or 'current'" if per_tensor else "'block'"
      raise ValueError(f"{self.format!r} (scaling {qf.scaling!r}) takes scaling {want}, got "
                       f"{self.scaling!r}")
    if self.block_shape is not None and not qf.allows_block_shape(tuple(self.block_shape)):
      raise ValueError(f"block_shape {self.block_shape} is not valid for {self.format!r}; "
                       f"allowed: {qf.allowed_block_shapes()}")
    if self.rounding not in ("nearest", "stochastic"):
      raise ValueError(f"rounding must be 'nearest' or 'stochastic', got {self.rounding!r}")
    if self.hadamard is not None and not isinstance(self.hadamard, HadamardSpec):
      raise ValueError(f"hadamard must be None or a HadamardSpec, got {self.hadamard!r}")
    if self.hadamard is not None and self.scaling == "delayed":
      # The rotated orientation has its own amax; one delayed state cannot serve both.
      raise ValueError("a Hadamard rotation goes with current or block scaling, not delayed")

  @property
  def stochastic(self) -> bool:
    return self.rounding == "stochastic"

  def quantize_kwargs(self, key) -> dict:
    kw = dict(block_shape=self.block_shape, scale_mode=self.scale_mode, rounding=self.rounding)
    if self.stochastic:
      kw["key"] = key
    return kw


@dataclasses.dataclass(frozen=True)
class Recipe:
  """A training recipe: the OperandRecipe of x, w and the output gradient, and the GEMM kind.

  `gemm` "fp8" needs three per-tensor e4m3 / e5m2 operands without a Hadamard rotation;
  every other recipe is "emulated"."""
  name: str
  x: OperandRecipe
  w: OperandRecipe
  grad: OperandRecipe
  gemm: str
  description: str = ""

  def __post_init__(self):
    if self.gemm not in GEMMS:
      raise ValueError(f"gemm must be one of {GEMMS}, got {self.gemm!r}")
    if self.w.hadamard is not None:
      raise ValueError("the weight takes no Hadamard rotation: it is no weight-gradient operand")
    if self.gemm == "fp8" and any(op.format not in _FP8_GEMM_FORMATS or op.hadamard is not None
                                  for op in self.operands()):
      raise ValueError("gemm 'fp8' runs XLA's FP8 dot on per-tensor e4m3 / e5m2 codes; "
                       "other formats need gemm 'emulated'")

  def operands(self) -> tuple[OperandRecipe, OperandRecipe, OperandRecipe]:
    return (self.x, self.w, self.grad)

  @property
  def delayed_roles(self) -> tuple[str, ...]:
    return tuple(r for r, op in zip(ROLES, self.operands()) if op.scaling == "delayed")

  @property
  def stochastic(self) -> bool:
    return any(op.stochastic for op in self.operands())


# Transformer Engine's NVFP4 "random Hadamard transform" uses one fixed sign vector, which is
# fp8lab's "fixed" signs (docs/numerics.md section 7); the paper's MXFP4 route fixes them too.
_HAD16 = HadamardSpec(16, "fixed")
_HAD32 = HadamardSpec(32, "fixed")

_RECIPES = (
    Recipe("fp8_delayed",
           OperandRecipe("e4m3", "delayed"), OperandRecipe("e4m3", "delayed"),
           OperandRecipe("e5m2", "delayed"), "fp8",
           "Transformer Engine's DelayedScaling with Format.HYBRID: e4m3 forward operands, "
           "e5m2 gradients, per-tensor scales from an amax history"),
    Recipe("fp8_current",
           OperandRecipe("e4m3", "current"), OperandRecipe("e4m3", "current"),
           OperandRecipe("e4m3", "current"), "fp8",
           "per-tensor current scaling, e4m3 everywhere"),
    Recipe("fp8_blockwise",
           OperandRecipe("e4m3_block", "block", (128,)),
           OperandRecipe("e4m3_block", "block", (128, 128)),
           OperandRecipe("e4m3_block", "block", (128,)), "emulated",
           "DeepSeek-V3 / Transformer Engine Float8BlockScaling: e4m3, float32 scales per "
           "1 x 128 block of activations and gradients along each GEMM's contraction axis, "
           "per 128 x 128 tile of the weights"),
    Recipe("mxfp4_sr_hadamard",
           OperandRecipe("mxfp4", "block", hadamard=_HAD32),
           OperandRecipe("mxfp4", "block"),
           OperandRecipe("mxfp4", "block", rounding="stochastic", hadamard=_HAD32), "emulated",
           "Format-aware fusion's MXFP4 route: MXFP4 everywhere, stochastic rounding of the "
           "gradients, a fixed-sign 32-point Hadamard on the weight-gradient operands"),
    Recipe("nvfp4_te",
           OperandRecipe("nvfp4", "current", (16,), hadamard=_HAD16),
           OperandRecipe("nvfp4", "current", (16, 16)),
           OperandRecipe("nvfp4", "current", (16,), rounding="stochastic", hadamard=_HAD16),
           "emulated",
           "Transformer Engine's NVFP4 recipe: 1 x 16 blocks for activations and gradients, "
           "16 x 16 weight tiles, stochastic rounding of the gradients, TE's 16-point Hadamard "
           "(its fixed sign vector) on the weight-gradient operands"),
)
RECIPES: dict[str, Recipe] = {r.name: r for r in _RECIPES}
RECIPE_NAMES = tuple(RECIPES)


def get_recipe(recipe) -> Recipe:
  """The Recipe of a name (or the Recipe itself).

  Raises:
    ValueError: an unknown name; the message lists the valid ones.
  """
  if isinstance(recipe, Recipe):
    return recipe
  if isinstance(recipe, str) and recipe in RECIPES:
    return RECIPES[recipe]
  raise ValueError(f"unknown recipe {recipe!r}; valid: {', '.join(RECIPE_NAMES)}")


class MatmulState(NamedTuple):
  """The delayed-scaling states of one quantized_matmul: a DelayedScaling per operand whose
  recipe scaling is "delayed", None for the others."""
  x: DelayedScaling | None
  w: DelayedScaling | None
  grad: DelayedScaling | None


def init_state(recipe, *, history_length: int = 16, margin: int = 0,
               amax_compute_algo: str = "max") -> MatmulState | None:
  """A fresh MatmulState for `recipe` (all-zero histories, scale 1), or None when the recipe
  has no delayed operand. Arguments as `fp8lab.DelayedScaling.create`."""
  r = get_recipe(recipe)
  if not r.delayed_roles:
    return None
  return MatmulState(*(
      DelayedScaling.create(op.format, history_length, margin, amax_compute_algo)
      if op.scaling == "delayed" else None for op in r.operands()))


def operand_keys(key):
  """The stochastic-rounding keys of x, w and the gradient: `jax.random.fold_in(key, i)` for
  i = 0, 1, 2 (both orientations of an operand round with its key, each by its own flat
  index). None for None."""
  if key is None:
    return None, None, None
  return tuple(jax.random.fold_in(key, i) for i in range(3))


def quantized_matmul(x, w, *, recipe, state: MatmulState | None = None, key=None,
                     implementation: str | None = None, interpret: bool = False):
  """y = x @ w with x, w and the output gradient quantized by `recipe`; returns (y, new_state).

  Args:
    x: (..., k) float32 / bfloat16 / float16.
    w: (k, n) float32 / bfloat16 / float16.
    recipe: a name of RECIPES or a Recipe.
    state: a MatmulState for recipes with delayed operands (`init_state(recipe)`), else None.
    key: a threefry key for recipes that round stochastically (`operand_keys` splits it;
      pass a fresh key every step); ignored by the others.
    implementation, interpret: passed to every quantize call (`fp8lab.quantize_with_amax`):
      None is the kernel on a GPU where it serves, "pallas" / interpret=True the kernel (an
      error for a call it does not serve), "reference" the golden model.

  Returns:
    (y, new_state): y (..., n) of dtype result_type(x, w); new_state the MatmulState with the
    x and w states updated by this step's amax, the gradient's as given (None without state).
    Under differentiation with respect to `state`, the state's cotangent is the whole next
    state: x, w as in new_state, the gradient's updated by the backward pass.

  Raises:
    ValueError: an unknown recipe; w not 2D, x without axes or x's last axis not w's first;
      a recipe with a Hadamard rotation and a token count (the product of x's leading axes)
      that is not a multiple of its block; a missing state (delayed recipes), a state for a
      recipe without delayed operands, or a state whose operands do not match the recipe; a
      stochastic recipe without a key; everything the quantize op checks.
    TypeError: x or w not float32 / bfloat16 / float16; a state that is not a MatmulState.
  """
  r = get_recipe(recipe)
  x = jnp.asarray(x)
  w = jnp.asarray(w)
  for name, a in (("x", x), ("w", w)):
    if a.dtype not in INPUT_DTYPES:
      raise TypeError(f"quantized_matmul: {name} must be float32, bfloat16 or float16, got "
                      f"{a.dtype}")
  if w.ndim != 2:
    raise ValueError(f"quantized_matmul: w must be 2D (k, n), got shape {w.shape}")
  if x.ndim < 1 or x.shape[-1] != w.shape[0]:
    raise ValueError(f"quantized_matmul: x (..., k) and w (k, n) must share k; got x "
                     f"{x.shape}, w {w.shape}")
  m = 1
  for d in x.shape[:-1]:
    m *= d
  for role, op in zip(ROLES, r.operands()):
    if op.hadamard is not None and m % op.hadamard.block:
      raise ValueError(f"recipe {r.name!r} rotates {role}'s weight-gradient operand along the "
                       f"token axis in Hadamard blocks of {op.hadamard.block}; the {m} tokens "
                       "(x's leading axes) are not a multiple of it")
  _check_state(r, state)
  if implementation == "pallas" or interpret:
    _check_kernel_serves(r, x.dtype, w.dtype, m, *w.shape)
  if r.stochastic and key is None:
    raise ValueError(f"recipe {r.name!r} rounds stochastically: pass key=jax.random.key(...) "
                     "(a fresh one every step)")
  keys = operand_keys(key) if r.stochastic else (None, None, None)
  out_dtype = jnp.result_type(x.dtype, w.dtype)
  y, new_state = _qmm(r, implementation, interpret, jnp.dtype(x.dtype), jnp.dtype(w.dtype),
                      jnp.dtype(out_dtype), x.reshape(m, x.shape[-1]), w, state, keys)
  return y.reshape(x.shape[:-1] + (w.shape[1],)), new_state


def _check_state(r: Recipe, state) -> None:
  delayed = r.delayed_roles
  if state is None:
    if delayed:
      raise ValueError(f"recipe {r.name!r} scales {', '.join(delayed)} with delayed scaling: "
                       f"pass state=fp8lab.init_state({r.name!r}) and thread it through steps")
    return
  if not delayed:
    raise ValueError(f"recipe {r.name!r} has no delayed-scaling operand: pass state=None")
  if not isinstance(state, MatmulState):
    raise TypeError(f"state must be a fp8lab.MatmulState (fp8lab.init_state), got "
                    f"{type(state).__name__}")
  for role, op, s in zip(ROLES, r.operands(), state):
    if op.scaling != "delayed":
      if s is not None:
        raise ValueError(f"recipe {r.name!r} scales {role} {op.scaling}ly: state.{role} must be "
                         f"None, got {type(s).__name__}")
    elif not isinstance(s, DelayedScaling) or s.format != op.format:
      got = s.format if isinstance(s, DelayedScaling) else type(s).__name__
      raise ValueError(f"recipe {r.name!r} needs state.{role} = a DelayedScaling of "
                       f"{op.format!r}, got {got!r}")


def _planned_calls(r: Recipe, x_dtype, w_dtype, m: int, k: int, n: int):
  """(role, what, abstract input, OperandRecipe, transpose, rotated) of every quantize call
  the recipe makes, in the order _quantize_both makes them."""
  shapes = {"x": ((m, k), x_dtype), "w": ((k, n), w_dtype),
            "grad": ((m, n), jnp.result_type(x_dtype, w_dtype))}
  for role, op in zip(ROLES, r.operands()):
    shape, dtype = shapes[role]
    a = jax.ShapeDtypeStruct(shape, dtype)
    if op.hadamard is None:
      yield role, "both orientations", a, op, True, False
    else:
      yield role, "its GEMM orientation", a, op, False, False
      yield role, "its rotated weight-gradient orientation", jax.ShapeDtypeStruct(
          shape[::-1], dtype), op, False, True


def _check_kernel_serves(r: Recipe, x_dtype, w_dtype, m: int, k: int, n: int) -> None:
  """Raises before any work when the quantize kernel cannot serve one of the recipe's calls
  (implementation "pallas" or interpret=True), instead of the quantize op raising midway."""
  for role, what, a, op, transpose, rotated in _planned_calls(r, x_dtype, w_dtype, m, k, n):
    qf = get_quantized_format(op.format)
    # The metadata kernel_serves reads (the golden model's defaults filled in), no tracing.
    meta = QuantizedArray(None, None, None, format=qf.name, element_format=qf.element.name,
                          shape=a.shape, axis=1, block_shape=op.block_shape or qf.block_shape,
                          scale_mode=op.scale_mode, hadamard=op.hadamard if rotated else None)
    why = kernel_serves(meta, ndim=2, transpose=transpose, has_scale=op.scaling == "delayed")
    if why is not None:
      raise ValueError(f"quantized_matmul: the quantize kernel cannot serve recipe {r.name!r}: "
                       f"{role} ({what}): {why}; use implementation=None or 'reference'")


def _quantize_both(a, op: OperandRecipe, scaling, key, impl, interpret):
  """(Q(a) along its last axis, Q(a.T) along a's first axis, the new DelayedScaling or None).

  One quantize_with_amax(transpose=True) read; with a Hadamard rotation on the transposed
  orientation only, that orientation is its own quantize of a.T."""
  kw = op.quantize_kwargs(key)
  if op.hadamard is None:
    res = quantize_with_amax(a, op.format, scaling=scaling, transpose=True,
                             implementation=impl, interpret=interpret, **kw)
    return res.q, res.q_t, res.scaling
  res = quantize_with_amax(a, op.format, scaling=scaling, implementation=impl,
                           interpret=interpret, **kw)
  q_t = quantize(a.T, op.format, hadamard=op.hadamard, implementation=impl, interpret=interpret,
                 **kw)
  return res.q, q_t, res.scaling


def _fp8_codes(q: QuantizedArray) -> jax.Array:
  """The element codes of a 2D per-tensor FP8 array as jnp.float8 values: its uint32 words
  bitcast (little-endian, the packing order), no arithmetic."""
  rows, cols = q.shape
  elems = lax.bitcast_convert_type(q.data, get_quantized_format(q.format).element.dtype)
  return elems.reshape(rows, -1)[:, :cols]


_CONTRACT_LAST = (((1,), (1,)), ((), ()))


def _gemm(a: QuantizedArray, b: QuantizedArray, gemm: str) -> jax.Array:
  """a @ b.T in float32 for a (p, c), b (q, c), both quantized along c (the contraction)."""
  if gemm == "fp8":
    acc = lax.dot_general(_fp8_codes(a), _fp8_codes(b), _CONTRACT_LAST,
                          preferred_element_type=jnp.float32)
    return acc * a.tensor_scale * b.tensor_scale
  return lax.dot_general(dequantize(a), dequantize(b), _CONTRACT_LAST,
                         precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3, 4, 5))
def _qmm(r, impl, interpret, x_dtype, w_dtype, out_dtype, x, w, state, keys):
  return _qmm_fwd(r, impl, interpret, x_dtype, w_dtype, out_dtype, x, w, state, keys)[0]


def _qmm_fwd(r, impl, interpret, x_dtype, w_dtype, out_dtype, x, w, state, keys):
  del x_dtype, w_dtype
  sx, sw, sg = (None, None, None) if state is None else state
  qx, qx_t, nsx = _quantize_both(x, r.x, sx, keys[0], impl, interpret)
  qw, qw_t, nsw = _quantize_both(w, r.w, sw, keys[1], impl, interpret)
  y = _gemm(qx, qw_t, r.gemm).astype(out_dtype)
  new_state = None if state is None else MatmulState(nsx, nsw, sg)
  return (y, new_state), (qx_t, qw, new_state, keys[2])


def _qmm_bwd(r, impl, interpret, x_dtype, w_dtype, out_dtype, res, cts):
  del out_dtype
  qx_t, qw, new_state, key_g = res
  g = cts[0]                  # the cotangent of new_state is ignored: it is no function of x, w
  sg = None if new_state is None else new_state.grad
  qg, qg_t, nsg = _quantize_both(g, r.grad, sg, key_g, impl, interpret)
  dx = _gemm(qg, qw, r.gemm).astype(x_dtype)
  dw = _gemm(qx_t, qg_t, r.gemm).astype(w_dtype)
  # The state's "cotangent" is the next state: the gradient's amax reaches it only here.
  state_ct = None if new_state is None else new_state._replace(grad=nsg)
  return dx, dw, state_ct, (None, None, None)       # the keys (integers) have no cotangent


_qmm.defvjp(_qmm_fwd, _qmm_bwd)
