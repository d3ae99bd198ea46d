"""Argument checks of the fp8lab.testing strategies.

As in hypothesis.extra.numpy, invalid arguments raise hypothesis.errors.InvalidArgument when
the strategy is drawn from, not when the strategy function is called: `lazy` defers a
builder that checks its arguments and returns the strategy.
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.internal.validation import check_type, check_valid_interval

from fp8lab.formats import (ElementFormat, QuantizedFormat, get_format,
                            get_quantized_format)

__all__ = ["lazy", "check_bool", "check_int", "check_interval", "element_format",
           "quantized_format", "menu", "array_shape", "axis_of", "block_shape_of",
           "check_tiles", "float_dtype", "InvalidArgument"]


def lazy(build: Callable[..., st.SearchStrategy]) -> Callable[..., st.SearchStrategy]:
  """The strategy function of `build` (which checks its arguments and returns a strategy):
  calling it only binds the arguments; `build` runs when the strategy is first drawn from."""
  sig = inspect.signature(build)

  @functools.wraps(build)
  def strategy(*args, **kwargs):
    sig.bind(*args, **kwargs)     # a call that does not fit the signature: TypeError at once
    def definition():
      return build(*args, **kwargs)
    # deferred's repr names its definition: show the call instead of "definition".
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    definition.__name__ = f"{build.__name__}({', '.join(shown)})"
    return st.deferred(definition)

  return strategy


def check_bool(value: Any, name: str) -> bool:
  check_type(bool, value, name)
  return value


def check_int(value: Any, name: str, min_value: int | None = None,
              max_value: int | None = None) -> int:
  """An int (numpy integers included, bools not) within [min_value, max_value]."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise InvalidArgument(f"{name} must be an int, got {value!r} "
                          f"(type={type(value).__name__})")
  value = int(value)
  if min_value is not None and value < min_value:
    raise InvalidArgument(f"{name}={value} must be at least {min_value}")
  if max_value is not None and value > max_value:
    raise InvalidArgument(f"{name}={value} must be at most {max_value}")
  return value


def check_interval(lower: int, upper: int, lower_name: str, upper_name: str) -> None:
  check_valid_interval(lower, upper, lower_name, upper_name)


def element_format(fmt: Any, name: str = "fmt") -> ElementFormat:
  """The element format `fmt` names (get_format), InvalidArgument for an unknown one."""
  try:
    return get_format(fmt)
  except (ValueError, TypeError) as err:
    raise InvalidArgument(f"{name}: {err}") from None


def quantized_format(fmt: Any, name: str = "fmt") -> QuantizedFormat:
  """The quantized format `fmt` names (get_quantized_format), InvalidArgument otherwise."""
  try:
    return get_quantized_format(fmt)
  except (ValueError, TypeError) as err:
    raise InvalidArgument(f"{name}: {err}") from None


def menu(values: Any, name: str, single: tuple[type, ...] = (str,)) -> tuple[Any, ...]:
  """A non-empty tuple of choices; one value of a `single` type stands for itself."""
  if isinstance(values, single):
    return (values,)
  if not isinstance(values, Iterable):
    raise InvalidArgument(f"{name} must be a sequence of choices, got {values!r} "
                          f"(type={type(values).__name__})")
  values = tuple(values)
  if not values:
    raise InvalidArgument(f"{name} is empty: nothing to draw from")
  return values


def array_shape(shape: Any, name: str = "shape", min_dims: int = 0) -> tuple[int, ...]:
  """A shape: an int or a sequence of non-negative ints, with at least min_dims axes."""
  if isinstance(shape, (numbers.Integral, str, bytes)) and not isinstance(shape, bool):
    shape = (shape,) if isinstance(shape, numbers.Integral) else shape
  if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
    raise InvalidArgument(f"{name} must be an int or a tuple of ints, got {shape!r}")
  shape = tuple(check_int(n, f"{name} entries", 0) for n in shape)
  if len(shape) < min_dims:
    raise InvalidArgument(f"{name}={shape} needs at least {min_dims} axes")
  return shape


def axis_of(axis: Any, ndim: int, name: str = "axis") -> int:
  """`axis` of an array with ndim axes, made non-negative."""
  axis = check_int(axis, name)
  if not -ndim <= axis < ndim:
    raise InvalidArgument(f"{name}={axis} is out of range for an array with {ndim} axes")
  return axis % ndim


def block_shape_of(qf: QuantizedFormat, block_shape: Any,
                   name: str = "block_shape") -> tuple[int, ...] | None:
  """`block_shape` checked against the registry record (QuantizedFormat.allows_block_shape;
  None: the format's default)."""
  if block_shape is None:
    return qf.block_shape
  if isinstance(block_shape, (str, bytes)) or not isinstance(block_shape, Iterable):
    raise InvalidArgument(f"{name} must be a tuple of ints, got {block_shape!r}")
  block_shape = tuple(check_int(b, f"{name} entries") for b in block_shape)
  if not qf.allows_block_shape(block_shape):
    raise InvalidArgument(f"{name}={block_shape} is not valid for {qf.name!r}; allowed: "
                          f"{qf.allowed_block_shapes()}")
  return block_shape


def check_tiles(qf: QuantizedFormat, block_shape: tuple[int, ...] | None, ndim: int,
                axis: int) -> None:
  """A 2-D block shape tiles the last two axes, as quantize requires: ndim >= 2 and
  `axis` (non-negative) one of them."""
  if block_shape is not None and len(block_shape) == 2:
    if ndim < 2:
      raise InvalidArgument(f"{qf.name} with block_shape {block_shape} tiles the last two "
                            f"axes; the shape has {ndim}")
    if axis < ndim - 2:
      raise InvalidArgument(f"{qf.name} with block_shape {block_shape} packs one of the "
                            f"last two axes; got axis {axis} of {ndim}")


def float_dtype(dtype: Any, allowed: dict[str, Any], name: str = "dtype") -> str:
  """The name of `dtype`, one of `allowed`'s keys."""
  try:
    key = np.dtype(dtype).name
  except (TypeError, ValueError):
    key = None
  if key not in allowed:
    raise InvalidArgument(f"{name} must be one of {', '.join(allowed)}; got {dtype!r}")
  return key
