"""fp8lab.models (issue 21): tokenizers, loaders, the BERT encoder and the llama decoder.

Tiny models built here from a seed always; the real cached files (python -m
fp8lab.models.fetch) when present, skipped with the reason otherwise. The float32 model paths
are checked against float64 numpy references of the same layers written here; quantized
weights against the same model over their dequantized values; the decode step against a
full recompute; eval_models' main end to end on the tiny models.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fp8lab
from fp8lab.models import bert, common, fetch, llama, loaders, tiny, tokenizers

_HAS_GGUF = importlib.util.find_spec("gguf") is not None
_U = 2.0**-24


def _needs(*sources):
  missing = [s for s in sources if not fetch.present(s)]
  return pytest.mark.skipif(bool(missing), reason=f"no cached files of {missing} in "
                            f"{fetch.cache_dir()} (python -m fp8lab.models.fetch)")


needs_gguf = pytest.mark.skipif(not _HAS_GGUF, reason="gguf is not importable "
                                "(pip install 'fp8lab[models]')")


# ---------------------------------------------------------------------------- float64 references

def _ln64(x, g, b, eps):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * g + b


def _softmax64(s):
  s = s - s.max(-1, keepdims=True)
  e = np.exp(s)
  return e / e.sum(-1, keepdims=True)


def _bert64(p, ids, mask, cfg):
  """all-MiniLM's forward and pooling in float64 numpy, one document at a time."""
  from math import erf
  erf_v = np.vectorize(erf)
  d = cfg.hidden // cfg.heads
  f = lambda a: np.asarray(a, np.float64)  # noqa: E731
  out = []
  for row, m in zip(ids, mask):
    n = int(m.sum())
    t = row[:n]
    h = f(p["word"])[t] + f(p["pos"])[:n] + f(p["type"])[0]
    h = _ln64(h, f(p["ln_g"]), f(p["ln_b"]), cfg.eps)
    for L in p["layers"]:
      lin = lambda name, x: x @ f(L[name]["w"]).T + f(L[name]["b"])  # noqa: E731
      q, k, v = (lin(f"attention.self.{n_}", h).reshape(n, cfg.heads, d)
                 for n_ in ("query", "key", "value"))
      s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
      a = np.einsum("hqk,khd->qhd", _softmax64(s), v).reshape(n, cfg.hidden)
      ln = L["attention.output.LayerNorm"]
      h = _ln64(h + lin("attention.output.dense", a), f(ln["g"]), f(ln["b"]), cfg.eps)
      z = lin("intermediate.dense", h)
      z = 0.5 * z * (1 + erf_v(z / math.sqrt(2)))
      ln = L["output.LayerNorm"]
      h = _ln64(h + lin("output.dense", z), f(ln["g"]), f(ln["b"]), cfg.eps)
    e = h.mean(0)
    out.append(e / np.linalg.norm(e))
  return np.stack(out)


def _llama64(p, ids, cfg):
  """The llama forward (B, T) -> logits in float64 numpy: full causal attention, RoPE on
  adjacent pairs, query head i on KV head i // (Hq / Hkv)."""
  f = lambda a: np.asarray(a, np.float64)  # noqa: E731
  bsz, t = ids.shape
  d, hq, hkv = cfg.head_dim, cfg.heads, cfg.kv_heads
  rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.eps) * f(g)  # noqa: E731
  ang = np.arange(t)[:, None] * cfg.rope_base ** (-np.arange(0, d, 2) / d)[None]   # (T, D/2)
  cos, sin = np.cos(ang)[None, :, None], np.sin(ang)[None, :, None]

  def rope(x):
    y = np.empty_like(x)
    y[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    y[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return y

  causal = np.tril(np.ones((t, t), bool))
  h = f(p["embed"])[ids]
  for L in p["layers"]:
    x = rms(h, L["attn_norm"])
    q = rope((x @ f(L["attn_q"]).T).reshape(bsz, t, hq, d))
    k = rope((x @ f(L["attn_k"]).T).reshape(bsz, t, hkv, d))
    v = (x @ f(L["attn_v"]).T).reshape(bsz, t, hkv, d)
    kk = np.repeat(k, hq // hkv, axis=2)
    vv = np.repeat(v, hq // hkv, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(d)
    s = np.where(causal, s, -np.inf)
    a = np.einsum("bhqk,bkhd->bqhd", _softmax64(s), vv).reshape(bsz, t, cfg.hidden)
    h = h + a @ f(L["attn_output"]).T
    x = rms(h, L["ffn_norm"])
    g, u = x @ f(L["ffn_gate"]).T, x @ f(L["ffn_up"]).T
    h = h + (g / (1 + np.exp(-g)) * u) @ f(L["ffn_down"]).T
  return rms(h, p["norm"]) @ f(p["head"]).T


# ---------------------------------------------------------------------------- tokenizers

def test_wordpiece_tiny_hand_cases():
  wp = tiny.wordpiece()
  v = wp.vocab
  # Split by hand: lowercase + accents stripped, punctuation apart, longest match first
  # ("flew" whole, not fl ##ew), "##s" continuation, an unmatched word is one [UNK].
  cases = {"The cats sat.": ["the", "cat", "##s", "sat", "."],
           "Thé dog,  ran": ["the", "dog", ",", "ran"],
           "flew birds": ["flew", "bird", "##s"],
           "catx mat": ["[UNK]", "mat"]}
  wp.vocab.setdefault("flew", None)
  del wp.vocab["flew"]                       # tiny's vocab has no "flew": fl ##ew instead
  cases["flew birds"] = ["fl", "##ew", "bird", "##s"]
  for text, words in cases.items():
    assert wp.encode(text) == [v["[CLS]"], *[v[w] for w in words], v["[SEP]"]], text
  assert wp.encode("a a a a", max_length=4) == [v["[CLS]"], v["a"], v["a"], v["[SEP]"]]


def test_bpe_tiny_hand_cases():
  tok = tiny.bpe()
  # " the": Ġ t h e -> (Ġ t) rank 0 -> (h e) rank 1 -> (Ġt he) rank 2 -> "Ġthe" (id 258);
  # " cat": Ġ c a t -> (a t) -> Ġ, c, at; digits one piece each; control tokens literal.
  assert tok.encode(" the cat") == [258, 32, 99, 259]
  assert tok.encode("<|im_start|>12 x<|im_end|>") == [260, 49, 50, 32, 120, 261]
  assert tok.pre_tokenize("it's 42 ok!!  x") == ["it", "'s", " ", "4", "2", " ok", "!!", " ",
                                                 " x"]
  text = "Hé said: the cat's 3 hats\n\n  at 10:30."
  assert tok.decode(tok.encode(text)) == text


@_needs("minilm")
def test_wordpiece_real_hand_cases():
  wp = tokenizers.WordPiece.from_file(fetch.path("minilm", "tokenizer.json"))
  with open(fetch.path("minilm", "tokenizer.json"), encoding="utf-8") as f:
    vocab = json.load(f)["model"]["vocab"]
  cases = {"Hello, world!": ["hello", ",", "world", "!"],
           "Café society, naïve résumé": ["cafe", "society", ",", "naive", "resume"],
           "The senators' re-election": ["the", "senators", "'", "re", "-", "election"]}
  for text, words in cases.items():
    assert wp.encode(text) == [101, *[vocab[w] for w in words], 102], text
  # A word absent from the vocabulary splits into a prefix and "##" pieces all in it.
  ids = wp.encode("unaffable")[1:-1]
  pieces = [k for i in ids for k, j in vocab.items() if j == i]
  assert len(ids) > 1 and pieces[0] + "".join(x[2:] for x in pieces[1:]) == "unaffable"


@_needs("smollm2", "lee")
def test_bpe_real_hand_cases():
  path = fetch.path("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
  meta = loaders.read_gguf_metadata(path)
  tok = tokenizers.ByteLevelBPE.from_gguf(meta)
  pieces = {"Hello world! 123": ["Hello", "Ġworld", "!", "Ġ", "1", "2", "3"],
            " the": ["Ġthe"], "<|im_start|>user\n": ["<|im_start|>", "user", "Ċ"]}
  for text, toks in pieces.items():
    assert tok.encode(text) == [tok.ids[t] for t in toks], text
  text = loaders.read_lee_background(fetch.path("lee", "lee_background.cor"))[:20000]
  assert tok.decode(tok.encode(text)) == text


def test_spearman_ties():
  from benchmarks import stats as eval_models
  np.testing.assert_array_equal(eval_models.rankdata(np.array([10., 20, 20, 30])),
                                [1, 2.5, 2.5, 4])
  # rho = 1 - 6 sum d^2 / (n (n^2 - 1)) = 1 - 12 / 60 without ties.
  assert eval_models.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8, abs=1e-12)


# ---------------------------------------------------------------------------- loaders and fetch

def test_safetensors_reader(tmp_path):
  a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
  b = np.array([1, -2], np.int64)
  header = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
            "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]},
            "__metadata__": {"format": "pt"}}
  raw = json.dumps(header).encode()
  p = tmp_path / "t.safetensors"
  p.write_bytes(len(raw).to_bytes(8, "little") + raw + a.tobytes() + b.tobytes())
  got = loaders.read_safetensors(str(p))
  assert set(got) == {"a", "b"}
  np.testing.assert_array_equal(got["a"], a)
  np.testing.assert_array_equal(got["b"], b)


def test_fetch_offline(tmp_path, monkeypatch):
  monkeypatch.setenv("FP8LAB_CACHE", str(tmp_path))
  with pytest.raises(fetch.MissingModelFiles, match="python -m fp8lab.models.fetch lee"):
    fetch.path("lee", "lee.cor")
  # A wheel already in the cache is extracted without pip: only the listed members.
  (tmp_path / "wheels").mkdir()
  with zipfile.ZipFile(tmp_path / "wheels" / "gensim-4.3.3-cp312-x.whl", "w") as zf:
    for member in fetch.SOURCES["lee"].members:
      zf.writestr(member, f"data of {member}")
    zf.writestr("gensim/other.py", "not extracted")
  out = fetch.fetch("lee")
  assert set(out) == set(fetch.SOURCES["lee"].members.values())
  assert open(fetch.path("lee", "lee.cor")).read() == "data of gensim/test/test_data/lee.cor"
  assert sorted(os.listdir(tmp_path / "lee")) == sorted(out)


# ---------------------------------------------------------------------------- tiny models

def test_bert_f32_matches_float64_reference():
  cfg = tiny.BERT
  p = bert.random_params(cfg, 1)
  wp = tiny.wordpiece()
  docs, _ = tiny.lee_like(3, 1)
  ids, mask = bert.pad_batch([wp.encode(d) for d in docs], pad_id=wp.pad_id)
  got = np.asarray(bert.encode(bert.quantize_params(p, common.F32), ids, mask, cfg=cfg))
  want = _bert64(p, ids, mask, cfg)
  # Unit vectors; float32 through 2 layers of width <= 128: a few hundred ulps at most.
  np.testing.assert_allclose(got, want, atol=2e-5)


def test_llama_f32_matches_float64_reference():
  cfg = tiny.LLAMA
  p = llama.random_params(cfg, 2)
  ids = np.random.default_rng(0).integers(0, cfg.vocab, size=(2, 12)).astype(np.int32)
  logits, _ = llama.prefill(llama.quantize_params(p, common.F32), jnp.asarray(ids), cfg=cfg,
                            kvf=common.KVFormat("f32"), capacity=64)
  want = _llama64(p, ids, cfg)
  err = np.max(np.abs(np.asarray(logits, np.float64) - want)) / np.max(np.abs(want))
  assert err < 1e-5, err


@jax.jit
def _dequantized(q):
  """The same pytree with every QuantizedArray replaced by its float32 values (rotated
  weights unrotated: the product the model computes with them); jitted, as eager golden
  dequantize dispatches op by op."""
  return jax.tree_util.tree_map(
      lambda a: a.dequantize(jnp.float32, unrotate=True) if isinstance(a, fp8lab.QuantizedArray)
      else a, q, is_leaf=lambda a: isinstance(a, fp8lab.QuantizedArray))


@pytest.mark.parametrize("wf", [
    common.WeightFormat("mxfp4", "mxfp4"),
    pytest.param(common.WeightFormat("e4m3", "e4m3"), marks=pytest.mark.slow),
    pytest.param(common.WeightFormat("nvfp4_2d", "nvfp4", (16, 16)), marks=pytest.mark.slow),
    pytest.param(common.WeightFormat("mxfp4+sr", "mxfp4", stochastic=True),
                 marks=pytest.mark.slow)], ids=lambda w: w.label)
def test_quantized_llama_equals_model_over_dequantized_weights(wf):
  """gemv_packed's reference and xla paths form x @ W^T from exactly the float32 values
  dequantize gives (IEEE products of codes and scales, no subnormals here) and one float32
  dot at HIGHEST precision, as the f32 path does over those values: the same logits."""
  cfg = tiny.LLAMA
  q = llama.quantize_params(llama.random_params(cfg, 3), wf, seed=5)
  ids = jnp.asarray(np.random.default_rng(1).integers(0, cfg.vocab, (1, 8)), jnp.int32)
  kvf = common.KVFormat("f32")
  want, _ = llama.prefill(_dequantized(q), ids, cfg=cfg, kvf=kvf, capacity=64)
  for impl in ("reference", "xla"):
    got, _ = llama.prefill(q, ids, cfg=cfg, kvf=kvf, capacity=64, implementation=impl)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=impl)


def test_hadamard_bert_within_rotation_bound():
  """A rotated weight multiplies the rotated x: W H^T H x equals W x up to the float32
  rounding of the two rotations (|err| <= ~2 log2(b) u |x| per element, b = 64) and of the
  dot. The encoder's unit embeddings then agree to ~1e-5, far below mxfp4's own error."""
  cfg = tiny.BERT
  p = bert.random_params(cfg, 4)
  wf = common.WeightFormat("mxfp4+had", "mxfp4", hadamard=64)
  q = bert.quantize_params(p, wf)
  wp = tiny.wordpiece()
  ids, mask = bert.pad_batch([wp.encode(d) for d in tiny.lee_like(2, 4)[0]], pad_id=0)
  got = np.asarray(bert.encode(q, ids, mask, cfg=cfg))
  want = np.asarray(bert.encode(_dequantized(q), ids, mask, cfg=cfg))
  np.testing.assert_allclose(got, want, atol=3e-5)
  plain = np.asarray(bert.encode(bert.quantize_params(p, common.F32), ids, mask, cfg=cfg))
  assert np.max(np.abs(got - plain)) > 10 * np.max(np.abs(got - want))   # mxfp4's error is real


@pytest.mark.parametrize("kv", ["mxfp8", pytest.param("f32", marks=pytest.mark.slow),
                                pytest.param("e4m3_block", marks=pytest.mark.slow)])
def test_decode_steps_equal_full_recompute(kv):
  """Prefill 6 tokens then 4 decode steps (each appending to the cache) give the logits
  of one prefill of all 10. Blockwise / MX KV scales are per token and head, so the cache
  holds the same codes either way; only float32 rounding differs (batch-1 vs batch-10 dots)."""
  cfg = tiny.LLAMA
  kvf = {k.label: k for k in common.kv_formats(cfg.head_dim)}[kv]
  q = llama.quantize_params(llama.random_params(cfg, 6), common.F32)
  ids = np.random.default_rng(2).integers(0, cfg.vocab, (2, 10)).astype(np.int32)
  full, _ = llama.prefill(q, jnp.asarray(ids), cfg=cfg, kvf=kvf, capacity=64)
  _, caches = llama.prefill(q, jnp.asarray(ids[:, :6]), cfg=cfg, kvf=kvf, capacity=64)
  scale = float(np.max(np.abs(np.asarray(full))))
  for i in range(6, 10):
    step, caches = llama.decode_step(q, caches, jnp.asarray(ids[:, i]),
                                     jnp.full((2,), i, jnp.int32), cfg=cfg, kvf=kvf,
                                     implementation="xla")
    err = np.max(np.abs(np.asarray(step) - np.asarray(full[:, i]))) / scale
    assert err < 1e-4, (i, err)


def test_generate_greedy_is_argmax_of_recompute():
  cfg = tiny.LLAMA
  q = llama.quantize_params(llama.random_params(cfg, 7), common.F32)
  kvf = common.KVFormat("f32")
  prompt = [5, 9, 200, 3]
  out, _, _, steps = llama.generate(q, prompt, 4, cfg=cfg, kvf=kvf)
  assert len(out) == 4 and steps == 2
  seq = list(prompt)
  for tok in out:
    logits = _llama64(q, np.asarray([seq]), cfg)[0, -1]
    assert tok == int(np.argmax(logits))
    seq.append(tok)


def test_greedy_batch_rows_are_argmax_of_recompute_and_stop_cuts():
  """greedy over two prompts (steps enqueued without syncs, tokens read in chunks of 2):
  each row's tokens are the argmax of a float64 recompute of its own sequence; generate
  with stop = its third token ends right after it."""
  cfg = tiny.LLAMA
  q = llama.quantize_params(llama.random_params(cfg, 8), common.F32)
  kvf = common.KVFormat("f32")
  ids = np.random.default_rng(4).integers(0, cfg.vocab, (2, 5)).astype(np.int32)
  toks, _, _, steps = llama.greedy(q, ids, 5, cfg=cfg, kvf=kvf, check_every=2)
  assert toks.shape == (2, 5) and steps == 3
  for row in range(2):
    seq = list(ids[row])
    for tok in toks[row]:
      assert tok == int(np.argmax(_llama64(q, np.asarray([seq]), cfg)[0, -1]))
      seq.append(int(tok))
  first = [int(v) for v in toks[0]]
  out, _, _, _ = llama.generate(q, list(ids[0]), 5, cfg=cfg, kvf=kvf, stop=first[2])
  assert out == first[:first.index(first[2]) + 1]


@pytest.mark.parametrize("wf", ["f32", "e4m3"])
def test_greedy_on_device_equals_the_host_loop(wf):
  """decode_loop (n - 1 steps in one fori_loop) chooses the tokens the host loop's
  decode_step calls choose, and each is the argmax of a float64 recompute."""
  cfg = tiny.LLAMA
  fmt = {w.label: w for w in common.weight_formats()}[wf]
  q = llama.quantize_params(llama.random_params(cfg, 9), fmt)
  kvf = {k.label: k for k in common.kv_formats(cfg.head_dim)}["e4m3_block"]
  ids = np.random.default_rng(5).integers(0, cfg.vocab, (2, 5)).astype(np.int32)
  want, _, _, _ = llama.greedy(q, ids, 6, cfg=cfg, kvf=kvf, decode_implementation="xla")
  got, _, t_dec, steps = llama.greedy_on_device(q, ids, 6, cfg=cfg, kvf=kvf,
                                                decode_implementation="xla")
  assert got.shape == (2, 6) and steps == 5 and t_dec > 0
  np.testing.assert_array_equal(got, want)
  if wf == "f32":
    for row in range(2):
      seq = list(ids[row])
      for tok in got[row]:
        assert tok == int(np.argmax(_llama64(q, np.asarray([seq]), cfg)[0, -1]))
        seq.append(int(tok))


def test_eval_models_main_tiny(tmp_path):
  # A subprocess, as ./dev bench runs it: its absl flags would collide with the other
  # benchmark scripts' that tests import in this process.
  out = tmp_path / "models.json"
  argv = ["--tiny", "--weight_formats=f32,mxfp4", "--smollm_weight_formats=f32",
          "--kv_formats=e4m3",
          "--lee_docs=5", "--ppl_window=16", "--ppl_windows=2", "--sample_tokens=2",
          "--notiming", "--decode_batches=2", "--decode_tokens=3",
          f"--out={out}"]
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=repo)
  proc = subprocess.run([sys.executable, os.path.join(repo, "benchmarks", "eval_models.py"),
                         *argv], capture_output=True, text=True, env=env, timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
  doc = json.loads(out.read_text())
  rows = doc["rows"]
  assert [(r["model"], r["format"], r.get("kv_format")) for r in rows] == [
      ("minilm", "f32", None), ("minilm", "mxfp4", None), ("smollm2", "f32", "f32"),
      ("smollm2", "f32", "e4m3")]
  assert rows[0]["mean_cos_to_f32"] == pytest.approx(1.0, abs=1e-6)
  assert 0.5 < rows[1]["mean_cos_to_f32"] < 1 - 1e-4
  assert rows[0]["pairs"] == 10 and rows[0]["linear_bytes"] == 4 * sum(
      math.prod(layer[n]["w"].shape) for layer in bert.random_params(tiny.BERT)["layers"]
      for n in bert.LINEARS)
  # mxfp4: 4 bits per weight + one byte per 32: 17/128 of float32's bytes.
  assert rows[1]["linear_bytes"] == rows[0]["linear_bytes"] * 17 // 128
  base = rows[2]
  assert base["ppl_ratio"] == 1.0 and base["tokens"] == 32 and 1 < base["ppl"] < 1e5
  assert isinstance(base["sample"], str) and "sample" not in rows[3]
  assert base["decode_b2_tokens_per_s"] > 0 and "decode_b2_tokens_per_s" not in rows[3]
  assert rows[3]["kv_cache_bytes"] < base["kv_cache_bytes"] / 3   # 1 byte vs 4 per value
  # The f32 row's perplexity from the float64 reference of the same model and tokens.
  tok = tiny.bpe()
  ids = np.asarray(tok.encode(tiny.background(0))[:33])
  logits = _llama64(llama.random_params(tiny.LLAMA, 0), np.stack([ids[:16], ids[16:32]]),
                    tiny.LLAMA)
  lp = logits - logits.max(-1, keepdims=True)
  lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
  tgt = np.stack([ids[1:17], ids[17:33]])
  want = np.exp(-np.take_along_axis(lp, tgt[..., None], -1).mean())
  assert base["ppl"] == pytest.approx(want, rel=1e-4)


# ---------------------------------------------------------------------------- real files

@_needs("minilm", "lee")
def test_minilm_real_f32_matches_float64_reference():
  cfg = bert.BertConfig.from_file(fetch.path("minilm", "config.json"))
  p = bert.load_params(loaders.read_safetensors(fetch.path("minilm", "model.safetensors")), cfg)
  wp = tokenizers.WordPiece.from_file(fetch.path("minilm", "tokenizer.json"))
  docs, _ = loaders.read_lee(fetch.path("lee", "lee.cor"), fetch.path("lee", "similarities0-1.txt"))
  ids, mask = bert.pad_batch([wp.encode(" ".join(d.split()[:40])) for d in docs[:2]])
  got = np.asarray(bert.encode(bert.quantize_params(p, common.F32), ids, mask, cfg=cfg))
  np.testing.assert_allclose(got, _bert64(p, ids, mask, cfg), atol=1e-5)


@pytest.mark.slow
@needs_gguf
@_needs("smollm2", "lee")
def test_smollm2_real_f32_matches_float64_reference():
  path = fetch.path("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
  meta, tensors = loaders.read_gguf(path)
  # The project's header reader against the gguf package's (slow: seconds of parsing).
  reader = loaders.gguf_reader(path)
  for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
              "llama.rope.freq_base", "llama.attention.head_count_kv", "llama.block_count"):
    assert reader.fields[key].contents() == meta[key], key
  cfg = llama.LlamaConfig.from_gguf(meta)
  p = llama.load_gguf_params(tensors, cfg)
  tok = tokenizers.ByteLevelBPE.from_gguf(meta)
  text = loaders.read_lee_background(fetch.path("lee", "lee_background.cor"))
  ids = np.asarray([tok.encode(text)[:33]], np.int32)
  logits, _ = llama.prefill(llama.quantize_params(p, common.F32), jnp.asarray(ids[:, :-1]),
                            cfg=cfg, kvf=common.KVFormat("f32"), capacity=64)
  want = _llama64(p, ids[:, :-1], cfg)
  err = np.max(np.abs(np.asarray(logits, np.float64) - want)) / np.max(np.abs(want))
  assert err < 1e-4, err
  # The RoPE pairing and the tokenizer are right only if the text is predictable: a
  # wrong pairing (HF's rotate-half on GGUF's permuted Q/K) gives perplexity in the 1000s.
  lp = want - want.max(-1, keepdims=True)
  lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
  ppl = np.exp(-np.take_along_axis(lp, ids[:, 1:, None], -1).mean())
  assert ppl < 100, ppl
