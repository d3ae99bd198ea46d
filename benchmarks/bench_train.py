"""The training benchmark: a Llama-shaped model's train step on fp8lab's recipes, against bf16.

Three parts (--parts), one JSON (--out):
  step   tokens/s of one full train step (forward, backward, Adam) of a Llama-shaped decoder
         (RMSNorm, causal attention with RoPE, SwiGLU MLP; every linear of the blocks through
         fp8lab.quantized_matmul, the embedding and LM head in bf16) for "bf16" and each recipe;
         steps timed one by one (host clock around a blocking call), median reported.
  fixed  the fixed cost per linear at small M (AstrAI's measure): one d x d linear's forward
         and backward at M tokens, and its quantize calls alone (x, w and the gradient, both
         orientations, the delayed update), timed by benchmarks/timing.py (R distinct copies
         per compiled call); plus, for the FP8 recipes, the fp8 GEMMs counted in the compiled
         HLO (`fp8_gemm_counts`: cuBLASLt FP8 calls and Triton GEMM fusions over fp8 operands on a GPU; a CPU has none).
  train  a small model trained from scratch on the Python standard library's own source files
         (read from this interpreter's stdlib directory; byte-level tokens, vocabulary 256),
         the same batches for every recipe; per-step losses, held-out losses, and a PNG of the
         curves when matplotlib is importable (the `bench` extra).

Defaults: a ~1B model (d 2048, 16 layers, MLP 8192, sequence 2048, 4 sequences per step) on a
GPU; tiny sizes on a CPU. FP4 and blockwise recipes are emulations (float32 GEMMs over
dequantized operands, docs/training.md): their step times say nothing about FP4 hardware.

Usage:
  python benchmarks/bench_train.py                          # CPU: tiny sizes, every part
  python benchmarks/bench_train.py --parts=step,fixed --recipes=fp8_delayed,fp8_current
  python benchmarks/bench_train.py --parts=train --train_steps=2000 --out=$OUT/train.json
  python benchmarks/bench_train.py --plot=benchmarks/results/train_cpu_20261202.json   # PNG
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import sysconfig
import time
from typing import Any

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import fp8lab  # noqa: E402
from fp8lab import training  # noqa: E402
from benchmarks import cli  # noqa: E402
from benchmarks import timing  # noqa: E402
from benchmarks.train_data import fp8_gemm_counts, stdlib_corpus  # noqa: E402,F401
from benchmarks.run_info import default_out, git_commit, machine_info, write_json  # noqa: E402

PARTS = ("step", "fixed", "train")
BASELINE = "bf16"
LINEARS = ("wq", "wk", "wv", "wo", "wg", "wu", "wd")

_PARTS = flags.DEFINE_list("parts", list(PARTS), f"Parts to run; valid: {', '.join(PARTS)}.")
_RECIPES = flags.DEFINE_list("recipes", list(training.RECIPE_NAMES),
                             "Recipes beside the bf16 baseline.")
_D = flags.DEFINE_integer("d_model", None, "step: model width (default 2048 GPU, 64 CPU).")
_LAYERS = flags.DEFINE_integer("layers", None, "step: decoder layers (16 GPU, 2 CPU).")
_MLP = flags.DEFINE_integer("mlp", None, "step: MLP width (8192 GPU, 256 CPU).")
_HEADS = flags.DEFINE_integer("heads", None, "step: attention heads (16 GPU, 4 CPU).")
_SEQ = flags.DEFINE_integer("seq", None, "step: sequence length (2048 GPU, 64 CPU).")
_BATCH = flags.DEFINE_integer("batch", None, "step: sequences per step (4 GPU, 2 CPU).")
_VOCAB = flags.DEFINE_integer("vocab", None, "step: vocabulary (32000 GPU, 256 CPU).")
_STEPS = flags.DEFINE_integer("steps", None, "step: timed steps (10 GPU, 3 CPU).")
_WARMUP = flags.DEFINE_integer("warmup", 2, "step: untimed steps after compiling.")
_FIXED_M = flags.DEFINE_list("fixed_m", ["32"], "fixed: token counts M (multiples of 32: "
                             "mxfp4_sr_hadamard's Hadamard blocks run along M).")
_FIXED_D = flags.DEFINE_integer("fixed_d", None, "fixed: the linear's d x d (default d_model).")
_REPS = flags.DEFINE_integer("reps", None, "fixed: timed calls (30 GPU, 3 CPU).")
_COPIES = flags.DEFINE_integer("copies", None, "fixed: distinct copies per call (16 GPU, 2 CPU).")
_TRAIN_STEPS = flags.DEFINE_integer("train_steps", None, "train: steps per recipe (2000 GPU, "
                                    "150 CPU).")
_TRAIN_D = flags.DEFINE_integer("train_d", None, "train: width (256 GPU, 64 CPU).")
_TRAIN_LAYERS = flags.DEFINE_integer("train_layers", None, "train: layers (4 GPU, 2 CPU).")
_TRAIN_SEQ = flags.DEFINE_integer("train_seq", None, "train: sequence (256 GPU, 64 CPU).")
_TRAIN_BATCH = flags.DEFINE_integer("train_batch", None, "train: sequences per step (32 GPU, "
                                    "8 CPU).")
_LR = flags.DEFINE_float("lr", 3e-3, "train: Adam learning rate (cosine decay to 10%).")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", None, "train: steps between held-out losses.")
_CORPUS_MB = flags.DEFINE_float("corpus_mb", 16.0, "train: stdlib bytes to read, at most.")
_SEED = flags.DEFINE_integer("seed", 0, "Parameter and batch seed.")
_OUT = flags.DEFINE_string("out", None, "Results JSON (default benchmarks/results/...).")
_PNG = flags.DEFINE_string("png", None, "Loss-curve PNG (default: the JSON's name, .png).")
_PLOT = flags.DEFINE_string("plot", None, "Only draw the loss-curve PNG of this results JSON "
                            "(its train part) and exit.")


def _on_gpu() -> bool:
  return jax.default_backend() == "gpu"


def _pick(flag, gpu, cpu):
  return flag.value if flag.value is not None else (gpu if _on_gpu() else cpu)


# ----------------------------------------------------------------------------------------
# HLO inspection.

# ----------------------------------------------------------------------------------------
# The model.

def _config(d, layers, mlp, heads, seq, batch, vocab) -> dict[str, int]:
  if d % heads or (d // heads) % 2:
    raise ValueError(f"d_model {d} must split into {heads} heads of an even width")
  return dict(d=d, layers=layers, mlp=mlp, heads=heads, seq=seq, batch=batch, vocab=vocab)


def param_count(cfg) -> int:
  d, mlp = cfg["d"], cfg["mlp"]
  return cfg["layers"] * (4 * d * d + 3 * d * mlp + 2 * d) + 2 * cfg["vocab"] * d + d


def init_params(key, cfg) -> dict[str, Any]:
  d, mlp, L, V = cfg["d"], cfg["mlp"], cfg["layers"], cfg["vocab"]
  shapes = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "wg": (d, mlp),
            "wu": (d, mlp), "wd": (mlp, d)}
  keys = jax.random.split(key, len(shapes) + 2)
  blocks = {n: jax.random.normal(k, (L,) + s, jnp.float32) / math.sqrt(s[0])
            for k, (n, s) in zip(keys, shapes.items())}
  blocks["wo"] = blocks["wo"] / math.sqrt(2 * L)          # GPT-2's residual scaling
  blocks["wd"] = blocks["wd"] / math.sqrt(2 * L)
  blocks["ln1"] = jnp.ones((L, d), jnp.float32)
  blocks["ln2"] = jnp.ones((L, d), jnp.float32)
  return {"embed": jax.random.normal(keys[-2], (V, d), jnp.float32) * 0.02, "blocks": blocks,
          "ln_f": jnp.ones((d,), jnp.float32),
          "head": jax.random.normal(keys[-1], (d, V), jnp.float32) / math.sqrt(d)}


def init_states(recipe: str, cfg, history: int = 16):
  """Per layer and linear, the recipe's MatmulState stacked over layers (None without)."""
  if recipe == BASELINE:
    return None
  st = training.init_state(recipe, history_length=history)
  if st is None:
    return None
  # One copy per linear: the train step donates its states, and a buffer is donated once.
  return {n: jax.tree.map(lambda a: jnp.tile(a, (cfg["layers"],) + (1,) * a.ndim), st)
          for n in LINEARS}


def _rms(x, g):
  x32 = x.astype(jnp.float32)
  return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6) * g).astype(x.dtype)


def _rope(x):
  """Rotary embedding on (B, T, H, Dh), rotate-half form, base 10000."""
  t, dh = x.shape[1], x.shape[-1]
  freq = 10000.0 ** (-jnp.arange(0, dh // 2, dtype=jnp.float32) / (dh // 2))
  ang = jnp.arange(t, dtype=jnp.float32)[:, None] * freq[None, :]
  cos, sin = jnp.cos(ang)[None, :, None, :], jnp.sin(ang)[None, :, None, :]
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(x.dtype)


def _linear(h, w, state, recipe, key):
  w = w.astype(jnp.bfloat16)
  if recipe == BASELINE:
    return jnp.dot(h, w)
  y, _ = fp8lab.quantized_matmul(h, w, recipe=recipe, state=state, key=key)
  return y


def loss_fn(params, states, tokens, key, *, recipe: str, cfg):
  """Mean next-byte cross-entropy of tokens (B, T+1)."""
  inp, tgt = tokens[:, :-1], tokens[:, 1:]
  b, t = inp.shape
  heads, d = cfg["heads"], cfg["d"]
  x = params["embed"][inp].astype(jnp.bfloat16)
  layer_keys = jax.random.split(key, cfg["layers"])

  def block(x, layer):
    p, st, lkey = layer
    lin = {n: functools.partial(_linear, w=p[n], state=None if st is None else st[n],
                                recipe=recipe, key=jax.random.fold_in(lkey, i))
           for i, n in enumerate(LINEARS)}
    h = _rms(x, p["ln1"])
    q, k, v = (lin[n](h).reshape(b, t, heads, d // heads) for n in ("wq", "wk", "wv"))
    a = jax.nn.dot_product_attention(_rope(q), _rope(k), v, is_causal=True)
    x = x + lin["wo"](a.reshape(b, t, d))
    h = _rms(x, p["ln2"])
    x = x + lin["wd"](jax.nn.silu(lin["wg"](h)) * lin["wu"](h))
    return x, None

  x, _ = jax.lax.scan(block, x, (params["blocks"], states, layer_keys))
  logits = jnp.dot(_rms(x, params["ln_f"]), params["head"].astype(jnp.bfloat16),
                   preferred_element_type=jnp.float32)
  logp = jax.nn.log_softmax(logits, -1)
  return -jnp.mean(jnp.take_along_axis(logp, tgt[..., None], -1))


def make_step(recipe: str, cfg, lr_at):
  """A jitted train step: (params, opt, states, tokens, key, step) -> (params, opt, states,
  loss). The states' gradients are the next states (fp8lab.quantized_matmul)."""
  b1, b2, eps = 0.9, 0.95, 1e-8

  def step(params, opt, states, tokens, key, i):
    loss, (grads, next_states) = jax.value_and_grad(
        functools.partial(loss_fn, recipe=recipe, cfg=cfg), argnums=(0, 1))(
            params, states, tokens, key)
    m, v = opt
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    t = (i + 1).astype(jnp.float32)
    lr = lr_at(i) * jnp.sqrt(1 - b2**t) / (1 - b1**t)
    params = jax.tree.map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) + eps), params, m, v)
    return params, (m, v), next_states, loss

  return jax.jit(step, donate_argnums=(0, 1, 2))


def _zeros_like(tree):
  return jax.tree.map(jnp.zeros_like, tree)


# ----------------------------------------------------------------------------------------
# Part "step".

def run_step(cfg, recipes, steps: int, warmup: int, seed: int, rows=None,
             save=lambda: None) -> list[dict[str, Any]]:
  """One row per recipe appended to `rows`; `save()` after each (a run cut short keeps its
  rows)."""
  rows = [] if rows is None else rows
  tokens_per_step = cfg["batch"] * cfg["seq"]
  rng = np.random.default_rng(seed)
  tokens = jnp.asarray(rng.integers(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1)), jnp.int32)
  base = None
  for recipe in recipes:
    row: dict[str, Any] = {"recipe": recipe}
    try:
      params = init_params(jax.random.key(seed), cfg)
      opt = (_zeros_like(params), _zeros_like(params))
      states = init_states(recipe, cfg)
      step = make_step(recipe, cfg, lambda i: jnp.float32(1e-4))
      t0 = time.perf_counter()
      key = jax.random.key(seed + 1)
      compiled = step.lower(params, opt, states, tokens, key, jnp.int32(0)).compile()
      row["compile_s"] = round(time.perf_counter() - t0, 2)
      if recipe != BASELINE and fp8lab.get_recipe(recipe).gemm == "fp8":
        row["hlo"] = fp8_gemm_counts(compiled.as_text())
      times, losses = [], []
      for i in range(warmup + steps):
        t0 = time.perf_counter()
        params, opt, states, loss = compiled(params, opt, states, tokens,
                                             jax.random.fold_in(key, i), jnp.int32(i))
        loss = float(loss)                                 # blocks
        if i >= warmup:
          times.append(time.perf_counter() - t0)
        losses.append(loss)
      med = float(np.median(times))
      row.update(status="ok", step_s=med, step_s_min=float(np.min(times)),
                 tokens_per_s=tokens_per_step / med, losses=losses)
      if recipe == BASELINE:
        base = row["tokens_per_s"]
      elif base:
        row["speedup_vs_bf16"] = row["tokens_per_s"] / base
      del params, opt, states, compiled
    except Exception as e:  # pylint: disable=broad-except
      row.update(status="error", error=f"{type(e).__name__}: {e}"[:2000])
    print(f"step {recipe:18s} " + (f"{row['tokens_per_s']:12.1f} tokens/s "
                                   f"{row.get('speedup_vs_bf16', 1.0):.3f}x"
                                   if row["status"] == "ok" else row["error"][:200]), flush=True)
    rows.append(row)
    save()
  return rows


# ----------------------------------------------------------------------------------------
# Part "fixed".

def _linear_fwd_bwd(recipe):
  def op(x, w, c, state, key):
    def f(x, w, state):
      if recipe == BASELINE:
        return jnp.sum((x @ w).astype(jnp.float32) * c)
      y, _ = fp8lab.quantized_matmul(x, w, recipe=recipe, state=state, key=key)
      return jnp.sum(y.astype(jnp.float32) * c)
    argnums = (0, 1, 2) if state is not None else (0, 1)
    return jax.value_and_grad(f, argnums=argnums)(x, w, state)   # the loss keeps y's GEMM
  return op


def _quantize_only(recipe):
  r = fp8lab.get_recipe(recipe)

  def op(x, w, c, state, key):
    keys = training.operand_keys(key) if r.stochastic else (None, None, None)
    st = state if state is not None else (None, None, None)
    return [training._quantize_both(a, o, s, k, None, False)   # pylint: disable=protected-access
            for a, o, s, k in zip((x, w, c.astype(x.dtype)), r.operands(), st, keys)]
  return op


def _us_text(t: dict[str, Any]) -> str:
  """A timing row's host us per op, and on a GPU its device us (the profiler's kernels) and
  kernel count per op: the fixed cost is a device-time measure (the host's dispatch of a
  call with many small buffers can exceed its GPU work)."""
  text = f"{t.get('time_us', float('nan')):9.1f} us"
  if t.get("device_us_per_op") is not None:
    text += f" (device {t['device_us_per_op']:7.1f} us, {t['kernels_per_op']:.1f} kernels)"
  return text


def run_fixed(recipes, d: int, ms, reps: int, copies: int, seed: int) -> list[dict[str, Any]]:
  rows = []
  for m in ms:
    rng = np.random.default_rng(seed)

    def copy_args(recipe):
      out = []
      for _ in range(copies):
        x = jnp.asarray(rng.standard_normal((m, d)), jnp.bfloat16)
        w = jnp.asarray(rng.standard_normal((d, d)) / math.sqrt(d), jnp.bfloat16)
        c = jnp.asarray(rng.standard_normal((m, d)), jnp.float32)
        st = None if recipe == BASELINE else training.init_state(recipe, history_length=1024)
        out.append((x, w, c, st, jax.random.key(int(rng.integers(2**31)))))
      return out

    base = None
    for recipe in recipes:
      args = copy_args(recipe)
      row: dict[str, Any] = {"recipe": recipe, "m": m, "d": d}
      lin, _ = timing.measure(_linear_fwd_bwd(recipe), args, reps=reps, warmup=2)
      row["linear_fwd_bwd"] = lin
      if lin.get("status") == "ok":
        if recipe == BASELINE:
          base = lin["time_us"]
        elif base is not None:
          row["linear_minus_bf16_us"] = lin["time_us"] - base
      if recipe != BASELINE:
        q, _ = timing.measure(_quantize_only(recipe), args, reps=reps, warmup=2)
        row["quantize_calls"] = q
        if fp8lab.get_recipe(recipe).gemm == "fp8":
          try:
            hlo = jax.jit(_linear_fwd_bwd(recipe)).lower(*args[0]).compile().as_text()
            row["hlo"] = fp8_gemm_counts(hlo)
          except Exception as e:  # pylint: disable=broad-except
            row["hlo_error"] = f"{type(e).__name__}: {e}"[:500]
      print(f"fixed m={m} {recipe:18s} linear {_us_text(lin)}"
            + (f"  quantize {_us_text(row['quantize_calls'])}" if "quantize_calls" in row
               else "") + (f"  hlo {row['hlo']}" if "hlo" in row else ""), flush=True)
      rows.append(row)
  return rows


# ----------------------------------------------------------------------------------------
# Part "train".

def run_train(recipes, cfg, steps: int, lr: float, eval_every: int, max_bytes: int,
              seed: int, out=None, save=lambda: None) -> dict[str, Any]:
  """Trains each recipe in turn into `out` (a dict, filled as it goes); `save()` after each."""
  corpus, source = stdlib_corpus(max_bytes)
  split = int(corpus.size * 0.95)                 # the last 5% held out
  train, held = corpus[:split], corpus[split:]
  b, t = cfg["batch"], cfg["seq"]
  rng = np.random.default_rng(seed)
  starts = rng.integers(0, train.size - t - 1, (steps, b))      # the same batches for all
  held_starts = np.random.default_rng(seed + 1).integers(0, held.size - t - 1, (8, b))

  def batch(data, s):
    return jnp.asarray(np.stack([data[i:i + t + 1] for i in s]), jnp.int32)

  def lr_at(i):
    warm = jnp.minimum(1.0, (i + 1) / max(1, steps // 20))
    cos = 0.55 + 0.45 * jnp.cos(jnp.pi * jnp.minimum(i, steps) / steps)
    return lr * warm * cos

  out = {} if out is None else out
  out.update({"corpus": source, "config": cfg, "steps": steps, "lr": lr,
              "held_out_batches": len(held_starts), "recipes": {}})
  for recipe in recipes:
    rec: dict[str, Any] = {}
    try:
      params = init_params(jax.random.key(seed), cfg)
      opt = (_zeros_like(params), _zeros_like(params))
      states = init_states(recipe, cfg)
      step = make_step(recipe, cfg, lr_at)
      evaluate = jax.jit(functools.partial(loss_fn, recipe=recipe, cfg=cfg))
      key, eval_key = jax.random.key(seed + 7), jax.random.key(seed + 8)
      losses, held_losses = [], []
      t0 = time.perf_counter()
      for i in range(steps):
        params, opt, states, loss = step(params, opt, states, batch(train, starts[i]),
                                         jax.random.fold_in(key, i), jnp.int32(i))
        losses.append(float(loss))
        if (i + 1) % eval_every == 0 or i + 1 == steps:
          hl = [float(evaluate(params, states, batch(held, s), eval_key))
                for s in held_starts]
          held_losses.append([i + 1, float(np.mean(hl))])
      tail = max(1, steps // 10)
      rec.update(status="ok", loss=losses, held_out=held_losses,
                 final_train_loss=float(np.mean(losses[-tail:])),
                 final_held_out_loss=held_losses[-1][1], wall_s=time.perf_counter() - t0)
    except Exception as e:  # pylint: disable=broad-except
      rec.update(status="error", error=f"{type(e).__name__}: {e}"[:2000])
    out["recipes"][recipe] = rec
    print(f"train {recipe:18s} " + (f"first {rec['loss'][0]:.3f} final "
                                    f"{rec['final_train_loss']:.3f}"
                                    f" held-out {rec['final_held_out_loss']:.3f} "
                                    f"({rec['wall_s']:.0f} s)" if rec["status"] == "ok"
                                    else rec["error"][:300]), flush=True)
    save()
  base = out["recipes"].get(BASELINE, {})
  for recipe, rec in out["recipes"].items():
    if recipe != BASELINE and rec.get("status") == "ok" and base.get("status") == "ok":
      rec["held_out_gap_vs_bf16"] = (rec["final_held_out_loss"] / base["final_held_out_loss"]
                                     - 1)
  return out


def plot(train: dict[str, Any], path: str) -> str | None:
  """Loss against step per recipe (a PNG), or why not."""
  try:
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  except ImportError:
    return "matplotlib is not importable (pip install fp8lab[bench])"
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for recipe, rec in train["recipes"].items():
    if rec.get("status") != "ok":
      continue
    loss = np.asarray(rec["loss"])
    k = max(1, len(loss) // 50)                           # a running mean over ~2% of the run
    smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
    ax.plot(np.arange(len(smooth)) + k, smooth, label=recipe, lw=1.2)
  ax.set_xlabel("step")
  ax.set_ylabel("train loss (nats / byte)")
  ax.set_title("stdlib bytes, " + ", ".join(f"{k} {v}" for k, v in train["config"].items()
                                            if k in ("d", "layers", "seq", "batch")))
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  return None


# ----------------------------------------------------------------------------------------

def main(argv: list[str]) -> None:
  cli.no_arguments(argv)
  if _PLOT.value:
    import json  # pylint: disable=import-outside-toplevel
    with open(_PLOT.value) as f:
      train = json.load(f)["train"]
    png = _PNG.value or os.path.splitext(_PLOT.value)[0] + ".png"
    why = plot(train, png)
    print(why or f"wrote {png}")
    return
  with cli.usage_errors():
    cli.check_choices("part", _PARTS.value, PARTS)
    cli.check_choices("recipe", _RECIPES.value, training.RECIPE_NAMES)
    recipes = [BASELINE] + [r for r in _RECIPES.value if r != BASELINE]
    cfg = _config(_pick(_D, 2048, 64), _pick(_LAYERS, 16, 2), _pick(_MLP, 8192, 256),
                  _pick(_HEADS, 16, 4), _pick(_SEQ, 2048, 64), _pick(_BATCH, 4, 2),
                  _pick(_VOCAB, 32000, 256))
    train_cfg = _config(_pick(_TRAIN_D, 256, 64), _pick(_TRAIN_LAYERS, 4, 2),
                        4 * _pick(_TRAIN_D, 256, 64), 4, _pick(_TRAIN_SEQ, 256, 64),
                        _pick(_TRAIN_BATCH, 32, 8), 256)
    ms = [int(v) for v in _FIXED_M.value]
  out = _OUT.value or default_out("train", smoke=not _on_gpu())
  doc: dict[str, Any] = {"run": {**machine_info(), **git_commit(), "argv": sys.argv[1:]},
                         "method": {"step": "median over timed steps of the host time of one "
                                            "blocking compiled step (forward, backward, Adam)",
                                    "fixed": timing.METHOD},
                         "model": {**cfg, "params": param_count(cfg)}}
  if "step" in _PARTS.value:
    doc["step"] = []
    run_step(cfg, recipes, _pick(_STEPS, 10, 3), _WARMUP.value, _SEED.value, rows=doc["step"],
             save=lambda: write_json(doc, out))
    write_json(doc, out)
  if "fixed" in _PARTS.value:
    doc["fixed"] = run_fixed(recipes, _FIXED_D.value or cfg["d"], ms, _pick(_REPS, 30, 3),
                             _pick(_COPIES, 16, 2), _SEED.value)
    write_json(doc, out)
  if "train" in _PARTS.value:
    steps = _pick(_TRAIN_STEPS, 2000, 150)
    doc["train"] = {}
    run_train(recipes, train_cfg, steps, _LR.value, _EVAL_EVERY.value or max(1, steps // 10),
              int(_CORPUS_MB.value * 2**20), _SEED.value, out=doc["train"],
              save=lambda: write_json(doc, out))
    write_json(doc, out)
    png = _PNG.value or os.path.splitext(out)[0] + ".png"
    why = plot(doc["train"], png)
    doc["train"]["png"] = png if why is None else None
    if why:
      doc["train"]["png_skipped"] = why
    write_json(doc, out)
  print(f"wrote {out}")


if __name__ == "__main__":
  app.run(main)
