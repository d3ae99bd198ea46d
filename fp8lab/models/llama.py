"""A llama decoder (SmolLM2-135M-Instruct) in JAX over fp8lab's quantized weights and KV cache.

  h = embed[ids]
  per layer: x = rmsnorm(h) g1; q, k, v = linear(x); RoPE on q, k; the layer's cache takes
             k, v (fp8lab.kv_cache_update); a = fp8lab.attention(q, cache, causal);
             h += linear_o(a); x = rmsnorm(h) g2; h += linear_down(silu(linear_gate(x)) *
             linear_up(x))
  logits = linear_head(rmsnorm(h) g)                (SmolLM2 ties the head to the embedding)

GQA: query head i reads KV head i // (Hq / Hkv) (fp8lab.attention's rule). RoPE rotates
ADJACENT pairs (2i, 2i + 1) by position * base^(-2i / D): llama.cpp's convention, for which its
converter permuted the Q and K weights of the HF checkpoint, so the GGUF weights are used as
stored. The KV cache is fp8lab.kv_cache_update / fp8lab.attention over a QuantizedArray, or
over plain float32 / bfloat16 arrays (models/common.py KVFormat); per-tensor KV formats
(e4m3, e5m2, nvfp4) take their scale from the prompt's amax per layer with 2x headroom.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

import fp8lab
from fp8lab.formats import get_quantized_format
from fp8lab.models import common

__all__ = ["LlamaConfig", "load_gguf_params", "random_params", "quantize_params", "prefill",
           "decode_step", "decode_loop", "greedy", "greedy_on_device", "generate", "LINEARS",
           "init_cache"]

LINEARS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  hidden: int = 576
  heads: int = 9
  kv_heads: int = 3
  layers: int = 30
  intermediate: int = 1536
  vocab: int = 49152
  rope_base: float = 100000.0
  eps: float = 1e-5

  @property
  def head_dim(self) -> int:
    return self.hidden // self.heads

  @classmethod
  def from_gguf(cls, meta: dict) -> "LlamaConfig":
    """From a GGUF file's metadata (loaders.read_gguf_metadata) of architecture llama."""
    if meta.get("general.architecture") != "llama":
      raise ValueError(f"not a llama GGUF: {meta.get('general.architecture')!r}")
    return cls(int(meta["llama.embedding_length"]), int(meta["llama.attention.head_count"]),
               int(meta["llama.attention.head_count_kv"]), int(meta["llama.block_count"]),
               int(meta["llama.feed_forward_length"]), int(meta["llama.vocab_size"]),
               float(meta["llama.rope.freq_base"]),
               float(meta["llama.attention.layer_norm_rms_epsilon"]))


def load_gguf_params(tensors: dict[str, np.ndarray], cfg: LlamaConfig) -> dict:
  """Float32 parameters from a GGUF's (dequantized) tensors; the head is output.weight, or
  the token embedding when the model ties them (SmolLM2)."""
  p = {"embed": tensors["token_embd.weight"], "norm": tensors["output_norm.weight"],
       "head": tensors.get("output.weight", tensors["token_embd.weight"]), "layers": []}
  for i in range(cfg.layers):
    pre = f"blk.{i}."
    layer = {n: tensors[pre + n + ".weight"] for n in LINEARS}
    layer["attn_norm"] = tensors[pre + "attn_norm.weight"]
    layer["ffn_norm"] = tensors[pre + "ffn_norm.weight"]
    p["layers"].append(layer)
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), p)


def linear_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, int]]:
  h, kv, f = cfg.hidden, cfg.kv_heads * cfg.head_dim, cfg.intermediate
  return {"attn_q": (h, h), "attn_k": (kv, h), "attn_v": (kv, h), "attn_output": (h, h),
          "ffn_gate": (f, h), "ffn_up": (f, h), "ffn_down": (h, f)}


def random_params(cfg: LlamaConfig, seed: int = 0) -> dict:
  """A random model of cfg's shapes (for tests and the tiny eval): N(0, 1/k) weights."""
  rng = np.random.default_rng(seed)
  p = {"embed": rng.normal(size=(cfg.vocab, cfg.hidden)),
       "norm": 1 + 0.1 * rng.normal(size=cfg.hidden), "layers": []}
  p["head"] = rng.normal(size=(cfg.vocab, cfg.hidden)) / np.sqrt(cfg.hidden)
  for _ in range(cfg.layers):
    layer = {n: rng.normal(size=s) / np.sqrt(s[1]) for n, s in linear_shapes(cfg).items()}
    layer["attn_norm"] = 1 + 0.1 * rng.normal(size=cfg.hidden)
    layer["ffn_norm"] = 1 + 0.1 * rng.normal(size=cfg.hidden)
    p["layers"].append(layer)
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), p)


def quantize_params(params: dict, wf: common.WeightFormat, seed: int = 0) -> dict:
  """Every linear weight (the head included) in format wf; embedding and norms float32."""
  key = jax.random.key(seed)
  out = {"embed": jnp.asarray(params["embed"]), "norm": jnp.asarray(params["norm"]),
         "head": common.quantize_weight(params["head"], wf, jax.random.fold_in(key, 10**6)),
         "layers": []}
  for i, layer in enumerate(params["layers"]):
    new = {n: jnp.asarray(layer[n]) for n in ("attn_norm", "ffn_norm")}
    for j, n in enumerate(LINEARS):
      new[n] = common.quantize_weight(layer[n], wf, jax.random.fold_in(key, i * 16 + j))
    out["layers"].append(new)
  return out


def _rms_norm(x, g, eps):
  return x * lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps) * g


def _rope(x, positions, base: float):
  """x (B, T, H, D) rotated on adjacent pairs; positions (B, T) int32."""
  d = x.shape[-1]
  inv = jnp.asarray(base ** (-np.arange(0, d, 2, dtype=np.float64) / d), jnp.float32)
  ang = positions.astype(jnp.float32)[..., None] * inv                 # (B, T, D/2)
  cos, sin = jnp.cos(ang)[:, :, None, :], jnp.sin(ang)[:, :, None, :]
  x0, x1 = x[..., 0::2], x[..., 1::2]
  return jnp.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1).reshape(x.shape)


def _kv_scale(kvf: common.KVFormat, x):
  """The quantization factor of a per-tensor KV format from x's amax (2x headroom); None
  for formats whose scales are per block."""
  qf = get_quantized_format(kvf.fmt)
  if qf.scaling == "tensor":
    return fp8lab.current_scale(fp8lab.tensor_amax(x), qf.element.name, 1)
  if qf.scaling == "nvfp4":             # S_enc = (6 * 448) / amax, halved for headroom
    amax = jnp.maximum(fp8lab.tensor_amax(x), jnp.float32(1e-30))
    return jnp.float32(qf.element.max_finite * qf.scale_format.max_finite / 2) / amax
  return None


def init_cache(kvf: common.KVFormat, shape, scale=None):
  """An empty cache (B, S, Hkv, D) of format kvf (scale: a per-tensor format's factor)."""
  if kvf.fmt is None:
    return jnp.zeros(shape, kvf.dtype)
  return fp8lab.quantize(jnp.zeros(shape, jnp.float32), kvf.fmt, block_shape=kvf.block_shape,
                         scale=scale)


def _forward(params, ids, caches, start, *, cfg: LlamaConfig, kvf: common.KVFormat,
             capacity: int | None, implementation):
  """Logits (B, T, V) of ids (B, T) at positions start + t, and the caches with their k, v.
  caches None: a prefill that makes the caches, `capacity` positions each."""
  bsz, t = ids.shape
  d, hkv = cfg.head_dim, cfg.kv_heads
  lin = functools.partial(common.linear, implementation=implementation)
  positions = start[:, None] + jnp.arange(t, dtype=jnp.int32)[None]
  h = params["embed"][ids]
  new_caches = []
  for i, layer in enumerate(params["layers"]):
    x = _rms_norm(h, layer["attn_norm"], cfg.eps)
    q = _rope(lin(layer["attn_q"], x).reshape(bsz, t, cfg.heads, d), positions, cfg.rope_base)
    k = _rope(lin(layer["attn_k"], x).reshape(bsz, t, hkv, d), positions, cfg.rope_base)
    v = lin(layer["attn_v"], x).reshape(bsz, t, hkv, d)
    if caches is None:
      shape = (bsz, capacity, hkv, d)
      kc = init_cache(kvf, shape, _kv_scale(kvf, k) if kvf.fmt else None)
      vc = init_cache(kvf, shape, _kv_scale(kvf, v) if kvf.fmt else None)
    else:
      kc, vc = caches[i]
    kc = fp8lab.kv_cache_update(kc, k, start)
    vc = fp8lab.kv_cache_update(vc, v, start)
    new_caches.append((kc, vc))
    a = fp8lab.attention(q, kc, vc, kv_lengths=start + t, causal=True, q_positions=positions)
    h = h + lin(layer["attn_output"], a.reshape(bsz, t, cfg.hidden))
    x = _rms_norm(h, layer["ffn_norm"], cfg.eps)
    g = lin(layer["ffn_gate"], x)
    u = lin(layer["ffn_up"], x)
    h = h + lin(layer["ffn_down"], jax.nn.silu(g) * u)
  logits = lin(params["head"], _rms_norm(h, params["norm"], cfg.eps))
  return logits, new_caches


@functools.partial(jax.jit, static_argnames=("cfg", "kvf", "capacity", "implementation"))
def prefill(params, ids, *, cfg: LlamaConfig, kvf: common.KVFormat, capacity: int,
            implementation: str | None = "xla"):
  """(logits (B, T, V), caches): the prompt ids (B, T) at positions 0..T-1 into new caches
  of `capacity` positions."""
  start = jnp.zeros((ids.shape[0],), jnp.int32)
  return _forward(params, ids, None, start, cfg=cfg, kvf=kvf, capacity=capacity,
                  implementation=implementation)


@functools.partial(jax.jit, static_argnames=("cfg", "kvf", "implementation"),
                   donate_argnames=("caches",))
def decode_step(params, caches, tokens, pos, *, cfg: LlamaConfig, kvf: common.KVFormat,
                implementation: str | None = None):
  """(logits (B, V), caches): tokens (B,) at positions pos (B,), appended to the caches
  (donated: written in place)."""
  logits, caches = _forward(params, tokens[:, None], caches, pos, cfg=cfg, kvf=kvf,
                            capacity=None, implementation=implementation)
  return logits[:, 0], caches


def _first_token(params, ids, n: int, cfg: LlamaConfig, kvf: common.KVFormat,
                 implementation):
  """The prompts' prefill into caches with room for n more tokens (a multiple of 64), its
  greedy token (B,) and the seconds until that token was ready (compile included)."""
  t0 = time.perf_counter()
  capacity = -(-(ids.shape[1] + n) // 64) * 64
  logits, caches = prefill(params, ids, cfg=cfg, kvf=kvf, capacity=capacity,
                           implementation=implementation)
  tok = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)
  tok.block_until_ready()
  return tok, caches, time.perf_counter() - t0


@functools.partial(jax.jit, static_argnames=("n", "cfg", "kvf", "implementation"),
                   donate_argnames=("caches",))
def decode_loop(params, caches, tok, start, *, n: int, cfg: LlamaConfig,
                kvf: common.KVFormat, implementation: str | None = None):
  """(tokens (B, n) int32, caches): n greedy decode steps in one call (a fori_loop on the
  device: no host between steps), the first taking tok (B,) at positions start (B,), each
  appending to the caches (donated) and choosing the next token by argmax."""
  def body(i, carry):
    caches, tok, out = carry
    logits, caches = _forward(params, tok[:, None], caches, start + i, cfg=cfg, kvf=kvf,
                              capacity=None, implementation=implementation)
    nxt = jnp.argmax(logits[:, 0], axis=-1).astype(jnp.int32)
    return caches, nxt, lax.dynamic_update_slice_in_dim(out, nxt[:, None], i, axis=1)
  out = jnp.zeros((tok.shape[0], n), jnp.int32)
  caches, _, out = lax.fori_loop(0, n, body, (caches, tok, out))
  return out, caches


def greedy_on_device(params, ids, n: int, *, cfg: LlamaConfig, kvf: common.KVFormat,
                     prefill_implementation: str | None = "xla",
                     decode_implementation: str | None = None):
  """Greedy generation of n tokens after the prompts ids (B, T) int32 as `greedy` without a
  stop token: the prefill picks the first token, then decode_loop the other n - 1 in one
  call, compiled ahead (so the timed call holds the steps alone and one dispatch).

  Returns (tokens (B, n) numpy int32; seconds of the prefill and first token, compile
  included; seconds of the timed decode call; its steps, n - 1)."""
  ids = jnp.asarray(ids, jnp.int32)
  bsz, t = ids.shape
  tok, caches, t_prefill = _first_token(params, ids, n, cfg, kvf, prefill_implementation)
  if n == 1:
    return np.asarray(tok)[:, None], t_prefill, 0.0, 0
  start = jnp.full((bsz,), t, jnp.int32)
  compiled = decode_loop.lower(params, caches, tok, start, n=n - 1, cfg=cfg, kvf=kvf,
                               implementation=decode_implementation).compile()
  t1 = time.perf_counter()
  rest, _ = compiled(params, caches, tok, start)
  rest = np.asarray(rest)                      # waits for the last step
  t_decode = time.perf_counter() - t1
  return np.concatenate([np.asarray(tok)[:, None], rest], axis=1), t_prefill, t_decode, n - 1


def greedy(params, ids, n: int, *, cfg: LlamaConfig, kvf: common.KVFormat,
           prefill_implementation: str | None = "xla",
           decode_implementation: str | None = None, stop: int | None = None,
           check_every: int = 8):
  """Greedy generation of n tokens after the prompts ids (B, T) int32 (one length for all
  rows). The decode steps are enqueued without waiting for their tokens: each step takes
  the device array of tokens the step before chose, so the host never stands between two
  steps; every `check_every` steps it reads the tokens so far to stop once every row has
  produced `stop` (the steps already enqueued then still run and count as timed steps).

  Returns (tokens (B, m) numpy int32 with m <= n, cut after the chunk where every row had
  stopped; seconds of the prefill and first token, compile included; seconds of the timed
  steps: every step after the first, whose time holds the decode step's compile; their
  count)."""
  ids = jnp.asarray(ids, jnp.int32)
  bsz, t = ids.shape
  tok, caches, t_prefill = _first_token(params, ids, n, cfg, kvf, prefill_implementation)
  out, pending = [np.asarray(tok)], []
  stopped = out[0] == stop
  t_first, steps = None, 0
  for i in range(n - 1):
    if stop is not None and stopped.all():
      break
    pos = jnp.full((bsz,), t + i, jnp.int32)
    logits, caches = decode_step(params, caches, tok, pos, cfg=cfg, kvf=kvf,
                                 implementation=decode_implementation)
    tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    if t_first is None:
      tok.block_until_ready()
      t_first = time.perf_counter()            # after the first step: compile excluded
    else:
      steps += 1
    pending.append(tok)
    if len(pending) == check_every or i == n - 2:   # the last step always reads its chunk
      got = [np.asarray(v) for v in jax.device_get(pending)]
      pending = []
      out.extend(got)
      if stop is not None:
        stopped |= np.any(np.stack(got) == stop, axis=0)
  t_decode = (time.perf_counter() - t_first) if t_first is not None else 0.0
  return np.stack(out, axis=1), t_prefill, t_decode, steps


def generate(params, prompt: list[int], n: int, *, cfg: LlamaConfig, kvf: common.KVFormat,
             prefill_implementation: str | None = "xla",
             decode_implementation: str | None = None, stop: int | None = None):
  """Greedy generation of up to n tokens after `prompt` (batch 1, through `greedy`),
  cut after the first `stop`; returns (tokens, seconds of the prefill (compile included),
  seconds of the timed decode steps, their count: see greedy)."""
  toks, t_prefill, t_decode, steps = greedy(
      params, [prompt], n, cfg=cfg, kvf=kvf, prefill_implementation=prefill_implementation,
      decode_implementation=decode_implementation, stop=stop)
  out = [int(v) for v in toks[0]]
  if stop is not None and stop in out:
    out = out[:out.index(stop) + 1]
  return out, t_prefill, t_decode, steps


def nll(logits, targets):
  """Per-token negative log-likelihood (B, T) of targets (B, T) int32 under logits."""
  lp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return -jnp.take_along_axis(lp, targets[..., None], axis=-1)[..., 0]
