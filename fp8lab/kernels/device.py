"""Facts about the device a kernel is compiled for, read from JAX's first device.

Every kernel asks here instead of typing in numbers of one GPU. In Pallas interpret mode, and
where JAX's first device is not a CUDA GPU (the CPU tests, lowering for CUDA from a CPU host),
the functions give the H200's values (REFERENCE_SM_COUNT, REFERENCE_SMEM_PER_BLOCK), so that
interpret mode makes the launch choices of the GPU the kernels were tuned on, on any host.
"""

from __future__ import annotations

import jax

__all__ = ["cuda_capability", "has_fp8_converts", "sm_count", "smem_per_block",
           "REFERENCE_SM_COUNT", "REFERENCE_SMEM_PER_BLOCK"]

# The H200 (sm_90): 132 SMs, 227 KiB of shared memory per block (opt-in).
REFERENCE_SM_COUNT = 132
REFERENCE_SMEM_PER_BLOCK = 227 * 1024

# Shared memory one block may use (opt-in maximum) per compute capability, from NVIDIA's
# CUDA C Programming Guide (compute capabilities table): JAX has no API for it. An unknown
# capability takes the smallest entry, which can only make tiles smaller.
_SMEM_PER_BLOCK_KIB = {(7, 5): 64, (8, 0): 163, (8, 6): 99, (8, 7): 163, (8, 9): 99,
                       (9, 0): 227, (10, 0): 227, (12, 0): 99}


def _cuda_device():
  """JAX's first device if it is a CUDA GPU (it has a compute capability), else None."""
  dev = jax.devices()[0]
  if dev.platform != "gpu":
    return None
  try:
    float(dev.compute_capability)
  except (AttributeError, TypeError, ValueError):     # no CUDA compute capability (ROCm, ...)
    return None
  return dev


def cuda_capability() -> float | None:
  """The compute capability of JAX's first device if it is a CUDA GPU (9.0 for sm_90), else
  None."""
  dev = _cuda_device()
  return None if dev is None else float(dev.compute_capability)


def has_fp8_converts() -> bool:
  """Whether JAX's first device is a CUDA GPU of compute capability >= 8.9 (fp8 -> float16
  conversion instructions)."""
  cc = cuda_capability()
  return cc is not None and cc >= 8.9


def sm_count(interpret: bool = False) -> int:
  """Streaming multiprocessors of JAX's first device (its `core_count`); REFERENCE_SM_COUNT
  in interpret mode or without a CUDA GPU."""
  dev = None if interpret else _cuda_device()
  n = getattr(dev, "core_count", None)
  return int(n) if n else REFERENCE_SM_COUNT


def smem_per_block(interpret: bool = False) -> int:
  """Bytes of shared memory one block may use on JAX's first device, from its compute
  capability (_SMEM_PER_BLOCK_KIB); REFERENCE_SMEM_PER_BLOCK in interpret mode or without a
  CUDA GPU."""
  dev = None if interpret else _cuda_device()
  if dev is None:
    return REFERENCE_SMEM_PER_BLOCK
  major, minor = (int(v) for v in str(dev.compute_capability).split(".")[:2])
  kib = _SMEM_PER_BLOCK_KIB.get((major, minor), min(_SMEM_PER_BLOCK_KIB.values()))
  return kib * 1024
