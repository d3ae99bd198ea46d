"""Probe: a CPU-side proxy of the quantize kernel's instruction count per element.

Each case (layout, rounding) is lowered to Triton IR for an H200 from this host (an abstract
GPU device, as fp8lab_tests/test_quantize_kernel.py's lowering test does), canonicalized and
CSE'd with MLIR's own passes, and the ops of the main kernel's body are counted, each weighted
by the elements of its widest tensor (a scalar op counts 1, an op on a 16 x 8 per-block vector
128, one on the 16 x 256 tile 4096; a tt.reduce counts its input's elements, one combine
each), and divided by the tile's elements. Layout-only ops (constants, splat, broadcast,
expand_dims, reshape, make_range, bitcast) count 0. `alu` excludes loads, stores and addptr.
The GPU's compiler folds and fuses more (and threefry's rotations are funnel shifts), so this
is a relative measure: what a change of the encoder saves, not the SASS count.

  python benchmarks/probes/quantize_op_count.py --out=/tmp/ops.json
  python benchmarks/probes/quantize_op_count.py --cases=mxfp4,nvfp4:sr --transpose
"""

from __future__ import annotations

import functools
import json
import os
import sys
import warnings

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)   # run as a script: fp8lab and benchmarks from the working tree

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import cli  # noqa: E402
from benchmarks import kernel_inputs as KI  # noqa: E402
from benchmarks.ir_ops import FREE_OPS, MEMORY_OPS, count_ops  # noqa: E402,F401
from fp8lab.formats import QUANTIZED  # noqa: E402
from fp8lab.kernels.quantize import QuantizeConfig, quantize_2d  # noqa: E402
from fp8lab.kernels.quantize import kernel as quantize_kernel  # noqa: E402

warnings.filterwarnings("ignore", message=".*Triton.*deprecated.*")
warnings.filterwarnings("ignore", message=".*Pallas Triton backend is deprecated.*")

_KERNEL_FORMATS = tuple(n for n, q in QUANTIZED.items() if q.scaling in ("tensor", "mx", "nvfp4"))
_DEFAULT_CASES = [f"{n}{sr}" for n in _KERNEL_FORMATS for sr in ("", ":sr")]
_CASES = flags.DEFINE_list(
    "cases", _DEFAULT_CASES,
    f"format[:sr] items (sr: stochastic rounding); formats from {', '.join(_KERNEL_FORMATS)}.")
_SHAPE = flags.DEFINE_string("shape", "256x1024",
                             "x's shape R x C (the tile: --config fitted to it and the layout).")
_X_DTYPE = flags.DEFINE_enum("x_dtype", "bfloat16", ["float32", "bfloat16", "float16"],
                             "dtype of x.")
_CONFIG = flags.DEFINE_string("config", "16:256:8",
                              "block_rows:block_cols:num_warps of the QuantizeConfig.")
_FLOAT_PRODUCTS = flags.DEFINE_bool("float_products", False, "QuantizeConfig.float_products.")
_TRANSPOSE = flags.DEFINE_bool("transpose", False, "Also x.T's outputs (transpose=True).")
_OUT = flags.DEFINE_string("out", KI.default_out("quantize_op_count.json"),
                           "JSON results path ('' for none; default $OUT/quantize_op_count.json).")

# Ops that move no data through an ALU (folded into addressing or register layout).
def lower_kernel_ir(fmt: str, *, stochastic: bool, shape, x_dtype, config: QuantizeConfig,
                    transpose: bool) -> str:
  """Triton IR (after canonicalize, cse) of the main quantize kernel of one case, lowered
  for an H200 from this host."""
  from jax._src.lib.mlir import passmanager
  from jax._src.pallas.triton import lowering as triton_lowering
  captured = []
  real = triton_lowering.lower_jaxpr_to_triton_module

  def spy(*a, **kw):
    res = real(*a, **kw)
    with res.module.context:
      passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(
          res.module.operation)
    captured.append(res.module.operation.get_asm())
    return res

  ad = jax.sharding.AbstractDevice(device_kind="NVIDIA H200", num_cores=None, platform="gpu")
  mesh = jax.sharding.AbstractMesh((1,), ("x",), (jax.sharding.AxisType.Explicit,),
                                   abstract_device=ad)
  per_tensor = QUANTIZED[fmt].scaling == "tensor"
  f = functools.partial(quantize_2d, fmt=fmt, scale=1.0 if per_tensor else None,
                        key_words=(1, 2) if stochastic else None, transpose=transpose,
                        config=config)
  triton_lowering.lower_jaxpr_to_triton_module = spy
  try:
    with jax.sharding.use_abstract_mesh(mesh):
      jax.jit(f).trace(jax.ShapeDtypeStruct(shape, x_dtype)).lower(lowering_platforms=("cuda",))
  finally:
    triton_lowering.lower_jaxpr_to_triton_module = real
  # nvfp4 and current scaling lower a first amax pass too: the main kernel is named by fmt
  (ir,) = [t for t in captured if f"module @fp8lab_quantize_{fmt} " in t]
  return ir


def measure(case: str, *, shape, x_dtype, config: QuantizeConfig, transpose: bool) -> dict:
  """One row: the per-element op counts of a case "fmt" or "fmt:sr"."""
  fmt, _, sr = case.partition(":")
  if fmt not in _KERNEL_FORMATS or sr not in ("", "sr"):
    raise ValueError(f"case {case!r}: want format[:sr] with a format from {_KERNEL_FORMATS}")
  ir = lower_kernel_ir(fmt, stochastic=bool(sr), shape=shape, x_dtype=x_dtype, config=config,
                       transpose=transpose)
  # the tile the launch uses: the config fitted to the shape and the layout's grain
  qf = QUANTIZED[fmt]
  fitted = quantize_kernel._tiles(qf, qf.block_shape if qf.scaling != "tensor" else (),
                                  transpose, shape[0], shape[1], config)
  tile = fitted.block_rows * fitted.block_cols
  counts = {k: v / tile for k, v in sorted(count_ops(ir).items())}
  alu = sum(v for k, v in counts.items() if k not in MEMORY_OPS)
  return dict(case=case, format=fmt, stochastic=bool(sr), tile=tile,
              alu_per_element=round(alu, 3),
              total_per_element=round(sum(counts.values()), 3),
              clz_per_element=round(sum(v for k, v in counts.items()
                                        if k == "tt.extern_elementwise"), 3),
              ops=counts)


def main(argv):
  cli.no_arguments(argv)
  with cli.usage_errors():
    shape = tuple(int(s) for s in _SHAPE.value.lower().split("x"))
    br, bc, nw = (int(v) for v in _CONFIG.value.split(":"))
    config = QuantizeConfig(br, bc, nw, float_products=_FLOAT_PRODUCTS.value)
    if len(shape) != 2:
      raise ValueError(f"--shape must be R x C, got {_SHAPE.value!r}")
  rows = []
  print(f"{'case':<16} {'alu/elem':>9} {'total/elem':>11}", flush=True)
  for case in _CASES.value:
    with cli.usage_errors():
      row = measure(case, shape=shape, x_dtype=jnp.dtype(_X_DTYPE.value), config=config,
                    transpose=_TRANSPOSE.value)
    rows.append(row)
    print(f"{case:<16} {row['alu_per_element']:>9.2f} {row['total_per_element']:>11.2f}",
          flush=True)
  doc = dict(proxy="element-weighted Triton IR ops per tile element after canonicalize,cse",
             shape=list(shape), x_dtype=_X_DTYPE.value, config=_CONFIG.value,
             float_products=_FLOAT_PRODUCTS.value, transpose=_TRANSPOSE.value,
             jax=jax.__version__, rows=rows)
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump(doc, f, indent=1)


if __name__ == "__main__":
  app.run(main)
