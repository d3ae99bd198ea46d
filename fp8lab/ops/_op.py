"""Scaffolding shared by every op: argument checks, `implementation=` dispatch, the custom_vjp
through the golden reference, and the vmap rule that folds a vmapped batch into one call.

Every public op (fp8lab.gemv_packed today; quantize and attention next) is written as:

  1. checks of its arguments before anything is traced (shapes, dtypes, formats), raising
     TypeError / ValueError with the offending value;
  2. `resolve_implementation(op, implementation, interpret)`: the implementation to run;
  3. a forward function per implementation, on the op's static parameters and its operands;
  4. `reference_vjp(...)`: the same forward, differentiated through the reference (the golden
     model's path, written in plain jnp), so that every implementation has the reference's
     gradient;
  5. `fold_vmap(...)`: a vmap rule that folds a vmapped batch axis of the operands whose
     leading axes are already a batch (x rows, query tokens) into that batch, one call
     instead of one per example; other vmapped operands run one call per example.

Implementations (the `implementation` argument of every op):
  None         the default for the device: on a GPU each op's measured choice (gemv: its
               dispatch table, kernels/gemv/dispatch.py; quantize: the kernel where it
               serves the call; attention: the reference until its kernel is verified),
               the reference elsewhere (interpret=True: the kernel, in interpret mode);
  "pallas"     the Pallas kernel (Triton lowering; the only Pallas path for GPUs without
               fp8 units); on a machine without a GPU only with interpret=True;
  "xla"        plain jnp over the same packed bytes, bitcast to XLA's float8 / float4 dtypes
               and scaled inside XLA's fusion: the baseline a kernel must beat;
  "xla_parts"  gemv only: jnp as XLA's own float8-weight GEMV is written (bfloat16 dots,
               float32 accumulation), made exact: bfloat16-exact weight values and x as
               exact bfloat16 parts;
  "reference"  the golden model (exact dequantize, float32 at HIGHEST precision).
Backend-specific kernels (a Mosaic GPU one on Hopper) join KERNEL_IMPLEMENTATIONS.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["IMPLEMENTATIONS", "KERNEL_IMPLEMENTATIONS", "resolve_implementation",
           "reference_vjp", "fold_vmap", "on_gpu"]

# Implementations that run a Pallas kernel (interpret= applies to them).
KERNEL_IMPLEMENTATIONS = ("pallas",)
IMPLEMENTATIONS = (None, *KERNEL_IMPLEMENTATIONS, "xla", "xla_parts", "reference")


def on_gpu(sm: float | None = None) -> bool:
  """Whether JAX's default backend is a GPU (with sm: of at least that compute capability,
  e.g. 9.0 for Hopper)."""
  if jax.default_backend() != "gpu":
    return False
  if sm is None:
    return True
  cc = getattr(jax.devices()[0], "compute_capability", None)
  return cc is not None and float(cc) >= sm


def resolve_implementation(op: str, implementation: str | None, interpret: bool) -> str:
  """The implementation `op` runs, after checking `implementation` and `interpret`.

  Raises:
    TypeError: interpret is not a bool.
    ValueError: an unknown implementation; interpret=True with an implementation that runs
      no kernel; a kernel without a GPU and without interpret.
  """
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"{op}: implementation must be one of {IMPLEMENTATIONS}, got "
                     f"{implementation!r}")
  if not isinstance(interpret, bool):
    raise TypeError(f"{op}: interpret must be a bool, got {interpret!r}")
  if implementation is None:
    return KERNEL_IMPLEMENTATIONS[0] if (interpret or on_gpu()) else "reference"
  if interpret and implementation not in KERNEL_IMPLEMENTATIONS:
    raise ValueError(f"{op}: interpret=True runs the Pallas kernel; it cannot go with "
                     f"implementation={implementation!r}")
  if implementation in KERNEL_IMPLEMENTATIONS and not interpret and not on_gpu():
    raise ValueError(f"{op}: implementation={implementation!r} needs a GPU; pass "
                     f"interpret=True to run the kernel on the {jax.default_backend()} backend")
  return implementation


def reference_vjp(forward: Callable[..., Any], reference: Callable[..., Any],
                  n_static: int) -> Callable[..., Any]:
  """`forward(*static, *operands)` with the gradient of `reference(*static, *operands)`.

  The first `n_static` arguments are static (hashable: implementation names, flags); the
  rest are operands. The backward pass differentiates the reference with respect to every
  operand, so a kernel's gradient is the golden model's. Operands that are not
  differentiable (QuantizedArrays: integer codes) get no cotangent."""
  static_argnums = tuple(range(n_static))

  @functools.partial(jax.custom_vjp, nondiff_argnums=static_argnums)
  def op(*args):
    return forward(*args)

  def fwd(*args):
    return forward(*args), args[n_static:]

  def bwd(*args):
    static, (operands, g) = args[:n_static], (args[n_static], args[n_static + 1])
    float_pos = [i for i, a in enumerate(operands) if _is_float_array(a)]

    def ref_of_floats(*floats):
      full = list(operands)
      for i, f in zip(float_pos, floats):
        full[i] = f
      return reference(*static, *full)

    _, vjp = jax.vjp(ref_of_floats, *[operands[i] for i in float_pos])
    grads = dict(zip(float_pos, vjp(g)))
    return tuple(grads.get(i) for i in range(len(operands)))

  op.defvjp(fwd, bwd)
  return op


def _is_float_array(a) -> bool:
  return isinstance(a, jax.Array | jnp.ndarray) and jnp.issubdtype(a.dtype, jnp.floating)


def fold_vmap(call: Callable[..., jax.Array], foldable: Sequence[bool]) -> Callable[..., jax.Array]:
  """`call(*operands)` with a vmap rule that folds a vmapped axis into the leading axis.

  `foldable[i]`: operand i's leading axis is a batch that the output's leading axis follows
  (x rows of a GEMV). When only foldable operands are vmapped, the vmapped axis n and the
  leading axis b become one axis n * b (one call), and the output is split back to (n, b, ...).
  Otherwise (a vmapped weight) the call runs once per example (lax.map)."""
  foldable = tuple(bool(f) for f in foldable)

  @jax.custom_batching.custom_vmap
  def batched(*operands):
    return call(*operands)

  @batched.def_vmap
  def rule(axis_size, in_batched, *operands):
    flags = [any(jax.tree_util.tree_leaves(b)) for b in in_batched]
    if not any(f and not ok for f, ok in zip(flags, foldable)):
      folded, lead = [], None
      for op, f, ok in zip(operands, flags, foldable):
        if ok:
          op = op if f else jnp.broadcast_to(op, (axis_size,) + op.shape)
          lead = op.shape[1]
          op = op.reshape((axis_size * op.shape[1],) + op.shape[2:])
        folded.append(op)
      y = batched(*folded)
      return y.reshape((axis_size, lead) + y.shape[1:]), True
    full = [jax.tree_util.tree_map(
        lambda leaf, b: leaf if b else jnp.broadcast_to(leaf, (axis_size,) + leaf.shape),
        op, bat) for op, bat in zip(operands, in_batched)]
    return lax.map(lambda args: batched(*args), tuple(full)), True

  return batched
