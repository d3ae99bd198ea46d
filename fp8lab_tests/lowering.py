"""Lowering Pallas kernels to Triton IR for an H200 from any host (no GPU needed).

`triton_irs(fn, *avals)` traces `fn` for an abstract NVIDIA H200 and lowers it for "cuda",
returning the Triton IR text of every Pallas kernel it launches, in launch order. The IR shows
what the kernel will ask of Triton (float division, fp8 types, inline PTX, math.ctlz); whether
Triton then compiles it, only a GPU shows.
"""

from __future__ import annotations

import jax

__all__ = ["triton_irs"]


def triton_irs(fn, *avals) -> list[str]:
  from jax._src.pallas.triton import lowering as triton_lowering  # pylint: disable=g-import-not-at-top
  captured = []
  real = triton_lowering.lower_jaxpr_to_triton_module

  def spy(*a, **kw):
    res = real(*a, **kw)
    captured.append(res.module.operation.get_asm())
    return res

  ad = jax.sharding.AbstractDevice(device_kind="NVIDIA H200", num_cores=None, platform="gpu")
  mesh = jax.sharding.AbstractMesh((1,), ("x",), (jax.sharding.AxisType.Explicit,),
                                   abstract_device=ad)
  triton_lowering.lower_jaxpr_to_triton_module = spy
  try:
    with jax.sharding.use_abstract_mesh(mesh):
      jax.jit(fn).trace(*avals).lower(lowering_platforms=("cuda",))
  finally:
    triton_lowering.lower_jaxpr_to_triton_module = real
  return captured
