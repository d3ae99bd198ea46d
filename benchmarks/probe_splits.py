"""Probe: programs per SM. Launch configs with K splits against the kernel and op device times.

Nsight Compute (benchmarks/results/gemv_ncu_h200_20261130.txt) shows the 16384^2 batch-1
kernels run 256 programs on 132 SMs: about 2 blocks, 8 warps, per SM, while registers allow
4 (nvfp4) or 3 (mxfp4); the 4-bit kernels then leave issue slots idle ("no eligible warp"
about half the cycles). This probe times configs that launch more programs: more K splits
(GemvConfig.k_splits) or more warps per program. For each case: the median device time of
the fp8lab_gemv kernel and the op's device time per GEMV (every kernel of the call: x
preparation, the GEMV, the fixed-order sum of the K splits), over 3 calls of R distinct
weight copies each, after 10 warm-up calls. Work stops starting new rows after
PROBE_BUDGET_S seconds. JSON in $OUT/probe_splits.json.

  PYTHONPATH=. OUT=/tmp/out python3 benchmarks/probe_splits.py        # on the GPU
  PROBE_WORK=batches | mx | decode | mx_shapes | sparse | wide: other work lists (below);
  PROBE_CUSTOM: a work list of your own (below);
  PROBE_FORMATS=mxfp4,mxfp8 keeps some formats' rows;
  PROBE_KERNELS=1 prints every kernel of the op (x's preparation: XLA fusions, fp8lab_xprep).
Results: benchmarks/results/gemv_splits_h200_20261130.txt (default list),
gemv_batches_h200_20261130.txt, gemv_mx_configs_h200_20261130.txt,
gemv_pair_decode_h200_20261130.txt and gemv_mx_first_loop_h200_20261130.txt (decode,
mx_shapes), gemv_mx_sparse_h200_20261130.txt (sparse), gemv_wide_h200_20261130.txt (wide).
"""
import dataclasses, json, os, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, os.getcwd())
import jax
import jax.numpy as jnp
import numpy as np
from benchmarks.gpu_tune import plan_of, probe_args, gemv_device_us
from fp8lab.kernels import gemv as G

R = int(os.environ.get("PROBE_COPIES", "8"))
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "420"))
T0 = time.time()
S = 16384
# (format, n_out, k, batch, [(block_rows, block_k, num_warps, num_stages, k_splits)]);
# k_splits 0 is the automatic rule of main; the default config comes first.
WORK = [
    ("nvfp4", S, S, 1, [(128, 32, 4, 3, 0), (128, 32, 4, 3, 4), (128, 32, 4, 3, 8),
                        (128, 32, 8, 3, 2), (128, 32, 8, 3, 4), (64, 32, 4, 4, 2),
                        (64, 32, 4, 4, 4), (256, 32, 8, 3, 4)]),
    ("mxfp4", S, S, 1, [(64, 64, 4, 3, 0), (64, 64, 4, 3, 2), (64, 64, 4, 3, 4),
                        (64, 32, 4, 4, 2), (128, 32, 8, 3, 2), (128, 32, 8, 3, 4),
                        (128, 64, 8, 3, 2), (64, 64, 8, 3, 2)]),
    ("nvfp4", S, S, 16, [(64, 32, 4, 4, 0), (64, 32, 4, 4, 2), (64, 32, 4, 4, 4),
                         (128, 32, 8, 3, 2), (128, 32, 8, 3, 4), (64, 16, 4, 4, 2)]),
    ("mxfp4", S, S, 16, [(64, 32, 4, 4, 0), (64, 32, 4, 4, 2), (64, 32, 4, 4, 4),
                         (128, 32, 8, 3, 2), (64, 16, 4, 4, 2)]),
    ("e4m3", S, S, 1, [(64, 64, 4, 3, 0), (64, 64, 4, 3, 2), (64, 64, 4, 3, 4),
                       (128, 64, 8, 3, 2)]),
    ("e5m2", S, S, 1, [(64, 64, 4, 3, 0), (64, 64, 4, 3, 2)]),
    ("mxfp8", S, S, 1, [(64, 64, 4, 3, 0), (64, 64, 4, 3, 2), (64, 64, 4, 3, 4)]),
    ("nvfp4_2d", S, S, 1, [(128, 32, 4, 3, 0), (128, 32, 4, 3, 4)]),
    ("e4m3", S, S, 16, [(64, 64, 4, 3, 0), (64, 64, 4, 3, 2)]),
    ("mxfp8", S, S, 16, [(64, 64, 4, 3, 0), (64, 64, 4, 3, 2)]),
    ("nvfp4", 4096, 14336, 1, [(128, 32, 4, 3, 0), (128, 32, 4, 3, 8), (64, 32, 4, 4, 8)]),
    ("mxfp4", 4096, 14336, 1, [(64, 64, 4, 3, 0), (64, 64, 4, 3, 4), (64, 64, 4, 3, 8)]),
    ("nvfp4", 14336, 4096, 1, [(128, 32, 4, 3, 0), (128, 32, 4, 3, 2), (128, 32, 4, 3, 4)]),
    ("mxfp4", 14336, 4096, 1, [(64, 64, 4, 3, 0), (64, 64, 4, 3, 2)]),
]


def dflt(f: str, b: int, n: int) -> tuple:
  """The default config (gemv_config) of format f, batch b and n_out n, as a tuple."""
  return dataclasses.astuple(G.gemv_config(f, b, n))


# PROBE_WORK=batches: configs for batches 4 and 16 (4-bit formats; after
# benchmarks/probe_parts.py found 128 x 32 w4 s3 faster at batch 16 than the default).
if os.environ.get("PROBE_WORK") == "batches":
  WORK = [(f, S, S, b, [(64, 32, 4, 4, 0), (128, 32, 4, 3, 0), (128, 32, 4, 4, 0),
                        (128, 32, 4, 2, 0), (128, 16, 4, 3, 0), (256, 32, 8, 3, 0),
                        (64, 64, 4, 3, 0)])
          for b in (16, 4) for f in ("nvfp4", "mxfp4")]
  WORK += [("nvfp4", n, k, 16, [(64, 32, 4, 4, 0), (128, 32, 4, 3, 0)])
           for n, k in ((4096, 14336), (14336, 4096))]
  WORK += [("nvfp4", S, S, 64, [(64, 16, 4, 3, 0), (128, 16, 4, 3, 0), (128, 32, 4, 2, 0)])]
# PROBE_WORK=mx: MX configs after the far-block check left the main loop.
if os.environ.get("PROBE_WORK") == "mx":
  MX1 = [(64, 64, 4, 3, 0), (128, 32, 4, 3, 0), (64, 32, 4, 4, 0), (128, 64, 8, 3, 0)]
  WORK = [(f, S, S, b, MX1) for b in (1, 16) for f in ("mxfp4", "mxfp8")]
  WORK += [(f, S, S, 4, MX1[:2]) for f in ("mxfp4", "mxfp8")]
  WORK += [(f, n, k, 1, [(64, 64, 4, 3, 0), (128, 32, 4, 3, 0)]) for n, k in
           ((4096, 14336), (14336, 4096)) for f in ("mxfp4", "mxfp8")]
# PROBE_WORK=decode: every format's default config at 16384^2, batches 1 and 16 (run on two
# trees to compare decodes), and PROBE_ALTS=1 adds other configs for the formats whose
# decode changed (the pair orders of unpack.PAIR_LAYOUTS).
if os.environ.get("PROBE_WORK") == "decode":
  WORK = [(f, S, S, b, [dflt(f.replace("_2d", ""), b, S)])
          for b in (1, 16) for f in ("e4m3", "e5m2", "mxfp8", "mxfp4", "nvfp4", "nvfp4_2d")]
  if os.environ.get("PROBE_ALTS") == "1":
    WORK += [("nvfp4", S, S, 1, [(256, 16, 4, 3, 0), (128, 16, 4, 3, 0), (128, 32, 4, 4, 0),
                                 (128, 32, 4, 2, 0)]),
             ("mxfp4", S, S, 1, [(128, 32, 4, 3, 0), (256, 16, 4, 3, 0), (64, 32, 4, 3, 0)]),
             ("nvfp4", S, S, 16, [(64, 32, 4, 3, 0), (128, 16, 4, 3, 0)]),
             ("mxfp4", S, S, 16, [(64, 64, 4, 3, 0), (128, 16, 4, 3, 0)]),
             ("mxfp8", S, S, 16, [(128, 32, 4, 3, 0)])]
# PROBE_WORK=mx_shapes: MX default configs at the LLM shapes (batches 1, 16) and 16384^2 batch 64.
if os.environ.get("PROBE_WORK") == "mx_shapes":
  WORK = [(f, n, k, b, [dflt(f, b, n)]) for n, k in ((14336, 4096), (4096, 14336))
          for b in (16, 1) for f in ("mxfp4", "mxfp8")]
  WORK += [(f, S, S, 64, [dflt(f, 64, S)]) for f in ("mxfp4", "mxfp8")]
# PROBE_WORK=sparse: MX default configs at 16384^2 on dense weights and on weights with
# all-zero blocks (words 0, scale code 0, as the quantizer writes them): "r1/64" / "r1/4"
# zero each block with that probability, "t1/64" zeroes the last 1/64 of every row (K
# padded with zeros). Such blocks are "far" in the kernel's fast path, so their programs
# look at their words again for nonzero codes (the 6th entry: the pattern).
if os.environ.get("PROBE_WORK") == "sparse":
  WORK = [(f, S, S, b, [dflt(f, b, S)], pat) for b in (1, 16) for f in ("mxfp4", "mxfp8")
          for pat in ("", "r1/64", "r1/4", "t1/64")]
# PROBE_WORK=wide: 8-warp programs of 128 rows x 64 words (and neighbours) for batches 1
# and 4, after mxfp4 batch 1 ran 53.3 us with (128, 64, 8, 3) against 58.4 with its default
# (gemv_mx_sparse_h200_20261130.txt); the DEFAULT_CONFIGS entry comes first.
if os.environ.get("PROBE_WORK") == "wide":
  W8 = (128, 64, 8, 3, 0)
  WORK = [("mxfp4", S, S, 1, [(64, 64, 4, 3, 0), W8, (128, 64, 8, 4, 0), (256, 32, 8, 3, 0)]),
          ("nvfp4", S, S, 1, [(128, 32, 4, 3, 0), W8, (256, 32, 8, 3, 0), (128, 32, 8, 3, 0)]),
          ("mxfp8", S, S, 1, [(64, 64, 4, 3, 0), W8, (128, 32, 8, 3, 0)]),
          ("e4m3", S, S, 1, [(64, 64, 4, 3, 0), W8]),
          ("nvfp4_2d", S, S, 1, [(128, 32, 4, 3, 0), W8]),
          ("mxfp4", S, S, 4, [(64, 64, 4, 3, 0), W8]),
          ("nvfp4", S, S, 4, [(128, 32, 4, 3, 0), W8])]
  WORK += [(f, n, k, 1, [dflt(f, 1, n), W8])
           for n, k in ((4096, 14336), (14336, 4096)) for f in ("mxfp4", "nvfp4")]
# PROBE_CUSTOM="mxfp4 16384 16384 1 128,64,8,2 256,64,8,3; nvfp4 ..." replaces the work list:
# rows of format, n_out, k, batch and configs (block_rows, block_k, num_warps, num_stages[,
# k_splits[, batch_block[, chain_dots (0 / 1)]]]: GemvConfig's fields in order), separated
# by ";".
if os.environ.get("PROBE_CUSTOM"):
  WORK = []
  for row in filter(str.strip, os.environ["PROBE_CUSTOM"].split(";")):
    f, n, k, b, *cfgs = row.split()
    ints = [tuple(map(int, c.split(","))) for c in cfgs]
    WORK.append((f, int(n), int(k), int(b), [c[:6] + tuple(map(bool, c[6:])) for c in ints]))
# PROBE_FORMATS=a,b keeps only those formats' rows of the work list.
if os.environ.get("PROBE_FORMATS"):
  WORK = [w for w in WORK if w[0] in os.environ["PROBE_FORMATS"].split(",")]
rows = []


def sparsify(args, plan, pattern: str):
  """Zeroes (row, block)s of every copy's weights, words and scale code (the quantizer's
  all-zero block): pattern "rF" each with probability F, "tF" the last fraction F of each
  row's blocks."""
  kind, num, den = pattern[0], *map(int, pattern[1:].split("/"))
  out = []
  for i, (w, s, t, x) in enumerate(args):
    if kind == "r":
      zero = jax.random.uniform(jax.random.key(1000 + i), s.shape) < num / den
    else:
      zero = jnp.broadcast_to(jnp.arange(s.shape[1]) >= s.shape[1] * (den - num) // den,
                              s.shape)
    wz = jnp.repeat(zero, plan.words_per_block, axis=1)[:, :w.shape[1]]
    out.append((jnp.where(wz, jnp.uint32(0), w), jnp.where(zero, jnp.uint8(0), s), t, x))
  return out


def save():
  out = os.environ.get("OUT")
  if out:
    with open(os.path.join(out, "probe_splits.json"), "w") as fh:
      json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
                     commit=os.environ.get("FP8LAB_GIT_COMMIT"),
                     date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), copies=R,
                     rows=rows), fh, indent=1)


print("device", jax.devices()[0].device_kind, "jax", jax.__version__, "copies", R, flush=True)
for name, n, k, b, cands, *sparse in WORK:
  if time.time() - T0 > BUDGET_S:
    print("budget spent: stopping", flush=True)
    break
  args = probe_args(name, n, k, b, R)
  plan = plan_of(name, native_fp8=G.native_fp8_requested(), asm_e2m1=G.asm_e2m1_default())
  pattern = sparse[0] if sparse else ""
  if pattern:
    args = sparsify(args, plan, pattern)
  first = None                                   # the first config's output (copy 0)
  for c in cands:
    if time.time() - T0 > BUDGET_S:
      break
    cfg = G.GemvConfig(*c)
    try:
      kern, op, out, per = gemv_device_us(plan, cfg, n, k, args, breakdown=True)
    except Exception as e:                       # a config that does not compile: say so
      print(f"{name} {n}x{k} B{b} {c} FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
      continue
    rows.append(dict(format=name, n=n, k=k, batch=b, config=c, kernel_us=kern, op_us=op,
                     kernels_us=per, zero_blocks=pattern or None))
    save()
    zb = f" zero blocks {pattern or 'none'}" if sparse else ""
    if first is None:
      first = out
    same = np.array_equal(np.asarray(out, np.float32).view(np.uint32),
                          np.asarray(first, np.float32).view(np.uint32))
    rows[-1]["same_bits_as_first"] = bool(same)
    print(f"{name:8s} {n}x{k} B{b:<2d} {str(c):28s} kernel {kern:7.1f}  op {op:7.1f}{zb}"
          f"{'' if same else '  (bits differ from the first config)'}", flush=True)
    if os.environ.get("PROBE_KERNELS") == "1":     # every kernel of the op, us per GEMV
      print("    " + ", ".join(f"{kn} {us:.1f}" for kn, us in sorted(per.items(),
                                                                key=lambda t: -t[1])), flush=True)
print(f"done in {time.time() - T0:.0f} s", flush=True)
