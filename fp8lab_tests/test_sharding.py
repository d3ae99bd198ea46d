"""Tests of fp8lab.sharding: packed weights, KV caches and quantization under jax.sharding.

The sharded checks need several devices, and the pytest process has already started JAX on
one CPU device: they run in ONE subprocess (this module run as a script, `python -m
fp8lab_tests.test_sharding OUT.npz CASE...`) with XLA_FLAGS=--xla_force_host_platform_
device_count=4, which computes every case, sharded and unsharded, and saves the arrays; the
tests here compare them (numpy only). Expected values never come from fp8lab.sharding: they
are the unsharded fp8lab calls on one device (gemv_packed, attention, quantize_with_amax)
and, for the bound, float64 numpy over the golden model's dequantized weights.

Bit for bit (uint32 patterns via np.view), on a 4-device mesh ("tp"):
  * column-parallel gemv (n_out split, no communication) == gemv_packed, every layout of
    the registry that gemv_packed takes (the Pallas kernel in interpret mode where it
    serves the format, the "xla" path for blockwise FP8);
  * attention with q heads and the KV cache split by KV heads == fp8lab.attention (output
    and log-sum-exp), every KV format (the decode kernel in interpret mode);
  * sharded quantize_with_amax == quantize_with_amax (words, scales, tensor scale, amax,
    and the DelayedScaling state after the step) for every format, rows or columns split,
    current and delayed scaling;
  * row-parallel gemv on small integers (every partial sum exact in float32) == gemv_packed.

Row-parallel bound (float32, u = 2^-24, S = sum_j |w_j x_j| over the dequantized w in
float64, n = 4 devices, k the full length). gemv_packed's own bound for a length-m product
(its docstring; the "xla" path's float32 dot is within it too) is
  E(m) = 2 (m + 7) u S_m + u |y_m| + 2^-38 max|x| sum|w|.
Row-parallel: each device's float32 partial p_i over its k / n columns is within E(k / n)
of its exact value; the psum adds n float32 partials in the collective's order, which adds
at most gamma_{n-1} sum|p_i| <= (n - 1) u S (1 + O(k u)); summed over the devices the
partials' own terms give 2 (k/n + 7) u S + u S + 2^-38 max|x| sum|w|. The unsharded
result is within E(k) of the same exact value, so
  |y_tp - y_1| <= [2 (k + 7) + 2 (k/n + 7) + n + 1] u S (1 + 2^-10)
                  + 2^-37 max|x| sum|w|,
the factor (1 + 2^-10) covering the second-order terms (k u < 2^-14 here). The outputs
are float32 (x float32): no final rounding to a narrower dtype.

Errors: check_sharding / shard_quantized raise ValueError with the numbers for a spec that
would cut a packed word, a scale block or tile, or a Hadamard block (on an AbstractMesh,
in this process: no devices needed).

The TP decode benchmark (benchmarks/bench_decode_tp.py): its run_path in the worker on 2
of the 4 devices (default), its script with its absl flags in a 2-device subprocess (slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_DEV = 4
U32 = 2.0**-24

# Layout names of fp8lab.formats.LAYOUTS (all of which gemv_packed takes) and the kernel's.
GEMV_LAYOUTS = ("e4m3", "e5m2", "mxfp8", "mxfp8_e5m2", "mxfp4", "nvfp4", "nvfp4_2d",
                "e4m3_block", "e5m2_block", "e4m3_block_2d", "f16", "bf16")
KERNEL_LAYOUTS = ("e4m3", "e5m2", "mxfp8", "mxfp8_e5m2", "mxfp4", "nvfp4", "nvfp4_2d",
                  "f16", "bf16")
# KV formats of fp8lab.attention (blockwise FP8 with one scale per token and head).
KV_FORMATS = ("e4m3", "e5m2", "mxfp8", "mxfp8_e5m2", "mxfp4", "nvfp4", "e4m3_block",
              "e5m2_block", "f16", "bf16")
QUANT_FORMATS = ("e4m3", "e5m2", "mxfp8", "mxfp8_e5m2", "mxfp4", "nvfp4", "nvfp4_2d",
                 "e4m3_block", "e5m2_block", "f16", "bf16")
DELAYED_FORMATS = ("e4m3", "e5m2", "nvfp4")
EXACT_ROW_LAYOUTS = ("e4m3", "mxfp4")

# Which cases run by default. The kernel in interpret mode costs ~1 s a compile here, so the
# default run keeps a cover: every format in the quantize check, and one format of each
# kernel family in the gemv / attention ones (e4m3 and NVFP4 tiles column- and row-parallel,
# MX 4-bit and blockwise FP8 through "xla" column-parallel only, blockwise per token in
# attention); bf16 and the other formats run with FP8LAB_SLOW_TESTS=1 (every case).
COL_DEFAULT = ("e4m3", "mxfp4", "nvfp4_2d", "e5m2_block")
ROW_DEFAULT = ("e4m3", "nvfp4_2d")   # col's shapes: compiles shared
ATTN_DEFAULT = ("e4m3_block",)
# format -> its split in the default run (nvfp4's 1D blocks: in the delayed-scaling case)
QUANT_DEFAULT = {"e4m3": "cols", "e5m2": "rows", "mxfp8": "rows", "mxfp8_e5m2": "cols",
                 "mxfp4": "rows", "nvfp4": None, "nvfp4_2d": "cols", "e4m3_block": "rows",
                 "e5m2_block": "rows", "f16": "cols", "bf16": "rows"}
DELAYED_DEFAULT = ("nvfp4", "reference")
EXACT_ROW_DEFAULT = ("e4m3",)


def _layout(name):
  from fp8lab.formats import LAYOUTS
  return LAYOUTS[name]


def _gemv_shape(layout: str) -> tuple[int, int]:
  """(n_out, k) with n_out / 4 and k / 4 whole tiles / blocks of the layout."""
  return (512, 512) if layout == "e4m3_block_2d" else (64, 512)


# ============================================================================ the worker

def _spec_text(a) -> np.ndarray:
  """a's PartitionSpec as JSON, padded with None to a's rank."""
  spec = tuple(a.sharding.spec)
  return np.array(json.dumps(list(spec) + [None] * (a.ndim - len(spec))))


def _worker(out_path: str, cases: list[str]) -> None:
  """Runs in the 4-device subprocess: computes each case, saves the arrays."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import Mesh, PartitionSpec as P
  import fp8lab
  from fp8lab import sharding as S

  assert jax.device_count() >= N_DEV, jax.devices()
  mesh = Mesh(np.array(jax.devices()[:N_DEV]), ("tp",))
  out: dict[str, np.ndarray] = {}
  times: dict[str, float] = {}

  def save(case, **arrays):
    for name, a in arrays.items():
      if a is not None:
        out[f"{case}:{name}"] = np.asarray(a)

  def gemv_kw(layout):
    if layout in KERNEL_LAYOUTS:
      return dict(implementation="pallas", interpret=True)
    return dict(implementation="xla")

  def weight(layout, seed, integers=False):
    fmt, block = _layout(layout)
    shape = _gemv_shape(layout)
    if integers:        # small integers, exact in every format below: exact sums
      vals = jnp.asarray([0, 1, -1, 2, -2, 3, -3, 4, -4, 6, -6], jnp.float32)
      w = vals[jax.random.randint(jax.random.key(seed), shape, 0, 11)]
      kw = {"scale": jnp.float32(1)} if fmt == "e4m3" else {}
      return fp8lab.quantize(w, fmt, block_shape=block, **kw)
    w = jax.random.normal(jax.random.key(seed), shape, jnp.float32)
    return fp8lab.quantize(w, fmt, block_shape=block)

  def x_of(k, seed, integers=False):
    if integers:
      return jax.random.randint(jax.random.key(seed), (2, k), -8, 9).astype(jnp.float32)
    return jax.random.normal(jax.random.key(seed), (2, k), jnp.float32)

  def colgemv(case, layout):
    w = weight(layout, 1)
    x = x_of(w.shape[1], 2)
    want = fp8lab.gemv_packed(w, x, **gemv_kw(layout))
    ws = S.shard_quantized(w, mesh, P("tp", None))
    f = jax.jit(lambda w, x: S.column_parallel_gemv(w, x, mesh, "tp", **gemv_kw(layout)))
    got = f(ws, x)
    save(case, want=want, got=got, spec=_spec_text(got), x=x)
    if layout not in KERNEL_LAYOUTS:                   # for the reordering bound
      save(case, w=fp8lab.dequantize(w, jnp.float32))

  def rowgemv(case, layout, integers=False):
    w = weight(layout, 3, integers)
    x = x_of(w.shape[1], 4, integers)
    want = fp8lab.gemv_packed(w, x, **gemv_kw(layout))
    ws = S.shard_quantized(w, mesh, P(None, "tp"))
    f = jax.jit(lambda w, x: S.row_parallel_gemv(w, x, mesh, "tp", **gemv_kw(layout)))
    got = f(ws, x)
    save(case, want=want, got=got, x=x, w=fp8lab.dequantize(w, jnp.float32))

  def attn(case, fmt):
    from fp8lab.formats import QUANTIZED
    bsz, s, hkv, hq, d = 2, 40, N_DEV, 2 * N_DEV, 64
    keys = jax.random.split(jax.random.key(5), 3)
    q = jax.random.normal(keys[0], (bsz, 1, hq, d), jnp.float32)
    block = (d,) if QUANTIZED[fmt].scaling == "block" else None
    k = fp8lab.quantize(jax.random.normal(keys[1], (bsz, s, hkv, d)), fmt, block_shape=block)
    v = fp8lab.quantize(jax.random.normal(keys[2], (bsz, s, hkv, d)), fmt, block_shape=block)
    lengths = jnp.asarray([s, 23], jnp.int32)
    kw = dict(implementation="pallas", interpret=True)
    o, lse = fp8lab.attention(q, k, v, kv_lengths=lengths, return_lse=True, **kw)
    spec = P(None, None, "tp", None)
    ks, vs = S.shard_quantized(k, mesh, spec), S.shard_quantized(v, mesh, spec)
    f = jax.jit(lambda q, k, v, n: S.sharded_attention(q, k, v, mesh, head_axis="tp",
                                                       kv_lengths=n, return_lse=True, **kw))
    o_s, lse_s = f(q, ks, vs, lengths)
    save(case, want=o, got=o_s, want_lse=lse, got_lse=lse_s)

  def quant(case, rest):
    fmt_name, how, split, implementation = rest.split("/")
    fmt, block = _layout(fmt_name)
    # the gemv weights' shape (compiles shared); each shard its own amax
    x = jax.random.normal(jax.random.key(7), (64, 512), jnp.float32)
    x = x * jnp.arange(1, 65, dtype=jnp.float32)[:, None] / 8
    spec = P("tp", None) if split == "rows" else P(None, "tp")
    scaling = None
    if how == "delayed":
      st = fp8lab.DelayedScaling.create(fmt, history_length=4)
      scaling = st.update(jnp.float32(5.0)).update(jnp.float32(3.0))
    impl = (dict(implementation="pallas", interpret=True) if implementation == "pallas"
            else dict(implementation="reference"))
    kw = {} if block is None else {"block_shape": block}
    want = fp8lab.quantize_with_amax(x, fmt, scaling=scaling, **impl, **kw)
    f = jax.jit(lambda x, sc: S.sharded_quantize_with_amax(x, fmt, mesh, spec, scaling=sc,
                                                           **impl, **kw))
    got = f(x, scaling)
    for name in ("data", "scales", "tensor_scale"):
      save(case, **{f"want_{name}": getattr(want.q, name), f"got_{name}": getattr(got.q, name)})
    save(case, want_amax=want.amax, got_amax=got.amax,
         data_spec=_spec_text(got.q.data))
    if scaling is not None:
      save(case, want_hist=want.scaling.amax_history, got_hist=got.scaling.amax_history,
           want_scale=want.scaling.scale, got_scale=got.scaling.scale)

  def tp_smoke(case):
    """bench_decode_tp's run_path (the benchmark's rows) at the smoke size, 1 layer, on
    the first 2 devices: the nvfp4 path through gemv_packed's "xla" implementation."""
    import dataclasses
    from benchmarks import bench_decode as bd
    from benchmarks import bench_decode_tp as tp
    model = dataclasses.replace(bd.SMOKE_MODEL, layers=1)
    rows = tp.run_path("fp8lab_nvfp4", model, 2, [(2, 32)], seed=0, impl="xla",
                       interpret=False, gemv_x_dtype=jnp.bfloat16, attn_impl="xla", reps=2,
                       warmup=0, agree_tol=5e-2, log=lambda _: None)
    out[f"{case}:rows"] = np.array(json.dumps(rows))

  for case in cases:
    t0 = time.perf_counter()
    kind, rest = case.split("/", 1)
    if kind == "col":
      colgemv(case, rest)
    elif kind == "row":
      rowgemv(case, rest)
    elif kind == "rowint":
      rowgemv(case, rest, integers=True)
    elif kind == "attn":
      attn(case, rest)
    elif kind == "quant":
      quant(case, rest)
    elif kind == "tp":
      tp_smoke(case)
    else:
      raise ValueError(case)
    times[case] = time.perf_counter() - t0
  out["__times__"] = np.array(json.dumps(times))
  np.savez(out_path, **out)


# ============================================================================ the cases

def _param(case: str, default: bool):
  return case if default else pytest.param(case, marks=pytest.mark.slow)


COL_CASES = [_param(f"col/{l}", l in COL_DEFAULT) for l in GEMV_LAYOUTS]
ROW_CASES = [_param(f"row/{l}", l in ROW_DEFAULT) for l in GEMV_LAYOUTS]
ROWINT_CASES = [_param(f"rowint/{l}", l in EXACT_ROW_DEFAULT) for l in EXACT_ROW_LAYOUTS]
ATTN_CASES = [_param(f"attn/{f}", f in ATTN_DEFAULT) for f in KV_FORMATS]
QUANT_CASES = (
    [_param(f"quant/{f}/current/{split}/reference", QUANT_DEFAULT[f] == split)
     for f in QUANT_FORMATS for split in ("rows", "cols")]
    + [_param(f"quant/{f}/delayed/rows/{impl}", (f, impl) == DELAYED_DEFAULT)
       for f in DELAYED_FORMATS for impl in ("reference", "pallas")])


def _cases_to_run() -> list[str]:
  from fp8lab_tests.switches import SLOW
  cases = ["tp/smoke"]
  for p in COL_CASES + ROW_CASES + ROWINT_CASES + ATTN_CASES + QUANT_CASES:
    if isinstance(p, str):
      cases.append(p)
    elif SLOW:
      cases.append(p.values[0])
  return cases


def _subprocess_env(n_devices: int) -> dict[str, str]:
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p))
  flags = [f for f in env.get("XLA_FLAGS", "").split()
           if not f.startswith("--xla_force_host_platform_device_count")]
  # n host devices; XLA's CPU backend without its costly optimizations, which halves the
  # compile times that dominate here (both sides of every comparison compile with them).
  env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={n_devices}",
                                       "--xla_backend_optimization_level=0",
                                       "--xla_llvm_disable_expensive_passes=true"])
  return env


@pytest.fixture(scope="module")
def results(tmp_path_factory, worker_id):
  """Every case of this run, computed once in the 4-device subprocess: once per pytest run,
  not once per xdist worker (the workers share the base temp directory; the first to take
  the lock computes, the others read its file)."""
  import fcntl
  import hashlib
  cases = _cases_to_run()
  base = (tmp_path_factory.getbasetemp() if worker_id == "master"
          else tmp_path_factory.getbasetemp().parent)
  key = hashlib.sha256(" ".join(cases).encode()).hexdigest()[:12]
  out = base / f"sharding_results_{key}.npz"
  with open(base / f"sharding_results_{key}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not out.exists():
      tmp = out.with_suffix(".partial.npz")
      proc = subprocess.run([sys.executable, "-m", "fp8lab_tests.test_sharding", str(tmp),
                             *cases], cwd=_REPO, env=_subprocess_env(N_DEV),
                            capture_output=True, text=True, timeout=900)
      assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
      tmp.rename(out)
  with np.load(out) as f:
    return {k: f[k] for k in f.files}


def _bits(a: np.ndarray) -> np.ndarray:
  a = np.ascontiguousarray(a)
  return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def assert_same_bits(got, want, what):
  assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape,
                                                               got.dtype, want.dtype)
  g, w = _bits(got), _bits(want)
  bad = np.argwhere(g != w)
  assert bad.size == 0, (f"{what}: {len(bad)} of {g.size} differ, first at {bad[0]}: "
                         f"{got[tuple(bad[0])]!r} vs {want[tuple(bad[0])]!r}")


# ============================================================================ the tests

@pytest.mark.parametrize("case", COL_CASES)
def test_column_parallel_gemv(results, case):
  """Bit for bit through the kernel (each output row is the same float32 sum, in the same
  order, on its device). The "xla" path (blockwise FP8) is XLA's CPU dot, whose order of
  additions depends on the number of output columns (seen: 30 of 32 outputs differ
  between (2, 512) x (512, 64) and x (512, 16)): there, both are float32 sums of the same
  exact-or-rounded products, each within gamma_k S of the exact one, so
  |y_tp - y_1| <= 2 gamma_k S, gamma_k = k u / (1 - k u)."""
  got, want = results[f"{case}:got"], results[f"{case}:want"]
  assert json.loads(str(results[f"{case}:spec"])) == [None, "tp"]
  if case.split("/")[1] in KERNEL_LAYOUTS:
    assert_same_bits(got, want, case)
    return
  x = results[f"{case}:x"].astype(np.float64)
  w = results[f"{case}:w"].astype(np.float64)
  k = w.shape[1]
  tol = 2 * (k * U32 / (1 - k * U32)) * (np.abs(x) @ np.abs(w).T)
  err = np.abs(got.astype(np.float64) - want.astype(np.float64))
  assert (err <= tol).all(), (case, float((err / tol).max()))


@pytest.mark.parametrize("case", ROW_CASES)
def test_row_parallel_gemv_within_psum_bound(results, case):
  """|y_tp - y_1| within the module docstring's bound, per output element."""
  got = results[f"{case}:got"].astype(np.float64)
  want = results[f"{case}:want"].astype(np.float64)
  x = results[f"{case}:x"].astype(np.float64)
  w = results[f"{case}:w"].astype(np.float64)
  k, n = w.shape[1], N_DEV
  s = np.abs(x) @ np.abs(w).T                                      # S per output
  tol = ((2 * (k + 7) + 2 * (k // n + 7) + n + 1) * U32 * s * (1 + 2.0**-10)
         + 2.0**-37 * np.abs(x).max(axis=1, keepdims=True) * np.abs(w).sum(axis=1)[None, :])
  assert np.isfinite(got).all() and np.isfinite(want).all()
  err = np.abs(got - want)
  assert (err <= tol).all(), (case, float((err / tol).max()))
  # and both within E(k) of the float64 product: the bound is not vacuous for the data
  exact = x @ w.T
  assert (np.abs(want - exact) <= 2 * (k + 7) * U32 * s + 2.0**-38 * s).all()


@pytest.mark.parametrize("case", ROWINT_CASES)
def test_row_parallel_gemv_exact_sums_bitwise(results, case):
  """Small integers: every partial sum and the psum are exact, so any order gives the
  same bits (and the exact product)."""
  got, want = results[f"{case}:got"], results[f"{case}:want"]
  assert_same_bits(got, want, case)
  exact = results[f"{case}:x"].astype(np.float64) @ results[f"{case}:w"].astype(np.float64).T
  assert np.array_equal(got.astype(np.float64), exact)


@pytest.mark.parametrize("case", ATTN_CASES)
def test_attention_sharded_by_kv_heads_bitwise(results, case):
  assert_same_bits(results[f"{case}:got"], results[f"{case}:want"], case + " o")
  assert_same_bits(results[f"{case}:got_lse"], results[f"{case}:want_lse"], case + " lse")


@pytest.mark.parametrize("case", QUANT_CASES)
def test_sharded_quantize_bytes(results, case):
  for name in ("data", "scales", "tensor_scale", "amax", "hist", "scale"):
    if f"{case}:want_{name}" in results or f"{case}:got_{name}" in results:
      assert_same_bits(results[f"{case}:got_{name}"], results[f"{case}:want_{name}"],
                       f"{case} {name}")
  split = case.split("/")[3]
  assert json.loads(str(results[f"{case}:data_spec"])) == (
      ["tp", None] if split == "rows" else [None, "tp"])


# ---------------------------------------------------------------------------- errors

def _abstract_mesh(n=N_DEV):
  from jax.sharding import AbstractMesh
  return AbstractMesh((n,), ("tp",))


def _q(fmt, shape, **kw):
  """The QuantizedArray of a (shape) float32 array, abstract (leaves ShapeDtypeStruct): the
  checks read its static layout only."""
  import jax
  import fp8lab
  return jax.eval_shape(lambda a: fp8lab.quantize(a, fmt, **kw),
                        jax.ShapeDtypeStruct(shape, "float32"))


def _leaf_counts_divide(x, spec, n: int) -> bool:
  """Whether every leaf axis that `spec` splits has a length divisible by n (what JAX's
  own device_put of the leaves checks)."""
  import fp8lab
  specs = fp8lab.quantized_specs(x, spec)
  for leaf, s in ((x.data, specs.data), (x.scales, specs.scales)):
    if leaf is None:
      continue
    for length, e in zip(leaf.shape, tuple(s) + (None,) * leaf.ndim):
      if e is not None and length % n:
        return False
  return True


# (format, logical shape, spec, quantize kwargs, devices, message, JAX alone would accept
# the leaves' split: every split leaf axis divisible, the silent cases).
BAD_SHARDINGS = [
    # mxfp4 k = 48 over 2: 3 words (24 codes) and one scale each, but block 0 is elements
    # 0..31: device 1 would take block 1's scale for elements 24..31
    ("mxfp4", (8, 48), (None, "tp"), {}, 2, r"24 elements, not a multiple of the scale "
     r"block \(32,\)", True),
    # e4m3 k = 8 over 4: 2 elements a shard, half a word each; one word for two devices
    ("e4m3", (8, 8), (None, "tp"), {}, 4, r"2 elements, not a multiple of the 4 e4m3 codes "
     r"per uint32 word", False),
    # e4m3 k = 6 over 2: 3 elements each, in 2 words (the second padded): one word each,
    # device 1's holding elements 4, 5 instead of 3, 4, 5
    ("e4m3", (8, 6), (None, "tp"), {}, 2, r"3 elements, not a multiple of the 4 e4m3 codes",
     True),
    ("mxfp4", (8, 128), (None, "tp"), {}, 8, r"16 elements, not a multiple of the scale "
     r"block \(32,\)", False),
    ("nvfp4", (8, 38), (None, "tp"), {}, 4, r"length 38 is not a multiple of 4", False),
    ("nvfp4", (8, 48), (None, "tp"), {}, 4, r"12 elements, not a multiple of the 8 e2m1 "
     r"codes per uint32 word", False),
    # 16x16 tiles: 56 rows over 4 devices, 14 rows each, and 4 tile rows, one each: device
    # 1 (rows 14..27) would take tile row 1 (rows 16..31)
    ("nvfp4", (56, 64), ("tp", None), {"block_shape": (16, 16)}, 4,
     r"axis 0 .* 14 elements, not a multiple of the scale tile \(16, 16\) \(16 along", True),
    ("nvfp4", (32, 64), ("tp", None), {"block_shape": (16, 16)}, 4,
     r"axis 0 .* 8 elements, not a multiple of the scale tile \(16, 16\)", False),
    ("e4m3_block", (8, 256), (None, "tp"), {}, 4, r"64 elements, not a multiple of the scale "
     r"block \(128,\)", False),
    ("e4m3", (8, 32), (None, "tp"), {"hadamard": 16}, 4, r"8 elements, not a multiple of the "
     r"Hadamard block 16", True),
    ("bf16", (8, 4), (None, "tp"), {}, 4, r"1 elements, not a multiple of the 2 bf16 codes",
     False),
]


@pytest.mark.parametrize("fmt,shape,spec,kw,n,message,silent", BAD_SHARDINGS)
def test_bad_sharding_is_a_value_error_with_the_numbers(fmt, shape, spec, kw, n, message,
                                                        silent):
  from jax.sharding import PartitionSpec as P
  import fp8lab
  mesh = _abstract_mesh(n)
  x = _q(fmt, shape, **kw)
  with pytest.raises(ValueError, match=message):
    fp8lab.check_sharding(x, mesh, P(*spec))
  with pytest.raises(ValueError, match=message):
    fp8lab.shard_quantized(x, mesh, P(*spec))
  # the cases JAX's own split of the leaves would take without a word
  assert _leaf_counts_divide(x, P(*spec), n) == silent


def test_good_sharding_specs_of_the_leaves():
  from jax.sharding import PartitionSpec as P
  import fp8lab
  mesh = _abstract_mesh()
  x = _q("nvfp4", (64, 256))
  fp8lab.check_sharding(x, mesh, P("tp", None))
  fp8lab.check_sharding(x, mesh, P(None, "tp"))
  specs = fp8lab.quantized_specs(x, P(None, "tp"))
  assert (specs.data, specs.scales, specs.tensor_scale) == (P(None, "tp"), P(None, "tp"), P())
  specs = fp8lab.quantized_specs(_q("mxfp8", (64, 256)), P("tp"))
  assert (specs.data, specs.scales, specs.tensor_scale) == (P("tp", None), P("tp", None), None)
  with pytest.raises(ValueError, match="mesh has no axis 'dp'"):
    fp8lab.check_sharding(x, mesh, P("dp", None))


# ---------------------------------------------------------------------------- TP decode

# per device: QKV (4 + 2 * 2) * 16 / 2 = 64 rows of 64; O 64 x 32; gate-up 128 x 64; down
# 64 x 64; LM head 128 x 64 (the smoke model: hidden 64, 4 heads and 2 KV heads of 16, MLP
# 128, vocabulary 256; 2 devices)
_LOCAL = {"qkv": [64, 64], "o": [64, 32], "gate_up": [128, 64], "down": [64, 64],
          "lm_head": [128, 64]}
# nvfp4 weights of the 1-layer smoke model: 4 bits a weight, an E4M3 byte per 16, a float32
# tensor scale per matrix; the bf16 gains (g_attn, g_mlp, g_final)
_NVFP4_BYTES = ((128 * 64 + 64 * 64 + 256 * 64 + 64 * 128 + 256 * 64) * 9 // 16 + 4 * 5
                + 3 * 64 * 2)


def _check_tp_row(r, agree_tol):
  assert r["status"] == "ok", r.get("error")
  assert (r["path"], r["batch"], r["kv_len"], r["devices"]) == ("fp8lab_nvfp4", 2, 32, 2)
  assert r["tp_over_single"] == pytest.approx(r["tp_step_us"] / r["single_step_us"])
  assert r["agrees"] is True and 0 <= r["max_rel_diff_tp_vs_single"] <= agree_tol
  assert r["local_matrices"] == _LOCAL
  assert r["weight_bytes"] == _NVFP4_BYTES
  assert r["kv_bytes"] == 2 * 2 * 32 * 2 * 16 * 2          # (k, v) x B x L x heads x d, bf16


def test_tp_decode_step_agrees_with_one_device(results):
  """bench_decode_tp's run_path, in the worker on 2 of its devices (1 layer of the smoke
  model, nvfp4 weights through gemv_packed's "xla" path): the TP step's logits within
  bench_decode's agree_tol of the 1-device step's, the per-device sizes as worked out."""
  rows = json.loads(str(results["tp/smoke:rows"]))
  assert len(rows) == 1
  _check_tp_row(rows[0], 5e-2)


@pytest.mark.slow
def test_bench_decode_tp_main_smoke(tmp_path):
  """benchmarks/bench_decode_tp.py as a script (its absl flags, the JSON file) on 2 host
  devices."""
  out = tmp_path / "tp.json"
  proc = subprocess.run(
      [sys.executable, os.path.join(_REPO, "benchmarks", "bench_decode_tp.py"), f"--out={out}",
       "--paths=fp8lab_nvfp4", "--fp8lab_implementation=xla", "--layers=1", "--reps=2",
       "--warmup=0"], cwd=_REPO, env=_subprocess_env(2), capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  doc = json.loads(out.read_text())
  assert doc["smoke"] is True and doc["devices"] == 2 and doc["machine"]["device_count"] == 2
  assert doc["model"]["layers"] == 1 and len(doc["rows"]) == 1
  _check_tp_row(doc["rows"][0], doc["settings"]["agree_tol"])
  assert "ratio" in proc.stdout


if __name__ == "__main__":
  _worker(sys.argv[1], sys.argv[2:])
