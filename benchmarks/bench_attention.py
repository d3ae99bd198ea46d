"""The attention benchmark: fp8lab.attention over a packed KV cache against bf16 attention,
decode (Tq = 1) and prefill (Tq = S) sizes.

Times, side by side in one run, one decode step (Tq = 1) of attention of q (B, 1, Hq, D)
bfloat16 over a full cache of S positions (B, S, Hkv, D), for each size of SIZES:
  copy            y = x * 1.5 + 0.25 over a bfloat16 array of the bf16 K cache's size: the
                  copy bandwidth of this size, the yardstick of every row's "% copy";
  cudnn_bf16      jax.nn.dot_product_attention(q, k, v, implementation="cudnn") over bfloat16
                  K / V (GPU only);
  xla_bf16        the same with implementation="xla";
  jax_pallas_gqa  JAX's own Pallas decode kernel, jax.experimental.pallas.ops.gpu.
                  decode_attention.gqa, over bfloat16 K / V (if importable; interpret mode on
                  a CPU);
  <case>          fp8lab.attention(..., implementation="pallas") over the KV format of CASES
                  (per-token-head e4m3 / e5m2, per-tensor e4m3, nvfp4, mxfp4, plain bf16; a
                  paged variant through a shuffled block table), interpret mode on a CPU;
                  the *_bf16x3 cases take the kernel's bf16x3 dots, the *_f16 cases its
                  float16 dots (docs/attention_kernel.md); the mg_* cases
                  implementation="mosaic" (the Mosaic GPU decode kernel, Hopper).
Bytes per row: what the op must move at least: K and V as stored (packed words, scales,
tensor scales; bf16 for the baselines), q and the output. Rows carry bytes_needed, GB/s,
floor_us (those bytes at this size's copy bandwidth) and % of copy bandwidth, by host time
and (on a GPU, from the profiler) by device time, and speedup_vs_cudnn. Timing: R distinct
input copies per compiled call, medians (benchmarks/timing.py, the GEMV's method).

Prefill sizes (Size.q_len > 1: Tq = S, self-attention, causal or not; PREFILL_SIZES) time
instead, in the same run:
  matmul_bf16     a bfloat16 (M, K) @ (K, N) matmul, float32 accumulation: the measured
                  matrix rate (TFLOP/s) behind every prefill row's FLOP floor;
  cudnn_bf16      jax.nn.dot_product_attention(..., is_causal, implementation="cudnn");
  cudnn_fp8       cudnn's FP8 flash attention over e4m3 q / k / v (cast beforehand, untimed;
                  jax._src.cudnn.fused_attention_stablehlo, use_fp8, unit scales);
  jax_pallas_mha  JAX's Pallas Triton flash attention (jax.experimental.pallas.ops.gpu.
                  attention.mha; K / V repeated to Hq heads beforehand for GQA, untimed);
  jax_mgpu        JAX's Mosaic GPU flash attention (attention_mgpu.attention; GPU only;
                  float16 q / k / v, cast beforehand: its kernel writes float16);
  xla_bf16        jax.nn.dot_product_attention(..., implementation="xla");
  pf_<case>       fp8lab.attention(..., implementation="pallas", compute=...) over the KV
                  format of PREFILL_CASES (the prefill kernel; *_fp8: compute="fp8");
  mp_<case>       fp8lab.attention(..., implementation="mosaic"): the Mosaic GPU prefill
                  kernel (Hopper; the Mosaic interpreter on a CPU);
  cu_<case>       fp8lab.attention(..., implementation="cudnn"): the packed K / V decoded to
                  bfloat16 by XLA inside the timed call, then cuDNN (GPU only).
Prefill rows carry flops (4 B Hq D times the (query, key) pairs attended: S^2, or S (S + 1)
/ 2 causal), TFLOPs, flop_floor_us (those flops at the matmul row's rate) and
pct_flop_floor.

Usage:
  python benchmarks/bench_attention.py                     # smoke on a CPU, the grid on a GPU
  python benchmarks/bench_attention.py --sizes=prefill_h8_s8k,prefill_h8_s8k_causal
  python benchmarks/bench_attention.py --sizes=b8_s32k --cases=e4m3_block,nvfp4
  python benchmarks/bench_attention.py --summarize=benchmarks/results/attention_....json
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import json
import os
import sys
import time
from typing import Any, Callable

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import fp8lab  # noqa: E402
from benchmarks import cli  # noqa: E402
from benchmarks import timing  # noqa: E402
from benchmarks.run_info import default_out, git_commit, machine_info, write_json  # noqa: E402
from benchmarks.timing import nbytes  # noqa: E402
from fp8lab.ops.attention import DOTS_ENV, MOSAIC_PREFILL_CONFIG_ENV  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Size:
  """q_len 1: a decode step; q_len = seq: prefill (self-attention over the whole cache).
  cases: the prefill cases run by default at this size (None: all of PREFILL_CASES)."""
  batch: int
  seq: int
  q_heads: int
  kv_heads: int
  dim: int
  q_len: int = 1
  causal: bool = False
  cases: tuple[str, ...] | None = None

  @property
  def prefill(self) -> bool:
    return self.q_len > 1

  @property
  def flops(self) -> int:
    """The matmul flops of q K^T and P V over the (query, key) pairs attended."""
    pairs = self.seq * (self.seq + 1) // 2 if self.causal else self.q_len * self.seq
    return 4 * self.batch * self.q_heads * self.dim * pairs


# The targets (H200): B = 8, 32 query heads, 8 KV heads, D = 128; KV 8K / 32K / 128K;
# B = 1 at 128K. Priority order (what a time budget cuts comes last).
SIZES = {
    "b8_s32k": Size(8, 32768, 32, 8, 128),
    "b8_s128k": Size(8, 131072, 32, 8, 128),
    "b8_s8k": Size(8, 8192, 32, 8, 128),
    "b1_s128k": Size(1, 131072, 32, 8, 128),
    # the Llama-3-8B decode step's attention (bench_decode.py's 1x4096 and 16x4096 cases)
    "b1_s4k": Size(1, 4096, 32, 8, 128),
    "b16_s4k": Size(16, 4096, 32, 8, 128),
    "smoke": Size(2, 256, 8, 2, 64),      # S: whole pages, and k_splits (16) of JAX gqa
    # Prefill (issue 22): B = 1, 8 heads, S = 8192, D = 128, causal and not; Llama-style GQA
    # (32 query / 8 KV heads) causal; Feather's configuration (1 head, e5m2) at D = 256, the
    # largest D the kernel takes (Feather's own: D = 512).
    "prefill_h8_s8k": Size(1, 8192, 8, 8, 128, q_len=8192),
    "prefill_h8_s8k_causal": Size(1, 8192, 8, 8, 128, q_len=8192, causal=True),
    "gqa_h32_s8k": Size(1, 8192, 32, 8, 128, q_len=8192, causal=True,
                        cases=("cu_e4m3_block", "cu_nvfp4", "cu_bf16", "pf_e4m3_block",
                               "pf_bf16", "pf_e4m3_block_fp8", "mp_e4m3_block",
                               "mp_e4m3_block_fp8")),
    "feather_h1_s8k_d256": Size(1, 8192, 1, 1, 256, q_len=8192,
                                cases=("cu_e5m2", "cu_e4m3_block", "pf_e5m2", "pf_bf16",
                                       "mp_e5m2")),
    "prefill_smoke": Size(1, 256, 4, 2, 64, q_len=256, causal=True),
}
GPU_SIZES = ("b8_s32k", "b8_s128k", "b8_s8k", "b1_s128k")
SMOKE_SIZES = ("smoke",)
PREFILL_SIZES = tuple(n for n, z in SIZES.items() if z.prefill)


@dataclasses.dataclass(frozen=True)
class Case:
  """One fp8lab row: K and V in `fmt` (None: plain bfloat16 arrays), paged or not, and the
  kernel's dot arithmetic (fp8lab.ops.attention.DOTS_ENV: "f32" or "bf16x3"); launch: the
  Mosaic prefill kernel's (MOSAIC_PREFILL_CONFIG_ENV, "block_k:stages[:warpgroups]"), or ""
  for its default."""
  fmt: str | None
  paged: bool = False
  dots: str = "f32"
  compute: str | None = None
  implementation: str = "pallas"
  launch: str = ""

  def quantize(self, x):
    if self.fmt is None:
      return x
    q = fp8lab.get_quantized_format(self.fmt)
    block = (x.shape[-1],) if q.scaling == "block" else None   # per token and head
    return fp8lab.quantize(x, self.fmt, block_shape=block)


CASES: dict[str, Case] = {
    "e4m3_block": Case("e4m3_block"),
    "e5m2_block": Case("e5m2_block"),
    "e4m3": Case("e4m3"),
    "nvfp4": Case("nvfp4"),
    "mxfp4": Case("mxfp4"),
    "e4m3_block_paged": Case("e4m3_block", paged=True),
    "nvfp4_paged": Case("nvfp4", paged=True),
    "bf16": Case(None),
    "e4m3_block_bf16x3": Case("e4m3_block", dots="bf16x3"),
    "e4m3_bf16x3": Case("e4m3", dots="bf16x3"),
    "nvfp4_bf16x3": Case("nvfp4", dots="bf16x3"),
    "mxfp4_bf16x3": Case("mxfp4", dots="bf16x3"),
    "e4m3_block_paged_bf16x3": Case("e4m3_block", paged=True, dots="bf16x3"),
    "bf16_bf16x3": Case(None, dots="bf16x3"),
    # the float16 dots (MX falls back to bf16x3 there; plain bf16 K / V too)
    "e4m3_block_f16": Case("e4m3_block", dots="f16"),
    "e5m2_block_f16": Case("e5m2_block", dots="f16"),
    "e4m3_f16": Case("e4m3", dots="f16"),
    "nvfp4_f16": Case("nvfp4", dots="f16"),
    "mxfp4_f16": Case("mxfp4", dots="f16"),
    "e4m3_block_paged_f16": Case("e4m3_block", paged=True, dots="f16"),
    "nvfp4_paged_f16": Case("nvfp4", paged=True, dots="f16"),
    # the Mosaic GPU decode kernel (Hopper; implementation="mosaic", interpret mode on a CPU)
    "mg_e4m3_block": Case("e4m3_block", implementation="mosaic"),
    "mg_e5m2_block": Case("e5m2_block", implementation="mosaic"),
    "mg_e4m3": Case("e4m3", implementation="mosaic"),
    "mg_e4m3_block_paged": Case("e4m3_block", paged=True, implementation="mosaic"),
}
BASELINES = ("copy", "cudnn_bf16", "xla_bf16", "jax_pallas_gqa")
# The prefill kernel's rows (fp8lab.attention, compute="bf16"; *_f32: the float32 dots).
PREFILL_CASES: dict[str, Case] = {
    "pf_e4m3_block": Case("e4m3_block", compute="bf16"),
    "pf_e4m3": Case("e4m3", compute="bf16"),
    "pf_nvfp4": Case("nvfp4", compute="bf16"),
    "pf_mxfp4": Case("mxfp4", compute="bf16"),
    "pf_e5m2": Case("e5m2", compute="bf16"),
    "pf_bf16": Case(None, compute="bf16"),
    "pf_e4m3_block_fp8": Case("e4m3_block", compute="fp8"),
    "pf_e4m3_fp8": Case("e4m3", compute="fp8"),
    "pf_e4m3_block_f32": Case("e4m3_block", compute="f32"),
    # implementation="mosaic": the Mosaic GPU prefill kernel (Hopper; compute bf16
    # semantics, *_fp8 its FP8 wgmma mode; the Mosaic interpreter on a CPU)
    "mp_e4m3_block": Case("e4m3_block", compute="bf16", implementation="mosaic"),
    "mp_e4m3": Case("e4m3", compute="bf16", implementation="mosaic"),
    "mp_e5m2": Case("e5m2", compute="bf16", implementation="mosaic"),
    "mp_e4m3_block_fp8": Case("e4m3_block", compute="fp8", implementation="mosaic"),
    "mp_e4m3_fp8": Case("e4m3", compute="fp8", implementation="mosaic"),
    # ..._ws: two compute warpgroups and a memory warpgroup per program (warpgroups=2)
    "mp_e4m3_block_ws": Case("e4m3_block", compute="bf16", implementation="mosaic",
                             launch="64:2:2"),
    "mp_e4m3_ws": Case("e4m3", compute="bf16", implementation="mosaic", launch="64:2:2"),
    "mp_e4m3_block_fp8_ws": Case("e4m3_block", compute="fp8", implementation="mosaic",
                                 launch="64:2:2"),
    "mp_e4m3_fp8_ws": Case("e4m3", compute="fp8", implementation="mosaic", launch="64:2:2"),
    # implementation="cudnn": K / V decoded to bfloat16 by XLA, then cuDNN's flash attention
    # (GPU only; the op's default for prefill on a GPU)
    **{f"cu_{fmt or 'bf16'}": Case(fmt, implementation="cudnn")
       for fmt in ("e4m3_block", "e4m3", "nvfp4", "mxfp4", "e5m2", None)},
}
# (the _ws launches run compiled only: named with --prefill_cases)
PREFILL_DEFAULT = tuple(c for c in PREFILL_CASES if not c.endswith(("_f32", "_ws")))
PREFILL_BASELINES = ("matmul_bf16", "cudnn_bf16", "cudnn_fp8", "jax_pallas_mha", "jax_mgpu",
                     "xla_bf16")
_GPU_ONLY = ("cudnn_bf16", "cudnn_fp8", "jax_mgpu")
PAGE_SIZE = 64

_SIZES = flags.DEFINE_list("sizes", None, f"sizes; valid: {', '.join(SIZES)} (default: the GPU "
                           "grid, or the smoke size on a CPU)")
_CASES = flags.DEFINE_list("cases", list(CASES), f"fp8lab cases; valid: {', '.join(CASES)}")
_BASELINES = flags.DEFINE_list("baselines", list(BASELINES),
                               f"baseline rows; valid: {', '.join(BASELINES)}")
_PREFILL_CASES = flags.DEFINE_list("prefill_cases", None, "fp8lab cases at prefill sizes "
                                   f"(default: each size's own); valid: {', '.join(PREFILL_CASES)}")
_PREFILL_BASELINES = flags.DEFINE_list("prefill_baselines",
                                       [b for b in PREFILL_BASELINES if b != "xla_bf16"],
                                       "baseline rows at prefill sizes (default: all but "
                                       "xla_bf16, which materializes S x S scores); valid: "
                                       f"{', '.join(PREFILL_BASELINES)}")
_OUT = flags.DEFINE_string("out", None, "Results JSON (default benchmarks/results/...).")
_REPS = flags.DEFINE_integer("reps", None, "Timed calls (default 20 on a GPU, 2 smoke).")
_WARMUP = flags.DEFINE_integer("warmup", None, "Untimed calls first (default 3, 1 smoke).")
_MAX_COPIES = flags.DEFINE_integer("max_copies", 16, "Upper bound on R (compile time).")
_MEM_GB = flags.DEFINE_float("mem_gb", 24.0, "Device memory the copies of one row may take.")
_TIME_BUDGET_S = flags.DEFINE_float("time_budget_s", 0.0, "Stop starting work after this "
                                    "many seconds (0: no limit).")
_INTERPRET = flags.DEFINE_bool("interpret", None, "Kernels in interpret mode (default: on a CPU).")
_SUMMARIZE = flags.DEFINE_string("summarize", None, "Print the table of a results file and exit.")


# --- the ops --------------------------------------------------------------------------------

def baseline_op(name: str, interpret: bool, size: Size | None = None) -> Callable[..., Any]:
  """Baseline `name` on (q, k, v) bfloat16 (prefill baselines: at `size`)."""
  if size is not None and size.prefill:
    return _prefill_baseline(name, interpret, size)
  if name == "copy":
    return lambda q, k, v: k * jnp.asarray(1.5, k.dtype) + jnp.asarray(0.25, k.dtype)
  if name in ("cudnn_bf16", "xla_bf16"):
    impl = name.split("_")[0]
    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation=impl)
  if name == "jax_pallas_gqa":
    # pylint: disable-next=g-import-not-at-top
    from jax.experimental.pallas.ops.gpu import decode_attention
    return lambda q, k, v: decode_attention.gqa(q[:, 0], k, v, interpret=interpret)[:, None]
  raise ValueError(f"unknown baseline {name!r}; valid: {', '.join(BASELINES)}")


def _prefill_baseline(name: str, interpret: bool, size: Size) -> Callable[..., Any]:
  sm_scale = size.dim ** -0.5
  if name == "matmul_bf16":
    return lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
  if name in ("cudnn_bf16", "xla_bf16"):
    impl = name.split("_")[0]
    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=size.causal,
                                                        implementation=impl)
  if name == "cudnn_fp8":
    # pylint: disable-next=g-import-not-at-top
    from jax._src.cudnn import fused_attention_stablehlo as fas
    one = jnp.ones((1, 1, 1, 1), jnp.float32)
    params = {key: one for key in fas.fp8_params_keys}
    mask = fas.MaskType.CAUSAL if size.causal else fas.MaskType.NO_MASK
    return lambda q, k, v: fas.dot_product_attention(
        q, k, v, fp8_params=params, scale=sm_scale, mask_type=mask, use_fp8=True)[0]
  if name == "jax_pallas_mha":
    # pylint: disable-next=g-import-not-at-top
    from jax.experimental.pallas.ops.gpu import attention as pallas_attention
    return lambda q, k, v: pallas_attention.mha(q, k, v, None, sm_scale=sm_scale,
                                                causal=size.causal, interpret=interpret)
  if name == "jax_mgpu":
    # pylint: disable-next=g-import-not-at-top
    from jax.experimental.pallas.ops.gpu import attention_mgpu
    cfg = attention_mgpu.TuningConfig(block_q=64, block_kv=128, max_concurrent_steps=2,
                                      causal=size.causal)
    return lambda q, k, v: attention_mgpu.attention(q, k, v, cfg)
  raise ValueError(f"unknown prefill baseline {name!r}; valid: {', '.join(PREFILL_BASELINES)}")


def prefill_baseline_args(name: str, size: Size, base: list, seed: int) -> list:
  """The arguments of a prefill baseline: (a, b) square bfloat16 matrices for the matmul
  (8192 on a GPU, 512 otherwise); K / V repeated to Hq heads for JAX's Pallas mha (which
  has no GQA), outside the timed call; the inputs as they are otherwise."""
  if name == "matmul_bf16":
    n = 8192 if jax.default_backend() == "gpu" else 512
    keys = jax.random.split(jax.random.key(seed), 2 * len(base))
    return [(jax.random.normal(keys[2 * i], (n, n), jnp.bfloat16),
             jax.random.normal(keys[2 * i + 1], (n, n), jnp.bfloat16))
            for i in range(len(base))]
  if name == "cudnn_fp8":
    f8 = jnp.float8_e4m3fn
    return [(q.astype(f8), k.astype(f8), v.astype(f8)) for q, k, v in base]
  if name == "jax_mgpu":           # its kernel writes float16 (attention_mgpu.py): f16 inputs
    return [tuple(x.astype(jnp.float16) for x in qkv) for qkv in base]
  if name == "jax_pallas_mha" and size.q_heads != size.kv_heads:
    g = size.q_heads // size.kv_heads
    return [(q, jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)) for q, k, v in base]
  return base


def fp8lab_op(case: Case, interpret: bool, causal: bool = False) -> Callable[..., Any]:
  """fp8lab.attention on (q, k, v[, table]). The dot arithmetic is read from DOTS_ENV when
  the op is traced (compile_unrolled traces it once), so it is set around the call."""
  def op(q, k, v, table=None):
    olds = {e: os.environ.get(e) for e in (DOTS_ENV, MOSAIC_PREFILL_CONFIG_ENV)}
    os.environ[DOTS_ENV] = case.dots
    os.environ[MOSAIC_PREFILL_CONFIG_ENV] = case.launch
    try:
      return fp8lab.attention(q, k, v, block_tables=table, causal=causal,
                              compute=case.compute, implementation=case.implementation,
                              interpret=interpret)
    finally:
      for e, old in olds.items():
        if old is None:
          del os.environ[e]
        else:
          os.environ[e] = old
  return op


def _paged(x, table_perm: np.ndarray, page_size: int):
  """A contiguous cache (leaves (B, S, ...)) viewed as a pool of (B * S / page, page, ...)
  pages; the table (a permutation) makes every row read pages scattered over the pool."""
  def pool(a):
    return None if a is None else a.reshape((-1, page_size) + a.shape[2:])
  if isinstance(x, fp8lab.QuantizedArray):
    shape = (x.shape[0] * x.shape[1] // page_size, page_size) + tuple(x.shape[2:])
    return fp8lab.QuantizedArray(pool(x.data), pool(x.scales), x.tensor_scale, format=x.format,
                                 element_format=x.element_format, shape=shape, axis=x.axis,
                                 block_shape=x.block_shape, scale_mode=x.scale_mode,
                                 hadamard=x.hadamard)
  return pool(x)


def make_inputs(size: Size, copies: int, seed: int):
  """`copies` distinct (q, k, v) bfloat16: normal q, K and V."""
  @jax.jit
  def make(key):
    k1, k2, k3 = jax.random.split(key, 3)
    q = jax.random.normal(k1, (size.batch, size.q_len, size.q_heads, size.dim), jnp.bfloat16)
    shape = (size.batch, size.seq, size.kv_heads, size.dim)
    return (q, jax.random.normal(k2, shape, jnp.bfloat16),
            jax.random.normal(k3, shape, jnp.bfloat16))
  out = [make(jax.random.key(seed * 7919 + i)) for i in range(copies)]
  jax.block_until_ready(out)
  return out


# --- the run --------------------------------------------------------------------------------

def time_row(op: Callable, args: list, *, reps: int, warmup: int) -> dict[str, Any]:
  """timing.measure's row, and whether the first call's output is all finite."""
  row, outs = timing.measure(op, args, reps=reps, warmup=warmup)
  if outs is not None:
    row["finite"] = bool(np.all(np.isfinite(np.asarray(outs[0], np.float32))))
  return row


def run_benchmark(*, sizes, cases, baselines, out_path, reps, warmup, interpret, max_copies,
                  mem_bytes, budget_s, smoke, prefill_cases=None,
                  prefill_baselines=PREFILL_BASELINES) -> dict[str, Any]:
  now = datetime.datetime.now(datetime.timezone.utc)
  doc: dict[str, Any] = {
      "benchmark": "attention (fp8lab pallas over packed KV vs bf16 cudnn / XLA / JAX Pallas "
                   "gqa; prefill: vs cudnn / JAX Pallas mha / JAX Mosaic GPU, FLOP floor)",
      "date": now.isoformat(timespec="seconds"), "machine": machine_info(), "git": git_commit(),
      "smoke": smoke, "timing_method": timing.METHOD,
      "bytes_needed": "K and V as stored (packed words + scales + tensor scales; bfloat16 for "
                      "the baselines) + q + the output, read / written once; the copy row: "
                      "its array read and written. GBps = bytes_needed / time; pct_copy = GBps "
                      "/ the copy row's GBps; floor_us = bytes_needed at the copy row's "
                      "bandwidth (floor_device_us, pct_copy_device: by device time on a GPU)",
      "flops": "prefill rows: 4 B Hq D x (query, key) pairs attended (S^2; S (S + 1) / 2 "
               "causal); TFLOPs = flops / time; flop_floor_us = flops at this size's "
               "matmul_bf16 rate; pct_flop_floor = flop_floor_us / time",
      "settings": {"sizes": {s: dataclasses.asdict(SIZES[s]) for s in sizes}, "cases": cases,
                   "baselines": baselines, "prefill_cases": prefill_cases,
                   "prefill_baselines": list(prefill_baselines), "reps": reps, "warmup": warmup,
                   "interpret": interpret, "max_copies": max_copies, "mem_bytes": mem_bytes,
                   "page_size": PAGE_SIZE},
      "rows": [], "skipped": [],
  }
  t_start = time.perf_counter()

  def log(msg):
    print(f"[{time.perf_counter() - t_start:7.1f}s] {msg}", flush=True)

  def write():
    write_json(doc, out_path, default=str)

  doc["dispatch_overhead_us"] = timing.dispatch_overhead_s() * 1e6
  log(f"{doc['machine']['device_kind']}, jax {jax.__version__}; writing {out_path}; dispatch "
      f"overhead {doc['dispatch_overhead_us']:.1f} us")
  gpu = jax.default_backend() == "gpu"
  for si, name in enumerate(sizes):
    size = SIZES[name]
    kv_bf16 = 2 * size.batch * size.seq * size.kv_heads * size.dim * 2
    copies = 2 if smoke else timing.choose_copies(
        kv_bf16, l2_bytes=60 * 2**20, call_bytes=2 * 2**30, max_bytes=mem_bytes,
        max_copies=max_copies, min_copies=2)
    if size.prefill:            # compute-bound: 2 - 4 copies, one call already leaves L2
      copies = min(copies, 4)
    base = make_inputs(size, copies, seed=si + 1)
    copy_gbps = copy_dev_gbps = cudnn_us = cudnn_dev_us = None
    tflops_rate = None
    if size.prefill:
      pcases = list(prefill_cases or size.cases or PREFILL_DEFAULT)
      units = ([("baseline", b) for b in prefill_baselines]
               + [("fp8lab", c) for c in pcases])
    else:
      units = [("baseline", b) for b in baselines] + [("fp8lab", c) for c in cases]
    for kind, what in units:
      if budget_s and time.perf_counter() - t_start > budget_s:
        doc["skipped"].append(f"{name} {what}")
        continue
      if not gpu and (what in _GPU_ONLY or (kind == "fp8lab" and size.prefill and
                                             PREFILL_CASES[what].implementation == "cudnn")):
        doc["skipped"].append(f"{name} {what} (GPU only)")
        continue
      row: dict[str, Any] = {"size": name, "op": what, "kind": kind, "copies": copies}
      try:
        if kind == "baseline" and size.prefill:
          op = baseline_op(what, interpret, size)
          args = prefill_baseline_args(what, size, base, seed=si + 101)
          stored = (nbytes(args[0][0]) * 3 if what == "matmul_bf16" else
                    nbytes(args[0][1]) * 2 if what == "cudnn_fp8" else nbytes(base[0][1]) * 2)
        elif kind == "baseline":
          op, args = baseline_op(what, interpret), base
          stored = nbytes(base[0][1]) * (1 if what == "copy" else 2)
        else:
          case = PREFILL_CASES[what] if size.prefill else CASES[what]
          args = [(q, case.quantize(k), case.quantize(v)) for q, k, v in base]
          stored = nbytes(args[0][1]) + nbytes(args[0][2])
          if case.paged:
            pages = size.batch * size.seq // PAGE_SIZE
            perm = np.random.default_rng(si).permutation(pages).astype(np.int32)
            table = jnp.asarray(perm.reshape(size.batch, -1))
            args = [(q, _paged(k, perm, PAGE_SIZE), _paged(v, perm, PAGE_SIZE), table)
                    for q, k, v in args]
          op = fp8lab_op(case, interpret and case.implementation in ("pallas", "mosaic"),
                         causal=size.causal)
      except Exception as e:  # pylint: disable=broad-except
        row.update(status="error", error=f"{type(e).__name__}: {e}"[:2000])
        doc["rows"].append(row)
        log(f"{name:>9} {what:<18} ERROR {row['error'][:200]}")
        write()
        continue
      row.update(time_row(op, args, reps=reps, warmup=warmup))
      if row["status"] == "ok":
        qo = 0 if what in ("copy", "matmul_bf16") else 2 * nbytes(base[0][0])
        row["bytes_needed"] = stored + qo if what != "copy" else 2 * stored
        row["GBps"] = row["bytes_needed"] / (row["time_us"] * 1e-6) / 1e9
        dev = row.get("device_us_per_op")
        if what == "copy":
          copy_gbps = row["GBps"]
          copy_dev_gbps = row["bytes_needed"] / (dev * 1e-6) / 1e9 if dev else None
        if what == "cudnn_bf16":
          cudnn_us, cudnn_dev_us = row["time_us"], dev
        row["pct_copy"] = 100 * row["GBps"] / copy_gbps if copy_gbps else None
        row["floor_us"] = row["bytes_needed"] / (copy_gbps * 1e3) if copy_gbps else None
        if dev and copy_dev_gbps:
          row["floor_device_us"] = row["bytes_needed"] / (copy_dev_gbps * 1e3)
          row["pct_copy_device"] = 100 * row["floor_device_us"] / dev
        if size.prefill:
          t_s = (row.get("device_us_per_op") or row["time_us"]) * 1e-6
          if what == "matmul_bf16":
            n = args[0][0].shape[0]
            row["flops"] = 2 * n ** 3
            tflops_rate = row["flops"] / t_s / 1e12
          else:
            row["flops"] = size.flops
            if tflops_rate:
              row["flop_floor_us"] = row["flops"] / (tflops_rate * 1e6)
              row["pct_flop_floor"] = 100 * row["flop_floor_us"] / (t_s * 1e6)
          row["TFLOPs"] = row["flops"] / t_s / 1e12
        if cudnn_us:
          row["speedup_vs_cudnn"] = cudnn_us / row["time_us"]
        if cudnn_dev_us and dev:
          row["speedup_vs_cudnn_device"] = cudnn_dev_us / dev
      doc["rows"].append(row)
      log(f"{name:>9} {what:<18} " + (
          f"{row['time_us']:10.2f} us {row['GBps']:8.1f} GB/s R={copies}"
          if row["status"] == "ok" else f"ERROR {row['error'][:200]}"))
      write()
      del args
      gc.collect()
    del base
    gc.collect()
  doc["elapsed_s"] = round(time.perf_counter() - t_start, 1)
  write()
  return doc


def format_table(doc: dict[str, Any]) -> str:
  lines = [f"{'size':>9} {'op':<18} {'time us':>10} {'dev us':>9} {'GB/s':>8} {'%copy':>6} "
           f"{'floor':>8} {'%dev':>5} {'x cudnn':>7} {'TFLOP/s':>8} {'%flop':>6}", "-" * 104]
  for r in doc["rows"]:
    if r.get("status") != "ok":
      lines.append(f"{r['size']:>9} {r['op']:<18} ERROR {r.get('error', '')[:60]}")
      continue
    dev = r.get("device_us_per_op")
    pct = r.get("pct_copy")
    floor = r.get("floor_device_us") or r.get("floor_us")
    pdev = r.get("pct_copy_device")
    sp = r.get("speedup_vs_cudnn_device") or r.get("speedup_vs_cudnn")
    lines.append(f"{r['size']:>9} {r['op']:<18} {r['time_us']:10.2f} "
                 f"{(f'{dev:9.1f}' if dev else '        -')} {r['GBps']:8.1f} "
                 f"{(f'{pct:6.1f}' if pct else '     -')} "
                 f"{(f'{floor:8.1f}' if floor else '       -')} "
                 f"{(f'{pdev:5.0f}' if pdev else '    -')} "
                 f"{(f'{sp:7.2f}' if sp else '      -')}"
                 + (f" {r['TFLOPs']:8.1f}" if r.get("TFLOPs") else "")
                 + (f" {r['pct_flop_floor']:6.1f}" if r.get("pct_flop_floor") else ""))
  m = doc.get("machine", {})
  lines.append(f"{m.get('device_kind')} jax {m.get('jax')}, commit "
               f"{str(doc.get('git', {}).get('commit'))[:10]}")
  if doc.get("skipped"):
    lines.append(f"skipped: {', '.join(doc['skipped'])}")
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  cli.no_arguments(argv)
  if _SUMMARIZE.value:
    with open(_SUMMARIZE.value) as f:
      print(format_table(json.load(f)))
    return
  backend = jax.default_backend()
  smoke = backend == "cpu" or os.environ.get("FP8LAB_BENCH_SMOKE") == "1"
  with cli.usage_errors():
    cli.check_choices("case", _CASES.value, CASES)
    cli.check_choices("baseline", _BASELINES.value, BASELINES)
    cli.check_choices("prefill case", _PREFILL_CASES.value or [], PREFILL_CASES)
    cli.check_choices("prefill baseline", _PREFILL_BASELINES.value, PREFILL_BASELINES)
    sizes = _SIZES.value or list(SMOKE_SIZES if smoke else GPU_SIZES)
    cli.check_choices("size", sizes, SIZES)
  interpret = _INTERPRET.value if _INTERPRET.value is not None else backend == "cpu"
  out = _OUT.value or default_out("attention", smoke)
  doc = run_benchmark(sizes=sizes, cases=_CASES.value, baselines=_BASELINES.value,
                      out_path=out, reps=_REPS.value or (2 if smoke else 20),
                      warmup=_WARMUP.value if _WARMUP.value is not None else (1 if smoke else 3),
                      interpret=interpret, max_copies=_MAX_COPIES.value,
                      mem_bytes=int(_MEM_GB.value * 2**30), budget_s=_TIME_BUDGET_S.value,
                      smoke=smoke, prefill_cases=_PREFILL_CASES.value,
                      prefill_baselines=_PREFILL_BASELINES.value)
  print()
  print(format_table(doc))
  print(f"\nresults: {out}")
  bad = [r for r in doc["rows"] if r.get("status") == "error" or r.get("finite") is False]
  if bad:
    print(f"bench_attention: {len(bad)} rows failed or gave non-finite output", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
