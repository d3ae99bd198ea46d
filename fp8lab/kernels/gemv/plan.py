"""FormatPlan: what the GEMV kernel needs to know about a weight format, and the decode choices."""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp

from fp8lab.formats import ElementFormat, get_format
from fp8lab.kernels import unpack


@dataclasses.dataclass(frozen=True)
class FormatPlan:
  """What the kernel needs to know about a weight format (static, hashable).

  Attributes:
    format: the QuantizedArray format name.
    elem: the element format of the packed codes.
    scale_kind: None, "e8m0" (MX) or "e4m3" (NVFP4) block scales.
    block_len: elements of K per scale block (None without block scales).
    scale_row_div: rows per scale row (16 for NVFP4's 16x16 tiles, else 1).
    has_tensor_scale: whether a float32 tensor scale multiplies the result.
    native_fp8: decode the main loop's e4m3 / e5m2 codes with fp8 -> float16 converts
      (unpack.decode_planes_native: one inline-PTX cvt.rn.f16x2.e4m3x2 / .e5m2x2 per
      16-bit half of a word, sm_89+ only; planes in the "native" pair order) instead of the
      integer float16 route; the planes then hold true values (route 2^0). False for every
      other element format. The MX exact fallback keeps the integer route. Offline SASS
      (sm_90, 64x64 words, 4 warps): loop instructions per word 19.5 -> 8.2 (e4m3) and
      12.5 -> 8.2 (e5m2) at batch 1 with a PRMT pairing code i of two words, 6.1 with the
      pair order.
    asm_e2m1: decode the main loop's e2m1 codes (nvfp4, mxfp4) with
      unpack.decode_planes_e2m1_asm: the same float16-route bits (route 2^-14 unchanged),
      as integer inline PTX (shifts, and, lop3, prmt; no fp4 / fp8 converts, any CUDA GPU)
      whose output register holds two codes of one word as the MMA operand pairs them
      (the "e2m1_asm" pair order). format_plan's default is False; gemv_packed sets it
      when compiling for a CUDA GPU (asm_e2m1_default). False for other element formats.
      The MX exact fallback keeps the shift-and-mask route. Offline SASS (sm_90, default
      configs, main loop instructions per word, off -> on): nvfp4 40.9 -> 31.9 (batch 1),
      47.3 -> 40.2 (16); mxfp4 41.4 -> 32.4 (1), 56.6 -> 47.9 (16), with the first asm
      program (12 instructions per word); the pair order's program takes 11 (nvfp4 batch
      1: 24.4 -> 22.6 per word). Measured on the H200: see asm_e2m1_default.
    native_scale: decode NVFP4's E4M3 block scales with the fp8 -> float16 convert
      (unpack.e4m3_scale_to_f16_native, sm_89+) instead of the integer route; the same
      values. Set by format_plan's native_fp8 for "e4m3" scale kinds.
  """
  format: str
  elem: ElementFormat
  scale_kind: str | None
  block_len: int | None
  scale_row_div: int
  has_tensor_scale: bool
  native_fp8: bool = False
  asm_e2m1: bool = False
  native_scale: bool = False

  @property
  def per_word(self) -> int:
    return self.elem.per_word

  @property
  def words_per_block(self) -> int:
    return 1 if self.block_len is None else self.block_len // self.per_word


_SCALE_KINDS = {"mxfp8": "e8m0", "mxfp8_e5m2": "e8m0", "mxfp4": "e8m0", "nvfp4": "e4m3"}

# How fp8lab.gemv_packed decodes e4m3 / e5m2 codes (elements of formats e4m3, e5m2, mxfp8,
# mxfp8_e5m2; NVFP4's E4M3 scales) when its fp8_decode argument is None: "1" the native fp8
# decode (FormatPlan.native_fp8 / native_scale; sm_89+ GPUs), "0" the integer route; unset:
# native on a GPU of compute capability >= 8.9 (faster on the H200: BUILD.md), integer in
# interpret mode and on older GPUs. Read at each gemv_packed call (under jax.jit: when the
# caller is traced).
NATIVE_FP8_ENV = "FP8LAB_GEMV_NATIVE_FP8"


def _cuda_capability() -> float | None:
  """The compute capability of JAX's first device if it is a CUDA GPU, else None."""
  dev = jax.devices()[0]
  try:
    return float(dev.compute_capability) if dev.platform == "gpu" else None
  except (AttributeError, TypeError, ValueError):     # no CUDA compute capability (ROCm, ...)
    return None


def _gpu_has_fp8_converts() -> bool:
  """Whether JAX's first device is a CUDA GPU of compute capability >= 8.9."""
  cc = _cuda_capability()
  return cc is not None and cc >= 8.9


def asm_e2m1_default(interpret: bool = False) -> bool:
  """Whether gemv_packed's kernel decodes e2m1 codes with the inline-PTX integer program
  (FormatPlan.asm_e2m1): when compiling for a CUDA GPU (integer instructions only, so any
  compute capability). Interpret mode, and GPUs that take no PTX, use the shift-and-mask
  route; both decode to the same float16 patterns, the asm in another plane order (the
  tests run the asm's jnp twin in interpret mode), so results agree within the GEMV's
  bound, not bit for bit (the float32 sums run in another order). Measured on the H200
  (benchmarks/results/gemv_e2m1_asm_h200_20261130.txt): nvfp4 kernel 69.4 -> 61.2 us,
  mxfp4 79.7 -> 78.1 at 16384^2, batch 1, default configs; the pair order then 51.1 ->
  48.6 and 65.2 -> 61.7 (gemv_pair_decode_h200_20261130.txt)."""
  return not interpret and _cuda_capability() is not None


FP8_DECODES = (None, "native", "integer")


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
  if forced and not _gpu_has_fp8_converts():
    raise ValueError("the native fp8 decode needs a CUDA GPU of compute capability >= 8.9 "
                     f"(fp8 -> float16 conversions); this is {jax.devices()[0].device_kind}")
  return _gpu_has_fp8_converts() if forced is None else forced


def format_plan(format: str, element_format: str, block_shape: tuple[int, ...] | None,
                has_tensor_scale: bool, native_fp8: bool = False,
                asm_e2m1: bool = False) -> FormatPlan:
  """Builds the kernel's view of a QuantizedArray's static metadata. `native_fp8` asks for
  the native fp8 decode of every e4m3 / e5m2 code: e4m3 / e5m2 elements (native_fp8) and
  NVFP4's E4M3 block scales (native_scale); ignored for others. `asm_e2m1` asks for the
  inline-PTX integer decode of e2m1 elements (ignored for others)."""
  elem = get_format(element_format)
  native = bool(native_fp8) and elem.name in unpack.NATIVE_FORMATS
  asm = bool(asm_e2m1) and elem.name == "e2m1"
  kind = _SCALE_KINDS.get(format)
  if kind is None:
    return FormatPlan(format, elem, None, None, 1, has_tensor_scale, native, asm)
  if not block_shape:
    raise ValueError(f"format {format!r} needs a block_shape")
  block_len = block_shape[-1]
  row_div = block_shape[0] if len(block_shape) == 2 else 1
  if block_len % elem.per_word:
    raise ValueError(f"block length {block_len} is not a multiple of {elem.per_word} codes")
  if (native or asm) and (block_len // elem.per_word) % 2:
    raise ValueError(f"the {elem.name} decode pairs words: block length {block_len} must "
                     f"be a multiple of {2 * elem.per_word} codes")
  return FormatPlan(format, elem, kind, block_len, row_div, has_tensor_scale, native, asm,
                    native_scale=bool(native_fp8) and kind == "e4m3")



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
  factors already undo the route (see _mx_factors)."""
  if plan.scale_kind == "e8m0":
    return 0
  return -_route_log2(plan)



def _pair_layout(plan: FormatPlan) -> str:
  """The unpack.PAIR_LAYOUTS order of the main loop's planes: which decode _decode runs."""
  if plan.native_fp8:
    return "native"
  return "e2m1_asm" if plan.asm_e2m1 else "code"


