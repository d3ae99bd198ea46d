"""A BERT encoder (all-MiniLM-L6-v2) in JAX over fp8lab's quantized linear layers.

  h = LayerNorm(word[ids] + position[0..T) + token_type[0])
  per layer: q, k, v = linear(h); a = softmax(q k^T / sqrt(d) + mask) v over heads;
             h = LayerNorm(h + linear_o(a)); h = LayerNorm(h + linear_2(gelu(linear_1(h))))
  embedding = normalize(mean of h over the real (unmasked) tokens)

gelu is the exact erf form (hidden_act "gelu"); LayerNorm eps 1e-12. The 6 x 6 linear
weights go through fp8lab (models/common.py); embeddings, norms and biases stay float32.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from fp8lab.models import common

__all__ = ["BertConfig", "load_params", "quantize_params", "encode", "LINEARS", "random_params"]

LINEARS = ("attention.self.query", "attention.self.key", "attention.self.value",
           "attention.output.dense", "intermediate.dense", "output.dense")
_NORMS = ("attention.output.LayerNorm", "output.LayerNorm")


@dataclasses.dataclass(frozen=True)
class BertConfig:
  hidden: int = 384
  heads: int = 12
  layers: int = 6
  intermediate: int = 1536
  vocab: int = 30522
  max_positions: int = 512
  eps: float = 1e-12

  @classmethod
  def from_file(cls, path: str) -> "BertConfig":
    with open(path) as f:
      c = json.load(f)
    return cls(c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"],
               c["intermediate_size"], c["vocab_size"], c["max_position_embeddings"],
               c["layer_norm_eps"])


def load_params(tensors: dict[str, np.ndarray], cfg: BertConfig) -> dict:
  """Float32 parameters from the safetensors names of a HF BertModel."""
  t = {k.removeprefix("bert."): v for k, v in tensors.items()}
  p = {"word": t["embeddings.word_embeddings.weight"],
       "pos": t["embeddings.position_embeddings.weight"],
       "type": t["embeddings.token_type_embeddings.weight"],
       "ln_g": t["embeddings.LayerNorm.weight"], "ln_b": t["embeddings.LayerNorm.bias"],
       "layers": []}
  for i in range(cfg.layers):
    pre = f"encoder.layer.{i}."
    layer = {}
    for name in LINEARS:
      layer[name] = {"w": t[pre + name + ".weight"], "b": t[pre + name + ".bias"]}
    for name in _NORMS:
      layer[name] = {"g": t[pre + name + ".weight"], "b": t[pre + name + ".bias"]}
    p["layers"].append(layer)
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), p)


def random_params(cfg: BertConfig, seed: int = 0) -> dict:
  """A random model of cfg's shapes (for tests): weights ~ N(0, 1/k), norms ~ 1."""
  rng = np.random.default_rng(seed)
  h, f = cfg.hidden, cfg.intermediate
  shapes = {"attention.self.query": (h, h), "attention.self.key": (h, h),
            "attention.self.value": (h, h), "attention.output.dense": (h, h),
            "intermediate.dense": (f, h), "output.dense": (h, f)}
  p = {"word": rng.normal(size=(cfg.vocab, h)),
       "pos": 0.1 * rng.normal(size=(cfg.max_positions, h)),
       "type": 0.1 * rng.normal(size=(2, h)), "ln_g": 1 + 0.1 * rng.normal(size=h),
       "ln_b": 0.1 * rng.normal(size=h), "layers": []}
  for _ in range(cfg.layers):
    layer = {n: {"w": rng.normal(size=s) / np.sqrt(s[1]), "b": 0.1 * rng.normal(size=s[0])}
             for n, s in shapes.items()}
    for n in _NORMS:
      layer[n] = {"g": 1 + 0.1 * rng.normal(size=h), "b": 0.1 * rng.normal(size=h)}
    p["layers"].append(layer)
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), p)


def quantize_params(params: dict, wf: common.WeightFormat, seed: int = 0) -> dict:
  """params with every linear weight stored in format wf (a QuantizedArray, or float32)."""
  key = jax.random.key(seed)
  out = dict(params, layers=[])
  for i, layer in enumerate(params["layers"]):
    new = dict(layer)
    for j, name in enumerate(LINEARS):
      k = jax.random.fold_in(key, i * len(LINEARS) + j)
      new[name] = {"w": common.quantize_weight(layer[name]["w"], wf, k), "b": layer[name]["b"]}
    out["layers"].append(new)
  return jax.tree_util.tree_map(lambda a: a if isinstance(a, jax.Array) else jnp.asarray(a),
                                out)


def _layer_norm(x, g, b, eps):
  mu = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
  return (x - mu) * lax.rsqrt(var + eps) * g + b


@functools.partial(jax.jit, static_argnames=("cfg", "implementation"))
def encode(params, ids, mask, *, cfg: BertConfig, implementation: str | None = "xla"):
  """Sentence embeddings (B, hidden), unit norm, of token ids (B, T) int32 with mask (B, T)
  (1 for real tokens, 0 for padding)."""
  bsz, t = ids.shape
  d = cfg.hidden // cfg.heads
  lin = functools.partial(common.linear, implementation=implementation)
  h = params["word"][ids] + params["pos"][:t][None] + params["type"][0][None, None]
  h = _layer_norm(h, params["ln_g"], params["ln_b"], cfg.eps)
  neg = jnp.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(jnp.float32)
  for layer in params["layers"]:
    def heads(name):
      return lin(layer[name]["w"], h, layer[name]["b"]).reshape(bsz, t, cfg.heads, d)
    q, k, v = (heads(f"attention.self.{n}") for n in ("query", "key", "value"))
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=lax.Precision.HIGHEST) / np.sqrt(d)
    a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s + neg, axis=-1), v,
                   precision=lax.Precision.HIGHEST).reshape(bsz, t, cfg.hidden)
    o = lin(layer["attention.output.dense"]["w"], a, layer["attention.output.dense"]["b"])
    ln = layer["attention.output.LayerNorm"]
    h = _layer_norm(h + o, ln["g"], ln["b"], cfg.eps)
    f = jax.nn.gelu(lin(layer["intermediate.dense"]["w"], h, layer["intermediate.dense"]["b"]),
                    approximate=False)
    o = lin(layer["output.dense"]["w"], f, layer["output.dense"]["b"])
    ln = layer["output.LayerNorm"]
    h = _layer_norm(h + o, ln["g"], ln["b"], cfg.eps)
  m = mask.astype(jnp.float32)[..., None]
  pooled = jnp.sum(h * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1e-9)
  return pooled / jnp.maximum(jnp.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


def pad_batch(id_lists: list[list[int]], multiple: int = 32, pad_id: int = 0):
  """(ids, mask) int32 arrays (B, T), T the longest list rounded up to `multiple`."""
  t = max(len(x) for x in id_lists)
  t = -(-t // multiple) * multiple
  ids = np.full((len(id_lists), t), pad_id, np.int32)
  mask = np.zeros((len(id_lists), t), np.int32)
  for i, x in enumerate(id_lists):
    ids[i, :len(x)] = x
    mask[i, :len(x)] = 1
  return ids, mask
