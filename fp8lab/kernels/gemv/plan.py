"""FormatPlan: what the GEMV kernel needs to know about a weight format, and the decode choices.

A plan is built from the format's registry record (fp8lab.formats.get_quantized_format): its
scaling ("tensor", "mx", "nvfp4", "none") and scale format decide the kernel's scale path,
the element format's f16x2_convert whether the native fp8 decode applies. Formats of other
scalings (blockwise FP8's float32 block scales) are not served: serves_format says which.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp

from fp8lab.formats import ElementFormat, get_format, get_quantized_format
from fp8lab.kernels import device, unpack

__all__ = ["FormatPlan", "format_plan", "KERNEL_SCALINGS", "serves_format", "NATIVE_FP8_ENV",
           "FP8_DECODES", "native_fp8_requested", "asm_e2m1_default"]

# The registry scalings the kernel has a scale path for; gemv_packed serves the others
# (scaling "block": float32 block scales) with its "xla" and "reference" paths only.
KERNEL_SCALINGS = ("tensor", "mx", "nvfp4", "none")


def serves_format(format) -> bool:
  """Whether the GEMV kernel takes weights of this registry format (a name or record);
  ValueError for a name that is not a registry format."""
  return get_quantized_format(format).scaling in KERNEL_SCALINGS


@dataclasses.dataclass(frozen=True)
class FormatPlan:
  """What the kernel needs to know about a weight format (static, hashable).

  Attributes:
    format: the QuantizedArray format name (a fp8lab.formats.QUANTIZED key).
    elem: the element format of the packed codes.
    scaling: the record's scaling: "mx" (E8M0 block scales), "nvfp4" (E4M3 block scales),
      "tensor" or "none" (no block scales).
    scale_format: the block scales' element format (E8M0 / E4M3), None without.
    block_len: elements of K per scale block (None without block scales).
    scale_row_div: rows per scale row (16 for NVFP4's 16x16 tiles, else 1).
    has_tensor_scale: whether a float32 tensor scale multiplies the result.
    native_fp8: decode the main loop's e4m3 / e5m2 codes with fp8 -> float16 converts
      (unpack.decode_planes_native: one inline-PTX cvt.rn.f16x2.e4m3x2 / .e5m2x2 per
      16-bit half of a word, sm_89+ only; planes in the "native" pair order) instead of the
      integer float16 route; the planes then hold true values (route 2^0). False for element
      formats without f16x2_convert. The MX exact fallback keeps the integer route.
    asm_e2m1: decode the main loop's e2m1 codes (nvfp4, mxfp4) with
      unpack.decode_planes_e2m1_asm: the same float16-route bits (route 2^-14 unchanged),
      as integer inline PTX (shifts, and, lop3, prmt; no fp4 / fp8 converts, any CUDA GPU)
      whose output register holds two codes of one word as the MMA operand pairs them
      (the "e2m1_asm" pair order). format_plan's default is False; gemv_packed sets it
      when compiling for a CUDA GPU (asm_e2m1_default). False for other element formats.
      The MX exact fallback keeps the shift-and-mask route.
    native_scale: decode NVFP4's E4M3 block scales with the fp8 -> float16 convert
      (unpack.e4m3_scale_to_f16_native, sm_89+) instead of the integer route; the same
      values. Set by format_plan's native_fp8 for scale formats with f16x2_convert.
  Why these decodes and what they gained: docs/gemv_kernel.md.
  """
  format: str
  elem: ElementFormat
  scaling: str
  scale_format: ElementFormat | None
  block_len: int | None
  scale_row_div: int
  has_tensor_scale: bool
  native_fp8: bool = False
  asm_e2m1: bool = False
  native_scale: bool = False

  @property
  def block_scaled(self) -> bool:
    """Whether W has block scale codes (a `scales` operand)."""
    return self.scale_format is not None

  @property
  def per_word(self) -> int:
    return self.elem.per_word

  @property
  def words_per_block(self) -> int:
    return 1 if self.block_len is None else self.block_len // self.per_word


def format_plan(format: str, element_format: str | None = None,
                block_shape: tuple[int, ...] | None = None,
                has_tensor_scale: bool | None = None, native_fp8: bool = False,
                asm_e2m1: bool = False) -> FormatPlan:
  """Builds the kernel's view of a QuantizedArray's static metadata from the registry record
  of `format`. element_format, block_shape and has_tensor_scale are the array's own metadata
  (a QuantizedArray's element_format, block_shape, tensor_scale is not None): None takes the
  record's (block_shape: its default), a value the record does not allow raises ValueError.
  `native_fp8` asks for the native fp8 decode of every e4m3 / e5m2 code: elements
  (native_fp8) and E4M3 block scales (native_scale); ignored for others. `asm_e2m1` asks
  for the inline-PTX integer decode of e2m1 elements (ignored for others). A format the
  kernel does not serve (serves_format) raises ValueError."""
  q = get_quantized_format(format)
  if q.scaling not in KERNEL_SCALINGS:
    raise ValueError(f"the GEMV kernel does not serve format {q.name!r} (scaling "
                     f"{q.scaling!r}); gemv_packed runs it with implementation 'xla' or "
                     "'reference'")
  elem = q.element
  if element_format is not None and get_format(element_format) != elem:
    raise ValueError(f"format {q.name!r} has {elem.name} elements, got {element_format!r}")
  if has_tensor_scale is None:
    has_tensor_scale = q.tensor_scale
  elif bool(has_tensor_scale) != q.tensor_scale:
    raise ValueError(f"format {q.name!r} {'has' if q.tensor_scale else 'has no'} tensor "
                     f"scale, got has_tensor_scale={has_tensor_scale!r}")
  native = bool(native_fp8) and elem.f16x2_convert
  asm = bool(asm_e2m1) and elem.name == "e2m1"
  if q.scale_format is None:
    if block_shape is not None:
      raise ValueError(f"format {q.name!r} has no block scales, got block_shape {block_shape}")
    return FormatPlan(q.name, elem, q.scaling, None, None, 1, q.tensor_scale, native, asm)
  block_shape = q.block_shape if block_shape is None else tuple(block_shape)
  if block_shape not in q.block_shapes:
    raise ValueError(f"block_shape {block_shape} is not valid for {q.name!r}; allowed: "
                     f"{' or '.join(map(str, q.block_shapes))}")
  block_len = block_shape[-1]
  row_div = block_shape[0] if len(block_shape) == 2 else 1
  if block_len % elem.per_word:
    raise ValueError(f"block length {block_len} is not a multiple of {elem.per_word} codes")
  if (native or asm) and (block_len // elem.per_word) % 2:
    raise ValueError(f"the {elem.name} decode pairs words: block length {block_len} must "
                     f"be a multiple of {2 * elem.per_word} codes")
  return FormatPlan(q.name, elem, q.scaling, q.scale_format, block_len, row_div,
                    q.tensor_scale, native, asm,
                    native_scale=bool(native_fp8) and q.scale_format.f16x2_convert)


# ---------------------------------------------------------------------------- decode choices

# How fp8lab.gemv_packed decodes e4m3 / e5m2 codes (elements with f16x2_convert; NVFP4's E4M3
# scales) when its fp8_decode argument is None: "1" the native fp8 decode (FormatPlan.native_fp8
# / native_scale; sm_89+ GPUs), "0" the integer route; unset: native on a GPU of compute
# capability >= 8.9 (faster there: docs/gemv_kernel.md), integer in interpret mode and on older
# GPUs. Read at each gemv_packed call (under jax.jit: when the caller is traced).
NATIVE_FP8_ENV = "FP8LAB_GEMV_NATIVE_FP8"

FP8_DECODES = (None, "native", "integer")


def asm_e2m1_default(interpret: bool = False) -> bool:
  """Whether gemv_packed's kernel decodes e2m1 codes with the inline-PTX integer program
  (FormatPlan.asm_e2m1): when compiling for a CUDA GPU (integer instructions only, so any
  compute capability). Interpret mode, and GPUs that take no PTX, use the shift-and-mask
  route; both decode to the same float16 patterns, the asm in another plane order (the
  tests run the asm's jnp twin in interpret mode), so results agree within the GEMV's
  bound, not bit for bit (the float32 sums run in another order)."""
  return not interpret and device.cuda_capability() is not None


def native_fp8_requested(interpret: bool = False, fp8_decode: str | None = None) -> bool:
  """Whether gemv_packed's kernel decodes e4m3 / e5m2 codes natively: fp8_decode "native" /
  "integer" if given, else NATIVE_FP8_ENV "1" / "0", else native exactly when compiling
  for a CUDA GPU of compute capability >= 8.9.

  Raises ValueError for an unknown fp8_decode or variable value, or for native decoding
  of a compiled kernel on a device without fp8 conversions (the PTX would not assemble)."""
  if fp8_decode not in FP8_DECODES:
    raise ValueError(f"fp8_decode must be one of {FP8_DECODES}, got {fp8_decode!r}")
  v = os.environ.get(NATIVE_FP8_ENV, "")
  if v not in ("", "0", "1"):
    raise ValueError(f"{NATIVE_FP8_ENV} must be 0 or 1 (or unset), got {v!r}")
  forced = {"native": True, "integer": False}.get(fp8_decode, {"1": True, "0": False}.get(v))
  if interpret:
    return bool(forced)      # the interpret-mode twin runs anywhere; integer by default
  if forced and not device.has_fp8_converts():
    raise ValueError("the native fp8 decode needs a CUDA GPU of compute capability >= 8.9 "
                     f"(fp8 -> float16 conversions); this is {jax.devices()[0].device_kind}")
  return device.has_fp8_converts() if forced is None else forced


# ---------------------------------------------------------------------------- derived facts

def _operand_dtype(plan: FormatPlan):
  """Tensor-core operand type of the main loop: float16 holds every float16-route code
  exactly, the NVFP4 products code * E4M3 scale, and the MX products code * 2^(scale - m)
  of the fast path; bf16 weights are bfloat16."""
  if plan.elem.name == "bf16":
    return jnp.bfloat16
  return jnp.float16


def _route_log2(plan: FormatPlan) -> int:
  """log2 of the factor between the main loop's decoded planes and the codes' values:
  unpack.f16_route_log2 for the integer float16 route (asm_e2m1 too: the same bits), 0 for
  the native decode."""
  return 0 if plan.native_fp8 else unpack.f16_route_log2(plan.elem)


def _fold_log2(plan: FormatPlan) -> int:
  """log2 of the power of two that turns the main loop's dots into x @ W^T (before the
  tensor scale and x's own per-row scaling). It undoes the route of the decoded planes
  (_route_log2); the NVFP4 block scale enters the dot as its true value; the MX fast path's
  factors already undo the route (see operands._mx_factors)."""
  if plan.scaling == "mx":
    return 0
  return -_route_log2(plan)


def _pair_layout(plan: FormatPlan) -> str:
  """The unpack.PAIR_LAYOUTS order of the main loop's planes: which decode
  operands._decode runs."""
  if plan.native_fp8:
    return "native"
  return "e2m1_asm" if plan.asm_e2m1 else "code"
