"""The kernels of one decode layer's attention part over a packed KV cache (a probe).

One jitted call does what bench_decode.py's step does per layer for a packed cache:
fp8lab.kv_cache_update for k and for v (the new token of each row), then fp8lab.attention
over the updated caches, at the 8B shape (32 query heads, 8 KV heads, D = 128) with batch B
and cache length L. Prints, per KV format, the ENTRY instructions of the optimized HLO that
launch work (fusions, custom calls, scatters, copies, ...), the host time of one call and the
device time of its kernels, so that the kernels around the attention kernel can be counted
and removed. Not a test.

  PYTHONPATH=. python3 benchmarks/probes/kv_step_kernels.py [formats] [B] [L] [impls]

impls: kv_cache_update's quantize implementation per run: "auto" (None), "pallas",
"reference" (default "auto,reference").
"""

from __future__ import annotations

import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import fp8lab
from benchmarks import timing
from benchmarks.probes import hlo_kernels

_QUIET = ("parameter(", "get-tuple-element(", "tuple(", "bitcast(", "constant(")


def entry_instructions(hlo_text: str) -> list[str]:
  """The ENTRY instructions that launch work (not parameters, tuples, bitcasts, constants)."""
  return [line for line in hlo_kernels.entry_lines(hlo_text)
          if not line.startswith("}") and not any(q in line for q in _QUIET)]


def make_cache(fmt, b, s, hkv, d, key):
  x = jax.random.normal(key, (b, s, hkv, d), jnp.float32)
  if fmt == "bf16":
    return x.astype(jnp.bfloat16)
  block = (d,) if fmt.endswith("_block") else None
  return fp8lab.quantize(x, fmt, axis=-1, block_shape=block)


def main():
  fmts = (sys.argv[1] if len(sys.argv) > 1 else "e4m3_block,nvfp4,bf16").split(",")
  b = int(sys.argv[2]) if len(sys.argv) > 2 else 1
  s = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
  hq, hkv, d = 32, 8, 128
  keys = jax.random.split(jax.random.key(0), 5)
  q = jax.random.normal(keys[0], (b, 1, hq, d), jnp.bfloat16)
  k_new = jax.random.normal(keys[1], (b, 1, hkv, d), jnp.bfloat16)
  v_new = jax.random.normal(keys[2], (b, 1, hkv, d), jnp.bfloat16)
  pos = jnp.full((b,), s // 2, jnp.int32)
  lengths = pos + 1
  impls = (sys.argv[4] if len(sys.argv) > 4 else "auto,reference").split(",")
  for fmt, impl in [(f, i) for f in fmts for i in (impls if f != "bf16" else ["auto"])]:
    kc = make_cache(fmt, b, s, hkv, d, keys[3])
    vc = make_cache(fmt, b, s, hkv, d, keys[4])
    kw = {} if impl == "auto" or fmt == "bf16" else {"implementation": impl}

    def step(q, k_new, v_new, kc, vc, pos, lengths, kw=kw):
      kc = fp8lab.kv_cache_update(kc, k_new, pos, **kw)
      vc = fp8lab.kv_cache_update(vc, v_new, pos, **kw)
      return fp8lab.attention(q, kc, vc, kv_lengths=lengths), kc, vc

    args = (q, k_new, v_new, kc, vc, pos, lengths)
    try:
      compiled = jax.jit(step, donate_argnums=(3, 4)).lower(*args).compile()
    except Exception as e:  # noqa: BLE001 - a probe: say what failed, go on
      print(f"== {fmt} B={b} L={s} implementation={impl}: FAILED {type(e).__name__}: "
            f"{str(e).splitlines()[0][:200] if str(e) else ''}", flush=True)
      continue
    lines = entry_instructions(compiled.as_text())
    print(f"== {fmt} B={b} L={s} kv_cache_update implementation={impl}: {len(lines)} ENTRY "
          "instructions", flush=True)
    for line in lines:
      name = re.sub(r"\s+", " ", line)[:230]
      print("   ", name, flush=True)
    # Host and device time: the donated caches are rebuilt per call outside the timing.
    host = []
    for i in range(12):
      kc_i = make_cache(fmt, b, s, hkv, d, keys[3])
      vc_i = make_cache(fmt, b, s, hkv, d, keys[4])
      jax.block_until_ready((kc_i, vc_i))
      t0 = time.perf_counter()
      jax.block_until_ready(compiled(q, k_new, v_new, kc_i, vc_i, pos, lengths))
      if i >= 2:
        host.append(time.perf_counter() - t0)
    kc_i = make_cache(fmt, b, s, hkv, d, keys[3])
    vc_i = make_cache(fmt, b, s, hkv, d, keys[4])
    # The same step without donation, the same argument buffers every call.
    same = jax.jit(step).lower(*args).compile()
    host_same = []
    for i in range(12):
      t0 = time.perf_counter()
      jax.block_until_ready(same(q, k_new, v_new, kc_i, vc_i, pos, lengths))
      if i >= 2:
        host_same.append(time.perf_counter() - t0)
    print(f"   host per call, same buffers, no donation {np.median(host_same) * 1e6:.1f} us",
          flush=True)
    dev = None
    try:
      kt = timing.device_kernel_times(lambda a: same(*a), (q, k_new, v_new, kc_i, vc_i,
                                                           pos, lengths), runs=3)
      if kt:
        dev = {n: float(np.sum(v)) / 3 for n, v in kt.items()}
    except Exception as e:  # noqa: BLE001 - a probe: say what failed, go on
      print(f"   device times failed: {type(e).__name__}: {e}"[:300], flush=True)
    print(f"   host per call {np.median(host) * 1e6:.1f} us (median of {len(host)})", flush=True)
    if dev:
      print(f"   device {sum(dev.values()):.1f} us over {len(dev)} kernels:", flush=True)
      for n, t in sorted(dev.items(), key=lambda kv: -kv[1]):
        print(f"     {t:8.2f} us  {n[:120]}", flush=True)


if __name__ == "__main__":
  main()
