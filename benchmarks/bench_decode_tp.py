"""The decode step of bench_decode.py, tensor-parallel over n devices, against 1 device.

The model, its weights, caches and weight paths are bench_decode.py's (imported: Model,
make_params, make_caches, make_step, the linear of each path); here each layer is split
Megatron-style over the mesh axis "tp" of n devices (docs/sharding.md):

  QKV   column-parallel: device j holds the rows of its query heads and of its KV heads
        (heads / n, kv_heads / n), no communication; the fused weight's rows are permuted
        so that they are contiguous per device ([q_j, k_j, v_j] for j = 0 .. n - 1);
  attention  over the device's KV heads: the caches (B, L, kv_heads, d) split on axis 2;
  O     row-parallel: the device's head columns of the attention output, float32
        partials, psum, cast to bf16;
  gate-up  column-parallel (rows permuted to [gate_j, up_j]);
  down  row-parallel (its intermediate / n columns), psum;
  LM head  column-parallel over the vocabulary; the logits gathered for the argmax.
The embedding and the norm gains are replicated; the residual stream h is replicated (each
psum leaves the whole sum on every device). One jitted step, a jax.shard_map over all n
devices (caches donated), for the same tokens and the same weights (the TP ones are the
single-device ones with their rows permuted: row-independent formats, so the same bytes).

fp8lab weights go through fp8lab.sharding: shard_quantized (scales with their words),
column_gemv_shard / row_gemv_shard inside the step (gemv_packed on the device's rows or
columns; the row-parallel partials in float32, psum'ed). The bf16 / xla_e4m3 paths split
the same way in plain XLA.

Reported per path and case (B, L): the 1-device step time (bench_decode.make_step on
device 0) and the n-device step time in the same run (host clock around each step, median,
benchmarks/timing.py), their ratio tp_over_single (the issue's target: <= 0.6 on 2 GPUs),
tokens/s of each, and how far the TP logits are from the 1-device ones
(max |diff| / max |logits|; the psum reorders float32 sums and the bf16 activations round).

Flags: bench_decode.py's (the same absl flags, defined there: --paths, --cases, the model
sizes, --fp8lab_implementation, --gemv_x_dtype, --attention, --reps, --warmup, --out,
--time_budget_s, --seed, --agree_tol, --smoke), plus --devices.
On a CPU (or with --smoke) it is a smoke run: bench_decode's tiny model (2 layers, 2 KV
heads), B x L = 2 x 32, over the CPU's devices (XLA_FLAGS=--xla_force_host_platform_
device_count=2 for two).

Usage (2 GPUs; NCCL's settings as the machine has them):
  python benchmarks/bench_decode_tp.py --cases=1x4096 --paths=bf16,fp8lab_e4m3,fp8lab_nvfp4 \
      --out=$OUT/decode_tp.json
  XLA_FLAGS=--xla_force_host_platform_device_count=2 python benchmarks/bench_decode_tp.py
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
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
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402
import numpy as np  # noqa: E402

import fp8lab  # noqa: E402
from fp8lab import sharding as S  # noqa: E402
from fp8lab.quantized import QuantizedArray  # noqa: E402
from benchmarks import bench_decode as bd  # noqa: E402  (defines the shared flags)
from benchmarks import cli  # noqa: E402
from benchmarks import timing  # noqa: E402
from benchmarks.run_info import default_out, git_commit, machine_info, write_json  # noqa: E402
from benchmarks.timing import nbytes  # noqa: E402

AXIS = "tp"
_DEVICES = flags.DEFINE_integer("devices", None, "Devices to split over (default: all of "
                                "jax.devices()); the 1-device run uses the first.")


# --- the TP layout ------------------------------------------------------------------------------

def qkv_rows(model: bd.Model, n: int) -> np.ndarray:
  """The fused QKV's row order for n devices: [q_j, k_j, v_j] for j = 0 .. n - 1."""
  d, hq, hkv = model.head_dim, model.heads, model.kv_heads
  q_l, kv_l = hq // n * d, hkv // n * d
  parts = []
  for j in range(n):
    parts += [np.arange(j * q_l, (j + 1) * q_l),
              hq * d + np.arange(j * kv_l, (j + 1) * kv_l),
              (hq + hkv) * d + np.arange(j * kv_l, (j + 1) * kv_l)]
  return np.concatenate(parts)


def gate_up_rows(model: bd.Model, n: int) -> np.ndarray:
  """The fused gate-up's row order for n devices: [gate_j, up_j] for j = 0 .. n - 1."""
  i_l = model.intermediate // n
  return np.concatenate([np.concatenate([np.arange(j * i_l, (j + 1) * i_l),
                                         model.intermediate + np.arange(j * i_l, (j + 1) * i_l)])
                         for j in range(n)])


def permute_rows(w: Any, rows: np.ndarray) -> Any:
  """A weight of any path with its output rows reordered (exactly: the formats' scales are
  per row, or per tensor)."""
  idx = jnp.asarray(rows)
  if isinstance(w, QuantizedArray):
    if w.block_shape is not None and len(w.block_shape) != 1:
      raise ValueError(f"permute_rows: 2D tiles {w.block_shape} mix rows")
    return QuantizedArray(w.data[idx], None if w.scales is None else w.scales[idx],
                          w.tensor_scale, format=w.format, element_format=w.element_format,
                          shape=w.shape, axis=w.axis, block_shape=w.block_shape,
                          scale_mode=w.scale_mode, hadamard=w.hadamard)
  if isinstance(w, tuple):                       # xla_e4m3: (codes, scale)
    return (w[0][idx], w[1])
  return w[idx]


def weight_spec(w: Any, spec: P) -> Any:
  """The shard_map spec pytree of one weight split by `spec` (rows or columns)."""
  if isinstance(w, QuantizedArray):
    return S.quantized_specs(w, spec)
  if isinstance(w, tuple):
    return (spec, P())
  return spec


COLUMN = P(AXIS, None)      # split n_out
ROW = P(None, AXIS)         # split k


def tp_params(params: dict[str, Any], model: bd.Model, n: int) -> tuple[Any, Any]:
  """(TP params with permuted fused rows, their spec pytree)."""
  qkv, gu = qkv_rows(model, n), gate_up_rows(model, n)
  layers, specs = [], []
  for layer in params["layers"]:
    new = dict(layer, qkv=permute_rows(layer["qkv"], qkv),
               gate_up=permute_rows(layer["gate_up"], gu))
    layers.append(new)
    specs.append({"qkv": weight_spec(new["qkv"], COLUMN), "o": weight_spec(new["o"], ROW),
                  "gate_up": weight_spec(new["gate_up"], COLUMN),
                  "down": weight_spec(new["down"], ROW), "g_attn": P(), "g_mlp": P()})
  out = dict(params, layers=layers)
  spec = {"layers": specs, "embed": P(), "lm_head": weight_spec(params["lm_head"], COLUMN),
          "g_final": P()}
  return out, spec


def check_split(model: bd.Model, n: int) -> None:
  for what, size in (("heads", model.heads), ("kv_heads", model.kv_heads),
                     ("intermediate", model.intermediate), ("vocab", model.vocab)):
    if size % n:
      raise ValueError(f"{what} {size} is not a multiple of the {n} devices (--devices)")


def local_matrices(model: bd.Model, n: int) -> dict[str, list[int]]:
  """Each projection's (n_out, k) on one device."""
  m = model.matrices()
  return {"qkv": [m["qkv"][0] // n, m["qkv"][1]], "o": [m["o"][0], m["o"][1] // n],
          "gate_up": [m["gate_up"][0] // n, m["gate_up"][1]],
          "down": [m["down"][0], m["down"][1] // n],
          "lm_head": [m["lm_head"][0] // n, m["lm_head"][1]]}


# --- the step -----------------------------------------------------------------------------------

def make_tp_linears(path: str, implementation, interpret: bool, gemv_x_dtype):
  """(column(x, w_local), row(x_local, w_local)) inside the shard_map body, bf16 out."""
  def dot32(x, w):
    return lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)

  if path == "bf16":
    column = lambda x, w: lax.dot_general(x, w, (((1,), (1,)), ((), ())))
    row = lambda x, w: lax.psum(dot32(x, w), AXIS).astype(x.dtype)
    return column, row
  if path == "xla_e4m3":
    def column8(x, w):
      codes, scale = w
      return (lax.dot_general(x, codes.astype(jnp.bfloat16), (((1,), (1,)), ((), ())))
              * scale).astype(x.dtype)

    def row8(x, w):
      codes, scale = w
      return (lax.psum(dot32(x, codes.astype(jnp.bfloat16)), AXIS) * scale).astype(x.dtype)
    return column8, row8
  kw = dict(implementation=implementation, interpret=interpret)

  def column_p(x, w):
    return S.column_gemv_shard(w, x.astype(gemv_x_dtype), AXIS, **kw).astype(x.dtype)

  def row_p(x, w):
    return S.row_gemv_shard(w, x.astype(gemv_x_dtype), AXIS, **kw).astype(x.dtype)
  return column_p, row_p


def make_tp_step(model: bd.Model, n: int, mesh: Mesh, column: Callable, row: Callable,
                 attn_impl: str, param_spec: Any, cache_spec: Any) -> Callable:
  """step(params, caches, tokens) -> (next tokens, logits, caches), bench_decode's
  make_step split over the mesh (module docstring)."""
  hq, hkv, d = model.heads // n, model.kv_heads // n, model.head_dim
  inter = model.intermediate // n

  def body(params, caches, tokens):
    b = tokens.shape[0]
    h = params["embed"][tokens]
    new_caches = []
    for layer, (kc, vc) in zip(params["layers"], caches):
      x = bd._rmsnorm(h, layer["g_attn"])
      qkv = column(x, layer["qkv"])                      # (B, (hq + 2 hkv) d): this device's
      q = qkv[:, :hq * d].reshape(b, 1, hq, d)
      k = qkv[:, hq * d:(hq + hkv) * d].reshape(b, 1, hkv, d)
      v = qkv[:, (hq + hkv) * d:].reshape(b, 1, hkv, d)
      slot = (0, kc.shape[1] - 1, 0, 0)
      kc = lax.dynamic_update_slice(kc, k.astype(kc.dtype), slot)
      vc = lax.dynamic_update_slice(vc, v.astype(vc.dtype), slot)
      a = bd.attention(q, kc, vc, attn_impl).reshape(b, hq * d)
      h = h + row(a, layer["o"])
      gu = column(bd._rmsnorm(h, layer["g_mlp"]), layer["gate_up"])
      gate, up = gu[:, :inter], gu[:, inter:]
      h = h + row(jax.nn.silu(gate) * up, layer["down"])
      new_caches.append((kc, vc))
    logits = column(bd._rmsnorm(h, params["g_final"]), params["lm_head"])
    return logits, new_caches

  mapped = jax.shard_map(body, mesh=mesh, in_specs=(param_spec, cache_spec, P()),
                         out_specs=(P(None, AXIS), cache_spec), check_vma=False)

  def step(params, caches, tokens):
    logits, caches = mapped(params, caches, tokens)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32), logits, caches

  return step


def _place(tree: Any, spec: Any, mesh: Mesh) -> Any:
  shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), spec,
                           is_leaf=lambda s: isinstance(s, P))
  return jax.device_put(tree, shardings)


def _check_quantized(params: dict[str, Any], spec: Any, mesh: Mesh) -> None:
  """check_sharding for every packed weight (a clear error before any transfer)."""
  for layer, ls in zip(params["layers"], spec["layers"]):
    for name in ("qkv", "o", "gate_up", "down"):
      if isinstance(layer[name], QuantizedArray):
        S.check_sharding(layer[name], mesh, ls[name].data)
  if isinstance(params["lm_head"], QuantizedArray):
    S.check_sharding(params["lm_head"], mesh, spec["lm_head"].data)


def _time(step: Callable, params, caches, tokens, reps: int, warmup: int):
  t_c = time.perf_counter()
  compiled = jax.jit(step, donate_argnums=(1,)).lower(params, caches, tokens).compile()
  compile_s = round(time.perf_counter() - t_c, 2)
  run = bd.Stepper(compiled, params, caches, tokens)
  jax.block_until_ready(run())
  logits = np.asarray(run.logits, np.float32)
  t = timing.time_compiled(run, None, reps=reps, warmup=warmup, copies=1)
  return t, logits, compile_s


def run_path(path: str, model: bd.Model, n: int, cases, *, seed: int, impl, interpret: bool,
             gemv_x_dtype, attn_impl: str, reps: int, warmup: int, agree_tol: float,
             log: Callable[[str], None]) -> list[dict[str, Any]]:
  """Every case of one weight path on 1 device and on n: its rows."""
  rows = []
  devices = jax.devices()[:n]
  mesh = Mesh(np.array(devices), (AXIS,))
  with jax.default_device(devices[0]):
    params = bd.make_params(path, model, seed)
  w_bytes = bd.weight_bytes(params)
  single_step = bd.make_step(model, bd.make_linear(path, impl, interpret, gemv_x_dtype),
                             attn_impl)
  tp, spec = tp_params(params, model, n)
  _check_quantized(tp, spec, mesh)
  tp = _place(tp, spec, mesh)
  column, row = make_tp_linears(path, impl, interpret, gemv_x_dtype)
  cache_spec = [(P(None, None, AXIS, None),) * 2 for _ in range(model.layers)]
  tp_step = make_tp_step(model, n, mesh, column, row, attn_impl, spec, cache_spec)
  for batch, kv_len in cases:
    row_: dict[str, Any] = {"path": path, "batch": batch, "kv_len": kv_len, "devices": n,
                            "weight_bytes": w_bytes,
                            "weight_bytes_per_device": w_bytes // n,
                            "local_matrices": local_matrices(model, n),
                            "implementation": "auto" if impl is None else impl}
    try:
      tokens = jax.random.randint(jax.random.key(seed + 2), (batch,), 0, model.vocab,
                                  jnp.int32)
      with jax.default_device(devices[0]):
        caches = bd.make_caches(model, batch, kv_len, seed + 1)
      row_["kv_bytes"] = nbytes(caches)
      t1, logits1, c1 = _time(single_step, params, caches, jax.device_put(tokens, devices[0]),
                              reps, warmup)
      del caches
      caches = _place(bd.make_caches(model, batch, kv_len, seed + 1), cache_spec, mesh)
      tn, logitsn, cn = _time(tp_step, tp, caches, tokens, reps, warmup)
      del caches
      scale = float(np.max(np.abs(logits1)))
      diff = float(np.max(np.abs(logitsn - logits1)))
      row_.update({
          "single_compile_s": c1, "tp_compile_s": cn,
          "single_timing": t1.as_dict(), "tp_timing": tn.as_dict(),
          "single_step_us": t1.median_us, "tp_step_us": tn.median_us,
          "tp_over_single": tn.median_us / t1.median_us,
          "single_tokens_per_s": batch / (t1.median_us * 1e-6),
          "tp_tokens_per_s": batch / (tn.median_us * 1e-6),
          "max_rel_diff_tp_vs_single": diff / scale if scale > 0 else diff,
      })
      row_["agrees"] = bool(np.isfinite(diff) and row_["max_rel_diff_tp_vs_single"] <= agree_tol)
      row_["status"] = "ok"
    except Exception as e:  # pylint: disable=broad-except
      row_["status"] = "error"
      row_["error"] = f"{type(e).__name__}: {e}"[:2000]
    log(f"{path:>13} B={batch:<3} L={kv_len:<6} " + (
        f"1 dev {row_['single_step_us'] / 1e3:9.3f} ms  {n} dev {row_['tp_step_us'] / 1e3:9.3f} "
        f"ms  ratio {row_['tp_over_single']:.3f}  diff {row_['max_rel_diff_tp_vs_single']:.2g}"
        if row_["status"] == "ok" else f"ERROR {row_['error'][:300]}"))
    rows.append(row_)
  del params, tp
  gc.collect()
  return rows


def format_table(doc: dict[str, Any]) -> str:
  n = doc["devices"]
  head = (f"{'path':<13} {'B':>3} {'L':>6} {'1 dev ms':>9} {f'{n} dev ms':>9} {'ratio':>6} "
          f"{'tok/s 1':>9} {f'tok/s {n}':>9} {'diff':>8}")
  lines = [head, "-" * len(head)]
  for r in doc["rows"]:
    if r.get("status") != "ok":
      lines.append(f"{r['path']:<13} {r['batch']:>3} {r['kv_len']:>6} ERROR {r['error'][:80]}")
      continue
    lines.append(f"{r['path']:<13} {r['batch']:>3} {r['kv_len']:>6} "
                 f"{r['single_step_us'] / 1e3:9.3f} {r['tp_step_us'] / 1e3:9.3f} "
                 f"{r['tp_over_single']:6.3f} {r['single_tokens_per_s']:9.1f} "
                 f"{r['tp_tokens_per_s']:9.1f} {r['max_rel_diff_tp_vs_single']:8.1e}")
  m = doc["machine"]
  lines.append(f"{n} x {m['device_kind']} jax {m['jax']}; model {doc['model']}")
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  cli.no_arguments(argv)
  backend = jax.default_backend()
  smoke = bd._SMOKE.value or backend == "cpu" or os.environ.get("FP8LAB_BENCH_SMOKE") == "1"
  base = bd.SMOKE_MODEL if smoke else bd.LLAMA3_8B
  given = {"layers": bd._LAYERS.value, "hidden": bd._HIDDEN.value, "heads": bd._HEADS.value,
           "kv_heads": bd._KV_HEADS.value, "head_dim": bd._HEAD_DIM.value,
           "intermediate": bd._INTERMEDIATE.value, "vocab": bd._VOCAB.value}
  model = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
  n = _DEVICES.value or jax.device_count()
  with cli.usage_errors():
    cli.check_choices("path", bd._PATHS.value, bd.PATHS)
    cases = [bd.parse_case(c) for c in (bd._CASES.value or
                                        (bd.SMOKE_CASES if smoke else ("1x4096",)))]
    if not 1 <= n <= jax.device_count():
      raise ValueError(f"--devices={n}: this process has {jax.device_count()} devices")
    if model.heads % model.kv_heads:
      raise ValueError(f"heads {model.heads} is not a multiple of kv_heads {model.kv_heads}")
    check_split(model, n)
  interpret = backend == "cpu"
  impl = None if bd._FP8LAB_IMPL.value == "auto" else bd._FP8LAB_IMPL.value
  if impl == "xla":
    interpret = False
  attn_impl = bd._ATTENTION.value if bd._ATTENTION.value != "auto" else (
      "cudnn" if backend == "gpu" else "xla")
  reps = bd._REPS.value or (3 if smoke else 20)
  warmup = bd._WARMUP.value if bd._WARMUP.value is not None else (1 if smoke else 3)
  out = bd._OUT.value or default_out("decode_tp", smoke)
  t0 = time.perf_counter()

  def log(msg: str) -> None:
    print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True)

  doc: dict[str, Any] = {
      "benchmark": ("decode step (Llama-3-8B shapes), tensor-parallel (Megatron splits, "
                    "shard_map) on n devices vs 1 device"),
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "machine": machine_info(), "git": git_commit(), "smoke": smoke, "devices": n,
      "device_kinds": [d.device_kind for d in jax.devices()[:n]],
      "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
      "model": dataclasses.asdict(model), "matrices": model.matrices(),
      "timing_method": ("per-step time = median over reps of the host time of one compiled "
                        "step (caches donated and fed back; jax.block_until_ready after "
                        "each), warm-up steps first; the 1-device step (bench_decode's) and "
                        "the n-device step in the same process, one after the other"),
      "settings": {"paths": bd._PATHS.value, "cases": [list(c) for c in cases], "reps": reps,
                   "warmup": warmup, "fp8lab_implementation": bd._FP8LAB_IMPL.value,
                   "interpret": interpret, "gemv_x_dtype": bd._GEMV_X_DTYPE.value,
                   "attention": attn_impl, "agree_tol": bd._AGREE_TOL.value,
                   "seed": bd._SEED.value, "time_budget_s": bd._TIME_BUDGET_S.value},
      "rows": [], "skipped": [],
  }
  log(f"{n} x {doc['machine']['device_kind']} ({backend}), jax {jax.__version__}; model "
      f"{model}; writing {out}")

  def write() -> None:
    doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
    write_json(doc, out)

  write()
  for path in bd._PATHS.value:
    if bd._TIME_BUDGET_S.value > 0 and time.perf_counter() - t0 > bd._TIME_BUDGET_S.value:
      doc["skipped"].append(path)
      continue
    doc["rows"] += run_path(path, model, n, cases, seed=bd._SEED.value, impl=impl,
                            interpret=interpret,
                            gemv_x_dtype=jnp.dtype(bd._GEMV_X_DTYPE.value),
                            attn_impl=attn_impl, reps=reps, warmup=warmup,
                            agree_tol=bd._AGREE_TOL.value, log=log)
    write()
  print()
  print(format_table(doc))
  print(f"\nresults: {out}")
  bad = [r for r in doc["rows"] if r.get("status") != "ok" or r.get("agrees") is False]
  if bad:
    print(f"bench_decode_tp: {len(bad)} rows failed or disagree with the 1-device step",
          file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
