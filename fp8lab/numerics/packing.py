"""Packing of element codes into uint32 words (docs/numerics.md section 3).

Little-endian inside the word, as Feather and torchao do it:
  8-bit codes:  element 4j+i of the packed axis is byte i (bits 8i..8i+7) of word j;
  4-bit codes:  element 8j+i is bits 4i..4i+3 of word j;
  16-bit codes: element 2j+i is half i (float16 / bfloat16 bit patterns, "f16" / "bf16").
A length that is not a multiple of the codes per word is padded with zero codes; `unpack`
takes the logical length back.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.formats import get_format

__all__ = ["pack", "unpack", "packed_length"]


def packed_length(length: int, fmt) -> int:
  """Number of uint32 words that hold `length` codes of `fmt`."""
  per_word = get_format(fmt).per_word
  return -(-length // per_word)


def _code_dtype(bits: int):
  return jnp.uint16 if bits == 16 else jnp.uint8


def pack(codes, fmt, axis: int = -1) -> jax.Array:
  """Packs codes along `axis` into uint32 words.

  Args:
    codes: uint8 codes for 8-bit formats and e2m1 (only the low nibble of each is used);
      for "f16" / "bf16" the uint16 bit patterns or the float16 / bfloat16 values themselves.
    fmt: an element format name ("e4m3", "e5m2", "e8m0", "e2m1", "f16", "bf16").
    axis: the axis to pack; its length becomes ceil(length / codes_per_word).
  """
  f = get_format(fmt)
  codes = jnp.asarray(codes)
  if f.bits == 16 and codes.dtype == f.dtype:
    codes = lax.bitcast_convert_type(codes, jnp.uint16)
  want = _code_dtype(f.bits)
  if codes.dtype != want:
    raise TypeError(f"pack({f.name!r}) takes {jnp.dtype(want).name} codes, got {codes.dtype}")
  if codes.ndim == 0:
    raise ValueError("pack needs an array with at least one axis")
  axis = _normalize_axis(axis, codes.ndim)
  codes = jnp.moveaxis(codes, axis, -1)
  length = codes.shape[-1]
  n_words = packed_length(length, f)
  pad = n_words * f.per_word - length
  if pad:
    codes = jnp.pad(codes, [(0, 0)] * (codes.ndim - 1) + [(0, pad)])
  groups = codes.reshape(codes.shape[:-1] + (n_words, f.per_word)).astype(jnp.uint32)
  groups = groups & np.uint32((1 << f.bits) - 1)
  shifts = np.arange(f.per_word, dtype=np.uint32) * np.uint32(f.bits)
  # The fields do not overlap, so a sum is an OR.
  words = jnp.sum(groups << shifts, axis=-1, dtype=jnp.uint32)
  return jnp.moveaxis(words, -1, axis)


def unpack(words, fmt, length: int, axis: int = -1) -> jax.Array:
  """Inverse of pack: returns exactly `length` codes along `axis` (uint8, or uint16 for
  "f16" / "bf16")."""
  f = get_format(fmt)
  words = jnp.asarray(words)
  if words.dtype != jnp.uint32:
    raise TypeError(f"unpack takes uint32 words, got {words.dtype}")
  if words.ndim == 0:
    raise ValueError("unpack needs an array with at least one axis")
  axis = _normalize_axis(axis, words.ndim)
  words = jnp.moveaxis(words, axis, -1)
  n_words = words.shape[-1]
  if not (isinstance(length, (int, np.integer)) and
          (n_words - 1) * f.per_word < length <= n_words * f.per_word
          or length == 0 == n_words):
    raise ValueError(f"length {length} does not fit {n_words} words of {f.per_word} "
                     f"{f.name} codes")
  shifts = np.arange(f.per_word, dtype=np.uint32) * np.uint32(f.bits)
  fields = (words[..., None] >> shifts) & np.uint32((1 << f.bits) - 1)
  codes = fields.reshape(words.shape[:-1] + (n_words * f.per_word,))[..., :length]
  return jnp.moveaxis(codes.astype(_code_dtype(f.bits)), -1, axis)


def _normalize_axis(axis: int, ndim: int) -> int:
  if not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis} is out of range for an array with {ndim} dimensions")
  return axis % ndim
