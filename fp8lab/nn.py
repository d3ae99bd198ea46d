"""A dense layer on `fp8lab.quantized_matmul` that holds its weight and delayed-scaling state.

    layer = fp8lab.nn.Dense.create(jax.random.key(0), 512, 2048, recipe="fp8_delayed")

    def loss_fn(layer, x):
      y, _ = layer(x)
      return jnp.mean(y ** 2)

    grads = jax.grad(loss_fn)(layer, x)          # a Dense: grads.w = dL/dw, grads.state =
    layer = layer.apply_update(grads, layer.w - lr * grads.w)   # the next state (see training.py)

The layer is a pytree (leaves: w, then the state's leaves; static: the recipe name), so it
passes through jax.jit, jax.grad and optimizers that map over leaves (keep `state` out of the
optimizer: its gradient is the next state, not a direction).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fp8lab.training import MatmulState, get_recipe, init_state, quantized_matmul

__all__ = ["Dense"]


@jax.tree_util.register_pytree_node_class
class Dense:
  """y = x @ w through quantized_matmul with `recipe` (None: an unquantized jnp.matmul).

  Attributes:
    w: (in_features, out_features).
    state: the MatmulState of the recipe (None for recipes without delayed operands).
    recipe: a recipe name or None (static).
  """

  def __init__(self, w, state: MatmulState | None, recipe: str | None):
    self.w = w
    self.state = state
    self.recipe = recipe

  @classmethod
  def create(cls, key, in_features: int, out_features: int, *, recipe: str | None,
             dtype=jnp.float32, history_length: int = 16) -> "Dense":
    """A layer with w ~ N(0, 1 / in_features) and a fresh state."""
    if recipe is not None:
      get_recipe(recipe)                 # an unknown name fails here, not at the first call
    w = jax.random.normal(key, (in_features, out_features), jnp.float32) / in_features**0.5
    state = None if recipe is None else init_state(recipe, history_length=history_length)
    return cls(w.astype(dtype), state, recipe)

  def __call__(self, x, *, key=None, implementation=None, interpret: bool = False):
    """(y, the layer with the forward-updated state)."""
    if self.recipe is None:
      return jnp.matmul(x, self.w), self
    y, new_state = quantized_matmul(x, self.w, recipe=self.recipe, state=self.state, key=key,
                                    implementation=implementation, interpret=interpret)
    return y, Dense(self.w, new_state, self.recipe)

  def apply_update(self, grads: "Dense", w) -> "Dense":
    """The layer after an optimizer step: weight `w`, state = grads.state (the next state the
    backward pass produced; the current one for recipes without state)."""
    return Dense(w, grads.state if self.state is not None else None, self.recipe)

  def tree_flatten(self):
    return (self.w, self.state), self.recipe

  @classmethod
  def tree_unflatten(cls, recipe, children):
    return cls(*children, recipe)

  def __repr__(self) -> str:
    return f"Dense(w={self.w.dtype}{list(self.w.shape)}, recipe={self.recipe!r})"
