"""A Llama-3-8B-shaped decode step: tokens/s of XLA's and fp8lab's weight paths, one run.

The model (random weights made on the device with jax.random; bf16 activations):

  h = embed[tokens]                                           (B, 4096)
  per layer (--layers, 32):
    x = rmsnorm(h) * g_attn;  q, k, v = x @ W_qkv^T           fused QKV 6144 x 4096
                                                              (32 query heads, 8 KV heads, d 128)
    the layer's KV cache (B, L, 8, 128) takes k, v in its last slot, L - 1
    a = attention(q, cache)                                   bf16 cache: cudnn on a GPU,
                                                              xla on a CPU; packed cache:
                                                              fp8lab.attention
    h = h + a @ W_o^T                                         4096 x 4096
    x = rmsnorm(h) * g_mlp;  g, u = x @ W_gu^T                fused gate-up 28672 x 4096
    h = h + (silu(g) * u) @ W_down^T                          4096 x 14336
  logits = (rmsnorm(h) * g_final) @ W_lm^T;  next = argmax    LM head 128256 x 4096

one jitted step for B tokens (one per sequence) against caches of length L, every position
attended (the caches hold random entries). RoPE is left out (elementwise, no weights). The
caches are donated, so each step writes its slot in place, as a serving loop would, and each
timed step takes the tokens the step before chose (greedy generation; the slot stays L - 1,
so every step does the same work).

KV caches (--kv_formats, for the fp8lab paths; the XLA paths keep bf16):
  bf16          (B, L, 8, 128) bf16 arrays, a dynamic_update_slice and
                jax.nn.dot_product_attention (cudnn on a GPU);
  a format name (e4m3_block: e4m3 with a float32 scale per token and head; e4m3, nvfp4,
                mxfp4, ...) fp8lab.quantize's packed cache along D, fp8lab.kv_cache_update
                for the new token and fp8lab.attention (implementation=None: the decode
                kernel on a GPU; the kernel in interpret mode on a CPU).

Weight paths (--paths), the same model otherwise:
  bf16          XLA: bf16 weights, x @ W^T;
  xla_e4m3      XLA: float8_e4m3fn weights and a float32 scale per matrix, the upcast inside
                XLA's fusion: (x @ W.astype(bf16)^T) * s (no dequantized copy of W);
  fp8lab_e4m3, fp8lab_nvfp4, fp8lab_mxfp4
                fp8lab.gemv_packed over fp8lab.quantize's packed weights (implementation
                --fp8lab_implementation: "auto" is implementation=None, the dispatch table
                of fp8lab/kernels/gemv/dispatch.py on a GPU; interpret mode on a CPU).
Reported per path and case (B, L): tokens/s (B / median step time, host clock around each
step, benchmarks/timing.py), its ratio to bf16's in the same run, the device time of a step
(profiler: the sum of its kernels) and the bytes a step must read (weights as stored + the KV
caches) per second of it. Two more step times, each with its ratio to bf16's:
  pipelined   --pipelined_steps steps enqueued back to back, one sync at the end: a greedy
              generation loop whose tokens stay on the device, the host enqueueing step i+1
              while the GPU runs step i; on a GPU the profiler over the same steps gives the
              GPU's span, busy and idle time per step and the top kernels (gpu_pipelined);
  loop        --loop_steps steps inside one jitted lax.fori_loop (no dispatch from Python
              between steps; off by default). --check compares each fp8lab path's first logits with the same
weights through implementation="reference" (the golden model).

On a CPU (or with --smoke) it is a smoke run: 2 layers of a tiny model (hidden 64), the
kernel in interpret mode, B x L = 2 x 32, a few steps, under a minute.

Usage:
  python benchmarks/bench_decode.py                              # smoke on a CPU
  python benchmarks/bench_decode.py --cases=1x4096,16x4096,1x32768 --out=$OUT/decode.json
  python benchmarks/bench_decode.py --paths=bf16,fp8lab_mxfp4 --gemv_x_dtype=float32
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import gc
import math
import os
import sys
import time
from typing import Any, Callable

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)   # run as a script: fp8lab and benchmarks from the working tree

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
import numpy as np  # noqa: E402

import fp8lab  # noqa: E402
from benchmarks import cli  # noqa: E402
from benchmarks import timing  # noqa: E402
from benchmarks.run_info import default_out, git_commit, machine_info, write_json  # noqa: E402
from benchmarks.timing import nbytes  # noqa: E402
from fp8lab.kernels import attention as attn_kernel  # noqa: E402
from fp8lab.kernels.gemv import dispatch  # noqa: E402

# Weight path -> fp8lab.quantize format (None: an XLA path).
PATHS: dict[str, str | None] = {"bf16": None, "xla_e4m3": None, "fp8lab_e4m3": "e4m3",
                                "fp8lab_nvfp4": "nvfp4", "fp8lab_mxfp4": "mxfp4"}
BASELINE = "bf16"


@dataclasses.dataclass(frozen=True)
class Model:
  """The decode model's sizes (Llama-3-8B by default)."""
  layers: int = 32
  hidden: int = 4096
  heads: int = 32
  kv_heads: int = 8
  head_dim: int = 128
  intermediate: int = 14336
  vocab: int = 128256

  def matrices(self) -> dict[str, tuple[int, int]]:
    """Each projection's (n_out, k)."""
    qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
    return {"qkv": (qkv, self.hidden), "o": (self.hidden, self.heads * self.head_dim),
            "gate_up": (2 * self.intermediate, self.hidden),
            "down": (self.hidden, self.intermediate), "lm_head": (self.vocab, self.hidden)}


LLAMA3_8B = Model()
SMOKE_MODEL = Model(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128,
                    vocab=256)
GPU_CASES = ("1x4096", "16x4096", "1x32768")
SMOKE_CASES = ("2x32",)
BF16_KV = "bf16"           # --kv_formats' plain bf16 cache (cudnn); the others are packed

_PATHS = flags.DEFINE_list("paths", list(PATHS), f"Weight paths, from {', '.join(PATHS)}.")
_CASES = flags.DEFINE_list(
    "cases", None, "Batch x KV length cases, e.g. 1x4096,16x4096 (default: "
    f"{','.join(GPU_CASES)} on a GPU, {','.join(SMOKE_CASES)} on a CPU or with --smoke).")
_LAYERS = flags.DEFINE_integer("layers", None, "Layers (default 32 on a GPU, 2 smoke).")
_HIDDEN = flags.DEFINE_integer("hidden", None, "Model width (default 4096, 128 smoke).")
_HEADS = flags.DEFINE_integer("heads", None, "Query heads (32, 4 smoke).")
_KV_HEADS = flags.DEFINE_integer("kv_heads", None, "KV heads (8, 2 smoke).")
_HEAD_DIM = flags.DEFINE_integer("head_dim", None, "Head dimension (128, 32 smoke).")
_INTERMEDIATE = flags.DEFINE_integer("intermediate", None, "MLP width (14336, 256 smoke).")
_VOCAB = flags.DEFINE_integer("vocab", None, "Vocabulary (128256, 512 smoke).")
_SMOKE = flags.DEFINE_bool("smoke", False, "The tiny model even on a GPU (the default on a "
                           "CPU; FP8LAB_BENCH_SMOKE=1 does the same).")
_KV_FORMATS = flags.DEFINE_list(
    "kv_formats", [BF16_KV], "KV caches of the fp8lab paths: bf16 (plain arrays, cudnn) and/or "
    "fp8lab formats of a packed cache (e4m3_block = per token-head scales, e4m3, nvfp4, ...).")
_FP8LAB_IMPL = flags.DEFINE_enum(
    "fp8lab_implementation", "auto", ["auto", "pallas", "xla"],
    "gemv_packed's implementation for the fp8lab paths: auto = None (the dispatch table on a "
    "GPU), pallas (the kernel), xla (jnp over the packed words).")
_KV_UPDATE = flags.DEFINE_enum(
    "kv_update", "auto", ["auto", "pallas", "reference"],
    "fp8lab.kv_cache_update's implementation for the packed caches: auto = None (the "
    "quantize kernel on a GPU where it serves the format), pallas, reference (the golden "
    "model; on a GPU its while loops make the step ~6x slower, docs/results.md).")
_GEMV_X_DTYPE = flags.DEFINE_enum(
    "gemv_x_dtype", "bfloat16", ["bfloat16", "float32"],
    "dtype of x handed to gemv_packed (the activations are bf16; float32 casts them first).")
_ATTENTION = flags.DEFINE_enum("attention", "auto", ["auto", "cudnn", "xla"],
                               "jax.nn.dot_product_attention's implementation (auto: cudnn "
                               "on a GPU, xla elsewhere).")
_REPS = flags.DEFINE_integer("reps", None, "Timed steps per case (default 20, 3 smoke).")
_WARMUP = flags.DEFINE_integer("warmup", None, "Untimed steps first (default 3, 1 smoke).")
_CHECK = flags.DEFINE_bool("check", None, "Compare the fp8lab paths' logits with the "
                           "reference implementation's (default: in a smoke run only).")
_AGREE_TOL = flags.DEFINE_float("agree_tol", 5e-2, "Max |logits - reference| / max |reference| "
                                "of a check before it counts as a mismatch (bf16 activations).")
_COPY_GIB = flags.DEFINE_float("copy_gib", None, "Array size of the copy-bandwidth measurement "
                               "(GiB; default 2 on a GPU, 1/64 smoke; 0: skip).")
_OUT = flags.DEFINE_string("out", None, "JSON results path (default benchmarks/results/"
                           "decode_<device>_<date>.json), rewritten after every row.")
_TIME_BUDGET_S = flags.DEFINE_float("time_budget_s", 0.0, "Stop starting new paths after this "
                                    "many seconds (0: no limit).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random weights, caches and tokens.")
_PIPELINED = flags.DEFINE_integer(
    "pipelined_steps", None, "Also time this many steps enqueued back to back with one sync "
    "at the end, as a generation loop whose tokens stay on the device runs them (default 16, "
    "2 smoke; 0: off). On a GPU the same back-to-back steps are profiled: GPU span, busy and "
    "idle time per step and the top kernels.")
_LOOP = flags.DEFINE_integer(
    "loop_steps", 0, "Also time this many steps inside ONE jitted call (lax.fori_loop over "
    "the step; no per-step dispatch from Python). 0: off.")


def parse_case(s: str) -> tuple[int, int]:
  """'16x4096' -> (batch 16, KV length 4096)."""
  parts = s.lower().split("x")
  if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
    raise ValueError(f"case {s!r} is not batch x KV length with positive integers, e.g. 1x4096")
  return int(parts[0]), int(parts[1])


# --- weights, made on the device -------------------------------------------------------------


def _maker(path: str, n_out: int, k: int):
  """A jitted key -> weight of `path`'s kind for an (n_out, k) projection: values of
  N(0, 1/k), so each projection keeps its input's scale."""
  fmt = PATHS[path]
  std = 1.0 / math.sqrt(k)

  def normal(key):
    return jax.random.normal(key, (n_out, k), jnp.float32) * std

  if path == "bf16":
    return jax.jit(lambda key: normal(key).astype(jnp.bfloat16))
  if path == "xla_e4m3":
    # e4m3 codes of N(0, 1) values and the scale std: W = codes * std
    return jax.jit(lambda key: (
        jax.random.normal(key, (n_out, k), jnp.float32).astype(jnp.float8_e4m3fn),
        jnp.float32(std)))
  return jax.jit(lambda key: fp8lab.quantize(normal(key), fmt, axis=-1))


_MAKERS: dict[tuple[str, int, int], Callable] = {}


def make_weight(path: str, n_out: int, k: int, key) -> Any:
  mk = _MAKERS.get((path, n_out, k))
  if mk is None:
    mk = _MAKERS[(path, n_out, k)] = _maker(path, n_out, k)
  return mk(key)


def make_params(path: str, model: Model, seed: int) -> dict[str, Any]:
  """Every weight of the model for one path (norm gains and the embedding in bf16 for all)."""
  mats = model.matrices()
  key = jax.random.key(seed)
  keys = iter(jax.random.split(key, 4 * model.layers + 3))
  layers = []
  for _ in range(model.layers):
    layer = {name: make_weight(path, *mats[name], next(keys))
             for name in ("qkv", "o", "gate_up", "down")}
    layer["g_attn"] = jnp.ones((model.hidden,), jnp.bfloat16)
    layer["g_mlp"] = jnp.ones((model.hidden,), jnp.bfloat16)
    layers.append(layer)
    jax.block_until_ready(layer)
  return {"layers": layers, "embed": _bf16_normal((model.vocab, model.hidden))(next(keys)),
          "lm_head": make_weight(path, *mats["lm_head"], next(keys)),
          "g_final": jnp.ones((model.hidden,), jnp.bfloat16)}


def weight_bytes(params: dict[str, Any]) -> int:
  """Bytes a step reads of the weights: every projection as stored, the gains, B rows of the
  embedding excluded (counted by the caller)."""
  return nbytes([params["layers"], params["lm_head"], params["g_final"]])


@functools.lru_cache(maxsize=None)
def _bf16_normal(shape: tuple[int, ...]):
  return jax.jit(lambda key: jax.random.normal(key, shape, jnp.bfloat16))


def kv_block_shape(kv: str, head_dim: int) -> tuple[int, ...] | None:
  """The packed cache's block shape: one scale per token and head for blockwise FP8 (block
  (D,)), the format's own blocks otherwise."""
  return (head_dim,) if fp8lab.get_quantized_format(kv).scaling == "block" else None


@functools.lru_cache(maxsize=None)
def _kv_maker(shape: tuple[int, ...], kv: str):
  """A jitted key -> one (B, L, kv_heads, head_dim) cache of N(0, 1) entries, bf16 or packed
  along D in format kv (per-tensor formats: their scale from the entries' amax)."""
  if kv == BF16_KV:
    return _bf16_normal(shape)
  block = kv_block_shape(kv, shape[-1])
  return jax.jit(lambda key: fp8lab.quantize(jax.random.normal(key, shape, jnp.bfloat16), kv,
                                             axis=-1, block_shape=block))


def make_caches(model: Model, batch: int, kv_len: int, seed: int,
                kv: str = BF16_KV) -> list[tuple[Any, ...]]:
  """Per layer a (k, v) pair of (B, L, kv_heads, head_dim) caches of random entries: bf16
  arrays, or fp8lab QuantizedArrays of format kv."""
  make = _kv_maker((batch, kv_len, model.kv_heads, model.head_dim), kv)
  caches = [(make(jax.random.key(seed * 7919 + 2 * i)),
             make(jax.random.key(seed * 7919 + 2 * i + 1)))
            for i in range(model.layers)]
  jax.block_until_ready(caches)
  return caches


# --- the step --------------------------------------------------------------------------------


def _rmsnorm(h: jax.Array, g: jax.Array) -> jax.Array:
  h32 = h.astype(jnp.float32)
  return (h32 * lax.rsqrt(jnp.mean(h32 * h32, -1, keepdims=True) + 1e-5)).astype(h.dtype) * g


def make_linear(path: str, implementation: str | None, interpret: bool, gemv_x_dtype):
  """y = x @ W^T in bf16 for `path`'s weights."""
  if path == "bf16":
    return lambda x, w: lax.dot_general(x, w, (((1,), (1,)), ((), ())))
  if path == "xla_e4m3":
    def f8(x, w):
      codes, scale = w
      y = lax.dot_general(x, codes.astype(jnp.bfloat16), (((1,), (1,)), ((), ())))
      return (y * scale).astype(x.dtype)
    return f8

  def packed(x, w):
    y = fp8lab.gemv_packed(w, x.astype(gemv_x_dtype), implementation=implementation,
                           interpret=interpret)
    return y.astype(x.dtype)
  return packed


def attention(q: jax.Array, k_cache: jax.Array, v_cache: jax.Array, impl: str) -> jax.Array:
  """One query token per sequence, (B, 1, heads, d), against (B, L, kv_heads, d) caches."""
  # ---- HOOK: fp8lab.attention goes here once it exists (a packed KV cache: the caches of
  # make_caches then hold its packed form and this call its decode kernel; the same
  # (B, 1, heads, d) in and out). Until then: cudnn (GPU) / XLA over the bf16 cache. ----
  return jax.nn.dot_product_attention(q, k_cache, v_cache, implementation=impl)


def make_step(model: Model, linear: Callable, attn_impl: str, kv: str = BF16_KV,
              attn_kwargs: dict[str, Any] | None = None, kv_update: str = "auto") -> Callable:
  """step(params, caches, tokens) -> (next tokens (B,), logits (B, vocab), caches). kv: the
  caches' format (make_caches); a packed cache takes fp8lab.kv_cache_update (its
  implementation: kv_update, "auto" = None) and fp8lab.attention(**attn_kwargs) in place of
  the bf16 slot update and attention(attn_impl)."""
  hq, hkv, d = model.heads, model.kv_heads, model.head_dim
  attn_kwargs = attn_kwargs or {}
  kv_update_kwargs = {} if kv_update == "auto" else {"implementation": kv_update}

  def step(params, caches, tokens):
    b = tokens.shape[0]
    h = params["embed"][tokens]                                         # (B, hidden) bf16
    new_caches = []
    for layer, (kc, vc) in zip(params["layers"], caches):
      x = _rmsnorm(h, layer["g_attn"])
      qkv = linear(x, layer["qkv"])
      q = qkv[:, :hq * d].reshape(b, 1, hq, d)
      k = qkv[:, hq * d:(hq + hkv) * d].reshape(b, 1, hkv, d)
      v = qkv[:, (hq + hkv) * d:].reshape(b, 1, hkv, d)
      last = kc.shape[1] - 1                             # the new token takes the last slot
      if kv == BF16_KV:
        kc = lax.dynamic_update_slice(kc, k.astype(kc.dtype), (0, last, 0, 0))
        vc = lax.dynamic_update_slice(vc, v.astype(vc.dtype), (0, last, 0, 0))
        a = attention(q, kc, vc, attn_impl)
      else:
        pos = jnp.full((b,), last, jnp.int32)
        kc = fp8lab.kv_cache_update(kc, k, pos, **kv_update_kwargs)
        vc = fp8lab.kv_cache_update(vc, v, pos, **kv_update_kwargs)
        a = fp8lab.attention(q, kc, vc, **attn_kwargs)
      a = a.reshape(b, hq * d)
      h = h + linear(a, layer["o"])
      gu = linear(_rmsnorm(h, layer["g_mlp"]), layer["gate_up"])
      gate, up = gu[:, :model.intermediate], gu[:, model.intermediate:]
      h = h + linear(jax.nn.silu(gate) * up, layer["down"])
      new_caches.append((kc, vc))
    logits = linear(_rmsnorm(h, params["g_final"]), params["lm_head"])
    return jnp.argmax(logits, axis=-1).astype(jnp.int32), logits, new_caches

  return step


def make_loop(step: Callable, steps: int) -> Callable:
  """loop(params, caches, tokens) -> (tokens, caches) after `steps` greedy steps inside one
  jitted call (lax.fori_loop; each step takes the tokens the one before chose)."""
  def loop(params, caches, tokens):
    def body(_, carry):
      nxt, _, new_caches = step(params, carry[1], carry[0])
      return nxt, new_caches
    return lax.fori_loop(0, steps, body, (tokens, caches))
  return loop


class Stepper:
  """Runs the compiled step on its own state (the donated caches come back each step), so
  timing.time_compiled and timing.device_kernel_times can call it like a compiled op."""

  def __init__(self, compiled, params, caches, tokens):
    self.compiled, self.params, self.caches, self.tokens = compiled, params, caches, tokens
    self.logits = None

  def __call__(self, _args=None):
    nxt, self.logits, self.caches = self.compiled(self.params, self.caches, self.tokens)
    self.tokens = nxt                     # greedy: the next step takes the chosen tokens
    return nxt


class LoopStepper(Stepper):
  """The same for make_loop's compiled call (no logits)."""

  def __call__(self, _args=None):
    self.tokens, self.caches = self.compiled(self.params, self.caches, self.tokens)
    return self.tokens


# --- the run ---------------------------------------------------------------------------------


def copy_bandwidth(gib: float, reps: int) -> dict[str, Any] | None:
  """GB/s of y = x * 1.5 + 0.25 over a float32 array of `gib` GiB (bytes read + written)."""
  if gib <= 0:
    return None
  n = max(1024, int(gib * 2**30) // 4)
  a = jax.jit(lambda key: jax.random.uniform(key, (n,), jnp.float32))(jax.random.key(1))
  compiled = jax.jit(lambda v: v * 1.5 + 0.25).lower(a).compile()
  t = timing.time_compiled(compiled, a, reps=reps, warmup=2, copies=1)
  return {"array_bytes": n * 4, "time_us": t.median_us,
          "GBps": 2 * n * 4 / (t.median_us * 1e-6) / 1e9}


def max_rel_diff(y, ref) -> float:
  y32, r32 = np.asarray(y, np.float32), np.asarray(ref, np.float32)
  if not (np.isfinite(y32).all() and np.isfinite(r32).all()):
    return float("nan")
  scale = float(np.max(np.abs(r32)))
  return float(np.max(np.abs(y32 - r32))) / scale if scale > 0 else float(np.max(np.abs(y32)))


def run_path(path: str, model: Model, cases: list[tuple[int, int]], *, seed: int, impl,
             interpret: bool, gemv_x_dtype, attn_impl: str, reps: int, warmup: int,
             check: bool, agree_tol: float, log: Callable[[str], None],
             kv_formats: tuple[str, ...] = (BF16_KV,),
             kv_update: str = "auto", pipelined: int = 0,
             loop_steps: int = 0) -> list[dict[str, Any]]:
  """Every case of one weight path (the fp8lab paths: with each KV format): its rows."""
  rows = []
  t0 = time.perf_counter()
  params = make_params(path, model, seed)
  made_s = round(time.perf_counter() - t0, 2)
  w_bytes = weight_bytes(params)
  linear = make_linear(path, impl, interpret, gemv_x_dtype)
  kvs = kv_formats if PATHS[path] is not None else (BF16_KV,)
  # The decode kernel on a GPU (implementation=None), in interpret mode on a CPU.
  attn_kwargs = {} if jax.default_backend() == "gpu" else {"implementation": "pallas",
                                                          "interpret": True}
  picks = None
  if PATHS[path] is not None and jax.default_backend() == "gpu" and impl is None:
    # What implementation=None runs for each projection at each batch (dispatch table).
    picks = {f"{name} {n}x{k} b={b}": dispatch.choose(dispatch.device_kind(), PATHS[path],
                                                      n, k, b)
             for b, _ in cases for name, (n, k) in model.matrices().items()}
  for batch, kv_len in cases:
    for kv in kvs:
      row = _run_case(path, model, params, w_bytes, linear, batch, kv_len, kv, seed=seed,
                      attn_impl=attn_impl, attn_kwargs=attn_kwargs, reps=reps, warmup=warmup,
                      check=check, agree_tol=agree_tol, gemv_x_dtype=gemv_x_dtype,
                      kv_update=kv_update, pipelined=pipelined, loop_steps=loop_steps)
      row.update(weight_bytes=w_bytes, weights_made_s=made_s,
                 implementation="auto" if impl is None else impl)
      if picks is not None:
        row["dispatch"] = {k: v for k, v in picks.items() if k.endswith(f" b={batch}")}
      log(f"{path:>13} kv={kv:<10} B={batch:<3} L={kv_len:<6} " + (
          f"{row['step_us'] / 1e3:9.3f} ms/step {row['tokens_per_s']:10.1f} tok/s"
          + (f"  pipelined {row['step_us_pipelined'] / 1e3:.3f} ms"
             if "step_us_pipelined" in row else "")
          + (f"  loop {row['step_us_loop'] / 1e3:.3f} ms" if "step_us_loop" in row else "")
          + (f"  check {row['max_rel_diff_vs_reference']:.2g}"
             if "max_rel_diff_vs_reference" in row else "")
          if row["status"] == "ok" else f"ERROR {row['error'][:300]}"))
      rows.append(row)
  del params
  gc.collect()
  return rows


def _run_case(path: str, model: Model, params, w_bytes: int, linear: Callable, batch: int,
              kv_len: int, kv: str, *, seed: int, attn_impl: str, attn_kwargs: dict[str, Any],
              reps: int, warmup: int, check: bool, agree_tol: float,
              gemv_x_dtype, kv_update: str = "auto", pipelined: int = 0,
              loop_steps: int = 0) -> dict[str, Any]:
  """One row: path's weights (w_bytes of them), caches of format kv, batch x kv_len."""
  row: dict[str, Any] = {"path": path, "kv": kv, "batch": batch, "kv_len": kv_len}
  try:
    step = make_step(model, linear, attn_impl, kv, attn_kwargs, kv_update)
    caches = make_caches(model, batch, kv_len, seed + 1, kv)
    kv_bytes = nbytes(caches)
    tokens = jax.random.randint(jax.random.key(seed + 2), (batch,), 0, model.vocab, jnp.int32)
    t_c = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(1,)).lower(params, caches, tokens).compile()
    row["compile_s"] = round(time.perf_counter() - t_c, 2)
    run = Stepper(compiled, params, caches, tokens)
    jax.block_until_ready(run())
    first_logits = run.logits
    if check and PATHS[path] is not None:
      # The golden model's GEMV and the reference attention over the same weights and caches.
      ref_step = make_step(model, make_linear(path, "reference", False, gemv_x_dtype),
                           attn_impl, kv, {"implementation": "reference"})
      ref = jax.jit(ref_step)(params, make_caches(model, batch, kv_len, seed + 1, kv),
                              tokens)[1]
      row["max_rel_diff_vs_reference"] = max_rel_diff(first_logits, ref)
      row["agrees"] = bool(row["max_rel_diff_vs_reference"] <= agree_tol)
      del ref
    del first_logits
    t = timing.time_compiled(run, None, reps=reps, warmup=warmup, copies=1)
    row["timing"] = t.as_dict()
    row["step_us"] = t.median_us
    row["tokens_per_s"] = batch / (t.median_us * 1e-6)
    row["kv_bytes"] = kv_bytes
    row["bytes_needed"] = w_bytes + kv_bytes + batch * model.hidden * 2
    row["GBps"] = row["bytes_needed"] / (t.median_us * 1e-6) / 1e9
    if jax.default_backend() == "gpu":
      try:
        dev = timing.device_kernel_times(run, None, runs=3)
      except Exception as e:  # pylint: disable=broad-except
        dev, row["device_error"] = None, f"{type(e).__name__}: {e}"[:300]
      if dev:
        row["device_us_per_step"] = sum(map(sum, dev.values())) / 3
        row["kernels_per_step"] = sum(map(len, dev.values())) / 3
        row["tokens_per_s_device"] = batch / (row["device_us_per_step"] * 1e-6)
        row["GBps_device"] = row["bytes_needed"] / (row["device_us_per_step"] * 1e-6) / 1e9
    if pipelined:
      tp = timing.time_pipelined(run, steps=pipelined, reps=max(3, reps // 2), warmup=1)
      row["timing_pipelined"] = tp.as_dict()
      row["step_us_pipelined"] = tp.median_us
      row["tokens_per_s_pipelined"] = batch / (tp.median_us * 1e-6)
      if jax.default_backend() == "gpu":
        try:
          row["gpu_pipelined"] = timing.gpu_busy(run, None, runs=pipelined, top=20)
        except Exception as e:  # pylint: disable=broad-except
          row["gpu_pipelined_error"] = f"{type(e).__name__}: {e}"[:300]
    caches = run.caches
    del run, compiled
    if loop_steps:
      t_c = time.perf_counter()
      compiled = jax.jit(make_loop(step, loop_steps), donate_argnums=(1,)).lower(
          params, caches, tokens).compile()
      row["loop_compile_s"] = round(time.perf_counter() - t_c, 2)
      run = LoopStepper(compiled, params, caches, tokens)
      tl = timing.time_compiled(run, None, reps=max(3, reps // 2), warmup=1, copies=loop_steps)
      row["timing_loop"] = tl.as_dict()
      row["step_us_loop"] = tl.median_us
      row["tokens_per_s_loop"] = batch / (tl.median_us * 1e-6)
      del run, compiled
    row["status"] = "ok"
    del caches
  except Exception as e:  # pylint: disable=broad-except
    # One failing path (a kernel that does not compile, memory) must not lose the others.
    row["status"] = "error"
    row["error"] = f"{type(e).__name__}: {e}"[:2000]
  return row


def add_ratios(rows: list[dict[str, Any]]) -> None:
  """tokens/s over bf16's at the same case (host, and device where both have it)."""
  base = {(r["batch"], r["kv_len"]): r for r in rows
          if r["path"] == BASELINE and r.get("kv", BF16_KV) == BF16_KV
          and r.get("status") == "ok"}
  for r in rows:
    b = base.get((r["batch"], r["kv_len"]))
    if r.get("status") != "ok" or b is None:
      continue
    r["vs_bf16"] = r["tokens_per_s"] / b["tokens_per_s"]
    for kind in ("device", "pipelined", "loop"):
      if r.get(f"tokens_per_s_{kind}") and b.get(f"tokens_per_s_{kind}"):
        r[f"vs_bf16_{kind}"] = r[f"tokens_per_s_{kind}"] / b[f"tokens_per_s_{kind}"]


def _fmt(v: Any, spec: str) -> str:
  return "-" if v is None else format(v, spec)


def format_table(doc: dict[str, Any]) -> str:
  head = (f"{'path':<13} {'kv':<10} {'B':>3} {'L':>6} {'ms/step':>9} {'tok/s':>10} "
          f"{'vs bf16':>7} {'pipe ms':>8} {'pipe vs':>7} {'dev ms':>8} {'dev vs':>6} "
          f"{'idle ms':>7} {'loop ms':>8} {'GB/s':>7} {'check':>8}")
  lines = [head, "-" * len(head)]
  order = {p: i for i, p in enumerate(PATHS)}
  for r in sorted(doc["rows"], key=lambda r: (r["batch"], r["kv_len"], order[r["path"]],
                                              r.get("kv", BF16_KV) != BF16_KV)):
    kv = r.get("kv", BF16_KV)
    if r.get("status") != "ok":
      lines.append(f"{r['path']:<13} {kv:<10} {r['batch']:>3} {r['kv_len']:>6} ERROR "
                   f"{r['error'][:80]}")
      continue
    ms = lambda v: None if v is None else v / 1e3           # noqa: E731
    idle = (r.get("gpu_pipelined") or {}).get("idle_us")
    lines.append(
        f"{r['path']:<13} {kv:<10} {r['batch']:>3} {r['kv_len']:>6} {r['step_us'] / 1e3:9.3f} "
        f"{r['tokens_per_s']:10.1f} {_fmt(r.get('vs_bf16'), '7.2f')} "
        f"{_fmt(ms(r.get('step_us_pipelined')), '8.3f')} "
        f"{_fmt(r.get('vs_bf16_pipelined'), '7.2f')} "
        f"{_fmt(ms(r.get('device_us_per_step')), '8.3f')} "
        f"{_fmt(r.get('vs_bf16_device'), '6.2f')} {_fmt(ms(idle), '7.3f')} "
        f"{_fmt(ms(r.get('step_us_loop')), '8.3f')} {r['GBps']:7.1f} "
        f"{_fmt(r.get('max_rel_diff_vs_reference'), '8.1e')}")
  m, cb = doc["machine"], doc.get("copy_bandwidth") or {}
  lines.append(f"{m['device_kind']} jax {m['jax']}; copy bandwidth "
               f"{cb.get('GBps', float('nan')):.1f} GB/s; model {doc['model']}")
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  cli.no_arguments(argv)
  backend = jax.default_backend()
  smoke = _SMOKE.value or backend == "cpu" or os.environ.get("FP8LAB_BENCH_SMOKE") == "1"
  base = SMOKE_MODEL if smoke else LLAMA3_8B
  given = {"layers": _LAYERS.value, "hidden": _HIDDEN.value, "heads": _HEADS.value,
           "kv_heads": _KV_HEADS.value, "head_dim": _HEAD_DIM.value,
           "intermediate": _INTERMEDIATE.value, "vocab": _VOCAB.value}
  model = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
  with cli.usage_errors():
    cli.check_choices("path", _PATHS.value, PATHS)
    kv_formats = tuple(_KV_FORMATS.value)
    for kv in kv_formats:
      if kv != BF16_KV:
        qf = fp8lab.get_quantized_format(kv)      # ValueError for an unknown format
        block = kv_block_shape(kv, model.head_dim) or qf.block_shape
        if not attn_kernel.serves(kv, block):
          raise ValueError(f"KV format {kv!r} is not one fp8lab.attention's kernel takes")
    cases = [parse_case(c) for c in (_CASES.value or (SMOKE_CASES if smoke else GPU_CASES))]
    for name, v in (("pipelined_steps", _PIPELINED.value), ("loop_steps", _LOOP.value)):
      if v is not None and v < 0:
        raise ValueError(f"--{name} must be >= 0, got {v}")
    if model.heads % model.kv_heads:
      raise ValueError(f"heads {model.heads} is not a multiple of kv_heads {model.kv_heads}")
  interpret = backend == "cpu"
  impl = None if _FP8LAB_IMPL.value == "auto" else _FP8LAB_IMPL.value
  if impl == "xla":
    interpret = False
  attn_impl = _ATTENTION.value if _ATTENTION.value != "auto" else (
      "cudnn" if backend == "gpu" else "xla")
  reps = _REPS.value or (3 if smoke else 20)
  warmup = _WARMUP.value if _WARMUP.value is not None else (1 if smoke else 3)
  check = _CHECK.value if _CHECK.value is not None else smoke
  pipelined = _PIPELINED.value if _PIPELINED.value is not None else (2 if smoke else 16)
  out = _OUT.value or default_out("decode", smoke)
  t0 = time.perf_counter()

  def log(msg: str) -> None:
    print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True)

  doc: dict[str, Any] = {
      "benchmark": "decode step (Llama-3-8B shapes): XLA bf16 / float8 weights vs fp8lab",
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "machine": machine_info(), "git": git_commit(), "smoke": smoke,
      "model": dataclasses.asdict(model), "matrices": model.matrices(),
      "timing_method": ("per-step time = median over reps of the host time of one compiled "
                        "step (caches donated and fed back; jax.block_until_ready after "
                        "each), warm-up steps first; device time = the profiler's sum of a "
                        "step's kernels; pipelined = pipelined_steps steps enqueued back to "
                        "back, one sync at the end, median over reps of elapsed / steps (its "
                        "GPU span / busy / idle per step from the profiler over the same "
                        "back-to-back steps); loop = loop_steps steps in one jitted "
                        "lax.fori_loop, call time / steps"),
      "settings": {"paths": _PATHS.value, "cases": [list(c) for c in cases], "reps": reps,
                   "warmup": warmup, "fp8lab_implementation": _FP8LAB_IMPL.value,
                   "interpret": interpret, "gemv_x_dtype": _GEMV_X_DTYPE.value,
                   "attention": attn_impl, "check": check, "agree_tol": _AGREE_TOL.value,
                   "seed": _SEED.value, "time_budget_s": _TIME_BUDGET_S.value,
                   "kv_formats": list(kv_formats), "kv_update": _KV_UPDATE.value,
                   "pipelined_steps": pipelined, "loop_steps": _LOOP.value},
      "rows": [], "skipped": [],
  }
  log(f"{doc['machine']['device_kind']} ({backend}), jax {jax.__version__}; model {model}; "
      f"writing {out}")
  doc["dispatch_overhead_us"] = timing.dispatch_overhead_s() * 1e6
  copy_gib = _COPY_GIB.value if _COPY_GIB.value is not None else (1 / 64 if smoke else 2.0)
  doc["copy_bandwidth"] = copy_bandwidth(copy_gib, reps=max(5, reps))

  def write() -> None:
    add_ratios(doc["rows"])
    doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
    write_json(doc, out)

  write()
  for path in _PATHS.value:
    if _TIME_BUDGET_S.value > 0 and time.perf_counter() - t0 > _TIME_BUDGET_S.value:
      doc["skipped"].append(path)
      continue
    doc["rows"] += run_path(path, model, cases, seed=_SEED.value, impl=impl,
                            interpret=interpret, gemv_x_dtype=jnp.dtype(_GEMV_X_DTYPE.value),
                            attn_impl=attn_impl, reps=reps, warmup=warmup, check=check,
                            agree_tol=_AGREE_TOL.value, log=log, kv_formats=kv_formats,
                            kv_update=_KV_UPDATE.value, pipelined=pipelined,
                            loop_steps=_LOOP.value)
    write()
  print()
  print(format_table(doc))
  print(f"\nresults: {out}")
  bad = [r for r in doc["rows"] if r.get("status") != "ok" or r.get("agrees") is False]
  if bad:
    print(f"bench_decode: {len(bad)} rows failed or disagree with the reference",
          file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
