"""Tiny stand-ins of both models and their data, built from a seed (tests, eval --tiny).

No files: a WordPiece vocabulary of a few made-up words, a byte-level BPE with the 256 byte
tokens, a few merges and two control tokens, random weights of small shapes that the fp8lab
ops take (head dimension 64: fp8lab.attention's smallest), random documents and ratings.
"""

from __future__ import annotations

import numpy as np

from fp8lab.models import bert, llama, tokenizers

__all__ = ["BERT", "LLAMA", "wordpiece", "bpe", "lee_like", "background"]

BERT = bert.BertConfig(hidden=64, heads=2, layers=2, intermediate=128, vocab=64,
                       max_positions=64)
LLAMA = llama.LlamaConfig(hidden=128, heads=2, kv_heads=1, layers=1, intermediate=256,
                          vocab=262, rope_base=10000.0)
_WORDS = ("the", "cat", "dog", "sat", "on", "mat", "ran", "far", "and", "a", "bird", "flew")


def wordpiece() -> tokenizers.WordPiece:
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", ".", ",", *_WORDS, "##s", "##ed", "fl", "##ew"]
  vocab += [f"[unused{i}]" for i in range(BERT.vocab - len(vocab))]
  return tokenizers.WordPiece({w: i for i, w in enumerate(vocab)})


def bpe() -> tokenizers.ByteLevelBPE:
  m = tokenizers.bytes_to_unicode()
  tokens = [m[b] for b in range(256)]
  merges = ["Ġ t", "h e", "Ġt he", "a t"]
  tokens += ["Ġt", "he", "Ġthe", "at", "<|im_start|>", "<|im_end|>"]
  return tokenizers.ByteLevelBPE(tokens, merges, ["<|im_start|>", "<|im_end|>"])


def lee_like(n_docs: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
  rng = np.random.default_rng(seed)
  docs = [" ".join(rng.choice(_WORDS, size=int(rng.integers(5, 20)))) + "." for _ in range(n_docs)]
  sims = np.triu(rng.uniform(0, 1, size=(n_docs, n_docs)), 1) + np.eye(n_docs)
  return docs, sims


def background(seed: int = 0) -> str:
  rng = np.random.default_rng(seed + 1)
  return " ".join(rng.choice(_WORDS, size=400)) + "."
