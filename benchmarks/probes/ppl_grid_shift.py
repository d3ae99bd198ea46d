"""Probe: how much of a weight format's SmolLM2 perplexity is its error size, and how much the
one rounding pattern a quantization happens to produce (docs/models.md section 3).

Every linear weight w (the LM head included) becomes the float32 values of a quantization
whose grid is shifted against w by a fraction u of a binade:
  power-of-two scaled formats (MX): deq(quant(w * 2^u)) * 2^-u;
  per-tensor e4m3 / e5m2: quant(w) with the factor 448 / amax * 2^-u (e5m2: 57344 / amax),
    as w * 2^u would give the same codes (its scale follows amax);
  formats whose every scale follows its block's amax as a float (e4m3_block, nvfp4) map
    w * 2^u to the same values: the probe refuses them.
The format's relative steps are the same in every binade, so each u has the same error
statistics and differs only in which weights round up or down. The model then runs in
float32 over those values, which is what the quantized model computes (docs/models.md,
section 3: every logit equal); perplexity as eval_models.py's: --windows x 256 tokens of
gensim's lee_background.cor, each scored on its own next tokens.

  python -m fp8lab.models.fetch smollm2 lee
  python benchmarks/probes/ppl_grid_shift.py --formats=e4m3,mxfp8_rceil --shifts=8 \
      --out=benchmarks/results/models_grid_shift_cpu_<date>.json
"""

from __future__ import annotations

import json
import os
import sys
import time

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)

from absl import app, flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import cli  # noqa: E402
from benchmarks.run_info import git_commit, machine_info  # noqa: E402
import fp8lab  # noqa: E402
from fp8lab.formats import get_quantized_format  # noqa: E402
from fp8lab.models import common, fetch, llama, loaders, tokenizers  # noqa: E402

_FORMATS = flags.DEFINE_list("formats", ["e4m3", "mxfp8_rceil", "mxfp8"],
                             "Weight format labels (models/common.py weight_formats), nearest "
                             "rounding, no Hadamard.")
_SHIFTS = flags.DEFINE_integer("shifts", 8, "Grid shifts u = 0, 1/n, ..., (n-1)/n per format.")
_WINDOWS = flags.DEFINE_integer("windows", 2, "Perplexity windows of 256 tokens.")
_OUT = flags.DEFINE_string("out", "", "JSON results path ('' for none).")

_WINDOW = 256


def shifted_values(w: np.ndarray, wf: common.WeightFormat, u: float) -> np.ndarray:
  """w's values after a quantization of wf whose grid is shifted by u binades (module doc)."""
  w = np.asarray(w, np.float32)
  if wf.fmt is None:
    return w
  qf = get_quantized_format(wf.fmt)
  if qf.scaling == "tensor":
    amax = np.float32(np.abs(w).max())
    factor = np.float32(qf.element.max_finite / amax * 2.0 ** -u)
    q = fp8lab.quantize(jnp.asarray(w), wf.fmt, scale=factor)
    return np.asarray(fp8lab.dequantize(q, jnp.float32), np.float32)
  if qf.scaling != "mx":
    raise ValueError(f"{wf.label}: its scales follow each block's amax as floats, so a "
                     "shifted w quantizes to the same values; no grid shift to probe")
  f = np.float32(2.0 ** u)
  q = common.quantize_weight(w * f, wf, jax.random.key(0))
  return np.asarray(fp8lab.dequantize(q, jnp.float32), np.float32) / f


def main(argv):
  cli.no_arguments(argv)
  wfs = {w.label: w for w in common.weight_formats(variants=("nearest",))}
  with cli.usage_errors():
    cli.check_choices("format", _FORMATS.value, list(wfs))
  meta, tensors = loaders.read_gguf(fetch.path("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
  cfg = llama.LlamaConfig.from_gguf(meta)
  params = llama.load_gguf_params(tensors, cfg)
  del tensors
  tok = tokenizers.ByteLevelBPE.from_gguf(meta)
  text = loaders.read_lee_background(fetch.path("lee", "lee_background.cor"))
  nw = _WINDOWS.value
  ids = np.asarray(tok.encode(text)[:nw * _WINDOW + 1], np.int32)
  windows = np.stack([ids[i * _WINDOW:(i + 1) * _WINDOW + 1] for i in range(nw)])
  x, y = jnp.asarray(windows[:, :-1]), jnp.asarray(windows[:, 1:])
  kvf = common.KVFormat("f32")

  def ppl(wf, u):
    p = {"embed": jnp.asarray(params["embed"]), "norm": jnp.asarray(params["norm"]),
         "head": jnp.asarray(shifted_values(params["head"], wf, u)), "layers": []}
    for layer in params["layers"]:
      new = {n: jnp.asarray(layer[n]) for n in ("attn_norm", "ffn_norm")}
      for n in llama.LINEARS:
        new[n] = jnp.asarray(shifted_values(layer[n], wf, u))
      p["layers"].append(new)
    logits, _ = llama.prefill(p, x, cfg=cfg, kvf=kvf, capacity=x.shape[1],
                              implementation="xla")
    return float(np.exp(np.asarray(llama.nll(logits, y), np.float64).mean()))

  base = ppl(common.F32, 0.0)
  doc = dict(machine=machine_info(), commit=git_commit(),
             date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), tokens=int(y.size),
             f32_ppl=base, rows=[])
  print(f"f32 (the Q4_1 GGUF dequantized) {base:.3f} over {y.size} tokens", flush=True)
  for label in _FORMATS.value:
    vals = []
    for i in range(_SHIFTS.value):
      u = i / _SHIFTS.value
      t0 = time.time()
      v = ppl(wfs[label], u)
      vals.append(v)
      doc["rows"].append(dict(format=label, shift=u, ppl=v, ratio=v / base))
      print(f"{label:14s} u={u:.3f} ppl {v:8.3f} ({v / base:.4f}x)  {time.time() - t0:4.0f} s",
            flush=True)
    r = np.asarray(vals) / base
    print(f"{label:14s} over {len(r)} shifts: {r.min():.4f}x - {r.max():.4f}x, mean "
          f"{r.mean():.4f}x, u=0 {r[0]:.4f}x", flush=True)
    if _OUT.value:
      with open(_OUT.value, "w") as fh:
        json.dump(doc, fh, indent=1)


if __name__ == "__main__":
  app.run(main)
