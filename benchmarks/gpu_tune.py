"""Quick GPU check-and-tune sweep for the packed GEMV kernel (fp8lab/kernels/gemv.py).

One call on the lent GPU does, in order (each step budgeted, a short table printed last):
  1. correctness of every format at several batches and x dtypes against a float64 product
     of the golden-model dequantized weights (odd shapes, masked tails), determinism (same
     bits twice);
  2. the no-fp8-instruction check: the PTX of compiled kernels (XLA dump) grepped for
     cvt.*e4m3 / e5m2 / e2m1 (done in a subprocess, since XLA_FLAGS are read at start-up);
  3. XLA baselines at the tuning shape: fp32, bf16 and float8_e4m3fn-weight GEMV;
  4. the sweep: candidate GemvConfigs per (format, batch), timed like benchmarks/timing.py
     (R distinct weight copies per compiled call, median over reps, divided by R).
It works on raw arrays (packed words, scale codes, tensor scale; benchmarks/kernel_inputs.py),
not on QuantizedArray, so that any launch config can be tried.

  python benchmarks/gpu_tune.py --out=$OUT/tune.json            # on the GPU
  python benchmarks/gpu_tune.py --smoke                          # CPU: tiny, interpret mode
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)   # run as a script: fp8lab and benchmarks from the working tree

from absl import app, flags  # noqa: E402
from benchmarks import cli  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.kernel_inputs import (LAYOUT_NAMES, check_layouts, dequantize64,  # noqa: E402
                                      parse_config, plan_of, random_weight,
                                      time_host_us)
from fp8lab.kernels import gemv as G  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "JSON results path")
flags.DEFINE_string("size", "16384x16384", "n_out x k of the timing shape")
flags.DEFINE_list("formats", ["e4m3", "e5m2", "mxfp4", "nvfp4"],
                  f"formats to tune, from {', '.join(LAYOUT_NAMES)}")
flags.DEFINE_list("batches", ["1", "16"], "batches to tune")
flags.DEFINE_enum("sweep", "small", ["default", "small", "large"],
                  "candidate set: default (tuned table only), small, large")
flags.DEFINE_integer("reps", 20, "timed calls per candidate")
flags.DEFINE_integer("copies", 4, "distinct weight copies per compiled call")
flags.DEFINE_float("budget_s", 420.0, "stop starting new sweep work after this many seconds")
flags.DEFINE_bool("smoke", False, "tiny sizes in interpret mode (CPU dry run)")
flags.DEFINE_bool("check", True, "run the correctness checks")
flags.DEFINE_list("check_formats", list(LAYOUT_NAMES), "formats to check")
flags.DEFINE_string("check_cases", "b1,b3b,b16,b20h,b64", "check cases (see check_correctness)")
flags.DEFINE_bool("ptx", True, "run the PTX (no fp8 conversion) check")
flags.DEFINE_string("ptx_dir", None, "keep the PTX dump here (default: a temp dir)")
flags.DEFINE_list("ptx_formats", ["e4m3", "e5m2", "mxfp4", "nvfp4"],
                  "formats whose kernels the PTX check compiles")
flags.DEFINE_bool("compile_only", False, "only compile --ptx_formats' kernels at batches 1 "
                  "and 16 and exit (what the PTX check runs in a subprocess with XLA dumping)")
flags.DEFINE_list("extra", [], "extra candidates: block_rows:block_k:num_warps:num_stages"
                  "[:k_splits[:batch_block[:chain_dots]]],... applied to every format")

_T0 = time.time()


def _log(*a):
  print(f"[{time.time() - _T0:6.1f}s]", *a, flush=True)


def _call(name, cfg, interpret=False):
  plan = plan_of(name)

  def f(words, scales, ts, x):
    return G.gemv_pallas(words, scales, ts, x, plan=plan, n_out=words.shape[0],
                         k=x.shape[-1], config=cfg, interpret=interpret)
  return f


_CHECK_CASES = {"b1": (1, jnp.float32), "b3b": (3, jnp.bfloat16), "b16": (16, jnp.float32),
                "b20h": (20, jnp.float16), "b64": (64, jnp.float32), "b5b": (5, jnp.bfloat16)}


def check_correctness(smoke: bool, formats: list[str], cases: list[str]) -> list[dict]:
  """Every format x case (batch and x dtype: _CHECK_CASES) against float64; rows with
  err / bound (must be <= 1)."""
  rows = []
  n, k = (37, 100) if smoke else (1000, 4100)
  key = jax.random.key(1)
  for name in formats:
    for case in cases:
      batch, xdt = _CHECK_CASES[case]
      key, kw_, kx = jax.random.split(key, 3)
      words, scales, ts = random_weight(kw_, name, n, k)
      x = jax.random.normal(kx, (batch, k), jnp.float32).astype(xdt)
      f = jax.jit(_call(name, G.gemv_config(plan_of(name).format, batch), interpret=smoke))
      y1 = f(words, scales, ts, x)
      y2 = f(words, scales, ts, x)
      same_bits = bool(np.array_equal(np.asarray(y1).view(np.uint16 if xdt != jnp.float32
                                                              else np.uint32),
                                      np.asarray(y2).view(np.uint16 if xdt != jnp.float32
                                                          else np.uint32)))
      wd = dequantize64(name, words, scales, ts, n, k)
      x64 = np.asarray(x.astype(jnp.float32), np.float64)
      ref = x64 @ wd.T
      mag = np.abs(x64) @ np.abs(wd).T
      u = 2.0 ** -24
      # Float32 accumulation bound (gemv.py docstring), plus the final rounding to x's dtype.
      out_u = {jnp.float32: u, jnp.bfloat16: 2.0 ** -8, jnp.float16: 2.0 ** -11}[xdt]
      acc_bound = 2 * (k + 8) * u * mag
      bound = acc_bound + out_u * (np.abs(ref) + acc_bound) + 1e-30
      y = np.asarray(y1.astype(jnp.float32), np.float64)
      ratio = float(np.max(np.abs(y - ref) / bound))
      ok = ratio <= 1.0 and same_bits and np.isfinite(y).all()
      rows.append(dict(format=name, batch=batch, x_dtype=jnp.dtype(xdt).name,
                       err_over_bound=ratio, deterministic=same_bits, ok=bool(ok)))
      _log(f"check {name:11s} B={batch:2d} {jnp.dtype(xdt).name:8s} "
           f"err/bound={ratio:.3f} det={same_bits} {'ok' if ok else 'FAIL'}")
  return rows


def compile_kernels(formats: list[str]) -> None:
  """Compiles (and runs once) each format's kernel at batches 1 and 16, 256 x 1024, with the
  default configs and the integer decodes: what check_ptx dumps."""
  for name in formats:
    for batch in (1, 16):
      w, s, t = random_weight(jax.random.key(0), name, 256, 1024)
      x = jnp.ones((batch, 1024), jnp.float32)
      cfg = G.gemv_config(plan_of(name).format, batch)
      jax.block_until_ready(jax.jit(_call(name, cfg))(w, s, t, x))
  print("compiled", flush=True)


_FP8_CVT = re.compile(r"cvt[.a-z0-9]*\.(e4m3|e5m2|e2m1|e3m2|e2m3|ue8m0)[a-z0-9x]*", re.I)


def check_ptx(dump_dir: str | None, formats: list[str], out: str | None) -> dict:
  """Compiles the formats' kernels with XLA dumping their PTX; greps for fp8/fp4 converts.

  The compilation runs in a subprocess (this script with --compile_only), since XLA_FLAGS
  are read when the backend starts. With `out`, the kernels' PTX goes beside it."""
  d = dump_dir or tempfile.mkdtemp(prefix="fp8lab_ptx_")
  os.makedirs(d, exist_ok=True)
  env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                                    f" --xla_dump_to={d} --xla_gpu_dump_llvmir=true").strip())
  env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
  env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO, env.get("PYTHONPATH")) if p)
  proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--compile_only",
                         f"--ptx_formats={','.join(formats)}"], env=env, cwd=_REPO,
                        capture_output=True, text=True, timeout=300)
  listing = sorted(os.path.relpath(f, d) for f in glob.glob(os.path.join(d, "**", "*"),
                                                             recursive=True))
  files = sorted(glob.glob(os.path.join(d, "**", "*.ptx"), recursive=True))
  ll_files = sorted(glob.glob(os.path.join(d, "**", "*.ll"), recursive=True))
  kernels, hits, keep = {}, [], []
  for path in files:
    text = open(path, errors="replace").read()
    found = re.findall(r"\.entry\s+(\w*fp8lab_gemv\w*)", text)
    for name in found:
      kernels[name] = os.path.basename(path)
    if found:
      keep.append(f"// ==== {os.path.basename(path)}\n{text}")
    hits += [f"{os.path.basename(path)}: {h.group(0)}" for h in _FP8_CVT.finditer(text)]
  ll_kernels = set()
  for path in ll_files:
    text = open(path, errors="replace").read()
    ll_kernels |= set(re.findall(r"define[^@]*@(\w*fp8lab_gemv\w*)", text))
    hits += [f"{os.path.basename(path)}: {h.group(0)}" for h in _FP8_CVT.finditer(text)]
  if out and keep:
    with open(os.path.join(os.path.dirname(os.path.abspath(out)), "gemv_kernels.ptx"),
              "w") as f:
      f.write("\n".join(keep)[: 15 * 2**20])
  res = dict(rc=proc.returncode, ptx_files=len(files), ll_files=len(ll_files),
             ll_kernels=sorted(ll_kernels), kernels=sorted(kernels),
             fp8_cvt_hits=hits[:20], dump_dir=d, stderr_tail=proc.stderr[-1500:],
             stdout_tail=proc.stdout[-500:], n_dump_files=len(listing),
             dump_listing=listing[:60])
  res["ok"] = proc.returncode == 0 and len(kernels) > 0 and not hits
  _log(f"ptx: rc={proc.returncode} files={len(files)}+{len(ll_files)} gemv kernels={len(kernels)} "
       f"(llvm ir: {len(ll_kernels)}) "
       f"fp8 cvt hits={len(hits)} {'ok' if res['ok'] else 'FAIL'}")
  return res


def _time(fn, arg_copies, reps):
  """Median per-op time (us), from a busy GPU (kernel_inputs.time_host_us)."""
  return time_host_us(fn, arg_copies, reps=reps).median_us


def spin_gpu(seconds: float):
  """Keeps the GPU busy for a while so that clocks are up before anything is timed."""
  a = jnp.ones((8192, 8192), jnp.bfloat16)
  f = jax.jit(lambda a: (a @ a) * 1e-4)
  t0 = time.time()
  while time.time() - t0 < seconds:
    a = f(a)
    jax.block_until_ready(a)


def baselines(n, k, batches, copies, reps) -> list[dict]:
  rows = []
  key = jax.random.key(7)
  for batch in batches:
    for op, wdt, xdt in (("xla_f32", jnp.float32, jnp.float32),
                         ("xla_bf16", jnp.bfloat16, jnp.bfloat16),
                         ("xla_e4m3", jnp.float8_e4m3fn, jnp.bfloat16)):
      args = []
      for c in range(copies):
        key, k1, k2 = jax.random.split(key, 3)
        w = jax.random.normal(k1, (n, k), jnp.float32).astype(wdt)
        x = jax.random.normal(k2, (batch, k), jnp.float32).astype(xdt)
        args.append((w, x))
      if wdt == jnp.float8_e4m3fn:
        fn = lambda w, x: jnp.dot(x, w.astype(jnp.bfloat16).T)
      else:
        fn = lambda w, x: jnp.dot(x, w.T)
      us = _time(fn, args, reps)
      del args
      rows.append(dict(op=op, batch=batch, us=us))
      _log(f"baseline {op:9s} B={batch:2d} {us:8.1f} us")
  return rows


def candidates(name: str, batch: int, sweep: str,
               extra: list[str] = ()) -> list[G.GemvConfig]:
  """The tuned config first, then the sweep's grid and the `extra` configs (parse_config
  specs), keeping block_k a multiple of the scale block's words."""
  base = G.gemv_config(plan_of(name).format, batch)
  out = [base]
  wpb = plan_of(name).words_per_block
  C = G.GemvConfig
  if sweep == "small":
    out += [C(64, 64, 4, 3), C(64, 32, 4, 3), C(64, 32, 4, 4), C(128, 32, 8, 3),
            C(128, 64, 8, 3), C(32, 64, 2, 3), C(64, 64, 4, 2), C(64, 128, 4, 2)]
  elif sweep == "large":
    out += [C(br, bk, nw, ns) for br in (32, 64, 128) for bk in (32, 64, 128)
            for nw in (4, 8) for ns in (2, 3, 4) if br * bk <= 128 * 64]
  out += [parse_config(spec) for spec in extra]
  seen, uniq = set(), []
  for c in out:
    if c not in seen and c.block_k % wpb == 0:
      seen.add(c)
      uniq.append(c)
  return uniq


def sweep(n, k, names, batches, copies, reps, sweep_kind, deadline,
          extra: list[str] = ()) -> list[dict]:
  rows = []
  key = jax.random.key(11)
  for batch in batches:
    for name in names:
      if time.time() > deadline:
        _log(f"budget spent: skipping {name} B={batch}")
        continue
      args = []
      for c in range(copies):
        key, k1, k2 = jax.random.split(key, 3)
        w, s, t = random_weight(k1, name, n, k)
        x = jax.random.normal(k2, (batch, k), jnp.float32)
        args.append((w, s, t, x))
      for cfg in candidates(name, batch, sweep_kind, extra):
        if time.time() > deadline:
          break
        t0 = time.time()
        try:
          us = _time(_call(name, cfg), args, reps)
          err = None
        except Exception as e:  # a config that does not compile is a result, not a crash
          us, err = float("nan"), f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(dict(format=name, batch=batch, config=dataclasses.asdict(cfg), us=us,
                         error=err, wall_s=time.time() - t0))
        _log(f"{name:7s} B={batch:2d} br={cfg.block_rows:3d} bk={cfg.block_k:4d} "
             f"nw={cfg.num_warps} ns={cfg.num_stages}: "
             f"{us:8.1f} us"
             + (f"  {err[:120]}" if err else ""))
      del args
  return rows


def main(argv):
  cli.no_arguments(argv)
  global _T0
  _T0 = time.time()
  with cli.usage_errors():
    for names in (FLAGS.formats, FLAGS.check_formats, FLAGS.ptx_formats):
      check_layouts(names)
    for case in FLAGS.check_cases.split(","):
      if case not in _CHECK_CASES:
        raise ValueError(f"unknown check case {case!r}; valid: {', '.join(_CHECK_CASES)}")
    for spec in FLAGS.extra:
      parse_config(spec)
  if FLAGS.compile_only:
    compile_kernels(FLAGS.ptx_formats)
    return
  smoke = FLAGS.smoke or jax.default_backend() != "gpu"
  n, k = map(int, FLAGS.size.lower().split("x"))
  batches = [int(b) for b in FLAGS.batches]
  result = dict(device=str(jax.devices()[0].device_kind), jax=jax.__version__,
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), size=[n, k])
  out = FLAGS.out

  def save():
    if out:
      os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
      with open(out, "w") as f:
        json.dump(result, f, indent=1)

  if FLAGS.check:
    result["check"] = check_correctness(smoke, FLAGS.check_formats,
                                        FLAGS.check_cases.split(","))
    save()
  if smoke:
    _log("smoke run (no GPU): checks only")
    return
  if FLAGS.ptx:
    result["ptx"] = check_ptx(FLAGS.ptx_dir, FLAGS.ptx_formats, out)
    if not result["ptx"]["ok"]:
      print("ptx dump listing:", result["ptx"]["dump_listing"][:30])
    save()
  deadline = _T0 + FLAGS.budget_s
  spin_gpu(1.5)
  result["baselines"] = baselines(n, k, batches, FLAGS.copies, FLAGS.reps)
  save()
  result["sweep"] = sweep(n, k, FLAGS.formats, batches, FLAGS.copies, FLAGS.reps, FLAGS.sweep,
                          deadline, FLAGS.extra)
  save()

  # Short table last: best config per (format, batch) against the baselines.
  base = {(r["op"], r["batch"]): r["us"] for r in result["baselines"]}
  print("\nformat   B   best_us  default_us  xla_f32  xla_bf16  xla_e4m3  best config")
  best_rows = []
  for batch in batches:
    for name in FLAGS.formats:
      rs = [r for r in result["sweep"] if r["format"] == name and r["batch"] == batch
            and r["error"] is None]
      if not rs:
        continue
      best = min(rs, key=lambda r: r["us"])
      dflt = rs[0]["us"]
      c = best["config"]
      best_rows.append(dict(format=name, batch=batch, us=best["us"], config=c))
      print(f"{name:7s} {batch:2d} {best['us']:8.1f} {dflt:10.1f} "
            f"{base.get(('xla_f32', batch), float('nan')):8.1f} "
            f"{base.get(('xla_bf16', batch), float('nan')):9.1f} "
            f"{base.get(('xla_e4m3', batch), float('nan')):9.1f}  "
            f"br={c['block_rows']} bk={c['block_k']} nw={c['num_warps']} "
            f"ns={c['num_stages']}")
  result["best"] = best_rows
  save()
  bad = [r for r in result.get("check", []) if not r["ok"]]
  print(f"checks: {len(result.get('check', [])) - len(bad)} ok, {len(bad)} failed; "
        f"ptx: {result.get('ptx', {}).get('ok')}")


if __name__ == "__main__":
  app.run(main)
