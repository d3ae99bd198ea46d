"""Compares a few GEMV launch configs on the GPU: end to end and kernel only.

For e4m3, e5m2, nvfp4 and mxfp4 at 16384 x 16384 and batches 1 and 16, each candidate config
is timed twice: `full` = gemv_pallas (x preparation included) and `kernel` = the pallas_call
on operands prepared outside the timed function; plus the copy bandwidth and XLA's
float8_e4m3fn-weight GEMV in the same run. Timing as in benchmarks/timing.py with COPIES
(default 32) distinct weight copies per compiled call and 0.4 s of warm-up per op. The
winners are DEFAULT_CONFIGS in fp8lab/kernels/gemv.py.

  OUT=/tmp/out PYTHONPATH=. python3 benchmarks/probe_configs.py      # on the GPU
"""
import sys, os, time, json, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax, jax.numpy as jnp
from benchmarks import timing
from benchmarks.gpu_tune import random_weight, plan_of
from fp8lab.kernels import gemv as G

COPIES = int(os.environ.get("COPIES", "32"))
n = k = 16384
rows = []

def t(name, fn, args, nbytes):
  comp = timing.compile_unrolled(fn, args)
  t0 = time.time()
  while time.time() - t0 < 0.4:
    jax.block_until_ready(comp(args))
  r = timing.time_compiled(comp, args, reps=15, warmup=1, copies=len(args))
  print(f"{name:44s} {r.median_us:8.1f} us  {nbytes / r.median_us / 1e3:6.0f} GB/s  p25 {r.p25_us:.1f} p75 {r.p75_us:.1f}", flush=True)
  rows.append(dict(name=name, us=r.median_us, p25=r.p25_us, p75=r.p75_us))

def kernel_only(name, cfg, n_b):
  """pallas_call with the x operands prepared outside the timed function."""
  plan = plan_of(name)
  def prep(words, scales, ts, x):
    return G.gemv_launch(words, scales, ts, x, plan=plan, n_out=n, k=x.shape[-1], config=cfg)
  return prep

def main():
  print("device", jax.devices()[0].device_kind, "jax", jax.__version__, "copies", COPIES, flush=True)
  a = [jnp.ones((256 * 2**20,), jnp.float32) * (i + 1) for i in range(4)]
  t("copy 1 GiB (r+w)", lambda v: v * 1.5, [(v,) for v in a], 2 * 2**30)
  del a
  key = jax.random.key(0)
  for B in (1, 16):
    w8 = [jax.random.bits(jax.random.fold_in(key, i), (n, k), jnp.uint8).astype(jnp.uint8) & 0xBF for i in range(COPIES)]
    w8 = [jax.lax.bitcast_convert_type(w, jnp.float8_e4m3fn) for w in w8]
    xs = [jax.random.normal(jax.random.fold_in(key, 100 + i), (B, k), jnp.float32) for i in range(COPIES)]
    t(f"xla e4m3-weight B{B}", lambda w, x: jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16).T, preferred_element_type=jnp.float32), list(zip(w8, xs)), n * k)
    del w8
    for name in ("e4m3", "e5m2", "nvfp4", "mxfp4"):
      ws = [random_weight(jax.random.fold_in(key, 1000 + i), name, n, k) for i in range(COPIES)]
      nbytes = ws[0][0].size * 4 + (ws[0][1].size if ws[0][1] is not None else 0)
      cfgs = [G.gemv_config(plan_of(name).format, B), G.GemvConfig(128, 64, 8, 3), G.GemvConfig(64, 32, 4, 4)]
      for cfg in dict.fromkeys(cfgs):
        plan = plan_of(name)
        f = lambda wd, s, ts, x, cfg=cfg: G.gemv_pallas(wd, s, ts, x, plan=plan, n_out=n, k=k, config=cfg)
        tag = f"br{cfg.block_rows} bk{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages}"
        try:
          t(f"{name} B{B} full {tag}", f, [w + (x,) for w, x in zip(ws, xs)], nbytes)
          prep = kernel_only(name, cfg, B)
          built = [prep(*w, x) for w, x in zip(ws, xs)]
          call = built[0][1]
          t(f"{name} B{B} kernel {tag}", call, [b[0] for b in built], nbytes)
          del built
        except Exception as e:
          print(name, B, tag, "FAILED", type(e).__name__, str(e)[:200], flush=True)
      del ws
  out = os.environ.get("OUT")
  if out:
    json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), copies=COPIES, rows=rows), open(os.path.join(out, "bench2.json"), "w"), indent=1)

main()
